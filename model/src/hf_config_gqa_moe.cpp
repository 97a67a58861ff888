// Hugging Face config.json readers of MoE families with grouped-query attention that spell their experts
// in keys of their own, or shape their attention per layer: Hunyuan-A13B, MiMo-V2-Flash, Gemma 4. Dispatch:
// hf_config.cpp.

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

/// MiMo-V2-Flash (XiaomiMiMo; transformers' modeling_mimo_v2_flash.py, MiMoV2Attention and
/// MiMoV2DecoderLayer). hybrid_layer_pattern picks each layer's attention: 0 full attention of
/// num_attention_heads × head_dim queries and keys, num_key_value_heads, values of v_head_dim; 1 sliding-window
/// attention (sliding_window tokens) of the swa_* counterparts. q/k/v carry biases only with attention_bias
/// (o never); add_full_attention_sink_bias and add_swa_attention_sink_bias give those layers one sink per
/// head. moe_layer_freq marks the MoE layers (1) and the dense SwiGLU MLPs of intermediate_size (0); the MoE
/// has n_routed_experts of moe_intermediate_size, top num_experts_per_tok, a sigmoid router with
/// e_score_correction_bias (MiMoV2MoEGate, noaux_tc), no shared expert. The MTP layers are left out, as
/// DeepSeek's.
void parse_mimo_v2_flash(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.v_head_dim = f.optional_dim("v_head_dim", "value head width").value_or(a.head_dim);
  a.attention_bias = f.flag("attention_bias", false);
  const std::vector<std::int64_t> pattern =
      per_layer_integers(f, "hybrid_layer_pattern", a.layers, 0, "attention kind (0 full, 1 sliding window)", 0, 1);
  const std::vector<std::int64_t> freq =
      per_layer_integers(f, "moe_layer_freq", a.layers, 0, "FFN kind (1 MoE, 0 dense MLP)", 0, 1);
  std::vector<LayerKind> kinds;
  std::vector<bool> moe;
  for (std::int64_t i = 0; i < a.layers; ++i) {
    kinds.push_back(pattern[static_cast<std::size_t>(i)] == 1 ? LayerKind::Sliding : LayerKind::Full);
    moe.push_back(freq[static_cast<std::size_t>(i)] == 1);
  }
  read_experts(f, a, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size");
  a.router_bias = f.optional_string("topk_method").value_or("noaux_tc") == "noaux_tc";
  if (f.optional_integer("n_shared_experts", "number of shared experts", 0).value_or(0) > 0) {
    throw f.error("n_shared_experts",
                  "is positive, but MiMo-V2-Flash has no shared expert (null in its release); set it to null");
  }
  read_dense_ffn(f, a, moe);
  a.layer_specs = make_layers(f, kinds, false, moe);
  // The sliding layers' own shape (MiMoV2Attention with is_swa); the full layers keep the model-wide one,
  // whose sinks come from add_full_attention_sink_bias.
  a.attention_sinks = f.flag("add_full_attention_sink_bias", false);
  GqaShape swa;
  swa.heads = f.dim("swa_num_attention_heads", "sliding-window layers' query heads");
  swa.kv_heads = f.dim("swa_num_key_value_heads", "sliding-window layers' key/value heads");
  swa.head_dim = f.dim("swa_head_dim", "sliding-window layers' query/key head width");
  swa.v_head_dim = f.optional_dim("swa_v_head_dim", "sliding-window layers' value head width").value_or(swa.head_dim);
  swa.sinks = f.flag("add_swa_attention_sink_bias", false);
  if (swa.heads % swa.kv_heads != 0) {
    throw f.error("swa_num_key_value_heads",
                  "is " + std::to_string(swa.kv_heads) + ", which does not divide swa_num_attention_heads " +
                      std::to_string(swa.heads) + "; grouped-query attention needs a divisor");
  }
  for (LayerSpec& s : a.layer_specs) {
    if (s.sliding_window > 0) s.shape = swa;
  }
}

/// Gemma 4 (transformers' modeling_gemma4.py, Gemma4TextAttention and Gemma4TextDecoderLayer), from its
/// text_config. layer_types picks sliding (sliding_window tokens) or full attention; sliding layers have
/// num_key_value_heads of head_dim, full layers num_global_key_value_heads of global_head_dim and, with
/// attention_k_eq_v, no v_proj (the key is the value). Every layer: per-head q and k RMSNorms (the v norm has
/// no weights), four sandwich RMSNorms, and a gated MLP of intermediate_size. With enable_moe_block the MLP
/// runs beside num_experts routed experts of moe_intermediate_size (top top_k_experts), so it is counted as
/// an always-active shared expert; the MoE branch adds three RMSNorms and its router a per-channel and a
/// per-expert scale. The one-element layer_scalar buffer per layer is not counted. Per-layer input embeddings
/// (hidden_size_per_layer_input), KV-sharing layers and double-wide MLPs (the small Gemma 4 models) are
/// refused rather than counted wrong.
void parse_gemma4(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  a.qk_norm = true;
  if (f.optional_integer("hidden_size_per_layer_input", "per-layer input width", 0).value_or(0) > 0 ||
      f.optional_integer("num_kv_shared_layers", "number of KV-sharing layers", 0).value_or(0) > 0 ||
      f.flag("use_double_wide_mlp", false)) {
    throw f.error("hidden_size_per_layer_input",
                  "or num_kv_shared_layers or use_double_wide_mlp is set: moesim models Gemma 4 without per-layer "
                  "input embeddings, KV-sharing layers and double-wide MLPs (all off in Gemma-4-26B-A4B); set them "
                  "to 0 and false");
  }
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  const bool moe = f.flag("enable_moe_block", false);
  a.layer_specs = make_layers(f, kinds, false, all_layers(a.layers, moe));
  a.extra_layer_norms = 2;  // post_attention_layernorm and post_feedforward_layernorm (Gemma 3's sandwich)
  if (moe) {
    read_experts(f, a, "num_experts", "top_k_experts", "moe_intermediate_size");
    a.shared_experts = 1;
    a.shared_ffn = f.dim("intermediate_size", "MLP (intermediate) size");
    a.router_scales = true;
    a.extra_layer_norms += 3;  // post_feedforward_layernorm_1, pre_feedforward_layernorm_2, post_..._2
  } else {
    read_dense_ffn(f, a, all_layers(a.layers, false));
  }
  GqaShape global;
  global.heads = a.heads;
  global.kv_heads =
      f.optional_dim("num_global_key_value_heads", "full-attention layers' key/value heads").value_or(a.kv_heads);
  global.head_dim = f.optional_dim("global_head_dim", "full-attention layers' head width").value_or(a.head_dim);
  global.v_head_dim = global.head_dim;
  global.k_is_v = f.flag("attention_k_eq_v", false);
  if (global.heads % global.kv_heads != 0) {
    throw f.error("num_global_key_value_heads",
                  "is " + std::to_string(global.kv_heads) + ", which does not divide num_attention_heads " +
                      std::to_string(a.heads) + "; grouped-query attention needs a divisor");
  }
  for (LayerSpec& s : a.layer_specs) {
    if (s.sliding_window == 0) s.shape = global;
  }
}

}  // namespace moesim::model::hf
