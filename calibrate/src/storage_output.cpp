// The storage read benchmark's reports: the calibration JSON, the storage profile and the text report.

#include <algorithm>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/storage.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "moesim/scenario/table.hpp"
#include "storage_detail.hpp"

namespace moesim::calibrate {

nlohmann::json storage_calibration_json(const StorageResult& r) {
  const auto pass_json = [](const ReadPass& p) {
    return nlohmann::json{{"pattern", p.pattern},
                          {"cache", p.cache},
                          {"method", p.method},
                          {"readers", p.readers},
                          {"block", quantity(static_cast<double>(p.block), "B")},
                          {"reads", p.reads},
                          {"bytes", quantity(static_cast<double>(p.bytes), "B")},
                          {"seconds", quantity(p.seconds, "s")},
                          {"bandwidth", quantity(p.bandwidth(), "B/s")},
                          {"latency_p50", quantity(p.percentile(0.5), "s")},
                          {"latency_p99", quantity(p.percentile(0.99), "s")},
                          {"time_limited", p.time_limited},
                          {"latencies_s", p.latencies}};
  };
  nlohmann::json passes = nlohmann::json::array();
  for (const auto& p : r.passes) passes.push_back(pass_json(p));
  nlohmann::json j = {
      {"benchmark",
       "pread() of blocks from a test file of random data: sequential (each reader its own contiguous part) and "
       "random (a shuffled permutation of all blocks shared by the readers), cold then warm; bandwidth = bytes / "
       "wall time of the pass; latency per read, p50/p99 by nearest rank"},
      {"dir", r.dir},
      {"file_size", quantity(static_cast<double>(r.size), "B")},
      {"block", quantity(static_cast<double>(r.block), "B")},
      {"cold_method", r.cold_method},
      {"capacity", quantity(static_cast<double>(r.capacity), "B")},
      {"free_before", quantity(static_cast<double>(r.free_before), "B")},
      {"write",
       {{"seconds", quantity(r.write_seconds, "s")},
        {"bandwidth", quantity(r.write_seconds > 0 ? static_cast<double>(r.size) / r.write_seconds : 0, "B/s")},
        {"note", "buffered pwrite() of the whole file, then fsync()"}}},
      {"latency_probe_cold", pass_json(r.latency_cold)},
      {"passes", passes},
      {"warm_resident_fraction", r.warm_resident},
      {"notes", r.notes},
      {"wall_time", quantity(r.seconds, "s")}};
  if (r.latency_warm.reads > 0) j["latency_probe_warm"] = pass_json(r.latency_warm);
  return j;
}

nlohmann::json storage_profile_json(const StorageResult& r, const Provenance& p, const std::string& id) {
  using units::Dimension;
  const ReadPass* best = r.find("sequential", "cold", r.read_bandwidth_readers);
  MOESIM_CHECK(best != nullptr, "no cold sequential pass");
  nlohmann::json j = {
      {"id", id},
      {"kind", "storage"},
      {"name", "The file system of " + r.dir + " on " + p.host + ", measured by moesim calibrate storage"}};
  std::string warm_note;
  if (const ReadPass* w = r.find("sequential", "warm", r.read_bandwidth_readers)) {
    warm_note = "; warm (page cache) at the same readers: " + units::format(w->bandwidth(), Dimension::Bandwidth, 4);
  }
  j["read_bandwidth"] =
      figure_json(r.read_bandwidth, Dimension::Bandwidth,
                  measured_source(p, "sequential cold reads (" + r.cold_method + ") of " +
                                         storage_detail::binary(static_cast<double>(r.block)) + " blocks from a " +
                                         storage_detail::binary(static_cast<double>(r.size)) +
                                         " file, best over the reader "
                                         "counts (" +
                                         storage_detail::readers_text(r.read_bandwidth_readers) + ")"),
                  "p50 latency of one block " + units::format(best->percentile(0.5), Dimension::Time, 3) + warm_note);
  if (r.latency_cold.reads > 0 && r.read_latency > 0) {
    j["read_latency"] =
        figure_json(r.read_latency, Dimension::Time,
                    measured_source(p, "p50 of " + std::to_string(r.latency_cold.reads) + " cold " +
                                           storage_detail::binary(static_cast<double>(r.latency_cold.block)) +
                                           " reads at random offsets, one at a time (" + r.cold_method + ")"),
                    "p99 " + units::format(r.latency_cold.percentile(0.99), Dimension::Time, 3));
  }
  if (r.capacity > 0) {
    std::string cap = units::format(static_cast<double>(r.capacity), Dimension::Bytes, 6);
    cap.erase(std::remove(cap.begin(), cap.end(), ' '), cap.end());
    j["capacity"] = {{"value", cap},
                     {"source", measured_source(p, "statvfs(" + r.dir + "): size of the file system")},
                     {"note", "decimal units, as storage capacities are written"}};
  }
  std::string notes = "Cold reads: " + r.cold_method + ". Random cold reads of one block:";
  for (const auto& pass : r.passes) {
    if (pass.pattern == "random" && pass.cache == "cold") {
      notes += " " + storage_detail::readers_text(pass.readers) + " " +
               units::format(pass.bandwidth(), Dimension::Bandwidth, 3) + ",";
    }
  }
  notes.back() = '.';
  notes += " All passes are under calibration.storage.";
  j["notes"] = notes;
  j["calibration"] = {{"provenance", to_json(p)}, {"storage", storage_calibration_json(r)}};
  return j;
}

void print_storage_report(const StorageResult& r, std::ostream& out) {
  using units::Dimension;
  out << "storage: " << r.dir << " (file system of "
      << units::format(static_cast<double>(r.capacity), Dimension::Bytes, 3) << ", "
      << storage_detail::binary(static_cast<double>(r.free_before)) << " free); test file of "
      << storage_detail::binary(static_cast<double>(r.size)) << " written in " << text::printf("%.2f", r.write_seconds)
      << " s, read in blocks of " << storage_detail::binary(static_cast<double>(r.block))
      << "; cold = " << r.cold_method << "; removed afterwards\n";
  scenario::Table t(
      {"pattern", "cache", "readers", "block", "reads", "read MiB", "time s", "GB/s", "p50 ms", "p99 ms"});
  const auto row = [&](const ReadPass& p) {
    t.add_row({p.pattern + (p.time_limited ? "*" : ""), p.cache, std::to_string(p.readers),
               storage_detail::binary(static_cast<double>(p.block)), std::to_string(p.reads),
               text::printf("%.1f", static_cast<double>(p.bytes) / static_cast<double>(units::kMiB)),
               text::printf("%.3f", p.seconds), text::printf("%.3f", p.bandwidth() / 1e9),
               text::printf("%.3f", p.percentile(0.5) * 1e3), text::printf("%.3f", p.percentile(0.99) * 1e3)});
  };
  row(r.latency_cold);
  for (const auto& p : r.passes) row(p);
  if (r.latency_warm.reads > 0) row(r.latency_warm);
  t.print_text(out);
  if (std::any_of(r.passes.begin(), r.passes.end(), [](const ReadPass& p) { return p.time_limited; })) {
    out << "(* stopped by --max-seconds before reading its whole region)\n";
  }
  out << "read_bandwidth (cold sequential, best): " << units::format(r.read_bandwidth, Dimension::Bandwidth, 4)
      << " with " << storage_detail::readers_text(r.read_bandwidth_readers) << "\n";
  out << "read_latency (cold " << storage_detail::binary(static_cast<double>(r.latency_cold.block))
      << " random read, p50): " << units::format(r.read_latency, Dimension::Time, 3) << " (p99 "
      << units::format(r.latency_cold.percentile(0.99), Dimension::Time, 3) << ")\n";
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

}  // namespace moesim::calibrate
