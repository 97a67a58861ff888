#pragma once
// The few device kernels the CUDA backend needs (cuda_kernels.cu, compiled by nvcc), callable from the host
// C++ of gpu_cuda.cpp and gpu_cuda_device.cpp. Internal to calibrate/cuda/.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moesim::calibrate::cuda {

/// An empty kernel <<<1, 1, 0, stream>>>: the launch cost alone. Returns cudaGetLastError().
cudaError_t launch_empty(cudaStream_t stream);

/// Fills `elements` values of `element_bytes` (1: fp8 E4M3, 2: bf16 or fp16 per `bf16`) with pseudo-random
/// normal numbers of magnitude 0.5..1 and random sign (no denormals, NaN or infinities), no two blocks alike.
cudaError_t fill_pattern(void* data, std::size_t elements, int element_bytes, bool bf16, std::uint32_t seed,
                         cudaStream_t stream);

}  // namespace moesim::calibrate::cuda
