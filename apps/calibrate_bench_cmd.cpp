// `moesim calibrate kernels | memory | storage`: the microbenchmarks of this machine (calibrate/BENCH.md).
// This file parses the options, calls calibrate/{kernels,memory,storage}.hpp, prints, and writes the profile.

#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/gpu.hpp"
#include "moesim/calibrate/kernels.hpp"
#include "moesim/calibrate/memory.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/calibrate/storage.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

std::vector<int> parse_threads(const std::string& s, const std::string& flag) {
  std::vector<int> out;
  for (const auto t : parse_whole_numbers(s, flag, 1, calibrate::online_cpus(), "1,2"))
    out.push_back(static_cast<int>(t));
  return out;
}

double positive(const po::variables_map& vm, const char* key, double fallback) {
  if (!vm.count(key)) return fallback;
  const double v = vm[key].as<double>();
  if (!(v > 0)) throw UserError(std::string("--") + key + " must be > 0 seconds");
  return v;
}

int positive_int(const po::variables_map& vm, const char* key, int fallback) {
  if (!vm.count(key)) return fallback;
  const int v = vm[key].as<int>();
  if (v < 1) throw UserError(std::string("--") + key + " must be at least 1");
  return v;
}

/// --memory-bandwidth: the bandwidth memory efficiencies are divided by. Bounded to a plausible range, so
/// that each efficiency (measured bytes/s / this) is a finite positive number the band fit can use: from
/// 1 MB/s (far below any DRAM; a single DDR channel gives ~10 GB/s) to 1 PB/s (over a hundred times
/// HBM3e's 8 TB/s per B200, NVIDIA's datasheet). `example` is a typical figure for the backend.
double memory_bandwidth_flag(const po::variables_map& vm, const std::string& example) {
  const std::string text = vm["memory-bandwidth"].as<std::string>();
  const double v = units::parse(text, units::Dimension::Bandwidth, "--memory-bandwidth");
  constexpr double kLowest = 1e6, kHighest = 1e15;  // bytes/s: 1 MB/s and 1 PB/s (see above)
  if (!(v >= kLowest && v <= kHighest)) {
    throw UserError("--memory-bandwidth " + text + " is outside the plausible range 1MB/s to 1PB/s; give the " +
                    "sustained bandwidth of this machine's memory, e.g. " + example);
  }
  return v;
}

calibrate::Progress make_progress(const po::variables_map& vm) {
  return calibrate::Progress(vm.count("json") || vm.count("quiet") ? nullptr : &std::cerr);
}

/// The --out file, opened before the measurement so that a bad path fails at once (not after minutes of
/// measuring); written whole or not at all (moesim::OutputFile).
std::optional<OutputFile> open_out(const po::variables_map& vm) {
  if (!vm.count("out")) return std::nullopt;
  return std::optional<OutputFile>(std::in_place, vm["out"].as<std::string>(), "--out");
}

/// Writes `profile` to --out when given; prints it (--json) or says where it went.
void finish(const po::variables_map& vm, std::optional<OutputFile>& file, const nlohmann::json& profile,
            std::ostream& out) {
  const std::string text = calibrate::profile_text(profile);
  if (file) {
    file->stream() << text;
    file->commit();
  }
  if (vm.count("json")) {
    out << text;
  } else if (file) {
    out << "wrote " << file->path() << " (" << profile.value("kind", std::string("profile")) << " profile \""
        << profile.value("id", std::string()) << "\")\n";
  }
}

void add_common(po::options_description& desc) {
  // clang-format off
  desc.add_options()
    ("out", po::value<std::string>(), "write the profile (hwprofiles/ format, with the raw samples under \"calibration\") to this file, atomically")
    ("id", po::value<std::string>(), "the profile's id (default: --out's file name, else this host's name)")
    ("json", "print the profile with the raw samples as JSON (units on every number) instead of the text report")
    ("quiet", "no progress lines on stderr");
  // clang-format on
}

/// --backend cpu|cuda, and the options that belong to one backend only given to the other: UserError.
calibrate::Backend backend_of(const po::variables_map& vm, std::initializer_list<const char*> cpu_only,
                              std::initializer_list<const char*> cuda_only) {
  const auto b = vm.count("backend") ? calibrate::parse_backend(vm["backend"].as<std::string>(), "--backend")
                                     : calibrate::Backend::Cpu;
  for (const char* o : b == calibrate::Backend::Cpu ? cuda_only : cpu_only)
    if (vm.count(o))
      throw UserError(std::string("--") + o + " is for --backend " +
                      (b == calibrate::Backend::Cpu ? "cuda (an NVIDIA GPU)" : "cpu (this machine's CPU)") +
                      "; drop it or choose that backend");
  return b;
}

int device_of(const po::variables_map& vm) {
  if (!vm.count("device")) return 0;
  const int d = vm["device"].as<int>();
  if (d < 0) throw UserError("--device must be a CUDA device index >= 0 (see nvidia-smi -L)");
  return d;
}

std::string host_id(const calibrate::Provenance& p, const po::variables_map& vm, const std::string& suffix) {
  if (vm.count("id")) {
    std::string id = vm["id"].as<std::string>();  // not const: returned by move
    if (id.empty()) throw UserError("--id is empty; give a profile id, e.g. my-host");
    return id;
  }
  return calibrate::id_for_output(vm.count("out") ? vm["out"].as<std::string>() : "",
                                  calibrate::profile_id(p.host + suffix));
}

/// The options of `calibrate kernels`, the common ones (--out, --id, --json, --quiet) included.
po::options_description describe_kernels_options() {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("model", po::value<std::string>(), "zoo id or config.json whose matrix shapes to measure (default dbrx-instruct); several, comma-separated, measure each shape once and (cuda) each MoE model's expert chain")
    ("shapes", po::value<std::string>(), "a grid of ROWSxCOLS (outputs x inputs) instead, e.g. 6144x10752,1024x6144")
    ("sizes", po::value<std::string>(), "a grid of square NxN matrices instead, e.g. 512,2048,8192")
    ("dtypes", po::value<std::string>(), "f32, bf16 or both (default f32,bf16; bf16 needs an OpenBLAS built with BUILD_BFLOAT16)")
    ("batches", po::value<std::string>(), "batch sizes (tokens): 1 runs GEMV, more GEMM (default 1,2,4,...,256; --quick 1,16,256)")
    ("threads", po::value<std::string>(), "OpenBLAS thread counts (default 1 .. online CPUs; --quick: all CPUs only)")
    ("repeats", po::value<int>(), "timed repetitions per measurement after a warm-up call (default 3; --quick 2)")
    ("max-seconds", po::value<double>(), "budget of the measurements: what would not fit is skipped with a note (default 90; --quick 30)")
    ("memory-bandwidth", po::value<std::string>(), "the sustained memory bandwidth memory efficiencies are relative to, e.g. 12GB/s (default: measure the STREAM triad first, ~5-15 s)")
    ("pool-size", po::value<std::string>(), "bytes of rotating weight copies (default 3 x last-level cache; smaller measures cache-warm kernels)")
    ("quick", "a short run: batches 1,16,256 at all CPUs, 2 repeats, 30 s budget")
    ("backend", po::value<std::string>(), "cpu (OpenBLAS on this machine, the default) or cuda (cuBLAS on an NVIDIA GPU: bf16, fp16, fp8 from compute capability 8.9; batches 1..512; each kernel timed replayed from a CUDA graph, which the fit uses, and issued eagerly from the host; scripts/calibrate-cuda.sh runs the whole measurement)")
    ("device", po::value<int>(), "cuda: the CUDA device to measure (default 0)")
    ("peak-flops", po::value<std::string>(), "cuda: datasheet peaks the compute bands are relative to, e.g. 989TFLOPS (bf16 and fp16) or bf16=989TFLOPS,fp8=1979TFLOPS (default: the best measured GEMM)");
  // clang-format on
  add_common(desc);
  return desc;
}

/// The matrices to measure: --shapes, --sizes, else those of --model's models (default dbrx-instruct; a
/// comma list measures every model's shapes once each, a shape two models share once, its roles naming both),
/// whose architectures `archs` receives.
void choose_kernel_shapes(const po::variables_map& vm, calibrate::KernelOptions& o,
                          std::vector<model::Architecture>& archs) {
  if (vm.count("shapes")) {
    o.shapes = calibrate::parse_matrix_shapes(vm["shapes"].as<std::string>(), "--shapes");
    o.shapes_source = "--shapes";
  } else if (vm.count("sizes")) {
    for (const auto n : parse_whole_numbers(vm["sizes"].as<std::string>(), "--sizes", 1, 1 << 20, "512,2048,8192")) {
      o.shapes.push_back({"grid", n, n});
    }
    o.shapes_source = "--sizes";
  } else {
    const auto ids = text::split(vm.count("model") ? vm["model"].as<std::string>() : "dbrx-instruct", ',');
    for (const auto& id : ids) {
      if (id.empty()) throw UserError("--model: an empty model id in the list; give ids separated by commas");
      archs.push_back(model::load_model(id));
      const auto& arch = archs.back();
      for (auto shape : calibrate::model_matrix_shapes(arch)) {
        if (ids.size() > 1) shape.roles = arch.id + " " + shape.roles;
        const auto same = std::find_if(o.shapes.begin(), o.shapes.end(), [&](const calibrate::MatrixShape& m) {
          return m.rows == shape.rows && m.cols == shape.cols;
        });
        if (same == o.shapes.end()) {
          o.shapes.push_back(shape);
        } else {
          same->roles += "; " + shape.roles;
        }
      }
      o.shapes_source += (o.shapes_source.empty() ? "" : ",") + arch.id;
    }
  }
}

/// --backend cuda: cuBLAS on an NVIDIA GPU at the chosen shapes (and a MoE model's expert chain).
int run_gpu_kernels_cmd(const po::variables_map& vm, const calibrate::KernelOptions& o,
                        const std::vector<model::Architecture>& archs, const Args& args, std::ostream& out) {
  calibrate::GpuKernelOptions g;
  g.device = device_of(vm);
  g.shapes = o.shapes;
  g.shapes_source = o.shapes_source;
  if (vm.count("dtypes")) {
    g.dtypes.clear();
    for (const auto& d : text::split(vm["dtypes"].as<std::string>(), ','))
      g.dtypes.push_back(calibrate::parse_gpu_dtype(d, "--dtypes"));
  }
  if (vm.count("batches"))
    g.batches = parse_whole_numbers(vm["batches"].as<std::string>(), "--batches", 1, 1 << 20, "1,16,512");
  g.repeats = positive_int(vm, "repeats", g.repeats);
  g.max_seconds = positive(vm, "max-seconds", g.max_seconds);
  if (vm.count("pool-size")) g.pool_bytes = parse_byte_size(vm["pool-size"].as<std::string>(), "--pool-size");
  if (vm.count("peak-flops"))
    g.peak_flops = calibrate::parse_peak_flops(vm["peak-flops"].as<std::string>(), "--peak-flops");
  if (vm.count("memory-bandwidth")) {
    g.memory_bandwidth = memory_bandwidth_flag(vm, "3TB/s");
    g.memory_bandwidth_source = "given with --memory-bandwidth";
  }
  for (const auto& arch : archs) {
    if (!arch.is_moe()) continue;
    // The MoE chain: one token's top_k experts, each w1 and v1 (expert_ffn x hidden) then w2.
    g.chains.push_back({arch.id,
                        {{"expert.w1", arch.expert_ffn, arch.hidden},
                         {"expert.v1", arch.expert_ffn, arch.hidden},
                         {"expert.w2", arch.hidden, arch.expert_ffn}},
                        arch.top_k});
  }
  const auto prov = calibrate::current_provenance(command_line("calibrate kernels", args));
  auto file = open_out(vm);
  auto progress = make_progress(vm);
  const auto r = calibrate::run_gpu_kernels(g, progress);
  progress.done("GPU kernels measured");
  const auto profile = calibrate::gpu_kernels_profile_json(r, prov, host_id(prov, vm, "-gpu"));
  if (!vm.count("json")) {
    out << "shapes: " << g.shapes_source << "\n";
    calibrate::print_gpu_kernels_report(r, out);
  }
  finish(vm, file, profile, out);
  return 0;
}

/// --dtypes, --batches, --threads, --repeats, --max-seconds and --pool-size of the CPU backend.
void cpu_kernel_options_from(const po::variables_map& vm, bool quick, calibrate::KernelOptions& o) {
  if (vm.count("dtypes")) {
    o.dtypes.clear();
    for (const auto& d : text::split(vm["dtypes"].as<std::string>(), ',')) {
      o.dtypes.push_back(calibrate::parse_kernel_dtype(d, "--dtypes"));
    }
  }
  if (vm.count("batches")) {
    o.batches = parse_whole_numbers(vm["batches"].as<std::string>(), "--batches", 1, 1 << 20, "1,16,256");
  } else if (quick) {
    o.batches = {1, 16, 256};
  }
  if (vm.count("threads")) {
    o.threads = parse_threads(vm["threads"].as<std::string>(), "--threads");
  } else if (quick) {
    o.threads = {calibrate::online_cpus()};
  }
  o.repeats = positive_int(vm, "repeats", quick ? 2 : 3);
  o.max_seconds = positive(vm, "max-seconds", quick ? 30 : 90);
  if (vm.count("pool-size")) o.pool_bytes = parse_byte_size(vm["pool-size"].as<std::string>(), "--pool-size");
}

/// The reference the memory efficiency bands are relative to, and what the profile records of it.
struct MemoryReference {
  nlohmann::json devices = nlohmann::json::object();
  nlohmann::json calibration = nlohmann::json::object();
};

/// --memory-bandwidth as given, else a STREAM triad at the most threads, measured first: sets
/// o.memory_bandwidth and its source.
MemoryReference memory_reference(const po::variables_map& vm, bool quick, const calibrate::Provenance& prov,
                                 calibrate::Progress& progress, calibrate::KernelOptions& o) {
  MemoryReference ref;
  std::optional<calibrate::MemoryResult> mem;
  if (vm.count("memory-bandwidth")) {
    o.memory_bandwidth = memory_bandwidth_flag(vm, "12GB/s");
    o.memory_bandwidth_source = "given with --memory-bandwidth";
    ref.devices["memory_bandwidth"] = calibrate::figure_json(
        o.memory_bandwidth, units::Dimension::Bandwidth,
        "given by the user with --memory-bandwidth to `" + prov.command + "` on " + prov.host + ", " + prov.day,
        "not measured by this command; the memory efficiency bands are relative to it");
    ref.devices["memory"] = calibrate::figure_json(
        static_cast<double>(calibrate::physical_memory_bytes()), units::Dimension::Bytes,
        calibrate::measured_source(prov, "installed memory (sysconf _SC_PHYS_PAGES x page size)"));
  } else {
    // The reference of the memory bands: a STREAM triad at the most threads, measured first.
    calibrate::MemoryOptions m;
    const int tmax =
        o.threads.empty() ? calibrate::online_cpus() : *std::max_element(o.threads.begin(), o.threads.end());
    m.threads = {tmax};
    m.repeats = quick ? 2 : 3;
    m.max_seconds = quick ? 8 : 15;
    progress.set_phase(0.0, 0.15, "memory (STREAM triad)");
    mem = calibrate::run_memory(m, progress);
    progress.set_phase(0.15, 0.85, "kernels");
    o.memory_bandwidth = mem->triad_bandwidth;
    o.memory_bandwidth_source = "STREAM triad measured first by this command, " + std::to_string(mem->triad_threads) +
                                (mem->triad_threads == 1 ? " thread" : " threads");
    ref.devices = calibrate::memory_devices_json(*mem, prov);
    ref.calibration["memory"] = calibrate::memory_calibration_json(*mem);
  }
  return ref;
}

}  // namespace

// ---- memory ------------------------------------------------------------------------------------------

int cmd_calibrate_memory(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("threads", po::value<std::string>(), "thread counts, e.g. 1,2 (default 1 .. online CPUs)")
    ("repeats", po::value<int>(), "timed passes per thread count, the best counts (default 5; --quick 2)")
    ("array-size", po::value<std::string>(), "bytes of EACH of the 3 arrays, e.g. 256MiB (default max(4 x last-level cache, 64MiB))")
    ("max-seconds", po::value<double>(), "budget: fewer passes when they would take longer (default 30; --quick 10)")
    ("quick", "a short run: 2 passes per thread count, 10 s budget")
    ("backend", po::value<std::string>(), "cpu (STREAM on this machine, the default) or cuda (an NVIDIA GPU: device-to-device copy, pinned host transfers, NCCL collectives with 2+ GPUs)")
    ("device", po::value<int>(), "cuda: the CUDA device to measure (default 0)")
    ("copy-size", po::value<std::string>(), "cuda: bytes of the device-to-device copy (default max(1GiB, 4 x L2))")
    ("transfer-size", po::value<std::string>(), "cuda: bytes of each host-device transfer (default 256MiB)")
    ("no-nccl", "cuda: skip the NCCL collectives");
  // clang-format on
  add_common(desc);
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim calibrate memory [--threads 1,2] [--out my-node.json] [options]\n\n"
                     "STREAM (McCalpin) copy, scale, add and triad over 3 arrays of doubles far larger than the "
                     "last-level cache,\nper thread count (std::threads; each first-touches its part of the arrays). "
                     "Reports GB/s per kernel and\nthread count, bytes counted as STREAM counts them (copy/scale 2 "
                     "arrays, add/triad 3). The best triad is the\nsustained memory bandwidth: --out writes a node "
                     "profile with devices.memory_bandwidth = that triad and\ndevices.memory = the installed RAM. "
                     "Method and sources: calibrate/BENCH.md.",
                     "\nexamples:\n  moesim calibrate memory\n  moesim calibrate memory --threads 1 --array-size "
                     "512MiB --json\n  moesim calibrate memory --out my-node.json\n")) {
    return 0;
  }
  const bool quick = vm.count("quick") > 0;
  if (backend_of(vm, {"threads", "array-size", "max-seconds", "quick"},
                 {"device", "copy-size", "transfer-size", "no-nccl"}) == calibrate::Backend::Cuda) {
    calibrate::GpuMemoryOptions g;
    g.device = device_of(vm);
    if (vm.count("copy-size")) g.copy_bytes = parse_byte_size(vm["copy-size"].as<std::string>(), "--copy-size");
    if (vm.count("transfer-size"))
      g.transfer_bytes = parse_byte_size(vm["transfer-size"].as<std::string>(), "--transfer-size");
    g.repeats = positive_int(vm, "repeats", g.repeats);
    g.nccl = !vm.count("no-nccl");
    const auto prov = calibrate::current_provenance(command_line("calibrate memory", args));
    auto file = open_out(vm);
    auto progress = make_progress(vm);
    const auto r = calibrate::run_gpu_memory(g, progress);
    progress.done("GPU memory measured");
    const auto profile = calibrate::gpu_memory_profile_json(r, prov, host_id(prov, vm, "-gpu"));
    if (!vm.count("json")) calibrate::print_gpu_memory_report(r, out);
    finish(vm, file, profile, out);
    return 0;
  }
  calibrate::MemoryOptions o;
  if (vm.count("threads")) o.threads = parse_threads(vm["threads"].as<std::string>(), "--threads");
  o.repeats = positive_int(vm, "repeats", quick ? 2 : 5);
  if (vm.count("array-size")) {
    o.array_bytes = parse_byte_size(vm["array-size"].as<std::string>(), "--array-size");
    if (o.array_bytes < 4096) throw UserError("--array-size must be at least 4KiB per array");
  }
  o.max_seconds = positive(vm, "max-seconds", quick ? 10 : 30);
  const auto prov = calibrate::current_provenance(command_line("calibrate memory", args));
  auto file = open_out(vm);
  auto progress = make_progress(vm);
  const auto r = calibrate::run_memory(o, progress);
  progress.done("memory measured");
  const auto profile = calibrate::memory_profile_json(r, prov, host_id(prov, vm, ""));
  if (!vm.count("json")) calibrate::print_memory_report(r, out);
  finish(vm, file, profile, out);
  return 0;
}

// ---- kernels -----------------------------------------------------------------------------------------

int cmd_calibrate_kernels(const Args& args, std::ostream& out) {
  const po::options_description desc = describe_kernels_options();
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim calibrate kernels [--model M | --shapes RxC,...] [--out my-node.json] [options]\n\n"
          "OpenBLAS GEMV (batch 1) and GEMM (Y = X W^T, batch > 1) in f32 (cblas_sgemv/sgemm) and bf16\n"
          "(cblas_sbgemv/sbgemm) at the shapes of a model's attention, router and expert matrices, per batch\n"
          "size and thread count. Each measurement: time per call (best and median of the repetitions), bytes/s\n"
          "(weights + inputs + f32 outputs) and FLOP/s (2 x rows x cols x batch). The weights are read from\n"
          "rotating copies in a pool larger than the last-level cache, i.e. from memory, as in a decode step.\n"
          "The fit: memory efficiency bands = GEMV bytes/s / the sustained memory bandwidth (STREAM triad),\n"
          "compute efficiency bands = GEMM FLOP/s at the largest batch / the best GEMM rate (no datasheet peak\n"
          "is known for a VM CPU, so the best measured rate is the roof), by weight-matrix size. --out writes a\n"
          "node profile with devices.peak_flops, devices.efficiency and devices.memory_bandwidth; kernels\n"
          "outside the measured sizes are flagged by the simulator. Method and sources: calibrate/BENCH.md.",
          "\nexamples:\n  moesim calibrate kernels --out my-node.json\n"
          "  moesim calibrate kernels --model mixtral-8x7b --batches 1,8,64 --threads 2 --memory-bandwidth 12GB/s\n"
          "  moesim calibrate kernels --shapes 6144x10752 --batches 1 --json\n")) {
    return 0;
  }
  const bool quick = vm.count("quick") > 0;
  if (vm.count("shapes") + vm.count("sizes") + vm.count("model") > 1) {
    throw UserError("--model, --shapes and --sizes each choose the matrices; give one of them");
  }
  const auto backend = backend_of(vm, {"threads", "quick"}, {"device", "peak-flops"});
  calibrate::KernelOptions o;
  std::vector<model::Architecture> archs;
  choose_kernel_shapes(vm, o, archs);
  if (backend == calibrate::Backend::Cuda) return run_gpu_kernels_cmd(vm, o, archs, args, out);
  cpu_kernel_options_from(vm, quick, o);

  const auto prov = calibrate::current_provenance(command_line("calibrate kernels", args));
  auto file = open_out(vm);
  auto progress = make_progress(vm);
  const MemoryReference ref = memory_reference(vm, quick, prov, progress, o);
  const auto r = calibrate::run_kernels(o, progress);
  progress.done("kernels measured");
  const auto profile = calibrate::kernels_profile_json(r, prov, host_id(prov, vm, ""), ref.devices, ref.calibration);
  if (!vm.count("json")) {
    out << "shapes: " << o.shapes_source << "\n";
    calibrate::print_kernels_report(r, out);
  }
  finish(vm, file, profile, out);
  return 0;
}

// ---- storage -----------------------------------------------------------------------------------------

int cmd_calibrate_storage(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("dir", po::value<std::string>(), "directory on the file system to measure (required); a test file is made there and removed")
    ("size", po::value<std::string>(), "bytes of the test file (default 2GiB; --quick 512MiB); needs that much free space + 64MiB")
    ("block", po::value<std::string>(), "bytes per read, a multiple of 4KiB (default: one expert of --model at bf16, capped at 64MiB)")
    ("model", po::value<std::string>(), "zoo id or config.json whose expert size is the default --block (default dbrx-instruct)")
    ("readers", po::value<std::string>(), "parallel readers per pass, e.g. 1,2,4 (default 1, 2, 4, .. 2 x online CPUs)")
    ("max-seconds", po::value<double>(), "budget of the read passes; passes stop early to fit (default 45; --quick 15)")
    ("cold", po::value<std::string>(), "auto (O_DIRECT, else posix_fadvise DONTNEED), direct or fadvise (default auto)")
    ("no-warm", "skip the warm (page-cache) passes")
    ("latency-reads", po::value<int>(), "4KiB reads of the latency probe (default 256)")
    ("quick", "a short run: 512MiB file, readers 1 and 2 x CPUs, 15 s budget");
  // clang-format on
  add_common(desc);
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim calibrate storage --dir D [--size 2GiB] [--out my-ssd.json] [options]\n\n"
          "Creates a test file of random data in D, then reads it with pread() in expert-sized blocks:\n"
          "sequential (each reader its own part) and random (shuffled blocks), with 1..N parallel readers,\n"
          "cold (O_DIRECT, or the file's cached pages dropped with posix_fadvise) and warm (page cache).\n"
          "Reports bandwidth and p50/p99 latency per pass; a probe of single 4KiB reads gives the latency.\n"
          "The file is removed afterwards, also on error. --out writes a storage profile: read_bandwidth =\n"
          "the best cold sequential bandwidth, read_latency = the probe's p50, capacity = the file system's\n"
          "size. This is what SSD expert streaming (flash-moe) needs. Method: calibrate/BENCH.md.",
          "\nexamples:\n  moesim calibrate storage --dir /mnt/nvme --out my-ssd.json\n"
          "  moesim calibrate storage --dir /tmp --size 256MiB --block 4MiB --readers 1,4 --json\n")) {
    return 0;
  }
  const bool quick = vm.count("quick") > 0;
  calibrate::StorageOptions o;
  if (!vm.count("dir")) {
    throw UserError(
        "--dir is missing; give the directory to measure (a test file is created there and removed), "
        "e.g. --dir /tmp");
  }
  o.dir = vm["dir"].as<std::string>();
  if (o.dir.empty()) throw UserError("--dir is empty; give the directory to measure, e.g. --dir /tmp");
  o.size =
      vm.count("size") ? parse_byte_size(vm["size"].as<std::string>(), "--size") : (quick ? 512ull << 20 : 2ull << 30);
  std::string block_note;
  if (vm.count("block")) {
    if (vm.count("model")) throw UserError("--block and --model both set the block size; give one of them");
    o.block = parse_byte_size(vm["block"].as<std::string>(), "--block");
    if (o.block == 0) throw UserError("--block must be > 0, e.g. 4MiB");
  } else {
    const auto arch = model::load_model(vm.count("model") ? vm["model"].as<std::string>() : "dbrx-instruct");
    o.block = calibrate::default_storage_block(arch, &block_note);
    // A default block never makes a small --size fail: at most an eighth of the file.
    const std::uint64_t cap = (o.size / 8) / 4096 * 4096;
    if (cap >= 4096 && o.block > cap) {
      block_note += "; reduced to " + units::format_binary(units::bytes(static_cast<double>(cap))) +
                    " so the file holds 8 blocks";
      o.block = cap;
    }
  }
  if (vm.count("readers")) {
    for (const auto n : parse_whole_numbers(vm["readers"].as<std::string>(), "--readers", 1, 256, "1,2,4")) {
      o.readers.push_back(static_cast<int>(n));
    }
  } else if (quick) {
    o.readers = {1, 2 * calibrate::online_cpus()};
  }
  o.max_seconds = positive(vm, "max-seconds", quick ? 15 : 45);
  if (vm.count("cold")) o.cold = calibrate::parse_cold_mode(vm["cold"].as<std::string>(), "--cold");
  o.warm = !vm.count("no-warm");
  o.latency_reads = positive_int(vm, "latency-reads", 256);

  const auto prov = calibrate::current_provenance(command_line("calibrate storage", args));
  const std::string id = host_id(prov, vm, "-storage");
  auto file = open_out(vm);
  auto progress = make_progress(vm);
  auto r = calibrate::run_storage(o, progress);
  if (!block_note.empty()) r.notes.insert(r.notes.begin(), block_note);
  progress.done("storage measured");
  const auto profile = calibrate::storage_profile_json(r, prov, id);
  if (!vm.count("json")) calibrate::print_storage_report(r, out);
  finish(vm, file, profile, out);
  return 0;
}

}  // namespace moesim::apps
