#pragma once
// Ping-pong samples, their statistics and the Hockney fit of `moesim calibrate net` (calibrate/NET.md).
//
// The model: a message of m bytes takes t(m) = o + m / B one way (Hockney, "The communication challenge for
// MPP: Intel Paragon and Meiko CS-2", Parallel Computing 20(3):389-398, 1994, with r_inf = B and
// n_1/2 = o·B). One straight line over 1 B … 64 MiB fits no real stack: short messages pay per-message
// software costs, long ones the wire (LogGP separates the two with o, L and a per-byte gap G: Alexandrov,
// Ionescu, Schauser, Scheiman, SPAA 1995; PLogP makes the parameters size-dependent: Kielmann, Bal,
// Verstoep, IPDPS workshops 2000). So the line is fitted per size band, and the NIC profile takes its
// latency from the smallest band's intercept and its bandwidth from the largest band's slope.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moesim::calibrate {

/// Every round trip measured for one message size.
struct SizeSamples {
  std::uint64_t bytes = 0;
  std::vector<double> rtt_s;   ///< round-trip times, seconds, in the order measured
  std::vector<double> send_s;  ///< time the sender's write call took per ping, seconds (empty for MPI)
};

/// Order statistics of a sample, seconds.
struct SampleStats {
  std::size_t count = 0;
  double min = 0, p10 = 0, median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

/// Percentiles by linear interpolation between closest ranks (Hyndman & Fan 1996, definition 7, the
/// default of R and NumPy). `values` non-empty.
SampleStats sample_stats(std::vector<double> values);

/// The one-way time of a size: half the median round trip (a ping-pong sends m bytes each way).
double one_way_s(const SizeSamples& s);

/// A message size as people write it: "1 B", "4 KiB", "64 MiB" (exact binary multiples), else "1.50 KiB".
std::string size_label(std::uint64_t bytes);

/// The size bands, in bytes. Small messages (<= 4 KiB: one page, a few TCP segments) are dominated by the
/// per-message cost; large ones (>= 1 MiB: past the default socket buffers) by bandwidth.
inline constexpr std::uint64_t kSmallBandMax = 4096;
inline constexpr std::uint64_t kLargeBandMin = 1u << 20;
/// Each fitted band holds at least this many sizes; a shorter band is merged into its neighbour.
inline constexpr std::size_t kMinSizesPerBand = 3;

/// The straight line t = o + m / B through one band's one-way medians.
struct HockneyBand {
  std::string name;                  ///< "small", "medium", "large" or a merge such as "medium+large"
  std::vector<std::uint64_t> sizes;  ///< bytes, ascending
  double overhead_s = 0;             ///< o: the intercept, seconds (one way, per message)
  double slope_s_per_byte = 0;       ///< 1 / B
  std::optional<double> bandwidth;   ///< B in bytes/s; absent when the slope is not positive (a flat band)
  double r2 = 0;                     ///< weighted coefficient of determination
  std::vector<double> residuals_s;   ///< measured - fitted one-way time per size, seconds
};

struct HockneyFit {
  std::vector<HockneyBand> bands;  ///< ascending sizes
  double latency_s = 0;            ///< the NIC profile's latency: the smallest band's intercept (one way)
  double bandwidth = 0;            ///< the NIC profile's bandwidth, bytes/s: 1 / the largest band's slope
  std::vector<std::string> notes;  ///< fallbacks taken, in words
};

/// Fits one line per band to (bytes, one-way seconds) pairs. Sizes must be distinct and >= 1, at least 2;
/// UserError otherwise. Weighted least squares with weights 1 / t² (relative residuals: ping-pong noise is
/// multiplicative, and a 64 MiB sample must not drown a 1 MiB one).
HockneyFit fit_hockney(const std::vector<std::uint64_t>& bytes, const std::vector<double>& one_way);

/// The same on measured samples (one-way time = median RTT / 2).
HockneyFit fit_hockney(const std::vector<SizeSamples>& samples);

}  // namespace moesim::calibrate
