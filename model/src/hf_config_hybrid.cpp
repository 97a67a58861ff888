// Hugging Face config.json readers of the hybrid families, whose layers are not all attention: Qwen3-Next
// and Qwen3.5 (Gated DeltaNet), Nemotron-H (Mamba-2), Jamba (Mamba-1). Dispatch: hf_config.cpp.

#include <string>
#include <utility>
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

namespace {

/// Bytes per element of a dtype name as configs write it ("float32", "bfloat16", "float16").
double dtype_bytes(const Fields& f, std::string_view key, double fallback) {
  const auto name = f.optional_string(key);
  if (!name) return fallback;
  if (*name == "float32") return 4;
  if (*name == "bfloat16" || *name == "float16") return 2;
  throw f.error(key, "is \"" + *name + "\"; use \"float32\", \"bfloat16\" or \"float16\"");
}

/// A Nemotron-H block as its config names it: hybrid_override_pattern letters (M mamba, * attention,
/// - mlp, E moe; the release's configuration_nemotron_h.py) or layers_block_type names (transformers).
LayerSpec nemotron_block(const Fields& f, const std::string& where, const std::string& name) {
  LayerSpec s;
  s.ffn = false;
  s.moe = false;
  if (name == "M" || name == "mamba") {
    s.attention = AttentionType::Mamba2;
  } else if (name == "*" || name == "attention") {
    s.attention = AttentionType::Gqa;
  } else if (name == "-" || name == "mlp") {
    s.attention = AttentionType::None;
    s.ffn = true;
  } else if (name == "E" || name == "moe") {
    s.attention = AttentionType::None;
    s.ffn = true;
    s.moe = true;
  } else {
    throw f.error(where, "has \"" + name +
                             "\"; use M (mamba), * (attention), - (mlp) or E (moe) in hybrid_override_pattern, "
                             "or \"mamba\", \"attention\", \"mlp\", \"moe\" in layers_block_type");
  }
  return s;
}

/// A JambaConfig period and offset pair (attn_layer_* or expert_layer_*): layer i has the kind when
/// i % period == offset. JambaConfig._check_supported_offset refuses an offset that is not below its period.
std::pair<std::int64_t, std::int64_t> jamba_period(const Fields& f, const std::string& what, std::int64_t period,
                                                   std::int64_t offset) {
  const std::string period_key = what + "_layer_period";
  const std::string offset_key = what + "_layer_offset";
  period = f.optional_dim(period_key, what + " layer period").value_or(period);
  offset = f.optional_integer(offset_key, what + " layer offset", 0).value_or(offset);
  if (offset >= period) {
    throw f.error(offset_key, "is " + std::to_string(offset) + ", not below " + period_key + " " +
                                  std::to_string(period) + "; the offset must be smaller than the period");
  }
  return {period, offset};
}

/// Jamba's Mamba-1 mixer dimensions (JambaConfig; JambaMambaMixer.__init__).
Mamba1Dims jamba_mamba(const Fields& f, std::int64_t hidden) {
  Mamba1Dims m;
  m.inner = f.optional_dim("mamba_expand", "Mamba expansion factor").value_or(2) * hidden;
  m.state_size = f.optional_dim("mamba_d_state", "Mamba state width N").value_or(16);
  m.conv_kernel = f.optional_dim("mamba_d_conv", "Mamba causal conv width").value_or(4);
  // JambaConfig: mamba_dt_rank "auto" (its default) is ceil(hidden_size / 16).
  m.dt_rank = (hidden + 15) / 16;
  if (f.present("mamba_dt_rank") && f.node().raw()["mamba_dt_rank"].is_string()) {
    const std::string rank = *f.optional_string("mamba_dt_rank");
    if (rank != "auto") {
      throw f.error("mamba_dt_rank",
                    "is \"" + rank + "\"; write a positive integer or \"auto\" (ceil(hidden_size / 16))");
    }
  } else if (f.present("mamba_dt_rank")) {
    m.dt_rank = f.dim("mamba_dt_rank", "Mamba dt projection rank");
  }
  m.conv_bias = f.flag("mamba_conv_bias", true);
  m.proj_bias = f.flag("mamba_proj_bias", false);
  m.dt_bc_norms = true;  // JambaMambaMixer: dt_layernorm, b_layernorm, c_layernorm
  // The conv state is kept in the model's dtype and the SSM state in mamba_ssm_cache_dtype, itself the model's
  // dtype when unset (vLLM MambaStateDtypeCalculator.mamba1_state_dtype with its "auto" default; transformers'
  // HybridMambaAttentionDynamicCache allocates both in the model's dtype).
  m.conv_state_element_bytes = dtype_bytes(f, f.present("dtype") ? "dtype" : "torch_dtype", 2);
  m.ssm_state_element_bytes = dtype_bytes(f, "mamba_ssm_cache_dtype", m.conv_state_element_bytes);
  return m;
}

}  // namespace

/// Jamba (transformers modeling_jamba.py: JambaAttentionDecoderLayer, JambaMambaDecoderLayer; JambaConfig's
/// layers_block_type and layers_num_experts). Every layer holds an RMSNorm before its mixer and one before its
/// FFN. Layer i's mixer is GQA attention (JambaAttention: head_dim h/nq, no biases) when i % attn_layer_period
/// == attn_layer_offset, else a Mamba-1 mixer; its FFN is an MoE of num_experts SwiGLU experts of
/// intermediate_size (top num_experts_per_tok, a bias-free router) when i % expert_layer_period ==
/// expert_layer_offset and num_experts > 1, else a SwiGLU MLP of intermediate_size. A sliding window (null in
/// every release) is refused rather than guessed.
void parse_jamba(const Fields& f, Architecture& a) {
  read_standard(f, a);
  if (f.present("sliding_window")) {
    throw f.error("sliding_window",
                  "is set, but moesim models Jamba's attention over the whole context (null in every "
                  "release); set it to null");
  }
  const auto [attn_period, attn_offset] = jamba_period(f, "attn", 8, 4);
  const auto [expert_period, expert_offset] = jamba_period(f, "expert", 2, 1);
  // JambaConfig.layers_num_experts: with num_experts 1 every FFN is a plain MLP.
  const std::int64_t experts = f.dim("num_experts", "number of experts per MoE layer (1: no MoE layers)");
  if (experts > 1) read_experts(f, a, "num_experts", "num_experts_per_tok", "intermediate_size");
  std::vector<bool> moe;
  bool any_mamba = false;
  for (std::int64_t i = 0; i < a.layers; ++i) {
    LayerSpec s;
    s.attention = i % attn_period == attn_offset ? AttentionType::Gqa : AttentionType::Mamba1;
    s.moe = experts > 1 && i % expert_period == expert_offset;
    any_mamba |= s.attention == AttentionType::Mamba1;
    moe.push_back(s.moe);
    a.layer_specs.push_back(s);
  }
  read_dense_ffn(f, a, moe);
  if (any_mamba) a.mamba1 = jamba_mamba(f, a.hidden);
}

/// Nemotron-H (the checkpoints' modeling_nemotron_h.py; transformers NemotronHForCausalLM). Each of the
/// num_hidden_layers blocks holds one RMSNorm and ONE mixer: a Mamba-2 mixer, GQA attention (biases only with
/// attention_bias), an MLP of intermediate_size, or an MoE of n_routed_experts routed experts of
/// moe_intermediate_size (top num_experts_per_tok, a router with e_score_correction_bias) plus one shared
/// MLP of moe_shared_expert_intermediate_size. Every MLP and expert is up and down only (relu²), no gate.
/// The MTP layers are left out, as DeepSeek's; a latent MoE projection (moe_latent_size) is refused.
void parse_nemotron_h(const Fields& f, Architecture& a) {
  a.hidden = f.dim("hidden_size", "hidden size");
  a.layers = f.dim("num_hidden_layers", "number of blocks (layers)");
  a.vocab = f.dim("vocab_size", "vocabulary size");
  a.tie_embeddings = f.flag("tie_word_embeddings", false);
  a.max_context = f.optional_dim("max_position_embeddings", "maximum context length").value_or(0);
  a.gated_ffn = false;

  std::vector<std::string> names;
  if (const auto types = f.string_list("layers_block_type", a.layers, "num_hidden_layers")) {
    names = *types;
  } else {
    const auto pattern = f.optional_string("hybrid_override_pattern");
    if (!pattern) {
      throw f.error("hybrid_override_pattern",
                    "is missing; add the block pattern (one of M, *, -, E per block), "
                    "as in the model's official config.json");
    }
    if (static_cast<std::int64_t>(pattern->size()) != a.layers) {
      throw f.error("hybrid_override_pattern", "has " + std::to_string(pattern->size()) +
                                                   " letters but num_hidden_layers is " + std::to_string(a.layers) +
                                                   "; give one letter per block");
    }
    for (const char c : *pattern) names.emplace_back(1, c);
  }
  const std::string where = f.present("layers_block_type") ? "layers_block_type" : "hybrid_override_pattern";
  bool any_attention = false, any_mamba = false, any_mlp = false, any_moe = false;
  for (const std::string& n : names) {
    const LayerSpec s = nemotron_block(f, where, n);
    any_attention |= s.attention == AttentionType::Gqa;
    any_mamba |= s.attention == AttentionType::Mamba2;
    any_mlp |= s.ffn && !s.moe;
    any_moe |= s.moe;
    a.layer_specs.push_back(s);
  }

  if (any_attention) {
    a.heads = f.dim("num_attention_heads", "number of query heads");
    a.kv_heads = f.optional_dim("num_key_value_heads", "number of key/value heads").value_or(a.heads);
    if (a.heads % a.kv_heads != 0) {
      throw f.error("num_key_value_heads", "is " + std::to_string(a.kv_heads) +
                                               ", which does not divide num_attention_heads " +
                                               std::to_string(a.heads) + "; grouped-query attention needs a divisor");
    }
    // The releases write head_dim (Nemotron-3) or attention_head_dim (Nemotron-H-56B).
    const char* hd_key = f.present("head_dim") ? "head_dim" : "attention_head_dim";
    a.head_dim = f.dim(hd_key, "attention head width");
    a.attention_bias = f.flag("attention_bias", false);
    a.attention_out_bias = a.attention_bias;
  }
  if (any_mamba) {
    Mamba2Dims& m = a.mamba;
    m.heads = f.dim("mamba_num_heads", "number of Mamba-2 heads");
    m.head_dim = f.dim("mamba_head_dim", "Mamba-2 head width");
    m.groups = f.dim("n_groups", "number of Mamba-2 B/C groups");
    m.state_size = f.dim("ssm_state_size", "Mamba-2 state width N");
    m.conv_kernel = f.dim("conv_kernel", "Mamba-2 causal conv width");
    m.conv_bias = f.flag("use_conv_bias", true);
    m.proj_bias = f.flag("use_bias", false);
    if (m.heads % m.groups != 0) {
      throw f.error("n_groups", "is " + std::to_string(m.groups) + ", which does not divide mamba_num_heads " +
                                    std::to_string(m.heads) + "; fix one of them");
    }
    // transformers NemotronHConfig: mamba_ssm_cache_dtype defaults to "float32"; the conv state is kept in the
    // model's dtype (vLLM MambaStateDtypeCalculator), bf16 unless torch_dtype/dtype says otherwise.
    m.ssm_state_element_bytes = dtype_bytes(f, "mamba_ssm_cache_dtype", 4);
    m.conv_state_element_bytes = dtype_bytes(f, f.present("dtype") ? "dtype" : "torch_dtype", 2);
  }
  if (f.flag("mlp_bias", false)) {
    throw f.error("mlp_bias",
                  "is true, but moesim models Nemotron-H's MLPs without biases (false in every "
                  "release); set it to false");
  }
  if (any_mlp) a.dense_ffn = f.dim("intermediate_size", "MLP block (intermediate) size");
  if (any_moe) {
    if (f.present("moe_latent_size")) {
      throw f.error("moe_latent_size",
                    "is set, but moesim does not model a latent MoE projection; remove it or "
                    "set it to null");
    }
    read_experts(f, a, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size");
    a.router_bias = true;  // NemotronHTopkRouter (DeepseekV3TopkRouter): e_score_correction_bias
    if (f.optional_integer("n_shared_experts", "number of shared experts", 0).value_or(1) > 0) {
      a.shared_experts = 1;
      a.shared_ffn = f.dim("moe_shared_expert_intermediate_size", "shared expert MLP size");
    }
  }
}

}  // namespace moesim::model::hf
