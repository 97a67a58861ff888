// The serving simulator's speed (issue 6): simulated requests per second of wall time for a
// continuous-batching scenario, Mixtral-8x7B on one 8xH100 server (TP 8), 10,000 Poisson requests of
// 64-1024 prompt and 16-256 output tokens (examples/serve-mixtral-bench.json). Goal: at least 100,000
// requests per second on one core (Vidur, the best-known LLM-serving simulator, reports about 1,000).
// BM_ServeQwen3_235bContinuous runs the same load on a 128-expert model, BM_ServeQwen3_235bExpertParallel
// with its experts spread over the devices.
//
//   build/bench/moesim_bench --benchmark_filter=Serve --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
//
// The routing trace and the request list are made once, outside the timed loop; each iteration runs
// sim::run_serving (scheduler, cost model, metrics). Counter: requests_per_second.

#include <benchmark/benchmark.h>

#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/sim/serving.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/workload.hpp"

namespace {

using namespace moesim;

/// `requests_per_run` Poisson requests at 20/s, 64-1024 prompt and 16-256 output tokens, continuous
/// batching (256 sequences, 8192 tokens a step), `arch` at bf16 on `node` over all its devices (TP), routed
/// by `trace`; counts the simulated requests per second of wall time.
void serve_continuous(benchmark::State& state, const model::Architecture& arch, const model::NodeProfile& node,
                      const sim::RoutingTrace& trace, std::int64_t requests_per_run, std::int64_t moe_ep = 0) {
  const model::NicProfile nvlink = model::load_nic(*node.intra_node_link);
  sim::ServingConfig c;
  c.arch = &arch;
  c.weights = &model::precision("bf16");
  c.node = &node;
  c.intra_link = &nvlink;
  c.trace = &trace;
  sim::ParallelPlan plan;
  plan.tp = node.devices.count;
  if (moe_ep > 0) {
    plan.moe_ep = moe_ep;
    plan.moe_tp = plan.tp / moe_ep;
  }
  c.plan = sim::resolve_plan(plan, arch, node, "bench");
  c.scheduler.kind = sim::SchedulerKind::Continuous;
  c.scheduler.max_num_seqs = 256;
  c.scheduler.max_num_batched_tokens = 8192;
  c.workload.arrival = sim::ArrivalKind::Poisson;
  c.workload.rate = 20.0;
  c.workload.requests = requests_per_run;
  c.workload.prompt = {sim::LengthKind::Uniform, 0, 64, 1024, 0, 0};
  c.workload.output = {sim::LengthKind::Uniform, 0, 16, 256, 0, 0};
  c.requests = sim::open_loop_requests(c.workload);
  std::int64_t requests = 0;
  for (auto _ : state) {
    const sim::ServingResult r = sim::run_serving(c);
    requests += static_cast<std::int64_t>(r.requests.size());
    benchmark::DoNotOptimize(r.ttft.mean);
  }
  state.counters["requests_per_second"] =
      benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kIsRate);
}

/// A 16,384-token uniform routing trace of `arch`, without gate weights.
sim::RoutingTrace bench_trace(const model::Architecture& arch) {
  sim::TraceGenOptions o = sim::gen_options_for(arch, 16384, 1);
  o.weights = false;
  return sim::generate_trace(o);
}

void BM_ServeMixtralContinuous(benchmark::State& state) {
  static const model::Architecture arch = model::load_model("mixtral-8x7b");
  // The example's hardware and runtime: the DGX with cuda-eager's 5 us per kernel.
  static const model::NodeProfile node = [] {
    const model::NodeProfile bare = model::load_node("dgx-h100");
    return model::apply_runtime(bare, model::find_runtime("cuda-eager", bare));
  }();
  static const sim::RoutingTrace trace = bench_trace(arch);
  serve_continuous(state, arch, node, trace, 10000);
}
BENCHMARK(BM_ServeMixtralContinuous)->Unit(benchmark::kMillisecond);

// The same load on a model of more than 64 experts a layer, whose distinct experts per step the cost
// model counts in multi-word bit masks: Qwen3-235B-A22B (128 experts, top-8, 94 layers) on an 8xH200
// server. 2,000 requests a run.
void BM_ServeQwen3_235bContinuous(benchmark::State& state) {
  static const model::Architecture arch = model::load_model("qwen3-235b-a22b");
  static const model::NodeProfile node = model::load_node("dgx-h200");
  static const sim::RoutingTrace trace = bench_trace(arch);
  serve_continuous(state, arch, node, trace, 2000);
}
BENCHMARK(BM_ServeQwen3_235bContinuous)->Unit(benchmark::kMillisecond);

// The same with the experts spread over the 8 devices (EP 8): the cost model counts each step's tokens
// per expert, for the busiest device, where the run above needs only the distinct experts.
void BM_ServeQwen3_235bExpertParallel(benchmark::State& state) {
  static const model::Architecture arch = model::load_model("qwen3-235b-a22b");
  static const model::NodeProfile node = model::load_node("dgx-h200");
  static const sim::RoutingTrace trace = bench_trace(arch);
  serve_continuous(state, arch, node, trace, 2000, 8);
}
BENCHMARK(BM_ServeQwen3_235bExpertParallel)->Unit(benchmark::kMillisecond);

}  // namespace
