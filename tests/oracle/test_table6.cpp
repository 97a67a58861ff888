// Oracle: seed 000's Table 6 (Equation 1 with Table 1's variables), its Figure 8 NIC projections and
// Table 5's throughput per USD, computed by moesim from the zoo model and the hardware profiles alone.
// The expected values below are the paper's printed digits (TARGETS.md §1); moesim's numbers are
// rounded to the same digits and compared.

#include <gtest/gtest.h>

#include <cmath>

#include "moesim/scenario/estimate.hpp"
#include "moesim/scenario/study.hpp"
#include "moesim/scenario/table.hpp"

namespace {

using moesim::scenario::EstimateRequest;
using moesim::scenario::fixed;
using moesim::scenario::run_estimate;

struct PrintedRow {
  std::int64_t nodes;
  const char* load;
  const char* comp;
  const char* lat;
  const char* trans;
  const char* time;
  const char* tps;
};

// Table 6 of seed 000, as printed.
constexpr PrintedRow kTable6[] = {
    {2, "0.061", "0.001", "0.040", "0.002", "0.103", "9.7"},
    {3, "0.055", "0.001", "0.040", "0.002", "0.096", "10.4"},
    {4, "0.040", "0.001", "0.040", "0.002", "0.081", "12.3"},
    {6, "0.031", "<0.001", "0.040", "0.002", "0.072", "13.9"},
    {8, "0.029", "<0.001", "0.040", "0.002", "0.070", "14.2"},
};

EstimateRequest paper(const std::string& nic) {
  EstimateRequest r;
  r.model = "dbrx-instruct";
  r.hw = "mac-studio-m2-ultra-192-paper";  // Table 1's figures (54 TFLOPS BF16)
  r.nics = {nic};
  r.nodes = {2, 3, 4, 6, 8};
  return r;
}

// Every column of every row to the printed digit, except the 6-node row's load (see below).
TEST(Table6, ReproducedToThePrintedDigit) {
  const auto result = run_estimate(paper("10gbe-grpc"));
  ASSERT_EQ(result.rows.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    const auto& row = result.rows[i];
    const auto& want = kTable6[i];
    const auto& e = row.estimate;
    ASSERT_EQ(row.nodes, want.nodes);
    SCOPED_TRACE("nodes " + std::to_string(want.nodes));
    EXPECT_EQ(fixed(e.compute.base(), 3), want.comp);
    EXPECT_EQ(fixed(e.latency.base(), 3), want.lat);
    EXPECT_EQ(fixed(e.transfer.base(), 3), want.trans);
    EXPECT_EQ(fixed(e.time.base(), 3), want.time);
    if (want.nodes == 6) {
      // The paper prints E = (1.11) for 6 nodes, a value no replicated-groups split of 16 experts over 6
      // nodes gives under uniform routing: 3 replicas per group give exactly 14/13 = 1.077 (a node runs
      // two experts only when all four fall in one group). With 1.077 the load is 0.0302 s, printed
      // 0.030 where the paper has 0.031; time (0.072) and tokens/s (13.9) still match. We keep the exact
      // expectation and record the one-digit difference here rather than tune the placement to it.
      EXPECT_EQ(fixed(e.load.base(), 3), "0.030");
      EXPECT_NEAR(e.load.base(), 0.031, 0.001);
      EXPECT_EQ(fixed(e.tokens_per_second, 1), want.tps);
    } else {
      EXPECT_EQ(fixed(e.load.base(), 3), want.load);
      EXPECT_EQ(fixed(e.tokens_per_second, 1), want.tps);
    }
  }
}

// TARGETS.md §1: E[active experts per node per layer] for 2, 3, 4 nodes is 2.646, 2.323, 1.569 within 0.001.
TEST(Table6, ExpectedActiveExpertsFromThePlacement) {
  const auto result = run_estimate(paper("10gbe-grpc"));
  EXPECT_NEAR(result.rows[0].expected_active, 2.646, 0.001);
  EXPECT_NEAR(result.rows[1].expected_active, 2.323, 0.001);
  EXPECT_NEAR(result.rows[2].expected_active, 1.569, 0.001);
}

// Figure 8: with RoCEv2 at the paper's figures (rocev2-25g-paper: 750 ns, 25 Gb/s) or InfiniBand (600 ns,
// 200 Gb/s) the 2-node bound rises from 9.7 to about 16.3 tokens/s (TARGETS.md: 16.3 +- 0.2).
TEST(Table6, NicProjections) {
  for (const char* nic : {"rocev2-25g-paper", "ib-200g"}) {
    const auto result = run_estimate(paper(nic));
    EXPECT_NEAR(result.rows[0].estimate.tokens_per_second, 16.3, 0.2) << nic;
    // More nodes never lower the bound with a fast NIC (the paper: "could scale better").
    for (std::size_t i = 1; i < result.rows.size(); ++i) {
      EXPECT_GT(result.rows[i].estimate.tokens_per_second, result.rows[i - 1].estimate.tokens_per_second) << nic;
    }
  }
}

// Table 5: Databricks 112.5 tok/s on one 289,000 USD node -> 0.000389; Mac Studios 5.9 tok/s on two
// 6,599 USD nodes (10 GbE built in) -> 0.000447 tokens/s per USD.
TEST(Table5, ThroughputPerDollar) {
  moesim::scenario::CostPoint dgx{"d", "dgx-h100", "", 1, 112.5, "seed 000"};
  moesim::scenario::CostPoint mac{"m", "mac-studio-m2-ultra-192", "10gbe-grpc", 2, 5.9, "seed 000"};
  EXPECT_EQ(moesim::scenario::fixed(moesim::scenario::price_point(dgx).tokens_per_second_per_usd * 1e6, 0), "389");
  EXPECT_EQ(moesim::scenario::fixed(moesim::scenario::price_point(mac).tokens_per_second_per_usd * 1e6, 0), "447");
}

// The built-in study is the paper's: 3 NICs x 5 node counts, and the two Table 5 points.
TEST(Study, DefaultStudyIsThePapers) {
  const auto s = moesim::scenario::load_study("");
  EXPECT_EQ(s.estimate.model, "dbrx-instruct");
  EXPECT_EQ(s.estimate.nics.size(), 3u);
  EXPECT_EQ(s.cost_comparison.size(), 2u);
  EXPECT_EQ(run_estimate(s.estimate).rows.size(), 15u);
}

}  // namespace
