// The Hockney fit of `moesim calibrate net` (calibrate/net_fit.hpp) on simulated links whose latency and
// bandwidth are known: it must give them back. And the NIC profile written from a fit loads as a profile.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../test_support.hpp"
#include "moesim/calibrate/net_fit.hpp"
#include "moesim/calibrate/pingpong.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/sim/event_core.hpp"
#include "moesim/sim/network.hpp"

namespace {

using moesim::calibrate::fit_hockney;
using moesim::calibrate::HockneyFit;
using moesim::calibrate::SizeSamples;

constexpr double kSecondsPerUs = 1e-6;

/// Ping-pong samples from a link with one-way time o + m / B: each RTT is 2 (o + m / B) times a lognormal
/// factor exp(sigma N(0, 1)) (multiplicative noise, as scheduling and interrupt jitter scale with the work),
/// `repeats` per size, from a fixed seed.
std::vector<SizeSamples> noisy_link(double o, double bandwidth, const std::vector<std::uint64_t>& sizes, double sigma,
                                    int repeats, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<SizeSamples> out;
  for (auto m : sizes) {
    SizeSamples s;
    s.bytes = m;
    for (int i = 0; i < repeats; ++i) {
      s.rtt_s.push_back(2 * (o + static_cast<double>(m) / bandwidth) * std::exp(sigma * n(rng)));
    }
    out.push_back(std::move(s));
  }
  return out;
}

// A 10 GbE-like link, o = 25 us and B = 1.25 GB/s, measured at the default sizes (1 B ... 64 MiB, powers of
// 4) with 5% multiplicative noise and 31 pings per size. The median of 31 lognormal samples is within about
// 1.25 x 5% / sqrt(31) = 1.1% of the truth, so the small band's intercept and the large band's bandwidth are
// within 5%; the bands hold 7, 3 and 4 sizes, and the large band's R^2 is near 1.
TEST(PingPongFit, RecoversLatencyAndBandwidthOfANoisyLink) {
  const auto samples = noisy_link(25 * kSecondsPerUs, 1.25e9, moesim::calibrate::default_message_sizes(), 0.05, 31, 42);
  const HockneyFit f = fit_hockney(samples);
  ASSERT_EQ(f.bands.size(), 3u);
  EXPECT_EQ(f.bands[0].name, "small");
  EXPECT_EQ(f.bands[0].sizes.size(), 7u);
  EXPECT_EQ(f.bands[1].name, "medium");
  EXPECT_EQ(f.bands[1].sizes.size(), 3u);
  EXPECT_EQ(f.bands[2].name, "large");
  EXPECT_EQ(f.bands[2].sizes.size(), 4u);
  EXPECT_NEAR(f.latency_s, 25 * kSecondsPerUs, 0.05 * 25 * kSecondsPerUs);
  EXPECT_NEAR(f.bandwidth, 1.25e9, 0.05 * 1.25e9);
  EXPECT_GT(f.bands[2].r2, 0.99);
  EXPECT_EQ(f.bands[2].residuals_s.size(), 4u);
  // The medium band sees the same line: B within 10% (its intercept is poorly determined at 1 GB/s).
  ASSERT_TRUE(f.bands[1].bandwidth.has_value());
  EXPECT_NEAR(*f.bands[1].bandwidth, 1.25e9, 0.10 * 1.25e9);
  EXPECT_TRUE(f.notes.empty());
}

// A link with two regimes, as TCP over a real NIC has: messages up to 4 KiB cost o = 30 us + m / 0.5 GB/s,
// larger ones o = 100 us + m / 1.2 GB/s (rendezvous and window growth). One line through everything would
// get neither; per band the small band gives 30 us and the large band 1.2 GB/s, within 5%.
TEST(PingPongFit, BandsSeparateTwoRegimes) {
  const auto sizes = moesim::calibrate::default_message_sizes();
  auto small = noisy_link(30 * kSecondsPerUs, 0.5e9, sizes, 0.03, 21, 7);
  const auto large = noisy_link(100 * kSecondsPerUs, 1.2e9, sizes, 0.03, 21, 8);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > moesim::calibrate::kSmallBandMax) small[i] = large[i];
  }
  const HockneyFit f = fit_hockney(small);
  ASSERT_EQ(f.bands.size(), 3u);
  EXPECT_NEAR(f.latency_s, 30 * kSecondsPerUs, 0.05 * 30 * kSecondsPerUs);
  EXPECT_NEAR(f.bandwidth, 1.2e9, 0.05 * 1.2e9);
  ASSERT_TRUE(f.bands[0].bandwidth.has_value());
  EXPECT_NEAR(*f.bands[0].bandwidth, 0.5e9, 0.25 * 0.5e9);  // 4 KiB moves 8 us: a weak slope, a loose check
}

/// Ping-pong over moesim's own flow-level network (sim/network.hpp): node 0 sends m bytes to node 1, which
/// answers with m bytes as soon as they arrive; `repeats` round trips per size, one after another.
class DesPingPong final : public moesim::sim::MessageSink, public moesim::sim::EventHandler {
 public:
  DesPingPong(moesim::sim::NetworkConfig config, std::vector<std::uint64_t> sizes, int repeats)
      : net_(sim_, config, this), sizes_(std::move(sizes)), repeats_(repeats) {
    id_ = sim_.add_handler(this);
    for (auto m : sizes_) samples.push_back(SizeSamples{m, {}, {}});
    sim_.schedule(moesim::sim::SimTime{}, id_, kPing);
  }
  void run() { sim_.run(); }
  void on_delivered(std::uint64_t, std::int32_t, std::int32_t to) override {
    // Answer (or start the next ping) from an event of our own, at the delivery time.
    sim_.schedule(sim_.now(), id_, to == 1 ? kPong : kPing);
    if (to == 0) {
      samples[size_].rtt_s.push_back(moesim::sim::to_seconds(sim_.now() - sent_));
      if (++done_ == repeats_) {
        done_ = 0;
        ++size_;
      }
    }
  }
  void handle_event(std::uint32_t kind, std::uint64_t) override {
    if (size_ >= sizes_.size()) return;
    const auto m = static_cast<double>(sizes_[size_]);
    if (kind == kPing) {
      sent_ = sim_.now();
      net_.send(sim_.now(), 0, 1, m, 0);
    } else {
      net_.send(sim_.now(), 1, 0, m, 0);
    }
  }
  std::vector<SizeSamples> samples;

 private:
  static constexpr std::uint32_t kPing = 0, kPong = 1;
  moesim::sim::Simulation sim_;
  moesim::sim::Network net_;
  std::vector<std::uint64_t> sizes_;
  int repeats_;
  std::uint32_t id_ = 0;
  std::size_t size_ = 0;
  int done_ = 0;
  moesim::sim::SimTime sent_{};
};

// The simulator's link is exactly Hockney's: one way = latency + m / bandwidth (network.hpp, one message
// alone). Latency 10 us (2 us of it sender overhead), 25 Gb/s = 3.125 GB/s: the fit gives both back to
// 1e-6 (picosecond rounding), with R^2 = 1 in every band.
TEST(PingPongFit, RecoversTheSimulatorsLinkExactly) {
  moesim::sim::NetworkConfig c;
  c.nodes = 2;
  c.bandwidth = moesim::units::bytes_per_second(3.125e9);
  c.latency = moesim::sim::SimTime{10'000'000};  // 10 us in picoseconds
  c.overhead = moesim::sim::SimTime{2'000'000};
  DesPingPong pp(c, moesim::calibrate::default_message_sizes(), 3);
  pp.run();
  ASSERT_EQ(pp.samples.size(), 14u);
  for (const auto& s : pp.samples) ASSERT_EQ(s.rtt_s.size(), 3u) << s.bytes;
  const HockneyFit f = fit_hockney(pp.samples);
  EXPECT_NEAR(f.latency_s, 10 * kSecondsPerUs, 1e-6 * 10 * kSecondsPerUs);
  EXPECT_NEAR(f.bandwidth, 3.125e9, 1e-6 * 3.125e9);
  for (const auto& b : f.bands) EXPECT_NEAR(b.r2, 1.0, 1e-9) << b.name;
}

// Bands shorter than 3 sizes are merged: "small" sizes (1 B ... 64 KiB) put 2 in the medium band, which joins
// the small one, and the fit says its bandwidth comes from small messages. Up to 4 MiB the large band has 2
// (1 and 4 MiB) and joins the medium one.
TEST(PingPongFit, ShortBandsAreMerged) {
  const auto small_sizes = moesim::calibrate::parse_message_sizes("small", 64u << 20);
  ASSERT_EQ(small_sizes.size(), 9u);
  auto f = fit_hockney(noisy_link(20 * kSecondsPerUs, 2e9, small_sizes, 0.0, 3, 1));
  ASSERT_EQ(f.bands.size(), 1u);
  EXPECT_EQ(f.bands[0].name, "small+medium");
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("no size of 1 MiB"), std::string::npos) << f.notes[0];
  EXPECT_NEAR(f.latency_s, 20 * kSecondsPerUs, 1e-3 * 20 * kSecondsPerUs);

  f = fit_hockney(noisy_link(20 * kSecondsPerUs, 2e9, moesim::calibrate::default_message_sizes(4u << 20), 0.0, 3, 1));
  ASSERT_EQ(f.bands.size(), 2u);
  EXPECT_EQ(f.bands[0].name, "small");
  EXPECT_EQ(f.bands[1].name, "medium+large");
  EXPECT_NEAR(f.bandwidth, 2e9, 1e-6 * 2e9);
}

// Percentiles by Hyndman & Fan's definition 7: for 1..10, h = 9 p: p10 = 1.9, median 5.5, p90 = 9.1.
TEST(PingPongFit, SampleStatistics) {
  const auto s = moesim::calibrate::sample_stats({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_NEAR(s.p10, 1.9, 1e-12);
  EXPECT_NEAR(s.p90, 9.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
}

TEST(PingPongFit, BadSizesAreUserErrors) {
  EXPECT_THROW(fit_hockney(std::vector<std::uint64_t>{64}, {1e-5}), moesim::UserError);
  EXPECT_THROW(fit_hockney(std::vector<std::uint64_t>{64, 64, 128}, {1e-5, 1e-5, 2e-5}), moesim::UserError);
  EXPECT_THROW(moesim::calibrate::parse_message_sizes("1,x", 1u << 20), moesim::UserError);
  EXPECT_THROW(moesim::calibrate::parse_message_sizes("1,2MiB", 1u << 20), moesim::UserError);
  EXPECT_THROW(moesim::calibrate::parse_message_sizes("64", 1u << 20), moesim::UserError);
  EXPECT_THROW(moesim::calibrate::parse_message_sizes("0,64", 1u << 20), moesim::UserError);
  EXPECT_EQ(moesim::calibrate::parse_message_sizes("4KiB,1,64", 1u << 20), (std::vector<std::uint64_t>{1, 64, 4096}));
  EXPECT_EQ(moesim::calibrate::parse_message_sizes("pow2", 1024).size(), 11u);
}

// The profile written from a fit is a NIC profile moesim loads: latency and bandwidth as fitted (to the 4
// significant digits written), the send-call overhead when it is below the latency, sources that say how
// they were measured, and the calibration data beside them.
TEST(PingPongFit, ProfileLoadsAsANic) {
  moesim::calibrate::NetResult r;
  r.transport = "tcp";
  r.peer = "10.0.0.2:5201";
  r.sizes = noisy_link(25 * kSecondsPerUs, 1.25e9, moesim::calibrate::default_message_sizes(), 0.02, 11, 3);
  r.fit = fit_hockney(r.sizes);
  r.send_overhead_s = 3 * kSecondsPerUs;
  const auto prov = moesim::calibrate::current_provenance("moesim calibrate net --connect 10.0.0.2:5201");
  const auto j = moesim::calibrate::nic_profile_json(r, prov, "my-nic", "test NIC");
  const moesim::test::TestDir dir("moesim_pingpong");
  const auto nic = moesim::model::load_nic(dir.write("my-nic.json", j.dump(2)).string());
  EXPECT_EQ(nic.id, "my-nic");
  EXPECT_NEAR(nic.latency.value.base(), r.fit.latency_s, 1e-3 * r.fit.latency_s);
  EXPECT_NEAR(nic.bandwidth.value.base(), r.fit.bandwidth, 1e-3 * r.fit.bandwidth);
  ASSERT_TRUE(nic.overhead.has_value());
  EXPECT_NEAR(nic.overhead->value.base(), 3 * kSecondsPerUs, 1e-9);
  EXPECT_NE(nic.latency.source.find("measured by `moesim calibrate net --connect 10.0.0.2:5201`"), std::string::npos)
      << nic.latency.source;
  EXPECT_NE(nic.bandwidth.source.find("large band"), std::string::npos) << nic.bandwidth.source;
  const auto& cal = j["calibration"];
  EXPECT_EQ(cal["command"], "moesim calibrate net --connect 10.0.0.2:5201");
  EXPECT_EQ(cal["sizes"].size(), 14u);
  EXPECT_EQ(cal["fit"]["bands"].size(), 3u);
  EXPECT_TRUE(cal["fit"]["bands"][2].contains("r2"));
  EXPECT_EQ(cal["fit"]["bands"][2]["residuals_s"].size(), 4u);
  EXPECT_EQ(cal["provenance"]["host"], prov.host);

  // An overhead above the latency would be refused by load_nic: it is left out instead.
  r.send_overhead_s = 1.0;
  EXPECT_FALSE(moesim::calibrate::nic_profile_json(r, prov, "x", "x").contains("overhead"));
}

}  // namespace
