// The device-independent half of the CUDA backend (calibrate/gpu.hpp), with synthetic samples: bytes and
// FLOPs counted as kernels.hpp counts them, copies counted read + write, the fit into the same size bands
// as the CPU path, kernel_overhead from an MoE chain, and the profile JSON loading back with
// model::load_node with a unit and a source on every figure. No GPU needed.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/gpu.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"

namespace {

using namespace moesim::calibrate;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;

// DBRX's w1 (10752 x 6144) at batch 4: weights 10752·6144·2 B, inputs 4·6144·2 B, f32 outputs 4·10752·4 B,
// FLOPs 2·10752·6144·4; fp8 halves the weights and inputs, not the f32 outputs.
TEST(GpuCalibration, BytesAndFlopsAreCountedAsOnTheCpu) {
  const MatrixShape w1{"expert.w1", 10752, 6144};
  const KernelCost c = gpu_kernel_cost(GpuDtype::Bf16, w1, 4);
  EXPECT_DOUBLE_EQ(c.weight_bytes, 10752.0 * 6144 * 2);
  EXPECT_DOUBLE_EQ(c.input_bytes, 4.0 * 6144 * 2);
  EXPECT_DOUBLE_EQ(c.output_bytes, 4.0 * 10752 * 4);
  EXPECT_DOUBLE_EQ(c.bytes, c.weight_bytes + c.input_bytes + c.output_bytes);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 10752 * 6144 * 4);
  // The same numbers as the CPU path's bf16 count.
  const KernelCost cpu = kernel_cost(KernelDtype::Bf16, w1, 4);
  EXPECT_DOUBLE_EQ(c.bytes, cpu.bytes);
  EXPECT_DOUBLE_EQ(c.flops, cpu.flops);
  EXPECT_DOUBLE_EQ(gpu_kernel_cost(GpuDtype::Fp16, w1, 4).bytes, c.bytes);
  const KernelCost f8 = gpu_kernel_cost(GpuDtype::Fp8, w1, 4);
  EXPECT_DOUBLE_EQ(f8.weight_bytes, 10752.0 * 6144);
  EXPECT_DOUBLE_EQ(f8.input_bytes, 4.0 * 6144);
  EXPECT_DOUBLE_EQ(f8.output_bytes, 4.0 * 10752 * 4);
  EXPECT_DOUBLE_EQ(f8.flops, c.flops);
}

// A 1 GiB device-to-device copy moves 2 GiB (read and written); a host transfer crosses the link once.
// 2 GiB in 1 ms is 2.147 TB/s. nccl-tests' bus bandwidth: all-reduce × 2(n−1)/n, all-to-all × (n−1)/n.
TEST(GpuCalibration, CopiesAndCollectivesAreCountedAsDocumented) {
  const std::uint64_t gib = 1ull << 30;
  EXPECT_DOUBLE_EQ(copy_counted_bytes(CopyKind::D2D, gib), 2.0 * gib);
  EXPECT_DOUBLE_EQ(copy_counted_bytes(CopyKind::H2D, gib), 1.0 * gib);
  EXPECT_DOUBLE_EQ(copy_counted_bytes(CopyKind::D2H, gib), 1.0 * gib);
  GpuCopySample c{CopyKind::D2D, gib, copy_counted_bytes(CopyKind::D2D, gib), {{0.0015, 0.001, 0.002}}};
  EXPECT_NEAR(c.bandwidth(), 2.0 * gib / 0.001, 1.0);
  EXPECT_DOUBLE_EQ(c.time.median(), 0.0015);
  NcclSample ar{"all_reduce", 8, 1ull << 20, {{1e-3}}};
  EXPECT_NEAR(ar.bus_bandwidth(), ar.algorithm_bandwidth() * 2.0 * 7 / 8, 1e-6);
  NcclSample a2a{"all_to_all", 4, 1ull << 20, {{1e-3}}};
  EXPECT_NEAR(a2a.bus_bandwidth(), a2a.algorithm_bandwidth() * 3.0 / 4, 1e-6);
}

GpuKernelSample sample(GpuDtype d, MatrixShape s, std::int64_t batch, double seconds) {
  GpuKernelSample k;
  k.dtype = d;
  k.shape = std::move(s);
  k.batch = batch;
  k.cost = gpu_kernel_cost(d, k.shape, batch);
  k.time.seconds = {seconds * 1.1, seconds};
  return k;
}

// Two shapes (1 MiB and 64 MiB of bf16 weights) at batches 1 and 256, a 2 TB/s copy: the GEMVs are chosen
// to reach 50% and 80% of it, the GEMMs 40% and 80% of a 1 PFLOP/s datasheet peak.
GpuKernelResult synthetic_result(bool given_peak) {
  GpuKernelResult r;
  r.device = {0, 1, "NVIDIA Test GPU", 9, 0, 80ull << 30, 50ull << 20, 132, "13.0", "13.0", "13.0.0", "2.27.7"};
  r.memory_bandwidth = 2e12;
  r.copy = GpuCopySample{CopyKind::D2D, 1ull << 30, 2.0 * (1ull << 30), {{2.0 * (1ull << 30) / 2e12}}};
  r.memory_bandwidth_source = "synthetic copy";
  const MatrixShape small{"attn.k", 512, 1024};      // 1 MiB at bf16
  const MatrixShape large{"expert.w1", 8192, 4096};  // 64 MiB at bf16
  for (const auto& [shape, eff_mem, eff_comp] : {std::tuple{small, 0.5, 0.4}, std::tuple{large, 0.8, 0.8}}) {
    const KernelCost gemv = gpu_kernel_cost(GpuDtype::Bf16, shape, 1);
    r.samples.push_back(sample(GpuDtype::Bf16, shape, 1, gemv.bytes / (eff_mem * 2e12)));
    const KernelCost gemm = gpu_kernel_cost(GpuDtype::Bf16, shape, 256);
    r.samples.push_back(sample(GpuDtype::Bf16, shape, 256, gemm.flops / (eff_comp * 1e15)));
  }
  GpuLaunchSample l;
  l.launches = 1000;
  l.back_to_back.seconds = {2.5e-6};
  l.launch_sync.seconds = {8e-6};
  r.launch = l;
  GpuChainSample c;
  c.top_k = 1;
  c.kernels = {large, large, {"expert.w2", 4096, 8192}};
  double roof = 0;
  for (const auto& k : c.kernels) roof += gpu_kernel_cost(GpuDtype::Bf16, k, 1).bytes / 2e12;
  c.time.seconds = {roof + 3 * 4e-6};  // 4 us per kernel beyond the roofline
  r.chains.push_back(c);
  std::map<GpuDtype, double> peaks;
  if (given_peak) peaks[GpuDtype::Bf16] = 1e15;
  fit_gpu_kernels(r, peaks);
  return r;
}

TEST(GpuCalibration, FitsSyntheticSamplesIntoTheCpuPathsBands) {
  const GpuKernelResult r = synthetic_result(true);
  EXPECT_EQ(r.max_batch, 256);
  ASSERT_EQ(r.peak_flops.count(GpuDtype::Bf16), 1u);
  EXPECT_DOUBLE_EQ(r.peak_flops.at(GpuDtype::Bf16), 1e15);
  EXPECT_TRUE(r.peak_given.at(GpuDtype::Bf16));
  ASSERT_EQ(r.memory_fit.bands.size(), 2u);
  EXPECT_NEAR(r.memory_fit.bands[0].value, 0.5, 1e-9);
  EXPECT_NEAR(r.memory_fit.bands[1].value, 0.8, 1e-9);
  ASSERT_EQ(r.compute_fit.bands.size(), 2u);
  EXPECT_NEAR(r.compute_fit.bands[0].value, 0.4, 1e-9);
  EXPECT_NEAR(r.compute_fit.bands[1].value, 0.8, 1e-9);
  // Exactly what the CPU path's fit gives for the same points.
  const BandFit same = fit_efficiency_bands(r.memory_points);
  ASSERT_EQ(same.bands.size(), r.memory_fit.bands.size());
  for (std::size_t i = 0; i < same.bands.size(); ++i) {
    EXPECT_EQ(same.bands[i].from, r.memory_fit.bands[i].from);
    EXPECT_EQ(same.bands[i].to, r.memory_fit.bands[i].to);
  }
  // The chain: 4 us per kernel beyond its roofline is the kernel overhead.
  ASSERT_EQ(r.chains.size(), 1u);
  EXPECT_NEAR(r.chains[0].overhead_per_kernel(), 4e-6, 1e-12);
  std::string how;
  ASSERT_TRUE(r.kernel_overhead(&how).has_value());
  EXPECT_NEAR(*r.kernel_overhead(), 4e-6, 1e-12);
  EXPECT_NE(how.find("MoE chain"), std::string::npos);
}

// Without --peak-flops the best measured GEMM is the peak: the best GEMM reaches 100% of it and the other
// 0.4 / 0.8 = 50%.
TEST(GpuCalibration, WithoutAGivenPeakTheBestGemmIsTheRoof) {
  const GpuKernelResult r = synthetic_result(false);
  EXPECT_FALSE(r.peak_given.at(GpuDtype::Bf16));
  EXPECT_NEAR(r.peak_flops.at(GpuDtype::Bf16), 0.8e15, 1e3);
  ASSERT_EQ(r.compute_fit.bands.size(), 2u);
  EXPECT_NEAR(r.compute_fit.bands[0].value, 0.5, 1e-9);
  EXPECT_NEAR(r.compute_fit.bands[1].value, 1.0, 1e-9);
}

// Every figure of the written profile carries a unit (units::parse reads it back) and a source naming the
// command and the GPU; the file loads with model::load_node.
TEST(GpuCalibration, KernelsProfileLoadsWithUnitsAndSources) {
  const GpuKernelResult r = synthetic_result(true);
  Provenance p;
  p.host = "gpu-host";
  p.cpu_model = "Test CPU";
  p.cores = 16;
  p.day = "2026-11-21";
  p.date = "2026-11-21T10:00:00Z";
  p.commit = "abc123";
  p.command = "moesim calibrate kernels --backend cuda --peak-flops 1PFLOPS";
  const auto profile = gpu_kernels_profile_json(r, p, "test-gpu");
  const moesim::test::TestDir dir("moesim_gpu");
  const auto node = moesim::model::load_node(dir.write("test-gpu.json", profile_text(profile)).string());
  EXPECT_EQ(node.id, "test-gpu");
  EXPECT_EQ(node.devices.name, "NVIDIA Test GPU");
  EXPECT_EQ(node.devices.count, 1);
  EXPECT_NEAR(node.bandwidth().value.base(), 2e12, 2e12 * 1e-5);
  EXPECT_NE(node.bandwidth().source.find("moesim calibrate kernels --backend cuda"), std::string::npos);
  EXPECT_NE(node.bandwidth().source.find("NVIDIA Test GPU"), std::string::npos);
  EXPECT_NE(node.bandwidth().source.find("2026-11-21"), std::string::npos);
  EXPECT_NEAR(node.peak("bf16").value.base(), 1e15, 1e9);
  EXPECT_NE(node.peak("bf16").source.find("--peak-flops"), std::string::npos);
  ASSERT_TRUE(node.devices.kernel_overhead.has_value());
  EXPECT_NEAR(node.devices.kernel_overhead->value.base(), 4e-6, 1e-10);
  ASSERT_TRUE(node.devices.efficiency.has_value());
  EXPECT_EQ(node.devices.efficiency->memory.size(), 2u);
  EXPECT_EQ(node.devices.efficiency->compute.size(), 2u);
  // Units on the figures and the raw data.
  EXPECT_EQ(profile["devices"]["memory_bandwidth"]["value"].get<std::string>().find("B/s") != std::string::npos, true);
  EXPECT_NE(profile["devices"]["memory"]["value"].get<std::string>().find("GiB"), std::string::npos);
  EXPECT_NE(profile["devices"]["kernel_overhead"]["value"].get<std::string>().find("us"), std::string::npos);
  const auto& cal = profile["calibration"]["kernels"];
  EXPECT_EQ(cal["backend"], "cuda");
  EXPECT_EQ(cal["samples"][0]["bandwidth"]["unit"], "B/s");
  EXPECT_EQ(cal["samples"][0]["flop_rate"]["unit"], "FLOP/s");
  EXPECT_EQ(cal["copy"]["bandwidth"]["unit"], "B/s");
  EXPECT_EQ(cal["launch"]["back_to_back_per_launch"]["best"]["unit"], "s");
  EXPECT_EQ(cal["moe_chains"][0]["overhead_per_kernel"]["unit"], "s");
  // The text report says where the peak comes from.
  std::ostringstream text;
  print_gpu_kernels_report(r, text);
  EXPECT_NE(text.str().find("given with --peak-flops"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("memory efficiency bands"), std::string::npos) << text.str();
}

TEST(GpuCalibration, MemoryProfileLoadsWithTheCopyAsBandwidth) {
  GpuMemoryResult r;
  r.device = {0, 2, "NVIDIA Test GPU", 9, 0, 80ull << 30, 50ull << 20, 132, "13.0", "13.0", "13.0.0", "2.27.7"};
  const std::uint64_t gib = 1ull << 30;
  r.copies.push_back({CopyKind::D2D, gib, copy_counted_bytes(CopyKind::D2D, gib), {{2.0 * gib / 3e12}}});
  r.copies.push_back({CopyKind::H2D, 256ull << 20, 256.0 * kBytesPerMiB, {{256.0 * kBytesPerMiB / 50e9}}});
  r.nccl.push_back({"all_reduce", 2, 1ull << 20, {{1e-5}}});
  Provenance p;
  p.host = "gpu-host";
  p.day = "2026-11-21";
  p.commit = "abc123";
  p.command = "moesim calibrate memory --backend cuda";
  const auto profile = gpu_memory_profile_json(r, p, "test-gpu-mem");
  const moesim::test::TestDir dir("moesim_gpum");
  const auto node = moesim::model::load_node(dir.write("test-gpu-mem.json", profile_text(profile)).string());
  EXPECT_EQ(node.devices.count, 2);
  EXPECT_NEAR(node.bandwidth().value.base(), 3e12, 3e12 * 1e-5);
  EXPECT_NE(node.bandwidth().source.find("2 x size"), std::string::npos);
  EXPECT_EQ(profile["calibration"]["memory"]["nccl"][0]["bus_bandwidth"]["unit"], "B/s");
  std::ostringstream text;
  print_gpu_memory_report(r, text);
  EXPECT_NE(text.str().find("h2d"), std::string::npos);
}

// The chains' kernel_overhead is over all of them, a chain of more kernels counting more: 3 kernels 4 us
// beyond their roofline and 6 kernels 1 us beyond give (12 + 6) / 9 = 2 us. Eager times, where measured,
// give the eager overhead per kernel and go into the JSON beside the graph times.
TEST(GpuCalibration, KernelOverheadIsOverEveryChainAndEagerTimesAreKept) {
  GpuKernelResult r = synthetic_result(true);
  GpuChainSample small;
  small.model = "small-moe";
  small.top_k = 2;
  const MatrixShape w{"expert.w1", 256, 1024};
  small.kernels = {w, w, w, w, w, w};
  small.roofline_seconds = 6e-6;
  small.time.seconds = {small.roofline_seconds + 6 * 1e-6};
  EXPECT_FALSE(small.eager_overhead_per_kernel().has_value());
  small.eager.seconds = {small.roofline_seconds + 6 * 9e-6};
  ASSERT_TRUE(small.eager_overhead_per_kernel().has_value());
  EXPECT_NEAR(*small.eager_overhead_per_kernel(), 9e-6, 1e-12);
  r.chains.push_back(small);
  std::string how;
  ASSERT_TRUE(r.kernel_overhead(&how).has_value());
  EXPECT_NEAR(*r.kernel_overhead(), 2e-6, 1e-12);
  EXPECT_NE(how.find("small-moe"), std::string::npos) << how;
  EXPECT_NE(how.find("CUDA graph"), std::string::npos) << how;
  r.samples.front().eager.seconds = {7e-6};
  const auto cal = gpu_kernels_calibration_json(r);
  EXPECT_EQ(cal["samples"][0]["eager_time"]["best"]["unit"], "s");
  EXPECT_FALSE(cal["samples"][1].contains("eager_time"));
  EXPECT_EQ(cal["moe_chains"][1]["model"], "small-moe");
  EXPECT_NEAR(cal["moe_chains"][1]["eager_overhead_per_kernel"]["value"].get<double>(), 9e-6, 1e-12);
  EXPECT_FALSE(cal["moe_chains"][0].contains("eager_overhead_per_kernel"));
  std::ostringstream text;
  print_gpu_kernels_report(r, text);
  EXPECT_NE(text.str().find("eager us"), std::string::npos) << text.str();
}

// Without a chain, kernel_overhead is an empty kernel's time in a CUDA graph where that was measured (the
// GPU's own gap between kernels, as the chains' is), else the back-to-back launch time.
TEST(GpuCalibration, WithoutAChainTheGraphsEmptyKernelIsTheOverhead) {
  GpuKernelResult r = synthetic_result(true);
  r.chains.clear();
  std::string how;
  EXPECT_NEAR(*r.kernel_overhead(&how), 2.5e-6, 1e-12);
  EXPECT_NE(how.find("back to back"), std::string::npos) << how;
  r.launch->in_graph.seconds = {0.9e-6, 0.8e-6};
  EXPECT_NEAR(*r.kernel_overhead(&how), 0.8e-6, 1e-12);
  EXPECT_NE(how.find("CUDA graph"), std::string::npos) << how;
}

TEST(GpuCalibration, ParsesBackendsDtypesAndPeaks) {
  EXPECT_EQ(parse_backend("cpu", "--backend"), Backend::Cpu);
  EXPECT_EQ(parse_backend("cuda", "--backend"), Backend::Cuda);
  EXPECT_THROW(parse_backend("foo", "--backend"), moesim::UserError);
  EXPECT_EQ(parse_gpu_dtype("fp8", "--dtypes"), GpuDtype::Fp8);
  EXPECT_THROW(parse_gpu_dtype("f32", "--dtypes"), moesim::UserError);
  const auto one = parse_peak_flops("989TFLOPS", "--peak-flops");
  EXPECT_NEAR(one.at(GpuDtype::Bf16), 989e12, 1e6);
  EXPECT_NEAR(one.at(GpuDtype::Fp16), 989e12, 1e6);
  EXPECT_EQ(one.count(GpuDtype::Fp8), 0u);
  const auto each = parse_peak_flops("bf16=989TFLOPS,fp8=1979TFLOPS", "--peak-flops");
  EXPECT_NEAR(each.at(GpuDtype::Fp8), 1979e12, 1e6);
  EXPECT_THROW(parse_peak_flops("989GB/s", "--peak-flops"), moesim::UserError);
  std::string why;
  EXPECT_FALSE(gpu_dtype_supported(GpuDtype::Fp8, 8, 0, &why));
  EXPECT_NE(why.find("8.9"), std::string::npos);
  EXPECT_TRUE(gpu_dtype_supported(GpuDtype::Fp8, 8, 9));
  EXPECT_TRUE(gpu_dtype_supported(GpuDtype::Fp8, 9, 0));
  EXPECT_TRUE(gpu_dtype_supported(GpuDtype::Bf16, 7, 5));
}

}  // namespace
