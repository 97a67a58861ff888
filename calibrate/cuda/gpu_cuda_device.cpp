// The CUDA backend's helpers (gpu_cuda_detail.hpp): error checks, the device and library versions, and the
// timed copies between host and device.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu_cuda_detail.hpp"

#ifdef MOESIM_HAVE_NCCL
#include <nccl.h>
#endif

namespace moesim::calibrate::cuda_detail {

std::string size_text(double bytes) { return units::format_binary(units::bytes(bytes)); }

[[noreturn]] void fail(const std::string& what, const std::string& detail) {
  throw std::runtime_error("CUDA backend: " + what + " failed: " + detail);
}
void ck(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail(what, cudaGetErrorString(e));
}
void ck(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(what, cublasGetStatusString(s));
}

std::string version_text(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

GpuDeviceInfo open_device(int index) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    const std::string why = e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices";
    (void)cudaGetLastError();
    throw UserError("no CUDA device: " + why +
                    "; this moesim has the CUDA backend but the machine shows no usable NVIDIA GPU and driver "
                    "(nvidia-smi -L lists them); run it on a GPU machine, or use --backend cpu to measure this "
                    "machine's CPU");
  }
  if (index < 0 || index >= n) {
    throw UserError("--device " + std::to_string(index) + " is out of range: this machine has " + std::to_string(n) +
                    " CUDA device" + (n == 1 ? "" : "s") + " (0.." + std::to_string(n - 1) + ")");
  }
  ck(cudaSetDevice(index), "cudaSetDevice");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  GpuDeviceInfo d;
  d.index = index;
  d.count = n;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.memory_bytes = prop.totalGlobalMem;
  d.l2_bytes = static_cast<std::uint64_t>(std::max(prop.l2CacheSize, 0));
  d.sm_count = prop.multiProcessorCount;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) d.driver = version_text(v, 1000, 10);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) d.runtime = version_text(v, 1000, 10);
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    d.cublas = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
#ifdef MOESIM_HAVE_NCCL
  if (ncclGetVersion(&v) == ncclSuccess) {
    d.nccl = std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  }
#else
  d.nccl = "not built (CMake found no nccl.h / libnccl)";
#endif
  return d;
}

GpuCopySample measure_copy(CopyKind kind, std::size_t size, int repeats, cudaStream_t stream) {
  GpuCopySample c;
  c.kind = kind;
  c.size = size;
  c.bytes = copy_counted_bytes(kind, size);
  DeviceBuffer dev_a(size, "the copy benchmark");
  ck(cuda::fill_pattern(dev_a.get(), size / 2, 2, true, 7, stream), "fill");
  if (kind == CopyKind::D2D) {
    DeviceBuffer dev_b(size, "the copy benchmark");
    c.time = time_calls(
        [&] {
          ck(cudaMemcpyAsync(dev_b.get(), dev_a.get(), size, cudaMemcpyDeviceToDevice, stream), "cudaMemcpy D2D");
        },
        stream, repeats, 0.0);
  } else {
    PinnedBuffer host(size);
    const bool h2d = kind == CopyKind::H2D;
    c.time = time_calls(
        [&] {
          ck(h2d ? cudaMemcpyAsync(dev_a.get(), host.get(), size, cudaMemcpyHostToDevice, stream)
                 : cudaMemcpyAsync(host.get(), dev_a.get(), size, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpy host");
        },
        stream, repeats, 0.0);
  }
  return c;
}

std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

}  // namespace moesim::calibrate::cuda_detail
