// Oracle tests of the simulator (STYLE.md practice 7): with contention and residency switched off, the
// discrete-event replay must reproduce the analytic model (Equation 1 of seed 000 with Table 1's
// parameters) and the exact E[active experts per node per layer] of the authors' placements.

#include <gtest/gtest.h>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_gen.hpp"

namespace {

using namespace moesim;

// The sanitizer builds (ASan+UBSan at -O1, TSan) run these replays ~35x slower than the plain build: there
// they replay shorter traces, which still cover every code path, with the same tolerances; the plain build
// checks the figures at the sample sizes the comments below derive their bands from.
#if defined(MOESIM_SANITIZED)
constexpr std::int64_t kSanitizedShare = 5;
#else
constexpr std::int64_t kSanitizedShare = 1;
#endif

struct Paper {
  model::Architecture arch = model::load_model("dbrx-instruct");
  model::NodeProfile node = model::load_node("mac-studio-m2-ultra-192");  // Table 1: 800 GB/s, 54 TFLOP/s
  model::NicProfile nic = model::load_nic("10gbe-grpc");                  // Table 1: 1 ms, 1.25 GB/s
  const model::Precision* bf16 = &model::precision("bf16");

  sim::RoutingTrace uniform(std::int64_t tokens, std::uint64_t seed) const {
    sim::TraceGenOptions o = sim::gen_options_for(arch, tokens, seed);
    o.weights = false;
    return sim::generate_trace(o);
  }

  sim::DecodeResult simulate(const sim::RoutingTrace& t, const sim::Placement& p, std::int32_t nodes,
                             sim::Collective collective = sim::Collective::ExpertOutputs) const {
    sim::DecodeConfig c;
    c.arch = &arch;
    c.weights = bf16;
    c.node = &node;
    c.nic = &nic;
    c.placement = &p;
    c.nodes = nodes;
    c.attention = sim::AttentionMode::Decentralised;
    c.balancing = sim::Balancing::LruFill;
    c.packing = sim::Packing::Prestacked;
    c.collective = collective;
    c.contention = false;
    c.residency = false;
    return sim::run_decode(c, t);
  }

  model::DecodeEstimate estimate(const sim::Placement& p, std::int32_t nodes, model::Exchange e) const {
    model::DecodeScenario s;
    s.arch = &arch;
    s.node = &node;
    s.nic = &nic;
    s.nodes = nodes;
    s.weights = bf16;
    s.expected_active_experts = sim::expected_max_active_experts(p, arch.top_k);
    s.exchange = e;
    return model::estimate_decode(s);
  }
};

// Issue 3: on 100,000-token uniform traces the measured E[active experts per node per layer] is 2.646,
// 2.323 and 1.569 (+-0.01) for the authors' 2-, 3- and 4-node placements (TARGETS.md §1). The standard
// error over 4 M token-layers is about 0.0004, so 0.01 is a 20-sigma band: a wrong dispatch rule fails.
// Under the sanitizers 20,000 tokens: 0.8 M token-layers, a standard error of about 0.0009, still a
// 10-sigma band.
TEST(SimOracle, MeasuredActiveExpertsMatchTheAuthorsPlacements) {
  const Paper paper;
  const auto trace = paper.uniform(100000 / kSanitizedShare, 2024);
  const struct {
    std::int32_t nodes;
    double expected;
  } cases[] = {{2, 2.646}, {3, 2.323}, {4, 1.569}};
  for (const auto& c : cases) {
    const auto p = sim::make_placement("replicated-groups", 16, c.nodes);
    const auto r = paper.simulate(trace, p, c.nodes);
    EXPECT_NEAR(r.mean_max_routed, c.expected, 0.01) << c.nodes << " nodes";
  }
}

// With Table 1's parameters, contention and residency off, the simulated time per token equals
// `moesim estimate` within 1% for 2-8 nodes: per layer, attention + the busiest node's experts (P-L_R-D
// makes every node compute the layer's maximum) + one message of k x d_model activations; summed over 40
// layers this is Equation 1 with E[active] measured instead of expected. The all-reduce exchanges are checked
// against the analytic model's step counts the same way. 5,000 tokens: the sampling error
// of E[active] moves the time by < 0.1% (< 0.25% with the sanitizers' 1,000 tokens: the band is 1%).
TEST(SimOracle, SimulatorEqualsEquationOneWithoutContention) {
  const Paper paper;
  const auto trace = paper.uniform(5000 / kSanitizedShare, 7);
  for (std::int32_t nodes = 2; nodes <= 8; ++nodes) {
    const auto p = sim::make_placement("replicated-groups", 16, nodes);
    for (const auto collective :
         {sim::Collective::ExpertOutputs, sim::Collective::RingAllReduce, sim::Collective::RecursiveDoubling}) {
      // Recursive doubling only for powers of two: otherwise the simulated nodes that fold in no extra
      // node start their first round at once and overlap it with the fold step, finishing up to a step
      // sooner than the textbook count of log2(p) + 2 steps the analytic model charges.
      if (collective == sim::Collective::RecursiveDoubling && (nodes & (nodes - 1)) != 0) continue;
      const auto r = paper.simulate(trace, p, nodes, collective);
      const auto e = paper.estimate(p, nodes, sim::analytic_exchange(sim::AttentionMode::Decentralised, collective));
      const double simulated = 1.0 / r.tokens_per_second;
      EXPECT_NEAR(simulated / e.time.base(), 1.0, 0.01)
          << nodes << " nodes, " << sim::name_of(collective) << ": simulated " << simulated << " s, estimated "
          << e.time.base() << " s";
    }
  }
}

// Residency from TARGETS.md §1's facts (the M2 Ultra profile): the paper's three methods order as measured
// in Table 3, naive < P-L_B < P-L_R-D in tokens/s on 2 nodes, and the time split moves the same way: MoE
// time and communication time both fall from naive to P-L_R-D.
TEST(SimOracle, PaperMethodsOrderAsTable3) {
  const Paper paper;
  const auto trace = paper.uniform(400, 11);
  const auto p = sim::make_placement("replicated-groups", 16, 2);
  std::vector<sim::DecodeResult> runs;
  for (const char* name : {"naive", "P-LB", "P-LR-D"}) {
    const auto& s = sim::strategy_by_name(name);
    sim::DecodeConfig c;
    c.arch = &paper.arch;
    c.weights = paper.bf16;
    c.node = &paper.node;
    c.nic = &paper.nic;
    c.placement = &p;
    c.nodes = 2;
    c.attention = s.attention;
    c.balancing = s.balancing;
    c.packing = s.packing;
    runs.push_back(sim::run_decode(c, trace));
  }
  auto mean = [](const sim::DecodeResult& r, auto field) {
    double s = 0;
    for (const auto& t : r.per_token) s += sim::to_seconds(field(t));
    return s / static_cast<double>(r.per_token.size());
  };
  auto moe = [&](const sim::DecodeResult& r) { return mean(r, [](const sim::TokenRecord& t) { return t.moe; }); };
  auto comm = [&](const sim::DecodeResult& r) { return mean(r, [](const sim::TokenRecord& t) { return t.comm(); }); };
  EXPECT_LT(runs[0].tokens_per_second, runs[1].tokens_per_second);
  EXPECT_LT(runs[1].tokens_per_second, runs[2].tokens_per_second);
  EXPECT_GT(moe(runs[0]), moe(runs[1]));
  EXPECT_GT(moe(runs[1]), moe(runs[2]));
  EXPECT_GT(comm(runs[0]), comm(runs[1]));
  EXPECT_GT(comm(runs[1]), comm(runs[2]));
  // Only the unstacked naive method pays re-wiring; the prestacked ones keep every expert wired.
  EXPECT_GT(runs[0].nodes[0].rewires, 0);
  EXPECT_EQ(runs[1].nodes[0].rewires + runs[2].nodes[0].rewires, 0);
}

}  // namespace
