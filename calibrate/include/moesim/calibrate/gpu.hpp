#pragma once
// `moesim calibrate kernels --backend cuda` and `moesim calibrate memory --backend cuda`: the same
// measurements as the CPU path (kernels.hpp, memory.hpp) on an NVIDIA GPU, with the same outputs.
//
// This header and calibrate/src/gpu.cpp are compiled on every machine (with or without the CUDA toolkit):
// the data types of the GPU samples, the fit into the profile's size-banded efficiency tables (the same
// fit_efficiency_bands as the CPU path), the profile JSON and the text report. The measurements
// themselves live in calibrate/cuda/ (CUDA runtime, cuBLAS, cuBLASLt, NCCL), built only when CMake finds
// nvcc, as a plugin (libmoesim_cuda.so) that run_gpu_kernels and run_gpu_memory load on first use
// (calibrate/src/gpu_plugin.cpp): linked into `moesim` itself, cuBLAS's start-up alone cost every command
// 0.4 s and 220 MB. Without the toolkit, or without the plugin, they throw a UserError that says how to get it.
//
// A linear layer y = W x with W of M rows × K columns, row-major (PyTorch's nn.Linear.weight), at batch B:
//   Y (B×M) = X (B×K) · Wᵀ, one cublasGemmEx call in column-major terms C (M×B) = Aᵀ (M×K) · B (K×B) with
//   A = W (lda = K, CUBLAS_OP_T), B = X (ldb = K, CUBLAS_OP_N), C = Y (ldc = M); bf16 or fp16 inputs,
//   f32 output, CUBLAS_COMPUTE_32F. fp8 (E4M3 weights and inputs, f32 output) uses cublasLtMatmul in the
//   same "TN" layout, only on compute capability >= 8.9 (Ada, Hopper and later). Batch 1 is the same call
//   with n = 1 (cuBLAS dispatches its GEMV kernels), reported as "gemv" as the CPU path does.
// Counted as kernels.hpp counts: FLOPs = 2·M·K·B; bytes = weights M·K·s + inputs B·K·s + f32 outputs
// B·M·4 (s = 2 for bf16 and fp16, 1 for fp8); each operand once.
// The weights are rotated through a pool of at least 3 × the GPU's L2 cache (and 3 copies of the matrix),
// so every call reads them from HBM, as a decode step does. See calibrate/BENCH.md.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/kernels.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"

namespace moesim::calibrate {

// ---- backends ----------------------------------------------------------------------------------------

enum class Backend { Cpu, Cuda };
/// "cpu" or "cuda"; UserError naming `flag` and the choices otherwise.
Backend parse_backend(std::string_view name, const std::string& flag);
/// Whether this moesim was built with the CUDA toolkit (calibrate/cuda/ compiled in).
bool cuda_backend_built();

// ---- dtypes and costs --------------------------------------------------------------------------------

enum class GpuDtype { Bf16, Fp16, Fp8 };
inline constexpr GpuDtype kGpuDtypes[] = {GpuDtype::Bf16, GpuDtype::Fp16, GpuDtype::Fp8};
std::string_view gpu_dtype_name(GpuDtype d);  ///< "bf16", "fp16", "fp8" (also the devices.peak_flops keys)
double gpu_dtype_size(GpuDtype d);            ///< bytes per weight and input element: 2, 2, 1
/// "bf16", "fp16" (or "f16"), "fp8"; UserError naming `flag` otherwise.
GpuDtype parse_gpu_dtype(std::string_view name, const std::string& flag);
/// The cuBLAS routine that measures it: "cublasGemmEx" (bf16, fp16) or "cublasLtMatmul" (fp8).
const char* gpu_routine(GpuDtype d);
/// fp8 needs compute capability >= 8.9 (FP8 tensor cores: Ada, Hopper).
bool gpu_dtype_supported(GpuDtype d, int cc_major, int cc_minor, std::string* reason = nullptr);

/// Bytes and FLOPs of one call, counted as kernel_cost() counts them (f32 output of 4 bytes).
KernelCost gpu_kernel_cost(GpuDtype d, const MatrixShape& s, std::int64_t batch);

/// --peak-flops: "989TFLOPS" (the 16-bit figure: applies to bf16 and fp16) or per dtype
/// "bf16=989TFLOPS,fp16=989TFLOPS,fp8=1979TFLOPS". UserError naming `flag` when malformed.
std::map<GpuDtype, double> parse_peak_flops(const std::string& text, const std::string& flag);

// ---- the device --------------------------------------------------------------------------------------

struct GpuDeviceInfo {
  int index = 0;  ///< the CUDA device measured (--device)
  int count = 1;  ///< CUDA devices visible to this process
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  std::uint64_t memory_bytes = 0;  ///< cudaDeviceProp::totalGlobalMem
  std::uint64_t l2_bytes = 0;      ///< cudaDeviceProp::l2CacheSize
  int sm_count = 0;
  std::string driver;   ///< cudaDriverGetVersion, "13.0"
  std::string runtime;  ///< cudaRuntimeGetVersion
  std::string cublas;   ///< cublasGetVersion, "13.0.0"
  std::string nccl;     ///< ncclGetVersion, or why NCCL is absent
};
nlohmann::json to_json(const GpuDeviceInfo& d);

// ---- samples -----------------------------------------------------------------------------------------

/// Time samples, one per repetition; the best counts (STREAM's rule, as on the CPU).
struct TimeSamples {
  std::vector<double> seconds;
  [[nodiscard]] double best() const;
  [[nodiscard]] double median() const;
};

/// One GEMV/GEMM measurement at one dtype, shape and batch.
struct GpuKernelSample {
  GpuDtype dtype = GpuDtype::Bf16;
  MatrixShape shape;
  std::int64_t batch = 1;
  KernelCost cost;
  std::int64_t calls_per_repeat = 1;
  /// Per call, replayed from a CUDA graph: the GPU's time with the host's launch cost removed, as engines
  /// that replay CUDA graphs run a decode step. The fits use this one.
  TimeSamples time;
  /// Per call, each issued from the host one after another (cuBLAS's host work and the launch included):
  /// what an eager engine sees. Empty when not measured.
  TimeSamples eager;
  [[nodiscard]] double bytes_per_second() const { return cost.bytes / time.best(); }
  [[nodiscard]] double flops_per_second() const { return cost.flops / time.best(); }
};

/// A copy: device to device (counted 2 × size: read and written), host to device or device to host
/// from/to pinned memory (counted 1 × size: it crosses the link once).
enum class CopyKind { D2D, H2D, D2H };
const char* copy_kind_name(CopyKind k);  ///< "d2d", "h2d", "d2h"
/// Bytes a copy of `size` bytes is counted as: 2·size for d2d, size otherwise.
double copy_counted_bytes(CopyKind k, std::uint64_t size);
struct GpuCopySample {
  CopyKind kind = CopyKind::D2D;
  std::uint64_t size = 0;  ///< bytes copied per call
  double bytes = 0;        ///< counted bytes per call (copy_counted_bytes)
  TimeSamples time;        ///< per call
  [[nodiscard]] double bandwidth() const { return bytes / time.best(); }
};

/// An empty kernel (<<<1, 1>>>): `launches` back to back then one synchronize gives the launch rate;
/// launch + cudaDeviceSynchronize one at a time gives the round-trip latency.
struct GpuLaunchSample {
  std::int64_t launches = 0;
  TimeSamples back_to_back;  ///< per launch
  TimeSamples launch_sync;   ///< per launch + synchronize
  TimeSamples in_graph;      ///< per kernel, `launches` empty kernels replayed from one CUDA graph
};

/// A chain of small GEMVs as an MoE layer runs them: top_k experts' w1, v1, w2 (batch 1) one after
/// another on one stream. roofline = Σ max(bytes / memory_bandwidth, FLOPs / peak) of the kernels.
struct GpuChainSample {
  std::string model;  ///< whose experts (zoo id)
  GpuDtype dtype = GpuDtype::Bf16;
  std::vector<MatrixShape> kernels;  ///< in launch order
  std::int64_t top_k = 0;
  std::int64_t batch = 1;
  TimeSamples time;   ///< per chain, replayed from a CUDA graph
  TimeSamples eager;  ///< per chain, each GEMV issued from the host (empty when not measured)
  double roofline_seconds = 0;
  /// (best chain time − roofline) / kernels: the time per kernel beyond its roofline, in a CUDA graph.
  [[nodiscard]] double overhead_per_kernel() const;
  /// The same for the eager chain: the GPU's gap plus the host's launch cost; nullopt when not measured.
  [[nodiscard]] std::optional<double> eager_overhead_per_kernel() const;
};

/// One NCCL collective over every GPU (one process, ncclCommInitAll): `bytes` per GPU.
struct NcclSample {
  std::string op;  ///< "all_reduce" (sum, bf16) or "all_to_all"
  int gpus = 0;
  std::uint64_t bytes = 0;  ///< message bytes per GPU
  TimeSamples time;
  [[nodiscard]] double algorithm_bandwidth() const { return static_cast<double>(bytes) / time.best(); }
  /// nccl-tests' bus bandwidth (doc/PERFORMANCE.md): algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-to-all.
  [[nodiscard]] double bus_bandwidth() const;
};

// ---- kernels -----------------------------------------------------------------------------------------

struct GpuKernelOptions {
  int device = 0;
  std::vector<MatrixShape> shapes;
  std::string shapes_source;
  std::vector<GpuDtype> dtypes = {GpuDtype::Bf16, GpuDtype::Fp16, GpuDtype::Fp8};
  std::vector<std::int64_t> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  int repeats = 5;                    ///< timed repetitions (CUDA events) after a warm-up
  double min_repeat_seconds = 0.002;  ///< a repetition loops calls until it lasts this long
  double max_seconds = 90;
  std::uint64_t pool_bytes = 0;  ///< 0: max(3 × L2, 3 × the largest matrix)
  /// Datasheet peaks (--peak-flops); dtypes without one use the best measured GEMM rate.
  std::map<GpuDtype, double> peak_flops;
  /// The reference of the memory bands; 0: the D2D copy measured first.
  double memory_bandwidth = 0;
  std::string memory_bandwidth_source;
  /// An MoE chain to measure: one model's expert matrices (w1, v1, w2) and top_k.
  struct Chain {
    std::string model;
    std::vector<MatrixShape> expert_shapes;
    std::int64_t top_k = 0;
  };
  /// One per MoE model of --model, in its order; empty: no chain (noted).
  std::vector<Chain> chains;
};

struct GpuKernelResult {
  GpuDeviceInfo device;
  std::vector<GpuKernelSample> samples;  ///< by dtype, shape, batch
  std::vector<KernelSkip> skipped;
  std::map<GpuDtype, std::string> unsupported;  ///< dtype -> why it was not measured
  std::uint64_t pool_bytes = 0;
  std::optional<GpuCopySample> copy;  ///< the D2D copy measured first (when no bandwidth was given)
  double memory_bandwidth = 0;
  std::string memory_bandwidth_source;
  std::optional<GpuLaunchSample> launch;
  std::vector<GpuChainSample> chains;
  std::int64_t max_batch = 0;
  std::map<GpuDtype, double> peak_flops;  ///< the roof of the compute bands per dtype
  std::map<GpuDtype, bool> peak_given;    ///< true: from --peak-flops (datasheet); false: best measured GEMM
  std::vector<EfficiencySample> memory_points;
  BandFit memory_fit;
  std::vector<EfficiencySample> compute_points;
  BandFit compute_fit;
  std::vector<std::string> notes;
  double seconds = 0;

  /// The best GEMM (batch > 1) of dtype `d`, or null.
  [[nodiscard]] const GpuKernelSample* best_gemm(GpuDtype d) const;
  /// devices.kernel_overhead: the MoE chains' time per kernel beyond the roofline (over every chain; at
  /// least 0), else the back-to-back empty-kernel launch time; nullopt when neither was measured.
  [[nodiscard]] std::optional<double> kernel_overhead(std::string* how = nullptr) const;
};

/// Fills r's peaks (given, else the best measured GEMM per dtype), max_batch, the memory points (GEMV at
/// batch 1: bytes/s ÷ memory_bandwidth) and the compute points (GEMM at the largest batch: FLOP/s ÷ peak),
/// and fits both with fit_efficiency_bands, as run_kernels() does on the CPU. Also the chains' rooflines.
void fit_gpu_kernels(GpuKernelResult& r, const std::map<GpuDtype, double>& given_peaks);

/// Measures (calibrate/cuda/); UserError without the CUDA toolkit or without a CUDA device.
GpuKernelResult run_gpu_kernels(const GpuKernelOptions& options, Progress& progress);

/// A node profile of the GPU: devices.name, count, memory, memory_bandwidth (the D2D copy, or the given
/// figure), peak_flops per dtype, efficiency, kernel_overhead; the raw data under calibration.kernels.
nlohmann::json gpu_kernels_profile_json(const GpuKernelResult& r, const Provenance& p, const std::string& id);
nlohmann::json gpu_kernels_calibration_json(const GpuKernelResult& r);
void print_gpu_kernels_report(const GpuKernelResult& r, std::ostream& out);

// ---- memory ------------------------------------------------------------------------------------------

struct GpuMemoryOptions {
  int device = 0;
  std::uint64_t copy_bytes = 0;      ///< D2D size; 0: max(1 GiB, 4 × L2), capped at a quarter of free memory
  std::uint64_t transfer_bytes = 0;  ///< H2D/D2H size; 0: 256 MiB
  int repeats = 10;
  std::vector<std::uint64_t> nccl_bytes = {1ull << 20, 16ull << 20, 256ull << 20};
  bool nccl = true;
};

struct GpuMemoryResult {
  GpuDeviceInfo device;
  std::vector<GpuCopySample> copies;  ///< d2d, h2d, d2h
  std::vector<NcclSample> nccl;
  std::vector<std::string> notes;
  double seconds = 0;
  [[nodiscard]] const GpuCopySample* find(CopyKind k) const;
};

GpuMemoryResult run_gpu_memory(const GpuMemoryOptions& options, Progress& progress);

// ---- the plugin --------------------------------------------------------------------------------------

/// Raised whenever CudaBackend or the types it passes change layout: a plugin of another build is refused.
inline constexpr int kCudaBackendAbi = 1;
/// What libmoesim_cuda.so's `extern "C" const CudaBackend* moesim_cuda_backend()` returns.
struct CudaBackend {
  int abi = 0;  ///< kCudaBackendAbi of the build that made the plugin
  GpuKernelResult (*kernels)(const GpuKernelOptions&, Progress&) = nullptr;
  GpuMemoryResult (*memory)(const GpuMemoryOptions&, Progress&) = nullptr;
};
/// The plugin's file name. It is looked for beside the `moesim` executable (the build tree), then in the
/// installed layout's `<bindir>/../<libdir>/moesim/` (calibrate/CMakeLists.txt gives the relative path).
inline constexpr const char* kCudaPluginFile = "libmoesim_cuda.so";

nlohmann::json gpu_memory_profile_json(const GpuMemoryResult& r, const Provenance& p, const std::string& id);
nlohmann::json gpu_memory_calibration_json(const GpuMemoryResult& r);
void print_gpu_memory_report(const GpuMemoryResult& r, std::ostream& out);

// ---- shared ------------------------------------------------------------------------------------------

/// "measured by `COMMAND` on GPU (device N of M), HOST, DAY, moesim COMMIT": the source of a GPU figure.
std::string gpu_measured_source(const Provenance& p, const GpuDeviceInfo& d, const std::string& what);

}  // namespace moesim::calibrate
