#pragma once
// `moesim calibrate kernels`: OpenBLAS GEMV and GEMM, f32 (cblas_sgemv, cblas_sgemm) and bf16
// (cblas_sbgemv, cblas_sbgemm), at the shapes of a model's attention, router and expert matrices (or a
// grid), for batch sizes 1..256 and thread counts 1..cores. Each measurement reports achieved bytes/s and
// FLOP/s; the fit turns them into the node profile's size-banded efficiency table (efficiency.hpp): a
// roofline (Williams et al., CACM 2009) times measured efficiency, so the model knows where it was
// measured and says so outside that range.
//
// A linear layer y = W x with W of M rows (outputs) × K columns (inputs), row-major as PyTorch stores
// nn.Linear.weight:
//   batch 1  GEMV  cblas_sgemv(RowMajor, NoTrans, M, K, 1, W, K, x, 1, 0, y, 1)
//   batch B  GEMM  Y (B×M) = X (B×K) · Wᵀ: cblas_sgemm(RowMajor, NoTrans, Trans, B, M, K, 1, X, K, W, K, 0, Y, M)
// (OpenBLAS follows the reference CBLAS interface, netlib.org/blas/#_cblas; bf16: OpenBLAS
// interface/sbgemv.c and sbgemm, input bfloat16, output float.)
// FLOPs = 2·M·K·B (one multiply and one add per weight per token). Bytes = every operand once, as STREAM
// counts them: weights M·K·s + inputs B·K·s + outputs B·M·4 (s = 4 for f32, 2 for bf16; outputs are f32
// in both; beta = 0, so the output is written and not read). See calibrate/BENCH.md.
//
// The weights are read from memory, not from cache: every call uses the next of several copies of the
// matrix laid out in a pool of at least 3 × the last-level cache, so a copy has been evicted before it is
// used again (as a model's weights are: a decode step touches far more than the cache holds).

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/model/architecture.hpp"

namespace moesim::calibrate {

/// A weight matrix of `rows` (M, outputs) × `cols` (K, inputs); `roles` names where the model uses it
/// ("attn.q, attn.o" when two projections share the shape).
struct MatrixShape {
  std::string roles;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

/// The distinct matrix shapes of one layer of `a` (models_and_routing.md §A.3 formulas, as
/// model/src/architecture.cpp counts them): attention projections (GQA q, k, v, o; MLA q_a, q_b, kv_a,
/// kv_b, o; Gated DeltaNet in_proj_qkvz, in_proj_ba, out_proj), the router (experts × hidden), a routed
/// expert's w1, v1 (expert_ffn × hidden) and w2 (hidden × expert_ffn), shared experts and dense FFNs.
std::vector<MatrixShape> model_matrix_shapes(const model::Architecture& a);

/// "6144x10752": a shape as --shapes takes it and the tables print it.
std::string shape_text(const MatrixShape& s);

/// "6144x10752,1024x6144" -> shapes (rows x cols). UserError naming `flag` on a malformed item.
std::vector<MatrixShape> parse_matrix_shapes(const std::string& text, const std::string& flag);

enum class KernelDtype { F32, Bf16 };
std::string_view dtype_name(KernelDtype d);         ///< "f32", "bf16"
std::string_view dtype_profile_key(KernelDtype d);  ///< the peak_flops key: "fp32", "bf16"
double dtype_size(KernelDtype d);                   ///< bytes per element of weights and inputs: 4, 2
/// "f32" (or "fp32"), "bf16"; UserError naming `flag` otherwise.
KernelDtype parse_kernel_dtype(std::string_view name, const std::string& flag);

/// What one call moves and computes (see the top of this file).
struct KernelCost {
  double weight_bytes = 0;
  double input_bytes = 0;
  double output_bytes = 0;
  double bytes = 0;  ///< the sum of the three
  double flops = 0;  ///< 2·M·K·batch
};
KernelCost kernel_cost(KernelDtype d, const MatrixShape& s, std::int64_t batch);
/// "gemv" for batch 1, "gemm" above.
const char* kernel_name(std::int64_t batch);

/// Whether this OpenBLAS exports cblas_sbgemv and cblas_sbgemm (resolved with dlsym at run time: Debian's
/// libopenblas 0.3.21 declares them in cblas.h but is built without BUILD_BFLOAT16).
struct DtypeSupport {
  bool available = true;
  std::string reason;  ///< why not, and the fix
};
DtypeSupport dtype_support(KernelDtype d);
/// openblas_get_config(): version, build options, core ("OpenBLAS 0.3.21 DYNAMIC_ARCH ... SkylakeX MAX_THREADS=64").
std::string openblas_config();
/// Empty, or a warning that OpenBLAS chose generic kernels (e.g. Prescott, SSE3) for a CPU with AVX2 or
/// AVX-512 it does not recognise, with the fix (OPENBLAS_CORETYPE). run_kernels() adds it to the notes.
std::string openblas_core_note();

struct KernelOptions {
  std::vector<MatrixShape> shapes;
  std::string shapes_source;  ///< "dbrx-instruct" or "--shapes" (for reports)
  std::vector<KernelDtype> dtypes = {KernelDtype::F32, KernelDtype::Bf16};
  std::vector<std::int64_t> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int> threads;          ///< empty: 1 .. online CPUs
  int repeats = 3;                   ///< timed repetitions per measurement (best and median kept), after 1 warm-up call
  double min_repeat_seconds = 0.01;  ///< a repetition loops calls until it lasts this long (timer resolution)
  double max_seconds = 90;           ///< measurements that would not fit in what is left are skipped, with a note
  /// Bytes of the pool the rotating weight copies live in; 0: max(3 × last-level cache, largest matrix).
  std::uint64_t pool_bytes = 0;
  /// The sustained memory bandwidth (bytes/s) memory efficiencies are relative to: the STREAM triad of
  /// run_memory(), or a figure the user gives. 0: no memory bands (noted).
  double memory_bandwidth = 0;
  std::string memory_bandwidth_source;
};

/// One measurement: a kernel at one dtype, shape, batch and thread count.
struct KernelSample {
  KernelDtype dtype = KernelDtype::F32;
  MatrixShape shape;
  std::int64_t batch = 1;
  int threads = 1;
  KernelCost cost;
  std::int64_t calls_per_repeat = 1;
  std::vector<double> seconds;  ///< per call, one entry per repetition
  [[nodiscard]] double best_seconds() const;
  [[nodiscard]] double median_seconds() const;
  [[nodiscard]] double bytes_per_second() const { return cost.bytes / best_seconds(); }
  [[nodiscard]] double flops_per_second() const { return cost.flops / best_seconds(); }
};

/// A skipped dtype or measurement and why.
struct KernelSkip {
  std::string what;
  std::string reason;
};

struct KernelResult {
  std::vector<KernelSample> samples;  ///< sorted by dtype, shape, threads, batch
  std::vector<KernelSkip> skipped;
  std::map<KernelDtype, DtypeSupport> support;
  std::string openblas;          ///< openblas_config()
  std::string openblas_note;     ///< openblas_core_note()
  std::uint64_t llc_bytes = 0;   ///< last-level cache the pool was sized by
  std::uint64_t pool_bytes = 0;  ///< the rotating copies' pool
  int max_threads = 0;           ///< the largest thread count measured (the fits use it)
  std::int64_t max_batch = 0;    ///< the largest batch measured (the compute fit uses it)
  /// Best GEMM FLOP/s per dtype over every shape, batch > 1 and thread count: the peak compute
  /// efficiencies are relative to (no datasheet states a VM CPU's peak; the best measured rate is the
  /// roof this machine demonstrably reaches).
  std::map<KernelDtype, double> peak_flops;
  const KernelSample* peak_sample(KernelDtype d) const;
  double memory_bandwidth = 0;  ///< the reference of the memory bands (KernelOptions::memory_bandwidth)
  std::string memory_bandwidth_source;
  /// Memory bands from GEMV (batch 1) at max_threads: bytes/s ÷ memory_bandwidth, by weight bytes.
  std::vector<EfficiencySample> memory_points;
  BandFit memory_fit;
  /// Compute bands from GEMM at max_batch and max_threads: FLOP/s ÷ peak_flops[dtype], by weight bytes.
  std::vector<EfficiencySample> compute_points;
  BandFit compute_fit;
  std::vector<std::string> notes;
  double seconds = 0;
};

/// Measures every dtype × shape × batch × thread count of `options`, most important first (batch 1 and
/// the largest batch at the most threads, then the other batches, then fewer threads), skipping with a
/// note what would not fit in the time left; then fits the bands. UserError for an empty shape list,
/// a thread count outside 1..cores, a batch < 1, or a matrix that does not fit in memory.
KernelResult run_kernels(const KernelOptions& options, Progress& progress);

/// devices.peak_flops (per measured dtype: "fp32", "bf16") and devices.efficiency as profile figures.
nlohmann::json kernels_devices_json(const KernelResult& r, const Provenance& p);
/// The raw data: every sample (times, bytes/s, FLOP/s), the fits with each point's residual, the skips.
nlohmann::json kernels_calibration_json(const KernelResult& r);
/// One timed sample's record, the same for the CPU and the GPU reports: kernel, shape, batch, the per-call
/// times with best and median, the bytes and FLOPs counted, the rates at the best time, and the efficiencies
/// against `memory_bandwidth` and `peak_flops` (left out where 0). `seconds_per_call` is non-empty.
nlohmann::json kernel_sample_json(const MatrixShape& shape, std::int64_t batch, std::int64_t calls_per_repeat,
                                  const std::vector<double>& seconds_per_call, const KernelCost& cost,
                                  double memory_bandwidth, double peak_flops);
/// A node profile of this machine from kernels_devices_json plus `extra_devices` (e.g.
/// memory_devices_json of the run that gave the reference bandwidth), with {"provenance", "kernels"}.
nlohmann::json kernels_profile_json(const KernelResult& r, const Provenance& p, const std::string& id,
                                    const nlohmann::json& extra_devices, const nlohmann::json& extra_calibration);
/// The text report: per measurement time, GB/s, GFLOP/s; GEMV as a fraction of the memory bandwidth;
/// the bands, and what lies outside the measured range.
void print_kernels_report(const KernelResult& r, std::ostream& out);

}  // namespace moesim::calibrate
