// The helpers the Hugging Face config readers share (declared in hf_fields.hpp).

#include "hf_fields.hpp"

#include <algorithm>

namespace moesim::model::hf {

std::string json_type(const nlohmann::json& v) {
  if (v.is_string()) return "the string " + v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  if (v.is_null()) return "null";
  return v.dump();
}

/// The fields nearly every family spells the HF way (§A.5): hidden_size, num_hidden_layers,
/// num_attention_heads, num_key_value_heads (absent: MHA, the HF default), head_dim (absent: h/nq, §A.5),
/// vocab_size, tie_word_embeddings (absent: false, the default of every supported family's config class),
/// max_position_embeddings.
/// MLA families pass derive_head_dim = false: their head widths come from the MLA fields.
void read_standard(const Fields& f, Architecture& a, bool derive_head_dim) {
  a.hidden = f.dim("hidden_size", "hidden size");
  a.layers = f.dim("num_hidden_layers", "number of decoder layers");
  a.heads = f.dim("num_attention_heads", "number of query heads");
  a.kv_heads = f.optional_dim("num_key_value_heads", "number of key/value heads").value_or(a.heads);
  if (a.heads % a.kv_heads != 0) {
    throw f.error("num_key_value_heads", "is " + std::to_string(a.kv_heads) +
                                             ", which does not divide num_attention_heads " + std::to_string(a.heads) +
                                             "; grouped-query attention needs a divisor");
  }
  if (auto hd = f.optional_dim("head_dim", "per-head width")) {
    a.head_dim = *hd;
  } else if (derive_head_dim) {
    if (a.hidden % a.heads != 0) {
      throw f.error("head_dim", "is absent and hidden_size " + std::to_string(a.hidden) +
                                    " is not a multiple of num_attention_heads " + std::to_string(a.heads) +
                                    "; add head_dim");
    }
    a.head_dim = a.hidden / a.heads;
  }
  a.vocab = f.dim("vocab_size", "vocabulary size");
  a.tie_embeddings = f.flag("tie_word_embeddings", false);
  a.max_context = f.optional_dim("max_position_embeddings", "maximum context length").value_or(0);
}

/// Routed-expert fields under the family's own keys (§A.5 rows "experts", "top-k", "expert FFN").
/// All three are required: a family reader calls this only for MoE families.
void read_experts(const Fields& f, Architecture& a, std::string_view experts_key, std::string_view top_k_key,
                  std::string_view ffn_key) {
  a.routed_experts = f.integer(experts_key, "number of routed experts", 1);
  a.top_k = f.dim(top_k_key, "number of experts per token (top-k)");
  if (a.top_k > a.routed_experts) {
    throw f.error(top_k_key, "is " + std::to_string(a.top_k) + ", more than the " + std::to_string(a.routed_experts) +
                                 " routed experts (" + std::string(experts_key) + "); fix one of them");
  }
  a.expert_ffn = f.dim(ffn_key, "routed expert FFN (intermediate) size");
}

/// Turns layer kinds into LayerSpecs; sliding layers need `sliding_window`, linear layers need the family
/// to model Gated DeltaNet.
std::vector<LayerSpec> make_layers(const Fields& f, const std::vector<LayerKind>& kinds, bool linear_allowed,
                                   const std::vector<bool>& moe) {
  std::vector<LayerSpec> specs;
  std::optional<std::int64_t> window;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    LayerSpec s;
    s.moe = moe[i];
    if (kinds[i] == LayerKind::Sliding) {
      if (!window) {
        window = f.optional_dim("sliding_window", "sliding-window length in tokens");
        if (!window) {
          throw f.error("sliding_window", "is absent or null but layer " + std::to_string(i) +
                                              " uses sliding_attention; set the window length in tokens");
        }
      }
      s.sliding_window = *window;
    } else if (kinds[i] == LayerKind::Linear) {
      if (!linear_allowed) {
        throw f.error("layer_types[" + std::to_string(i) + "]",
                      "is \"linear_attention\", which moesim models only for qwen3_next and qwen3_5_moe; "
                      "use \"full_attention\" or \"sliding_attention\"");
      }
      s.attention = AttentionType::GatedDeltaNet;
    }
    specs.push_back(s);
  }
  return specs;
}

std::vector<std::int64_t> per_layer_integers(const Fields& f, std::string_view key, std::int64_t layers,
                                             std::int64_t trailing, std::string_view meaning, std::int64_t min_value,
                                             std::int64_t max_value) {
  const std::string range = "an integer from " + std::to_string(min_value) + " to " + std::to_string(max_value);
  if (!f.present(key)) {
    throw f.error(key, "is missing; add one " + std::string(meaning) + " (" + range +
                           ") per layer, as in the model's official config.json");
  }
  const nlohmann::json& v = f.node().raw()[std::string(key)];
  const auto size = v.is_array() ? static_cast<std::int64_t>(v.size()) : -1;
  if (size < layers || size > layers + trailing) {
    const std::string have = v.is_array() ? "has " + std::to_string(size) + " entries" : "is " + json_type(v);
    throw f.error(key, have + " but num_hidden_layers is " + std::to_string(layers) + "; give one " +
                           std::string(meaning) + " per layer");
  }
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < layers; ++i) {
    const nlohmann::json& e = v[static_cast<std::size_t>(i)];
    if (!e.is_number_integer() || e.get<std::int64_t>() < min_value || e.get<std::int64_t>() > max_value) {
      throw f.error(std::string(key) + "[" + std::to_string(i) + "]",
                    "is " + json_type(e) + ", expected " + range + " (the layer's " + std::string(meaning) + ")");
    }
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

std::vector<bool> all_layers(std::int64_t layers, bool value) {
  return std::vector<bool>(static_cast<std::size_t>(layers), value);
}

/// Reads the dense FFN size (`key`: intermediate_size in every family but Llama 4) when some layer is
/// dense (and the config's value if given anyway).
void read_dense_ffn(const Fields& f, Architecture& a, const std::vector<bool>& moe, std::string_view key) {
  const bool any_dense = std::find(moe.begin(), moe.end(), false) != moe.end();
  if (any_dense) {
    a.dense_ffn = f.dim(key, "dense FFN (intermediate) size");
  } else {
    a.dense_ffn = f.optional_dim(key, "dense FFN (intermediate) size").value_or(0);
  }
}

/// Qwen's MoE layer rule (transformers Qwen3MoeDecoderLayer): layer i is sparse unless it is in
/// mlp_only_layers, and only every decoder_sparse_step-th layer ((i + 1) % step == 0) is sparse.
std::vector<bool> qwen_moe_layers(const Fields& f, std::int64_t layers) {
  const auto mlp_only = f.index_list("mlp_only_layers", layers, "dense layer indices");
  const std::int64_t step = f.optional_dim("decoder_sparse_step", "MoE layer step").value_or(1);
  std::vector<bool> moe;
  for (std::int64_t i = 0; i < layers; ++i) {
    const bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    moe.push_back(!dense && (i + 1) % step == 0);
  }
  return moe;
}

/// Qwen's sliding-window rule (transformers Qwen2Config / Qwen3Config / Qwen2MoeConfig / Qwen3MoeConfig):
/// sliding_window applies only with use_sliding_window, and then to the layers from max_window_layers on;
/// a null sliding_window means full attention everywhere. Every released Qwen checkpoint sets it off.
std::vector<LayerKind> qwen_layer_kinds(const Fields& f, std::int64_t layers) {
  const bool sliding = f.flag("use_sliding_window", false) && f.present("sliding_window");
  const std::int64_t first_sliding =
      f.optional_integer("max_window_layers", "first sliding-window layer", 0).value_or(0);
  return layer_kinds(
      f, layers, [&](std::int64_t i) { return sliding && i >= first_sliding ? LayerKind::Sliding : LayerKind::Full; });
}

/// Qwen's shared expert (§A.5 "shared"; transformers Qwen2MoeSparseMoeBlock, Qwen3NextSparseMoeBlock): one
/// shared expert of shared_expert_intermediate_size, its own size and not the routed experts', behind a
/// sigmoid gate (h params). `required`: qwen2_moe always has one, so a config without the field is refused
/// rather than read as none (transformers would silently default it to 5632).
void read_qwen_shared_expert(const Fields& f, Architecture& a, bool required) {
  const std::string_view key = "shared_expert_intermediate_size";
  const std::int64_t shared = required ? f.integer(key, "shared expert FFN size (0 for none)", 0)
                                       : f.optional_integer(key, "shared expert FFN size", 0).value_or(0);
  if (shared > 0) {
    a.shared_experts = 1;
    a.shared_ffn = shared;
    a.shared_expert_gate = true;
  }
}

/// Qwen3's attention (dense and MoE alike, §A.2): per-head QK RMSNorm; q/k/v biases only with
/// attention_bias (off in every release); o_proj without a bias.
void read_qwen3_attention(const Fields& f, Architecture& a) {
  a.qk_norm = true;
  a.attention_bias = f.flag("attention_bias", false);
  a.attention_out_bias = false;
}

std::int64_t uniform_integer(const Fields& f, std::string_view key, std::string_view meaning, std::int64_t layers,
                             std::int64_t min_value) {
  const std::string k(key);
  if (!f.present(key) || !f.node().raw()[k].is_array()) return f.integer(key, meaning, min_value);
  const nlohmann::json& list = f.node().raw()[k];
  if (static_cast<std::int64_t>(list.size()) != layers) {
    throw f.error(key, "has " + std::to_string(list.size()) + " entries but num_hidden_layers is " +
                           std::to_string(layers) + "; give one " + std::string(meaning) +
                           " per layer, or one integer");
  }
  std::int64_t first = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = k + "[" + std::to_string(i) + "]";
    if (!list[i].is_number_integer() || list[i].get<std::int64_t>() < min_value) {
      throw f.error(item, "is " + json_type(list[i]) + ", expected an integer >= " + std::to_string(min_value) +
                              " (the " + std::string(meaning) + ")");
    }
    const std::int64_t v = list[i].get<std::int64_t>();
    if (v > kMaxDimension) {
      throw f.error(
          item, "is " + std::to_string(v) + ", implausibly large for the " + std::string(meaning) + "; fix the value");
    }
    if (i == 0) {
      first = v;
    } else if (v != first) {
      throw f.error(item, "is " + std::to_string(v) + " but " + k + "[0] is " + std::to_string(first) +
                              "; moesim models one " + std::string(meaning) + " for every layer");
    }
  }
  return first;
}

}  // namespace moesim::model::hf
