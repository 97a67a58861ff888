// Tests of weight precisions: bytes per matrix in each format (MLX, GGUF blocks, AWQ groups), the registry,
// and the checkpoint format read from a config's quantization_config.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "architecture_test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"

namespace moesim::model {
namespace {

using moesim::test::user_error;

// ---- Precision -----------------------------------------------------------------------------------------------

// Scenario: a Qwen3.5-397B expert in MLX 4- and 2-bit (§A.2, flash-moe expert_index.json). Expectation:
// 3 matrices of 1024·4096 weights + 1024·64 groups · 4 B of scale and bias each: q4 7,077,888 B,
// q2 3,932,160 B, exactly.
TEST(Precision, FlashMoeQwen35ExpertBytes) {
  const Architecture a = load_model("qwen3.5-397b-a17b");
  EXPECT_DOUBLE_EQ(routed_expert_bytes(a, precision("q4")).base(), 7077888.0);
  EXPECT_DOUBLE_EQ(routed_expert_bytes(a, precision("q2")).base(), 3932160.0);
}

// Scenario: the other formats on known shapes. Expectation: int8 4096x4096 = 16,777,216 + 4096 rows · 2 B
// = 16,785,408; mxfp4 1024 weights = 1024·4/8 + 32 blocks · 1 B = 544 (4.25 bits/weight); fp8 1 B/weight;
// gpt-oss expert in mxfp4 = 3·2880²·4.25/8 + (2·2880 + 2880)·2 B = 13,236,480.
TEST(Precision, MatrixBytesPerFormat) {
  EXPECT_DOUBLE_EQ(matrix_bytes(4096, 4096, precision("int8")).base(), 16785408.0);
  EXPECT_DOUBLE_EQ(matrix_bytes(1, 1024, precision("mxfp4")).base(), 544.0);
  EXPECT_DOUBLE_EQ(matrix_bytes(10, 100, precision("fp8")).base(), 1000.0);
  EXPECT_DOUBLE_EQ(matrix_bytes(10, 100, precision("fp32")).base(), 4000.0);
  EXPECT_DOUBLE_EQ(param_bytes(1024, precision("mxfp4")).base(), 544.0);
  EXPECT_DOUBLE_EQ(param_bytes(640, precision("q4")).base(), 640 * 4.5 / 8);
  EXPECT_DOUBLE_EQ(routed_expert_bytes(load_model("gpt-oss-120b"), precision("mxfp4")).base(), 13236480.0);
  // A partial last group still stores its scale: 65 columns at q4 are 2 groups.
  EXPECT_DOUBLE_EQ(matrix_bytes(1, 65, precision("q4")).base(), (65 * 4 + 2 * 32) / 8.0);
}

// MLX's other affine widths (mlx.core.quantize: bits 2-8, one 16-bit scale and one 16-bit bias per group):
// a row of 64 weights is 64·bits + 32 bits at group 64, two groups (64 bits) at group 32. Expectation: q8
// 8.5, q6 6.5, q5 5.5, q3 3.5 bits/weight; q5_g32 6.0 and q4_g32 5.0.
TEST(Precision, MlxAffineWidths) {
  const std::vector<std::pair<const char*, double>> bits_per_weight = {{"q8", 8.5}, {"q6", 6.5},     {"q5", 5.5},
                                                                       {"q3", 3.5}, {"q5_g32", 6.0}, {"q4_g32", 5.0}};
  for (const auto& [name, bits] : bits_per_weight) {
    EXPECT_DOUBLE_EQ(matrix_bytes(4, 64, precision(name)).base(), 4 * 64 * bits / 8) << name;
    EXPECT_FALSE(super_block_format(precision(name))) << name;
  }
}

// GGUF block types: a matrix of whole blocks takes blocks × sizeof(block), the sizes ggml's
// static_asserts fix (ggml/src/ggml-common.h): one row of 256 weights is one k-quant super-block or 8
// legacy blocks of 32.
TEST(Precision, GgufBlocksHaveGgmlSizes) {
  const std::vector<std::pair<const char*, double>> block_bytes_per_256 = {
      {"q8_0", 8 * 34}, {"q4_0", 8 * 18}, {"q4_1", 8 * 20},   {"q5_0", 8 * 22}, {"q5_1", 8 * 24},
      {"q2_k", 84},     {"q3_k", 110},    {"q4_k", 144},      {"q5_k", 176},    {"q6_k", 210},
      {"iq1_s", 50},    {"iq1_m", 56},    {"iq2_xxs", 66},    {"iq2_xs", 74},   {"iq2_s", 82},
      {"iq3_xxs", 98},  {"iq3_s", 110},   {"iq4_nl", 8 * 18}, {"iq4_xs", 136}};
  for (const auto& [name, bytes] : block_bytes_per_256) {
    EXPECT_DOUBLE_EQ(matrix_bytes(3, 256, precision(name)).base(), 3 * bytes) << name;
    EXPECT_DOUBLE_EQ(param_bytes(768, precision(name)).base(), 3 * bytes) << name;
  }
}

// The super-block formats (model::super_block_format): GGUF's K-quants, their mixed file types and the
// i-quants in 256-weight super-blocks; not the 32-weight block formats, MXFP4 or the plain ones. A composite
// is judged by each of its parts.
TEST(Precision, SuperBlockFormats) {
  for (const char* n : {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m", "iq2_xxs", "iq4_xs"})
    EXPECT_TRUE(super_block_format(precision(n))) << n;
  for (const char* n : {"q4_0", "q8_0", "q5_1", "iq4_nl", "mxfp4", "nvfp4", "fp8", "bf16", "fp16", "int4_g128", "q4"})
    EXPECT_FALSE(super_block_format(precision(n))) << n;
  const Precision& gguf_oss = precision("mxfp4/q8_0");
  EXPECT_FALSE(super_block_format(experts_precision(gguf_oss)));
  EXPECT_FALSE(super_block_format(others_precision(gguf_oss)));
  EXPECT_EQ(experts_precision(gguf_oss).name, "mxfp4");
}

// Scenario: the registry. Expectation: the first fifteen names, each described and sourced; an unknown name is a
// UserError that suggests the near miss and lists the valid names.
TEST(Precision, RegistryAndUnknownName) {
  std::vector<std::string> names;
  for (const Precision& p : precisions()) {
    names.push_back(p.name);
    EXPECT_FALSE(p.description.empty()) << p.name;
    EXPECT_FALSE(p.source.empty()) << p.name;
  }
  const std::vector<std::string> first = {"bf16", "fp16", "fp32", "fp8",    "int8",   "q4",    "q2",   "q8",
                                          "q6",   "q5",   "q3",   "q5_g32", "q4_g32", "mxfp4", "nvfp4"};
  ASSERT_GE(names.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(first.size())), first);
  EXPECT_EQ(&precision("Q4_K"), &precision("q4_k"));  // GGUF's spelling
  const std::string msg = user_error([] { (void)precision("bf61"); });
  EXPECT_NE(msg.find("did you mean 'bf16'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mxfp4"), std::string::npos) << msg;
}

// Scenario: quantization_config in config.json. Expectation: gpt-oss is sized as released (experts MXFP4,
// the rest bf16), DeepSeek-V3 as FP8, a 4-bit group-128 AWQ config as int4_g128; a config without one is
// bf16; an explicit name overrides it; a quant_method moesim does not size is refused naming the field.
TEST(Precision, CheckpointFormatFromQuantizationConfig) {
  EXPECT_EQ(precision_for("checkpoint", load_model("gpt-oss-120b")).name, "mxfp4/bf16");
  EXPECT_EQ(precision_for("checkpoint", load_model("deepseek-v3")).name, "fp8");
  EXPECT_EQ(precision_for("checkpoint", load_model("mixtral-8x7b")).name, "bf16");
  EXPECT_EQ(precision_for("q8_0", load_model("gpt-oss-120b")).name, "q8_0");
  nlohmann::json config = load_model_config("qwen3-30b-a3b");
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}};
  EXPECT_EQ(precision_for("checkpoint", parse_hf_config(config, "awq.json")).name, "int4_g128");
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
  try {
    (void)precision_for("checkpoint", parse_hf_config(config, "bnb.json"));
    FAIL() << "an unknown quant_method was sized";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bnb.json: quantization_config.quant_method is \"bitsandbytes\""),
              std::string::npos)
        << e.what();
  }
  // AWQ/GPTQ group-128 int4: 4 bits plus 20 bits per 128 weights.
  EXPECT_DOUBLE_EQ(matrix_bytes(1, 128, precision("int4_g128")).base(), (128 * 4 + 20) / 8.0);
}

}  // namespace
}  // namespace moesim::model
