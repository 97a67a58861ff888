// The prediction interval from leave-one-out errors (calibrate/validation.hpp error_interval): the
// order-statistic range with (n + 1 - 2k) / (n + 1) >= 90%, the min and max below n = 19.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "moesim/calibrate/validation.hpp"

namespace moesim::calibrate {
namespace {

/// n errors 0, 0.01, .. in a shuffled order: the i-th smallest is (i - 1) / 100.
std::vector<double> ramp(std::size_t n) {
  std::vector<double> e(n);
  for (std::size_t i = 0; i < n; ++i) e[i] = static_cast<double>(i) / 100.0;
  std::mt19937 g(7);
  std::shuffle(e.begin(), e.end(), g);
  return e;
}

TEST(ErrorInterval, EmptyGivesNone) { EXPECT_FALSE(error_interval({}).has_value()); }

TEST(ErrorInterval, SmallSamplesKeepTheirMinAndMax) {
  for (const std::size_t n : {1U, 2U, 5U, 18U, 19U, 38U}) {
    const auto r = error_interval(ramp(n));
    ASSERT_TRUE(r.has_value());
    EXPECT_DOUBLE_EQ(r->first, 0.0) << n;
    EXPECT_DOUBLE_EQ(r->second, static_cast<double>(n - 1) / 100.0) << n;
  }
}

TEST(ErrorInterval, LargeSamplesDropTheOuterFivePercentEachSide) {
  // n = 39: k = 2 (36 / 40 = 90%); n = 263: k = 13 (238 / 264 = 90.2%, k = 14 would give 89.4%).
  for (const auto& [n, k] : {std::pair<std::size_t, std::size_t>{39, 2}, {59, 3}, {263, 13}, {1000, 50}}) {
    const auto r = error_interval(ramp(n));
    ASSERT_TRUE(r.has_value());
    EXPECT_DOUBLE_EQ(r->first, static_cast<double>(k - 1) / 100.0) << n;
    EXPECT_DOUBLE_EQ(r->second, static_cast<double>(n - k) / 100.0) << n;
    const double coverage = static_cast<double>(n + 1 - 2 * k) / static_cast<double>(n + 1);
    EXPECT_GE(coverage, 0.90) << n;
    EXPECT_LT(static_cast<double>(n + 1 - 2 * (k + 1)) / static_cast<double>(n + 1), 0.90) << n;
  }
}

TEST(ErrorInterval, HoldsAboutNinetyPercentOfNewDrawsFromTheSameDistribution) {
  // The distribution-free guarantee, checked by drawing: 200 errors from a skewed distribution, then how
  // many of 20,000 new ones land inside (expected (201 - 20) / 201 = 90.0%; the spread of the coverage
  // over calibration samples is about 2 points, so one seed's figure lies within 85-95%).
  std::mt19937 g(11);
  std::lognormal_distribution<double> d(0.0, 0.8);
  std::vector<double> sample(200);
  for (double& e : sample) e = d(g) - 1.0;
  const auto r = error_interval(sample);
  ASSERT_TRUE(r.has_value());
  int inside = 0;
  for (int i = 0; i < 20000; ++i) {
    const double x = d(g) - 1.0;
    inside += x >= r->first && x <= r->second ? 1 : 0;
  }
  EXPECT_GT(inside / 20000.0, 0.85);
  EXPECT_LT(inside / 20000.0, 0.95);
}

}  // namespace
}  // namespace moesim::calibrate
