// The Mixtral architecture the reference decoder runs: the tensors a checkpoint must hold, by name and
// shape (transformers src/transformers/models/mixtral/modeling_mixtral.py), and the checks of a config.

#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reference/checkpoint.hpp"

namespace moesim::reference {

// --- the Mixtral architecture ------------------------------------------------------------------------------

std::vector<ExpectedTensor> mixtral_tensors(const model::Architecture& arch) {
  const std::int64_t h = arch.hidden;
  const std::int64_t q = arch.heads * arch.head_dim;
  const std::int64_t kv = arch.kv_heads * arch.head_dim;
  const std::int64_t ffn = arch.expert_ffn;
  {
    // The list: 3 tensors per layer and expert, 7 per layer, 3 more. Per entry, an ExpectedTensor (a name
    // and a shape vector) with their heap buffers (a name of ~60 characters, two int64 dimensions) is
    // ~170 bytes; writing a checkpoint also holds a PlannedTensor and an index entry (name -> file in a
    // JSON object, ~250 bytes) per tensor: 420 bytes per tensor covers both. Doubles: layers x experts
    // may be large.
    const double tensors =
        static_cast<double>(arch.layers) * (3.0 * static_cast<double>(arch.routed_experts) + 7.0) + 3.0;
    model::require_memory(units::bytes(420.0 * tensors),
                          "the list of " + text::printf("%.4g", tensors) + " tensors (" + std::to_string(arch.layers) +
                              " layers x " + std::to_string(arch.routed_experts) + " experts x 3)",
                          "use a config.json with fewer layers or experts (num_hidden_layers, num_local_experts), "
                          "or a machine with more memory");
  }
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {arch.vocab, h}});
  for (std::int64_t i = 0; i < arch.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    out.push_back({layer + "input_layernorm.weight", {h}});
    // nn.Linear(in, out).weight is [out, in].
    out.push_back({layer + "self_attn.q_proj.weight", {q, h}});
    out.push_back({layer + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({layer + "self_attn.v_proj.weight", {kv, h}});
    out.push_back({layer + "self_attn.o_proj.weight", {h, q}});
    out.push_back({layer + "post_attention_layernorm.weight", {h}});
    out.push_back({layer + "block_sparse_moe.gate.weight", {arch.routed_experts, h}});
    for (std::int64_t e = 0; e < arch.routed_experts; ++e) {
      // MixtralBlockSparseTop2MLP: w1 (gate) and w3 (up) map h -> I, w2 (down) maps I -> h.
      const std::string expert = layer + "block_sparse_moe.experts." + std::to_string(e) + ".";
      out.push_back({expert + "w1.weight", {ffn, h}});
      out.push_back({expert + "w2.weight", {h, ffn}});
      out.push_back({expert + "w3.weight", {ffn, h}});
    }
  }
  out.push_back({"model.norm.weight", {h}});
  if (!arch.tie_embeddings) out.push_back({"lm_head.weight", {arch.vocab, h}});
  return out;
}

void check_reference_architecture(const model::Architecture& arch, const std::string& where) {
  const auto refuse = [&](const std::string& what) {
    throw UserError(where + ": " + what +
                    "; the reference decoder runs Mixtral-architecture models only (model_type \"mixtral\": "
                    "grouped-query attention without biases, a softmax top-k router over SwiGLU experts in every "
                    "layer, no shared experts); give such a config.json, e.g. TinyMistral-6x248M's");
  };
  if (arch.family != "mixtral") refuse("model family '" + arch.family + "' is not supported");
  if (arch.routed_experts < 1 || arch.top_k < 1 || arch.top_k > arch.routed_experts || arch.expert_ffn < 1) {
    refuse("it has no routed experts");
  }
  if (static_cast<std::int64_t>(arch.layer_specs.size()) != arch.layers) refuse("its layers are not described");
  for (std::size_t i = 0; i < arch.layer_specs.size(); ++i) {
    if (arch.layer_specs[i].attention != model::AttentionType::Gqa) {
      refuse("layer " + std::to_string(i) + " does not use grouped-query attention");
    }
    if (!arch.layer_specs[i].moe) refuse("layer " + std::to_string(i) + " is a dense FFN layer, not a MoE layer");
  }
  if (arch.attention_bias || arch.attention_out_bias) refuse("it has attention projection biases");
  if (arch.qk_norm || arch.qk_norm_full_width) refuse("it has q/k norms");
  if (arch.attention_output_gate) refuse("it has a gated attention output");
  if (arch.attention_sinks) refuse("it has attention sinks");
  if (arch.shared_experts > 0 || arch.shared_ffn > 0 || arch.shared_expert_gate) refuse("it has shared experts");
  if (arch.router_bias || arch.expert_bias) refuse("it has router or expert biases");
  if (arch.dense_ffn > 0) refuse("it has dense FFN layers");
}

void check_checkpoint(const Checkpoint& ckpt, const model::Architecture& arch) {
  for (const auto& t : mixtral_tensors(arch)) (void)ckpt.require(t.name, t.shape);
}

}  // namespace moesim::reference
