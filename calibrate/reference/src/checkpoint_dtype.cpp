// The dtypes of a safetensors checkpoint, and the 16-bit floats (binary16, bfloat16) read as f32.
//
// binary16: IEEE 754-2019 §3.6 (1 sign bit, 5 exponent bits with bias 15, 10 fraction bits; exponent 0 holds
// zeros and subnormals, exponent 31 infinities and NaNs). bfloat16 is the high half of a binary32.

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "moesim/model/error.hpp"
#include "moesim/reference/checkpoint.hpp"

namespace moesim::reference {

namespace {

std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

// --- dtypes ------------------------------------------------------------------------------------------------

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
  }
  MOESIM_CHECK(false, "unknown DType");
  return {};
}

std::size_t dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType d : {DType::F32, DType::F16, DType::BF16}) {
    if (s == dtype_name(d)) return d;
  }
  return std::nullopt;
}

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// --- 16-bit floats -----------------------------------------------------------------------------------------

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1FU;
  std::uint32_t fraction = h & 0x3FFU;
  std::uint32_t bits = 0;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000U | (fraction << 13);  // infinity, or NaN with its payload (quiet bit kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (fraction << 13);  // rebias 15 -> 127
  } else if (fraction == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: fraction·2^-24. Shift the leading 1 up to the implicit bit; each shift lowers the exponent.
    exponent = 113;  // the binary32 exponent of 2^-14, the binary16 subnormals' scale
    while ((fraction & 0x400U) == 0) {
      fraction <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((fraction & 0x3FFU) << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000U);
  const std::uint32_t ax = x & 0x7FFFFFFFU;
  if (ax > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);  // NaN -> quiet NaN
  // 65520 = 0x477FF000 is halfway between 65504 (the largest binary16) and 2^16; ties go to even, to infinity.
  if (ax >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);
  const std::uint32_t exponent = ax >> 23;
  if (exponent < 113) {
    // Below 2^-14: a subnormal q·2^-24 with q = |f| / 2^-24 = significand · 2^(exponent - 126), rounded.
    const std::uint32_t shift = 126 - exponent;
    if (shift > 24) return sign;  // |f| < 2^-25: rounds to zero
    const std::uint32_t significand = (ax & 0x7FFFFFU) | 0x800000U;
    std::uint32_t q = significand >> shift;
    const std::uint32_t rest = significand & ((1U << shift) - 1);
    const std::uint32_t half = 1U << (shift - 1);
    if (rest > half || (rest == half && (q & 1U) != 0)) ++q;  // may carry into the smallest normal: correct
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias 127 -> 15 and drop 13 fraction bits, rounding; a carry into the exponent is correct.
  std::uint32_t h = ((exponent - 112) << 10) | ((ax >> 13) & 0x3FFU);
  const std::uint32_t rest = ax & 0x1FFFU;
  if (rest > 0x1000U || (rest == 0x1000U && (h & 1U) != 0)) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((x >> 16) | 0x0040U);  // quiet NaN
  // Round to nearest even on the 16 dropped bits; a carry ripples into the exponent (up to infinity) correctly.
  const std::uint32_t rounding = 0x7FFFU + ((x >> 16) & 1U);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

void to_f32(DType dtype, std::span<const std::byte> bytes, float* out, std::size_t n) {
  MOESIM_CHECK(bytes.size() >= n * dtype_size(dtype), "to_f32: fewer bytes than values");
  switch (dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, bytes.data(), n * sizeof(float));
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_u16(bytes.data() + 2 * i));
      return;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_u16(bytes.data() + 2 * i));
      return;
  }
}

}  // namespace moesim::reference
