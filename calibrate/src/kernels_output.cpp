// The reports of the OpenBLAS kernel benchmark: the profile's devices entry, the calibration JSON, the
// kernels profile and the text report.

#include <algorithm>

#include "kernels_detail.hpp"
#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/kernels.hpp"
#include "moesim/calibrate/net_fit.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::calibrate {

// ---- JSON and text -----------------------------------------------------------------------------------

nlohmann::json kernels_devices_json(const KernelResult& r, const Provenance& p) {
  using units::Dimension;
  nlohmann::json devices = nlohmann::json::object();
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [d, rate] : r.peak_flops) {
    const KernelSample* s = r.peak_sample(d);
    const std::string routine = d == KernelDtype::F32 ? "cblas_sgemm" : "cblas_sbgemm";
    peaks[std::string(dtype_profile_key(d))] =
        figure_json(rate, Dimension::FlopRate,
                    measured_source(p, "best OpenBLAS " + routine +
                                           " rate over the measured shapes, batches and "
                                           "threads (" +
                                           shape_text(s->shape) + " x batch " + std::to_string(s->batch) + ", " +
                                           kernels_detail::threads_text(s->threads) + ")"),
                    "measured, not a datasheet peak: no datasheet states this (virtual) CPU's rate, so the best "
                    "achieved rate is the roof compute efficiencies are relative to");
  }
  if (!peaks.empty()) devices["peak_flops"] = peaks;
  if (!r.memory_fit.bands.empty() || !r.compute_fit.bands.empty()) {
    nlohmann::json e = {
        {"source",
         measured_source(p, "OpenBLAS GEMV at batch 1 (memory bands: achieved bytes/s / " +
                                (r.memory_bandwidth > 0 ? units::format(r.memory_bandwidth, Dimension::Bandwidth, 4)
                                                        : std::string("-")) +
                                ") and GEMM at batch " + std::to_string(r.max_batch) +
                                " (compute bands: achieved FLOP/s / the best GEMM rate), " +
                                kernels_detail::threads_text(r.max_threads))},
        {"note",
         "bands by weight-matrix bytes, split at the geometric midpoints between measured sizes; a kernel "
         "outside every band uses the nearest one and the simulator says so"}};
    if (!r.memory_fit.bands.empty()) e["memory"] = bands_json(r.memory_fit.bands);
    if (!r.compute_fit.bands.empty()) e["compute"] = bands_json(r.compute_fit.bands);
    devices["efficiency"] = e;
  }
  return devices;
}

nlohmann::json kernel_sample_json(const MatrixShape& shape, std::int64_t batch, std::int64_t calls_per_repeat,
                                  const std::vector<double>& seconds_per_call, const KernelCost& cost,
                                  double memory_bandwidth, double peak_flops) {
  const SampleStats t = sample_stats(seconds_per_call);
  nlohmann::json j = {{"kernel", kernel_name(batch)},
                      {"shape", {{"rows", shape.rows}, {"cols", shape.cols}, {"roles", shape.roles}}},
                      {"batch", batch},
                      {"calls_per_repeat", calls_per_repeat},
                      {"seconds_per_call", seconds_per_call},
                      {"best", quantity(t.min, "s")},
                      {"median", quantity(t.median, "s")},
                      {"weight_bytes", quantity(cost.weight_bytes, "B")},
                      {"bytes", quantity(cost.bytes, "B")},
                      {"flops", quantity(cost.flops, "FLOP")},
                      {"bandwidth", quantity(cost.bytes / t.min, "B/s")},
                      {"flop_rate", quantity(cost.flops / t.min, "FLOP/s")}};
  if (memory_bandwidth > 0) j["memory_efficiency"] = cost.bytes / t.min / memory_bandwidth;
  if (peak_flops > 0) j["compute_efficiency"] = cost.flops / t.min / peak_flops;
  return j;
}

nlohmann::json kernels_calibration_json(const KernelResult& r) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : r.samples) {
    const double peak = r.peak_flops.count(s.dtype) ? r.peak_flops.at(s.dtype) : 0.0;
    nlohmann::json j =
        kernel_sample_json(s.shape, s.batch, s.calls_per_repeat, s.seconds, s.cost, r.memory_bandwidth, peak);
    j["dtype"] = dtype_name(s.dtype);
    j["threads"] = s.threads;
    samples.push_back(j);
  }
  nlohmann::json dtypes = nlohmann::json::object();
  for (const auto& [d, sup] : r.support) {
    dtypes[std::string(dtype_name(d))] = {{"measured", sup.available}};
    if (!sup.available) dtypes[std::string(dtype_name(d))]["reason"] = sup.reason;
  }
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [d, rate] : r.peak_flops) peaks[std::string(dtype_name(d))] = quantity(rate, "FLOP/s");
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : r.skipped) skipped.push_back({{"what", s.what}, {"reason", s.reason}});
  nlohmann::json j = {
      {"benchmark",
       "OpenBLAS GEMV (batch 1) and GEMM (Y = X W^T) per dtype, shape, batch and thread count; time per call = "
       "best and median of the repetitions after a warm-up call; bytes = weights + inputs + f32 outputs, FLOPs = "
       "2 M K batch; weights read from rotating copies in a pool larger than the last-level cache"},
      {"openblas", r.openblas},
      {"openblas_note", r.openblas_note},
      {"dtypes", dtypes},
      {"last_level_cache", quantity(static_cast<double>(r.llc_bytes), "B")},
      {"pool", quantity(static_cast<double>(r.pool_bytes), "B")},
      {"samples", samples},
      {"peak_flops", peaks},
      {"fits",
       {{"memory", band_fit_json(r.memory_points, r.memory_fit)},
        {"compute", band_fit_json(r.compute_points, r.compute_fit)}}},
      {"skipped", skipped},
      {"notes", r.notes},
      {"wall_time", quantity(r.seconds, "s")}};
  if (r.memory_bandwidth > 0) {
    j["memory_bandwidth"] = {{"value", r.memory_bandwidth}, {"unit", "B/s"}, {"source", r.memory_bandwidth_source}};
  }
  return j;
}

nlohmann::json kernels_profile_json(const KernelResult& r, const Provenance& p, const std::string& id,
                                    const nlohmann::json& extra_devices, const nlohmann::json& extra_calibration) {
  nlohmann::json devices = kernels_devices_json(r, p);
  if (extra_devices.is_object()) {
    for (const auto& [k, v] : extra_devices.items()) devices[k] = v;
  }
  devices["name"] = p.cpu_model + " (" + std::to_string(p.cores) + " CPUs)";
  nlohmann::json calibration = {{"provenance", to_json(p)}, {"kernels", kernels_calibration_json(r)}};
  if (extra_calibration.is_object()) {
    for (const auto& [k, v] : extra_calibration.items()) calibration[k] = v;
  }
  std::string notes =
      "The CPU is the one device. peak_flops is the best measured OpenBLAS GEMM rate, and the efficiency bands are "
      "relative to it and to memory_bandwidth.";
  for (const auto& [d, sup] : r.support) {
    if (!sup.available) notes += " " + std::string(dtype_name(d)) + " was not measured: " + sup.reason + ".";
  }
  if (!r.openblas_note.empty()) notes += " " + r.openblas_note + ".";
  return node_profile_json(id, "This machine (" + p.host + "), measured by moesim calibrate kernels", devices,
                           calibration, notes);
}

void print_kernels_report(const KernelResult& r, std::ostream& out) {
  using units::Dimension;
  out << "OpenBLAS: " << r.openblas << "\n";
  if (!r.openblas_note.empty()) out << "note: " << r.openblas_note << "\n";
  for (const auto& [d, sup] : r.support) {
    if (!sup.available) out << dtype_name(d) << ": not measured: " << sup.reason << "\n";
  }
  out << "weights read from rotating copies in a pool of "
      << units::format_binary(units::bytes(static_cast<double>(r.pool_bytes))) << " (last-level cache "
      << units::format_binary(units::bytes(static_cast<double>(r.llc_bytes)))
      << "); time per call = best of the repetitions after a warm-up\n\n";
  const bool mem = r.memory_bandwidth > 0;
  scenario::Table t({"dtype", "kernel", "shape", "roles", "batch", "threads", "best us", "median us", "GB/s", "GFLOP/s",
                     "of mem BW %", "of peak %"});
  for (const auto& s : r.samples) {
    const auto peak = r.peak_flops.find(s.dtype);
    t.add_row({std::string(dtype_name(s.dtype)), kernel_name(s.batch), shape_text(s.shape), s.shape.roles,
               std::to_string(s.batch), std::to_string(s.threads), text::printf("%.1f", s.best_seconds() * 1e6),
               text::printf("%.1f", s.median_seconds() * 1e6), text::printf("%.2f", s.bytes_per_second() / 1e9),
               text::printf("%.2f", s.flops_per_second() / 1e9),
               mem ? text::printf("%.1f", 100 * s.bytes_per_second() / r.memory_bandwidth) : "-",
               peak != r.peak_flops.end() ? text::printf("%.1f", 100 * s.flops_per_second() / peak->second) : "-"});
  }
  t.print_text(out);
  if (mem) {
    out << "\nGEMV (batch 1, " << kernels_detail::threads_text(r.max_threads)
        << ") against the sustained memory bandwidth " << units::format(r.memory_bandwidth, Dimension::Bandwidth, 4)
        << " (" << r.memory_bandwidth_source << "):\n";
    for (const auto& s : r.samples) {
      if (s.batch != 1 || s.threads != r.max_threads) continue;
      out << "  " << dtype_name(s.dtype) << " " << shape_text(s.shape) << " (" << s.shape.roles << ", "
          << units::format_binary(units::bytes(s.cost.weight_bytes))
          << "): " << units::format(s.bytes_per_second(), Dimension::Bandwidth, 4) << " = "
          << text::printf("%.1f", 100 * s.bytes_per_second() / r.memory_bandwidth) << "% of it\n";
    }
  }
  for (const auto& [d, rate] : r.peak_flops) {
    const KernelSample* s = r.peak_sample(d);
    out << "best GEMM rate (" << dtype_name(d) << "): " << units::format(rate, Dimension::FlopRate, 4) << " at "
        << shape_text(s->shape) << " x batch " << s->batch << ", " << kernels_detail::threads_text(s->threads)
        << " (the peak compute efficiencies are relative to)\n";
  }
  print_efficiency_bands(out, "memory", r.memory_fit, "GEMV bytes/s / memory bandwidth, by weight-matrix bytes");
  print_efficiency_bands(
      out, "compute", r.compute_fit,
      "GEMM FLOP/s at batch " + std::to_string(r.max_batch) + " / the best GEMM rate, by weight-matrix bytes");
  if (!r.skipped.empty()) {
    out << "\nnot measured (" << r.skipped.size() << "):\n";
    for (const auto& s : r.skipped) out << "  " << s.what << ": " << s.reason << "\n";
  }
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

}  // namespace moesim::calibrate
