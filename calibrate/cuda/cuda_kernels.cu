// Device kernels of the CUDA backend: an empty kernel (launch overhead) and a pattern fill of the weight
// pool. See cuda_kernels.hpp.

#include "cuda_kernels.hpp"

namespace moesim::calibrate::cuda {

namespace {

__global__ void empty_kernel() {}

__device__ unsigned int mix(unsigned long long i, unsigned int seed) {
  unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<unsigned int>(x);
}

__global__ void fill_kernel(void* data, unsigned long long elements, int element_bytes, bool bf16, unsigned int seed) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements;
       i += stride) {
    const unsigned int h = mix(i, seed);
    if (element_bytes == 1) {
      // E4M3: sign, exponent 0110 (2^-1), 3 random mantissa bits -> ±[0.5, 0.9375]
      static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(((h >> 8) & 0x80u) | 0x30u | (h & 0x7u));
    } else if (bf16) {
      // bf16: sign, exponent 126 (2^-1), 7 random mantissa bits
      static_cast<unsigned short*>(data)[i] = static_cast<unsigned short>(((h >> 8) & 0x8000u) | 0x3F00u | (h & 0x7Fu));
    } else {
      // fp16: sign, exponent 14 (2^-1), 10 random mantissa bits
      static_cast<unsigned short*>(data)[i] =
          static_cast<unsigned short>(((h >> 8) & 0x8000u) | 0x3800u | (h & 0x3FFu));
    }
  }
}

}  // namespace

cudaError_t launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t fill_pattern(void* data, std::size_t elements, int element_bytes, bool bf16, std::uint32_t seed,
                         cudaStream_t stream) {
  if (elements == 0) return cudaSuccess;
  fill_kernel<<<1024, 256, 0, stream>>>(data, static_cast<unsigned long long>(elements), element_bytes, bf16, seed);
  return cudaGetLastError();
}

}  // namespace moesim::calibrate::cuda
