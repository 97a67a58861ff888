// `moesim calibrate kernels|memory --backend cuda` end to end through the built binary. On a machine
// without an NVIDIA GPU (or a moesim built without the CUDA toolkit) both exit 2 with one line that
// mentions CUDA and the way out; on a machine with a GPU these cases are skipped (say so) and the GPU run is
// the documented command in calibrate/BENCH.md. --backend foo is a bad input everywhere.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli_support.hpp"
#include "moesim/calibrate/gpu.hpp"

namespace {

using moesim::test::BadInput;
using moesim::test::expect_bad_input;

/// An NVIDIA GPU is visible: `nvidia-smi -L` runs and lists one.
bool gpu_present() { return std::system("nvidia-smi -L 2>/dev/null | grep -q '^GPU '") == 0; }

TEST(GpuCli, CudaBackendWithoutAGpuIsOneLine) {
  if (moesim::calibrate::cuda_backend_built() && gpu_present()) {
    GTEST_SKIP() << "an NVIDIA GPU is present: --backend cuda measures it here (see calibrate/BENCH.md)";
  }
  // Built with CUDA: the plugin loads (every symbol it needs resolves against the executable, RTLD_NOW) and
  // says "no CUDA device: ..."; built without: "... built without the CUDA toolkit ...".
  const std::string why = moesim::calibrate::cuda_backend_built() ? "no CUDA device" : "without the CUDA toolkit";
  for (const BadInput& c : {
           BadInput{"kernels --backend cuda", "calibrate kernels --backend cuda", {why, "--backend cpu"}},
           BadInput{"memory --backend cuda", "calibrate memory --backend cuda", {why, "--backend cpu"}},
           BadInput{
               "kernels --backend cuda --json", "calibrate kernels --backend cuda --json --model mixtral-8x7b", {why}},
       }) {
    expect_bad_input(c);
  }
}

TEST(GpuCli, BadBackendAndMisplacedOptionsAreOneLine) {
  for (const BadInput& c : {
           BadInput{"unknown backend", "calibrate kernels --backend foo", {"--backend", "cpu", "cuda"}},
           BadInput{"unknown backend (memory)", "calibrate memory --backend gpu", {"--backend", "cpu", "cuda"}},
           BadInput{"peak-flops on the cpu", "calibrate kernels --peak-flops 989TFLOPS", {"--peak-flops", "cuda"}},
           BadInput{"threads on cuda", "calibrate kernels --backend cuda --threads 1", {"--threads", "cpu"}},
           BadInput{"device on the cpu", "calibrate memory --device 1", {"--device", "cuda"}},
           BadInput{"bad peak", "calibrate kernels --backend cuda --peak-flops 3TB/s", {"--peak-flops"}},
           BadInput{"bad gpu dtype", "calibrate kernels --backend cuda --dtypes f32", {"--dtypes", "fp8"}},
       }) {
    expect_bad_input(c);
  }
}

TEST(GpuCli, HelpNamesTheBackend) {
  for (const char* cmd : {"calibrate kernels --help", "calibrate memory --help"}) {
    const auto r = moesim::test::run_cli(cmd);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("--backend"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("cuda"), std::string::npos) << r.out;
  }
}

}  // namespace
