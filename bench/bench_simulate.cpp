// The simulator's speed (issues 3 and 19): simulated events per second, and the wall time to replay
// 100,000 tokens of DBRX on 4 Mac Studios with P-L_R-D (contention and residency on, the 10 GbE gRPC
// profile). Goals (issue 19): at least 15 million events per second, and that replay in at most 1.5 s on
// one core.
//
//   build/bench/moesim_bench --benchmark_filter=Simulate --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one line)
//
// Timings on a shared machine move with its load; a change is measured against the code before it in
// the same run, alternating the two builds (medians of 5 each, their ratio and events/s):
//
//   scripts/bench-compare.sh BASE_REV [FILTER]    (default filter: SimulateDbrx100kTokensPLRD/4)
//
// Counters: events_per_second (scheduler events), messages_per_second, and tokens_per_second of replay;
// the reported time per iteration is the replay's wall time (the trace is generated once, outside).

#include <benchmark/benchmark.h>

#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_gen.hpp"

namespace {

using namespace moesim;

struct Cluster {
  model::Architecture arch = model::load_model("dbrx-instruct");
  model::NodeProfile node = model::load_node("mac-studio-m2-ultra-192");
  model::NicProfile nic = model::load_nic("10gbe-grpc");
  sim::RoutingTrace trace;
  explicit Cluster(std::int64_t tokens) {
    sim::TraceGenOptions o = sim::gen_options_for(arch, tokens);
    o.weights = false;
    trace = sim::generate_trace(o);
  }
};

void replay(benchmark::State& state, const char* strategy) {
  static const Cluster cluster(100000);
  const auto nodes = static_cast<std::int32_t>(state.range(0));
  const auto placement = sim::make_placement("replicated-groups", 16, nodes);
  const auto& s = sim::strategy_by_name(strategy);
  sim::DecodeConfig c;
  c.arch = &cluster.arch;
  c.weights = &model::precision("bf16");
  c.node = &cluster.node;
  c.nic = &cluster.nic;
  c.placement = &placement;
  c.nodes = nodes;
  c.attention = s.attention;
  c.balancing = s.balancing;
  c.packing = s.packing;
  double events = 0, messages = 0, tokens = 0;
  for (auto _ : state) {
    const auto r = sim::run_decode(c, cluster.trace);
    events += static_cast<double>(r.events);
    messages += static_cast<double>(r.messages);
    tokens += static_cast<double>(r.tokens);
    benchmark::DoNotOptimize(r.tokens_per_second);
  }
  state.counters["events_per_second"] = benchmark::Counter(events, benchmark::Counter::kIsRate);
  state.counters["messages_per_second"] = benchmark::Counter(messages, benchmark::Counter::kIsRate);
  state.counters["tokens_per_second"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
}

void BM_SimulateDbrx100kTokensPLRD(benchmark::State& state) { replay(state, "P-LR-D"); }
BENCHMARK(BM_SimulateDbrx100kTokensPLRD)->Arg(4)->Arg(2)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SimulateDbrx100kTokensNaive(benchmark::State& state) { replay(state, "naive"); }
BENCHMARK(BM_SimulateDbrx100kTokensNaive)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
