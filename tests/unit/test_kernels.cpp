// OpenBLAS kernel benchmark (calibrate/kernels.hpp): the byte and FLOP accounting of GEMV and GEMM in f32
// and bf16, DBRX's matrix shapes, the shape parser, the bf16 availability check, and a tiny real run
// (matrices of a few KiB, one repetition) whose node profile loads. No timed assertions.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/kernels.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"

namespace moesim::calibrate {
namespace {

// GEMV of DBRX's expert w2 (6144 outputs × 10752 inputs) in f32: weights 6144·10752·4 = 264,241,152 B,
// input 10752·4 = 43,008 B, output 6144·4 = 24,576 B; 2·6144·10752 = 132,120,576 FLOPs.
TEST(CalibrateKernels, GemvF32Accounting) {
  const auto c = kernel_cost(KernelDtype::F32, {"expert.w2", 6144, 10752}, 1);
  EXPECT_EQ(c.weight_bytes, 264241152.0);
  EXPECT_EQ(c.input_bytes, 43008.0);
  EXPECT_EQ(c.output_bytes, 24576.0);
  EXPECT_EQ(c.bytes, 264241152.0 + 43008.0 + 24576.0);
  EXPECT_EQ(c.flops, 132120576.0);
  EXPECT_STREQ(kernel_name(1), "gemv");
}

// GEMM at batch 8 in bf16 (the same matrix): weights 2 B each, inputs 8·10752·2, outputs f32 8·6144·4;
// FLOPs scale with the batch.
TEST(CalibrateKernels, GemmBf16Accounting) {
  const auto c = kernel_cost(KernelDtype::Bf16, {"expert.w2", 6144, 10752}, 8);
  EXPECT_EQ(c.weight_bytes, 132120576.0);
  EXPECT_EQ(c.input_bytes, 8 * 10752 * 2.0);
  EXPECT_EQ(c.output_bytes, 8 * 6144 * 4.0);
  EXPECT_EQ(c.flops, 8 * 132120576.0);
  EXPECT_STREQ(kernel_name(8), "gemm");
  EXPECT_EQ(dtype_profile_key(KernelDtype::F32), "fp32");
  EXPECT_EQ(dtype_profile_key(KernelDtype::Bf16), "bf16");
}

// DBRX (d_model 6144, 48 heads and 8 KV heads of 128, 16 experts of ffn 10752): five distinct shapes.
TEST(CalibrateKernels, DbrxShapes) {
  const auto shapes = model_matrix_shapes(model::load_model("dbrx-instruct"));
  ASSERT_EQ(shapes.size(), 5u);
  const struct {
    const char* roles;
    std::int64_t rows, cols;
  } want[] = {{"attn.q, attn.o", 6144, 6144},
              {"attn.k, attn.v", 1024, 6144},
              {"router", 16, 6144},
              {"expert.w1, expert.v1", 10752, 6144},
              {"expert.w2", 6144, 10752}};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(shapes[i].roles, want[i].roles);
    EXPECT_EQ(shapes[i].rows, want[i].rows);
    EXPECT_EQ(shapes[i].cols, want[i].cols);
  }
}

// DeepSeek-V3's MLA projections are measured, not GQA's.
TEST(CalibrateKernels, MlaShapes) {
  const auto shapes = model_matrix_shapes(model::load_model("deepseek-v3"));
  bool q_a = false, kv_b = false;
  for (const auto& s : shapes) {
    q_a = q_a || s.roles.find("attn.q_a") != std::string::npos;
    kv_b = kv_b || s.roles.find("attn.kv_b") != std::string::npos;
  }
  EXPECT_TRUE(q_a);
  EXPECT_TRUE(kv_b);
}

// Jamba's Mamba-1 mixer (d_inner 8192, dt_rank 256, N 16) is measured by its own projections: in_proj 16384 ×
// 4096 (x and z), x_proj 288 × 8192 (dt, B, C), dt_proj 8192 × 256 and out_proj 4096 × 8192.
TEST(CalibrateKernels, Mamba1Shapes) {
  const auto shapes = model_matrix_shapes(
      model::load_model(std::string(MOESIM_SOURCE_DIR) + "/tests/data/hf_configs/jamba-1.5-mini/config.json"));
  const struct {
    const char* role;
    std::int64_t rows, cols;
  } want[] = {{"mamba1.in_proj", 16384, 4096},
              {"mamba1.x_proj", 288, 8192},
              {"mamba1.dt_proj", 8192, 256},
              {"mamba1.out_proj", 4096, 8192}};
  for (const auto& w : want) {
    const auto it = std::find_if(shapes.begin(), shapes.end(),
                                 [&](const MatrixShape& s) { return s.roles.find(w.role) != std::string::npos; });
    ASSERT_NE(it, shapes.end()) << w.role;
    EXPECT_EQ(it->rows, w.rows) << w.role;
    EXPECT_EQ(it->cols, w.cols) << w.role;
  }
}

TEST(CalibrateKernels, ParseShapes) {
  const auto s = parse_matrix_shapes("6144x10752,16X6144", "--shapes");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rows, 6144);
  EXPECT_EQ(s[0].cols, 10752);
  EXPECT_EQ(s[1].rows, 16);
  for (const char* bad : {"6144", "6144x", "x12", "0x5", "12y3", "1x2,", "1.5x2"}) {
    EXPECT_THROW(parse_matrix_shapes(bad, "--shapes"), UserError) << bad;
  }
  EXPECT_THROW(parse_kernel_dtype("f16", "--dtypes"), UserError);
  EXPECT_EQ(parse_kernel_dtype("fp32", "--dtypes"), KernelDtype::F32);
}

// bf16 is measured only where OpenBLAS exports cblas_sbgemv/cblas_sbgemm; otherwise the reason names
// BUILD_BFLOAT16 (Debian's 0.3.21 is built without it).
TEST(CalibrateKernels, Bf16SupportSaysWhyNot) {
  EXPECT_TRUE(dtype_support(KernelDtype::F32).available);
  const auto bf16 = dtype_support(KernelDtype::Bf16);
  if (!bf16.available) {
    EXPECT_NE(bf16.reason.find("BUILD_BFLOAT16"), std::string::npos);
  }
  EXPECT_FALSE(openblas_config().empty());
}

KernelOptions tiny_options() {
  KernelOptions o;
  o.shapes = {{"a", 32, 64}, {"b", 128, 256}};
  o.batches = {1, 4};
  o.threads = {1};
  o.repeats = 1;
  o.min_repeat_seconds = 1e-4;
  o.pool_bytes = 1 << 20;
  o.memory_bandwidth = 10e9;
  o.memory_bandwidth_source = "test";
  return o;
}

// Two shapes × batches {1, 4} × 1 thread in f32 (and bf16 where available): every sample has times and
// the accounting above; the memory fit has one band per shape from the GEMVs, the compute fit one per
// shape from the batch-4 GEMMs; one sample per band, so every residual is 0. The node profile with the
// memory bandwidth added loads, with peak_flops.fp32 = the best GEMM rate.
TEST(CalibrateKernels, TinyRunProfileLoads) {
  auto progress = Progress::quiet();
  const KernelResult r = run_kernels(tiny_options(), progress);
  const std::size_t dtypes = r.support.at(KernelDtype::Bf16).available ? 2 : 1;
  ASSERT_EQ(r.samples.size(), 4 * dtypes);
  for (const auto& s : r.samples) {
    ASSERT_EQ(s.seconds.size(), 1u);
    EXPECT_GT(s.best_seconds(), 0.0);
    EXPECT_EQ(s.cost.flops, kernel_cost(s.dtype, s.shape, s.batch).flops);
  }
  EXPECT_EQ(r.max_threads, 1);
  EXPECT_EQ(r.max_batch, 4);
  ASSERT_TRUE(r.peak_flops.count(KernelDtype::F32));
  EXPECT_EQ(r.peak_flops.at(KernelDtype::F32), r.peak_sample(KernelDtype::F32)->flops_per_second());
  EXPECT_EQ(r.memory_fit.bands.size(), 2u);
  EXPECT_EQ(r.compute_fit.bands.size(), 2u);
  if (dtypes == 1) {
    for (const double res : r.memory_fit.residuals) EXPECT_EQ(res, 0.0);
  }

  const Provenance p = current_provenance("moesim calibrate kernels (test)");
  const nlohmann::json extra = {{"memory_bandwidth", figure_json(10e9, units::Dimension::Bandwidth, "test")}};
  const auto profile = kernels_profile_json(r, p, "kernels-test", extra, nlohmann::json::object());
  const test::TestDir dir("moesim_kern");
  const auto node = model::load_node(dir.write("kernels-test.json", profile_text(profile)).string());
  EXPECT_NEAR(node.peak("fp32").value.base(), r.peak_flops.at(KernelDtype::F32),
              1e-5 * r.peak_flops.at(KernelDtype::F32));
  ASSERT_TRUE(node.devices.efficiency.has_value());
  EXPECT_EQ(node.devices.efficiency->memory.size(), 2u);
  EXPECT_EQ(node.devices.efficiency->compute.size(), 2u);
  EXPECT_EQ(profile["calibration"]["kernels"]["samples"].size(), 4 * dtypes);
}

// A budget too small for anything: every measurement is skipped with its reason, nothing is fitted, and
// the devices object has no peak and no efficiency (absent, not guessed).
TEST(CalibrateKernels, EverythingSkippedWhenTheBudgetIsSpent) {
  KernelOptions o = tiny_options();
  o.max_seconds = 1e-9;
  auto progress = Progress::quiet();
  const KernelResult r = run_kernels(o, progress);
  EXPECT_TRUE(r.samples.empty());
  EXPECT_GE(r.skipped.size(), 4u);
  const auto devices = kernels_devices_json(r, current_provenance("test"));
  EXPECT_FALSE(devices.contains("peak_flops"));
  EXPECT_FALSE(devices.contains("efficiency"));
}

TEST(CalibrateKernels, RejectsBadOptions) {
  auto progress = Progress::quiet();
  KernelOptions o = tiny_options();
  o.shapes.clear();
  EXPECT_THROW(run_kernels(o, progress), UserError);
  o = tiny_options();
  o.threads = {0};
  EXPECT_THROW(run_kernels(o, progress), UserError);
  o = tiny_options();
  o.batches = {0};
  EXPECT_THROW(run_kernels(o, progress), UserError);
}

}  // namespace
}  // namespace moesim::calibrate
