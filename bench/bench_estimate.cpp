// Analytic estimates per second: the sweep of issue 7 screens large grids with the analytic model, so
// one estimate must cost well under a microsecond (goal: >= 1e6 per second on one core).
//
//   build/bench/moesim_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// items_per_second in the output is estimates per second.

#include <benchmark/benchmark.h>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/sim/placement.hpp"

namespace {

using namespace moesim;

/// The paper's DBRX / Mac Studio / 10 GbE configuration, with the model's costs summed once (as a
/// sweep does per model). The profiles live as long as the benchmark.
struct Paper {
  model::Architecture arch = model::load_model("dbrx-instruct");
  model::NodeProfile node = model::load_node("mac-studio-m2-ultra-192");
  model::NicProfile nic = model::load_nic("10gbe-grpc");
  model::ModelCosts costs = model::model_costs(arch, model::precision("bf16"));
  [[nodiscard]] model::DecodeScenario scenario() const {
    model::DecodeScenario s;
    s.arch = &arch;
    s.costs = &costs;
    s.node = &node;
    s.nic = &nic;
    s.weights = &model::precision("bf16");
    return s;
  }
};

/// One call of Equation 1 for 2 nodes (E[active] given).
void BM_EstimateDecode(benchmark::State& state) {
  const Paper paper;
  auto s = paper.scenario();
  s.expected_active_experts = 2.646;
  s.max_experts_per_node = 8;
  for (auto _ : state) {
    s.nodes = 2 + (state.iterations() & 1);  // keep the optimiser from hoisting the call
    benchmark::DoNotOptimize(model::estimate_decode(s));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EstimateDecode);

/// An estimate including its placement's exact E[active] (what `estimate` does per grid point).
void BM_EstimateWithPlacement(benchmark::State& state) {
  const Paper paper;
  auto s = paper.scenario();
  std::int64_t n = 2;
  for (auto _ : state) {
    n = n == 8 ? 2 : n + 1;
    const auto p = sim::make_placement("replicated-groups", paper.arch.routed_experts, n);
    s.nodes = n;
    s.expected_active_experts = sim::expected_max_active_experts(p, paper.arch.top_k);
    s.max_experts_per_node = p.max_experts_per_node();
    benchmark::DoNotOptimize(model::estimate_decode(s));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EstimateWithPlacement);

/// Exact E[active] for a large placement: Qwen3.5 (512 experts, top-10) on 16 nodes.
void BM_ExpectedActiveLarge(benchmark::State& state) {
  const auto p = sim::make_placement("contiguous", 512, 16);
  for (auto _ : state) benchmark::DoNotOptimize(sim::expected_max_active_experts(p, 10));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExpectedActiveLarge);

}  // namespace

BENCHMARK_MAIN();
