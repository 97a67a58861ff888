// calibrate fit (calibrate/fit.hpp) and the least-squares solver under it (calibrate/lsq.hpp).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "../test_support.hpp"
#include "moesim/calibrate/fit.hpp"
#include "moesim/calibrate/lsq.hpp"
#include "moesim/model/error.hpp"
#include "moesim/sim/decode.hpp"

namespace fs = std::filesystem;
using namespace moesim;
using namespace moesim::calibrate;

// A line through noisy samples: y = 3 + 0.5 x with ±1% multiplicative noise over x in 1..100 gives the
// intercept within 5% and the slope within 1%, and R² above 0.999.
TEST(LeastSquares, LineThroughNoisySamples) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  std::vector<double> x, y;
  for (int i = 1; i <= 100; ++i) {
    x.push_back(i);
    y.push_back((3.0 + 0.5 * i) * (1.0 + noise(rng)));
  }
  const LineFit f = fit_line(x, y);
  EXPECT_NEAR(f.intercept, 3.0, 0.15);
  EXPECT_NEAR(f.slope, 0.5, 0.005);
  EXPECT_GT(f.r2, 0.999);
  ASSERT_EQ(f.residuals.size(), x.size());
}

// A rank-deficient system (two equal columns) gets the minimum-norm solution and reports rank 1:
// x1 + x2 = 2 has minimum-norm solution (1, 1).
TEST(LeastSquares, RankDeficientGivesMinimumNorm) {
  Matrix a(3, 2);
  std::vector<double> b(3, 2.0);
  for (std::size_t i = 0; i < 3; ++i) a(i, 0) = a(i, 1) = 1.0;
  const LeastSquares ls = least_squares(a, b);
  EXPECT_EQ(ls.rank, 1U);
  EXPECT_NEAR(ls.x[0], 1.0, 1e-12);
  EXPECT_NEAR(ls.x[1], 1.0, 1e-12);
}

TEST(LeastSquares, RefusesBadShapes) {
  EXPECT_THROW(fit_line({1.0}, {2.0}), std::invalid_argument);
  EXPECT_THROW(fit_line({1.0, 1.0}, {2.0, 3.0}), std::invalid_argument);
  EXPECT_THROW(least_squares(Matrix(2, 2), {1.0}), std::invalid_argument);
}

namespace {

/// The DBRX P-LR-D scenario on `nodes` Mac Studios, `tokens` uniformly routed tokens.
nlohmann::json scenario_json(int nodes, int tokens) {
  return {{"model", "dbrx-instruct"}, {"hw", "mac-studio-m2-ultra-192"},
          {"nic", "10gbe-grpc"},      {"nodes", nodes},
          {"strategy", "P-LR-D"},     {"generate", {{"tokens", tokens}, {"seed", 3}}}};
}

}  // namespace

// Synthetic measurements from known parameters (memory efficiency 0.70, 0.80 ms per layer, 0.90 ms per
// message) on 2, 3 and 4 nodes, each split component perturbed by up to ±2% of noise: the fit, started
// from the profile's values (1.0, 0, 1 ms), recovers each parameter within 5%, the tolerance that ±2%
// noise on nine figures allows for three parameters (the comm figures carry the latency alone).
TEST(CalibrateFit, RecoversKnownParametersFromNoisySyntheticRuns) {
  const std::map<std::string, double> truth = {
      {"memory_efficiency", 0.70}, {"layer_overhead", 0.8e-3}, {"message_latency", 0.9e-3}};
  const model::NodeProfile base_node = model::load_node("mac-studio-m2-ultra-192");
  model::NodeProfile node = base_node;
  model::NicProfile nic = model::load_nic("10gbe-grpc");
  for (const auto& [name, v] : truth) fit_parameter(name).set(node, &nic, v, base_node);

  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> noise(-0.02, 0.02);
  nlohmann::json runs = nlohmann::json::array();
  for (const int n : {2, 3, 4}) {
    const auto prepared =
        scenario::prepare_simulate(scenario::load_simulate_scenario(json::Node(scenario_json(n, 300), "synthetic")));
    const auto split =
        scenario::mean_split(sim::run_decode(scenario::decode_config(prepared, node, &nic), prepared.trace));
    auto s = [&](double v) { return std::to_string(v * (1.0 + noise(rng))) + "s"; };
    runs.push_back({{"name", "p-lr-d-" + std::to_string(n)},
                    {"scenario", scenario_json(n, 300)},
                    {"measured",
                     {{"time_per_token", std::to_string(split.time) + "s"},
                      {"split", {{"moe", s(split.moe)}, {"comm", s(split.comm)}, {"misc", s(split.misc)}}}}}});
  }
  moesim::test::TestDir dir("moesim_fit");
  const auto file = (dir.path() / "runs.json").string();
  std::ofstream(file) << nlohmann::json{{"source", "synthetic, test_fit.cpp"}, {"runs", runs}}.dump(2);

  FitOptions o;
  o.parameters = {"memory_efficiency", "layer_overhead", "message_latency"};
  o.leave_one_out = false;
  const FitResult r = fit_runs(load_measured_runs(file), o);
  ASSERT_EQ(r.parameters.size(), 3U);
  for (const auto& p : r.parameters) {
    EXPECT_TRUE(p.determined) << p.name;
    EXPECT_NEAR(p.value / truth.at(p.name), 1.0, 0.05) << p.name << " fitted " << p.value;
  }
  EXPECT_LT(r.rms_relative, 0.03);
  // The fitted profile document loads and carries the fitted figures.
  const auto path = (dir.path() / "fitted.json").string();
  std::ofstream(path) << r.node_document.dump();
  const model::NodeProfile fitted = model::load_node(path);
  ASSERT_TRUE(fitted.devices.layer_overhead);
  EXPECT_NEAR(fitted.devices.layer_overhead->value.base(), r.parameters[1].value, 1e-9);
}

// A parameter the runs cannot move (re-wiring when every weight stays wired) is kept and flagged.
TEST(CalibrateFit, KeepsParametersTheRunsDoNotConstrain) {
  moesim::test::TestDir dir("moesim_fit");
  const auto file = (dir.path() / "runs.json").string();
  nlohmann::json run = {{"name", "two"}, {"scenario", scenario_json(2, 100)}, {"measured", {{"tokens_per_s", 6.1}}}};
  std::ofstream(file) << nlohmann::json{{"source", "test"}, {"runs", {run}}}.dump();
  FitOptions o;
  o.parameters = {"memory_efficiency", "rewire_bandwidth"};
  const FitResult r = fit_runs(load_measured_runs(file), o);
  EXPECT_TRUE(r.parameters[0].determined);
  EXPECT_FALSE(r.parameters[1].determined);
  EXPECT_EQ(r.parameters[1].value, r.parameters[1].start);
  EXPECT_NEAR(r.runs[0].predicted.time, 1.0 / 6.1, 1e-3 / 6.1);
}

TEST(CalibrateFit, EfficiencyBandsLookupFlagsSizesOutsideTheTable) {
  std::vector<model::EfficiencyBand> bands = {{units::bytes(1e6), units::bytes(1e7), 0.5, 3},
                                              {units::bytes(1e7), units::bytes(1e8), 0.7, 3}};
  EXPECT_EQ(model::efficiency_at(bands, units::bytes(5e6)).value, 0.5);
  EXPECT_TRUE(model::efficiency_at(bands, units::bytes(5e7)).inside);
  const auto above = model::efficiency_at(bands, units::bytes(4e8));
  EXPECT_FALSE(above.inside);
  EXPECT_EQ(above.value, 0.7);
  const auto below = model::efficiency_at(bands, units::bytes(1e3));
  EXPECT_FALSE(below.inside);
  EXPECT_EQ(below.value, 0.5);
}

// Non-negative least squares over a few columns: the unconstrained solution where it is non-negative;
// otherwise the best fit with the offending column at 0 (b = 2·a0 − 1·a1 exactly; with x1 >= 0 the best is
// x1 = 0 and x0 the projection of b on a0).
TEST(Lsq, NonNegativeLeastSquaresKeepsTheSignConstraint) {
  calibrate::Matrix a(4, 2);
  const double a0[] = {1, 2, 3, 4}, a1[] = {1, 0, 1, 0};
  std::vector<double> plus(4), minus(4);
  for (std::size_t i = 0; i < 4; ++i) {
    a(i, 0) = a0[i];
    a(i, 1) = a1[i];
    plus[i] = 2 * a0[i] + 3 * a1[i];
    minus[i] = 2 * a0[i] - 1 * a1[i];
  }
  const auto x = calibrate::nonnegative_least_squares(a, plus);
  EXPECT_NEAR(x[0], 2.0, 1e-12);
  EXPECT_NEAR(x[1], 3.0, 1e-12);
  const auto y = calibrate::nonnegative_least_squares(a, minus);
  EXPECT_EQ(y[1], 0.0);
  double ab = 0, aa = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    ab += a0[i] * minus[i];
    aa += a0[i] * a0[i];
  }
  EXPECT_NEAR(y[0], ab / aa, 1e-12);
}

// Many columns (a joint fit's: two per machine and one shared): b = A x* with x* >= 0 holding zeros gives
// x* back; with a column whose coefficient must be negative, the optimum holds it at 0 and the rest meet
// the KKT conditions: every column at 0 has a gradient Aᵀ(b − Ax) <= 0, every positive one 0.
TEST(Lsq, NonNegativeLeastSquaresManyColumns) {
  constexpr std::size_t kRows = 40, kCols = 13;
  calibrate::Matrix a(kRows, kCols);
  std::vector<double> truth(kCols, 0.0);
  for (std::size_t c = 0; c < kCols; ++c) truth[c] = c % 3 == 0 ? 0.0 : 0.5 + static_cast<double>(c);
  std::vector<double> b(kRows, 0.0);
  for (std::size_t i = 0; i < kRows; ++i)
    for (std::size_t c = 0; c < kCols; ++c) {
      a(i, c) = std::fmod(std::sin(static_cast<double>(i * kCols + c) * 12.9898) * 43758.5453, 1.0) + 1.0;
      b[i] += a(i, c) * truth[c];
    }
  const auto x = calibrate::nonnegative_least_squares(a, b);
  for (std::size_t c = 0; c < kCols; ++c) EXPECT_NEAR(x[c], truth[c], 1e-8) << c;

  std::vector<double> pulled = b;
  for (std::size_t i = 0; i < kRows; ++i) pulled[i] -= 30.0 * a(i, 1);  // x1 would be 1.5 − 30 < 0
  const auto y = calibrate::nonnegative_least_squares(a, pulled);
  std::vector<double> r(kRows);
  for (std::size_t i = 0; i < kRows; ++i) {
    r[i] = pulled[i];
    for (std::size_t c = 0; c < kCols; ++c) r[i] -= a(i, c) * y[c];
  }
  EXPECT_EQ(y[1], 0.0);
  for (std::size_t c = 0; c < kCols; ++c) {
    EXPECT_GE(y[c], 0.0);
    double g = 0;
    for (std::size_t i = 0; i < kRows; ++i) g += a(i, c) * r[i];
    if (y[c] > 0)
      EXPECT_NEAR(g, 0.0, 1e-7) << c;
    else
      EXPECT_LE(g, 1e-7) << c;
  }
}
