// `moesim sweep`'s speed (reports/sweep.hpp): grid points per second of wall time.
//
//   build/bench/moesim_bench --benchmark_filter=Sweep --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true
//
// BM_AnalyticSweep10k: the analytic screen alone (simulate.points 0) over 9,760 points, one thread:
// 5 MoE models x the 8 built-in node profiles x 1-11 nodes x the 6 built-in NIC profiles (one node
// collapses the NIC axis: 1 + 10 x 6 = 61 node/NIC pairs) x 4 precisions (bf16, fp8, int8, q4). Points the
// model refuses (a precision a device lacks, ...) count: the screen decided them too.
//
// BM_SimulateSweepDbrx100: DBRX single-user decode on 2-5 Mac Studio M2 Ultra nodes x 3 NICs x the three
// seed 000 strategies x 3 placements = 108 points, the best 100 (analytic tokens/s per USD) simulated for
// 500 tokens each, on all cores (threads 0).
//
// Counters: points_per_second (all grid points) and, for the simulated sweep, simulated_per_second.

#include <benchmark/benchmark.h>

#include "moesim/reports/sweep.hpp"

namespace {

using namespace moesim;

reports::Grid analytic_grid() {
  reports::Grid g;
  g.origin = "built-in bench grid (analytic)";
  g.models = {"dbrx-instruct", "mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b"};
  g.hw = {"a100-80g",
          "dgx-h100",
          "h100-sxm",
          "h200",
          "l4",
          "mac-studio-m2-ultra-192",
          "mac-studio-m3-ultra-512",
          "macbook-pro-m3-max-48"};
  for (std::int64_t n = 1; n <= 11; ++n) g.nodes.push_back(n);
  g.nics = {"10gbe-grpc", "10gbe-tcp", "ib-200g", "ib-ndr-400", "nvlink4", "rocev2-25g"};
  g.precisions = {"bf16", "fp8", "int8", "q4"};
  g.placements = {"replicated-groups"};
  g.strategies = {"P-LR-D"};
  g.costs.usd_per_kwh = 0.13;
  g.simulate_points = 0;
  return g;
}

void BM_AnalyticSweep10k(benchmark::State& state) {
  const reports::Grid g = analytic_grid();
  reports::SweepOptions o;
  o.threads = 1;
  std::int64_t points = 0;
  for (auto _ : state) {
    const reports::SweepResult r = reports::run_sweep(g, o);
    points += static_cast<std::int64_t>(r.points.size());
    benchmark::DoNotOptimize(r.answers.best_per_usd);
  }
  state.SetItemsProcessed(points);
  state.counters["points_per_second"] = benchmark::Counter(static_cast<double>(points), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AnalyticSweep10k)->Unit(benchmark::kMillisecond)->UseRealTime();

reports::Grid dbrx_grid() {
  reports::Grid g;
  g.origin = "built-in bench grid (DBRX decode)";
  g.models = {"dbrx-instruct"};
  g.hw = {"mac-studio-m2-ultra-192"};
  g.nodes = {2, 3, 4, 5};
  g.nics = {"10gbe-grpc", "rocev2-25g", "ib-200g"};
  g.precisions = {"bf16"};
  g.placements = {"replicated-groups", "contiguous", "round-robin"};
  g.strategies = {"naive", "P-LB", "P-LR-D"};
  g.costs.usd_per_kwh = 0.13;
  g.simulate_points = 100;
  g.simulate_tokens = 500;
  return g;
}

void BM_SimulateSweepDbrx100(benchmark::State& state) {
  const reports::Grid g = dbrx_grid();
  reports::SweepOptions o;  // threads 0: all cores
  std::int64_t points = 0, simulated = 0;
  for (auto _ : state) {
    const reports::SweepResult r = reports::run_sweep(g, o);
    points += static_cast<std::int64_t>(r.points.size());
    simulated += r.simulated;
    benchmark::DoNotOptimize(r.answers.best_per_usd);
  }
  state.SetItemsProcessed(simulated);
  state.counters["points_per_second"] = benchmark::Counter(static_cast<double>(points), benchmark::Counter::kIsRate);
  state.counters["simulated_per_second"] =
      benchmark::Counter(static_cast<double>(simulated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimulateSweepDbrx100)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
