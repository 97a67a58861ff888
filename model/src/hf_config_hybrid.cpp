// Hugging Face config.json readers of the hybrid families, whose layers are not all attention: Qwen3-Next
// and Qwen3.5 (Gated DeltaNet). Dispatch: hf_config.cpp.

#include <vector>

#include "hf_fields.hpp"

namespace moesim::model::hf {

/// Qwen3-Next (flat) and the text_config of Qwen3.5 (§A.2): hybrid Gated DeltaNet / gated attention.
void parse_qwen3_next(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.qk_norm = true;
  a.attention_output_gate = true;  // sigmoid output gate: q_proj is 2x wide
  a.attention_bias = f.flag("attention_bias", false);
  a.delta.key_heads = f.dim("linear_num_key_heads", "Gated DeltaNet key heads");
  a.delta.value_heads = f.dim("linear_num_value_heads", "Gated DeltaNet value heads");
  a.delta.key_head_dim = f.dim("linear_key_head_dim", "Gated DeltaNet key head width");
  a.delta.value_head_dim = f.dim("linear_value_head_dim", "Gated DeltaNet value head width");
  a.delta.conv_kernel = f.dim("linear_conv_kernel_dim", "Gated DeltaNet causal conv kernel size");
  read_experts(f, a, "num_experts", "num_experts_per_tok", "moe_intermediate_size");
  read_qwen_shared_expert(f, a, false);
  const auto moe = qwen_moe_layers(f, a.layers);
  read_dense_ffn(f, a, moe);
  // §A.2: full_attention_interval = 4 -> every 4th layer ((i + 1) % 4 == 0) is full attention, the rest
  // Gated DeltaNet (transformers Qwen3NextConfig builds layer_types the same way).
  const std::int64_t interval = f.optional_dim("full_attention_interval", "full-attention interval").value_or(4);
  const auto kinds = layer_kinds(
      f, a.layers, [&](std::int64_t i) { return (i + 1) % interval == 0 ? LayerKind::Full : LayerKind::Linear; });
  a.layer_specs = make_layers(f, kinds, true, moe);
}

}  // namespace moesim::model::hf
