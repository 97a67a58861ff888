#include "moesim/model/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include "moesim/model/error.hpp"

namespace moesim::units {
namespace {

struct Prefix {
  std::string_view symbol;
  double factor;
};

// SI prefixes (BIPM SI Brochure, 9th ed., Table 7). "K" is accepted for kilo because datasheets write
// "KB"; it still means 1000. IEC 80000-13 binary prefixes are listed first so that "Ki" wins over "K".
constexpr std::array<Prefix, 6> kIecPrefixes = {{{"Ki", 1024.0},
                                                 {"Mi", 1048576.0},
                                                 {"Gi", 1073741824.0},
                                                 {"Ti", 1099511627776.0},
                                                 {"Pi", 1125899906842624.0},
                                                 {"Ei", 1152921504606846976.0}}};
constexpr std::array<Prefix, 7> kBigSiPrefixes = {
    {{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}}};
constexpr std::array<Prefix, 5> kSmallSiPrefixes = {
    {{"m", 1e-3}, {"u", 1e-6}, {"\xC2\xB5", 1e-6}, {"n", 1e-9}, {"p", 1e-12}}};

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

/// Matches `unit` against prefix+symbol for one of `symbols`; returns the factor.
template <std::size_t N>
std::optional<double> match(std::string_view unit, const std::array<std::string_view, N>& symbols, bool big_si,
                            bool small_si, bool iec) {
  for (auto sym : symbols) {
    if (unit == sym) return 1.0;
  }
  auto try_prefixes = [&](auto& table) -> std::optional<double> {
    for (const auto& p : table) {
      if (!starts_with(unit, p.symbol)) continue;
      std::string_view rest = unit.substr(p.symbol.size());
      for (auto sym : symbols) {
        if (rest == sym) return p.factor;
      }
    }
    return std::nullopt;
  };
  if (iec) {
    if (auto f = try_prefixes(kIecPrefixes)) return f;
  }
  if (big_si) {
    if (auto f = try_prefixes(kBigSiPrefixes)) return f;
  }
  if (small_si) {
    if (auto f = try_prefixes(kSmallSiPrefixes)) return f;
  }
  return std::nullopt;
}

/// Bytes or bits with a prefix; returns bytes per unit.
std::optional<double> data_unit(std::string_view unit) {
  static constexpr std::array<std::string_view, 1> kBytes = {"B"};
  static constexpr std::array<std::string_view, 2> kBits = {"b", "bit"};
  if (auto f = match(unit, kBytes, true, false, true)) return *f;
  if (auto f = match(unit, kBits, true, false, true)) return *f / 8.0;
  return std::nullopt;
}

std::optional<double> unit_factor(std::string_view unit, Dimension d) {
  switch (d) {
    case Dimension::Time: {
      if (unit == "min") return 60.0;
      if (unit == "h") return 3600.0;
      static constexpr std::array<std::string_view, 1> kS = {"s"};
      return match(unit, kS, false, true, false);
    }
    case Dimension::Bytes:
      return data_unit(unit);
    case Dimension::Bandwidth: {
      // "GB/s", "Gb/s", "Gbps", "GBps".
      for (std::string_view per : {std::string_view("/s"), std::string_view("ps")}) {
        if (unit.size() > per.size() && unit.substr(unit.size() - per.size()) == per) {
          if (auto f = data_unit(unit.substr(0, unit.size() - per.size()))) return f;
        }
      }
      return std::nullopt;
    }
    case Dimension::Flops: {
      static constexpr std::array<std::string_view, 3> kFlop = {"FLOP", "FLOPs", "flop"};
      return match(unit, kFlop, true, false, false);
    }
    case Dimension::FlopRate: {
      static constexpr std::array<std::string_view, 5> kRate = {"FLOPS", "FLOP/s", "FLOPs/s", "flop/s", "flops"};
      return match(unit, kRate, true, false, false);
    }
    case Dimension::Money: {
      static constexpr std::array<std::string_view, 1> kUsd = {"USD"};
      return match(unit, kUsd, true, false, false);
    }
    case Dimension::Power: {
      static constexpr std::array<std::string_view, 1> kW = {"W"};
      return match(unit, kW, true, true, false);
    }
  }
  return std::nullopt;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string describe(Dimension d) {
  switch (d) {
    case Dimension::Time:
      return "a duration, e.g. \"750ns\", \"1ms\", \"2s\"";
    case Dimension::Bytes:
      return "a size, e.g. \"192GB\", \"80GiB\", \"512MB\"";
    case Dimension::Bandwidth:
      return "a bandwidth, e.g. \"800GB/s\", \"10Gb/s\", \"25Gbps\"";
    case Dimension::Flops:
      return "a FLOP count, e.g. \"14GFLOP\"";
    case Dimension::FlopRate:
      return "a FLOP rate, e.g. \"54TFLOPS\", \"989TFLOP/s\"";
    case Dimension::Money:
      return "a price, e.g. \"6599USD\"";
    case Dimension::Power:
      return "a power, e.g. \"700W\", \"10kW\"";
  }
  return "a quantity";
}

std::string_view base_unit(Dimension d) {
  switch (d) {
    case Dimension::Time:
      return "s";
    case Dimension::Bytes:
      return "B";
    case Dimension::Bandwidth:
      return "B/s";
    case Dimension::Flops:
      return "FLOP";
    case Dimension::FlopRate:
      return "FLOP/s";
    case Dimension::Money:
      return "USD";
    case Dimension::Power:
      return "W";
  }
  return "";
}

double parse(std::string_view text, Dimension d, std::string_view where) {
  const std::string_view s = trim(text);
  const std::string quoted = "\"" + std::string(text) + "\"";
  auto fail = [&](const std::string& what) -> UserError {
    return UserError(std::string(where) + ": " + quoted + " " + what + "; write " + describe(d));
  };
  if (s.empty()) throw fail("is empty");
  // The number: an optional sign, digits, a decimal point, an exponent. No thousands separators.
  std::size_t i = 0;
  if (s[i] == '-' || s[i] == '+') ++i;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E') && i + 1 < s.size() &&
      ((s[i + 1] >= '0' && s[i + 1] <= '9') || s[i + 1] == '-' || s[i + 1] == '+')) {
    ++i;
    if (s[i] == '-' || s[i] == '+') ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  }
  std::string_view number = s.substr(0, i);
  if (!number.empty() && number.front() == '+') number.remove_prefix(1);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (!number.empty() && ec == std::errc::result_out_of_range) {
    const auto e = number.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < number.size() && number[e + 1] == '-';
    throw fail(tiny ? "is too small for a double (below about 2.2e-308)" : "overflows a double (beyond about 1.8e308)");
  }
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size()) {
    throw fail("does not start with a number");
  }
  if (!std::isfinite(value)) throw fail("is not a finite number");
  const std::string_view unit = trim(s.substr(i));
  if (unit.empty()) throw fail("has no unit");
  if (unit.front() == ',') throw fail("has a comma in the number (thousands separators are not allowed)");
  const auto factor = unit_factor(unit, d);
  if (!factor) {
    // Say what the unit would have been right for, when it is a unit of another kind.
    for (Dimension other : {Dimension::Time, Dimension::Bytes, Dimension::Bandwidth, Dimension::FlopRate,
                            Dimension::Flops, Dimension::Money, Dimension::Power}) {
      if (other != d && unit_factor(unit, other)) {
        throw fail("has unit '" + std::string(unit) + "', which is not " +
                   describe(d).substr(0, describe(d).find(',')));
      }
    }
    throw fail("has an unknown unit '" + std::string(unit) + "'");
  }
  const double base = value * *factor;
  if (!std::isfinite(base)) throw fail("overflows a double once its prefix is applied");
  // Beyond these a figure is no real hardware's, and later arithmetic (bytes / bandwidth, price x count)
  // would overflow to infinity or lose every digit: 1e308PB/s, 1e308h and 5e-324GB/s are refused here
  // rather than printed later as inf. The bounds are a factor 1000 or more past today's extremes (a
  // GB200 NVL72 rack: ~1.4e18 FP4 FLOP/s, 576 TB/s of HBM; the largest clusters: ~1e9 USD, 1e8 W).
  struct Range {
    double lo, hi;
    const char* shown;
  };
  const Range r = [&]() -> Range {
    switch (d) {
      case Dimension::Time:
        return {1e-15, 1e9, "from 1 fs to 1e9 s (about 30 years)"};
      case Dimension::Bytes:
        return {1e-3, 1e21, "from 1 mB to 1 ZB"};
      case Dimension::Bandwidth:
        return {1e-3, 1e21, "from 1 mB/s to 1 ZB/s"};
      case Dimension::Flops:
        return {1e-3, 1e30, "from 1 mFLOP to 1e30 FLOP"};
      case Dimension::FlopRate:
        return {1e-3, 1e24, "from 1 mFLOP/s to 1e24 FLOP/s"};
      case Dimension::Money:
        return {1e-6, 1e15, "from 1e-6 USD to 1e15 USD"};
      case Dimension::Power:
        return {1e-6, 1e12, "from 1 uW to 1 TW"};
    }
    return {0, INFINITY, ""};
  }();
  if (base != 0 && (std::fabs(base) < r.lo || std::fabs(base) > r.hi))
    throw fail(std::string("is outside any real ") + describe(d).substr(2, describe(d).find(',') - 2) + " (" + r.shown +
               ")");
  return base;
}

std::string format(double v, Dimension d, int digits) {
  char buf[64];
  if (d == Dimension::Money) {
    // Whole dollars with thousands separators ("289,000 USD"); cents only below 100 USD.
    if (std::fabs(v) < 100.0) {
      std::snprintf(buf, sizeof buf, "%.2f USD", v);
      return buf;
    }
    if (!(std::fabs(v) < 1e15)) {
      // Beyond any price (and beyond long long, which llround needs): scientific (fuzz/regressions/units).
      std::snprintf(buf, sizeof buf, "%.*g USD", digits, v);
      return buf;
    }
    long long whole = std::llround(v);
    std::string s = std::to_string(whole < 0 ? -whole : whole);
    for (int pos = static_cast<int>(s.size()) - 3; pos > 0; pos -= 3) s.insert(static_cast<std::size_t>(pos), ",");
    return (whole < 0 ? "-" : "") + s + " USD";
  }
  std::string unit(base_unit(d));
  struct P {
    const char* sym;
    double f;
  };
  static constexpr P kBig[] = {{"E", 1e18}, {"P", 1e15}, {"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}, {"", 1}};
  static constexpr P kSmall[] = {{"", 1}, {"m", 1e-3}, {"u", 1e-6}, {"n", 1e-9}, {"p", 1e-12}};
  const double a = std::fabs(v);
  const char* sym = "";
  double f = 1;
  if (a == 0) {
    // keep base unit
  } else if (a >= 1 || d != Dimension::Time) {
    for (const auto& p : kBig) {
      if (a >= p.f) {
        sym = p.sym;
        f = p.f;
        break;
      }
    }
  } else {
    for (const auto& p : kSmall) {
      if (a >= p.f) {
        sym = p.sym;
        f = p.f;
        break;
      }
    }
    if (a < 1e-12) {
      sym = "p";
      f = 1e-12;
    }
  }
  const double m = v / f;
  const int int_digits = std::fabs(m) >= 100 ? 3 : std::fabs(m) >= 10 ? 2 : 1;
  const int decimals = std::max(0, digits - int_digits);
  std::snprintf(buf, sizeof buf, "%.*f %s%s", decimals, m, sym, unit.c_str());
  return buf;
}

std::string format_binary(Bytes b, int digits) {
  static constexpr const char* kSym[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double m = b.base();
  int i = 0;
  while (std::fabs(m) >= 1024.0 && i < 5) {
    m /= 1024.0;
    ++i;
  }
  const int int_digits = std::fabs(m) >= 100 ? 3 : std::fabs(m) >= 10 ? 2 : 1;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", std::max(0, digits - int_digits), m, kSym[i]);
  return buf;
}

}  // namespace moesim::units
