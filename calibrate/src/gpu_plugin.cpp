// The CUDA backend's entry points (gpu.hpp). The measurements are a plugin, libmoesim_cuda.so
// (calibrate/cuda/), loaded here on the first --backend cuda run: linked into `moesim`, cuBLASLt's start-up
// alone took 0.4 s and 220 MB of every command (measured on this project's 2-core CI machine, CUDA 13),
// --version included. Without the toolkit at build time (CMake found no nvcc, or -DMOESIM_CUDA=OFF) or
// without the plugin or its libraries at run time, --backend cuda fails with one line that says how to get
// it.

#include <string>

#include "moesim/calibrate/gpu.hpp"
#include "moesim/model/error.hpp"

#ifdef MOESIM_HAVE_CUDA
#include <dlfcn.h>

#include <filesystem>
#include <system_error>
#include <vector>
#endif

namespace moesim::calibrate {

namespace {

#ifndef MOESIM_HAVE_CUDA

[[noreturn]] const CudaBackend& backend() {
  throw UserError(
      "this moesim was built without the CUDA toolkit, so --backend cuda is not available: install the CUDA "
      "toolkit (nvcc, cuBLAS; NCCL for several GPUs) and rebuild with nvcc on PATH or -DCMAKE_CUDA_COMPILER=... "
      "(CMake finds it; -DMOESIM_CUDA=OFF turns it off), or use --backend cpu to measure this machine's CPU");
}

#else

/// Where the plugin may be: beside the executable, then the installed layout (MOESIM_CUDA_PLUGIN_INSTALL_DIR,
/// relative to the executable's directory).
std::vector<std::filesystem::path> plugin_candidates() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const std::filesystem::path dir = exe.parent_path();
  return {dir / kCudaPluginFile, dir / MOESIM_CUDA_PLUGIN_INSTALL_DIR / kCudaPluginFile};
}

const CudaBackend& load_backend() {
  std::string tried;
  for (const auto& path : plugin_candidates()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path.string();
      continue;
    }
    // RTLD_NOW: a missing CUDA library or symbol is reported here, not halfway through a measurement.
    // The handle is kept for the life of the process (the functions it returns live in it).
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      throw UserError("--backend cuda: cannot load " + path.string() + ": " + (why ? why : "unknown error") +
                      "; install the CUDA runtime and cuBLAS this moesim was built against (and put their "
                      "directory on LD_LIBRARY_PATH), or use --backend cpu");
    }
    using Entry = const CudaBackend* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(handle, "moesim_cuda_backend"));
    const CudaBackend* b = entry ? entry() : nullptr;
    if (b == nullptr || b->abi != kCudaBackendAbi || b->kernels == nullptr || b->memory == nullptr) {
      throw UserError(
          "--backend cuda: " + path.string() +
          " is not the CUDA plugin of this moesim build; rebuild and reinstall moesim, or use --backend cpu");
    }
    return *b;
  }
  throw UserError("--backend cuda: the CUDA plugin " + std::string(kCudaPluginFile) + " is not installed (looked in " +
                  tried + "); install moesim with `cmake --install` (which installs it), or use --backend cpu");
}

const CudaBackend& backend() {
  static const CudaBackend& b = load_backend();  // a failed load throws, and is retried on the next call
  return b;
}

#endif

}  // namespace

GpuKernelResult run_gpu_kernels(const GpuKernelOptions& options, Progress& progress) {
  return backend().kernels(options, progress);
}

GpuMemoryResult run_gpu_memory(const GpuMemoryOptions& options, Progress& progress) {
  return backend().memory(options, progress);
}

}  // namespace moesim::calibrate
