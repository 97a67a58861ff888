#include "det_random.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "moesim/sim/splitmix64.hpp"

// The definitions behind det_random.hpp (moved here from workload.cpp, unchanged, so that the workload
// and the routing-trace generator share one copy). Multiply-adds are separate statements so that
// Clang's default -ffp-contract=on cannot fuse them into FMAs; the file is compiled with -ffp-contract=off
// besides (sim/CMakeLists.txt).

namespace moesim::sim::det {
namespace {

constexpr std::uint64_t kGolden = kSplitMixGamma;

// fdlibm's split of ln 2: the high part has 32 significant bits, so q * kLn2Hi is exact for |q| < 2^21.
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;

/// Horner evaluation c[0] x^(n-1) + ... + c[n-1], one operation per statement (see the note above).
template <std::size_t N>
double horner(const double (&c)[N], double x) {
  double s = c[0];
  for (std::size_t i = 1; i < N; ++i) {
    const double t = s * x;
    s = t + c[i];
  }
  return s;
}

}  // namespace

/// splitmix64's output function (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number
/// generators"; constants from Vigna's splitmix64.c).
std::uint64_t mix64(std::uint64_t z) { return splitmix64_mix(z); }

/// 64 random bits for draw k of item `index` in `stream`: splitmix64 steps keyed by each coordinate.
std::uint64_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index, std::uint64_t k) {
  std::uint64_t z = mix64(seed + kGolden * (stream + 1));
  z = mix64(z + kGolden * (index + 1));
  return mix64(z + kGolden * (k + 1));
}

/// Uniform in (0, 1), never 0 or 1: the top 53 bits plus one half, times 2^-53.
double uniform_open(std::uint64_t b) { return (static_cast<double>(b >> 11) + 0.5) * 0x1.0p-53; }

/// Uniform integer in [0, n): the high 64 bits of b * n (Lemire 2019, "Fast random integer generation in
/// an interval", ACM TOMACS 29(1), without the rejection step: the bias is below n / 2^64).
std::uint64_t below(std::uint64_t b, std::uint64_t n) {
  __extension__ using U128 = unsigned __int128;
  return static_cast<std::uint64_t>((static_cast<U128>(b) * n) >> 64);
}

/// Natural log for x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(f) with
/// f = (m-1)/(m+1), |f| < 0.172, summed to f^23 (the next term is < 1e-19).
double det_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact; m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m = m * 2.0;
    e = e - 1;
  }
  const double f = (m - 1.0) / (m + 1.0);
  const double f2 = f * f;
  double sum = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) {
    const double t = sum * f2;
    sum = t + 1.0 / static_cast<double>(k);
  }
  const double log_m = 2.0 * f * sum;
  const double ed = static_cast<double>(e);
  const double hi = ed * kLn2Hi;
  const double lo = ed * kLn2Lo;
  const double r = lo + log_m;
  return hi + r;
}

/// e^x: x = q ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^18 (the rest is < 1e-19), times
/// 2^q (exact). 0 below -745 (e^x underflows there anyway); clamped at 709 (just below overflow).
double det_exp(double x) {
  if (x < -745.0) return 0.0;
  x = std::min(x, 709.0);
  const double q = std::floor(x / 0.69314718055994530942 + 0.5);
  const double a = q * kLn2Hi;
  const double b = q * kLn2Lo;
  const double r1 = x - a;
  const double r = r1 - b;
  double sum = 1.0;
  for (int k = 18; k >= 1; --k) {
    const double t = sum * r;
    const double u = t / static_cast<double>(k);
    sum = 1.0 + u;
  }
  return std::ldexp(sum, static_cast<int>(q));
}

/// The standard normal CDF, Phi(z) = erfc(-z / sqrt 2) / 2, with erfc from Numerical Recipes' Chebyshev
/// fit "erfcc" (Press et al., Numerical Recipes in C, 2nd ed., 1992, §6.2): fractional error < 1.2e-7
/// everywhere, tails included, which is all the truncated normal of workload.cpp needs.
double std_normal_cdf(double z) {
  static constexpr double kC[] = {0.17087277,  -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                                  -0.18628806, 0.09678418,  0.37409196, 1.00002368,  -1.26551223};
  const double x = -z * 0.70710678118654752440;
  const double ax = std::fabs(x);
  const double t = 1.0 / (1.0 + 0.5 * ax);
  const double poly = horner(kC, t);
  const double sq = ax * ax;
  const double erfc_ax = t * det_exp(poly - sq);
  const double erfc_x = x >= 0 ? erfc_ax : 2.0 - erfc_ax;
  return 0.5 * erfc_x;
}

/// The standard normal quantile Phi^-1(p), 0 < p < 1: Acklam's rational approximations (P. J. Acklam,
/// "An algorithm for computing the inverse normal cumulative distribution function", 2003; relative
/// error < 1.15e-9), with the tails on sqrt(-2 log p).
double std_normal_quantile(double p) {
  static constexpr double kA[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                  1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double kB[] = {-5.447609879822406e+01, 1.615858368580409e+02,  -1.556989798598866e+02,
                                  6.680131188771972e+01,  -1.328068155288572e+01, 1.0};
  static constexpr double kC[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                  -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double kD[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                  3.754408661907416e+00, 1.0};
  constexpr double kLow = 0.02425;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * det_log(p));
    return horner(kC, q) / horner(kD, q);
  }
  if (p > 1.0 - kLow) {
    const double q = std::sqrt(-2.0 * det_log(1.0 - p));
    return -(horner(kC, q) / horner(kD, q));
  }
  const double q = p - 0.5;
  const double r = q * q;
  return horner(kA, r) * q / horner(kB, r);
}

}  // namespace moesim::sim::det
