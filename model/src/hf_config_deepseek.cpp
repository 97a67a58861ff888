// Hugging Face config.json readers of the DeepSeek attention families: multi-head latent attention
// (DeepSeek-V2/V3/V3.2, Kimi-K2, GLM-4.7-Flash (glm4_moe_lite), GLM-5 (glm_moe_dsa)) and DeepSeek-V4's
// compressed attention. Dispatch: hf_config.cpp.

#include <algorithm>
#include <string>
#include <vector>

#include "hf_fields.hpp"

namespace moesim::model::hf {
namespace {

/// Which layers run their own lightning indexer (transformers GlmMoeDsaConfig.__post_init__): indexer_types
/// ("full" or "shared") when given, else index_topk_pattern ("F"/"S" per layer), else layer i is full iff
/// max(i − index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (freq 1, the default and DeepSeek-V3.2's
/// and GLM-5's case: every layer). A "shared" layer reuses the previous layer's top-k and has no indexer.
std::vector<bool> indexer_layers(const Fields& f, std::int64_t layers) {
  std::vector<bool> full;
  if (const auto types = f.string_list("indexer_types", layers, "num_hidden_layers")) {
    for (std::size_t i = 0; i < types->size(); ++i) {
      const std::string& t = (*types)[i];
      if (t != "full" && t != "shared") {
        throw f.error("indexer_types[" + std::to_string(i) + "]", "is \"" + t + "\"; use \"full\" or \"shared\"");
      }
      full.push_back(t == "full");
    }
    return full;
  }
  if (const auto pattern = f.optional_string("index_topk_pattern")) {
    if (static_cast<std::int64_t>(pattern->size()) != layers) {
      throw f.error("index_topk_pattern", "has " + std::to_string(pattern->size()) +
                                              " letters but num_hidden_layers is " + std::to_string(layers) +
                                              "; give one F (full) or S (shared) per layer");
    }
    for (std::size_t i = 0; i < pattern->size(); ++i) {
      const char c = (*pattern)[i];
      if (c != 'F' && c != 'S') {
        throw f.error("index_topk_pattern", "has '" + std::string(1, c) + "' at position " + std::to_string(i) +
                                                "; use F (full) or S (shared) for each layer");
      }
      full.push_back(c == 'F');
    }
    return full;
  }
  const std::int64_t freq = f.optional_dim("index_topk_freq", "indexer layer interval").value_or(1);
  const std::int64_t offset =
      f.optional_integer("index_skip_topk_offset", "first layer that may share the indexer", 0).value_or(2);
  for (std::int64_t i = 0; i < layers; ++i) full.push_back(std::max<std::int64_t>(i - offset + 1, 0) % freq == 0);
  return full;
}

}  // namespace

void parse_deepseek(const Fields& f, Architecture& a, const DeepseekVariant& variant) {
  read_standard(f, a, false);
  // §A.2 DeepSeek-V3 MLA. q_lora_rank may be null (no low-rank q), but must be written.
  if (!f.node().has("q_lora_rank")) {
    throw f.error("q_lora_rank", "is missing; add the q low-rank dimension (1536 for DeepSeek-V3), or null for none");
  }
  a.mla.q_lora_rank = f.optional_dim("q_lora_rank", "q low-rank dimension").value_or(0);
  a.mla.kv_lora_rank = f.dim("kv_lora_rank", "compressed KV latent width");
  a.mla.qk_nope_head_dim = f.dim("qk_nope_head_dim", "non-rotary q/k head width");
  a.mla.qk_rope_head_dim = f.dim("qk_rope_head_dim", "rotary q/k head width");
  a.mla.v_head_dim = f.dim("v_head_dim", "value head width");
  if (variant.indexer) {
    a.mla.index_heads = f.dim("index_n_heads", "number of lightning-indexer heads");
    a.mla.index_head_dim = f.dim("index_head_dim", "lightning-indexer head width");
    if (a.mla.q_lora_rank == 0) {
      throw f.error("q_lora_rank",
                    "is null, but the lightning indexer projects its queries from the q latent; "
                    "set the q low-rank dimension (1536 for DeepSeek-V3.2)");
    }
  }
  // MLA has no GQA grouping (§A.5 "MLA: equals heads"); head_dim records the q/k head width.
  a.kv_heads = a.heads;
  a.head_dim = a.mla.qk_nope_head_dim + a.mla.qk_rope_head_dim;
  read_experts(f, a, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size");
  a.shared_experts = f.optional_integer("n_shared_experts", "number of shared experts", 0).value_or(0);
  a.shared_ffn = a.shared_experts > 0 ? a.expert_ffn : 0;  // §A.5: n_shared_experts × moe_intermediate_size
  // noaux_tc (the DeepSeek-V3 default) adds e_score_correction_bias (E params) to the router.
  a.router_bias = f.optional_string("topk_method").value_or(variant.default_topk_method) == "noaux_tc";
  // transformers DeepseekV3: layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0.
  const std::int64_t first_dense =
      f.optional_integer("first_k_dense_replace", "number of leading dense layers", 0).value_or(0);
  const std::int64_t freq = f.optional_dim("moe_layer_freq", "MoE layer frequency").value_or(1);
  std::vector<bool> moe;
  for (std::int64_t i = 0; i < a.layers; ++i) moe.push_back(i >= first_dense && i % freq == 0);
  read_dense_ffn(f, a, moe);
  const std::vector<bool> indexer =
      variant.indexer ? indexer_layers(f, a.layers) : std::vector<bool>(static_cast<std::size_t>(a.layers), false);
  for (std::int64_t i = 0; i < a.layers; ++i) {
    LayerSpec s;
    s.attention = AttentionType::Mla;
    s.moe = moe[static_cast<std::size_t>(i)];
    s.indexer = indexer[static_cast<std::size_t>(i)];
    a.layer_specs.push_back(s);
  }
}

/// DeepSeek-V4 (the release's inference/model.py; DeepseekV4ForCausalLM). Every layer: the attention of
/// CompressedMqaDims (q latent q_lora_rank, num_attention_heads query heads and one shared key=value head of
/// head_dim, o_groups × o_lora_rank grouped output projection, one sink per head) over a sliding_window of
/// recent tokens, plus a compressed KV cache where compress_ratios gives the layer a ratio (4: CSA with a
/// lightning indexer of index_n_heads × index_head_dim choosing index_topk entries; 128: HCA); hyper-connections
/// of hc_mult residual copies; an MoE of n_routed_experts of moe_intermediate_size (top num_experts_per_tok)
/// and n_shared_experts of the same size. compress_ratios also lists the MTP layers
/// (num_nextn_predict_layers), which are left out, as DeepSeek-V3's. The first num_hash_layers layers route
/// by a token-id table (tid2eid, an index table and not a weight) and have no e_score_correction_bias: the
/// router is counted with the bias in every layer, E parameters too many per hash layer (768 for Flash).
void parse_deepseek_v4(const Fields& f, Architecture& a) {
  read_standard(f, a);
  if (a.kv_heads != 1) {
    throw f.error("num_key_value_heads",
                  "is " + std::to_string(a.kv_heads) +
                      ", but DeepSeek-V4's attention has one shared key=value head; set it to 1");
  }
  CompressedMqaDims& c = a.cmqa;
  c.q_lora_rank = f.dim("q_lora_rank", "q latent width");
  c.head_dim = a.head_dim;
  c.o_groups = f.dim("o_groups", "number of output projection groups");
  c.o_lora_rank = f.dim("o_lora_rank", "per-group output latent width");
  c.window = f.dim("sliding_window", "sliding-window length in tokens");
  c.index_heads = f.dim("index_n_heads", "number of lightning-indexer heads");
  c.index_head_dim = f.dim("index_head_dim", "lightning-indexer head width");
  c.index_topk = f.dim("index_topk", "number of compressed entries a CSA layer attends to");
  c.hc_mult = f.dim("hc_mult", "number of hyper-connection residual copies");
  if (a.heads % c.o_groups != 0) {
    throw f.error("o_groups", "is " + std::to_string(c.o_groups) + ", which does not divide num_attention_heads " +
                                  std::to_string(a.heads) + "; the output projection groups whole heads");
  }
  const std::int64_t mtp = f.optional_integer("num_nextn_predict_layers", "number of MTP layers", 0).value_or(0);
  const std::vector<std::int64_t> ratios = per_layer_integers(
      f, "compress_ratios", a.layers, mtp, "KV compression ratio (0 none, 4 CSA, 128 HCA)", 0, kMaxDimension);
  read_experts(f, a, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size");
  a.shared_experts = f.optional_integer("n_shared_experts", "number of shared experts", 0).value_or(0);
  a.shared_ffn = a.shared_experts > 0 ? a.expert_ffn : 0;  // as DeepSeek-V3: n_shared × moe_intermediate_size
  a.router_bias = f.optional_string("topk_method").value_or("noaux_tc") == "noaux_tc";
  for (const std::int64_t r : ratios) {
    LayerSpec s;
    s.attention = AttentionType::CompressedMqa;
    s.compress_ratio = r;
    // A window-only layer holds the last `window` tokens; a compressed layer's cache grows with the context.
    s.sliding_window = r == 0 ? c.window : 0;
    a.layer_specs.push_back(s);
  }
}

}  // namespace moesim::model::hf
