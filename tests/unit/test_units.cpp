// Units: the parser turns strings with units into SI base values; bare numbers and wrong-kind units are
// errors naming where they came from.

#include <gtest/gtest.h>

#include "moesim/model/error.hpp"
#include "moesim/model/units.hpp"

namespace {

using moesim::UserError;
using moesim::units::Dimension;
using moesim::units::parse;

// "800GB/s" is 800e9 bytes/s (SI giga); "10Gb/s" is bits, so 10e9 / 8 = 1.25e9 bytes/s.
TEST(Units, BandwidthBytesAndBits) {
  EXPECT_DOUBLE_EQ(parse("800GB/s", Dimension::Bandwidth, "t"), 800e9);
  EXPECT_DOUBLE_EQ(parse("10Gb/s", Dimension::Bandwidth, "t"), 1.25e9);
  EXPECT_DOUBLE_EQ(parse("25Gbps", Dimension::Bandwidth, "t"), 25e9 / 8);
  EXPECT_DOUBLE_EQ(parse("1.25GB/s", Dimension::Bandwidth, "t"), 1.25e9);
  EXPECT_DOUBLE_EQ(parse("3.35 TB/s", Dimension::Bandwidth, "t"), 3.35e12);
}

// IEC prefixes are powers of 1024: 192GiB = 192 * 2^30 bytes; SI 192GB = 192e9.
TEST(Units, SiAndIecPrefixes) {
  EXPECT_DOUBLE_EQ(parse("192GiB", Dimension::Bytes, "t"), 192.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(parse("192GB", Dimension::Bytes, "t"), 192e9);
  EXPECT_DOUBLE_EQ(parse("1KiB", Dimension::Bytes, "t"), 1024.0);
  EXPECT_DOUBLE_EQ(parse("1kB", Dimension::Bytes, "t"), 1000.0);
  EXPECT_DOUBLE_EQ(parse("8Mib", Dimension::Bytes, "t"), 1048576.0);  // 8 mebibits = 1 MiB
}

// Durations from picoseconds to hours.
TEST(Units, Durations) {
  EXPECT_DOUBLE_EQ(parse("750ns", Dimension::Time, "t"), 750e-9);
  EXPECT_DOUBLE_EQ(parse("1ms", Dimension::Time, "t"), 1e-3);
  EXPECT_DOUBLE_EQ(parse("2us", Dimension::Time, "t"), 2e-6);
  EXPECT_DOUBLE_EQ(parse("3\xC2\xB5s", Dimension::Time, "t"), 3e-6);
  EXPECT_DOUBLE_EQ(parse("1.5s", Dimension::Time, "t"), 1.5);
  EXPECT_DOUBLE_EQ(parse("2h", Dimension::Time, "t"), 7200.0);
}

// FLOP rates and counts, money and power.
TEST(Units, RatesMoneyPower) {
  EXPECT_DOUBLE_EQ(parse("54TFLOPS", Dimension::FlopRate, "t"), 54e12);
  EXPECT_DOUBLE_EQ(parse("989.5TFLOP/s", Dimension::FlopRate, "t"), 989.5e12);
  EXPECT_DOUBLE_EQ(parse("14GFLOP", Dimension::Flops, "t"), 14e9);
  EXPECT_DOUBLE_EQ(parse("6599USD", Dimension::Money, "t"), 6599.0);
  EXPECT_DOUBLE_EQ(parse("700W", Dimension::Power, "t"), 700.0);
  EXPECT_DOUBLE_EQ(parse("1e3W", Dimension::Power, "t"), 1000.0);
}

// A bare number has no unit: an error that names where it came from and shows an example.
TEST(Units, BareNumberIsAnError) {
  try {
    parse("800", Dimension::Bandwidth, "node.json: $.devices.memory_bandwidth.value");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("node.json: $.devices.memory_bandwidth.value"), std::string::npos) << m;
    EXPECT_NE(m.find("no unit"), std::string::npos) << m;
    EXPECT_NE(m.find("800GB/s"), std::string::npos) << m;
  }
}

// A unit of the wrong kind ("1ms" where a bandwidth belongs) is rejected with what it is.
TEST(Units, WrongKindOfUnit) {
  try {
    parse("1ms", Dimension::Bandwidth, "x");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not a bandwidth"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse("10GB", Dimension::Bandwidth, "x"), UserError);  // a size, not a rate
  EXPECT_THROW(parse("10 furlongs", Dimension::Time, "x"), UserError);
  EXPECT_THROW(parse("GB/s", Dimension::Bandwidth, "x"), UserError);
  EXPECT_THROW(parse("", Dimension::Bandwidth, "x"), UserError);
  EXPECT_THROW(parse("6,599USD", Dimension::Money, "x"), UserError);
  EXPECT_THROW(parse("nanGB/s", Dimension::Bandwidth, "x"), UserError);
}

// Strong types: Bytes / Bandwidth is a Duration; the arithmetic is the obvious one.
TEST(Units, StrongTypeArithmetic) {
  using namespace moesim::units;
  const Duration t = bytes(1.6e9) / bytes_per_second(800e9);
  EXPECT_DOUBLE_EQ(t.base(), 0.002);
  const Duration c = flops(54e9) / flops_per_second(54e12);
  EXPECT_DOUBLE_EQ(c.base(), 0.001);
  EXPECT_DOUBLE_EQ((usd(6599) * 2.0).base(), 13198.0);
}

// Formatting picks an SI prefix and keeps the unit.
TEST(Units, Format) {
  using namespace moesim::units;
  EXPECT_EQ(format(bytes_per_second(800e9)), "800 GB/s");
  EXPECT_EQ(format(seconds(0.001)), "1.00 ms");
  EXPECT_EQ(format(seconds(750e-9)), "750 ns");
  EXPECT_EQ(format(usd(289000)), "289,000 USD");
  EXPECT_EQ(format(flops_per_second(54e12)), "54.0 TFLOP/s");
  // Found by fuzz_units ("3198EUSD" parses to 3.198e21 USD): beyond long long, llround was undefined.
  EXPECT_EQ(format(usd(3.198e21)), "3.2e+21 USD");
  EXPECT_EQ(format(usd(-1e300)), "-1e+300 USD");
}

}  // namespace
