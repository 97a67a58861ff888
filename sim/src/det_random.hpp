#pragma once
// Portable random numbers and the functions built on them, shared by the workload generator
// (workload.cpp) and the routing-trace generator (trace_gen.cpp). Internal to the sim module.
//
// Every result is the same on every platform: the bits are splitmix64's, the conversions to distributions
// are written out here because the standard library's are implementation-defined, and log/exp are
// computed from + - * / (the C library's last bit differs between platforms). Multiply-adds are separate
// statements, and every file that includes this header is compiled with -ffp-contract=off
// (sim/CMakeLists.txt), so that no compiler fuses them into FMAs.

#include <cmath>
#include <cstdint>

namespace moesim::sim::det {

/// splitmix64's output function (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number
/// generators"; constants from Vigna's splitmix64.c).
std::uint64_t mix64(std::uint64_t z);

/// 64 random bits for draw k of item `index` in `stream`: splitmix64 steps keyed by each coordinate. A
/// counter-based generator: draw (seed, stream, index, k) does not depend on any other draw.
std::uint64_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index, std::uint64_t k = 0);

/// Uniform in (0, 1), never 0 or 1: the top 53 bits plus one half, times 2^-53.
double uniform_open(std::uint64_t b);

/// Uniform integer in [0, n): the high 64 bits of b * n (Lemire 2019, "Fast random integer generation in
/// an interval", ACM TOMACS 29(1), without the rejection step: the bias is below n / 2^64).
std::uint64_t below(std::uint64_t b, std::uint64_t n);

/// Natural log for x > 0 (error below 1e-16 relative; see det_random.cpp).
double det_log(double x);

/// e^x; 0 below -745, clamped at 709 (just below overflow).
double det_exp(double x);

/// The standard normal CDF Phi(z) (fractional error < 1.2e-7, tails included).
double std_normal_cdf(double z);

/// The standard normal quantile Phi^-1(p), 0 < p < 1 (relative error < 1.15e-9).
double std_normal_quantile(double p);

/// Draws k = 0, 1, 2, ... of one item of one stream, for the samplers below that need a variable number of
/// uniforms (rejection): item `index`'s draws depend on nothing but (seed, stream, index).
class CounterRng {
 public:
  CounterRng(std::uint64_t seed, std::uint64_t stream, std::uint64_t index)
      : seed_(seed), stream_(stream), index_(index) {}
  /// Uniform in (0, 1).
  double uniform_open() { return det::uniform_open(bits(seed_, stream_, index_, k_++)); }
  /// Standard normal by inversion of one uniform.
  double normal() { return std_normal_quantile(uniform_open()); }

 private:
  std::uint64_t seed_, stream_, index_;
  std::uint64_t k_ = 0;
};

/// log of a Gamma(a, 1) variate, a > 0: Marsaglia & Tsang (2000, "A simple method for generating gamma
/// variables", ACM TOMS 26(3)) for a >= 1; for a < 1, Gamma(a+1) * U^(1/a) (their section 6), kept in
/// logs so that tiny shapes do not underflow to zero. `Rng` gives normal() and uniform_open() (in (0, 1)).
template <class Rng>
double log_gamma_variate(double a, Rng& r) {
  if (a < 1.0) {
    const double lg = log_gamma_variate(a + 1.0, r);
    return lg + det_log(r.uniform_open()) / a;
  }
  const double d = a - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);  // sqrt is correctly rounded (IEEE 754), so portable
  while (true) {
    const double z = r.normal();
    const double t = 1.0 + c * z;
    if (t <= 0.0) continue;
    const double v = t * t * t;
    const double u = r.uniform_open();
    const double z2 = z * z;
    if (u < 1.0 - 0.0331 * z2 * z2) return det_log(d * v);
    if (det_log(u) < 0.5 * z2 + d * (1.0 - v + det_log(v))) return det_log(d * v);
  }
}

}  // namespace moesim::sim::det
