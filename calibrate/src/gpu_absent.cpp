// The CUDA backend's entry points in a moesim built without the CUDA toolkit (CMake found no nvcc, or
// -DMOESIM_CUDA=OFF): `--backend cuda` fails with one line that says how to get it. Compiled only then
// (calibrate/CMakeLists.txt); with the toolkit, calibrate/cuda/gpu_cuda.cpp defines these.

#include "moesim/calibrate/gpu.hpp"
#include "moesim/model/error.hpp"

namespace moesim::calibrate {

namespace {

[[noreturn]] void no_cuda() {
  throw UserError(
      "this moesim was built without the CUDA toolkit, so --backend cuda is not available: install the CUDA "
      "toolkit (nvcc, cuBLAS; NCCL for several GPUs) and rebuild with nvcc on PATH or -DCMAKE_CUDA_COMPILER=... "
      "(CMake finds it; -DMOESIM_CUDA=OFF turns it off), or use --backend cpu to measure this machine's CPU");
}

}  // namespace

GpuKernelResult run_gpu_kernels(const GpuKernelOptions&, Progress&) { no_cuda(); }

GpuMemoryResult run_gpu_memory(const GpuMemoryOptions&, Progress&) { no_cuda(); }

}  // namespace moesim::calibrate
