// The size-banded efficiency fit (calibrate/efficiency.hpp): known efficiencies come back from synthetic
// samples, bands are contiguous and split at geometric midpoints, lookups outside the measured range are
// flagged by model::efficiency_at, and the JSON form loads with model::load_node.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/efficiency.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// Three sizes a decade and more apart: 1 MiB (two samples, 0.5 and 0.7), 16 MiB (0.8), 256 MiB (0.9).
std::vector<EfficiencySample> synthetic() {
  return {{16 * kMiB, 0.8, "b"}, {1 * kMiB, 0.5, "a1"}, {256 * kMiB, 0.9, "c"}, {1 * kMiB, 0.7, "a2"}};
}

// Each band's value is the mean of its samples (0.6, 0.8, 0.9), with its sample count; residuals are
// sample − band, in input order.
TEST(EfficiencyFit, KnownEfficienciesComeBack) {
  const BandFit fit = fit_efficiency_bands(synthetic());
  ASSERT_EQ(fit.bands.size(), 3u);
  EXPECT_NEAR(fit.bands[0].value, 0.6, 1e-12);
  EXPECT_NEAR(fit.bands[1].value, 0.8, 1e-12);
  EXPECT_NEAR(fit.bands[2].value, 0.9, 1e-12);
  EXPECT_EQ(fit.bands[0].samples, 2);
  EXPECT_EQ(fit.bands[1].samples, 1);
  EXPECT_EQ(fit.bands[2].samples, 1);
  ASSERT_EQ(fit.residuals.size(), 4u);
  EXPECT_NEAR(fit.residuals[0], 0.0, 1e-12);
  EXPECT_NEAR(fit.residuals[1], -0.1, 1e-12);
  EXPECT_NEAR(fit.residuals[2], 0.0, 1e-12);
  EXPECT_NEAR(fit.residuals[3], 0.1, 1e-12);
}

// Edges: 1 MiB/√2 = 724.1 KiB, √(1·16) = 4 MiB, √(16·256) = 64 MiB, 256·√2 = 362 MiB (4 significant
// digits); neighbouring bands share their edge, so the table is contiguous.
TEST(EfficiencyFit, BandsSplitAtGeometricMidpoints) {
  const BandFit fit = fit_efficiency_bands(synthetic());
  ASSERT_EQ(fit.bands.size(), 3u);
  EXPECT_EQ(band_size_text(fit.bands[0].from.base()), "724.1KiB");
  EXPECT_DOUBLE_EQ(fit.bands[0].to.base(), 4 * kMiB);
  EXPECT_DOUBLE_EQ(fit.bands[1].to.base(), 64 * kMiB);
  EXPECT_EQ(band_size_text(fit.bands[2].to.base()), "362MiB");
  for (std::size_t i = 0; i + 1 < fit.bands.size(); ++i) EXPECT_EQ(fit.bands[i].to, fit.bands[i + 1].from);
}

// A matrix and its transpose (6144×10752 and 10752×6144 f32, 264,241,152 B each) are one size: one band
// with both samples.
TEST(EfficiencyFit, SameSizeIsOneBand) {
  const double b = 6144.0 * 10752.0 * 4.0;
  const BandFit fit = fit_efficiency_bands({{b, 1.2, "w1"}, {b, 1.0, "w2"}});
  ASSERT_EQ(fit.bands.size(), 1u);
  EXPECT_EQ(fit.bands[0].samples, 2);
  EXPECT_NEAR(fit.bands[0].value, 1.1, 1e-12);
}

TEST(EfficiencyFit, NoSamplesNoBands) {
  const BandFit fit = fit_efficiency_bands({});
  EXPECT_TRUE(fit.bands.empty());
  EXPECT_TRUE(fit.residuals.empty());
}

// Inside the measured range the band's value; below or above it the nearest band's, flagged (inside ==
// false), so the simulator can say it is extrapolating.
TEST(EfficiencyFit, LookupOutsideTheMeasuredRangeIsFlagged) {
  const BandFit fit = fit_efficiency_bands(synthetic());
  const auto in = model::efficiency_at(fit.bands, units::bytes(2 * kMiB));
  EXPECT_TRUE(in.inside);
  EXPECT_NEAR(in.value, 0.6, 1e-12);
  const auto mid = model::efficiency_at(fit.bands, units::bytes(100 * kMiB));
  EXPECT_TRUE(mid.inside);
  EXPECT_NEAR(mid.value, 0.9, 1e-12);
  const auto below = model::efficiency_at(fit.bands, units::bytes(100e3));
  EXPECT_FALSE(below.inside);
  EXPECT_NEAR(below.value, 0.6, 1e-12);
  const auto above = model::efficiency_at(fit.bands, units::bytes(4096 * kMiB));
  EXPECT_FALSE(above.inside);
  EXPECT_NEAR(above.value, 0.9, 1e-12);
}

// The JSON form, placed in a node profile, loads with model::load_node and gives back the same bands.
TEST(EfficiencyFit, ProfileWithTheBandsLoads) {
  const BandFit fit = fit_efficiency_bands(synthetic());
  nlohmann::json devices = {
      {"memory_bandwidth", figure_json(13.5e9, units::Dimension::Bandwidth, "test")},
      {"efficiency", {{"source", "synthetic"}, {"memory", bands_json(fit.bands)}, {"compute", bands_json(fit.bands)}}}};
  const auto profile = node_profile_json("eff-test", "test", devices, {{"note", "raw"}}, "notes");
  const test::TestDir dir("moesim_eff");
  const auto node = model::load_node(dir.write("eff-test.json", profile_text(profile)).string());
  ASSERT_TRUE(node.devices.efficiency.has_value());
  const auto& t = *node.devices.efficiency;
  ASSERT_EQ(t.memory.size(), 3u);
  ASSERT_EQ(t.compute.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.memory[i].from, fit.bands[i].from);
    EXPECT_EQ(t.memory[i].to, fit.bands[i].to);
    EXPECT_NEAR(t.memory[i].value, fit.bands[i].value, 1e-4);
    EXPECT_EQ(t.memory[i].samples, fit.bands[i].samples);
  }
  EXPECT_NEAR(node.bandwidth().value.base(), 13.5e9, 1.0);
}

// Figure values are written so that units::parse reads them back (6 significant digits).
TEST(EfficiencyFit, FigureValuesRoundTrip) {
  using units::Dimension;
  const struct {
    double v;
    Dimension d;
  } cases[] = {{12.345678e9, Dimension::Bandwidth},
               {63.9e9, Dimension::FlopRate},
               {84.2e-6, Dimension::Time},
               {25264427008.0, Dimension::Bytes}};
  for (const auto& c : cases) {
    const std::string s = figure_value(c.v, c.d);
    EXPECT_EQ(s.find(' '), std::string::npos) << s;
    EXPECT_NEAR(units::parse(s, c.d, "test"), c.v, 1e-5 * c.v) << s;
  }
}

TEST(EfficiencyFit, ProfileTextPutsTheHeaderFirstAndCalibrationLast) {
  const auto text = profile_text({{"calibration", {{"x", 1}}}, {"notes", "n"}, {"kind", "node"}, {"id", "a"}});
  EXPECT_EQ(text.rfind("{\n  \"id\": \"a\",\n  \"kind\": \"node\"", 0), 0u) << text;
  EXPECT_LT(text.find("\"notes\""), text.find("\"calibration\""));
}

TEST(EfficiencyFit, ProfileIds) {
  EXPECT_EQ(profile_id("Intel(R) Xeon(R) Processor"), "intel-r-xeon-r-processor");
  EXPECT_EQ(profile_id("!!"), "this-host");
  EXPECT_EQ(id_for_output("/tmp/my-node.json", "x"), "my-node");
  EXPECT_EQ(id_for_output("", "x"), "x");
}

}  // namespace
}  // namespace moesim::calibrate
