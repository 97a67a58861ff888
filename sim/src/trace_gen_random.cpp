// The routing-trace generator's portable random numbers: stream seeds, and exp/log from + - * / only
// (the Rng built on std::mt19937_64 is in trace_gen_detail.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "moesim/sim/splitmix64.hpp"
#include "trace_gen_detail.hpp"

namespace moesim::sim::trace_gen_detail {

// ------------------------------------------------------------------------------------------------------
// Portable random numbers. std::mt19937_64's output is fixed by the standard ([rand.predef]: the 10000th
// value is 9981545732273789042); everything built on it here is written out, because the standard library's
// distributions are implementation-defined (libstdc++ and libc++ give different values for the same engine).

/// splitmix64 (Steele, Lea, Flood 2014): derives independent seeds for the streams below from one seed.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return splitmix64_mix(seed + kSplitMixGamma * (stream + 1));
}

// exp and log from + - * / and exact scalings, so no C library difference (glibc vs macOS libm differ in
// the last bit of some results) can change a trace. Statements are kept separate so that a compiler's
// -ffp-contract=on (Clang's default) cannot fuse them into FMAs.
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2: hi has 32 significant bits
constexpr double kLn2Lo = 1.90821492927058770002e-10;

/// 1/n for n = 0..23 (index 0 unused): exact-rounded constants, so the loops below multiply instead of divide.
constexpr double kInv[24] = {0.0,      1.0 / 1,  1.0 / 2,  1.0 / 3,  1.0 / 4,  1.0 / 5,  1.0 / 6,  1.0 / 7,
                             1.0 / 8,  1.0 / 9,  1.0 / 10, 1.0 / 11, 1.0 / 12, 1.0 / 13, 1.0 / 14, 1.0 / 15,
                             1.0 / 16, 1.0 / 17, 1.0 / 18, 1.0 / 19, 1.0 / 20, 1.0 / 21, 1.0 / 22, 1.0 / 23};

/// Natural log for x > 0, for n values at once: x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m =
/// 2 atanh(f), f = (m-1)/(m+1), |f| < 0.172, summed to f^23 (truncation < 1e-19). The lanes run side by side
/// (the Horner chains are independent, so they overlap in the pipeline); each lane does exactly the scalar
/// sequence of operations, so the result does not depend on n.
void det_log_n(const double* x, double* out, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  for (std::size_t base = 0; base < n; base += kLanes) {
    const std::size_t w = std::min(kLanes, n - base);
    double f[kLanes], f2[kLanes], sum[kLanes], ex[kLanes];
    for (std::size_t i = 0; i < w; ++i) {
      int e = 0;
      double m = std::frexp(x[base + i], &e);  // m in [0.5, 1)
      if (m < 0.70710678118654752440) {
        m = m * 2.0;
        e = e - 1;
      }
      f[i] = (m - 1.0) / (m + 1.0);
      f2[i] = f[i] * f[i];
      sum[i] = kInv[23];
      ex[i] = static_cast<double>(e);
    }
    for (int k = 21; k >= 1; k -= 2) {
      for (std::size_t i = 0; i < w; ++i) {
        const double t = sum[i] * f2[i];
        sum[i] = t + kInv[k];
      }
    }
    for (std::size_t i = 0; i < w; ++i) {
      const double log_m = 2.0 * f[i] * sum[i];
      const double hi = ex[i] * kLn2Hi;
      const double lo = ex[i] * kLn2Lo;
      const double r = lo + log_m;
      out[base + i] = hi + r;
    }
  }
}

double det_log(double x) {
  double y = 0;
  det_log_n(&x, &y, 1);
  return y;
}

/// e^x for n values at once: x = n ln2 + r, |r| <= ln2/2, e^r by its Taylor series to r^18 (truncation
/// < 1e-19), times 2^n (exact). Lanes as in det_log_n.
void det_exp_n(const double* x, double* out, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  for (std::size_t base = 0; base < n; base += kLanes) {
    const std::size_t w = std::min(kLanes, n - base);
    double r[kLanes], sum[kLanes], q[kLanes];
    for (std::size_t i = 0; i < w; ++i) {
      const double xi = std::clamp(x[base + i], -745.0, 709.0);
      q[i] = std::floor(xi / 0.69314718055994530942 + 0.5);
      const double a = q[i] * kLn2Hi;
      const double b = q[i] * kLn2Lo;
      const double r1 = xi - a;
      r[i] = r1 - b;
      sum[i] = 1.0;
    }
    for (int k = 18; k >= 1; --k) {
      for (std::size_t i = 0; i < w; ++i) {
        const double t = sum[i] * r[i];
        const double u = t * kInv[k];
        sum[i] = 1.0 + u;
      }
    }
    for (std::size_t i = 0; i < w; ++i) {
      out[base + i] = x[base + i] < -745.0 ? 0.0 : std::ldexp(sum[i], static_cast<int>(q[i]));
    }
  }
}

double det_exp(double x) {
  double y = 0;
  det_exp_n(&x, &y, 1);
  return y;
}

}  // namespace moesim::sim::trace_gen_detail
