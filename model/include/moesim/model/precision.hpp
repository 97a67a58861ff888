#pragma once
// Numeric formats of weights, and the bytes a matrix takes in each (group-quantised formats include
// their per-group scales and biases). Registry of named precisions; each cites its source.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/units.hpp"

namespace moesim::model {

struct Architecture;

struct Precision {
  std::string name;                ///< "bf16", "fp8", "q4", ...
  std::string description;         ///< one line for --help
  double bits_per_weight = 16;     ///< bits of each stored weight (i-quants: the block's bits per weight)
  std::int64_t group_size = 0;     ///< weights per quantisation group along the input dimension; 0 = none
  double group_overhead_bits = 0;  ///< bits of scale (+ bias) stored per group
  /// One group per output row (group size = the matrix's cols), e.g. int8 with a per-row scale.
  /// When set, group_size is ignored by matrix_bytes.
  bool group_per_row = false;
  std::string source;  ///< where the format is defined
  /// The precision of every tensor other than the routed experts (attention, router, dense FFN, shared
  /// experts, embedding, LM head), when it differs: released checkpoints keep them at 8 or 16 bits while
  /// the experts are 4-bit. Empty: the same as the experts. Set by a composite name "EXPERTS/OTHERS".
  std::string others;
};

/// The named precisions: bf16, fp16, fp32, fp8, int8, MLX q2 .. q8 (groups of 64, and q4/q5 of 32), mxfp4, nvfp4,
/// and the GGUF block types
/// (q8_0, q4_0, ..., q2_k .. q6_k, iq1_s .. iq4_xs).
const std::vector<Precision>& precisions();
/// By name, in any case ("Q4_K" is q4_k). A composite "EXPERTS/OTHERS" (e.g. "mxfp4/q8_0": gpt-oss as
/// ggml-org's GGUF stores it, "mxfp4/bf16": as OpenAI released it) stores the routed experts in the first
/// and every other tensor in the second. UserError listing the valid names if unknown.
const Precision& precision(std::string_view name);
/// `name`, or for "checkpoint" the format the model's config.json declares (quantization_config;
/// Architecture::checkpoint_precision), bf16 when it declares none. UserError naming the config's field for a
/// quant_method moesim does not size.
/// `stored_as` (a runtime's checkpoint_formats) maps the checkpoint's format to the one the runtime runs it
/// in (llama.cpp: gpt-oss's mxfp4/bf16 as the GGUF's mxfp4/q8_0).
const Precision& precision_for(std::string_view name, const Architecture& a,
                               const std::map<std::string, std::string>* stored_as = nullptr);

/// The precision of the tensors other than the routed experts: p itself unless p is a composite.
const Precision& others_precision(const Precision& p);
/// The routed experts' format name: "mxfp4" for "mxfp4/q8_0", the name itself otherwise.
std::string_view expert_format(const Precision& p);
/// The routed experts' format itself: precision(expert_format(p)).
const Precision& experts_precision(const Precision& p);

/// Whether `p` (one format, not a composite) stores its weights in GGUF super-blocks of 256: the K-quants
/// (block_q2_K .. block_q6_K in ggml/src/ggml-common.h: per 256 weights a super-block scale and 8 or 16
/// sub-block scales packed in 4-8 bits each, Q4_K/Q5_K with 6-bit scales and mins) and the i-quants (grid
/// codebooks), and the K-quant file types that mix them (q4_k_m, q5_k_m). A matrix-vector kernel unpacks
/// those scales (and codebook entries) per weight where a block format (Q4_0, Q8_0, MXFP4: one scale per 32
/// weights) or a plain one (F16, BF16, FP8) reads a scale or nothing: a runtime may read them at a lower
/// share of the bandwidth (DeviceSpec::super_block_read_factor).
bool super_block_format(const Precision& p);

/// Bytes of a rows x cols weight matrix (groups run along cols, the input dimension).
units::Bytes matrix_bytes(std::int64_t rows, std::int64_t cols, const Precision& p);
/// Bytes of ONE routed expert in ONE layer (its three SwiGLU matrices, biases at bf16 where present).
/// Qwen3.5-397B at q4 must give 7,077,888 B and at q2 3,932,160 B (flash-moe, seed 004).
units::Bytes routed_expert_bytes(const Architecture& a, const Precision& p);
/// Bytes of `params` weights stored at precision p, ignoring matrix shapes (groups assumed full).
units::Bytes param_bytes(std::int64_t params, const Precision& p);

}  // namespace moesim::model
