#pragma once
// Internals of the CUDA backend shared by calibrate/cuda/gpu_cuda*.cpp: error checks, RAII owners of CUDA
// resources, the device's description, and timing with CUDA events. Their names are in cuda_detail, which
// the executable does not have, so a call from the plugin never binds to a function `moesim` exports.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "cuda_kernels.hpp"
#include "moesim/calibrate/gpu.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate::cuda_detail {

using Clock = std::chrono::steady_clock;
using units::kGiB;
using units::kMiB;
constexpr std::size_t kWorkspace = 32 * kMiB;  // cuBLASLt workspace (cuBLAS's own recommendation for Hopper)

std::string size_text(double bytes);
[[noreturn]] void fail(const std::string& what, const std::string& detail);
void ck(cudaError_t e, const std::string& what);
void ck(cublasStatus_t s, const std::string& what);
std::string version_text(int v, int major_div, int minor_div);

// ---- RAII --------------------------------------------------------------------------------------------

class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t bytes, const std::string& what) : bytes_(bytes) {
    const cudaError_t e = cudaMalloc(&p_, std::max<std::size_t>(bytes, 256));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw UserError("could not allocate " + size_text(static_cast<double>(bytes)) + " of GPU memory for " + what +
                      ": " + cudaGetErrorString(e) +
                      "; give fewer or smaller --shapes, smaller --batches or a smaller --pool-size / --size");
    }
  }
  ~DeviceBuffer() { (void)cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] std::byte* get() const { return static_cast<std::byte*>(p_); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) {
    const cudaError_t e = cudaMallocHost(&p_, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw UserError("could not allocate " + size_text(static_cast<double>(bytes)) +
                      " of pinned host memory: " + cudaGetErrorString(e) + "; give a smaller --transfer-size");
    }
    std::memset(p_, 0x5a, bytes);
  }
  ~PinnedBuffer() { (void)cudaFreeHost(p_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  [[nodiscard]] void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { (void)cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { ck(cudaEventCreate(&e), "cudaEventCreate"); }
  ~Event() { (void)cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

struct Blas {
  cublasHandle_t h = nullptr;
  explicit Blas(cudaStream_t s) {
    ck(cublasCreate(&h), "cublasCreate");
    ck(cublasSetStream(h, s), "cublasSetStream");
  }
  ~Blas() { (void)cublasDestroy(h); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
};

struct BlasLt {
  cublasLtHandle_t h = nullptr;
  BlasLt() { ck(cublasLtCreate(&h), "cublasLtCreate"); }
  ~BlasLt() { (void)cublasLtDestroy(h); }
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;
};

/// One fp8 GEMM configuration of cuBLASLt (descriptors, layouts and the heuristic's algorithm).
class LtFp8Gemm {
 public:
  /// C (M×B, f32) = Aᵀ · B with A = W (K×M column-major, E4M3), B = X (K×B, E4M3). `ok()` false (with
  /// `error()`) when cuBLASLt offers no algorithm for it.
  LtFp8Gemm(cublasLtHandle_t lt, std::int64_t m, std::int64_t k, std::int64_t b) : lt_(lt) {
    if (!step(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")) return;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (!step(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA")) return;
    if (!step(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB")) return;
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    if (!step(cublasLtMatrixLayoutCreate(&a_, CUDA_R_8F_E4M3, u(k), u(m), k), "layout A")) return;
    if (!step(cublasLtMatrixLayoutCreate(&b_, CUDA_R_8F_E4M3, u(k), u(b), k), "layout B")) return;
    if (!step(cublasLtMatrixLayoutCreate(&c_, CUDA_R_32F, u(m), u(b), m), "layout C")) return;
    if (!step(cublasLtMatmulPreferenceCreate(&pref_), "cublasLtMatmulPreferenceCreate")) return;
    const std::uint64_t ws = kWorkspace;
    if (!step(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
              "workspace preference"))
      return;
    int found = 0;
    if (!step(cublasLtMatmulAlgoGetHeuristic(lt_, op_, a_, b_, c_, c_, pref_, 1, &heur_, &found),
              "cublasLtMatmulAlgoGetHeuristic"))
      return;
    if (found < 1) {
      error_ = "cuBLASLt offers no fp8 (E4M3 x E4M3 -> f32) algorithm for this shape";
      return;
    }
    ok_ = true;
  }
  ~LtFp8Gemm() {
    if (pref_) (void)cublasLtMatmulPreferenceDestroy(pref_);
    if (c_) (void)cublasLtMatrixLayoutDestroy(c_);
    if (b_) (void)cublasLtMatrixLayoutDestroy(b_);
    if (a_) (void)cublasLtMatrixLayoutDestroy(a_);
    if (op_) (void)cublasLtMatmulDescDestroy(op_);
  }
  LtFp8Gemm(const LtFp8Gemm&) = delete;
  LtFp8Gemm& operator=(const LtFp8Gemm&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] const std::string& error() const { return error_; }
  cublasStatus_t run(const void* w, const void* x, void* y, void* workspace, cudaStream_t s) const {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(lt_, op_, &alpha, w, a_, x, b_, &beta, y, c_, y, c_, &heur_.algo, workspace, kWorkspace, s);
  }

 private:
  bool step(cublasStatus_t st, const char* what) {
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    error_ = std::string(what) + ": " + cublasGetStatusString(st);
    return false;
  }
  cublasLtHandle_t lt_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulHeuristicResult_t heur_{};
  bool ok_ = false;
  std::string error_;
};

GpuDeviceInfo open_device(int index);

// ---- timing ------------------------------------------------------------------------------------------

/// Times `enqueue` (which puts `per` calls on `stream`) with CUDA events: one warm-up, one timed to size the
/// repetitions, then `repeats` repetitions of as many enqueues as make one last >= min_repeat_seconds (at
/// most `most`); seconds per call. `enqueues_out` gets the enqueues per repetition.
template <class F>
TimeSamples time_enqueued(F&& enqueue, cudaStream_t stream, std::int64_t per, int repeats, double min_repeat_seconds,
                          std::int64_t most, std::int64_t* enqueues_out = nullptr) {
  Event a, b;
  enqueue();
  ck(cudaStreamSynchronize(stream), "warm-up");
  ck(cudaEventRecord(a.e, stream), "cudaEventRecord");
  enqueue();
  ck(cudaEventRecord(b.e, stream), "cudaEventRecord");
  ck(cudaEventSynchronize(b.e), "cudaEventSynchronize");
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, a.e, b.e), "cudaEventElapsedTime");
  const double first = std::max(static_cast<double>(ms) * 1e-3, 1e-7);
  const auto n = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(min_repeat_seconds / first)), 1, most);
  TimeSamples t;
  for (int rep = 0; rep < repeats; ++rep) {
    ck(cudaEventRecord(a.e, stream), "cudaEventRecord");
    for (std::int64_t c = 0; c < n; ++c) enqueue();
    ck(cudaEventRecord(b.e, stream), "cudaEventRecord");
    ck(cudaEventSynchronize(b.e), "cudaEventSynchronize");
    ck(cudaEventElapsedTime(&ms, a.e, b.e), "cudaEventElapsedTime");
    t.seconds.push_back(static_cast<double>(ms) * 1e-3 / static_cast<double>(n * per));
  }
  if (enqueues_out) *enqueues_out = n;
  return t;
}

/// Times `call` issued from the host one after another (eager): per-call seconds; `calls_out` gets the
/// calls per repetition.
template <class F>
TimeSamples time_calls(F&& call, cudaStream_t stream, int repeats, double min_repeat_seconds,
                       std::int64_t* calls_out = nullptr) {
  return time_enqueued(call, stream, 1, repeats, min_repeat_seconds, 100000, calls_out);
}

/// Owns a stream capture until it ends: a call that throws inside the capture ends it, so that the stream is
/// usable (and the graph freed) afterwards.
class Capture {
 public:
  explicit Capture(cudaStream_t s) : s_(s) {
    ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  }
  ~Capture() {
    if (!s_) return;
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(s_, &g);
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  /// Ends the capture and returns its graph (the caller owns it).
  cudaGraph_t end() {
    cudaGraph_t g = nullptr;
    const cudaStream_t s = s_;
    s_ = nullptr;
    ck(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
    return g;
  }

 private:
  cudaStream_t s_;
};

/// An instantiated CUDA graph of `nodes` calls of `call`, captured once on `stream`.
class GraphOf {
 public:
  // std::function, not a forwarding reference: a constructor template of one crashes clang-tidy 14
  // (bugprone-forwarding-reference-overload's matcher), and capture runs once per measurement.
  GraphOf(const std::function<void()>& call, cudaStream_t stream, std::int64_t nodes) {
    Capture capture(stream);
    for (std::int64_t i = 0; i < nodes; ++i) call();
    graph_ = capture.end();
    ck(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  ~GraphOf() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
  }
  GraphOf(const GraphOf&) = delete;
  GraphOf& operator=(const GraphOf&) = delete;
  void launch(cudaStream_t stream) const { ck(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch"); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// Times `call` replayed from a CUDA graph: `nodes` calls captured once (enough that the calls' rotation
/// through the weight pool is all in the graph), the graph launched once to warm up, then `repeats`
/// repetitions of as many launches as make one last >= min_repeat_seconds; per-call seconds. The host's
/// launch cost is gone, as in engines that replay a decode step from a CUDA graph; what stays is the GPU's
/// kernel time and its gap between a graph's kernels.
template <class F>
TimeSamples time_graph(F&& call, cudaStream_t stream, std::int64_t nodes, int repeats, double min_repeat_seconds) {
  const GraphOf g(call, stream, nodes);
  return time_enqueued([&] { g.launch(stream); }, stream, nodes, repeats, min_repeat_seconds, 10000);
}

GpuCopySample measure_copy(CopyKind kind, std::size_t size, int repeats, cudaStream_t stream);
std::size_t round_up(std::size_t v, std::size_t to);

}  // namespace moesim::calibrate::cuda_detail
