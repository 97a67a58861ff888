// The named weight precisions and the bytes a matrix takes in each. Group-quantised formats store, per
// group of `group_size` weights along a row (the input dimension), a scale (+ a bias); those bits count.

#include "moesim/model/precision.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>
#include <string>

#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::model {

namespace {
constexpr const char* kGgml =
    "ggml/src/ggml-common.h (github.com/ggml-org/llama.cpp): the block struct and its static_assert on sizeof";

// The table, by family; precisions() concatenates the families in this order (the order --help lists).

/// Floating-point formats: the checkpoint ones and FP8.
std::vector<Precision> floating_point_precisions() {
  return {
      {"bf16",
       "bfloat16: 1 sign, 8 exponent, 7 fraction bits (the usual checkpoint format)",
       16,
       0,
       0,
       false,
       "bfloat16 format (Google Brain; IEEE 754 binary32 with the low 16 fraction bits dropped)",
       {}},
      {"fp16",
       "IEEE half precision: 1 sign, 5 exponent, 10 fraction bits",
       16,
       0,
       0,
       false,
       "IEEE 754-2008 binary16",
       {}},
      {"fp32", "IEEE single precision", 32, 0, 0, false, "IEEE 754-2008 binary32", {}},
      // A per-tensor scale is a few bytes per matrix. DeepSeek-V3's FP8 checkpoint uses one fp32 scale per
      // 128x128 block instead: 32 / 16384 = 0.002 bit per weight, also negligible.
      {"fp8",
       "8-bit float E4M3 with a per-tensor scale (negligible)",
       8,
       0,
       0,
       false,
       "OCP 8-bit Floating Point Specification (OFP8) v1.0, E4M3",
       {}},
  };
}

/// Integer weights with a scale per row or per group (per-channel int8, MLX affine groups).
std::vector<Precision> integer_precisions() {
  return {
      // One bf16 scale per output row: a group as long as the row (group_per_row), 16 bits of overhead.
      {"int8",
       "8-bit integer weights with one bf16 scale per output row (per-channel symmetric)",
       8,
       0,
       16,
       true,
       "per-output-channel symmetric int8 weight quantisation (absmax scale per row, stored in bf16)",
       {}},
      // MLX affine quantisation: w ~= scale * q + bias, one bf16 scale and one bf16 bias per 64 weights
      // along the input dimension (models_and_routing.md §A.2 Qwen3.5: scales and biases [512, 1024, 64]
      // for a 4096-wide input = 4096 / 64 groups).
      {"q4",
       "4-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 4.5 bits/weight)",
       4,
       64,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 4), as in flash-moe's expert_index.json",
       {}},
      {"q2",
       "2-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 2.5 bits/weight)",
       2,
       64,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 2), as in flash-moe",
       {}},
      // The other widths mlx_lm.convert writes (mlx.core.quantize: bits 2, 3, 4, 5, 6 or 8, group_size 32, 64
      // or 128, one scale and one bias per group in the model's 16-bit dtype), the ones ml-explore/mlx-lm's
      // mlx_lm/BENCHMARKS.md measures (q8, q6, q5, q4 and q5/q4 at group 32) and mlx-community's 3-bit repos.
      {"q8",
       "8-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 8.5 bits/weight)",
       8,
       64,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 8); mlx_lm.convert -q --q-bits 8",
       {}},
      {"q6",
       "6-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 6.5 bits/weight)",
       6,
       64,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 6); mlx_lm.convert -q --q-bits 6",
       {}},
      {"q5",
       "5-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 5.5 bits/weight)",
       5,
       64,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 5); mlx_lm.convert -q --q-bits 5",
       {}},
      {"q3",
       "3-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 3.5 bits/weight)",
       3,
       64,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 3); mlx_lm.convert -q --q-bits 3",
       {}},
      {"q5_g32",
       "5-bit MLX affine groups of 32 (bf16 scale + bf16 bias per group; 6.0 bits/weight)",
       5,
       32,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 32, bits 5); mlx_lm.convert -q --q-bits 5 --q-group-size 32",
       {}},
      {"q4_g32",
       "4-bit MLX affine groups of 32 (bf16 scale + bf16 bias per group; 5.0 bits/weight)",
       4,
       32,
       32,
       false,
       "MLX mlx.core.quantize (affine, group_size 32, bits 4); mlx_lm.convert -q --q-bits 4 --q-group-size 32",
       {}},
  };
}

/// Microscaling block formats: 4-bit values sharing a scale per small block.
std::vector<Precision> microscaling_precisions() {
  return {
      // §A.2 gpt-oss: "4-bit values + one 8-bit scale per 32-element block" = 4.25 bits/weight.
      {"mxfp4",
       "OCP MXFP4: 4-bit E2M1 values + one E8M0 scale per 32-element block (4.25 bits/weight)",
       4,
       32,
       8,
       false,
       "OCP Microscaling Formats (MX) Specification v1.0 (gpt-oss ships its MoE weights in it)",
       {}},
      // NVFP4: E2M1 values, one FP8 E4M3 scale per 16-element micro-block (4.5 bits/weight), plus one FP32
      // scale per tensor (negligible). Blackwell's tensor cores compute in it (cost::compute_path: "fp4").
      {"nvfp4",
       "NVIDIA NVFP4: 4-bit E2M1 values + one FP8 E4M3 scale per 16-element block (4.5 bits/weight)",
       4,
       16,
       8,
       false,
       "NVIDIA Technical Blog, 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference' (2025-06)",
       {}},
  };
}

/// The 4-bit group-quantised layout of AWQ and GPTQ checkpoints.
std::vector<Precision> awq_gptq_precisions() {
  return {
      // AWQ and GPTQ checkpoints (quant_method "awq"/"gptq", bits 4, group_size 128): qweight packs eight
      // 4-bit weights per int32, and each group of 128 input weights of an output column stores an fp16 scale
      // and a 4-bit zero point (qzeros packs eight per int32): 16 + 4 = 20 bits per group.
      {"int4_g128",
       "INT4 AWQ/GPTQ: 4-bit weights, an fp16 scale and a 4-bit zero per group of 128 (4.16 bits/weight)",
       4,
       128,
       20,
       false,
       "AutoAWQ / AutoGPTQ checkpoint layout (qweight, qzeros int32-packed; scales fp16), quantization_config "
       "bits 4, group_size 128",
       {}},
  };
}

/// GGUF block types (llama.cpp): legacy blocks, k-quants, the K_M file types and i-quants.
std::vector<Precision> gguf_precisions() {
  return {
      // GGUF block formats (llama.cpp), each a block of 32 (legacy) or 256 (k-quants, i-quants) weights whose
      // size ggml fixes with a static_assert in ggml/src/ggml-common.h: value bits per weight plus the
      // block's scales (and mins) as the group overhead, so that bytes = blocks × sizeof(block). The file
      // types people download (Q4_K_M, UD-Q4_K_XL) mix these per tensor; each entry here is one block type.
      {"q8_0", "GGUF Q8_0: blocks of 32 int8 + one fp16 scale (34 B, 8.5 bits/weight)", 8, 32, 16, false, kGgml, {}},
      {"q4_0", "GGUF Q4_0: blocks of 32 4-bit + one fp16 scale (18 B, 4.5 bits/weight)", 4, 32, 16, false, kGgml, {}},
      {"q4_1",
       "GGUF Q4_1: blocks of 32 4-bit + fp16 scale and min (20 B, 5.0 bits/weight)",
       4,
       32,
       32,
       false,
       kGgml,
       {}},
      {"q5_0", "GGUF Q5_0: blocks of 32 5-bit + one fp16 scale (22 B, 5.5 bits/weight)", 5, 32, 16, false, kGgml, {}},
      {"q5_1",
       "GGUF Q5_1: blocks of 32 5-bit + fp16 scale and min (24 B, 6.0 bits/weight)",
       5,
       32,
       32,
       false,
       kGgml,
       {}},
      // k-quants: super-blocks of 256. Q2_K: scales[16] + d + dmin = 160 bits over 2-bit values (84 B);
      // Q3_K: hmask is part of the 3-bit values, scales[12] + d = 112 bits (110 B); Q4_K and Q5_K: d, dmin
      // and scales[12] = 128 bits (144 B, 176 B); Q6_K: scales[16] + d = 144 bits (210 B).
      {"q2_k", "GGUF Q2_K: super-blocks of 256 2-bit (84 B, 2.625 bits/weight)", 2, 256, 160, false, kGgml, {}},
      {"q3_k", "GGUF Q3_K: super-blocks of 256 3-bit (110 B, 3.4375 bits/weight)", 3, 256, 112, false, kGgml, {}},
      {"q4_k", "GGUF Q4_K: super-blocks of 256 4-bit (144 B, 4.5 bits/weight)", 4, 256, 128, false, kGgml, {}},
      {"q5_k", "GGUF Q5_K: super-blocks of 256 5-bit (176 B, 5.5 bits/weight)", 5, 256, 128, false, kGgml, {}},
      {"q6_k", "GGUF Q6_K: super-blocks of 256 6-bit (210 B, 6.5625 bits/weight)", 6, 256, 144, false, kGgml, {}},
      // The K-quant "medium" file types mix block types per tensor (llama.cpp src/llama-quant.cpp,
      // llama_tensor_get_type): attn_v and ffn_down (ffn_down_exps) get Q6_K in the layers use_more_bits
      // picks (the first and last eighth, every third between: half of them), the rest the base type. In a
      // Llama-shaped layer ffn_down is 27% of the weights and attn_v 2%, so 14.4% are Q6_K: Q4_K_M averages
      // 4.5 + 0.144 x (6.5625 - 4.5) = 4.80 bits/weight, Q5_K_M 5.5 + 0.144 x 1.0625 = 5.65. Checked against
      // llama-bench's size column: Llama-3-8B Q4_K_M is 4.58 GiB for 8.03 B weights (4.90 bits with the
      // Q6_K output matrix and Q4_K embedding, which this average leaves at 4.80: 2% small).
      {"q4_k_m",
       "GGUF file type Q4_K_M: Q4_K, with Q6_K for attn_v and half the ffn_down (4.80 bits/weight)",
       4.80,
       0,
       0,
       false,
       "llama.cpp src/llama-quant.cpp llama_tensor_get_type (LLAMA_FTYPE_MOSTLY_Q4_K_M)",
       {}},
      {"q5_k_m",
       "GGUF file type Q5_K_M: Q5_K, with Q6_K for attn_v and half the ffn_down (5.65 bits/weight)",
       5.65,
       0,
       0,
       false,
       "llama.cpp src/llama-quant.cpp llama_tensor_get_type (LLAMA_FTYPE_MOSTLY_Q5_K_M)",
       {}},
      // i-quants index codebooks, so a weight has no whole value bits: their bits are the block's size in
      // bits over its 256 (IQ4_NL: 32) weights, with no separate overhead.
      {"iq1_s", "GGUF IQ1_S: 50 B per 256 weights (1.5625 bits/weight)", 1.5625, 256, 0, false, kGgml, {}},
      {"iq1_m", "GGUF IQ1_M: 56 B per 256 weights (1.75 bits/weight)", 1.75, 256, 0, false, kGgml, {}},
      {"iq2_xxs", "GGUF IQ2_XXS: 66 B per 256 weights (2.0625 bits/weight)", 2.0625, 256, 0, false, kGgml, {}},
      {"iq2_xs", "GGUF IQ2_XS: 74 B per 256 weights (2.3125 bits/weight)", 2.3125, 256, 0, false, kGgml, {}},
      {"iq2_s", "GGUF IQ2_S: 82 B per 256 weights (2.5625 bits/weight)", 2.5625, 256, 0, false, kGgml, {}},
      {"iq3_xxs", "GGUF IQ3_XXS: 98 B per 256 weights (3.0625 bits/weight)", 3.0625, 256, 0, false, kGgml, {}},
      {"iq3_s", "GGUF IQ3_S: 110 B per 256 weights (3.4375 bits/weight)", 3.4375, 256, 0, false, kGgml, {}},
      {"iq4_nl", "GGUF IQ4_NL: 18 B per 32 weights (4.5 bits/weight)", 4.5, 32, 0, false, kGgml, {}},
      {"iq4_xs", "GGUF IQ4_XS: 136 B per 256 weights (4.25 bits/weight)", 4.25, 256, 0, false, kGgml, {}},
  };
}
}  // namespace

const std::vector<Precision>& precisions() {
  static const std::vector<Precision> all = [] {
    std::vector<Precision> v;
    for (auto* family : {floating_point_precisions, integer_precisions, microscaling_precisions, awq_gptq_precisions,
                         gguf_precisions}) {
      for (auto& p : family()) v.push_back(std::move(p));
    }
    return v;
  }();
  return all;
}

namespace {
const Precision& single_precision(std::string_view name) {
  // GGUF's own spelling is upper case (Q4_K, IQ2_XXS): names match without regard to case.
  const auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& p : precisions()) {
    if (same(p.name, name)) return p;
  }
  std::vector<std::string> names;
  for (const auto& p : precisions()) names.push_back(p.name);
  throw UserError("unknown precision '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid precisions: " + text::join(names) +
                  ", or EXPERTS/OTHERS (e.g. mxfp4/q8_0: routed experts in the first, every other tensor in the "
                  "second)");
}
}  // namespace

const Precision& precision(std::string_view name) {
  const auto slash = name.find('/');
  if (slash == std::string_view::npos) return single_precision(name);
  const Precision& experts = single_precision(name.substr(0, slash));
  const Precision& others = single_precision(name.substr(slash + 1));
  if (others.name == experts.name) return experts;
  // Composites are made on first use and kept for the process (at most one per pair of named formats, so
  // the store is bounded); a deque keeps the references handed out valid as it grows.
  static std::mutex mutex;
  static std::deque<Precision> composites;
  const std::string composite = experts.name + "/" + others.name;
  const std::scoped_lock lock(mutex);
  for (const auto& p : composites) {
    if (p.name == composite) return p;
  }
  Precision p = experts;
  p.name = composite;
  p.description = "routed experts: " + experts.description + "; every other tensor: " + others.description;
  p.source = experts.source + "; " + others.source;
  p.others = others.name;
  return composites.emplace_back(std::move(p));
}

const Precision& precision_for(std::string_view name, const Architecture& a,
                               const std::map<std::string, std::string>* stored_as) {
  if (name != "checkpoint") return precision(name);
  if (!a.checkpoint_precision.empty() && a.checkpoint_precision.front() == '?')
    throw UserError(a.source + ": quantization_config.quant_method is \"" + a.checkpoint_precision.substr(1) +
                    "\", a format moesim does not size; give the weights' format with --precision (scenario key "
                    "precision), e.g. fp8, int4_g128 or q4_k_m");
  const Precision& declared = precision(a.checkpoint_precision.empty() ? "bf16" : a.checkpoint_precision);
  if (stored_as) {
    if (auto it = stored_as->find(declared.name); it != stored_as->end()) return precision(it->second);
  }
  return declared;
}

const Precision& others_precision(const Precision& p) { return p.others.empty() ? p : single_precision(p.others); }

std::string_view expert_format(const Precision& p) {
  const std::string_view n = p.name;
  return n.substr(0, n.find('/'));
}

const Precision& experts_precision(const Precision& p) { return precision(expert_format(p)); }

bool super_block_format(const Precision& p) { return p.group_size == 256 || p.name == "q4_k_m" || p.name == "q5_k_m"; }

units::Bytes matrix_bytes(std::int64_t rows, std::int64_t cols, const Precision& p) {
  MOESIM_CHECK(rows >= 0 && cols >= 0, "negative matrix shape");
  const double weights = static_cast<double>(rows) * static_cast<double>(cols);
  // Groups run along a row (the input dimension); a row's last, partial group still stores its scale.
  std::int64_t groups_per_row = 0;
  if (p.group_per_row) {
    groups_per_row = cols > 0 ? 1 : 0;
  } else if (p.group_size > 0) {
    groups_per_row = (cols + p.group_size - 1) / p.group_size;
  }
  const double overhead_bits = static_cast<double>(rows * groups_per_row) * p.group_overhead_bits;
  return units::bytes((weights * p.bits_per_weight + overhead_bits) / 8.0);
}

units::Bytes routed_expert_bytes(const Architecture& a, const Precision& p) {
  if (!a.is_moe()) return units::bytes(0);
  // SwiGLU expert (§A.3 "Expert: 3·h·I"): gate and up are I x h (input h), down is h x I (input I).
  // For Qwen3.5 at q4 this is 2·(1024·4096/2 + 1024·64·4) + (4096·1024/2 + 4096·16·4) = 7,077,888 B,
  // flash-moe's expert size (§A.2).
  // Nemotron-H's experts have no gate: up and down only.
  units::Bytes b =
      matrix_bytes(a.expert_ffn, a.hidden, p) * (a.gated_ffn ? 2.0 : 1.0) + matrix_bytes(a.hidden, a.expert_ffn, p);
  if (a.expert_bias) {
    // gpt-oss biases (2I + h) stay in bf16 (they are not quantised in the MXFP4 checkpoint).
    constexpr double kBf16Bytes = 2.0;
    b += units::bytes(static_cast<double>(2 * a.expert_ffn + a.hidden) * kBf16Bytes);
  }
  return b;
}

units::Bytes param_bytes(std::int64_t params, const Precision& p) {
  MOESIM_CHECK(params >= 0, "negative parameter count");
  // Without shapes, groups are taken as full. A per-row scale depends on the row length, unknown here; it
  // is 16 bits per row of >= 512 weights, < 0.4% of int8 storage, and left out.
  const double overhead_per_weight =
      (!p.group_per_row && p.group_size > 0) ? p.group_overhead_bits / static_cast<double>(p.group_size) : 0.0;
  return units::bytes(static_cast<double>(params) * (p.bits_per_weight + overhead_per_weight) / 8.0);
}

}  // namespace moesim::model
