// Timestamps in request traces: the wall-clock times of the Azure traces (dates, fractions, UTC offsets)
// and seconds split into whole seconds and picoseconds.
#include <cctype>
#include <cmath>

#include "request_trace_detail.hpp"

namespace moesim::sim::request_trace_detail {
namespace {

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

}  // namespace

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

/// A non-negative number of seconds as whole seconds plus picoseconds, without going through a picosecond
/// count that could overflow (BurstGPT's later files start 5e6 s in; 10^19 ps is past int64).
WallTime split_seconds(double s) {
  WallTime t;
  const double whole = std::floor(s);
  t.seconds = static_cast<std::int64_t>(whole);
  t.ps = std::llround((s - whole) * static_cast<double>(kPicosecondsPerSecond));
  if (t.ps >= kPicosecondsPerSecond) {
    t.seconds += 1;
    t.ps -= kPicosecondsPerSecond;
  }
  return t;
}

}  // namespace moesim::sim::request_trace_detail
