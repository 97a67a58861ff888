// The device-independent half of the CUDA backend (gpu.hpp): dtypes and costs, the fit of GPU samples into
// the profile's efficiency bands (the CPU path's fit_efficiency_bands), the profile JSON and the text
// reports. Compiled on every machine; the measurements are in calibrate/cuda/, a plugin that gpu_plugin.cpp loads.

#include "moesim/calibrate/gpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "moesim/calibrate/net_fit.hpp"
#include "moesim/model/collective.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::calibrate {

namespace {

std::string sample_label(const GpuKernelSample& s) {
  return std::string(gpu_dtype_name(s.dtype)) + " " + (s.batch == 1 ? "gemv " : "gemm ") + shape_text(s.shape) + " (" +
         s.shape.roles + ") batch " + std::to_string(s.batch);
}

nlohmann::json times_json(const TimeSamples& t) {
  return {{"seconds", t.seconds}, {"best", quantity(t.best(), "s")}, {"median", quantity(t.median(), "s")}};
}

std::string gib(double bytes) { return units::format_binary(units::bytes(bytes)); }

}  // namespace

// ---- backends ----------------------------------------------------------------------------------------

Backend parse_backend(std::string_view name, const std::string& flag) {
  if (name == "cpu") return Backend::Cpu;
  if (name == "cuda") return Backend::Cuda;
  throw UserError(flag + ": unknown backend '" + std::string(name) + "'" + text::did_you_mean(name, {"cpu", "cuda"}) +
                  "; valid: cpu (this machine's CPU, OpenBLAS), cuda (an NVIDIA GPU, cuBLAS)");
}

bool cuda_backend_built() {
#ifdef MOESIM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

// ---- dtypes and costs --------------------------------------------------------------------------------

std::string_view gpu_dtype_name(GpuDtype d) {
  switch (d) {
    case GpuDtype::Bf16:
      return "bf16";
    case GpuDtype::Fp16:
      return "fp16";
    case GpuDtype::Fp8:
      return "fp8";
  }
  return "?";
}

double gpu_dtype_size(GpuDtype d) { return d == GpuDtype::Fp8 ? 1.0 : 2.0; }

GpuDtype parse_gpu_dtype(std::string_view name, const std::string& flag) {
  if (name == "bf16") return GpuDtype::Bf16;
  if (name == "fp16" || name == "f16") return GpuDtype::Fp16;
  if (name == "fp8") return GpuDtype::Fp8;
  throw UserError(flag + ": unknown GPU dtype '" + std::string(name) + "'" +
                  text::did_you_mean(name, {"bf16", "fp16", "fp8"}) + "; valid with --backend cuda: bf16, fp16, fp8");
}

const char* gpu_routine(GpuDtype d) { return d == GpuDtype::Fp8 ? "cublasLtMatmul" : "cublasGemmEx"; }

bool gpu_dtype_supported(GpuDtype d, int cc_major, int cc_minor, std::string* reason) {
  if (d != GpuDtype::Fp8) return true;
  if (cc_major > 8 || (cc_major == 8 && cc_minor >= 9)) return true;
  if (reason) {
    *reason = "fp8 needs FP8 tensor cores (compute capability >= 8.9: Ada, Hopper or later); this GPU is " +
              std::to_string(cc_major) + "." + std::to_string(cc_minor);
  }
  return false;
}

KernelCost gpu_kernel_cost(GpuDtype d, const MatrixShape& s, std::int64_t batch) {
  const double m = static_cast<double>(s.rows);
  const double k = static_cast<double>(s.cols);
  const double b = static_cast<double>(batch);
  KernelCost c;
  c.weight_bytes = m * k * gpu_dtype_size(d);
  c.input_bytes = b * k * gpu_dtype_size(d);
  c.output_bytes = b * m * 4.0;  // f32 output (CUDA_R_32F), as kernel_cost() counts the CPU's f32 output
  c.bytes = c.weight_bytes + c.input_bytes + c.output_bytes;
  c.flops = 2.0 * m * k * b;  // one multiply-add per weight per token
  return c;
}

std::map<GpuDtype, double> parse_peak_flops(const std::string& text, const std::string& flag) {
  std::map<GpuDtype, double> out;
  if (text.empty()) throw UserError(flag + " is empty; give a datasheet peak, e.g. 989TFLOPS or bf16=989TFLOPS");
  for (const auto& item : text::split(text, ',')) {
    const auto eq = item.find('=');
    const std::string value = eq == std::string::npos ? item : item.substr(eq + 1);
    const double v = units::parse(value, units::Dimension::FlopRate, flag);
    if (!(v > 0)) throw UserError(flag + ": the peak must be > 0, e.g. 989TFLOPS");
    if (eq == std::string::npos) {
      out[GpuDtype::Bf16] = v;  // a 16-bit tensor-core figure: bf16 and fp16 share it on NVIDIA datasheets
      out[GpuDtype::Fp16] = v;
    } else {
      out[parse_gpu_dtype(item.substr(0, eq), flag)] = v;
    }
  }
  return out;
}

// ---- device and samples ------------------------------------------------------------------------------

nlohmann::json to_json(const GpuDeviceInfo& d) {
  return {{"index", d.index},
          {"count", d.count},
          {"name", d.name},
          {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
          {"memory", quantity(static_cast<double>(d.memory_bytes), "B")},
          {"l2_cache", quantity(static_cast<double>(d.l2_bytes), "B")},
          {"sm_count", d.sm_count},
          {"driver", d.driver},
          {"runtime", d.runtime},
          {"cublas", d.cublas},
          {"nccl", d.nccl}};
}

double TimeSamples::best() const {
  MOESIM_CHECK(!seconds.empty(), "a time sample without repetitions");
  return *std::min_element(seconds.begin(), seconds.end());
}

double TimeSamples::median() const {
  MOESIM_CHECK(!seconds.empty(), "a time sample without repetitions");
  return sample_stats(seconds).median;
}

const char* copy_kind_name(CopyKind k) {
  switch (k) {
    case CopyKind::D2D:
      return "d2d";
    case CopyKind::H2D:
      return "h2d";
    case CopyKind::D2H:
      return "d2h";
  }
  return "?";
}

double copy_counted_bytes(CopyKind k, std::uint64_t size) {
  const double s = static_cast<double>(size);
  return k == CopyKind::D2D ? 2.0 * s : s;  // d2d reads and writes device memory; h2d/d2h cross the link once
}

double GpuChainSample::overhead_per_kernel() const {
  if (kernels.empty()) return 0;
  return (time.best() - roofline_seconds) / static_cast<double>(kernels.size());
}

std::optional<double> GpuChainSample::eager_overhead_per_kernel() const {
  if (kernels.empty() || eager.seconds.empty()) return std::nullopt;
  return (eager.best() - roofline_seconds) / static_cast<double>(kernels.size());
}

double NcclSample::bus_bandwidth() const {
  if (gpus < 1) return 0;
  // nccl-tests' bus bandwidth (doc/PERFORMANCE.md): the algorithm bandwidth times the bytes a ring moves
  // per byte of data, 2(n−1)/n for an all-reduce and (n−1)/n for an all-gather (model/collective.hpp).
  const double per_byte =
      op == "all_reduce" ? cost::ring_allreduce(1.0, gpus).bytes : cost::ring_allgather(1.0, gpus).bytes;
  return algorithm_bandwidth() * per_byte;
}

const GpuKernelSample* GpuKernelResult::best_gemm(GpuDtype d) const {
  const GpuKernelSample* best = nullptr;
  for (const auto& s : samples) {
    if (s.dtype != d || s.batch <= 1) continue;
    if (!best || s.flops_per_second() > best->flops_per_second()) best = &s;
  }
  return best;
}

std::optional<double> GpuKernelResult::kernel_overhead(std::string* how) const {
  if (!chains.empty() && memory_bandwidth > 0) {
    // Over every chain measured: (their time − their rooflines) / their kernels, so that a model with more
    // kernels counts more.
    double beyond = 0, kernels = 0;
    std::string which;
    for (const auto& c : chains) {
      beyond += c.time.best() - c.roofline_seconds;
      kernels += static_cast<double>(c.kernels.size());
      which += std::string(which.empty() ? "" : "; ") + (c.model.empty() ? "" : c.model + ": ") +
               std::to_string(c.kernels.size()) + " " + std::string(gpu_dtype_name(c.dtype)) + " GEMVs (top_k " +
               std::to_string(c.top_k) + " experts' w1, v1, w2), best " +
               units::format(c.time.best(), units::Dimension::Time, 4) + ", roofline " +
               units::format(c.roofline_seconds, units::Dimension::Time, 4);
    }
    if (kernels <= 0) return std::nullopt;
    if (how) {
      *how = std::string(chains.size() == 1 ? "an MoE chain" : "MoE chains") +
             " of GEMVs one after another, replayed from a CUDA graph: (chain time - roofline) / kernels, over " +
             which;
    }
    return std::max(beyond / kernels, 0.0);
  }
  if (launch && !launch->in_graph.seconds.empty()) {
    if (how) *how = "an empty kernel replayed from a CUDA graph (" + std::to_string(launch->launches) + " kernels)";
    return launch->in_graph.best();
  }
  if (launch) {
    if (how) *how = "an empty kernel launched back to back (" + std::to_string(launch->launches) + " launches)";
    return launch->back_to_back.best();
  }
  return std::nullopt;
}

const GpuCopySample* GpuMemoryResult::find(CopyKind k) const {
  for (const auto& c : copies) {
    if (c.kind == k) return &c;
  }
  return nullptr;
}

// ---- the fit -----------------------------------------------------------------------------------------

void fit_gpu_kernels(GpuKernelResult& r, const std::map<GpuDtype, double>& given_peaks) {
  // By dtype; within one, the order measured (shape as given, then batch).
  std::stable_sort(r.samples.begin(), r.samples.end(), [](const GpuKernelSample& a, const GpuKernelSample& b) {
    return static_cast<int>(a.dtype) < static_cast<int>(b.dtype);
  });
  r.max_batch = 0;
  for (const auto& s : r.samples) {
    if (s.batch > 1) r.max_batch = std::max(r.max_batch, s.batch);
  }
  r.peak_flops.clear();
  r.peak_given.clear();
  for (const auto d : kGpuDtypes) {
    bool measured = false;
    for (const auto& s : r.samples) measured = measured || s.dtype == d;
    if (!measured) continue;
    if (const auto it = given_peaks.find(d); it != given_peaks.end()) {
      r.peak_flops[d] = it->second;
      r.peak_given[d] = true;
    } else if (const GpuKernelSample* best = r.best_gemm(d)) {
      r.peak_flops[d] = best->flops_per_second();
      r.peak_given[d] = false;
    } else {
      r.notes.push_back(std::string(gpu_dtype_name(d)) +
                        ": no GEMM (batch > 1) was measured and no --peak-flops given, so no peak FLOP rate");
    }
  }
  r.memory_points.clear();
  r.compute_points.clear();
  for (const auto& s : r.samples) {
    if (s.batch == 1 && r.memory_bandwidth > 0) {
      r.memory_points.push_back({s.cost.weight_bytes, s.bytes_per_second() / r.memory_bandwidth, sample_label(s)});
    }
    if (s.batch > 1 && s.batch == r.max_batch && r.peak_flops.count(s.dtype)) {
      r.compute_points.push_back({s.cost.weight_bytes, s.flops_per_second() / r.peak_flops[s.dtype], sample_label(s)});
    }
  }
  if (r.memory_bandwidth <= 0) {
    r.notes.push_back("no device memory bandwidth was measured or given, so no memory efficiency bands");
  }
  r.memory_fit = fit_efficiency_bands(r.memory_points);
  r.compute_fit = fit_efficiency_bands(r.compute_points);
  for (auto& c : r.chains) {
    c.roofline_seconds = 0;
    const auto peak = r.peak_flops.find(c.dtype);
    // The cost model's kernel roofline (cost::roofline); a rate not measured bounds nothing. No narrowing
    // below: all is double, but clang-tidy 14 reports the constant infinity as out of double's range.
    constexpr double kUnbounded = std::numeric_limits<double>::infinity();
    const cost::Rate rate{
        r.memory_bandwidth > 0 ? r.memory_bandwidth : kUnbounded,  // NOLINT(bugprone-narrowing-conversions)
        peak != r.peak_flops.end() ? peak->second : kUnbounded};   // NOLINT(bugprone-narrowing-conversions)
    for (const auto& k : c.kernels) {
      const KernelCost kc = gpu_kernel_cost(c.dtype, k, c.batch);
      c.roofline_seconds += cost::roofline(kc.bytes, kc.flops, rate);
    }
  }
}

// ---- sources -----------------------------------------------------------------------------------------

std::string gpu_measured_source(const Provenance& p, const GpuDeviceInfo& d, const std::string& what) {
  return what + ", measured by `" + p.command + "` on " + d.name + " (CUDA device " + std::to_string(d.index) + " of " +
         std::to_string(d.count) + ", compute capability " + std::to_string(d.cc_major) + "." +
         std::to_string(d.cc_minor) + ", driver " + d.driver + ") in " + p.host + ", " + p.day + ", moesim " + p.commit;
}

// ---- kernels: JSON and text --------------------------------------------------------------------------

nlohmann::json gpu_kernels_calibration_json(const GpuKernelResult& r) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : r.samples) {
    const double peak = r.peak_flops.count(s.dtype) ? r.peak_flops.at(s.dtype) : 0.0;
    nlohmann::json j =
        kernel_sample_json(s.shape, s.batch, s.calls_per_repeat, s.time.seconds, s.cost, r.memory_bandwidth, peak);
    j["dtype"] = gpu_dtype_name(s.dtype);
    j["routine"] = gpu_routine(s.dtype);
    if (!s.eager.seconds.empty()) j["eager_time"] = times_json(s.eager);
    samples.push_back(j);
  }
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [d, rate] : r.peak_flops) {
    peaks[std::string(gpu_dtype_name(d))] = {
        {"value", rate},
        {"unit", "FLOP/s"},
        {"source", r.peak_given.at(d) ? "--peak-flops (datasheet)" : "best GEMM measured"}};
  }
  nlohmann::json unsupported = nlohmann::json::object();
  for (const auto& [d, why] : r.unsupported) unsupported[std::string(gpu_dtype_name(d))] = why;
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : r.skipped) skipped.push_back({{"what", s.what}, {"reason", s.reason}});
  nlohmann::json chains = nlohmann::json::array();
  for (const auto& c : r.chains) {
    nlohmann::json ks = nlohmann::json::array();
    for (const auto& k : c.kernels) ks.push_back({{"rows", k.rows}, {"cols", k.cols}, {"roles", k.roles}});
    nlohmann::json cj = {{"model", c.model},
                         {"dtype", gpu_dtype_name(c.dtype)},
                         {"top_k", c.top_k},
                         {"batch", c.batch},
                         {"kernels", ks},
                         {"time", times_json(c.time)},
                         {"roofline", quantity(c.roofline_seconds, "s")},
                         {"overhead_per_kernel", quantity(c.overhead_per_kernel(), "s")}};
    if (const auto eager = c.eager_overhead_per_kernel()) {
      cj["eager_time"] = times_json(c.eager);
      cj["eager_overhead_per_kernel"] = quantity(*eager, "s");
    }
    chains.push_back(cj);
  }
  nlohmann::json j = {
      {"backend", "cuda"},
      {"benchmark",
       "cuBLAS GEMV (batch 1) and GEMM (Y = X W^T): cublasGemmEx (bf16, fp16; CUBLAS_COMPUTE_32F, f32 output) and "
       "cublasLtMatmul (fp8 E4M3, f32 output); time per call from CUDA events = best and median of the repetitions "
       "after a warm-up, replayed from a CUDA graph of calls (time; the fits use it) and issued from the host one "
       "after another (eager_time); bytes = weights + inputs + f32 outputs, FLOPs = 2 M K batch; weights read from "
       "rotating copies in a pool of at least 3 x the L2 cache"},
      {"device", to_json(r.device)},
      {"pool", quantity(static_cast<double>(r.pool_bytes), "B")},
      {"samples", samples},
      {"peak_flops", peaks},
      {"unsupported", unsupported},
      {"fits",
       {{"memory", band_fit_json(r.memory_points, r.memory_fit)},
        {"compute", band_fit_json(r.compute_points, r.compute_fit)}}},
      {"moe_chains", chains},
      {"skipped", skipped},
      {"notes", r.notes},
      {"wall_time", quantity(r.seconds, "s")}};
  if (r.memory_bandwidth > 0) {
    j["memory_bandwidth"] = {{"value", r.memory_bandwidth}, {"unit", "B/s"}, {"source", r.memory_bandwidth_source}};
  }
  if (r.copy) {
    j["copy"] = {{"kind", copy_kind_name(r.copy->kind)},
                 {"size", quantity(static_cast<double>(r.copy->size), "B")},
                 {"counted_bytes", quantity(r.copy->bytes, "B")},
                 {"time", times_json(r.copy->time)},
                 {"bandwidth", quantity(r.copy->bandwidth(), "B/s")}};
  }
  if (r.launch) {
    j["launch"] = {{"launches", r.launch->launches},
                   {"back_to_back_per_launch", times_json(r.launch->back_to_back)},
                   {"launch_and_synchronize", times_json(r.launch->launch_sync)}};
    if (!r.launch->in_graph.seconds.empty()) j["launch"]["in_graph_per_kernel"] = times_json(r.launch->in_graph);
  }
  return j;
}

namespace {
// The profile's `devices`: the GPU's name and memory, and its memory bandwidth from the device-to-device
// copy when one was measured (`d2d` may be null). Both GPU profiles (kernels and memory) start from it.
nlohmann::json gpu_devices_json(const GpuDeviceInfo& device, const Provenance& p, const GpuCopySample* d2d) {
  using units::Dimension;
  nlohmann::json devices = nlohmann::json::object();
  devices["name"] = device.name;
  devices["memory"] = figure_json(static_cast<double>(device.memory_bytes), Dimension::Bytes,
                                  gpu_measured_source(p, device, "device memory (cudaDeviceProp::totalGlobalMem)"));
  if (d2d) {
    devices["memory_bandwidth"] =
        figure_json(d2d->bandwidth(), Dimension::Bandwidth,
                    gpu_measured_source(p, device,
                                        "device-to-device cudaMemcpy of " + gib(static_cast<double>(d2d->size)) +
                                            ", counted as 2 x size (read and written), best of " +
                                            std::to_string(d2d->time.seconds.size())),
                    "the sustained HBM bandwidth the memory efficiency bands are relative to");
  }
  return devices;
}
}  // namespace

nlohmann::json gpu_kernels_profile_json(const GpuKernelResult& r, const Provenance& p, const std::string& id) {
  using units::Dimension;
  const auto src = [&](const std::string& what) { return gpu_measured_source(p, r.device, what); };
  nlohmann::json devices = gpu_devices_json(r.device, p, r.copy ? &*r.copy : nullptr);
  if (!r.copy && r.memory_bandwidth > 0) {
    devices["memory_bandwidth"] =
        figure_json(r.memory_bandwidth, Dimension::Bandwidth,
                    "given by the user with --memory-bandwidth to `" + p.command + "` on " + p.host + ", " + p.day,
                    "not measured by this command; the memory efficiency bands are relative to it");
  }
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [d, rate] : r.peak_flops) {
    const std::string key(gpu_dtype_name(d));
    if (r.peak_given.at(d)) {
      peaks[key] = figure_json(rate, Dimension::FlopRate,
                               "given by the user with --peak-flops to `" + p.command + "` for " + r.device.name +
                                   " (a datasheet figure), " + p.day,
                               "the compute efficiency bands are relative to it");
    } else {
      const GpuKernelSample* s = r.best_gemm(d);
      peaks[key] = figure_json(
          rate, Dimension::FlopRate,
          src(std::string("best ") + gpu_routine(d) + " rate over the measured shapes and batches (" +
              (s ? shape_text(s->shape) + " x batch " + std::to_string(s->batch) : std::string("-")) + ")"),
          "measured, not a datasheet peak (give --peak-flops for that); the compute efficiency bands are relative "
          "to it");
    }
  }
  if (!peaks.empty()) devices["peak_flops"] = peaks;
  if (!r.memory_fit.bands.empty() || !r.compute_fit.bands.empty()) {
    nlohmann::json e = {
        {"source",
         src("cuBLAS GEMV at batch 1 (memory bands: achieved bytes/s / " +
             (r.memory_bandwidth > 0 ? units::format(r.memory_bandwidth, Dimension::Bandwidth, 4) : std::string("-")) +
             ") and GEMM at batch " + std::to_string(r.max_batch) + " (compute bands: achieved FLOP/s / peak_flops)")},
        {"note",
         "bands by weight-matrix bytes, split at the geometric midpoints between measured sizes; a kernel outside "
         "every band uses the nearest one and the simulator says so"}};
    if (!r.memory_fit.bands.empty()) e["memory"] = bands_json(r.memory_fit.bands);
    if (!r.compute_fit.bands.empty()) e["compute"] = bands_json(r.compute_fit.bands);
    devices["efficiency"] = e;
  }
  std::string how;
  if (const auto ko = r.kernel_overhead(&how)) {
    devices["kernel_overhead"] =
        figure_json(*ko, Dimension::Time, src("time per kernel beyond its roofline: " + how),
                    "bare CUDA stream dispatch from one C++ thread; a framework's own dispatch comes on top");
  }
  nlohmann::json calibration = {{"provenance", to_json(p)}, {"kernels", gpu_kernels_calibration_json(r)}};
  std::string notes = "The GPU is the device (" + std::to_string(r.device.count) +
                      (r.device.count == 1 ? " GPU" : " GPUs") + " visible; device " + std::to_string(r.device.index) +
                      " measured). ";
  bool any_given = false, any_measured = false;
  for (const auto& [d, given] : r.peak_given) (given ? any_given : any_measured) = true;
  if (any_given) notes += "peak_flops is the datasheet figure given with --peak-flops";
  if (any_given && any_measured) notes += " where given, else ";
  if (any_measured) notes += std::string(any_given ? "" : "peak_flops is ") + "the best measured GEMM rate";
  notes += "; the efficiency bands are relative to it and to memory_bandwidth (a device-to-device copy).";
  for (const auto& [d, why] : r.unsupported)
    notes += " " + std::string(gpu_dtype_name(d)) + " was not measured: " + why + ".";
  auto profile = node_profile_json(id, r.device.name + ", measured by moesim calibrate kernels --backend cuda", devices,
                                   calibration, notes);
  profile["devices"]["count"] = r.device.count;
  profile["devices"]["gpu_vendor"] = "nvidia";  // measured through CUDA
  return profile;
}

void print_gpu_kernels_report(const GpuKernelResult& r, std::ostream& out) {
  using units::Dimension;
  out << "GPU: " << r.device.name << " (device " << r.device.index << " of " << r.device.count
      << ", compute capability " << r.device.cc_major << "." << r.device.cc_minor << ", "
      << gib(static_cast<double>(r.device.memory_bytes)) << ", L2 " << gib(static_cast<double>(r.device.l2_bytes))
      << ", driver " << r.device.driver << ", cuBLAS " << r.device.cublas << ")\n";
  for (const auto& [d, why] : r.unsupported) out << gpu_dtype_name(d) << ": not measured: " << why << "\n";
  out << "weights read from rotating copies in a pool of " << gib(static_cast<double>(r.pool_bytes))
      << "; time per call = best of the repetitions (CUDA events) after a warm-up, replayed from a CUDA graph "
         "(the host's launch cost removed; the fits use it); eager = each call issued from the host\n";
  if (r.copy) {
    out << "device memory bandwidth (D2D cudaMemcpy of " << gib(static_cast<double>(r.copy->size))
        << ", 2 x size counted): " << units::format(r.copy->bandwidth(), Dimension::Bandwidth, 4) << "\n";
  }
  out << "\n";
  const bool mem = r.memory_bandwidth > 0;
  scenario::Table t({"dtype", "kernel", "shape", "roles", "batch", "best us", "median us", "eager us", "GB/s",
                     "TFLOP/s", "of mem BW %", "of peak %"});
  for (const auto& s : r.samples) {
    const auto peak = r.peak_flops.find(s.dtype);
    t.add_row({std::string(gpu_dtype_name(s.dtype)), kernel_name(s.batch), shape_text(s.shape), s.shape.roles,
               std::to_string(s.batch), text::printf("%.2f", s.time.best() * 1e6),
               text::printf("%.2f", s.time.median() * 1e6),
               s.eager.seconds.empty() ? "-" : text::printf("%.2f", s.eager.best() * 1e6),
               text::printf("%.1f", s.bytes_per_second() / 1e9), text::printf("%.2f", s.flops_per_second() / 1e12),
               mem ? text::printf("%.1f", 100 * s.bytes_per_second() / r.memory_bandwidth) : "-",
               peak != r.peak_flops.end() ? text::printf("%.1f", 100 * s.flops_per_second() / peak->second) : "-"});
  }
  t.print_text(out);
  for (const auto& [d, rate] : r.peak_flops) {
    out << "peak (" << gpu_dtype_name(d) << "): " << units::format(rate, Dimension::FlopRate, 4);
    if (r.peak_given.at(d)) {
      out << " (given with --peak-flops)\n";
    } else {
      const GpuKernelSample* s = r.best_gemm(d);
      out << " = the best GEMM measured";
      if (s) out << ", " << shape_text(s->shape) << " x batch " << s->batch;
      out << " (no --peak-flops given)\n";
    }
  }
  if (r.launch) {
    out << "\nempty kernel: " << units::format(r.launch->back_to_back.best(), Dimension::Time, 3)
        << " per launch back to back (" << r.launch->launches << " launches), "
        << units::format(r.launch->launch_sync.best(), Dimension::Time, 3) << " launch + synchronize";
    if (!r.launch->in_graph.seconds.empty()) {
      out << ", " << units::format(r.launch->in_graph.best(), Dimension::Time, 3) << " per kernel in a CUDA graph";
    }
    out << "\n";
  }
  for (const auto& c : r.chains) {
    out << "MoE chain (" << (c.model.empty() ? "" : c.model + ", ") << gpu_dtype_name(c.dtype) << ", top_k " << c.top_k
        << ", " << c.kernels.size() << " GEMVs): " << units::format(c.time.best(), Dimension::Time, 4)
        << " per chain, roofline " << units::format(c.roofline_seconds, Dimension::Time, 4) << ", "
        << units::format(c.overhead_per_kernel(), Dimension::Time, 3) << " per kernel beyond the roofline (CUDA graph)";
    if (const auto eager = c.eager_overhead_per_kernel()) {
      out << "; eager " << units::format(c.eager.best(), Dimension::Time, 4) << ", "
          << units::format(*eager, Dimension::Time, 3) << " per kernel";
    }
    out << "\n";
  }
  std::string how;
  if (const auto ko = r.kernel_overhead(&how)) {
    out << "kernel_overhead: " << units::format(*ko, Dimension::Time, 3) << " (" << how << ")\n";
  }
  print_efficiency_bands(out, "memory", r.memory_fit, "GEMV bytes/s / device memory bandwidth, by weight-matrix bytes");
  print_efficiency_bands(
      out, "compute", r.compute_fit,
      "GEMM FLOP/s at batch " + std::to_string(r.max_batch) + " / peak_flops, by weight-matrix bytes");
  if (!r.skipped.empty()) {
    out << "\nnot measured (" << r.skipped.size() << "):\n";
    for (const auto& s : r.skipped) out << "  " << s.what << ": " << s.reason << "\n";
  }
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

// ---- memory: JSON and text ---------------------------------------------------------------------------

nlohmann::json gpu_memory_calibration_json(const GpuMemoryResult& r) {
  nlohmann::json copies = nlohmann::json::array();
  for (const auto& c : r.copies) {
    copies.push_back({{"kind", copy_kind_name(c.kind)},
                      {"size", quantity(static_cast<double>(c.size), "B")},
                      {"counted_bytes", quantity(c.bytes, "B")},
                      {"time", times_json(c.time)},
                      {"bandwidth", quantity(c.bandwidth(), "B/s")}});
  }
  nlohmann::json nccl = nlohmann::json::array();
  for (const auto& s : r.nccl) {
    nccl.push_back({{"op", s.op},
                    {"gpus", s.gpus},
                    {"bytes", quantity(static_cast<double>(s.bytes), "B")},
                    {"time", times_json(s.time)},
                    {"algorithm_bandwidth", quantity(s.algorithm_bandwidth(), "B/s")},
                    {"bus_bandwidth", quantity(s.bus_bandwidth(), "B/s")}});
  }
  return {{"backend", "cuda"},
          {"benchmark",
           "device-to-device cudaMemcpy (counted 2 x size: read and written), host-to-device and device-to-host "
           "cudaMemcpy from/to pinned host memory (counted 1 x size); CUDA events, best of the repetitions after a "
           "warm-up; NCCL all-reduce (sum, bf16) and all-to-all over every GPU (one process, ncclCommInitAll), "
           "bus bandwidth as nccl-tests counts it"},
          {"device", to_json(r.device)},
          {"copies", copies},
          {"nccl", nccl},
          {"notes", r.notes},
          {"wall_time", quantity(r.seconds, "s")}};
}

nlohmann::json gpu_memory_profile_json(const GpuMemoryResult& r, const Provenance& p, const std::string& id) {
  using units::Dimension;
  nlohmann::json devices = gpu_devices_json(r.device, p, r.find(CopyKind::D2D));
  std::string notes = "The GPU is the device. memory_bandwidth is a device-to-device copy.";
  for (const auto k : {CopyKind::H2D, CopyKind::D2H}) {
    if (const GpuCopySample* c = r.find(k)) {
      notes += std::string(" ") + (k == CopyKind::H2D ? "Host to device" : "Device to host") + " (pinned, " +
               gib(static_cast<double>(c->size)) + "): " + units::format(c->bandwidth(), Dimension::Bandwidth, 4) + ".";
    }
  }
  if (!r.nccl.empty()) notes += " NCCL collectives are in calibration.memory.nccl.";
  auto profile = node_profile_json(id, r.device.name + ", measured by moesim calibrate memory --backend cuda", devices,
                                   {{"provenance", to_json(p)}, {"memory", gpu_memory_calibration_json(r)}}, notes);
  profile["devices"]["count"] = r.device.count;
  profile["devices"]["gpu_vendor"] = "nvidia";  // measured through CUDA
  return profile;
}

void print_gpu_memory_report(const GpuMemoryResult& r, std::ostream& out) {
  using units::Dimension;
  out << "GPU: " << r.device.name << " (device " << r.device.index << " of " << r.device.count << ", "
      << gib(static_cast<double>(r.device.memory_bytes)) << ", L2 " << gib(static_cast<double>(r.device.l2_bytes))
      << ")\n\n";
  scenario::Table t({"copy", "size", "counted bytes", "best us", "median us", "GB/s"});
  for (const auto& c : r.copies) {
    t.add_row({copy_kind_name(c.kind), gib(static_cast<double>(c.size)), gib(c.bytes),
               text::printf("%.1f", c.time.best() * 1e6), text::printf("%.1f", c.time.median() * 1e6),
               text::printf("%.1f", c.bandwidth() / 1e9)});
  }
  t.print_text(out);
  if (!r.nccl.empty()) {
    out << "\nNCCL (" << r.nccl.front().gpus << " GPUs):\n";
    scenario::Table n({"op", "bytes per GPU", "best us", "median us", "algbw GB/s", "busbw GB/s"});
    for (const auto& s : r.nccl) {
      n.add_row({s.op, gib(static_cast<double>(s.bytes)), text::printf("%.1f", s.time.best() * 1e6),
                 text::printf("%.1f", s.time.median() * 1e6), text::printf("%.1f", s.algorithm_bandwidth() / 1e9),
                 text::printf("%.1f", s.bus_bandwidth() / 1e9)});
    }
    n.print_text(out);
  }
  if (const GpuCopySample* c = r.find(CopyKind::D2D)) {
    out << "\ndevice memory bandwidth (D2D copy, read + write counted): "
        << units::format(c->bandwidth(), Dimension::Bandwidth, 4) << "\n";
  }
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

}  // namespace moesim::calibrate
