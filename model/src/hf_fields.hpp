#pragma once
// Internal to model/: the pieces the Hugging Face config readers share (hf_config.cpp dispatches on
// model_type; hf_config_deepseek.cpp reads the MLA families, hf_config_hybrid.cpp the hybrid ones). Not a
// public header: the public entry point is parse_hf_config in moesim/model/architecture.hpp.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"

namespace moesim::model::hf {

/// A dimension above this is a typo (it would also overflow the int64 parameter products).
constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;

/// How a JSON value reads in a message ("the string \"4096\"", "null", "an array").
std::string json_type(const nlohmann::json& v);

/// Reads the fields of one JSON object of a config. Errors are one line:
///   "<file>: $.text_config.hidden_size: is missing; add the hidden size (d_model) as a positive integer"
class Fields {
 public:
  explicit Fields(json::Node node) : node_(std::move(node)) {}

  [[nodiscard]] const json::Node& node() const { return node_; }
  /// Present and not null.
  [[nodiscard]] bool present(std::string_view key) const { return node_.has(key) && !node_.is_null(key); }

  /// A required integer >= min_value; `meaning` says what the field is, for the message.
  [[nodiscard]] std::int64_t integer(std::string_view key, std::string_view meaning, std::int64_t min_value) const {
    if (!node_.has(key)) {
      throw node_.error(key, "is missing; add the " + std::string(meaning) + " as " + expectation(min_value) +
                                 ", as in the model's official config.json");
    }
    if (node_.is_null(key)) {
      throw node_.error(key, "is null; set the " + std::string(meaning) + " to " + expectation(min_value));
    }
    const nlohmann::json& v = node_.raw()[std::string(key)];
    std::int64_t n = 0;
    if (v.is_number_integer()) {
      n = v.get<std::int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               std::floor(v.get<double>()) == v.get<double>() &&
               std::abs(v.get<double>()) < static_cast<double>(kMaxDimension)) {
      n = static_cast<std::int64_t>(v.get<double>());  // 4096.0 is an integer written as a float
    } else {
      std::string fix = "write " + expectation(min_value) + " (the " + std::string(meaning) + ")";
      if (v.is_string()) fix += " without quotes";
      throw node_.error(key, "is " + json_type(v) + ", expected an integer; " + fix);
    }
    if (n < min_value) {
      throw node_.error(key, "is " + std::to_string(n) + ", but the " + std::string(meaning) + " must be " +
                                 expectation(min_value) + "; fix the value");
    }
    if (n > kMaxDimension) {
      throw node_.error(key, "is " + std::to_string(n) + ", implausibly large for the " + std::string(meaning) +
                                 " (limit " + std::to_string(kMaxDimension) + "); fix the value");
    }
    return n;
  }
  /// A required dimension (>= 1).
  [[nodiscard]] std::int64_t dim(std::string_view key, std::string_view meaning) const {
    return integer(key, meaning, 1);
  }
  /// An optional integer >= min_value: absent or null gives nullopt.
  [[nodiscard]] std::optional<std::int64_t> optional_integer(std::string_view key, std::string_view meaning,
                                                             std::int64_t min_value) const {
    if (!present(key)) return std::nullopt;
    return integer(key, meaning, min_value);
  }
  [[nodiscard]] std::optional<std::int64_t> optional_dim(std::string_view key, std::string_view meaning) const {
    return optional_integer(key, meaning, 1);
  }

  /// An optional boolean (absent or null gives `fallback`).
  [[nodiscard]] bool flag(std::string_view key, bool fallback) const {
    if (!present(key)) return fallback;
    const nlohmann::json& v = node_.raw()[std::string(key)];
    if (!v.is_boolean())
      throw node_.error(key, "is " + json_type(v) + ", expected true or false; write it without quotes");
    return v.get<bool>();
  }

  /// An optional string (absent or null gives nullopt).
  [[nodiscard]] std::optional<std::string> optional_string(std::string_view key) const {
    if (!present(key)) return std::nullopt;
    const nlohmann::json& v = node_.raw()[std::string(key)];
    if (!v.is_string()) throw node_.error(key, "is " + json_type(v) + ", expected a string in quotes");
    return v.get<std::string>();
  }

  /// An optional array of integers in [0, limit) (absent or null gives an empty list).
  [[nodiscard]] std::vector<std::int64_t> index_list(std::string_view key, std::int64_t limit,
                                                     std::string_view meaning) const {
    std::vector<std::int64_t> out;
    if (!present(key)) return out;
    const nlohmann::json& v = node_.raw()[std::string(key)];
    if (!v.is_array()) throw node_.error(key, "is " + json_type(v) + ", expected an array of " + std::string(meaning));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string item = std::string(key) + "[" + std::to_string(i) + "]";
      if (!v[i].is_number_integer() || v[i].get<std::int64_t>() < 0 || v[i].get<std::int64_t>() >= limit) {
        throw node_.error(item, "is " + json_type(v[i]) + ", expected a layer index from 0 to " +
                                    std::to_string(limit - 1) + "; fix the list of " + std::string(meaning));
      }
      out.push_back(v[i].get<std::int64_t>());
    }
    return out;
  }

  /// An optional array of strings of length `size` (absent or null gives nullopt).
  [[nodiscard]] std::optional<std::vector<std::string>> string_list(std::string_view key, std::int64_t size,
                                                                    std::string_view size_key) const {
    if (!present(key)) return std::nullopt;
    const nlohmann::json& v = node_.raw()[std::string(key)];
    if (!v.is_array()) throw node_.error(key, "is " + json_type(v) + ", expected an array with one string per layer");
    if (static_cast<std::int64_t>(v.size()) != size) {
      throw node_.error(key, "has " + std::to_string(v.size()) + " entries but " + std::string(size_key) + " is " +
                                 std::to_string(size) + "; give one entry per layer");
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) {
        throw node_.error(std::string(key) + "[" + std::to_string(i) + "]",
                          "is " + json_type(v[i]) + ", expected a layer type string such as \"full_attention\"");
      }
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  [[nodiscard]] UserError error(std::string_view key, const std::string& message) const {
    return node_.error(key, message);
  }

 private:
  static std::string expectation(std::int64_t min_value) {
    if (min_value == 1) return "a positive integer";
    if (min_value == 0) return "an integer >= 0";
    return "an integer >= " + std::to_string(min_value);
  }

  json::Node node_;
};

/// A required list of integers in [min_value, max_value] with one entry per layer (MiMo-V2-Flash's
/// hybrid_layer_pattern and moe_layer_freq, DeepSeek-V4's compress_ratios); `trailing` more entries are
/// allowed and dropped (DeepSeek-V4 lists its MTP layers' ratios after the decoder's). `meaning` says what
/// an entry is, for the message.
std::vector<std::int64_t> per_layer_integers(const Fields& f, std::string_view key, std::int64_t layers,
                                             std::int64_t trailing, std::string_view meaning, std::int64_t min_value,
                                             std::int64_t max_value);

/// Attention of one layer as the config names it.
enum class LayerKind { Full, Sliding, Linear };

/// The fields nearly every family spells the HF way (§A.5): hidden_size, num_hidden_layers,
/// num_attention_heads, num_key_value_heads (absent: MHA, the HF default), head_dim (absent: h/nq, §A.5),
/// vocab_size, tie_word_embeddings (absent: false, the default of every supported family's config class),
/// max_position_embeddings.
/// MLA families pass derive_head_dim = false: their head widths come from the MLA fields.
void read_standard(const Fields& f, Architecture& a, bool derive_head_dim = true);

/// Routed-expert fields under the family's own keys (§A.5 rows "experts", "top-k", "expert FFN").
/// All three are required: a family reader calls this only for MoE families.
void read_experts(const Fields& f, Architecture& a, std::string_view experts_key, std::string_view top_k_key,
                  std::string_view ffn_key);

/// Per-layer attention kinds: from `layer_types` when the config lists them, else from `fallback(i)`.
template <typename Fallback>
std::vector<LayerKind> layer_kinds(const Fields& f, std::int64_t layers, Fallback fallback) {
  std::vector<LayerKind> kinds;
  const auto names = f.string_list("layer_types", layers, "num_hidden_layers");
  for (std::int64_t i = 0; i < layers; ++i) {
    if (!names) {
      kinds.push_back(fallback(i));
      continue;
    }
    const std::string& n = (*names)[static_cast<std::size_t>(i)];
    if (n == "full_attention") {
      kinds.push_back(LayerKind::Full);
    } else if (n == "sliding_attention") {
      kinds.push_back(LayerKind::Sliding);
    } else if (n == "linear_attention") {
      kinds.push_back(LayerKind::Linear);
    } else {
      throw f.error("layer_types[" + std::to_string(i) + "]",
                    "is \"" + n + "\"; use \"full_attention\", \"sliding_attention\" or \"linear_attention\"");
    }
  }
  return kinds;
}

/// Turns layer kinds into LayerSpecs; sliding layers need `sliding_window`, linear layers need the family
/// to model Gated DeltaNet.
std::vector<LayerSpec> make_layers(const Fields& f, const std::vector<LayerKind>& kinds, bool linear_allowed,
                                   const std::vector<bool>& moe);

std::vector<bool> all_layers(std::int64_t layers, bool value);

/// Reads the dense FFN size (`key`: intermediate_size in every family but Llama 4) when some layer is
/// dense (and the config's value if given anyway).
void read_dense_ffn(const Fields& f, Architecture& a, const std::vector<bool>& moe,
                    std::string_view key = "intermediate_size");

/// Qwen's MoE layer rule (transformers Qwen3MoeDecoderLayer): layer i is sparse unless it is in
/// mlp_only_layers, and only every decoder_sparse_step-th layer ((i + 1) % step == 0) is sparse.
std::vector<bool> qwen_moe_layers(const Fields& f, std::int64_t layers);

/// Qwen's sliding-window rule (transformers Qwen2Config / Qwen3Config / Qwen2MoeConfig / Qwen3MoeConfig):
/// sliding_window applies only with use_sliding_window, and then to the layers from max_window_layers on;
/// a null sliding_window means full attention everywhere. Every released Qwen checkpoint sets it off.
std::vector<LayerKind> qwen_layer_kinds(const Fields& f, std::int64_t layers);

/// Qwen's shared expert (§A.5 "shared"; transformers Qwen2MoeSparseMoeBlock, Qwen3NextSparseMoeBlock): one
/// shared expert of shared_expert_intermediate_size, its own size and not the routed experts', behind a
/// sigmoid gate (h params). `required`: qwen2_moe always has one, so a config without the field is refused
/// rather than read as none (transformers would silently default it to 5632).
void read_qwen_shared_expert(const Fields& f, Architecture& a, bool required);

/// Qwen3's attention (dense and MoE alike, §A.2): per-head QK RMSNorm; q/k/v biases only with
/// attention_bias (off in every release); o_proj without a bias.
void read_qwen3_attention(const Fields& f, Architecture& a);

/// An integer that some families write per layer (Hunyuan's moe_topk, moe_intermediate_size,
/// num_shared_expert): a plain integer >= min_value, or a list of `layers` equal ones. moesim has one value
/// per model, so a list whose entries differ is refused, naming the first that differs.
std::int64_t uniform_integer(const Fields& f, std::string_view key, std::string_view meaning, std::int64_t layers,
                             std::int64_t min_value);

// --- readers defined outside hf_config.cpp ---------------------------------------------------------------

/// What tells the DeepSeek generations apart in their configs.
struct DeepseekVariant {
  /// topk_method when the config omits it: transformers' DeepseekV2Config defaults to "greedy" (a plain
  /// softmax router), DeepseekV3Config to "noaux_tc" (with e_score_correction_bias).
  const char* default_topk_method;
  /// DeepSeek-V3.2's sparse attention (DSA): a lightning indexer in every layer (index_n_heads,
  /// index_head_dim; DeepSeek-V3.2-Exp inference/model.py class Indexer).
  bool indexer;
};

/// DeepSeek-V2/V3/V3.2, Kimi-K2, GLM-4.7-Flash, GLM-5 (hf_config_deepseek.cpp).
void parse_deepseek(const Fields& f, Architecture& a, const DeepseekVariant& variant);

/// Qwen3-Next (flat) and the text_config of Qwen3.5 (hf_config_hybrid.cpp).
void parse_qwen3_next(const Fields& f, Architecture& a);
/// Nemotron-H: Mamba-2, attention, MLP and MoE blocks (hf_config_hybrid.cpp).
void parse_nemotron_h(const Fields& f, Architecture& a);
/// Jamba: Mamba-1 and attention layers, MoE and dense FFNs (hf_config_hybrid.cpp).
void parse_jamba(const Fields& f, Architecture& a);

/// MiMo-V2-Flash (hf_config_gqa_moe.cpp).
void parse_mimo_v2_flash(const Fields& f, Architecture& a);
/// Gemma 4, flat (gemma4_text) or the text_config of Gemma4ForConditionalGeneration (hf_config_gqa_moe.cpp).
void parse_gemma4(const Fields& f, Architecture& a);
/// DeepSeek-V4 (hf_config_deepseek.cpp).
void parse_deepseek_v4(const Fields& f, Architecture& a);

/// Hunyuan-A13B (hunyuan_v1_moe, and the release's own "hunyuan" config) (hf_config_gqa_moe.cpp).
void parse_hunyuan_moe(const Fields& f, Architecture& a);

}  // namespace moesim::model::hf
