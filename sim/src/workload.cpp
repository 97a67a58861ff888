#include "moesim/model/fd_io.hpp"
#include "moesim/sim/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <tuple>

#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"

namespace moesim::sim {
namespace {

// ------------------------------------------------------------------------------------------------------
// Portable random numbers. Every draw is a pure function of (seed, stream, index, k): a counter-based
// generator, so request i's lengths do not depend on how many requests came before it or in what order a
// closed loop asks for them. The conversions to distributions are written out here because the standard
// library's are implementation-defined, and log/exp are computed from + - * / (the C library's last bit
// differs between platforms). Multiply-adds are separate statements so that Clang's default
// -ffp-contract=on cannot fuse them into FMAs.

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

/// splitmix64's output function (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number
/// generators"; constants from Vigna's splitmix64.c).
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

enum Stream : std::uint64_t { kArrivalStream = 0, kPromptStream = 1, kOutputStream = 2 };

/// 64 random bits for draw k of item `index` in `stream`: splitmix64 steps keyed by each coordinate.
std::uint64_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index, std::uint64_t k = 0) {
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

// fdlibm's split of ln 2: the high part has 32 significant bits, so q * kLn2Hi is exact for |q| < 2^21.
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;

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

/// The standard normal CDF, Phi(z) = erfc(-z / sqrt 2) / 2, with erfc from Numerical Recipes' Chebyshev
/// fit "erfcc" (Press et al., Numerical Recipes in C, 2nd ed., 1992, §6.2): fractional error < 1.2e-7
/// everywhere, tails included, which is all the truncation below needs.
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

/// A standard normal truncated to [a, b] (a < b, either may be infinite) by inversion: the quantile of a
/// uniform point between Phi(a) and Phi(b). When the interval lies above 0 it is mirrored to below 0,
/// where Phi(a) is small and keeps its relative precision (1 - Phi near 1 would lose it).
double truncated_std_normal(double a, double b, double u) {
  if (a > 0) return -truncated_std_normal(-b, -a, u);
  const double pa = std::isinf(a) ? 0.0 : std_normal_cdf(a);
  const double pb = std::isinf(b) ? 1.0 : std_normal_cdf(b);
  const double span = pb - pa;
  const double step = u * span;
  double p = pa + step;
  // Keep p strictly inside (0, 1) for the quantile; the result is clamped to [a, b] by the caller.
  p = std::clamp(p, 0x1.0p-1000, 1.0 - 0x1.0p-53);
  return std::clamp(std_normal_quantile(p), a, b);
}

/// Rounds x to the nearest integer in [lo, hi] (hi = 0: no upper bound; a cap of 2^53 keeps the
/// conversion exact).
std::int64_t round_into(double x, std::int64_t lo, std::int64_t hi) {
  const double top = hi > 0 ? static_cast<double>(hi) : 0x1.0p53;
  const double r = std::floor(std::clamp(x, static_cast<double>(lo), top) + 0.5);
  return std::clamp(static_cast<std::int64_t>(r), lo, hi > 0 ? hi : std::numeric_limits<std::int64_t>::max());
}

/// The length of item `index` under `spec`, from one uniform draw in `stream`.
std::int64_t draw_length(const LengthSpec& spec, std::uint64_t seed, std::uint64_t stream, std::int64_t index) {
  const std::uint64_t b = bits(seed, stream, static_cast<std::uint64_t>(index));
  switch (spec.kind) {
    case LengthKind::Fixed:
      return spec.value;
    case LengthKind::Uniform:
      return spec.min + static_cast<std::int64_t>(below(b, static_cast<std::uint64_t>(spec.max - spec.min + 1)));
    case LengthKind::Normal: {
      if (spec.std == 0) return round_into(spec.mean, spec.min, spec.max);
      // Truncating the continuous value to [min - 1/2, max + 1/2) and rounding gives exactly the normal
      // rounded to integers and conditioned on [min, max].
      const double lo = (static_cast<double>(spec.min) - 0.5 - spec.mean) / spec.std;
      const double hi = spec.max > 0 ? (static_cast<double>(spec.max) + 0.5 - spec.mean) / spec.std
                                     : std::numeric_limits<double>::infinity();
      const double z = truncated_std_normal(lo, hi, uniform_open(b));
      const double x = spec.mean + spec.std * z;
      return round_into(x, spec.min, spec.max);
    }
    case LengthKind::Lognormal: {
      if (spec.std == 0) return round_into(spec.mean, spec.min, spec.max);
      // A lognormal with mean m and standard deviation s has log-space parameters
      //   sigma^2 = ln(1 + s^2/m^2),  mu = ln m - sigma^2 / 2
      // (Johnson, Kotz, Balakrishnan, Continuous Univariate Distributions vol. 1, 2nd ed., ch. 14, eq. 14.8).
      const double cv = spec.std / spec.mean;
      const double sigma2 = det_log(1.0 + cv * cv);
      const double sigma = std::sqrt(sigma2);
      const double mu = det_log(spec.mean) - 0.5 * sigma2;
      const double lo = (det_log(static_cast<double>(spec.min) - 0.5) - mu) / sigma;
      const double hi = spec.max > 0 ? (det_log(static_cast<double>(spec.max) + 0.5) - mu) / sigma
                                     : std::numeric_limits<double>::infinity();
      const double z = truncated_std_normal(lo, hi, uniform_open(b));
      const double sz = sigma * z;
      return round_into(det_exp(mu + sz), spec.min, spec.max);
    }
  }
  MOESIM_CHECK(false, "unknown LengthKind");
  return 0;
}

// ------------------------------------------------------------------------------------------------------
// Limits and formatting.

/// The longest run accepted, in seconds: about 46 days, half of SimTime's 2^63 ps (106 days), so Poisson
/// gaps that run longer than their mean cannot overflow.
constexpr double kMaxRunSeconds = 4.0e6;

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// A short number for messages ("2", "0.5").
std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

SimTime seconds_to_ps(double s) {
  return static_cast<SimTime>(std::llround(s * static_cast<double>(kPicosecondsPerSecond)));
}

const std::vector<std::string>& arrival_names() {
  static const std::vector<std::string> kNames = {"poisson", "uniform", "closed-loop", "trace"};
  return kNames;
}
const std::vector<std::string>& length_names() {
  static const std::vector<std::string> kNames = {"fixed", "uniform", "normal", "lognormal"};
  return kNames;
}

void validate_length(const LengthSpec& l, const std::string& where) {
  auto fail = [&](const std::string& what) { return UserError(where + ": " + what); };
  switch (l.kind) {
    case LengthKind::Fixed:
      if (l.value < 1) {
        throw fail("is " + std::to_string(l.value) + " tokens; a length is at least 1 token");
      }
      return;
    case LengthKind::Uniform:
      if (l.min < 1) throw fail("min is " + std::to_string(l.min) + "; lengths are at least 1 token, set min >= 1");
      if (l.max < l.min) {
        throw fail("max " + std::to_string(l.max) + " is below min " + std::to_string(l.min) +
                   "; a uniform length needs min <= max");
      }
      return;
    case LengthKind::Normal:
    case LengthKind::Lognormal: {
      if (l.min < 1) throw fail("min is " + std::to_string(l.min) + "; lengths are at least 1 token, set min >= 1");
      if (l.max != 0 && l.max < l.min) {
        throw fail("max " + std::to_string(l.max) + " is below min " + std::to_string(l.min) +
                   "; set min <= max, or leave max out for no upper bound");
      }
      if (!std::isfinite(l.mean) || !std::isfinite(l.std) || l.std < 0) {
        throw fail("mean " + short_number(l.mean) + " and std " + short_number(l.std) +
                   " must be finite numbers with std >= 0");
      }
      const double hi = l.max > 0 ? static_cast<double>(l.max) : std::numeric_limits<double>::infinity();
      if (l.mean < static_cast<double>(l.min) || l.mean > hi) {
        // Outside the bounds almost nothing of the distribution is left to sample.
        throw fail("mean " + short_number(l.mean) + " is outside [min, max] = [" + std::to_string(l.min) + ", " +
                   (l.max > 0 ? std::to_string(l.max) : std::string("no limit")) +
                   "]; move the mean inside the bounds or widen them");
      }
      return;
    }
  }
}

// ------------------------------------------------------------------------------------------------------
// JSON.

LengthSpec parse_length(const json::Node& node, std::string_view key) {
  const nlohmann::json& v = node.raw().at(std::string(key));
  LengthSpec l;
  if (v.is_number()) {
    l.kind = LengthKind::Fixed;
    l.value = node.integer(key, 1);
    return l;
  }
  if (!v.is_object()) {
    throw node.error(key, "is " + json::type_name(v) +
                              ", expected a token count such as 2000 or a distribution such as "
                              "{\"dist\": \"normal\", \"mean\": 2000, \"std\": 200}");
  }
  const json::Node d = node.child(key);
  const std::string dist = d.string("dist");
  if (dist == "fixed") {
    d.expect_only({"dist", "value"});
    l.kind = LengthKind::Fixed;
    l.value = d.integer("value", 1);
  } else if (dist == "uniform") {
    d.expect_only({"dist", "min", "max"});
    l.kind = LengthKind::Uniform;
    l.min = d.integer("min", 1);
    l.max = d.integer("max", 1);
  } else if (dist == "normal" || dist == "lognormal") {
    d.expect_only({"dist", "mean", "std", "min", "max"});
    l.kind = dist == "normal" ? LengthKind::Normal : LengthKind::Lognormal;
    l.mean = d.number("mean");
    l.std = d.number("std");
    l.min = d.optional_integer("min", 1).value_or(1);
    l.max = d.optional_integer("max", 1).value_or(0);
    if (!(l.mean > 0)) throw d.error("mean", "is " + short_number(l.mean) + "; a mean length is > 0 tokens");
    if (l.std < 0) throw d.error("std", "is " + short_number(l.std) + "; a standard deviation is >= 0");
  } else {
    throw d.error("dist", "is \"" + dist + "\", not a known length distribution" +
                              text::did_you_mean(dist, length_names()) + "; valid: " + text::join(length_names()));
  }
  validate_length(l, d.where());
  return l;
}

nlohmann::json length_to_json(const LengthSpec& l) {
  switch (l.kind) {
    case LengthKind::Fixed:
      return l.value;
    case LengthKind::Uniform:
      return {{"dist", "uniform"}, {"min", l.min}, {"max", l.max}};
    case LengthKind::Normal:
    case LengthKind::Lognormal: {
      nlohmann::json j = {{"dist", std::string(name_of(l.kind))}, {"mean", l.mean}, {"std", l.std}, {"min", l.min}};
      if (l.max > 0) j["max"] = l.max;
      return j;
    }
  }
  MOESIM_CHECK(false, "unknown LengthKind");
  return {};
}

/// The keys each arrival kind uses (besides "arrival", "requests" and "seed").
std::vector<std::string> keys_of(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Uniform:
      return {"rate", "prompt", "output"};
    case ArrivalKind::ClosedLoop:
      return {"users", "user_interval", "think_time", "prompt", "output"};
    case ArrivalKind::Trace:
      return {"trace"};
  }
  return {};
}

// ------------------------------------------------------------------------------------------------------
// CSV.

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

void split_fields(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(trim(line.substr(start)));
      return;
    }
    out.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

/// Parses all of `s` as a number of type T; nullopt if anything is left over.
template <typename T>
std::optional<T> parse_whole(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  T v{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible Low-Level Date
/// Algorithms", days_from_civil).
std::int64_t days_from_civil(std::int64_t y, std::int64_t m, std::int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;                                    // [0, 399]
  const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;  // [0, 365]
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;            // [0, 146096]
  return era * 146097 + doe - 719468;
}

/// A wall-clock time as whole seconds since the epoch (UTC when an offset is given) plus picoseconds.
struct WallTime {
  std::int64_t seconds = 0;
  std::int64_t ps = 0;  ///< [0, 10^12)
};

/// "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" ('T' also separates date and time), as the Azure
/// traces write it: 2023 "2023-11-16 18:15:46.6805900", 2024 "2024-05-10 00:00:00.009930+00:00".
/// Fraction digits past the 12th (below a picosecond) are dropped.
std::optional<WallTime> parse_timestamp(std::string_view s) {
  std::size_t i = 0;
  auto digits = [&](std::size_t n) -> std::optional<std::int64_t> {
    if (i + n > s.size()) return std::nullopt;
    std::int64_t v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const char c = s[i + k];
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    i += n;
    return v;
  };
  auto expect = [&](std::string_view chars) {
    if (i < s.size() && chars.find(s[i]) != std::string_view::npos) {
      ++i;
      return true;
    }
    return false;
  };
  const auto y = digits(4);
  if (!y || !expect("-")) return std::nullopt;
  const auto mo = digits(2);
  if (!mo || !expect("-")) return std::nullopt;
  const auto d = digits(2);
  if (!d || !expect(" T")) return std::nullopt;
  const auto h = digits(2);
  if (!h || !expect(":")) return std::nullopt;
  const auto mi = digits(2);
  if (!mi || !expect(":")) return std::nullopt;
  const auto se = digits(2);
  if (!se) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *se > 60) return std::nullopt;
  WallTime t;
  if (expect(".")) {
    std::int64_t scale = 100'000'000'000;  // the first fraction digit is tenths: 10^11 ps
    std::size_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      t.ps += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
      ++n;
    }
    if (n == 0) return std::nullopt;
  }
  std::int64_t offset = 0;  // seconds east of UTC
  if (!expect("Z") && i < s.size() && (s[i] == '+' || s[i] == '-')) {
    const std::int64_t sign = s[i] == '-' ? -1 : 1;
    ++i;
    const auto oh = digits(2);
    if (!oh || !expect(":")) return std::nullopt;
    const auto om = digits(2);
    if (!om) return std::nullopt;
    offset = sign * (*oh * 3600 + *om * 60);
  }
  if (i != s.size()) return std::nullopt;
  t.seconds = days_from_civil(*y, *mo, *d) * 86400 + *h * 3600 + *mi * 60 + *se - offset;
  return t;
}

/// The index of the first of `names` in the header, or -1.
std::int64_t find_column(const std::vector<std::string>& header, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    for (std::size_t c = 0; c < header.size(); ++c) {
      if (header[c] == n) return static_cast<std::int64_t>(c);
    }
  }
  return -1;
}

}  // namespace

// ------------------------------------------------------------------------------------------------------

std::string_view name_of(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::Poisson:
      return "poisson";
    case ArrivalKind::Uniform:
      return "uniform";
    case ArrivalKind::ClosedLoop:
      return "closed-loop";
    case ArrivalKind::Trace:
      return "trace";
  }
  return "?";
}

std::string_view name_of(LengthKind k) {
  switch (k) {
    case LengthKind::Fixed:
      return "fixed";
    case LengthKind::Uniform:
      return "uniform";
    case LengthKind::Normal:
      return "normal";
    case LengthKind::Lognormal:
      return "lognormal";
  }
  return "?";
}

double parse_request_rate(std::string_view text, std::string_view where) {
  std::string_view s = text;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  auto fail = [&](const std::string& what) {
    return UserError(std::string(where) + ": \"" + std::string(text) + "\" " + what +
                     "; write a request rate with its unit, e.g. \"2/s\" (also \"2req/s\", \"120/min\", \"7200/h\")");
  };
  std::size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' || s[i] == '+' ||
                          ((s[i] == 'e' || s[i] == 'E') && i > 0))) {
    ++i;
  }
  const auto value = parse_whole<double>(s.substr(0, i));
  if (!value) throw fail("does not start with a number");
  std::string_view unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.empty()) throw fail("has no unit");
  if (unit.starts_with("req")) unit.remove_prefix(3);
  if (unit.starts_with("uest")) unit.remove_prefix(4);  // "request/s"
  if (unit.starts_with("s/")) unit.remove_prefix(1);    // "reqs/s", "requests/s"
  double per_second = 0;
  if (unit == "/s") {
    per_second = 1.0;
  } else if (unit == "/min") {
    per_second = 1.0 / 60.0;
  } else if (unit == "/h") {
    per_second = 1.0 / 3600.0;
  } else {
    throw fail("has an unknown unit '" + std::string(s.substr(i)) + "'");
  }
  const double rate = *value * per_second;
  if (!std::isfinite(rate) || rate <= 0) throw fail("is not a positive rate");
  return rate;
}

WorkloadSpec parse_workload(const json::Node& node, const std::filesystem::path& base_dir) {
  if (!node.raw().is_object()) throw node.error("is " + json::type_name(node.raw()) + ", expected an object { ... }");
  WorkloadSpec w;
  const std::string arrival = node.string("arrival");
  bool found = false;
  for (ArrivalKind k : {ArrivalKind::Poisson, ArrivalKind::Uniform, ArrivalKind::ClosedLoop, ArrivalKind::Trace}) {
    if (arrival == name_of(k)) {
      w.arrival = k;
      found = true;
    }
  }
  if (!found) {
    throw node.error("arrival", "is \"" + arrival + "\", not a known arrival process" +
                                    text::did_you_mean(arrival, arrival_names()) +
                                    "; valid: " + text::join(arrival_names()));
  }

  // Keys of another arrival kind get a message that says so; then anything else is unknown.
  std::vector<std::string> allowed = {"arrival", "requests", "seed"};
  for (const auto& k : keys_of(w.arrival)) allowed.push_back(k);
  for (const auto& [key, value] : node.raw().items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    for (ArrivalKind other :
         {ArrivalKind::Poisson, ArrivalKind::Uniform, ArrivalKind::ClosedLoop, ArrivalKind::Trace}) {
      const auto keys = keys_of(other);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
        throw node.error(key, "is not used with arrival \"" + arrival + "\"" +
                                  (w.arrival == ArrivalKind::Trace ? " (the trace file gives times and lengths)" : "") +
                                  "; remove it (keys for \"" + arrival + "\": " + text::join(keys_of(w.arrival)) + ")");
      }
    }
  }
  node.expect_only(allowed);

  if (w.arrival == ArrivalKind::Trace) {
    w.requests = node.optional_integer("requests", 0).value_or(0);
  } else {
    w.requests = node.optional_integer("requests", 1).value_or(100);
  }
  if (node.has("seed")) {
    const auto& s = node.raw().at("seed");
    w.seed = s.is_number_unsigned() ? s.get<std::uint64_t>() : static_cast<std::uint64_t>(node.integer("seed", 0));
  }

  switch (w.arrival) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Uniform: {
      const auto& r = node.raw().contains("rate") ? node.raw().at("rate") : nlohmann::json();
      if (r.is_null()) throw node.error("rate", "is missing; add the request rate with its unit, e.g. \"2/s\"");
      if (r.is_number()) {
        throw node.error("rate", "is the bare number " + r.dump() + "; write the request rate with its unit, e.g. \"" +
                                     r.dump() + "/s\" (requests per second)");
      }
      w.rate = parse_request_rate(node.string("rate"), node.where("rate"));
      break;
    }
    case ArrivalKind::ClosedLoop:
      w.users = node.optional_integer("users", 1).value_or(1);
      if (auto d = node.optional_quantity<units::Dimension::Time>("user_interval", true)) w.user_interval_s = d->base();
      if (auto d = node.optional_quantity<units::Dimension::Time>("think_time", true)) w.think_time_s = d->base();
      break;
    case ArrivalKind::Trace: {
      std::filesystem::path p = node.string("trace");
      if (p.empty()) throw node.error("trace", "is empty; give the request-trace CSV file");
      if (p.is_relative()) p = base_dir / p;
      w.trace_path = p.lexically_normal().string();
      break;
    }
  }
  if (w.arrival != ArrivalKind::Trace) {
    for (std::string_view key : {std::string_view("prompt"), std::string_view("output")}) {
      if (!node.has(key) || node.is_null(key)) {
        throw node.error(key, "is missing; add the " + std::string(key == "prompt" ? "prompt" : "output") +
                                  " length in tokens, e.g. 2000 or {\"dist\": \"normal\", \"mean\": 2000, \"std\": "
                                  "200}");
      }
      (key == "prompt" ? w.prompt : w.output) = parse_length(node, key);
    }
  }
  validate_workload(w, node.where());
  return w;
}

nlohmann::json workload_to_json(const WorkloadSpec& w) {
  nlohmann::json j = nlohmann::json::object();
  j["arrival"] = std::string(name_of(w.arrival));
  j["requests"] = w.requests;
  j["seed"] = w.seed;
  switch (w.arrival) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Uniform:
      j["rate"] = number_text(w.rate) + "/s";
      break;
    case ArrivalKind::ClosedLoop:
      j["users"] = w.users;
      j["user_interval"] = number_text(w.user_interval_s) + "s";
      j["think_time"] = number_text(w.think_time_s) + "s";
      break;
    case ArrivalKind::Trace:
      j["trace"] = w.trace_path;
      break;
  }
  if (w.arrival != ArrivalKind::Trace) {
    j["prompt"] = length_to_json(w.prompt);
    j["output"] = length_to_json(w.output);
  }
  return j;
}

void validate_workload(const WorkloadSpec& w, std::string_view where_view) {
  const std::string where(where_view);
  auto fail = [&](const std::string& key, const std::string& what) {
    return UserError(where + "." + key + ": " + what);
  };
  if (w.arrival == ArrivalKind::Trace) {
    if (w.requests < 0) throw fail("requests", "is " + std::to_string(w.requests) + "; use 0 for all rows, or N >= 1");
    if (w.trace_path.empty()) throw fail("trace", "is missing; give the request-trace CSV file");
    return;
  }
  if (w.requests < 1) throw fail("requests", "is " + std::to_string(w.requests) + "; a workload has >= 1 request");
  switch (w.arrival) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Uniform: {
      if (!std::isfinite(w.rate) || w.rate <= 0) {
        throw fail("rate", "is " + short_number(w.rate) + " requests/s; it must be > 0, e.g. \"2/s\"");
      }
      const double span = static_cast<double>(w.requests) / w.rate;
      if (span > kMaxRunSeconds) {
        throw fail("rate", short_number(static_cast<double>(w.requests)) + " requests at " + short_number(w.rate) +
                               "/s span " + short_number(span) + " s, more than the " + short_number(kMaxRunSeconds) +
                               " s a run can hold; raise the rate or lower requests");
      }
      break;
    }
    case ArrivalKind::ClosedLoop: {
      if (w.users < 1) throw fail("users", "is " + std::to_string(w.users) + "; a closed loop has >= 1 user");
      if (!std::isfinite(w.user_interval_s) || w.user_interval_s < 0) {
        throw fail("user_interval", "is " + short_number(w.user_interval_s) + " s; it must be >= 0, e.g. \"1s\"");
      }
      if (!std::isfinite(w.think_time_s) || w.think_time_s < 0) {
        throw fail("think_time", "is " + short_number(w.think_time_s) + " s; it must be >= 0, e.g. \"0s\"");
      }
      const double joins = static_cast<double>(std::min(w.users, w.requests) - 1) * w.user_interval_s;
      if (joins > kMaxRunSeconds || w.think_time_s > kMaxRunSeconds) {
        throw fail("user_interval", "users join over " + short_number(joins) + " s (think time " +
                                        short_number(w.think_time_s) + " s), more than the " +
                                        short_number(kMaxRunSeconds) +
                                        " s a run can hold; shorten user_interval or think_time, or lower users");
      }
      break;
    }
    case ArrivalKind::Trace:
      break;
  }
  validate_length(w.prompt, where + ".prompt");
  validate_length(w.output, where + ".output");
}

std::pair<std::int64_t, std::int64_t> lengths_for(const WorkloadSpec& w, std::int64_t index) {
  MOESIM_CHECK(w.arrival != ArrivalKind::Trace, "lengths_for: a trace's lengths come from its file");
  MOESIM_CHECK(index >= 0, "lengths_for: negative request index " + std::to_string(index));
  return {draw_length(w.prompt, w.seed, kPromptStream, index), draw_length(w.output, w.seed, kOutputStream, index)};
}

double mean_length(const LengthSpec& spec) {
  switch (spec.kind) {
    case LengthKind::Fixed:
      return static_cast<double>(spec.value);
    case LengthKind::Uniform:
      return 0.5 * (static_cast<double>(spec.min) + static_cast<double>(spec.max));
    case LengthKind::Normal:
    case LengthKind::Lognormal:
      // The untruncated mean (validate_workload keeps it inside [min, max]); truncation shifts it a little.
      return spec.mean;
  }
  return 0;
}

std::vector<Request> open_loop_requests(const WorkloadSpec& w) {
  MOESIM_CHECK(w.arrival != ArrivalKind::ClosedLoop,
               "open_loop_requests called for a closed-loop workload; use ClosedLoopUsers");
  if (w.arrival == ArrivalKind::Trace) return load_request_trace(w.trace_path, w.requests);
  MOESIM_CHECK(w.requests >= 1 && w.rate > 0, "open_loop_requests: workload not validated");
  // The list itself: a Request per request.
  model::require_memory(units::bytes(static_cast<double>(w.requests) * static_cast<double>(sizeof(Request))),
                        "the workload's " + std::to_string(w.requests) + " requests",
                        "give fewer requests (--requests, workload.requests), or use a machine with more memory");
  std::vector<Request> out(static_cast<std::size_t>(w.requests));
  // Mean gap in picoseconds; each gap is rounded to a whole picosecond and the times are summed as
  // integers, so the arrival times are exact sums and cannot drift with floating-point accumulation.
  const double mean_gap_ps = static_cast<double>(kPicosecondsPerSecond) / w.rate;
  SimTime t = 0;
  for (std::int64_t i = 0; i < w.requests; ++i) {
    Request& r = out[static_cast<std::size_t>(i)];
    r.id = i;
    if (w.arrival == ArrivalKind::Poisson) {
      // A Poisson process's gaps are i.i.d. exponential with mean 1/rate; inversion gives -ln(U)/rate for
      // U uniform in (0, 1) (Devroye, Non-Uniform Random Variate Generation, 1986, §II.2.1). The first
      // request arrives after the first gap: the process starts at 0 with no arrival there.
      const double u = uniform_open(bits(w.seed, kArrivalStream, static_cast<std::uint64_t>(i)));
      const double gap = -det_log(u) * mean_gap_ps;
      if (gap > static_cast<double>(std::numeric_limits<SimTime>::max() - t) - 1e6) {
        throw UserError("workload: the Poisson arrivals of " + std::to_string(w.requests) + " requests at " +
                        short_number(w.rate) +
                        "/s run past the simulator's time range; raise the rate or lower "
                        "requests");
      }
      t += static_cast<SimTime>(std::llround(gap));
      r.arrival = t;
    } else {
      // Request i at i / rate (validate_workload keeps (requests - 1) / rate within range).
      r.arrival = static_cast<SimTime>(std::llround(static_cast<double>(i) * mean_gap_ps));
    }
    std::tie(r.prompt_tokens, r.output_tokens) = lengths_for(w, i);
  }
  return out;
}

std::vector<Request> load_request_trace(const std::filesystem::path& csv, std::int64_t max_rows) {
  const std::string name = csv.string();
  std::error_code ec;
  if (!std::filesystem::exists(csv, ec) && !std::filesystem::is_symlink(csv, ec)) {
    throw UserError(name + ": no such request-trace file; check the path (relative paths are resolved against the "
                           "scenario file's directory)");
  }
  InputFile file(csv);  // a regular file, or a one-line refusal (no FIFO, device or directory)
  std::istream& in = file.stream();
  auto at = [&](std::int64_t line) { return name + ": line " + std::to_string(line); };

  std::string line;
  std::int64_t lineno = 0;
  // The header: the first non-blank line.
  std::vector<std::string> header;
  std::vector<std::string_view> fields;
  // A line is held as text and split into views: about twice its size in memory.
  const LineBound max_line = line_bound(2.0);
  while (read_line(in, line, max_line, name, lineno + 1)) {
    ++lineno;
    std::string_view l = line;
    if (lineno == 1 && l.starts_with("\xEF\xBB\xBF")) l.remove_prefix(3);  // UTF-8 byte-order mark
    if (trim(l).empty()) continue;
    split_fields(l, fields);
    for (auto f : fields) header.emplace_back(f);
    break;
  }
  if (header.empty()) {
    throw UserError(name +
                    ": is empty; a request trace starts with a header row such as "
                    "arrival_s,prompt_tokens,output_tokens (or Azure's TIMESTAMP,ContextTokens,GeneratedTokens)");
  }
  const std::int64_t header_line = lineno;
  const std::int64_t col_arrival_s = find_column(header, {"arrival_s"});
  const std::int64_t col_timestamp = find_column(header, {"TIMESTAMP"});
  const std::int64_t col_prompt = find_column(header, {"prompt_tokens", "ContextTokens"});
  const std::int64_t col_output = find_column(header, {"output_tokens", "GeneratedTokens"});
  auto missing = [&](const std::string& what) {
    return UserError(at(header_line) + ": the header has no " + what +
                     " column; its columns are: " + text::join(header) +
                     "; a request trace needs arrival_s (or TIMESTAMP), prompt_tokens (or ContextTokens) and "
                     "output_tokens (or GeneratedTokens)");
  };
  if (col_arrival_s < 0 && col_timestamp < 0) throw missing("arrival-time (arrival_s or TIMESTAMP)");
  if (col_prompt < 0) throw missing("prompt-length (prompt_tokens or ContextTokens)");
  if (col_output < 0) throw missing("output-length (output_tokens or GeneratedTokens)");
  // A column given twice, or one quantity under two of its names, would make which value is read depend on
  // column order: refused.
  for (std::size_t i = 0; i < header.size(); ++i)
    for (std::size_t j = i + 1; j < header.size(); ++j)
      if (!header[i].empty() && header[i] == header[j])
        throw UserError(at(header_line) + ": the header names the column " + header[i] + " twice (columns " +
                        std::to_string(i + 1) + " and " + std::to_string(j + 1) + "); keep one");
  for (const auto& names : std::vector<std::vector<std::string>>{
           {"arrival_s", "TIMESTAMP"}, {"prompt_tokens", "ContextTokens"}, {"output_tokens", "GeneratedTokens"}}) {
    std::vector<std::string> given;
    for (const auto& h : header)
      if (std::find(names.begin(), names.end(), h) != names.end()) given.push_back(h);
    if (given.size() > 1) {
      throw UserError(at(header_line) + ": the header gives the " + names.front() + " column " +
                      std::to_string(given.size()) + " times (" + text::join(given) + "); keep one");
    }
  }
  const bool seconds_column = col_arrival_s >= 0;
  const std::int64_t col_time = seconds_column ? col_arrival_s : col_timestamp;
  const std::int64_t needed = std::max({col_time, col_prompt, col_output}) + 1;

  std::vector<Request> out;
  WallTime first;
  SimTime previous = 0;
  std::int64_t previous_line = 0;
  while ((max_rows == 0 || static_cast<std::int64_t>(out.size()) < max_rows) &&
         read_line(in, line, max_line, name, lineno + 1)) {
    ++lineno;
    if (trim(line).empty()) continue;
    split_fields(line, fields);
    auto field_error = [&](std::int64_t col, const std::string& what) {
      return UserError(at(lineno) + ", column " + header[static_cast<std::size_t>(col)] + ": " + what);
    };
    if (static_cast<std::int64_t>(fields.size()) < needed) {
      for (std::int64_t c : {col_time, col_prompt, col_output}) {
        if (c >= static_cast<std::int64_t>(fields.size())) {
          throw field_error(c, "is missing: the row has " + std::to_string(fields.size()) + " fields, the header " +
                                   std::to_string(header.size()) + "; give every row a value in each column");
        }
      }
    }
    const std::string_view time_text = fields[static_cast<std::size_t>(col_time)];
    SimTime arrival = 0;
    if (seconds_column) {
      const auto s = parse_whole<double>(time_text);
      if (!s || !std::isfinite(*s)) {
        throw field_error(col_time, "\"" + std::string(time_text) +
                                        "\" is not a number; write seconds from the start as a decimal, e.g. 12.5");
      }
      if (*s < 0) {
        throw field_error(col_time, std::string(time_text) +
                                        " is negative; arrival times are seconds from the start of the run, >= 0");
      }
      if (*s > kMaxRunSeconds) {
        throw field_error(col_time, std::string(time_text) + " s is past the " + short_number(kMaxRunSeconds) +
                                        " s a run can hold; check the unit (seconds) or trim the trace");
      }
      arrival = seconds_to_ps(*s);
    } else {
      const auto t = parse_timestamp(time_text);
      if (!t) {
        throw field_error(col_time, "\"" + std::string(time_text) +
                                        "\" is not a timestamp like 2023-11-16 18:15:46.6805900 (optionally with a "
                                        "UTC offset, +00:00)");
      }
      if (out.empty()) first = *t;
      const std::int64_t ds = t->seconds - first.seconds;
      if (static_cast<double>(ds) > kMaxRunSeconds) {
        throw field_error(col_time, "\"" + std::string(time_text) + "\" is more than " + short_number(kMaxRunSeconds) +
                                        " s after the first row's time, more than a run can hold; trim the trace");
      }
      arrival = ds * kPicosecondsPerSecond + (t->ps - first.ps);
      if (arrival < 0) {
        throw field_error(col_time, "\"" + std::string(time_text) + "\" is earlier than the first row's time (line " +
                                        std::to_string(header_line + 1) +
                                        "); times must not decrease; sort the file by time");
      }
    }
    if (!out.empty() && arrival < previous) {
      throw field_error(col_time, "\"" + std::string(time_text) + "\" is earlier than line " +
                                      std::to_string(previous_line) +
                                      "'s time; times must not decrease; sort the file by time");
    }
    Request r;
    r.id = static_cast<std::int64_t>(out.size());
    r.arrival = arrival;
    for (std::int64_t col : {col_prompt, col_output}) {
      const std::string_view t = fields[static_cast<std::size_t>(col)];
      const auto n = parse_whole<std::int64_t>(t);
      if (!n) {
        throw field_error(col, "\"" + std::string(t) + "\" is not a whole number; token counts are integers >= 1");
      }
      if (*n < 1) {
        std::string fix = "token counts are >= 1";
        if (col == col_output) {
          // Azure's traces have such rows; say how to drop them (awk numbers fields from 1).
          const std::string f = std::to_string(col + 1);
          fix = "a request generates at least 1 token; drop such rows, e.g. awk -F, 'NR==1 || $" + f + " > 0' " + name +
                " > filtered.csv";
        }
        throw field_error(col, std::string(t) + " is not a token count >= 1; " + fix);
      }
      (col == col_prompt ? r.prompt_tokens : r.output_tokens) = *n;
    }
    out.push_back(r);
    previous = arrival;
    previous_line = lineno;
  }
  if (in.bad()) throw UserError(name + ": a read error after line " + std::to_string(lineno) + "; check the file");
  if (out.empty()) {
    throw UserError(name + ": has a header but no requests; add rows below the header (line " +
                    std::to_string(header_line) + ")");
  }
  return out;
}

// ------------------------------------------------------------------------------------------------------

ClosedLoopUsers::ClosedLoopUsers(const WorkloadSpec& spec)
    : spec_(spec), interval_(seconds_to_ps(spec.user_interval_s)), think_(seconds_to_ps(spec.think_time_s)) {
  MOESIM_CHECK(spec.arrival == ArrivalKind::ClosedLoop, "ClosedLoopUsers needs a closed-loop workload");
  MOESIM_CHECK(spec.users >= 1 && spec.requests >= 1 && interval_ >= 0 && think_ >= 0,
               "ClosedLoopUsers: workload not validated");
}

std::int64_t ClosedLoopUsers::users() const { return std::min(spec_.users, spec_.requests); }

SimTime ClosedLoopUsers::join_time(std::int64_t user) const {
  MOESIM_CHECK(user >= 0 && user < users(), "ClosedLoopUsers::join_time: no user " + std::to_string(user));
  return user * interval_;
}

SimTime ClosedLoopUsers::next_send_time(SimTime completed) const { return completed + think_; }

std::optional<Request> ClosedLoopUsers::send(std::int64_t user, SimTime now) {
  MOESIM_CHECK(user >= 0 && user < users(), "ClosedLoopUsers::send: no user " + std::to_string(user));
  MOESIM_CHECK(now >= last_send_, "ClosedLoopUsers::send: requests must be sent in time order (ids follow arrivals)");
  if (sent_ >= spec_.requests) return std::nullopt;
  last_send_ = now;
  Request r;
  r.id = sent_++;
  r.arrival = now;
  r.user = user;
  std::tie(r.prompt_tokens, r.output_tokens) = lengths_for(spec_, r.id);
  return r;
}

}  // namespace moesim::sim
