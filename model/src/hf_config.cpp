// Hugging Face config.json -> Architecture, for the families of models_and_routing.md §A.5.
//
// Each family spells the same concepts with its own keys (§A.5 table): Mixtral's `intermediate_size` is
// the per-expert size, DBRX nests its fields under attn_config/ffn_config, the multimodal Qwen3.5 and
// Llama 4 nest their text model under text_config (kFamilies says which; only the text model is modelled),
// DeepSeek describes MLA instead of head_dim, Llama 4 sizes its dense layers by intermediate_size_mlp. One
// reader per family maps its keys onto the common Architecture; every error names the file, the JSON path
// of the field and the fix. An unsupported model_type gets a hint only from its own architectures[0].

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hf_fields.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"

namespace moesim::model {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' shared helpers

enum class Family {
  Mixtral,
  Dbrx,
  Qwen3Moe,
  Qwen3Next,
  Qwen35Moe,
  DeepseekV3,
  Glm4Moe,
  GptOss,
  Olmoe,
  Llama,
  Qwen2,
  Qwen2Moe,
  Qwen3,
  DeepseekV2,
  DeepseekV32,
  Llama4,
  MinimaxM2,
  HunyuanMoe,
  NemotronH,
  MimoV2Flash,
  Gemma4,
  DeepseekV4,
  Phimoe,
  Ernie45Moe,
  GraniteMoe,
  Jamba,
};

struct FamilyInfo {
  const char* model_type;
  const char* architecture;  ///< architectures[0] of the official checkpoints
  Family family;
  /// A multimodal checkpoint: its text model's fields are under text_config, and moesim models only the
  /// text model (the vision tower is left out, and the model's name says so).
  bool text_config = false;
};

// kimi_k2 checkpoints declare DeepseekV3ForCausalLM (§A.1), so that architecture maps to deepseek_v3 first.
constexpr FamilyInfo kFamilies[] = {
    {"mixtral", "MixtralForCausalLM", Family::Mixtral},
    {"dbrx", "DbrxForCausalLM", Family::Dbrx},
    {"qwen3_moe", "Qwen3MoeForCausalLM", Family::Qwen3Moe},
    {"qwen3_next", "Qwen3NextForCausalLM", Family::Qwen3Next},
    {"qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", Family::Qwen35Moe, true},
    {"deepseek_v3", "DeepseekV3ForCausalLM", Family::DeepseekV3},
    {"kimi_k2", "DeepseekV3ForCausalLM", Family::DeepseekV3},
    {"glm4_moe", "Glm4MoeForCausalLM", Family::Glm4Moe},
    {"gpt_oss", "GptOssForCausalLM", Family::GptOss},
    {"olmoe", "OlmoeForCausalLM", Family::Olmoe},
    {"llama", "LlamaForCausalLM", Family::Llama},
    {"qwen2", "Qwen2ForCausalLM", Family::Qwen2},
    {"qwen2_moe", "Qwen2MoeForCausalLM", Family::Qwen2Moe},
    {"qwen3", "Qwen3ForCausalLM", Family::Qwen3},
    {"deepseek_v2", "DeepseekV2ForCausalLM", Family::DeepseekV2},
    {"deepseek_v32", "DeepseekV32ForCausalLM", Family::DeepseekV32},
    {"llama4", "Llama4ForConditionalGeneration", Family::Llama4, true},
    {"llama4_text", "Llama4ForCausalLM", Family::Llama4},
    {"qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", Family::Qwen3Moe, true},
    {"minimax_m2", "MiniMaxM2ForCausalLM", Family::MinimaxM2},
    // GLM-4.7-Flash: transformers' Glm4MoeLite is DeepSeek-V3's architecture (MLA, first_k_dense_replace,
    // shared experts of moe_intermediate_size, noaux_tc router), so DeepSeek-V3's reader reads it.
    {"glm4_moe_lite", "Glm4MoeLiteForCausalLM", Family::DeepseekV3},
    // GLM-5 (transformers GlmMoeDsa): DeepSeek-V3.2's MLA, lightning indexer and MoE, with GLM's dimensions.
    {"glm_moe_dsa", "GlmMoeDsaForCausalLM", Family::DeepseekV32},
    {"hunyuan_v1_moe", "HunYuanMoEV1ForCausalLM", Family::HunyuanMoe},
    // Hunyuan-A13B's own release (github.com/Tencent-Hunyuan/Hunyuan-A13B models/config.json) writes
    // model_type "hunyuan" for the same model class.
    {"hunyuan", "HunYuanMoEV1ForCausalLM", Family::HunyuanMoe},
    {"nemotron_h", "NemotronHForCausalLM", Family::NemotronH},
    {"mimo_v2_flash", "MiMoV2FlashForCausalLM", Family::MimoV2Flash},
    // Gemma 4: the multimodal checkpoint nests its text model (gemma4_text) under text_config.
    {"gemma4", "Gemma4ForConditionalGeneration", Family::Gemma4, true},
    {"gemma4_text", "Gemma4ForCausalLM", Family::Gemma4},
    {"deepseek_v4", "DeepseekV4ForCausalLM", Family::DeepseekV4},
    // Phi-3.5-MoE: architectures[0] is transformers' class name (PhimoeForCausalLM); the release's remote code
    // spells it PhiMoEForCausalLM, which only matters for a config without model_type.
    {"phimoe", "PhimoeForCausalLM", Family::Phimoe},
    {"ernie4_5_moe", "Ernie4_5_MoeForCausalLM", Family::Ernie45Moe},
    {"granitemoe", "GraniteMoeForCausalLM", Family::GraniteMoe},
    {"jamba", "JambaForCausalLM", Family::Jamba},
};

std::vector<std::string> model_types() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.emplace_back(f.model_type);
  return out;
}

// --- one reader per family (§A.5 table columns) ---------------------------------------------------------

void parse_mixtral(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // §A.2: Mixtral's intermediate_size is the per-expert size; experts are num_local_experts.
  read_experts(f, a, "num_local_experts", "num_experts_per_tok", "intermediate_size");
  // Mistral semantics: a non-null sliding_window applies to every layer (TinyMistral's base uses 32).
  const bool sliding = f.present("sliding_window");
  const auto kinds =
      layer_kinds(f, a.layers, [&](std::int64_t) { return sliding ? LayerKind::Sliding : LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, all_layers(a.layers, true));
}

// Phi-3.5-MoE (transformers modeling_phimoe.py): Mixtral's layout (num_local_experts SwiGLU experts of
// intermediate_size in every layer, a bias-free router, every layer full attention unless sliding_window),
// but each of the two per-layer norms and the final norm is an nn.LayerNorm with a bias (2h, not h);
// attention_bias puts a bias on q, k, v and o (LlamaAttention), lm_head_bias one on the untied LM head.
void parse_phimoe(const Fields& f, Architecture& a) {
  parse_mixtral(f, a);
  a.norm_bias = true;
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  a.lm_head_bias = !a.tie_embeddings && f.flag("lm_head_bias", false);
}

// ERNIE-4.5 MoE (transformers modeling_ernie4_5_moe.py): GQA without q/k norms; layer i is MoE when
// (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index (-1: the last
// layer), else a dense SwiGLU FFN of intermediate_size. A MoE layer holds moe_num_experts experts of
// moe_intermediate_size (top moe_k), a bias-free router plus moe_statics.e_score_correction_bias (E), and
// its moe_num_shared_experts shared experts as one MLP of moe_intermediate_size × that number (counted as
// that many experts of moe_intermediate_size: the same weights).
void parse_ernie4_5_moe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.tie_embeddings = f.flag("tie_word_embeddings", true);  // Ernie4_5_MoeConfig's default
  if (f.flag("use_bias", false)) {
    throw f.error("use_bias",
                  "is true: biases on every projection (attention, experts, dense and shared MLPs, "
                  "LM head) are not modelled for ERNIE-4.5; the released models set it false");
  }
  read_experts(f, a, "moe_num_experts", "moe_k", "moe_intermediate_size");
  a.router_bias = true;
  a.shared_experts = f.optional_integer("moe_num_shared_experts", "number of shared experts", 0).value_or(0);
  if (a.shared_experts > 0) a.shared_ffn = a.expert_ffn;
  const std::int64_t start = f.optional_integer("moe_layer_start_index", "first MoE layer", 0).value_or(0);
  std::int64_t end = f.optional_integer("moe_layer_end_index", "last MoE layer", -1).value_or(-1);
  if (end == -1) end = a.layers - 1;
  const std::int64_t interval = f.optional_dim("moe_layer_interval", "MoE layer interval").value_or(1);
  std::vector<bool> moe(static_cast<std::size_t>(a.layers));
  for (std::int64_t i = 0; i < a.layers; ++i) {
    moe[static_cast<std::size_t>(i)] = (i + 1) % interval == 0 && i >= start && i <= end;
  }
  read_dense_ffn(f, a, moe);
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, moe);
}

/// Granite 3.x MoE (transformers modeling_granitemoe.py, GraniteMoeDecoderLayer): GQA with head_dim h/nq and
/// biases on q, k, v and o only with attention_bias (GraniteMoeAttention); every layer MoE with
/// num_local_experts SwiGLU experts of intermediate_size (GraniteMoeParallelExperts: input_linear E × 2I × h
/// holds gate and up, output_linear E × h × I the down projection: 3·h·I each), top num_experts_per_tok, a
/// bias-free router (GraniteMoeTopKGating: h·E); two RMSNorms per layer; no shared expert. Its
/// embedding_multiplier, residual_multiplier, attention_multiplier and logits_scaling scale activations and
/// hold no weights, so they move no bytes.
void parse_granitemoe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  read_experts(f, a, "num_local_experts", "num_experts_per_tok", "intermediate_size");
  // Every layer attends to the whole context: GraniteMoeConfig has neither sliding_window nor layer_types.
  a.layer_specs = make_layers(f, std::vector<LayerKind>(static_cast<std::size_t>(a.layers), LayerKind::Full), false,
                              all_layers(a.layers, true));
}

void parse_dbrx(const Fields& f, Architecture& a) {
  // §A.2 DBRX: d_model/n_heads/n_layers/max_seq_len at the top, attention and FFN fields nested.
  a.hidden = f.dim("d_model", "hidden size");
  a.layers = f.dim("n_layers", "number of decoder layers");
  a.heads = f.dim("n_heads", "number of query heads");
  a.vocab = f.dim("vocab_size", "vocabulary size");
  a.tie_embeddings = f.flag("tie_word_embeddings", false);
  a.max_context = f.optional_dim("max_seq_len", "maximum context length").value_or(0);
  if (a.hidden % a.heads != 0) {
    throw f.error("n_heads", "is " + std::to_string(a.heads) + ", which does not divide d_model " +
                                 std::to_string(a.hidden) + "; fix one of them");
  }
  a.head_dim = a.hidden / a.heads;  // §A.5: DBRX has no head_dim field
  const Fields attn(f.node().child("attn_config"));
  a.kv_heads = attn.dim("kv_n_heads", "number of key/value heads");
  if (a.heads % a.kv_heads != 0) {
    throw attn.error("kv_n_heads", "is " + std::to_string(a.kv_heads) + ", which does not divide n_heads " +
                                       std::to_string(a.heads) + "; grouped-query attention needs a divisor");
  }
  const Fields ffn(f.node().child("ffn_config"));
  read_experts(ffn, a, "moe_num_experts", "moe_top_k", "ffn_hidden_size");
  a.layer_specs = make_layers(f, std::vector<LayerKind>(static_cast<std::size_t>(a.layers), LayerKind::Full), false,
                              all_layers(a.layers, true));
}

void parse_qwen3_moe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  read_qwen3_attention(f, a);
  read_experts(f, a, "num_experts", "num_experts_per_tok", "moe_intermediate_size");
  const auto moe = qwen_moe_layers(f, a.layers);
  read_dense_ffn(f, a, moe);
  a.layer_specs = make_layers(f, qwen_layer_kinds(f, a.layers), false, moe);
}

/// Dense Qwen3 (transformers Qwen3ForCausalLM): Qwen3 attention, a SwiGLU FFN of intermediate_size.
void parse_qwen3(const Fields& f, Architecture& a) {
  read_standard(f, a);
  read_qwen3_attention(f, a);
  const auto moe = all_layers(a.layers, false);
  read_dense_ffn(f, a, moe);
  a.layer_specs = make_layers(f, qwen_layer_kinds(f, a.layers), false, moe);
}

/// Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B; transformers Qwen2MoeForCausalLM): Qwen2's attention (q/k/v
/// biases, none on o, no QK norm), Qwen's MoE layer rule, routed experts of moe_intermediate_size and one
/// gated shared expert of shared_expert_intermediate_size. Read as qwen3_moe, it would lose the shared
/// expert (a quarter of Qwen2-57B-A14B's active parameters) and the biases.
void parse_qwen2_moe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.attention_bias = f.flag("qkv_bias", true);  // transformers Qwen2MoeAttention: bias on q, k, v
  a.attention_out_bias = false;
  read_experts(f, a, "num_experts", "num_experts_per_tok", "moe_intermediate_size");
  read_qwen_shared_expert(f, a, true);
  const auto moe = qwen_moe_layers(f, a.layers);
  read_dense_ffn(f, a, moe);
  a.layer_specs = make_layers(f, qwen_layer_kinds(f, a.layers), false, moe);
}

void parse_glm4_moe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // §A.2 GLM-4.5: q/k/v biases (o has none), per-head QK norm when use_qk_norm.
  a.attention_bias = f.flag("attention_bias", false);
  a.qk_norm = f.flag("use_qk_norm", false);
  read_experts(f, a, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size");
  a.shared_experts = f.optional_integer("n_shared_experts", "number of shared experts", 0).value_or(0);
  a.shared_ffn = a.shared_experts > 0 ? a.expert_ffn : 0;
  a.router_bias = true;  // sigmoid router with e_score_correction_bias (§A.2 "sigmoid + bias")
  const std::int64_t first_dense =
      f.optional_integer("first_k_dense_replace", "number of leading dense layers", 0).value_or(0);
  std::vector<bool> moe;
  for (std::int64_t i = 0; i < a.layers; ++i) moe.push_back(i >= first_dense);
  read_dense_ffn(f, a, moe);
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, moe);
}

void parse_gpt_oss(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // §A.2 gpt-oss: biases on q/k/v/o, one sink per head, router bias, expert biases.
  a.attention_bias = f.flag("attention_bias", true);
  a.attention_out_bias = a.attention_bias;
  a.attention_sinks = true;
  a.router_bias = true;
  a.expert_bias = true;
  // The HF config writes both num_experts_per_tok and the original experts_per_token (§A.5).
  const char* top_k_key = f.present("num_experts_per_tok") ? "num_experts_per_tok" : "experts_per_token";
  read_experts(f, a, "num_local_experts", top_k_key, "intermediate_size");
  if (f.present("num_experts_per_tok") && f.present("experts_per_token") &&
      f.dim("experts_per_token", "number of experts per token") != a.top_k) {
    throw f.error("experts_per_token",
                  "disagrees with num_experts_per_tok " + std::to_string(a.top_k) + "; make the two equal");
  }
  // gpt_oss/torch/model.py: even layers use the sliding window (layer_idx % 2 == 0), odd layers are full.
  const auto kinds =
      layer_kinds(f, a.layers, [](std::int64_t i) { return i % 2 == 0 ? LayerKind::Sliding : LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, all_layers(a.layers, true));
}

void parse_olmoe(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // §A.2 OLMoE: QK-norm over the full q/k width; attention_bias (off in the release) covers q/k/v/o.
  a.qk_norm = true;
  a.qk_norm_full_width = true;
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  read_experts(f, a, "num_experts", "num_experts_per_tok", "intermediate_size");
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, all_layers(a.layers, true));
}

void parse_llama(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // Llama's attention_bias adds biases to q/k/v and o. mlp_bias (false in Llama 3.1) is not modelled:
  // 2I + h per layer would be < 0.01% of the parameters.
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  const auto moe = all_layers(a.layers, false);
  read_dense_ffn(f, a, moe);
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, moe);
}

void parse_qwen2(const Fields& f, Architecture& a) {
  read_standard(f, a);
  // Qwen2 (transformers' modeling_qwen2): q, k and v projections carry biases, o does not.
  a.attention_bias = true;
  a.attention_out_bias = false;
  const auto moe = all_layers(a.layers, false);
  read_dense_ffn(f, a, moe);
  a.layer_specs = make_layers(f, qwen_layer_kinds(f, a.layers), false, moe);
}

/// Llama 4 (transformers Llama4TextConfig, Llama4TextDecoderLayer), flat (llama4_text) or the text model of
/// Llama4ForConditionalGeneration. GQA without biases (attention_bias off in the releases); use_qk_norm is
/// an L2 norm without weights (Llama4TextL2Norm), so no parameters. MoE layers (Llama4TextMoe): routed
/// experts of intermediate_size, a bias-free router, and one ungated shared expert of intermediate_size;
/// dense layers: an MLP of intermediate_size_mlp.
void parse_llama4(const Fields& f, Architecture& a) {
  read_standard(f, a);
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = a.attention_bias;
  read_experts(f, a, "num_local_experts", "num_experts_per_tok", "intermediate_size");
  a.shared_experts = 1;
  a.shared_ffn = a.expert_ffn;
  // Llama4TextConfig: moe_layers if given, else every interleave_moe_layer_step-th layer counting from
  // step − 1 (Scout: step 1, all 48; Maverick: step 2, the odd layers).
  std::vector<bool> moe = all_layers(a.layers, false);
  if (f.present("moe_layers")) {
    for (const std::int64_t i : f.index_list("moe_layers", a.layers, "MoE layer indices")) {
      moe[static_cast<std::size_t>(i)] = true;
    }
  } else {
    const std::int64_t step = f.optional_dim("interleave_moe_layer_step", "MoE layer interval").value_or(1);
    for (std::int64_t i = step - 1; i < a.layers; i += step) moe[static_cast<std::size_t>(i)] = true;
  }
  read_dense_ffn(f, a, moe, "intermediate_size_mlp");
  // Layers with RoPE (no_rope_layers[i] = 1; when the list is absent or empty, all but every
  // no_rope_layer_interval-th, default 4) attend within chunks of attention_chunk_size tokens; the NoPE
  // layers attend to the whole context. A chunked layer is modelled as a sliding window of the chunk size:
  // it never holds more KV than that (on average it attends to half as many tokens).
  const std::int64_t chunk = f.optional_dim("attention_chunk_size", "attention chunk length in tokens").value_or(0);
  const auto no_rope_given = f.present("no_rope_layers") && f.node().raw()["no_rope_layers"].is_array() &&
                             !f.node().raw()["no_rope_layers"].empty();
  std::vector<bool> rope(static_cast<std::size_t>(a.layers), false);
  if (no_rope_given) {
    const nlohmann::json& list = f.node().raw()["no_rope_layers"];
    if (static_cast<std::int64_t>(list.size()) != a.layers) {
      throw f.error("no_rope_layers", "has " + std::to_string(list.size()) + " entries but num_hidden_layers is " +
                                          std::to_string(a.layers) + "; give one 0 or 1 per layer");
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number_integer() || (list[i].get<std::int64_t>() != 0 && list[i].get<std::int64_t>() != 1)) {
        throw f.error("no_rope_layers[" + std::to_string(i) + "]",
                      "is " + json_type(list[i]) + ", expected 1 (RoPE, chunked attention) or 0 (NoPE, global)");
      }
      rope[i] = list[i].get<std::int64_t>() == 1;
    }
  } else {
    const std::int64_t interval = f.optional_dim("no_rope_layer_interval", "NoPE layer interval").value_or(4);
    for (std::int64_t i = 0; i < a.layers; ++i) rope[static_cast<std::size_t>(i)] = (i + 1) % interval != 0;
  }
  for (std::int64_t i = 0; i < a.layers; ++i) {
    LayerSpec s;
    s.moe = moe[static_cast<std::size_t>(i)];
    if (rope[static_cast<std::size_t>(i)]) s.sliding_window = chunk;
    a.layer_specs.push_back(s);
  }
}

/// MiniMax-M2 (its checkpoints' modeling_minimax_m2.py): GQA without biases; QK RMSNorm over the whole q and
/// k rows (qk_norm_type "per_layer": nq·hd and nkv·hd weights) or per head ("per_head"); every layer MoE,
/// intermediate_size being the routed expert's size (as in Mixtral), with a sigmoid router and, with
/// use_routing_bias, its e_score_correction_bias. The MTP modules (use_mtp) are left out, as DeepSeek's.
void parse_minimax_m2(const Fields& f, Architecture& a) {
  read_standard(f, a);
  if (f.flag("use_qk_norm", false)) {
    a.qk_norm = true;
    const std::string type = f.optional_string("qk_norm_type").value_or("per_layer");
    if (type == "per_layer") {
      a.qk_norm_full_width = true;
    } else if (type != "per_head") {
      throw f.error("qk_norm_type", "is \"" + type + "\"; use \"per_layer\" (one norm over all heads) or \"per_head\"");
    }
  }
  read_experts(f, a, "num_local_experts", "num_experts_per_tok", "intermediate_size");
  a.router_bias = f.flag("use_routing_bias", false);
  // A shared expert is not in any released MiniMax-M2 (shared_intermediate_size 0); one would be counted
  // wrong, so it is refused rather than dropped.
  if (f.optional_integer("shared_intermediate_size", "shared expert FFN size", 0).value_or(0) > 0) {
    throw f.error("shared_intermediate_size",
                  "is positive, but moesim models MiniMax-M2 without a shared expert "
                  "(0 in every release); set it to 0 or use a family that has one");
  }
  const auto kinds = layer_kinds(f, a.layers, [](std::int64_t) { return LayerKind::Full; });
  a.layer_specs = make_layers(f, kinds, false, all_layers(a.layers, true));
}

/// Rough size check in double precision, so that absurd dimensions give an error and not an int64
/// overflow in parameter_counts.
void check_size(const Architecture& a, const std::string& source) {
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  const double per_layer = d(a.hidden) * (4.0 * d(std::max(a.heads, a.delta.value_heads)) *
                                              d(std::max({a.head_dim, a.delta.value_head_dim, a.mla.kv_lora_rank})) +
                                          3.0 * d(a.routed_experts + a.shared_experts + 1) *
                                              d(std::max({a.expert_ffn, a.dense_ffn, a.shared_ffn})));
  // Mamba-2: its projections (about 3·h·heads·head_dim) and its per-sequence state (heads·head_dim·N).
  const Mamba2Dims& m = a.mamba;
  const double mamba = d(m.heads) * d(m.head_dim) * (3.0 * d(a.hidden) + d(m.state_size)) +
                       2.0 * d(m.groups) * d(m.state_size) * (d(a.hidden) + d(m.conv_kernel));
  // Mamba-1: in_proj, out_proj, x_proj, dt_proj and A (architecture.cpp mamba1_params), d_inner wide each.
  const Mamba1Dims& m1 = a.mamba1;
  const double mamba1 =
      d(m1.inner) * (3.0 * d(a.hidden) + 2.0 * d(m1.dt_rank) + 3.0 * d(m1.state_size) + d(m1.conv_kernel));
  const double estimate = d(a.layers) * (per_layer + mamba + mamba1) + 2.0 * d(a.vocab) * d(a.hidden);
  if (estimate > 1e17) {
    throw UserError(source + ": the dimensions imply about " + text::printf("%.3g", estimate) +
                    " parameters, far beyond any model; check hidden_size, the layer count and the expert sizes");
  }
}

/// The hint for an unsupported model_type. Never a near spelling: qwen2_moe is one letter from qwen3_moe,
/// but reading it as qwen3_moe silently drops its shared expert. A family is suggested only where the
/// config's own architectures[0] is the model class that family's reader reads (the same architecture,
/// under another model_type); otherwise nothing is suggested.
std::string same_architecture_hint(const nlohmann::json& config) {
  const auto archs = config.find("architectures");
  if (archs == config.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) return "";
  const std::string arch = (*archs)[0].get<std::string>();
  for (const auto& f : kFamilies) {
    if (arch == f.architecture) {
      return " (architectures[0] \"" + arch + "\" is the model class of model_type \"" + f.model_type +
             "\"; if the checkpoint is that architecture, set model_type to \"" + f.model_type + "\")";
    }
  }
  return "";
}

/// The name a config file is shown by: its folder's name for a snapshot's ".../<model>/config.json", else
/// the file's name without ".json". Never `_name_or_path`: that is whatever path the checkpoint was saved
/// from, often a private folder or the base model of a fine-tune.
std::string name_from_path(const std::string& source) {
  const std::filesystem::path path(source);
  if (path.filename() == "config.json" && path.has_parent_path() && !path.parent_path().filename().empty()) {
    return path.parent_path().filename().string();
  }
  return path.has_stem() ? path.stem().string() : source;
}

/// The format the checkpoint stores, which moesim sizes it at by default (`--precision checkpoint`): from
/// quantization_config (transformers' HfQuantizer configs) and a text model's expert_dtype; empty: none given.
std::string checkpoint_precision(const json::Node& root, const Fields& text) {
  std::string stored;
  if (auto q = root.optional_child("quantization_config")) {
    const std::string method = q->optional_string("quant_method").value_or("");
    if (method == "mxfp4") {
      // gpt-oss: MXFP4 for the MoE experts; modules_to_not_convert (attention, router, embedding, LM head)
      // stay bf16 (openai/gpt-oss-* config.json; transformers' Mxfp4Config).
      stored = "mxfp4/bf16";
    } else if (method == "fp8") {
      // DeepSeek-V3's fp8 with 128x128 block scales (weight_block_size): 0.002 bit/weight of scales.
      stored = "fp8";
    } else if ((method == "awq" || method == "gptq") && q->raw().value("bits", nlohmann::json()) == 4 &&
               q->raw().value("group_size", nlohmann::json()) == 128) {
      stored = "int4_g128";
    } else {
      stored = "?" + (method.empty() ? std::string("(none)") : method);
    }
  }
  // DeepSeek-V4 stores its routed experts in FP4 (expert_dtype "fp4": e2m1 values with a ue8m0 scale per 32,
  // the MXFP4 layout) and every other weight as quantization_config says (fp8).
  if (text.optional_string("expert_dtype").value_or("") == "fp4") {
    stored = "mxfp4/" + (stored.empty() ? std::string("bf16") : stored);
  }
  return stored;
}

}  // namespace

std::vector<std::string> supported_families() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.push_back(std::string(f.model_type) + " (" + f.architecture + ")");
  return out;
}

Architecture parse_hf_config(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) {
    throw UserError(source + ": $: is " + json_type(config) +
                    ", expected a JSON object; give the model's Hugging Face config.json");
  }
  const json::Node root(config, source);
  const Fields top(root);

  // The family comes from model_type; a config without one falls back to architectures[0] (§A.5).
  std::optional<FamilyInfo> info;
  std::string family_name;
  if (const auto model_type = top.optional_string("model_type")) {
    for (const auto& f : kFamilies) {
      if (*model_type == f.model_type) info = f;
    }
    if (!info) {
      throw root.error("model_type", "is \"" + *model_type + "\", an unsupported model family" +
                                         same_architecture_hint(config) +
                                         "; supported model_type values: " + text::join(model_types()));
    }
    family_name = *model_type;
  } else {
    if (!config.contains("architectures") || !config["architectures"].is_array() || config["architectures"].empty() ||
        !config["architectures"][0].is_string()) {
      throw root.error("model_type",
                       "is missing (and there is no architectures list to fall back on); add "
                       "\"model_type\", one of: " +
                           text::join(model_types()));
    }
    const std::string arch = config["architectures"][0].get<std::string>();
    for (const auto& f : kFamilies) {
      if (!info && arch == f.architecture) info = f;
    }
    if (!info) {
      std::vector<std::string> archs;
      for (const auto& f : kFamilies) archs.emplace_back(f.architecture);
      throw root.error("architectures[0]", "is \"" + arch +
                                               "\", an unsupported architecture, and model_type is "
                                               "missing; add \"model_type\", one of: " +
                                               text::join(model_types()));
    }
    family_name = info->model_type;
  }

  Architecture a;
  a.id = source;
  a.source = source;
  a.family = family_name;
  a.name = name_from_path(source);

  // A multimodal checkpoint's text model is under text_config; tie_word_embeddings may sit at either level.
  const Fields text(info->text_config ? root.child("text_config") : root);
  if (info->text_config) {
    a.name += " (text model: $.text_config; the vision tower is not modelled)";
  }

  switch (info->family) {
    case Family::Mixtral:
      parse_mixtral(text, a);
      break;
    case Family::Dbrx:
      parse_dbrx(text, a);
      break;
    case Family::Qwen3Moe:
      parse_qwen3_moe(text, a);
      break;
    case Family::Qwen3Next:
    case Family::Qwen35Moe:
      // §A.2: the multimodal Qwen3.5 checkpoint nests every text field under text_config (`text` above), in
      // Qwen3-Next's layout.
      parse_qwen3_next(text, a);
      break;
    case Family::DeepseekV3:
      parse_deepseek(text, a, {"noaux_tc", false});
      break;
    case Family::DeepseekV2:
      parse_deepseek(text, a, {"greedy", false});
      break;
    case Family::DeepseekV32:
      parse_deepseek(text, a, {"noaux_tc", true});
      break;
    case Family::Glm4Moe:
      parse_glm4_moe(text, a);
      break;
    case Family::GptOss:
      parse_gpt_oss(text, a);
      break;
    case Family::Olmoe:
      parse_olmoe(text, a);
      break;
    case Family::Llama:
      parse_llama(text, a);
      break;
    case Family::Qwen2:
      parse_qwen2(text, a);
      break;
    case Family::Qwen2Moe:
      parse_qwen2_moe(text, a);
      break;
    case Family::Qwen3:
      parse_qwen3(text, a);
      break;
    case Family::Llama4:
      parse_llama4(text, a);
      break;
    case Family::MinimaxM2:
      parse_minimax_m2(text, a);
      break;
    case Family::HunyuanMoe:
      parse_hunyuan_moe(text, a);
      break;
    case Family::NemotronH:
      parse_nemotron_h(text, a);
      break;
    case Family::MimoV2Flash:
      parse_mimo_v2_flash(text, a);
      break;
    case Family::Gemma4:
      parse_gemma4(text, a);
      break;
    case Family::DeepseekV4:
      parse_deepseek_v4(text, a);
      break;
    case Family::Phimoe:
      parse_phimoe(text, a);
      break;
    case Family::Ernie45Moe:
      parse_ernie4_5_moe(text, a);
      break;
    case Family::GraniteMoe:
      parse_granitemoe(text, a);
      break;
    case Family::Jamba:
      parse_jamba(text, a);
      break;
  }
  if (info->text_config && !text.present("tie_word_embeddings")) {
    a.tie_embeddings = top.flag("tie_word_embeddings", false);
  }
  a.checkpoint_precision = checkpoint_precision(root, text);

  MOESIM_CHECK(static_cast<std::int64_t>(a.layer_specs.size()) == a.layers, "layer specs do not cover the layers");
  check_size(a, source);
  return a;
}

}  // namespace moesim::model
