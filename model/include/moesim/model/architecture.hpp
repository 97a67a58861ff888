#pragma once
// Model architectures: parsed from Hugging Face config.json files, or taken from the built-in zoo
// (model/zoo/*.json, compiled into the binary). Everything moesim computes about a model (parameters per
// component, bytes at a precision, FLOPs, KV-cache bytes) is derived here from the architecture's
// dimensions, never typed in. Formulas: ../shared/data/models_and_routing.md §A.3–A.5.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/units.hpp"

namespace moesim::model {

enum class AttentionType {
  Gqa,            ///< grouped-query (or multi-head) attention with a KV cache
  Mla,            ///< DeepSeek multi-head latent attention (compressed KV cache)
  GatedDeltaNet,  ///< Qwen3-Next/3.5 linear attention: a fixed recurrent state, no KV cache
  Mamba2,         ///< Mamba-2 selective state-space mixer (Nemotron-H): a fixed recurrent state, no KV cache
  Mamba1,         ///< Mamba-1 selective state-space mixer (Jamba): a fixed recurrent state, no KV cache
  /// DeepSeek-V4's hybrid attention: one shared key=value head (MQA) over a sliding window of recent tokens,
  /// plus, with LayerSpec::compress_ratio > 0, a KV cache compressed ratio:1 (CSA at 4 with a lightning
  /// indexer choosing the top-k entries, HCA at 128 attended densely).
  CompressedMqa,
  None,  ///< no token mixer: an FFN-only block (Nemotron-H's MLP and MoE blocks)
};

/// The shape of one GQA layer where it differs from the model-wide heads, kv_heads and head_dim
/// (MiMo-V2-Flash's sliding-window layers, Gemma 4's global layers).
struct GqaShape {
  std::int64_t heads = 0;       ///< query heads
  std::int64_t kv_heads = 0;    ///< key/value heads
  std::int64_t head_dim = 0;    ///< query and key head width
  std::int64_t v_head_dim = 0;  ///< value (and attention output) head width
  /// Gemma 4's attention_k_eq_v: no v_proj; the key projection's output also serves as the value (it is
  /// normalised differently and not rotated, so the cache still holds keys and values).
  bool k_is_v = false;
  bool sinks = false;  ///< one learned sink logit per query head (gpt-oss, MiMo-V2-Flash's sliding layers)
};

/// One decoder layer.
struct LayerSpec {
  AttentionType attention = AttentionType::Gqa;
  std::int64_t sliding_window = 0;  ///< tokens of context this layer attends to; 0 = all (full attention)
  bool moe = true;                  ///< routed experts (else a dense FFN of dense_ffn)
  /// false: a mixer-only block without an FFN (Nemotron-H's Mamba and attention blocks); moe is then false.
  bool ffn = true;
  /// MLA with a lightning indexer (index_heads > 0): whether this layer runs its own indexer (GLM-5.2's
  /// "shared" layers reuse the previous layer's top-k and hold none).
  bool indexer = true;
  /// GQA layers whose shape is not the model's (see GqaShape); nullopt: the model-wide one.
  std::optional<GqaShape> shape;
  /// CompressedMqa layers (DeepSeek-V4 compress_ratios): tokens per compressed KV entry; 0 = the sliding
  /// window alone.
  std::int64_t compress_ratio = 0;
};

/// Multi-head latent attention dimensions (DeepSeek-V2/V3/V3.2, Kimi-K2).
struct MlaDims {
  std::int64_t q_lora_rank = 0;  ///< 0 = no low-rank q projection
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  /// DeepSeek-V3.2's lightning indexer (DSA), 0 = none: index_n_heads query heads of index_head_dim.
  std::int64_t index_heads = 0;
  std::int64_t index_head_dim = 0;
};

/// Gated DeltaNet (linear attention) dimensions (Qwen3-Next, Qwen3.5).
struct DeltaNetDims {
  std::int64_t key_heads = 0;
  std::int64_t value_heads = 0;
  std::int64_t key_head_dim = 0;
  std::int64_t value_head_dim = 0;
  std::int64_t conv_kernel = 0;
};

/// Mamba-2 mixer dimensions (Nemotron-H; Dao & Gu 2024, arXiv:2405.21060, reference implementation
/// state-spaces/mamba mamba_ssm/modules/mamba2.py).
struct Mamba2Dims {
  std::int64_t heads = 0;               ///< SSM heads (mamba_num_heads)
  std::int64_t head_dim = 0;            ///< channels per head (mamba_head_dim); d_inner = heads * head_dim
  std::int64_t groups = 0;              ///< B/C groups (n_groups)
  std::int64_t state_size = 0;          ///< N, the state width per channel (ssm_state_size)
  std::int64_t conv_kernel = 0;         ///< causal depthwise conv width (conv_kernel)
  bool conv_bias = true;                ///< use_conv_bias
  bool proj_bias = false;               ///< in_proj/out_proj biases (use_bias)
  double ssm_state_element_bytes = 4;   ///< the SSM state's element size (mamba_ssm_cache_dtype; fp32 = 4)
  double conv_state_element_bytes = 2;  ///< the conv state's element size (the model's dtype; bf16 = 2)
};

/// Mamba-1 mixer dimensions (Jamba; Gu & Dao 2023, arXiv:2312.00752, reference implementation state-spaces/mamba
/// mamba_ssm/modules/mamba_simple.py, whose layout transformers' JambaMambaMixer keeps). Unlike Mamba-2, every
/// one of the d_inner channels has its own A row of state_size entries and its own dt.
struct Mamba1Dims {
  std::int64_t inner = 0;        ///< d_inner = mamba_expand · hidden_size
  std::int64_t state_size = 0;   ///< N, the state width per channel (mamba_d_state)
  std::int64_t conv_kernel = 0;  ///< causal depthwise conv width (mamba_d_conv)
  std::int64_t dt_rank = 0;      ///< rank of the dt projection (mamba_dt_rank; "auto": ceil(hidden / 16))
  bool conv_bias = true;         ///< mamba_conv_bias
  bool proj_bias = false;        ///< in_proj/out_proj biases (mamba_proj_bias)
  /// Jamba's RMSNorms on dt (dt_rank wide), B and C (state_size each) inside the mixer.
  bool dt_bc_norms = false;
  double ssm_state_element_bytes = 2;   ///< the SSM state's element size (the model's dtype unless configured)
  double conv_state_element_bytes = 2;  ///< the conv state's element size (the model's dtype; bf16 = 2)
};

/// DeepSeek-V4's attention dimensions (the release's inference/model.py classes Attention, Compressor,
/// Indexer; config.json keys in parentheses).
struct CompressedMqaDims {
  std::int64_t q_lora_rank = 0;     ///< q latent width (q_lora_rank)
  std::int64_t head_dim = 0;        ///< width of every query head and of the one shared key=value head (head_dim)
  std::int64_t o_groups = 0;        ///< output projection groups (o_groups)
  std::int64_t o_lora_rank = 0;     ///< per-group output latent width (o_lora_rank)
  std::int64_t window = 0;          ///< uncompressed recent tokens every layer attends to (sliding_window)
  std::int64_t index_heads = 0;     ///< lightning-indexer query heads of the ratio-4 layers (index_n_heads)
  std::int64_t index_head_dim = 0;  ///< (index_head_dim)
  std::int64_t index_topk = 0;      ///< compressed entries a ratio-4 layer attends to (index_topk)
  /// Manifold-constrained hyper-connections (hc_mult): the residual stream is hc_mult copies of h wide.
  std::int64_t hc_mult = 0;
};

/// Published parameter counts, as the model's authors state them, with the convention they count by.
struct PublishedParams {
  double total = 0;   ///< parameters
  double active = 0;  ///< parameters per token
  /// Significant digits the figures were printed with (e.g. "3.3B" -> 2), for tolerance checks.
  int total_digits = 0;
  int active_digits = 0;
  /// What "active" counts: "incl_embedding_and_head" (DeepSeek, Qwen, Mixtral), "excl_embedding"
  /// (gpt-oss), "excl_embedding_and_head" (GLM). See models_and_routing.md §A.3.
  std::string active_convention = "incl_embedding_and_head";
  std::string source;  ///< where the published figures come from
};

struct Architecture {
  std::string id;       ///< zoo id ("dbrx-instruct") or the config file's path
  std::string name;     ///< human name ("DBRX Instruct")
  std::string family;   ///< HF model_type ("dbrx", "mixtral", "qwen3_moe", "deepseek_v3", ...)
  std::string hf_repo;  ///< "databricks/dbrx-instruct", or "" for a user's file
  std::string source;   ///< where these dimensions come from (URL, file path)

  std::int64_t hidden = 0;  ///< d_model
  std::int64_t layers = 0;  ///< decoder layers (MTP layers excluded)
  std::int64_t vocab = 0;
  std::int64_t max_context = 0;  ///< max_position_embeddings (0 = not stated in the config)
  std::int64_t heads = 0;        ///< query heads
  std::int64_t kv_heads = 0;     ///< key/value heads (MLA: equals heads)
  std::int64_t head_dim = 0;     ///< per-head q/k/v width for GQA layers
  bool attention_bias = false;   ///< q/k/v biases (GLM-4.5, gpt-oss also has o bias)
  bool attention_out_bias = false;
  bool qk_norm = false;  ///< per-head RMSNorm on q and k
  /// OLMoE: the q/k norms span all heads (nq·hd and nkv·hd weights) instead of one head_dim each.
  bool qk_norm_full_width = false;
  bool attention_output_gate = false;  ///< Qwen3-Next/3.5 gated attention: q_proj is 2x wide
  bool attention_sinks = false;        ///< gpt-oss: one learned sink per head
  std::int64_t v_head_dim = 0;         ///< GQA value head width; 0 = head_dim
  MlaDims mla;
  CompressedMqaDims cmqa;
  DeltaNetDims delta;
  Mamba2Dims mamba;
  Mamba1Dims mamba1;

  std::int64_t routed_experts = 0;  ///< 0 for a dense model
  std::int64_t top_k = 0;
  std::int64_t expert_ffn = 0;  ///< routed expert intermediate size
  std::int64_t shared_experts = 0;
  std::int64_t shared_ffn = 0;      ///< intermediate size of ONE shared expert
  bool shared_expert_gate = false;  ///< Qwen: sigmoid gate (h params) on the shared expert
  std::int64_t dense_ffn = 0;       ///< intermediate size of dense FFN layers
  bool router_bias = false;         ///< gpt-oss router bias; DeepSeek e_score_correction_bias
  bool expert_bias = false;         ///< gpt-oss expert biases (2I + h per expert)
  /// Gemma 4's router: a per-channel input scale (h) and a per-expert output scale (E) besides its h·E matrix.
  bool router_scales = false;
  /// RMSNorms of width h per layer beyond one before each mixer and FFN (Gemma 4: post-attention, post-FFN
  /// and the MoE branch's three).
  std::int64_t extra_layer_norms = 0;
  /// Every norm is a LayerNorm with a bias (weight and bias, 2h) rather than an RMSNorm (h): Phi-3.5-MoE.
  bool norm_bias = false;
  /// The untied LM head has a bias of vocab entries (Phi-3.5-MoE's lm_head_bias).
  bool lm_head_bias = false;
  /// Every FFN (routed and shared experts, dense layers) is SwiGLU: gate, up and down, 3·h·I. false: up and
  /// down only, 2·h·I (Nemotron-H's relu² MLPs and experts).
  bool gated_ffn = true;
  bool tie_embeddings = false;
  /// The weights' format as the checkpoint stores them, from config.json's quantization_config: a precision
  /// name ("mxfp4/bf16": gpt-oss's experts in MXFP4, the modules it does not convert in bf16; "fp8";
  /// "int4_g128"), empty when the config declares none (16-bit weights), or "?METHOD" for a quant_method
  /// moesim does not size (model::precision_for refuses it, naming the field).
  std::string checkpoint_precision;

  std::vector<LayerSpec> layer_specs;  ///< one per decoder layer
  std::optional<PublishedParams> published;
  /// Facts about this model that were not read from its official config (zoo entries only).
  std::vector<std::string> uncertain;

  [[nodiscard]] bool is_moe() const { return routed_experts > 0; }
};

/// Parameters per component, summed over the whole model.
struct ComponentParams {
  std::int64_t attention = 0;       ///< attention / linear-attention projections, their biases, q/k norms, sinks
  std::int64_t router = 0;          ///< router weights (+ bias)
  std::int64_t routed_experts = 0;  ///< all routed experts of all layers
  std::int64_t shared_experts = 0;  ///< shared experts (+ their gates)
  std::int64_t dense_ffn = 0;       ///< dense FFN layers
  /// per-layer norms and the final norm (and DeepSeek-V4's hyper-connection mixing weights, see architecture.cpp)
  std::int64_t norms = 0;
  std::int64_t embedding = 0;
  std::int64_t lm_head = 0;  ///< 0 when tied to the embedding
  [[nodiscard]] std::int64_t total() const {
    return attention + router + routed_experts + shared_experts + dense_ffn + norms + embedding + lm_head;
  }
};

/// The shape of a GQA layer: its own (LayerSpec::shape) or the model-wide heads, kv_heads, head_dim,
/// v_head_dim (0: head_dim) and attention_sinks.
GqaShape gqa_shape(const Architecture& a, const LayerSpec& layer);

/// Parameters per component (models_and_routing.md §A.3).
ComponentParams parameter_counts(const Architecture& a);
/// Parameters used per token: top_k routed experts per MoE layer, everything else, embedding and LM
/// head included (the "incl_embedding_and_head" convention).
std::int64_t active_parameters(const Architecture& a);
/// Active parameters under a named convention (see PublishedParams::active_convention).
std::int64_t active_parameters(const Architecture& a, std::string_view convention);
/// Parameters of ONE routed expert in ONE layer: 3·h·I (+ 2I + h biases for gpt-oss).
std::int64_t params_per_routed_expert(const Architecture& a);
/// Number of MoE layers.
std::int64_t moe_layer_count(const Architecture& a);
/// Per-layer weights other than routed experts (attention, router, norms, shared experts, dense FFN),
/// summed over all layers. The embedding, final norm and LM head are not included.
std::int64_t non_expert_layer_params(const Architecture& a);

/// FLOPs of the attention score and value products for one new token attending to `context` tokens,
/// summed over layers: 4·nq·hd·min(ctx, window) per GQA layer, the absorbed-MLA form for MLA, 0 for
/// Gated DeltaNet (its per-token cost is O(1) and counted in its projections).
units::Flops attention_context_flops(const Architecture& a, std::int64_t context);

/// The slope of attention_context_flops: FLOPs each further token of context adds, window caps aside (what
/// cost::layer_parts scales with the context, per window). Equal to attention_context_flops(a, 1) but for
/// DeepSeek-V4's compressed layers, where it counts only what grows with the context (an HCA layer's
/// attention over its compressed entries, a CSA layer's indexer scores); their uncompressed window and a CSA
/// layer's top-k entries are constants it leaves out.
units::Flops attention_flops_per_context_token(const Architecture& a);

/// KV-cache bytes one token of context adds over all layers, at `bytes_per_element` (2 for bf16).
/// GQA: 2·nkv·hd per layer (sliding-window layers included; they stop growing at the window);
/// MLA: kv_lora_rank + qk_rope_head_dim per layer; Gated DeltaNet: none.
units::Bytes kv_bytes_per_token(const Architecture& a, double bytes_per_element = 2.0);
/// KV-cache bytes for a sequence of `context` tokens (sliding-window layers capped at their window).
units::Bytes kv_bytes_at_context(const Architecture& a, std::int64_t context, double bytes_per_element = 2.0);
/// Fixed recurrent state per sequence: Gated DeltaNet layers in fp32 (delta state + conv state), Mamba-2
/// layers their SSM state (heads·head_dim·N at mamba.ssm_state_element_bytes) plus their conv state, Mamba-1
/// layers their SSM state (d_inner·N at mamba1.ssm_state_element_bytes) plus their conv state.
units::Bytes recurrent_state_bytes(const Architecture& a);

/// Parses a Hugging Face config.json (any supported family, see supported_families()). `source` names
/// the file for error messages. UserError on an unsupported family or a missing/invalid field.
Architecture parse_hf_config(const nlohmann::json& config, const std::string& source);

/// Families parse_hf_config understands: model_type values with their architectures.
std::vector<std::string> supported_families();

/// The built-in zoo, in a stable order.
const std::vector<Architecture>& zoo();
std::vector<std::string> zoo_ids();

/// A zoo id ("dbrx-instruct") or a path to a config.json. Unknown id -> UserError listing the ids.
Architecture load_model(std::string_view id_or_path);
/// The Hugging Face config.json object behind a zoo id or a file (a zoo-format file gives its "config"):
/// what `moesim ref init` writes beside a random checkpoint. UserError as load_model.
nlohmann::json load_model_config(std::string_view id_or_path);

}  // namespace moesim::model
