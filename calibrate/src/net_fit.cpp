#include "moesim/calibrate/net_fit.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moesim/calibrate/lsq.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate {

SampleStats sample_stats(std::vector<double> v) {
  MOESIM_CHECK(!v.empty(), "sample_stats of an empty sample");
  std::sort(v.begin(), v.end());
  SampleStats s;
  s.count = v.size();
  // Hyndman & Fan (1996) definition 7: h = (n - 1) p, interpolate between floor(h) and ceil(h).
  const auto q = [&](double p) {
    const double h = static_cast<double>(v.size() - 1) * p;
    const auto lo = static_cast<std::size_t>(std::floor(h));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (h - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  s.min = v.front();
  s.max = v.back();
  s.p10 = q(0.10);
  s.median = q(0.5);
  s.p90 = q(0.90);
  s.p99 = q(0.99);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

double one_way_s(const SizeSamples& s) { return sample_stats(s.rtt_s).median / 2.0; }

std::string size_label(std::uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  if (b < 1024) return std::to_string(b) + " B";
  return units::format_binary(units::bytes(static_cast<double>(b)));
}

namespace {

struct Band {
  std::string name;
  std::vector<std::size_t> idx;  // indices into the sorted samples
};

}  // namespace

HockneyFit fit_hockney(const std::vector<std::uint64_t>& bytes_in, const std::vector<double>& one_way_in) {
  MOESIM_CHECK(bytes_in.size() == one_way_in.size(), "fit_hockney: one time per size");
  // Sort by size; sizes must be distinct.
  std::vector<std::size_t> order(bytes_in.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bytes_in[a] < bytes_in[b]; });
  std::vector<std::uint64_t> bytes;
  std::vector<double> t;
  for (std::size_t i : order) {
    if (!bytes.empty() && bytes.back() == bytes_in[i]) {
      throw UserError("--sizes: " + std::to_string(bytes_in[i]) + " bytes is listed twice; give each size once");
    }
    if (bytes_in[i] == 0) throw UserError("--sizes: a message of 0 bytes carries nothing to time; start at 1 byte");
    bytes.push_back(bytes_in[i]);
    t.push_back(one_way_in[i]);
  }
  if (bytes.size() < 2) {
    throw UserError("--sizes: the Hockney fit needs at least 2 message sizes (3 per size band); give more, e.g. " +
                    std::string("--sizes 1,64,4KiB,64KiB,1MiB"));
  }

  // Nominal bands, then merge any band shorter than kMinSizesPerBand into a neighbour: the small band into
  // the next one up, the large band into the next one down, the medium band into the large one (at 64 KiB
  // and up TCP is bandwidth-bound already).
  std::vector<Band> bands = {{"small", {}}, {"medium", {}}, {"large", {}}};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const std::size_t b = bytes[i] <= kSmallBandMax ? 0 : bytes[i] < kLargeBandMin ? 1 : 2;
    bands[b].idx.push_back(i);
  }
  std::erase_if(bands, [](const Band& b) { return b.idx.empty(); });
  for (;;) {
    if (bands.size() < 2) break;
    const auto it =
        std::find_if(bands.begin(), bands.end(), [](const Band& b) { return b.idx.size() < kMinSizesPerBand; });
    if (it == bands.end()) break;
    const auto i = static_cast<std::size_t>(it - bands.begin());
    const std::size_t lower = (i + 1 < bands.size()) ? i : i - 1;  // merge bands[lower] and bands[lower + 1]
    Band merged{bands[lower].name + "+" + bands[lower + 1].name, bands[lower].idx};
    merged.idx.insert(merged.idx.end(), bands[lower + 1].idx.begin(), bands[lower + 1].idx.end());
    bands[lower] = std::move(merged);
    bands.erase(bands.begin() + static_cast<std::ptrdiff_t>(lower) + 1);
  }

  HockneyFit fit;
  for (const auto& band : bands) {
    HockneyBand bf;
    bf.name = band.name;
    // Sizes scaled by the band's largest so both columns of the least-squares matrix are O(1).
    const double scale = static_cast<double>(bytes[band.idx.back()]);
    std::vector<double> x, y, w;
    for (std::size_t i : band.idx) {
      bf.sizes.push_back(bytes[i]);
      x.push_back(static_cast<double>(bytes[i]) / scale);
      y.push_back(t[i]);
      const double ti = std::max(t[i], 1e-12);
      w.push_back(1.0 / (ti * ti));
    }
    const LineFit lf = fit_line(x, y, w);
    bf.overhead_s = lf.intercept;
    bf.slope_s_per_byte = lf.slope / scale;
    if (bf.slope_s_per_byte > 0) bf.bandwidth = 1.0 / bf.slope_s_per_byte;
    bf.r2 = lf.r2;
    bf.residuals_s = lf.residuals;
    fit.bands.push_back(std::move(bf));
  }

  const HockneyBand& first = fit.bands.front();
  const HockneyBand& last = fit.bands.back();
  fit.latency_s = first.overhead_s;
  if (!(fit.latency_s > 0)) {
    fit.latency_s = t.front();
    fit.notes.push_back("the " + first.name + " band's intercept is not positive (" +
                        units::format(first.overhead_s, units::Dimension::Time) +
                        "): latency is the measured one-way time of " + size_label(bytes.front()) + " instead");
  }
  if (last.bandwidth) {
    fit.bandwidth = *last.bandwidth;
  } else {
    fit.bandwidth = static_cast<double>(bytes.back()) / t.back();
    fit.notes.push_back("the " + last.name + " band's slope is not positive: bandwidth is the measured one-way " +
                        size_label(bytes.back()) + " / time instead");
  }
  if (bytes.back() < kLargeBandMin) {
    fit.notes.push_back("no size of 1 MiB or more was measured: the bandwidth comes from messages up to " +
                        size_label(bytes.back()) + ", which understates a fast link (measure up to 64 MiB)");
  }
  return fit;
}

HockneyFit fit_hockney(const std::vector<SizeSamples>& samples) {
  std::vector<std::uint64_t> bytes;
  std::vector<double> t;
  for (const auto& s : samples) {
    bytes.push_back(s.bytes);
    t.push_back(one_way_s(s));
  }
  return fit_hockney(bytes, t);
}

}  // namespace moesim::calibrate
