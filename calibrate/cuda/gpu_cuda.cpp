// The measuring half of the CUDA backend (gpu.hpp): cuBLAS GEMV/GEMM, cuBLASLt fp8, device copies, host
// transfers, launch overhead, an MoE chain of GEMVs, and NCCL collectives. Host C++ (compiled by the C++
// compiler against the CUDA runtime); the device kernels are in cuda_kernels.cu. Built only when CMake
// finds the CUDA toolkit (calibrate/cuda/CMakeLists.txt), as the plugin libmoesim_cuda.so that `moesim`
// loads on --backend cuda (gpu_plugin.cpp): the CUDA libraries cost every other command nothing.
// Method: calibrate/BENCH.md "CUDA backend".
// This file holds the two measurements and the plugin's entry point; the helpers are gpu_cuda_detail.hpp and
// gpu_cuda_device.cpp.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_kernels.hpp"
#include "gpu_cuda_detail.hpp"
#include "moesim/calibrate/gpu.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/units.hpp"

#ifdef MOESIM_HAVE_NCCL
#include <nccl.h>
#endif

namespace moesim::calibrate::cuda_detail {

namespace {

// ---- kernels -----------------------------------------------------------------------------------------

void check_kernel_options(const GpuKernelOptions& o) {
  if (o.shapes.empty()) throw UserError("no matrix shapes to measure; give --model or --shapes");
  for (const auto b : o.batches) {
    if (b < 1) throw UserError("--batches: every batch must be at least 1");
  }
  if (o.batches.empty()) throw UserError("--batches is empty; give batch sizes, e.g. 1,16,256");
}

/// The dtypes to measure: --dtypes without repeats, less those the device cannot run (r.unsupported says why).
std::vector<GpuDtype> measurable_dtypes(const GpuKernelOptions& o, GpuKernelResult& r) {
  std::vector<GpuDtype> dtypes;
  for (const auto d : o.dtypes) {
    if (std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end()) continue;
    std::string why;
    if (gpu_dtype_supported(d, r.device.cc_major, r.device.cc_minor, &why)) {
      dtypes.push_back(d);
    } else {
      r.unsupported[d] = why;
    }
  }
  return dtypes;
}

/// The reference of the memory bands: a device-to-device copy, measured first (as the CPU path measures
/// the STREAM triad first), unless the user gave a bandwidth.
void reference_bandwidth(const GpuKernelOptions& o, GpuKernelResult& r, cudaStream_t stream, Progress& progress) {
  if (o.memory_bandwidth > 0) {
    r.memory_bandwidth = o.memory_bandwidth;
    r.memory_bandwidth_source = o.memory_bandwidth_source;
    return;
  }
  progress.update(0.0, "device-to-device copy");
  std::size_t free_b = 0, total_b = 0;
  ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const std::size_t size = std::min<std::size_t>(std::max<std::uint64_t>(kGiB, 4 * r.device.l2_bytes), free_b / 4);
  r.copy = measure_copy(CopyKind::D2D, size, 10, stream);
  r.memory_bandwidth = r.copy->bandwidth();
  r.memory_bandwidth_source = "device-to-device cudaMemcpy of " + size_text(static_cast<double>(size)) +
                              " (2 x size counted) measured first by this command";
}

/// The sizes of the device buffers: the pool of rotating weight copies, the inputs and the outputs.
struct KernelBufferSizes {
  std::size_t pool = 0;
  std::size_t x = 0;
  std::size_t y = 0;
};

/// The buffer sizes for the shapes and batches (r.pool_bytes, and a note when the pool fits in L2); a
/// UserError when they do not fit in the free GPU memory.
KernelBufferSizes kernel_buffer_sizes(const GpuKernelOptions& o, GpuKernelResult& r) {
  std::int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  std::size_t largest = 0, max_k = 0, max_m = 0;
  std::vector<MatrixShape> all = o.shapes;
  for (const auto& c : o.chains) all.insert(all.end(), c.expert_shapes.begin(), c.expert_shapes.end());
  for (const auto& s : all) {
    largest = std::max(largest, static_cast<std::size_t>(s.rows * s.cols) * 2);
    max_k = std::max(max_k, static_cast<std::size_t>(s.cols));
    max_m = std::max(max_m, static_cast<std::size_t>(s.rows));
  }
  std::size_t pool = o.pool_bytes ? o.pool_bytes : std::max<std::size_t>(3 * r.device.l2_bytes, 3 * largest);
  if (pool < 3 * r.device.l2_bytes) {
    r.notes.push_back("--pool-size " + size_text(static_cast<double>(pool)) + " is below 3 x the L2 cache (" +
                      size_text(3.0 * static_cast<double>(r.device.l2_bytes)) + "): weights may come from L2, not HBM");
  }
  if (pool < largest) pool = largest;
  pool = round_up(pool, 256);
  r.pool_bytes = pool;
  const std::size_t x_bytes = round_up(static_cast<std::size_t>(max_batch) * max_k * 2, 256);
  const std::size_t y_bytes = round_up(static_cast<std::size_t>(max_batch) * max_m * 4, 256);
  std::size_t free_b = 0, total_b = 0;
  ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const double need = static_cast<double>(pool + x_bytes + y_bytes + kWorkspace);
  if (need > 0.9 * static_cast<double>(free_b)) {
    throw UserError("the kernel benchmark needs " + size_text(need) + " of GPU memory (pool " +
                    size_text(static_cast<double>(pool)) + ") but " + size_text(static_cast<double>(free_b)) +
                    " is free; give a smaller --pool-size, smaller --batches or fewer --shapes");
  }
  return {pool, x_bytes, y_bytes};
}

/// What the kernel measurements share: the stream, the libraries' handles and the device buffers.
struct KernelBench {
  cudaStream_t stream;
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  KernelBufferSizes size;
  DeviceBuffer pool;
  DeviceBuffer x;
  DeviceBuffer y;
  DeviceBuffer workspace;
};

/// Fills the pool and the inputs with a dtype's test pattern (`esize` bytes an element).
void fill_operands(const KernelBench& k, int esize, bool bf16, std::uint32_t pool_seed, std::uint32_t x_seed) {
  ck(cuda::fill_pattern(k.pool.get(), k.size.pool / static_cast<std::size_t>(esize), esize, bf16, pool_seed, k.stream),
     "fill the pool");
  ck(cuda::fill_pattern(k.x.get(), k.size.x / static_cast<std::size_t>(esize), esize, bf16, x_seed, k.stream),
     "fill the inputs");
}

/// y (m x n, f32) = wᵀ · x at a 16-bit dtype (w: k x m column-major), as cuBLAS runs every bf16/fp16 kernel
/// here.
cublasStatus_t gemm_16bit(const KernelBench& k, const std::byte* w, cudaDataType_t type, int m, int n, int kk) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(k.blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &alpha, w, type, kk, k.x.get(), type, kk, &beta,
                      k.y.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/// Calls in a timing graph: every one of the pool's `copies` once (so the weights come from HBM, not L2),
/// at least 8 and at most 4096 (a 4096-call graph of the smallest matrix still spans more than the L2).
std::int64_t graph_nodes(std::size_t copies) {
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(copies), 8, 4096);
}

/// Times the GEMV/GEMM of s.dtype, s.shape and s.batch into s.time (CUDA graph) and s.eager, each call on the next of
/// `copies` weight copies `stride` bytes apart in the pool. Returns why it was skipped, if it was.
std::optional<std::string> time_gemm(const GpuKernelOptions& o, const KernelBench& k, GpuKernelSample& s,
                                     std::size_t stride, std::size_t copies) {
  const int m = static_cast<int>(s.shape.rows), kk = static_cast<int>(s.shape.cols), n = static_cast<int>(s.batch);
  std::size_t cursor = 0;
  const std::int64_t nodes = graph_nodes(copies);
  std::optional<LtFp8Gemm> fp8;
  if (s.dtype == GpuDtype::Fp8) {
    fp8.emplace(k.lt, m, kk, n);
    if (!fp8->ok()) return fp8->error();
  }
  const cudaDataType_t type = s.dtype == GpuDtype::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const auto call = [&] {
    const std::byte* w = k.pool.get() + (cursor++ % copies) * stride;
    if (fp8) {
      ck(fp8->run(w, k.x.get(), k.y.get(), k.workspace.get(), k.stream), "cublasLtMatmul");
    } else {
      ck(gemm_16bit(k, w, type, m, n, kk), "cublasGemmEx");
    }
  };
  s.eager = time_calls(call, k.stream, o.repeats, o.min_repeat_seconds, &s.calls_per_repeat);
  s.time = time_graph(call, k.stream, nodes, o.repeats, o.min_repeat_seconds);
  return std::nullopt;
}

/// A sample for every dtype, shape and batch (r.samples), or why it was skipped (r.skipped); the progress
/// bar stands at n / total at the n-th.
void measure_gemms(const GpuKernelOptions& o, const std::vector<GpuDtype>& dtypes, const KernelBench& k,
                   GpuKernelResult& r, Progress& progress, Clock::time_point t_start, double total) {
  double done = 0;
  for (const auto d : dtypes) {
    const double size = gpu_dtype_size(d);
    fill_operands(k, static_cast<int>(size), d == GpuDtype::Bf16, 1234, 99);
    ck(cudaStreamSynchronize(k.stream), "fill");
    for (const auto& shape : o.shapes) {
      const std::size_t stride =
          round_up(static_cast<std::size_t>(static_cast<double>(shape.rows * shape.cols) * size), 256);
      const std::size_t copies = std::max<std::size_t>(1, k.size.pool / stride);
      for (const auto b : o.batches) {
        done += 1;
        GpuKernelSample s;
        s.dtype = d;
        s.shape = shape;
        s.batch = b;
        s.cost = gpu_kernel_cost(d, shape, b);
        const std::string what = std::string(gpu_dtype_name(d)) + " " + kernel_name(b) + " " +
                                 std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + " batch " +
                                 std::to_string(b);
        progress.update(done / total, what);
        if (secs(t_start, Clock::now()) > o.max_seconds) {
          r.skipped.push_back({what, "the --max-seconds budget was spent"});
          continue;
        }
        if (auto skipped = time_gemm(o, k, s, stride, copies)) {
          r.skipped.push_back({what, *skipped});
          continue;
        }
        r.samples.push_back(std::move(s));
      }
    }
  }
}

/// Launch overhead: an empty kernel back to back, launch + synchronize one at a time, and replayed from a
/// CUDA graph.
GpuLaunchSample measure_launch(int repeats, cudaStream_t stream) {
  GpuLaunchSample l;
  l.launches = 1000;
  for (int i = 0; i < 10; ++i) ck(cuda::launch_empty(stream), "empty kernel");
  ck(cudaStreamSynchronize(stream), "warm-up");
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < l.launches; ++i) ck(cuda::launch_empty(stream), "empty kernel");
    ck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    l.back_to_back.seconds.push_back(secs(t0, Clock::now()) / static_cast<double>(l.launches));
    double best = 1e9;
    for (int i = 0; i < 100; ++i) {
      const auto t1 = Clock::now();
      ck(cuda::launch_empty(stream), "empty kernel");
      ck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      best = std::min(best, secs(t1, Clock::now()));
    }
    l.launch_sync.seconds.push_back(best);
  }
  // One graph launch of `launches` empty kernels per repetition (no minimum length: 1,000 kernels are one).
  l.in_graph = time_graph([&] { ck(cuda::launch_empty(stream), "empty kernel"); }, stream, l.launches, repeats, 0);
  return l;
}

/// The MoE chains: each model's top_k experts' w1, v1, w2 (batch 1) one after another, each from its own
/// place in the pool, at the first 16-bit dtype measured, eager and from a CUDA graph (r.chains); or a note
/// saying why there is none.
void measure_moe_chains(const GpuKernelOptions& o, const std::vector<GpuDtype>& dtypes, const KernelBench& k,
                        GpuKernelResult& r) {
  const auto chain_dtype = std::find_if(dtypes.begin(), dtypes.end(), [](GpuDtype d) { return d != GpuDtype::Fp8; });
  if (o.chains.empty()) {
    r.notes.push_back("no MoE chain measured: the shapes are not a model's (--model gives the expert shape and top_k)");
    return;
  }
  if (chain_dtype == dtypes.end()) {
    r.notes.push_back("no MoE chain measured: it runs at bf16 or fp16 and neither was measured");
    return;
  }
  const GpuDtype d = *chain_dtype;
  const cudaDataType_t type = d == GpuDtype::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
  fill_operands(k, 2, d == GpuDtype::Bf16, 4321, 98);
  for (const auto& m : o.chains) {
    if (m.expert_shapes.empty() || m.top_k < 1) continue;
    GpuChainSample c;
    c.model = m.model;
    c.dtype = d;
    c.top_k = m.top_k;
    for (std::int64_t e = 0; e < m.top_k; ++e) {
      for (const auto& s : m.expert_shapes) c.kernels.push_back(s);
    }
    std::size_t slot = 0;
    for (const auto& s : m.expert_shapes) slot = std::max(slot, static_cast<std::size_t>(s.rows * s.cols) * 2);
    slot = round_up(slot, 256);
    const std::size_t slots = std::max<std::size_t>(1, k.size.pool / slot);
    std::size_t cursor = 0;
    const auto chain = [&] {
      for (const auto& s : c.kernels) {
        const std::byte* w = k.pool.get() + (cursor++ % slots) * slot;
        ck(gemm_16bit(k, w, type, static_cast<int>(s.rows), 1, static_cast<int>(s.cols)), "cublasGemmEx (MoE chain)");
      }
    };
    c.eager = time_calls(chain, k.stream, o.repeats, o.min_repeat_seconds);
    // Enough chains in the graph that it cycles through every slot of the pool once.
    const auto per_chain = static_cast<std::int64_t>(c.kernels.size());
    c.time =
        time_graph(chain, k.stream, (graph_nodes(slots) + per_chain - 1) / per_chain, o.repeats, o.min_repeat_seconds);
    r.chains.push_back(std::move(c));
  }
}

GpuKernelResult cuda_gpu_kernels(const GpuKernelOptions& o, Progress& progress) {
  const auto t_start = Clock::now();
  check_kernel_options(o);
  GpuKernelResult r;
  r.device = open_device(o.device);
  Stream stream;
  Blas blas(stream.s);
  BlasLt lt;
  const std::vector<GpuDtype> dtypes = measurable_dtypes(o, r);
  reference_bandwidth(o, r, stream.s, progress);
  const KernelBufferSizes size = kernel_buffer_sizes(o, r);
  const KernelBench k{stream.s,
                      blas.h,
                      lt.h,
                      size,
                      DeviceBuffer(size.pool, "the weight pool"),
                      DeviceBuffer(size.x, "the inputs"),
                      DeviceBuffer(size.y, "the outputs"),
                      DeviceBuffer(kWorkspace, "the cuBLAS and cuBLASLt workspace")};
  // A workspace of our own, so that no call allocates one inside a graph capture (cuBLAS guide, "CUDA Graphs
  // Support": set one with cublasSetWorkspace). cuBLAS and cuBLASLt share it: their calls never overlap.
  ck(cublasSetWorkspace(k.blas, k.workspace.get(), kWorkspace), "cublasSetWorkspace");

  const double total = static_cast<double>(dtypes.size() * o.shapes.size() * o.batches.size()) + 2.0;
  measure_gemms(o, dtypes, k, r, progress, t_start, total);
  progress.update((total - 1.5) / total, "launch overhead");
  r.launch = measure_launch(o.repeats, stream.s);
  progress.update((total - 0.5) / total, "MoE chain");
  measure_moe_chains(o, dtypes, k, r);

  fit_gpu_kernels(r, o.peak_flops);
  bool any_measured_peak = false;
  for (const auto& [d, given] : r.peak_given) any_measured_peak = any_measured_peak || !given;
  if (any_measured_peak) {
    r.notes.push_back(
        "peak_flops without --peak-flops is the best GEMM rate measured here, not the datasheet figure; give "
        "--peak-flops (e.g. 989TFLOPS for an H100 SXM's dense bf16/fp16) to make the compute bands relative to the "
        "datasheet");
  }
  r.seconds = secs(t_start, Clock::now());
  progress.update(1.0, "kernels done");
  return r;
}

// ---- memory ------------------------------------------------------------------------------------------

GpuMemoryResult cuda_gpu_memory(const GpuMemoryOptions& o, Progress& progress) {
  const auto t_start = Clock::now();
  GpuMemoryResult r;
  r.device = open_device(o.device);
  Stream stream;
  std::size_t free_b = 0, total_b = 0;
  ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  std::size_t copy = o.copy_bytes ? o.copy_bytes : std::max<std::uint64_t>(kGiB, 4 * r.device.l2_bytes);
  if (2 * copy > free_b / 2) {
    copy = free_b / 4;
    r.notes.push_back("the device-to-device copy was shrunk to " + size_text(static_cast<double>(copy)) +
                      " (a quarter of the free GPU memory)");
  }
  progress.update(0.05, "device-to-device copy");
  r.copies.push_back(measure_copy(CopyKind::D2D, copy, o.repeats, stream.s));
  const std::size_t transfer = o.transfer_bytes ? o.transfer_bytes : 256 * kMiB;
  progress.update(0.3, "host to device (pinned)");
  r.copies.push_back(measure_copy(CopyKind::H2D, transfer, o.repeats, stream.s));
  progress.update(0.5, "device to host (pinned)");
  r.copies.push_back(measure_copy(CopyKind::D2H, transfer, o.repeats, stream.s));

  if (!o.nccl || o.nccl_bytes.empty()) {
    r.notes.push_back("NCCL collectives not measured (--no-nccl)");
  } else if (r.device.count < 2) {
    r.notes.push_back("one GPU: NCCL all-reduce and all-to-all skipped (they need more than one GPU)");
  } else {
#ifdef MOESIM_HAVE_NCCL
    const int n = r.device.count;
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
    if (ncclCommInitAll(comms.data(), n, nullptr) != ncclSuccess) {
      r.notes.push_back("NCCL: ncclCommInitAll over " + std::to_string(n) + " GPUs failed; collectives skipped");
    } else {
      const std::uint64_t max_bytes = *std::max_element(o.nccl_bytes.begin(), o.nccl_bytes.end());
      std::vector<std::unique_ptr<DeviceBuffer>> send, recv;
      std::vector<cudaStream_t> streams(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) {
        ck(cudaSetDevice(i), "cudaSetDevice");
        send.push_back(std::make_unique<DeviceBuffer>(max_bytes, "NCCL buffers"));
        recv.push_back(std::make_unique<DeviceBuffer>(max_bytes, "NCCL buffers"));
        ck(cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(i)], cudaStreamNonBlocking), "stream");
      }
      const auto nck = [](ncclResult_t res, const char* what) {
        if (res != ncclSuccess) fail(what, ncclGetErrorString(res));
      };
      const auto sync_all = [&] {
        for (int i = 0; i < n; ++i) {
          ck(cudaSetDevice(i), "cudaSetDevice");
          ck(cudaStreamSynchronize(streams[static_cast<std::size_t>(i)]), "NCCL synchronize");
        }
      };
      for (const char* op : {"all_reduce", "all_to_all"}) {
        for (const auto bytes : o.nccl_bytes) {
          const auto once = [&] {
            nck(ncclGroupStart(), "ncclGroupStart");
            for (int i = 0; i < n; ++i) {
              const auto ui = static_cast<std::size_t>(i);
              if (std::string(op) == "all_reduce") {
                nck(ncclAllReduce(send[ui]->get(), recv[ui]->get(), bytes / 2, ncclBfloat16, ncclSum, comms[ui],
                                  streams[ui]),
                    "ncclAllReduce");
              } else {
                // all-to-all as nccl-tests runs it: a send and a receive of bytes/n to and from every peer.
                const std::size_t chunk = bytes / static_cast<std::size_t>(n);
                for (int j = 0; j < n; ++j) {
                  const auto off = static_cast<std::size_t>(j) * chunk;
                  nck(ncclSend(send[ui]->get() + off, chunk, ncclChar, j, comms[ui], streams[ui]), "ncclSend");
                  nck(ncclRecv(recv[ui]->get() + off, chunk, ncclChar, j, comms[ui], streams[ui]), "ncclRecv");
                }
              }
            }
            nck(ncclGroupEnd(), "ncclGroupEnd");
          };
          progress.update(0.7, std::string("NCCL ") + op + " " + size_text(static_cast<double>(bytes)));
          once();
          sync_all();
          NcclSample s;
          s.op = op;
          s.gpus = n;
          s.bytes = bytes;
          for (int rep = 0; rep < o.repeats; ++rep) {
            constexpr int kIters = 10;
            const auto t0 = Clock::now();
            for (int it = 0; it < kIters; ++it) once();
            sync_all();
            s.time.seconds.push_back(secs(t0, Clock::now()) / kIters);
          }
          r.nccl.push_back(std::move(s));
        }
      }
      for (int i = 0; i < n; ++i) {
        (void)cudaSetDevice(i);
        (void)cudaStreamDestroy(streams[static_cast<std::size_t>(i)]);
        (void)ncclCommDestroy(comms[static_cast<std::size_t>(i)]);
      }
      (void)cudaSetDevice(o.device);
    }
#else
    r.notes.push_back("NCCL collectives skipped: this moesim was built without NCCL (CMake found no nccl.h)");
#endif
  }
  r.seconds = secs(t_start, Clock::now());
  progress.update(1.0, "memory done");
  return r;
}

// Internal linkage above: the executable exports functions of these names (gpu_plugin.cpp), and a call
// from here must not bind to them.
const CudaBackend kBackend{kCudaBackendAbi, cuda_gpu_kernels, cuda_gpu_memory};

}  // namespace

}  // namespace moesim::calibrate::cuda_detail

/// The plugin's one entry point (gpu_plugin.cpp looks it up with dlsym).
extern "C" __attribute__((visibility("default"))) const moesim::calibrate::CudaBackend* moesim_cuda_backend() {
  return &moesim::calibrate::cuda_detail::kBackend;
}
