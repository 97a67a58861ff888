// Trace statistics on hand-built traces, every expectation worked out by hand in the comments.

#include <gtest/gtest.h>

#include <random>

#include "moesim/model/error.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_stats.hpp"

namespace {

using moesim::sim::RoutingTrace;

/// One layer, 4 experts, top-2. Request 0: {0,1} {1,2} {2,3} {0,1}; request 1: {3,2}.
RoutingTrace five_tokens() {
  RoutingTrace t;
  t.header = {"hand", 1, 4, 2, ""};
  t.request = {0, 0, 0, 0, 1};
  t.position = {0, 1, 2, 3, 0};
  t.experts = {0, 1, 1, 2, 2, 3, 0, 1, 3, 2};
  return t;
}

moesim::sim::TraceStats stats(const RoutingTrace& t, std::vector<std::int64_t> caches, std::int64_t window,
                              std::int64_t batch, std::optional<moesim::sim::Placement> p = std::nullopt) {
  moesim::sim::TraceStatsOptions o;
  o.cache_sizes = std::move(caches);
  o.window = window;
  o.batch = batch;
  o.placement = std::move(p);
  return moesim::sim::compute_trace_stats(t, o);
}

// Reuse counts pairs within a request only: (t0,t1) share {1}, (t1,t2) share {2}, (t2,t3) share nothing;
// t4 starts request 1. 2 shared of 3 pairs x 2 experts = 1/3. First experts 0,1,2,0 never repeat: 0.
// At least one shared: 2 of 3 pairs.
TEST(TraceStats, ReuseFirstChoiceAndOverlap) {
  const auto st = stats(five_tokens(), {}, 2, 2);
  EXPECT_EQ(st.pairs, 3);
  EXPECT_EQ(st.requests, 2);
  EXPECT_NEAR(st.layers[0].reuse, 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(st.layers[0].first_choice_repeat, 0.0, 1e-12);
  EXPECT_NEAR(st.layers[0].any_overlap, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(st.uniform_reuse, 0.5, 1e-12);          // k/E
  EXPECT_NEAR(st.uniform_first_choice, 0.25, 1e-12);  // 1/E
}

// LRU, per token hits first then misses loaded (10 accesses):
//  C=2: t0 miss 0,1 -> {0,1}; t1 hit 1, miss 2 evicts 0; t2 hit 2, miss 3 evicts 1; t3 miss 0,1; t4 miss 3,2.
//       2 hits -> 0.2.
//  C=3: t0 -> {0,1}; t1 hit 1, 2 fills; t2 hit 2, 3 evicts 0 (order 2,1,0 -> LRU 0); t3 hit 1, 0 evicts 2
//       (order after t2: 3,2,1; 1 touched -> 1,3,2); t4 hit 3, 2 evicts 1 (order 0,1,3 -> 3,0,1). 4 hits -> 0.4.
//  C=4: only the 4 cold misses: 6 hits -> 0.6.
TEST(TraceStats, LruHitRatesByHand) {
  const auto st = stats(five_tokens(), {2, 3, 4}, 2, 2);
  ASSERT_EQ(st.layers[0].lru_hit.size(), 3u);
  EXPECT_NEAR(st.layers[0].lru_hit[0], 0.2, 1e-12);
  EXPECT_NEAR(st.layers[0].lru_hit[1], 0.4, 1e-12);
  EXPECT_NEAR(st.layers[0].lru_hit[2], 0.6, 1e-12);
}

// Batches of 2 (the 5th token is a partial batch, dropped): {0,1,2} = 3 and {2,3,0,1} = 4 -> 3.5. The
// independence formula 4 * (1 - (1 - 2/4)^2) = 3.
// Windows of 2 tokens, mean count 2*2/4 = 1: window 1 counts (1,2,1,0) -> 2; window 2 (1,1,1,1) -> 1;
// mean 1.5, worst 2. Whole trace: counts (2,3,3,2), mean 5*2/4 = 2.5 -> 3/2.5 = 1.2.
TEST(TraceStats, DistinctPerBatchAndLoadWindows) {
  const auto st = stats(five_tokens(), {}, 2, 2);
  EXPECT_EQ(st.batches, 2);
  EXPECT_NEAR(st.layers[0].distinct_per_batch, 3.5, 1e-12);
  EXPECT_NEAR(st.independent_distinct, 3.0, 1e-12);
  EXPECT_EQ(st.windows, 2);
  EXPECT_NEAR(st.layers[0].load_max_mean, 1.5, 1e-12);
  EXPECT_NEAR(st.layers[0].load_max_mean_worst, 2.0, 1e-12);
  EXPECT_NEAR(st.layers[0].load_max_mean_all, 1.2, 1e-12);
}

// Contiguous placement on 2 nodes (experts 0-1 on node 0, 2-3 on node 1). Per token the busiest node runs
// 2, 1, 2, 2, 2 experts: mean 1.8. Each node runs 5 of the 10 executions: mean 1 per token, share 1/2, at most
// 2. Per batch of 2 tokens, distinct experts on the busiest node: batch 1 node 0 {0,1} = 2; batch 2 both 2:
// mean 2. Node load over windows of 2 tokens (mean 2 per node): (3,1) -> 1.5, (2,2) -> 1: mean 1.25.
TEST(TraceStats, PerNodeLoadUnderAPlacement) {
  const auto p = moesim::sim::make_placement("contiguous", 4, 2);
  const auto st = stats(five_tokens(), {}, 2, 2, p);
  ASSERT_TRUE(st.placement);
  EXPECT_NEAR(st.placement->max_active, 1.8, 1e-12);
  ASSERT_EQ(st.placement->nodes.size(), 2u);
  for (const auto& n : st.placement->nodes) {
    EXPECT_EQ(n.experts_held, 2);
    EXPECT_NEAR(n.mean_active, 1.0, 1e-12);
    EXPECT_EQ(n.max_active, 2);
    EXPECT_NEAR(n.share, 0.5, 1e-12);
  }
  EXPECT_NEAR(st.placement->max_active_batch, 2.0, 1e-12);
  EXPECT_NEAR(st.overall.node_load_max_mean, 1.25, 1e-12);
  // Uniform top-2 of 4 on two halves: max is 2 unless the pair splits (4 of 6 pairs): 1 + 2/6 = 4/3.
  EXPECT_NEAR(st.placement->max_active_uniform, 4.0 / 3.0, 1e-12);
}

// Requests may interleave: reuse compares a token with its own request's previous token, not its neighbour
// in the file. r0 {0,1}, r1 {2,3}, r0 {0,1}: one pair, fully shared.
TEST(TraceStats, InterleavedRequestsPairWithinTheRequest) {
  RoutingTrace t;
  t.header = {"hand", 1, 4, 2, ""};
  t.request = {0, 1, 0};
  t.position = {0, 0, 1};
  t.experts = {0, 1, 2, 3, 0, 1};
  const auto st = stats(t, {}, 3, 1);
  EXPECT_EQ(st.pairs, 1);
  EXPECT_NEAR(st.layers[0].reuse, 1.0, 1e-12);
  EXPECT_NEAR(st.layers[0].first_choice_repeat, 1.0, 1e-12);
}

// The Dispatcher the statistics and the simulator use is the same rule as sim::dispatch(): checked on random tokens for
// the authors' replicated groups on 3, 5 and 6 nodes and on round-robin.
TEST(TraceStats, DispatcherAgreesWithDispatch) {
  std::mt19937 rng(3);
  for (const auto& p :
       {moesim::sim::make_placement("replicated-groups", 16, 3),
        moesim::sim::make_placement("replicated-groups", 16, 5),
        moesim::sim::make_placement("replicated-groups", 16, 6), moesim::sim::make_placement("round-robin", 16, 4)}) {
    moesim::sim::Dispatcher fast(p);
    for (int i = 0; i < 2000; ++i) {
      std::vector<std::uint16_t> ids(16);
      for (std::uint16_t e = 0; e < 16; ++e) ids[e] = e;
      std::shuffle(ids.begin(), ids.end(), rng);
      ids.resize(4);
      std::vector<std::int32_t> nodes(4);
      fast.nodes_for(std::span<const std::uint16_t>(ids), nodes.data());
      std::vector<std::int64_t> load(static_cast<std::size_t>(p.nodes), 0);
      for (const auto n : nodes) ++load[static_cast<std::size_t>(n)];
      EXPECT_EQ(load, moesim::sim::dispatch(p, std::vector<std::int64_t>(ids.begin(), ids.end()))) << p.describe();
    }
  }
}

TEST(TraceStats, RefusesOptionsTheTraceCannotServe) {
  EXPECT_THROW(stats(five_tokens(), {1}, 2, 2), moesim::UserError);  // cache smaller than top-k
  EXPECT_THROW(stats(five_tokens(), {8}, 2, 2), moesim::UserError);  // larger than all experts
  EXPECT_THROW(stats(five_tokens(), {}, 0, 2), moesim::UserError);
  EXPECT_THROW(stats(five_tokens(), {}, 2, 2, moesim::sim::make_placement("contiguous", 16, 2)), moesim::UserError);
}

}  // namespace

namespace {

// Degenerate layers: one layer, 4 experts, top-2, tokens {0,1} {1,2} {3,1}: expert 1 is chosen by all 3
// tokens (share 1, flagged); layer 2 of the same tokens, {0,1} {2,3} {0,2}: expert 0 by 2 of 3 (not flagged).
// A trace of one token is never flagged (every expert it chose has share 1).
TEST(TraceStats, FlagsDegenerateLayers) {
  moesim::sim::RoutingTrace t;
  t.header = {"hand", 2, 4, 2, ""};
  t.request = {0, 0, 0};
  t.position = {0, 1, 2};
  t.experts = {0, 1, 0, 1, /**/ 1, 2, 2, 3, /**/ 3, 1, 0, 2};
  moesim::sim::TraceStatsOptions o;
  o.cache_sizes = {};
  const auto st = moesim::sim::compute_trace_stats(t, o);
  EXPECT_EQ(st.degenerate_layers, (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(st.layers[0].degenerate);
  EXPECT_EQ(st.layers[0].top_expert, 1);
  EXPECT_DOUBLE_EQ(st.layers[0].top_expert_share, 1.0);
  EXPECT_FALSE(st.layers[1].degenerate);
  EXPECT_EQ(st.layers[1].top_expert, 0);
  EXPECT_DOUBLE_EQ(st.layers[1].top_expert_share, 2.0 / 3.0);
  EXPECT_TRUE(st.overall.degenerate);

  moesim::sim::RoutingTrace one;
  one.header = {"hand", 1, 4, 2, ""};
  one.request = {0};
  one.position = {0};
  one.experts = {2, 3};
  EXPECT_TRUE(moesim::sim::compute_trace_stats(one, o).degenerate_layers.empty());
}

}  // namespace
