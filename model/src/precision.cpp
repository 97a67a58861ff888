// The named weight precisions and the bytes a matrix takes in each. Group-quantised formats store, per
// group of `group_size` weights along a row (the input dimension), a scale (+ a bias); those bits count.

#include "moesim/model/precision.hpp"

#include <string>

#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::model {

const std::vector<Precision>& precisions() {
  static const std::vector<Precision> all = {
      {"bf16", "bfloat16: 1 sign, 8 exponent, 7 fraction bits (the usual checkpoint format)", 16, 0, 0, false,
       "bfloat16 format (Google Brain; IEEE 754 binary32 with the low 16 fraction bits dropped)"},
      {"fp16", "IEEE half precision: 1 sign, 5 exponent, 10 fraction bits", 16, 0, 0, false, "IEEE 754-2008 binary16"},
      {"fp32", "IEEE single precision", 32, 0, 0, false, "IEEE 754-2008 binary32"},
      // A per-tensor scale is a few bytes per matrix. DeepSeek-V3's FP8 checkpoint uses one fp32 scale per
      // 128x128 block instead: 32 / 16384 = 0.002 bit per weight, also negligible.
      {"fp8", "8-bit float E4M3 with a per-tensor scale (negligible)", 8, 0, 0, false,
       "OCP 8-bit Floating Point Specification (OFP8) v1.0, E4M3"},
      // One bf16 scale per output row: a group as long as the row (group_per_row), 16 bits of overhead.
      {"int8", "8-bit integer weights with one bf16 scale per output row (per-channel symmetric)", 8, 0, 16, true,
       "per-output-channel symmetric int8 weight quantisation (absmax scale per row, stored in bf16)"},
      // MLX affine quantisation: w ~= scale * q + bias, one bf16 scale and one bf16 bias per 64 weights
      // along the input dimension (models_and_routing.md §A.2 Qwen3.5: scales and biases [512, 1024, 64]
      // for a 4096-wide input = 4096 / 64 groups).
      {"q4", "4-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 4.5 bits/weight)", 4, 64, 32, false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 4), as in flash-moe's expert_index.json"},
      {"q2", "2-bit MLX affine groups of 64 (bf16 scale + bf16 bias per group; 2.5 bits/weight)", 2, 64, 32, false,
       "MLX mlx.core.quantize (affine, group_size 64, bits 2), as in flash-moe"},
      // §A.2 gpt-oss: "4-bit values + one 8-bit scale per 32-element block" = 4.25 bits/weight.
      {"mxfp4", "OCP MXFP4: 4-bit E2M1 values + one E8M0 scale per 32-element block (4.25 bits/weight)", 4, 32, 8,
       false, "OCP Microscaling Formats (MX) Specification v1.0 (gpt-oss ships its MoE weights in it)"},
      // NVFP4: E2M1 values, one FP8 E4M3 scale per 16-element micro-block (4.5 bits/weight), plus one FP32
      // scale per tensor (negligible). Blackwell's tensor cores compute in it (cost::compute_path: "fp4").
      {"nvfp4", "NVIDIA NVFP4: 4-bit E2M1 values + one FP8 E4M3 scale per 16-element block (4.5 bits/weight)", 4, 16,
       8, false,
       "NVIDIA Technical Blog, 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference' (2025-06)"},
  };
  return all;
}

const Precision& precision(std::string_view name) {
  for (const auto& p : precisions()) {
    if (p.name == name) return p;
  }
  std::vector<std::string> names;
  for (const auto& p : precisions()) names.push_back(p.name);
  throw UserError("unknown precision '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid precisions: " + text::join(names));
}

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
  units::Bytes b = matrix_bytes(a.expert_ffn, a.hidden, p) * 2.0 + matrix_bytes(a.hidden, a.expert_ffn, p);
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
