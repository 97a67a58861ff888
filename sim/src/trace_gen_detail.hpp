#pragma once
// Internals of the routing-trace generator shared by trace_gen.cpp, trace_gen_random.cpp and
// trace_gen_calibrate.cpp: portable random numbers, popularity vectors and small formatting helpers.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moesim/sim/trace_gen.hpp"

namespace moesim::sim::trace_gen_detail {

/// splitmix64 (Steele, Lea, Flood 2014): derives independent seeds for the streams below from one seed.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream);

/// Natural log for x > 0, for n values at once (trace_gen_random.cpp; the result does not depend on n).
void det_log_n(const double* x, double* out, std::size_t n);
double det_log(double x);
/// e^x for n values at once (trace_gen_random.cpp).
void det_exp_n(const double* x, double* out, std::size_t n);
double det_exp(double x);

// std::mt19937_64's output is fixed by the standard; the conversions below are written out, because the
// standard library's distributions are implementation-defined (see trace_gen_random.cpp).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  /// Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  /// Uniform in (0, 1).
  double uniform_open() { return (static_cast<double>(g_() >> 11) + 0.5) * 0x1.0p-53; }
  /// Uniform integer in [0, n): rejecting the lowest 2^64 mod n outputs leaves a multiple of n values.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    std::uint64_t x = g_();
    while (x < threshold) x = g_();
    return x % n;
  }
  /// Standard normal, Marsaglia's polar method (1964); the second variate of each pair is dropped.
  double normal() {
    double z = 0;
    normals(&z, 1);
    return z;
  }
  /// n standard normals (the same values, in the same order, as n calls of normal()).
  void normals(double* z, std::size_t n) {
    constexpr std::size_t kLanes = 16;
    for (std::size_t base = 0; base < n; base += kLanes) {
      const std::size_t w = std::min(kLanes, n - base);
      double u[kLanes], s[kLanes], l[kLanes];
      for (std::size_t i = 0; i < w; ++i) {
        while (true) {
          u[i] = 2.0 * uniform01() - 1.0;
          const double v = 2.0 * uniform01() - 1.0;
          s[i] = u[i] * u[i] + v * v;
          if (s[i] < 1.0 && s[i] != 0.0) break;
        }
      }
      det_log_n(s, l, w);
      // sqrt is correctly rounded (IEEE 754), so portable.
      for (std::size_t i = 0; i < w; ++i) z[base + i] = u[i] * std::sqrt(-2.0 * l[i] / s[i]);
    }
  }

 private:
  std::mt19937_64 g_;
};

/// rho per MoE layer (none: 0; one value: every layer).
std::vector<double> rho_per_layer(const TraceGenOptions& o);
/// A number with 4 significant digits, for messages and the trace header.
std::string fmt(double x);
/// One value when all are equal, else "[a,b,...]".
std::string list_text(const std::vector<double>& v);

}  // namespace moesim::sim::trace_gen_detail
