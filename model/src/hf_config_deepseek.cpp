// Hugging Face config.json readers of the multi-head latent attention (MLA) families: DeepSeek-V2/V3/V3.2,
// Kimi-K2, GLM-4.7-Flash (glm4_moe_lite) and GLM-5 (glm_moe_dsa). Dispatch: hf_config.cpp.

#include <vector>

#include "hf_fields.hpp"

namespace moesim::model::hf {

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
      throw f.error("q_lora_rank", "is null, but the lightning indexer projects its queries from the q latent; "
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
  for (std::int64_t i = 0; i < a.layers; ++i) {
    LayerSpec s;
    s.attention = AttentionType::Mla;
    s.moe = moe[static_cast<std::size_t>(i)];
    a.layer_specs.push_back(s);
  }
}

}  // namespace moesim::model::hf
