// Request workloads, length distributions: fixed, uniform, truncated normal and lognormal prompt lengths.
// Statistical checks use 20,000 draws and 3-sigma bounds derived in each test's comment.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/sim/workload.hpp"
#include "workload_test_support.hpp"

using moesim::test::expect_user_error;

namespace {

using moesim::sim::ArrivalKind;
using moesim::sim::LengthKind;
using moesim::sim::LengthSpec;
using moesim::sim::WorkloadSpec;
using moesim::test::workload::open_spec;

struct LengthMoments {
  double mean = 0, std = 0;
  std::int64_t min = 0, max = 0;
};

/// LengthMoments of the prompt lengths of requests 0..n-1 under `prompt`.
LengthMoments prompt_moments(const LengthSpec& prompt, std::int64_t n, std::uint64_t seed = 1) {
  WorkloadSpec w = open_spec(ArrivalKind::Poisson, 1.0, n, seed);
  w.prompt = prompt;
  moesim::sim::validate_workload(w, "test");
  LengthMoments m;
  m.min = std::numeric_limits<std::int64_t>::max();
  double sum = 0, sum2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto len = moesim::sim::lengths_for(w, i).first;
    sum += static_cast<double>(len);
    sum2 += static_cast<double>(len) * static_cast<double>(len);
    m.min = std::min(m.min, len);
    m.max = std::max(m.max, len);
  }
  m.mean = sum / static_cast<double>(n);
  m.std = std::sqrt(sum2 / static_cast<double>(n) - m.mean * m.mean);
  return m;
}

// ------------------------------------------------------------------------------------------------------
// Lengths.

// Fixed: every request gets the value.
// Uniform [100, 200]: 101 equally likely integers, mean 150, sd sqrt((101^2 - 1)/12) = 29.15, standard
// error 29.15/sqrt(20000) = 0.206, so 150 +- 0.62; min 100 and max 200 are both hit.
TEST(WorkloadLengths, FixedAndUniform) {
  const auto fixed = prompt_moments({LengthKind::Fixed, 7}, 100);
  EXPECT_EQ(fixed.min, 7);
  EXPECT_EQ(fixed.max, 7);
  const auto u = prompt_moments({LengthKind::Uniform, 0, 100, 200}, 20000);
  EXPECT_EQ(u.min, 100);
  EXPECT_EQ(u.max, 200);
  EXPECT_NEAR(u.mean, 150.0, 3 * 29.15 / std::sqrt(20000.0));
  EXPECT_NEAR(u.std, 29.15, 29.15 * 0.03);
}

// Normal(2000, 200), bounds [1, none]: the truncation at 0.5 removes nothing measurable (10 sigma), so the
// mean is 2000 +- 3 * 200/sqrt(20000) = 4.24 and the sd 200 within 3% (its standard error is 0.5%).
// Tight bounds [1900, 2100] are symmetric about the mean: every length inside, mean still 2000 +- 4.24.
// Half a normal: Normal(100, 50) with min 100 keeps X > 99.5, i.e. Z > a = -0.01, whose mean is
// 100 + 50 phi(a)/(1 - Phi(a)) = 100 + 50 * 0.398922/0.503989 = 139.58; the half-normal's sd is
// 50 sqrt(1 - 2/pi) = 30.1, so +- 3 * 30.1/sqrt(20000) = 0.64 (+0.1 for rounding to integers).
TEST(WorkloadLengths, NormalMeanStdAndTruncation) {
  const auto wide = prompt_moments({LengthKind::Normal, 0, 1, 0, 2000, 200}, 20000);
  EXPECT_NEAR(wide.mean, 2000.0, 3 * 200 / std::sqrt(20000.0));
  EXPECT_NEAR(wide.std, 200.0, 6.0);
  EXPECT_GE(wide.min, 1);

  const auto tight = prompt_moments({LengthKind::Normal, 0, 1900, 2100, 2000, 200}, 20000);
  EXPECT_GE(tight.min, 1900);
  EXPECT_LE(tight.max, 2100);
  EXPECT_NEAR(tight.mean, 2000.0, 3 * 200 / std::sqrt(20000.0));

  const auto half = prompt_moments({LengthKind::Normal, 0, 100, 0, 100, 50}, 20000);
  EXPECT_GE(half.min, 100);
  EXPECT_NEAR(half.mean, 139.58, 3 * 30.1 / std::sqrt(20000.0) + 0.1);
}

// Lognormal with mean 256 and sd 128 of the length itself (sigma^2 = ln 1.25, mu = ln 256 - sigma^2/2):
// the sample mean is 256 +- 3 * 128/sqrt(20000) = 2.7 and the sd 128 within 10% (heavier tail than a
// normal); the lower bound at 0.5 cuts off a mass of about 1e-35. With max 300 every length is <= 300.
TEST(WorkloadLengths, LognormalMeanStdAndBounds) {
  const auto wide = prompt_moments({LengthKind::Lognormal, 0, 1, 0, 256, 128}, 20000);
  EXPECT_NEAR(wide.mean, 256.0, 3 * 128 / std::sqrt(20000.0));
  EXPECT_NEAR(wide.std, 128.0, 12.8);
  EXPECT_GE(wide.min, 1);
  const auto capped = prompt_moments({LengthKind::Lognormal, 0, 10, 300, 256, 128}, 20000);
  EXPECT_GE(capped.min, 10);
  EXPECT_LE(capped.max, 300);
  EXPECT_EQ(capped.max, 300);  // about 30% of the mass lies above 300.5; the draws reach the bound
}

}  // namespace
