#pragma once
// Strong types for physical quantities and a parser for strings with units (STYLE.md practice 4).
//
// Every quantity is stored as a double in its SI base unit (seconds, bytes, bytes/s, FLOP, FLOP/s, USD,
// watts). Quantities of different kinds do not mix by accident: Bytes / Bandwidth gives a Duration,
// Flops / FlopRate gives a Duration, and adding Bytes to a Duration does not compile.
//
// Strings: "800GB/s", "10Gb/s", "10Gbps", "750ns", "54TFLOPS", "192GiB", "6599USD", "350W".
//  - SI prefixes k (or K), M, G, T, P, E are powers of 1000; IEC prefixes Ki, Mi, Gi, Ti, Pi, Ei are
//    powers of 1024 (IEC 80000-13).
//  - "B" is a byte, "b" (or "bit") is a bit: 10Gb/s is 1.25e9 bytes/s.
//  - A bare number is an error wherever a unit is required.

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

namespace moesim::units {

/// Binary byte multiples (IEC 80000-13), for buffer sizes and bounds counted in whole bytes.
inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

/// The kind of a physical quantity, used by the parser to check a string's unit.
enum class Dimension { Time, Bytes, Bandwidth, Flops, FlopRate, Money, Power };

/// Name of a dimension with an example, for error messages ("bandwidth, e.g. \"800GB/s\"").
std::string describe(Dimension d);

template <Dimension D>
class Quantity {
 public:
  constexpr Quantity() = default;
  /// From a value in the SI base unit of D (seconds, bytes, bytes/s, FLOP, FLOP/s, USD, W).
  static constexpr Quantity from_base(double v) { return Quantity(v); }
  /// The value in the SI base unit.
  [[nodiscard]] constexpr double base() const { return v_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity& operator+=(Quantity o) {
    v_ += o.v_;
    return *this;
  }
  constexpr Quantity operator*(double s) const { return Quantity(v_ * s); }
  constexpr Quantity operator/(double s) const { return Quantity(v_ / s); }
  constexpr double operator/(Quantity o) const { return v_ / o.v_; }
  // clang-tidy 14 reports the literal 0 that a defaulted <=> compares its result with; there is no pointer.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  constexpr explicit Quantity(double v) : v_(v) {}
  double v_ = 0.0;
};

template <Dimension D>
constexpr Quantity<D> operator*(double s, Quantity<D> q) {
  return q * s;
}

using Duration = Quantity<Dimension::Time>;        ///< seconds
using Bytes = Quantity<Dimension::Bytes>;          ///< bytes
using Bandwidth = Quantity<Dimension::Bandwidth>;  ///< bytes per second
using Flops = Quantity<Dimension::Flops>;          ///< floating-point operations (a count)
using FlopRate = Quantity<Dimension::FlopRate>;    ///< FLOP per second
using Money = Quantity<Dimension::Money>;          ///< US dollars
using Power = Quantity<Dimension::Power>;          ///< watts

constexpr Duration seconds(double v) { return Duration::from_base(v); }
constexpr Bytes bytes(double v) { return Bytes::from_base(v); }
constexpr Bandwidth bytes_per_second(double v) { return Bandwidth::from_base(v); }
constexpr Flops flops(double v) { return Flops::from_base(v); }
constexpr FlopRate flops_per_second(double v) { return FlopRate::from_base(v); }
constexpr Money usd(double v) { return Money::from_base(v); }
constexpr Power watts(double v) { return Power::from_base(v); }

constexpr Duration operator/(Bytes b, Bandwidth bw) { return seconds(b.base() / bw.base()); }
constexpr Duration operator/(Flops f, FlopRate r) { return seconds(f.base() / r.base()); }

/// Parses `text` as a quantity of dimension `d`; returns its value in the SI base unit.
/// Throws UserError naming `where` (file and JSON path, or the flag) on a bare number, an unknown or
/// wrong-kind unit, or a malformed number.
double parse(std::string_view text, Dimension d, std::string_view where);

template <Dimension D>
Quantity<D> parse_as(std::string_view text, std::string_view where) {
  return Quantity<D>::from_base(parse(text, D, where));
}

/// The unit symbol a base value is printed with in data outputs ("s", "B", "B/s", "FLOP", "FLOP/s",
/// "USD", "W").
std::string_view base_unit(Dimension d);

/// Human-readable formatting with an SI prefix chosen for 1 <= mantissa < 1000, e.g. "800 GB/s",
/// "1.00 ms", "54.0 TFLOP/s", "6,599 USD". `digits` significant digits.
std::string format(double base_value, Dimension d, int digits = 3);

template <Dimension D>
std::string format(Quantity<D> q, int digits = 3) {
  return format(q.base(), D, digits);
}

/// A size with an IEC prefix ("192 GiB"): memory capacities are binary (JEDEC), so they print as such.
std::string format_binary(Bytes b, int digits = 3);

}  // namespace moesim::units
