// Message sizes, and the results of `moesim calibrate net` as JSON, as text and as a NIC profile.

#include <algorithm>
#include <charconv>
#include <cmath>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/pingpong.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::calibrate {

namespace {

std::vector<std::uint64_t> powers(std::uint64_t base, std::uint64_t max_bytes) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t b = 1; b <= max_bytes; b *= base) v.push_back(b);
  return v;
}

std::string range_label(const std::vector<std::uint64_t>& sizes) {
  return size_label(sizes.front()) + " - " + size_label(sizes.back());
}

double median(const std::vector<double>& v) { return sample_stats(v).median; }

/// `values` evenly thinned to at most `max` (the first and the last kept).
std::vector<double> thin(const std::vector<double>& values, std::size_t max) {
  if (values.size() <= max || max < 2) return values;
  std::vector<double> out;
  for (std::size_t i = 0; i < max; ++i) {
    const std::size_t j = i * (values.size() - 1) / (max - 1);
    out.push_back(values[j]);
  }
  return out;
}

std::string micro(double s, int decimals = 1) { return scenario::fixed(s * 1e6, decimals); }
std::string giga(double bps) { return scenario::fixed(bps / 1e9, 3); }

}  // namespace

std::vector<std::uint64_t> default_message_sizes(std::uint64_t max_bytes) { return powers(4, max_bytes); }

std::vector<std::uint64_t> parse_message_sizes(const std::string& text_in, std::uint64_t max_bytes,
                                               const std::string& flag) {
  std::vector<std::uint64_t> sizes;
  if (text_in == "pow4" || text_in == "default") {
    sizes = powers(4, max_bytes);
  } else if (text_in == "pow2") {
    sizes = powers(2, max_bytes);
  } else if (text_in == "small") {
    sizes = powers(4, std::min<std::uint64_t>(max_bytes, 64u << 10));
  } else {
    for (const auto& item : text::split(text_in, ',')) {
      std::uint64_t b = 0;
      const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), b);
      if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
        // Not a bare byte count: a size with its unit ("4KiB", "1MB").
        const double v = units::parse(item, units::Dimension::Bytes, flag + " '" + item + "'");
        if (!(v >= 1) || v != std::floor(v) || v > 1e15) {
          throw UserError(flag + " '" + item + "': a message size is a whole number of bytes from 1 B; e.g. 64, 4KiB");
        }
        b = static_cast<std::uint64_t>(v);
      }
      if (b == 0) throw UserError(flag + " '" + item + "': a message of 0 bytes carries nothing to time; start at 1");
      if (b > max_bytes) {
        throw UserError(flag + " '" + item + "' is larger than --max-size (" + size_label(max_bytes) +
                        "); raise --max-size or drop it");
      }
      sizes.push_back(b);
    }
    std::sort(sizes.begin(), sizes.end());
    if (std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
      throw UserError(flag + " " + text_in + ": a size is listed twice; give each size once");
    }
  }
  if (sizes.size() < 2) {
    throw UserError(flag + " " + text_in + ": the Hockney fit needs at least 2 message sizes (3 per size band); " +
                    "use pow4, pow2, small or a list such as 1,64,4KiB,64KiB,1MiB");
  }
  return sizes;
}

nlohmann::json net_result_json(const NetResult& r, std::size_t max_raw_rtts) {
  nlohmann::json sizes = nlohmann::json::array();
  for (const auto& s : r.sizes) {
    const SampleStats st = sample_stats(s.rtt_s);
    nlohmann::json j = {
        {"bytes", s.bytes},
        {"repeats", st.count},
        {"rtt_s",
         {{"min", st.min},
          {"p10", st.p10},
          {"median", st.median},
          {"p90", st.p90},
          {"p99", st.p99},
          {"max", st.max},
          {"mean", st.mean}}},
        {"one_way_s", st.median / 2},
        {"one_way_bandwidth_bytes_per_s", static_cast<double>(s.bytes) / (st.median / 2)},
        {"rtts_s", thin(s.rtt_s, max_raw_rtts)},
    };
    if (!s.send_s.empty()) j["send_call_median_s"] = median(s.send_s);
    sizes.push_back(std::move(j));
  }
  nlohmann::json bands = nlohmann::json::array();
  for (const auto& b : r.fit.bands) {
    bands.push_back({{"name", b.name},
                     {"from_bytes", b.sizes.front()},
                     {"to_bytes", b.sizes.back()},
                     {"sizes_bytes", b.sizes},
                     {"overhead_s", b.overhead_s},
                     {"seconds_per_byte", b.slope_s_per_byte},
                     {"bandwidth_bytes_per_s", b.bandwidth ? nlohmann::json(*b.bandwidth) : nlohmann::json(nullptr)},
                     {"r2", b.r2},
                     {"residuals_s", b.residuals_s}});
  }
  nlohmann::json j = {
      {"transport", r.transport},
      {"peer", r.peer},
      {"loopback", r.loopback},
      {"wall_time", quantity(r.wall_s, "s")},
      {"sizes", std::move(sizes)},
      {"fit",
       {{"model",
         "Hockney t(m) = o + m / B per size band; t = one-way time = median RTT / 2; weighted least squares "
         "(weights 1 / t^2)"},
        {"bands", std::move(bands)},
        {"latency", quantity(r.fit.latency_s, "s")},
        {"bandwidth", quantity(r.fit.bandwidth, "B/s")},
        {"send_overhead", r.send_overhead_s ? quantity(*r.send_overhead_s, "s") : nlohmann::json(nullptr)},
        {"notes", r.fit.notes}}},
  };
  if (r.transport == "tcp") j["server_max_message_bytes"] = r.server_max_message;
  if (r.transport == "mpi") {
    j["ranks"] = r.ranks;
    j["collectives"] = r.collectives;
  }
  return j;
}

nlohmann::json nic_profile_json(const NetResult& r, const Provenance& p, const std::string& id,
                                const std::string& name) {
  MOESIM_CHECK(!r.fit.bands.empty(), "nic_profile_json: a result without a fit");
  const HockneyBand& first = r.fit.bands.front();
  const HockneyBand& last = r.fit.bands.back();
  const std::string how = r.transport == "mpi" ? "an MPI ping-pong between rank 0 and rank 1"
                          : r.loopback         ? "a TCP ping-pong over loopback (127.0.0.1)"
                                               : "a TCP ping-pong with " + r.peer;
  nlohmann::json j = {{"id", id}, {"kind", "nic"}, {"name", name}};
  j["latency"] = {
      {"value", text::printf("%.4gus", r.fit.latency_s * 1e6)},
      {"source", measured_source(p,
                                 "one-way per-message latency, the intercept o of the Hockney fit t(m) = o + m/B "
                                 "over the " +
                                     first.name + " band (" + range_label(first.sizes) + ") of " + how)},
      {"note", text::printf("R^2 %.4f over %zu sizes", first.r2, first.sizes.size()) +
                   (r.fit.notes.empty() ? "" : "; " + text::join(r.fit.notes, "; "))}};
  if (r.send_overhead_s && *r.send_overhead_s <= r.fit.latency_s) {
    j["overhead"] = {
        {"value", text::printf("%.4gus", *r.send_overhead_s * 1e6)},
        {"source", measured_source(p,
                                   "sender overhead (LogP o, Culler et al. 1993): the median time of the send call "
                                   "for a " +
                                       size_label(r.sizes.front().bytes) + " message in " + how)}};
  }
  j["bandwidth"] = {
      {"value", text::printf("%.4gGB/s", r.fit.bandwidth / 1e9)},
      {"source", measured_source(p, "one-way bandwidth, 1 / the slope of the Hockney fit t(m) = o + m/B over the " +
                                        last.name + " band (" + range_label(last.sizes) + ") of " + how)},
      {"note", text::printf("R^2 %.4f over %zu sizes", last.r2, last.sizes.size())}};
  j["notes"] =
      "Measured by moesim calibrate net; the band fits, raw round trips and provenance are under calibration." +
      std::string(r.loopback ? " Loopback measures this host's TCP stack, not a NIC." : "");
  nlohmann::json cal = net_result_json(r);
  cal["provenance"] = to_json(p);
  cal["command"] = p.command;
  j["calibration"] = std::move(cal);
  return j;
}

void print_net_result(const NetResult& r, std::ostream& out) {
  if (r.transport == "mpi") {
    out << "MPI ping-pong rank 0 <-> rank 1 (" << r.ranks << " ranks), " << r.sizes.size() << " sizes in "
        << scenario::fixed(r.wall_s, 1) << " s\n\n";
  } else {
    out << "TCP ping-pong with " << r.peer << (r.loopback ? " (loopback, both ends in this process)" : "") << ", "
        << r.sizes.size() << " sizes in " << scenario::fixed(r.wall_s, 1) << " s\n\n";
  }
  scenario::Table t({"size", "pings", "RTT median µs", "RTT p10 µs", "RTT p90 µs", "one-way µs", "one-way GB/s"});
  for (const auto& s : r.sizes) {
    const SampleStats st = sample_stats(s.rtt_s);
    t.add_row({size_label(s.bytes), std::to_string(st.count), micro(st.median), micro(st.p10), micro(st.p90),
               micro(st.median / 2), giga(static_cast<double>(s.bytes) / (st.median / 2))});
  }
  t.print_text(out);
  out << "\nHockney fit t(m) = o + m / B per size band (one way = median RTT / 2; weighted least squares):\n";
  scenario::Table f({"band", "sizes", "o µs", "B GB/s", "R²", "max |residual| µs"});
  for (const auto& b : r.fit.bands) {
    double worst = 0;
    for (double x : b.residuals_s) worst = std::max(worst, std::fabs(x));
    f.add_row({b.name, range_label(b.sizes) + " (" + std::to_string(b.sizes.size()) + ")", micro(b.overhead_s, 2),
               b.bandwidth ? giga(*b.bandwidth) : "-", scenario::fixed(b.r2, 4), micro(worst, 2)});
  }
  f.print_text(out);
  out << "\nNIC profile: latency " << micro(r.fit.latency_s, 2) << " µs (the " << r.fit.bands.front().name
      << " band's o), bandwidth " << giga(r.fit.bandwidth) << " GB/s (1 / the " << r.fit.bands.back().name
      << " band's slope)";
  if (r.send_overhead_s) out << ", sender overhead " << micro(*r.send_overhead_s, 2) << " µs (send call)";
  out << "\n";
  for (const auto& n : r.fit.notes) out << "note: " << n << "\n";
  if (r.transport == "mpi" && r.collectives.is_object()) {
    for (const auto& [op, rows] : r.collectives.items()) {
      out << "\n" << op << " across " << r.ranks << " ranks:\n";
      scenario::Table c({"size", "repeats", "median µs", "p90 µs", "algorithm GB/s"});
      for (const auto& row : rows) {
        const double med = row["time_s"]["median"].get<double>();
        c.add_row({size_label(row["bytes"].get<std::uint64_t>()), std::to_string(row["repeats"].get<int>()), micro(med),
                   micro(row["time_s"]["p90"].get<double>()),
                   giga(static_cast<double>(row["bytes"].get<std::uint64_t>()) / med)});
      }
      c.print_text(out);
    }
  }
}

}  // namespace moesim::calibrate
