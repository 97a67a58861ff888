// The expert-parallel decode engine and weight residency on small hand-built clusters, each with its
// hand-derived expectation.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/residency.hpp"

namespace {

using namespace moesim;
using sim::SimTime;

constexpr SimTime kMillisecond{sim::kPicosecondsPerMillisecond};

// Re-wire after an idle gap. Timeout 1 s, 1 ms per buffer, 1 GB/s. Wired at t = 0; used until 0.5 s;
// touched again at 1.4 s (idle 0.9 s <= 1 s): free. Used until 1.5 s; touched at 2.6 s (idle 1.1 s):
// 3 buffers x 1 ms + 0.5 GB / 1 GB/s = 503 ms. A buffer that starts cold pays on its first use.
TEST(Residency, RewireOnlyAfterAnIdleGapLongerThanTheTimeout) {
  sim::ResidencyParams p{1000 * kMillisecond, 1 * kMillisecond, 1e9 / 1e12};
  sim::WeightResidency warm(p, 1, 1, true);
  EXPECT_EQ(warm.acquire(0, 0, SimTime{}, 3, 0.5e9), SimTime{});
  warm.release(0, 0, 500 * kMillisecond);
  EXPECT_EQ(warm.acquire(0, 0, 1400 * kMillisecond, 3, 0.5e9), SimTime{});
  warm.release(0, 0, 1500 * kMillisecond);
  EXPECT_EQ(warm.acquire(0, 0, 2600 * kMillisecond, 3, 0.5e9), 503 * kMillisecond);
  EXPECT_EQ(warm.rewires(), 1);
  sim::WeightResidency cold(p, 1, 1, false);
  EXPECT_EQ(cold.acquire(0, 0, SimTime{}, 1, 1e9), 1001 * kMillisecond);
}

/// A tiny MoE model: Mixtral's dimensions with `layers` layers, `experts` experts and top-`k`.
model::Architecture tiny(std::int64_t layers, std::int64_t experts, std::int64_t k) {
  model::Architecture a = model::load_model("mixtral-8x7b");
  a.layers = layers;
  a.routed_experts = experts;
  a.top_k = k;
  a.layer_specs.resize(static_cast<std::size_t>(layers));
  return a;
}

/// A node so fast that compute takes ~no time (1 EB/s, 1 EFLOP/s), and a 1 GB/s, 1 ms NIC.
model::NodeProfile fast_node() {
  model::NodeProfile n;
  n.id = n.origin = "test-node";
  n.devices.memory = model::Sourced<units::Bytes>{units::bytes(1e12), "test"};
  n.devices.memory_bandwidth = model::Sourced<units::Bandwidth>{units::bytes_per_second(1e18), "test"};
  n.devices.peak_flops["bf16"] = model::Sourced<units::FlopRate>{units::flops_per_second(1e18), "test"};
  n.devices.kernel_overhead = model::Sourced<units::Duration>{units::seconds(0), "test"};
  return n;
}
model::NicProfile nic_1ms() {
  model::NicProfile n;
  n.id = n.origin = "test-nic";
  n.latency = {units::seconds(1e-3), "test"};
  n.bandwidth = {units::bytes_per_second(1e9), "test"};
  return n;
}

sim::RoutingTrace trace_of(const model::Architecture& a, const std::vector<std::vector<std::uint16_t>>& tokens) {
  sim::RoutingTrace t;
  t.header = {a.id, model::moe_layer_count(a), a.routed_experts, a.top_k, "hand-made"};
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    t.request.push_back(0);
    t.position.push_back(static_cast<std::uint32_t>(i));
    t.experts.insert(t.experts.end(), tokens[i].begin(), tokens[i].end());
  }
  return t;
}

/// Records which expert computations (and fillers) each node ran.
class Spans final : public sim::TimelineObserver {
 public:
  void on_compute(std::int32_t node, std::string_view what, std::int64_t token, std::int64_t, SimTime,
                  SimTime) override {
    if (what.starts_with("filler") || what.starts_with("expert"))
      seen.push_back(std::to_string(token) + ":" + std::to_string(node) + ":" + std::string(what));
  }
  void on_token(std::int64_t, SimTime, SimTime) override {}
  std::vector<std::string> seen;
};

struct Rig {
  model::Architecture arch;
  model::NodeProfile node = fast_node();
  model::NicProfile nic = nic_1ms();
  sim::Placement placement;
  sim::DecodeConfig config;
  Rig(model::Architecture a, std::int32_t nodes, const char* placement_name) : arch(std::move(a)) {
    placement = sim::make_placement(placement_name, arch.routed_experts, nodes);
    config.arch = &arch;
    config.weights = &model::precision("bf16");
    config.node = &node;
    config.nic = &nic;
    config.placement = &placement;
    config.nodes = nodes;
  }
};

// LRU fillers (P-L_R-D). 2 nodes, 4 experts in halves: node 0 holds {0, 1}, node 1 holds {2, 3}; top-1, one
// layer. Every token is routed to node 0, so node 1 computes one filler per token, its least recently used
// expert (ties: lowest id): token 0 -> 2 (neither used), token 1 -> 3 (2 was used at token 0), token 2 -> 2.
TEST(Decode, LruFillerPicksTheLeastRecentlyUsedLocalExpert) {
  Rig r(tiny(1, 4, 1), 2, "contiguous");
  Spans spans;
  r.config.balancing = sim::Balancing::LruFill;
  r.config.timeline = &spans;
  r.config.timeline_tokens = 10;
  const auto res = sim::run_decode(r.config, trace_of(r.arch, {{0}, {1}, {0}}));
  std::sort(spans.seen.begin(), spans.seen.end());  // nodes run concurrently: compare as a set
  EXPECT_EQ(spans.seen, (std::vector<std::string>{"0:0:expert 0", "0:1:filler 2", "1:0:expert 1", "1:1:filler 3",
                                                  "2:0:expert 0", "2:1:filler 2"}));
  EXPECT_DOUBLE_EQ(res.mean_max_routed, 1.0);
  EXPECT_DOUBLE_EQ(res.mean_executed_per_node, 1.0);
}

// Busy full loading (P-L_B) computes every local expert every layer: 2 per node per token here.
TEST(Decode, BusyLoadingComputesEveryLocalExpert) {
  Rig r(tiny(1, 4, 1), 2, "contiguous");
  r.config.balancing = sim::Balancing::BusyAll;
  const auto res = sim::run_decode(r.config, trace_of(r.arch, {{0}, {3}}));
  EXPECT_DOUBLE_EQ(res.mean_executed_per_node, 2.0);
  EXPECT_EQ(res.nodes[0].routed + res.nodes[1].routed, 2);
  EXPECT_EQ(res.nodes[0].fillers + res.nodes[1].fillers, 6);
}

// With compute ~0, a token of one MoE layer costs its exchange. d_model = 4096 at 2 B = 8192 B per vector.
//  ring all-reduce, 4 nodes: 2(N-1) = 6 steps of (1 ms + 2048 B / 1 GB/s) = 6.012288 ms;
//  recursive doubling, 4 nodes: log2 4 = 2 steps of (1 ms + 8192 B / 1 GB/s) = 2.016384 ms;
//  expert outputs (top-2 slots, 16384 B) to each peer at once, contention off: 1.016384 ms;
//  the same with contention: each uplink carries 3 flows one after another... except that all nodes send to
//  all at once in shift order, so each round's flows use distinct links: 3 x 16.384 us + 1 ms = 1.049152 ms.
TEST(Decode, CollectivesTakeTheirHandDerivedTime) {
  struct Case {
    sim::Collective c;
    std::int32_t nodes;
    bool contention;
    double ms;
  };
  for (const auto& k : {Case{sim::Collective::RingAllReduce, 4, true, 6.012288},
                        Case{sim::Collective::RecursiveDoubling, 4, true, 2.016384},
                        Case{sim::Collective::ExpertOutputs, 4, false, 1.016384},
                        Case{sim::Collective::ExpertOutputs, 4, true, 1.049152}}) {
    Rig r(tiny(1, 8, 2), k.nodes, "round-robin");
    r.config.collective = k.c;
    r.config.contention = k.contention;
    r.config.balancing = sim::Balancing::None;
    const auto res = sim::run_decode(r.config, trace_of(r.arch, {{0, 1}, {2, 5}}));
    ASSERT_EQ(res.per_token.size(), 2u);
    for (const auto& t : res.per_token) {
      EXPECT_NEAR(sim::to_seconds(t.end - t.start) * 1e3, k.ms, 2e-6)
          << sim::name_of(k.c) << " on " << k.nodes << " nodes, contention " << k.contention;
    }
  }
}

// Centralised (seed 000 Fig. 3): the driver sends each node the input and waits for its outputs: two
// messages of 16384 B per layer on the critical path: 2 x (1 ms + 16.384 us).
TEST(Decode, CentralisedPaysTwoMessagesPerLayer) {
  Rig r(tiny(1, 8, 2), 2, "contiguous");
  r.config.attention = sim::AttentionMode::Centralised;
  r.config.balancing = sim::Balancing::None;
  const auto res = sim::run_decode(r.config, trace_of(r.arch, {{0, 7}}));
  EXPECT_NEAR(sim::to_seconds(res.per_token[0].end - res.per_token[0].start) * 1e3, 2.032768, 2e-6);
}

// The balancing registry (STYLE.md practice 2), as PlacementRegistry: the built-in ones in order, each with
// its line of --help and its fill; an unknown name is refused naming them; a name taken is refused. A new
// one, "test-busy", reuses busy full loading's fill under its own value, so the scenario of
// BusyLoadingComputesEveryLocalExpert run with it gives the same 6 fillers.
TEST(BalancingRegistry, ListsRefusesAndRunsARegisteredBalancing) {
  test::expect_builtins(sim::balancings(), {"none", "busy", "lru-fill"});
  for (const auto& b : sim::balancings()) EXPECT_NE(b.fill, nullptr) << b.name;
  test::expect_user_error([] { (void)sim::balancing_by_name("bussy"); },
                          {"unknown balancing 'bussy' (did you mean 'busy'?); valid: none, busy, lru-fill"});
  const auto busy_fill = sim::balancing_info(sim::Balancing::BusyAll).fill;
  EXPECT_THROW(sim::register_balancing({static_cast<sim::Balancing>(90), "busy", "again", busy_fill}), UserError);
  const auto test_busy = static_cast<sim::Balancing>(91);
  sim::register_balancing({test_busy, "test-busy", "busy full loading, registered again", busy_fill});
  EXPECT_EQ(sim::balancing_by_name("test-busy"), test_busy);
  EXPECT_EQ(sim::name_of(test_busy), "test-busy");
  Rig r(tiny(1, 4, 1), 2, "contiguous");
  r.config.balancing = test_busy;
  const auto res = sim::run_decode(r.config, trace_of(r.arch, {{0}, {3}}));
  EXPECT_EQ(res.nodes[0].fillers + res.nodes[1].fillers, 6);
}

// The collective registry: the built-in ones in order, each with its analytic exchange (the oracle's
// pairing); unknown and taken names are refused. A new name is found by name, but the decode engine runs
// only the message protocols it has, so a run with it is refused saying so.
TEST(CollectiveRegistry, ListsRefusesAndNamesARegisteredCollective) {
  test::expect_builtins(sim::collectives(), {"expert-outputs", "ring-allreduce", "recursive-doubling"});
  EXPECT_EQ(sim::analytic_exchange(sim::AttentionMode::Decentralised, sim::Collective::RingAllReduce),
            model::Exchange::RingAllReduce);
  EXPECT_EQ(sim::analytic_exchange(sim::AttentionMode::Centralised, sim::Collective::RingAllReduce),
            model::Exchange::Centralised);
  test::expect_user_error([] { (void)sim::collective_by_name("ring"); },
                          {"valid: expert-outputs, ring-allreduce, recursive-doubling"});
  EXPECT_THROW(sim::register_collective(
                   {static_cast<sim::Collective>(90), "ring-allreduce", "again", model::Exchange::RingAllReduce}),
               UserError);
  const auto tree = static_cast<sim::Collective>(91);
  sim::register_collective({tree, "test-tree", "a tree all-reduce", model::Exchange::RecursiveDoubling});
  EXPECT_EQ(sim::collective_by_name("test-tree"), tree);
  EXPECT_EQ(sim::analytic_exchange(sim::AttentionMode::Decentralised, tree), model::Exchange::RecursiveDoubling);
  Rig r(tiny(1, 8, 2), 4, "round-robin");
  r.config.collective = tree;
  EXPECT_THROW((void)sim::run_decode(r.config, trace_of(r.arch, {{0, 1}})), UserError);
}

}  // namespace
