// Parameter counts, KV-cache bytes and attention FLOPs derived from an Architecture's dimensions.
// Every formula follows ../shared/data/models_and_routing.md §A.3 (parameters) and §A.4 (KV cache,
// recurrent state, FLOPs); the section is cited at each formula. Nothing here is a typed-in figure.

#include "moesim/model/architecture.hpp"

#include <algorithm>
#include <string>

#include "moesim/model/error.hpp"
#include "moesim/model/step_cost.hpp"

namespace moesim::model {
namespace {

/// Projections, biases, q/k norms and sinks of one GQA (or MHA) attention block (§A.3 "Attention, GQA"):
/// q h·nq·hd (×2 with the Qwen3-Next/3.5 output gate), k h·nkv·hd, v h·nkv·vd (none when k is v), o nq·vd·h,
/// with the layer's own shape where it has one (MiMo-V2-Flash, Gemma 4).
std::int64_t gqa_attention_params(const Architecture& a, const LayerSpec& layer) {
  const GqaShape s = gqa_shape(a, layer);
  const std::int64_t h = a.hidden;
  const std::int64_t q_width = s.heads * s.head_dim;
  const std::int64_t k_width = s.kv_heads * s.head_dim;
  const std::int64_t v_width = s.k_is_v ? 0 : s.kv_heads * s.v_head_dim;
  const std::int64_t o_width = s.heads * s.v_head_dim;
  // The gated q_proj emits the query and its sigmoid gate side by side (§A.2 Qwen3-Next), so it is 2x wide.
  const std::int64_t q_out = a.attention_output_gate ? 2 * q_width : q_width;
  std::int64_t p = h * (q_out + k_width + v_width) + o_width * h;
  if (a.attention_bias) p += q_out + k_width + v_width;  // q, k, v biases (GLM-4.5, gpt-oss)
  if (a.attention_out_bias) p += h;                      // o bias (gpt-oss)
  if (a.qk_norm) {
    // Qwen3/GLM/Gemma normalise each head separately (one head_dim vector each for q and k; Gemma 4's v_norm
    // has no weights); OLMoE normalises the whole q and k rows (§A.2 OLMoE "QK-norm over the full q/k width").
    p += a.qk_norm_full_width ? q_width + k_width : 2 * s.head_dim;
  }
  if (s.sinks) p += s.heads;  // gpt-oss, MiMo-V2-Flash: one learned sink per head (§A.2)
  return p;
}

/// One MLA block (§A.3 "Attention, MLA"):
/// h·q_lora + q_lora + q_lora·nh·(nope+rope) + h·(kv_lora+rope) + kv_lora + kv_lora·nh·(nope+v) + nh·v·h.
/// The lone "+ q_lora" and "+ kv_lora" are the RMSNorms on the compressed q and kv latents.
std::int64_t mla_attention_params(const Architecture& a, const LayerSpec& layer) {
  const std::int64_t h = a.hidden;
  const std::int64_t nh = a.heads;
  const MlaDims& m = a.mla;
  const std::int64_t qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
  // q_lora_rank 0 (null in the config, as in DeepSeek-V2-Lite) means q is projected directly from h.
  const std::int64_t q =
      m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * qk_head : h * nh * qk_head;
  const std::int64_t kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank +
                          m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim);
  const std::int64_t o = nh * m.v_head_dim * h;
  // DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp inference/model.py class Indexer): wq_b from the
  // q latent q_lora·ni·di, wk h·di, k_norm a LayerNorm (weight and bias) 2·di, weights_proj h·ni.
  // GLM-5.2's "shared" layers reuse the previous layer's top-k and hold no indexer.
  const std::int64_t indexer = m.index_heads > 0 && layer.indexer
                                   ? m.q_lora_rank * m.index_heads * m.index_head_dim + h * m.index_head_dim +
                                         2 * m.index_head_dim + h * m.index_heads
                                   : 0;
  return q + kv + o + indexer;
}

/// One Gated DeltaNet block (§A.3 "Gated DeltaNet"): in_proj_qkvz h·(2·Kh·dk + 2·Vh·dv), in_proj_ba h·2Vh,
/// conv (2·Kh·dk + Vh·dv)·kernel, A_log + dt_bias 2·Vh, norm dv, out_proj Vh·dv·h.
std::int64_t delta_net_params(const Architecture& a) {
  const std::int64_t h = a.hidden;
  const DeltaNetDims& d = a.delta;
  const std::int64_t key_width = d.key_heads * d.key_head_dim;
  const std::int64_t value_width = d.value_heads * d.value_head_dim;
  const std::int64_t in_proj_qkvz = h * (2 * key_width + 2 * value_width);
  const std::int64_t in_proj_ba = h * 2 * d.value_heads;
  const std::int64_t conv = (2 * key_width + value_width) * d.conv_kernel;
  const std::int64_t a_log_dt_bias = 2 * d.value_heads;
  const std::int64_t norm = d.value_head_dim;
  const std::int64_t out_proj = value_width * h;
  return in_proj_qkvz + in_proj_ba + conv + a_log_dt_bias + norm + out_proj;
}

/// One Mamba-2 mixer (Dao & Gu 2024, arXiv:2405.21060 §7; state-spaces/mamba mamba_ssm/modules/mamba2.py,
/// whose layout transformers' NemotronHMamba2Mixer keeps), with d_inner = heads·head_dim and G·N the
/// grouped B and C widths:
///   in_proj  h·(2·d_inner + 2·G·N + heads)   (z, x, B, C and dt in one projection; + its bias with use_bias)
///   conv1d   (d_inner + 2·G·N)·kernel         (depthwise over x, B, C; + one bias per channel)
///   dt_bias, A_log, D: heads each; the gated RMSNorm d_inner; out_proj d_inner·h (+ h bias).
std::int64_t mamba2_params(const Architecture& a) {
  const std::int64_t h = a.hidden;
  const Mamba2Dims& m = a.mamba;
  const std::int64_t inner = m.heads * m.head_dim;
  const std::int64_t conv_channels = inner + 2 * m.groups * m.state_size;
  const std::int64_t in_width = 2 * inner + 2 * m.groups * m.state_size + m.heads;
  std::int64_t p = h * in_width + conv_channels * m.conv_kernel + 3 * m.heads + inner + inner * h;
  if (m.conv_bias) p += conv_channels;
  if (m.proj_bias) p += in_width + h;
  return p;
}

/// One Mamba-1 mixer (Gu & Dao 2023, arXiv:2312.00752 §3.4; state-spaces/mamba mamba_ssm/modules/mamba_simple.py,
/// whose tensors transformers' JambaMambaMixer keeps), with d_inner channels, N = state_size, R = dt_rank:
///   in_proj  h·2·d_inner                 (x and the gate z; + 2·d_inner bias with proj_bias)
///   conv1d   d_inner·kernel              (depthwise; + d_inner bias with conv_bias)
///   x_proj   d_inner·(R + 2·N)           (dt, B and C from x; no bias)
///   dt_proj  R·d_inner + d_inner         (always with its bias, the dt bias)
///   A_log    d_inner·N; D d_inner; out_proj d_inner·h (+ h bias with proj_bias)
///   Jamba's dt, B and C RMSNorms: R + 2·N.
std::int64_t mamba1_params(const Architecture& a) {
  const std::int64_t h = a.hidden;
  const Mamba1Dims& m = a.mamba1;
  const std::int64_t in_proj = h * 2 * m.inner;
  const std::int64_t x_proj = m.inner * (m.dt_rank + 2 * m.state_size);
  const std::int64_t dt_proj = m.dt_rank * m.inner + m.inner;
  std::int64_t p =
      in_proj + m.inner * m.conv_kernel + x_proj + dt_proj + m.inner * m.state_size + m.inner + m.inner * h;
  if (m.conv_bias) p += m.inner;
  if (m.proj_bias) p += 2 * m.inner + h;
  if (m.dt_bc_norms) p += m.dt_rank + 2 * m.state_size;
  return p;
}

/// One DeepSeek-V4 Compressor (inference/model.py class Compressor) producing entries of width `width`:
/// wkv and wgate h·w' each and the position bias ape ratio·w', w' = 2·width for the overlapping ratio-4
/// compressor and width otherwise, plus its RMSNorm (width).
std::int64_t compressor_params(const Architecture& a, std::int64_t ratio, std::int64_t width) {
  const std::int64_t out = ratio == 4 ? 2 * width : width;
  return 2 * a.hidden * out + ratio * out + width;
}

/// One DeepSeek-V4 attention block (the release's inference/model.py class Attention): wq_a h·q_lora and its
/// norm q_lora, wq_b q_lora·nh·hd, the shared key=value projection wkv h·hd and its norm hd, the grouped
/// output projection wo_a (nh·hd/g)·(g·o_lora) = nh·hd·o_lora and wo_b g·o_lora·h, one sink per head; a
/// compressed layer adds its Compressor, a ratio-4 layer also the lightning Indexer (wq_b q_lora·ni·di,
/// weights_proj h·ni and a Compressor of width di).
std::int64_t compressed_mqa_params(const Architecture& a, const LayerSpec& layer) {
  const CompressedMqaDims& c = a.cmqa;
  const std::int64_t h = a.hidden;
  const std::int64_t nh = a.heads;
  std::int64_t p = h * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * nh * c.head_dim + h * c.head_dim + c.head_dim +
                   nh * c.head_dim * c.o_lora_rank + c.o_groups * c.o_lora_rank * h + nh;
  if (layer.compress_ratio > 0) p += compressor_params(a, layer.compress_ratio, c.head_dim);
  if (layer.compress_ratio == 4) {
    p += c.q_lora_rank * c.index_heads * c.index_head_dim + h * c.index_heads +
         compressor_params(a, layer.compress_ratio, c.index_head_dim);
  }
  return p;
}

std::int64_t attention_params(const Architecture& a, const LayerSpec& layer) {
  switch (layer.attention) {
    case AttentionType::Gqa:
      return gqa_attention_params(a, layer);
    case AttentionType::Mla:
      return mla_attention_params(a, layer);
    case AttentionType::CompressedMqa:
      return compressed_mqa_params(a, layer);
    case AttentionType::GatedDeltaNet:
      return delta_net_params(a);
    case AttentionType::Mamba2:
      return mamba2_params(a);
    case AttentionType::Mamba1:
      return mamba1_params(a);
    case AttentionType::None:
      return 0;
  }
  MOESIM_CHECK(false, "unknown attention type");
  return 0;
}

/// Router of one MoE layer (§A.3 "Router: h·E, plus E for a bias"). The bias is gpt-oss's router bias or
/// DeepSeek/GLM's e_score_correction_bias.
/// Gemma 4's router adds a per-channel input scale (h) and a per-expert output scale (E) (transformers
/// Gemma4TextRouter: scale, per_expert_scale).
std::int64_t router_params(const Architecture& a) {
  return a.hidden * a.routed_experts + (a.router_bias ? a.routed_experts : 0) +
         (a.router_scales ? a.hidden + a.routed_experts : 0);
}

/// Weight matrices of one FFN (§A.1): SwiGLU's gate, up and down, or up and down alone (Nemotron-H).
std::int64_t ffn_matrices(const Architecture& a) { return a.gated_ffn ? 3 : 2; }

/// Shared experts of one MoE layer (§A.3 "Shared expert: 3·h·I_s, plus h for a sigmoid gate (Qwen)").
std::int64_t shared_expert_params(const Architecture& a) {
  if (a.shared_experts == 0) return 0;
  return a.shared_experts * ffn_matrices(a) * a.hidden * a.shared_ffn + (a.shared_expert_gate ? a.hidden : 0);
}

/// Elements per token of the KV cache of one layer (§A.4 "KV cache per token"): GQA nkv·(hd + vd) (k and
/// v), MLA kv_lora_rank + qk_rope_head_dim (the compressed latent plus the shared rotary key), Gated DeltaNet
/// and Mamba-1/2 none (their state does not grow with context). DeepSeek-V4: its window layers hold the one
/// key=value head (hd); a compressed layer grows by hd/ratio per token (one entry per ratio tokens), a
/// ratio-4 layer also by di/4 for its indexer's compressed keys; the 128-token uncompressed window those
/// layers also keep is a constant, added by kv_bytes_at_context (kv_window_elements).
double kv_elements_per_token(const Architecture& a, const LayerSpec& layer) {
  switch (layer.attention) {
    case AttentionType::Gqa: {
      const GqaShape s = gqa_shape(a, layer);
      return static_cast<double>(s.kv_heads * (s.head_dim + s.v_head_dim));
    }
    case AttentionType::Mla:
      return static_cast<double>(a.mla.kv_lora_rank + a.mla.qk_rope_head_dim);
    case AttentionType::CompressedMqa: {
      if (layer.compress_ratio == 0) return static_cast<double>(a.cmqa.head_dim);
      const double ratio = static_cast<double>(layer.compress_ratio);
      const double indexer = layer.compress_ratio == 4 ? static_cast<double>(a.cmqa.index_head_dim) : 0.0;
      return (static_cast<double>(a.cmqa.head_dim) + indexer) / ratio;
    }
    case AttentionType::GatedDeltaNet:
    case AttentionType::Mamba2:
    case AttentionType::Mamba1:
    case AttentionType::None:
      return 0;
  }
  MOESIM_CHECK(false, "unknown attention type");
  return 0;
}

/// The uncompressed sliding window a compressed DeepSeek-V4 layer keeps besides its compressed entries:
/// hd elements for each of the last min(context, window) tokens (0 for every other layer).
double kv_window_elements(const Architecture& a, const LayerSpec& layer, std::int64_t context) {
  if (layer.attention != AttentionType::CompressedMqa || layer.compress_ratio == 0) return 0;
  return static_cast<double>(a.cmqa.head_dim * std::min(context, a.cmqa.window));
}

/// Tokens of context a layer holds at sequence length `context`: sliding-window layers stop at the window.
/// The cost model's window rule (cost::kv_tokens_read): the KV a token at position context − 1 reads.
std::int64_t attended_tokens(const LayerSpec& layer, std::int64_t context) {
  // A whole number of tokens, exact in a double: the cast loses nothing.
  return static_cast<std::int64_t>(cost::kv_tokens_read(context - 1, 1, layer.sliding_window));
}

/// FLOPs of the attention score and value products per attended token of one layer (§A.4 "FLOPs per decode
/// token", 2 FLOP per multiply-add): GQA 2·nq·hd for the q·k scores plus 2·nq·vd for the weighted sum of v
/// (4·nq·hd when vd = hd); absorbed MLA 2·nh·(kv_lora + rope) for the scores against the latent and the
/// rotary key plus 2·nh·kv_lora for the weighted sum of latents; DeepSeek-V4 4·nh·hd over its one key=value
/// head; 0 for the recurrent mixers (§A.4: O(1) in ctx, the state update is in the projections' FLOPs; for
/// Mamba-2 the scan's ~6·heads·head_dim·N FLOPs per token are not counted: about 4% of Nemotron-3-Nano's
/// mixer FLOPs; for Mamba-1 the scan's ~6·d_inner·N, under 1% of Jamba's 2·105M mixer FLOPs per token).
double flops_per_attended_token(const Architecture& a, const LayerSpec& layer) {
  switch (layer.attention) {
    case AttentionType::Gqa: {
      const GqaShape s = gqa_shape(a, layer);
      return 2.0 * static_cast<double>(s.heads * (s.head_dim + s.v_head_dim));
    }
    case AttentionType::Mla:
      return 2.0 * static_cast<double>(a.heads * (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim)) +
             2.0 * static_cast<double>(a.heads * a.mla.kv_lora_rank);
    case AttentionType::CompressedMqa:
      return 4.0 * static_cast<double>(a.heads * a.cmqa.head_dim);
    case AttentionType::GatedDeltaNet:
    case AttentionType::Mamba2:
    case AttentionType::Mamba1:
    case AttentionType::None:
      return 0;
  }
  MOESIM_CHECK(false, "unknown attention type");
  return 0;
}

/// A ratio-4 DeepSeek-V4 layer's lightning indexer scores every compressed key: 2·ni·di per entry.
double indexer_flops_per_entry(const Architecture& a) {
  return 2.0 * static_cast<double>(a.cmqa.index_heads * a.cmqa.index_head_dim);
}

/// Attention FLOPs of one compressed DeepSeek-V4 layer for a token at context `context` (the release's
/// inference/model.py Attention.forward): it attends over its uncompressed window; a ratio-128 layer (HCA)
/// also over all context/128 compressed entries; a ratio-4 layer (CSA) scores its context/4 indexer keys and
/// attends to the index_topk best of its context/4 entries.
double compressed_mqa_context_flops(const Architecture& a, const LayerSpec& layer, std::int64_t context) {
  const CompressedMqaDims& c = a.cmqa;
  const double compressed = static_cast<double>(context) / static_cast<double>(layer.compress_ratio);
  double entries = static_cast<double>(std::min(context, c.window)) + compressed;
  double indexer = 0;
  if (layer.compress_ratio == 4) {
    indexer = indexer_flops_per_entry(a) * compressed;
    entries -= compressed - std::min(compressed, static_cast<double>(c.index_topk));
  }
  return indexer + flops_per_attended_token(a, layer) * entries;
}

}  // namespace

GqaShape gqa_shape(const Architecture& a, const LayerSpec& layer) {
  if (layer.shape) return *layer.shape;
  return {a.heads, a.kv_heads, a.head_dim, a.v_head_dim > 0 ? a.v_head_dim : a.head_dim, false, a.attention_sinks};
}

std::int64_t params_per_routed_expert(const Architecture& a) {
  if (!a.is_moe()) return 0;
  // §A.3 "Expert: 3·h·I (gpt-oss adds 2I + h of biases)": gate_up bias 2I, down bias h.
  return ffn_matrices(a) * a.hidden * a.expert_ffn + (a.expert_bias ? 2 * a.expert_ffn + a.hidden : 0);
}

std::int64_t moe_layer_count(const Architecture& a) {
  if (!a.is_moe()) return 0;
  return static_cast<std::int64_t>(
      std::count_if(a.layer_specs.begin(), a.layer_specs.end(), [](const LayerSpec& l) { return l.moe; }));
}

ComponentParams parameter_counts(const Architecture& a) {
  MOESIM_CHECK(static_cast<std::int64_t>(a.layer_specs.size()) == a.layers,
               "architecture '" + a.id + "' has " + std::to_string(a.layer_specs.size()) + " layer specs for " +
                   std::to_string(a.layers) + " layers");
  ComponentParams c;
  const std::int64_t h = a.hidden;
  const std::int64_t norm = a.norm_bias ? 2 * h : h;  // a LayerNorm's weight and bias, or an RMSNorm's weight
  for (const LayerSpec& layer : a.layer_specs) {
    MOESIM_CHECK(layer.ffn || !layer.moe, "a layer without an FFN marked MoE");
    c.attention += attention_params(a, layer);
    // §A.3 "Norms: 2h" (input and post-attention norm of every layer); a Nemotron-H block has one norm
    // before its single mixer or FFN.
    c.norms += ((layer.attention != AttentionType::None ? 1 : 0) + (layer.ffn ? 1 : 0) + a.extra_layer_norms) * norm;
    // DeepSeek-V4's manifold-constrained hyper-connections (inference/model.py class Block: hc_attn_* and
    // hc_ffn_*): per sub-layer a mixing matrix hc_fn of (2 + n)·n rows by n·h, its base (2 + n)·n and 3
    // scales, n = hc_mult. They sit with the norms: like them, small per-token work on the residual stream.
    if (a.cmqa.hc_mult > 0) {
      const std::int64_t n = a.cmqa.hc_mult;
      c.norms += 2 * ((2 + n) * n * n * h + (2 + n) * n + 3);
    }
    if (!layer.ffn) continue;
    if (layer.moe && a.is_moe()) {
      c.router += router_params(a);
      c.routed_experts += a.routed_experts * params_per_routed_expert(a);
      c.shared_experts += shared_expert_params(a);
    } else {
      c.dense_ffn += ffn_matrices(a) * h * a.dense_ffn;  // SwiGLU gate, up, down (§A.1 "3 matrices")
    }
  }
  // §A.3 "Whole model: L·layer + 2·V·h (embedding + untied LM head) + h (final norm)".
  c.norms += norm;
  // DeepSeek-V4's head merges the n residual copies (inference/model.py class Transformer: hc_head_fn n·(n·h),
  // hc_head_base n, hc_head_scale 1).
  if (a.cmqa.hc_mult > 0) c.norms += a.cmqa.hc_mult * a.cmqa.hc_mult * h + a.cmqa.hc_mult + 1;
  c.embedding = a.vocab * h;
  c.lm_head = a.tie_embeddings ? 0 : a.vocab * h + (a.lm_head_bias ? a.vocab : 0);
  return c;
}

std::int64_t active_parameters(const Architecture& a) {
  // §A.3: "Active" counts the same terms with k routed experts instead of E in every MoE layer.
  const ComponentParams c = parameter_counts(a);
  return c.total() - c.routed_experts + moe_layer_count(a) * a.top_k * params_per_routed_expert(a);
}

std::int64_t active_parameters(const Architecture& a, std::string_view convention) {
  // §A.3 "Convention warning": the published figure of each family leaves out different parts.
  const ComponentParams c = parameter_counts(a);
  const std::int64_t all = active_parameters(a);
  if (convention == "incl_embedding_and_head") return all;
  if (convention == "excl_embedding") return all - c.embedding;
  if (convention == "excl_embedding_and_head") return all - c.embedding - c.lm_head;
  throw UserError("unknown active-parameter convention '" + std::string(convention) +
                  "'; use one of incl_embedding_and_head, excl_embedding, excl_embedding_and_head");
}

std::int64_t non_expert_layer_params(const Architecture& a) {
  const ComponentParams c = parameter_counts(a);
  // The final norm (h) belongs to the model, not to a layer (header contract).
  return c.attention + c.router + c.shared_experts + c.dense_ffn + (c.norms - (a.norm_bias ? 2 : 1) * a.hidden);
}

units::Flops attention_context_flops(const Architecture& a, std::int64_t context) {
  MOESIM_CHECK(context >= 0, "negative context length");
  double total = 0;
  for (const LayerSpec& layer : a.layer_specs) {
    if (layer.attention == AttentionType::CompressedMqa && layer.compress_ratio > 0) {
      total += compressed_mqa_context_flops(a, layer, context);
    } else {
      // ctx capped at the window on sliding layers.
      total += flops_per_attended_token(a, layer) * static_cast<double>(attended_tokens(layer, context));
    }
  }
  return units::flops(total);
}

units::Flops attention_flops_per_context_token(const Architecture& a) {
  double total = 0;
  for (const LayerSpec& layer : a.layer_specs) {
    if (layer.attention == AttentionType::CompressedMqa && layer.compress_ratio > 0) {
      // Every ratio tokens add one compressed entry: attended (HCA), or scored by the indexer (CSA, whose
      // top-k cap and uncompressed window this slope leaves out).
      const double ratio = static_cast<double>(layer.compress_ratio);
      total += (layer.compress_ratio == 4 ? indexer_flops_per_entry(a) : flops_per_attended_token(a, layer)) / ratio;
    } else {
      total += flops_per_attended_token(a, layer);
    }
  }
  return units::flops(total);
}

units::Bytes kv_bytes_per_token(const Architecture& a, double bytes_per_element) {
  double elements = 0;
  for (const LayerSpec& layer : a.layer_specs) elements += kv_elements_per_token(a, layer);
  return units::bytes(elements * bytes_per_element);
}

units::Bytes kv_bytes_at_context(const Architecture& a, std::int64_t context, double bytes_per_element) {
  MOESIM_CHECK(context >= 0, "negative context length");
  double elements = 0;
  for (const LayerSpec& layer : a.layer_specs) {
    // §A.4 gpt-oss: "only half the layers grow with context; the other half cap at 128 tokens".
    elements += kv_elements_per_token(a, layer) * static_cast<double>(attended_tokens(layer, context)) +
                kv_window_elements(a, layer, context);
  }
  return units::bytes(elements * bytes_per_element);
}

units::Bytes recurrent_state_bytes(const Architecture& a) {
  // §A.4 hybrid models: per linear layer, a Vh·dk·dv delta-rule state plus a causal-conv state holding the
  // last (kernel − 1) inputs of the (2·Kh·dk + Vh·dv) conv channels, all fp32 (flash-moe allocates exactly
  // [64*128*128] and [3*12288] for Qwen3.5).
  const DeltaNetDims& d = a.delta;
  const std::int64_t delta_state = d.value_heads * d.key_head_dim * d.value_head_dim;
  const std::int64_t conv_channels = 2 * d.key_heads * d.key_head_dim + d.value_heads * d.value_head_dim;
  const std::int64_t conv_state = conv_channels * std::max<std::int64_t>(d.conv_kernel - 1, 0);
  std::int64_t layers = 0;
  std::int64_t mamba_layers = 0;
  std::int64_t mamba1_layers = 0;
  for (const LayerSpec& layer : a.layer_specs) {
    layers += layer.attention == AttentionType::GatedDeltaNet ? 1 : 0;
    mamba_layers += layer.attention == AttentionType::Mamba2 ? 1 : 0;
    mamba1_layers += layer.attention == AttentionType::Mamba1 ? 1 : 0;
  }
  constexpr double kFp32Bytes = 4.0;
  // Mamba-2 (mamba_ssm/modules/mamba2.py allocate_inference_cache; vLLM's MambaMixer2 state shapes): an SSM
  // state of heads × head_dim × N in the SSM cache dtype, and a conv state holding the last (kernel − 1)
  // inputs of the d_inner + 2·G·N conv channels in the model's dtype.
  const Mamba2Dims& m = a.mamba;
  const double mamba_state = static_cast<double>(m.heads * m.head_dim * m.state_size) * m.ssm_state_element_bytes +
                             static_cast<double>((m.heads * m.head_dim + 2 * m.groups * m.state_size) *
                                                 std::max<std::int64_t>(m.conv_kernel - 1, 0)) *
                                 m.conv_state_element_bytes;
  // Mamba-1 (vLLM MambaStateShapeCalculator.mamba1_state_shape): an SSM state of d_inner × N and a conv state
  // holding the last (kernel − 1) inputs of the d_inner conv channels (transformers' Jamba cache keeps all
  // kernel inputs, one more than the kernel needs).
  const Mamba1Dims& m1 = a.mamba1;
  const double mamba1_state =
      static_cast<double>(m1.inner * m1.state_size) * m1.ssm_state_element_bytes +
      static_cast<double>(m1.inner * std::max<std::int64_t>(m1.conv_kernel - 1, 0)) * m1.conv_state_element_bytes;
  return units::bytes(static_cast<double>(layers * (delta_state + conv_state)) * kFp32Bytes +
                      static_cast<double>(mamba_layers) * mamba_state +
                      static_cast<double>(mamba1_layers) * mamba1_state);
}

}  // namespace moesim::model
