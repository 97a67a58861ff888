// Safetensors dtypes (calibrate/reference/checkpoint.hpp): their names and sizes, and the 16-bit float
// conversions (known values, every encoding round trips, rounding to nearest even).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "checkpoint_support.hpp"

namespace moesim::test::checkpoint {
namespace {

// The safetensors spellings parse to their dtypes with their sizes; others (and other cases) do not.
TEST(SafetensorsDtype, NamesSizesAndParsing) {
  using moesim::reference::parse_dtype;
  EXPECT_EQ(parse_dtype("F32"), DType::F32);
  EXPECT_EQ(parse_dtype("F16"), DType::F16);
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(parse_dtype("bf16"), std::nullopt);
  EXPECT_EQ(parse_dtype("I64"), std::nullopt);
  EXPECT_EQ(moesim::reference::dtype_size(DType::F32), 4U);
  EXPECT_EQ(moesim::reference::dtype_size(DType::BF16), 2U);
  EXPECT_EQ(moesim::reference::dtype_name(DType::F16), "F16");
}

// Known encodings: bf16 0x3F80 = 1 and 0xC000 = -2 (the high halves of the binary32s); f16 0x3C00 = 1,
// 0x0001 = 2^-24 (the smallest subnormal), 0x03FF = 1023·2^-24 (the largest), 0x0400 = 2^-14 (the smallest
// normal), 0x7BFF = 65504 (the largest finite), 0x7C00 / 0xFC00 = ±inf, 0x7E00 NaN, 0x8000 = -0.
TEST(SafetensorsFloat16, KnownValues) {
  const auto bf = f32_values(DType::BF16, {0x3F80, 0xC000});
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], -2.0f);
  const auto h = f32_values(DType::F16, {0x3C00, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000});
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[2], 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(h[3], std::ldexp(1.0f, -14));
  EXPECT_EQ(h[4], 65504.0f);
  EXPECT_EQ(h[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[6], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h[7]));
  EXPECT_EQ(h[8], 0.0f);
  EXPECT_TRUE(std::signbit(h[8]));
  const std::vector<std::uint16_t> f32_as_halves = {0x0000, 0x3FC0};  // 1.5f = 0x3FC00000, little-endian
  EXPECT_EQ(f32_values(DType::F32, f32_as_halves)[0], 1.5f);
}

// Widening is exact, so narrowing it back must give every one of the 65536 encodings again (NaNs stay
// NaN), for binary16 and for bfloat16.
TEST(SafetensorsFloat16, EveryEncodingRoundTrips) {
  using namespace moesim::reference;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float h = f16_to_f32(bits);
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(h)))) << b;
    } else {
      ASSERT_EQ(f32_to_f16(h), bits) << b;
    }
    const float bf = bf16_to_f32(bits);
    if (std::isnan(bf)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bf)))) << b;
    } else {
      ASSERT_EQ(f32_to_bf16(bf), bits) << b;
    }
  }
}

// Narrowing rounds to nearest, ties to even. binary16 near 1 has a step of 2^-10: 1 + 2^-11 is a tie that
// goes down to 1 (even), 1 + 3·2^-11 goes up to 1 + 2^-9 (0x3C02), just above a tie goes up. 65504 is the
// largest binary16 and 65520 the tie above it, which rounds (to even) to infinity. Subnormals step by
// 2^-24: 2^-25 ties down to 0, 3·2^-25 ties to 2 (0x0002), and the tie between the largest subnormal and
// 2^-14 rounds up into the smallest normal (0x0400). bfloat16 near 1 steps by 2^-7.
TEST(SafetensorsFloat16, RoundsToNearestEven) {
  using moesim::reference::f32_to_bf16;
  using moesim::reference::f32_to_f16;
  const auto p2 = [](int e) { return std::ldexp(1.0f, e); };
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11)), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * p2(-11)), 0x3C02);
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11) + p2(-20)), 0x3C01);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(f32_to_f16(p2(-25)), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * p2(-25)), 0x0002);
  EXPECT_EQ(f32_to_f16(p2(-25) + p2(-30)), 0x0001);
  EXPECT_EQ(f32_to_f16(p2(-14) - p2(-25)), 0x0400);
  EXPECT_EQ(f32_to_f16(-p2(-30)), 0x8000);
  EXPECT_EQ(f32_to_bf16(1.0f + p2(-8)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * p2(-8)), 0x3F82);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_TRUE(std::isnan(moesim::reference::bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace moesim::test::checkpoint
