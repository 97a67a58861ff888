// Hugging Face config.json readers of MoE families with grouped-query attention that spell their experts
// in keys of their own: Hunyuan-A13B. Dispatch: hf_config.cpp.

#include "hf_fields.hpp"

namespace moesim::model::hf {

/// Hunyuan-A13B (transformers HunYuanMoEV1ForCausalLM; the release's models/modeling_hunyuan.py): GQA with
/// per-head QK RMSNorm (use_qk_norm: query_layernorm and key_layernorm of head_dim each), biases on q/k/v/o
/// only with attention_bias; every layer MoE with num_experts routed SwiGLU experts of
/// moe_intermediate_size, top moe_topk, a bias-free router (gate.wg), and, with use_mixed_mlp_moe, a shared
/// SwiGLU MLP of intermediate_size × num_shared_expert. The per-layer lists (moe_topk,
/// moe_intermediate_size, num_shared_expert) must be uniform. Cross-layer KV sharing (use_cla) and MLA
/// (use_mla), off in the release, are refused rather than counted wrong.
void parse_hunyuan_moe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // The release writes the head width as attention_head_dim (128 = hidden_size / num_attention_heads).
  if (const auto hd = f.optional_dim("attention_head_dim", "per-head width")) {
    if (f.present("head_dim") && *hd != a.head_dim) {
      throw f.error("attention_head_dim", "is " + std::to_string(*hd) + " but head_dim is " +
                                              std::to_string(a.head_dim) + "; make the two equal");
    }
    a.head_dim = *hd;
  }
  for (const char* key : {"use_cla", "use_mla"}) {
    if (f.flag(key, false)) {
      throw f.error(key,
                    "is true, but moesim models Hunyuan with plain GQA (cross-layer KV sharing and MLA are "
                    "off in Hunyuan-A13B); set it to false");
    }
  }
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  a.qk_norm = f.flag("use_qk_norm", false);
  a.routed_experts = f.dim("num_experts", "number of routed experts");
  a.top_k = uniform_integer(f, "moe_topk", "number of experts per token (top-k)", a.layers, 1);
  if (a.top_k > a.routed_experts) {
    throw f.error("moe_topk", "is " + std::to_string(a.top_k) + ", more than the " + std::to_string(a.routed_experts) +
                                  " routed experts (num_experts); fix one of them");
  }
  a.expert_ffn = uniform_integer(f, "moe_intermediate_size", "routed expert FFN size", a.layers, 1);
  if (f.optional_integer("moe_layer_num_skipped", "number of leading dense layers", 0).value_or(0) > 0) {
    throw f.error("moe_layer_num_skipped",
                  "is positive, but moesim models Hunyuan with every layer MoE (0 in Hunyuan-A13B); set it to 0");
  }
  if (f.flag("use_mixed_mlp_moe", false)) {
    a.shared_experts = uniform_integer(f, "num_shared_expert", "number of shared experts", a.layers, 0);
    a.shared_ffn = a.shared_experts > 0 ? f.dim("intermediate_size", "shared MLP (intermediate) size") : 0;
  }
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, all_layers(a.layers, true));
}

}  // namespace moesim::model::hf
