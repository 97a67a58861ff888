// Tests of the Hugging Face config parser: its defaults (architectures fallback, head_dim) and its errors,
// each naming the field and the fix. Expected values are hand-derived from models_and_routing.md §A.1–A.4.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "architecture_test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"

namespace moesim::model {
namespace {

using arch_test::tiny_mixtral;
using moesim::test::user_error;

// ---- HfConfig: the parser's defaults and errors -------------------------------------------------------------

// Scenario: a Mixtral config without head_dim and without model_type (architectures only). Expectation:
// family from architectures[0]; head_dim = 1024/32 = 32.
TEST(HfConfig, ArchitecturesFallbackAndHeadDimDefault) {
  nlohmann::json c = tiny_mixtral();
  c.erase("model_type");
  c["architectures"] = {"MixtralForCausalLM"};
  const Architecture a = parse_hf_config(c, "my/config.json");
  EXPECT_EQ(a.family, "mixtral");
  EXPECT_EQ(a.head_dim, 32);
  EXPECT_EQ(a.id, "my/config.json");
}

// Scenario: an unsupported family. Expectation: UserError naming the file and $.model_type, listing the
// supported model_type values.
TEST(HfConfig, UnsupportedModelTypeListsFamilies) {
  nlohmann::json c = tiny_mixtral();
  c["model_type"] = "bert";
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("my/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("$.model_type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bert"), std::string::npos) << msg;
  for (const char* t :
       {"mixtral",     "dbrx",           "qwen3_moe",    "qwen3_next",  "qwen3_5_moe",   "deepseek_v3", "kimi_k2",
        "glm4_moe",    "gpt_oss",        "olmoe",        "llama",       "qwen2",         "qwen2_moe",   "qwen3",
        "deepseek_v2", "deepseek_v32",   "llama4",       "llama4_text", "qwen3_vl_moe",  "minimax_m2",  "glm4_moe_lite",
        "glm_moe_dsa", "hunyuan_v1_moe", "hunyuan",      "nemotron_h",  "mimo_v2_flash", "gemma4",      "gemma4_text",
        "deepseek_v4", "phimoe",         "ernie4_5_moe", "granitemoe",  "jamba"}) {
    EXPECT_NE(msg.find(t), std::string::npos) << t << " missing from: " << msg;
  }
  EXPECT_EQ(supported_families().size(), 33u);
}

// Scenario: hidden_size missing, flat (Mixtral) and nested (Qwen3.5 text_config). Expectation: UserError
// with the JSON path $.hidden_size / $.text_config.hidden_size and "add".
TEST(HfConfig, MissingHiddenSizeNamesThePath) {
  nlohmann::json c = tiny_mixtral();
  c.erase("hidden_size");
  std::string msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("my/config.json: $.hidden_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("add"), std::string::npos) << msg;

  const nlohmann::json qwen35 = {{"model_type", "qwen3_5_moe"},
                                 {"text_config", {{"num_hidden_layers", 4}, {"num_attention_heads", 2}}}};
  msg = user_error([&] { (void)parse_hf_config(qwen35, "q/config.json"); });
  EXPECT_NE(msg.find("$.text_config.hidden_size"), std::string::npos) << msg;
}

// Scenario: a number written as a string ("num_hidden_layers": "12"). Expectation: UserError naming
// $.num_hidden_layers, saying it is a string and to write it without quotes.
TEST(HfConfig, StringWhereNumberExpected) {
  nlohmann::json c = tiny_mixtral();
  c["num_hidden_layers"] = "12";
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("$.num_hidden_layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("string"), std::string::npos) << msg;
  EXPECT_NE(msg.find("without quotes"), std::string::npos) << msg;
}

// Scenario: a negative layer count. Expectation: UserError naming $.num_hidden_layers and the value -12.
TEST(HfConfig, NegativeLayersRejected) {
  nlohmann::json c = tiny_mixtral();
  c["num_hidden_layers"] = -12;
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("$.num_hidden_layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-12"), std::string::npos) << msg;
  EXPECT_NE(msg.find("positive"), std::string::npos) << msg;
}

// Scenario: DBRX without ffn_config.moe_top_k, and with a top-k above the expert count. Expectation: the
// nested path $.ffn_config.moe_top_k in both messages.
TEST(HfConfig, DbrxNestedFieldErrors) {
  nlohmann::json c = {{"model_type", "dbrx"},
                      {"d_model", 256},
                      {"n_heads", 4},
                      {"n_layers", 2},
                      {"vocab_size", 1000},
                      {"attn_config", {{"kv_n_heads", 2}}},
                      {"ffn_config", {{"ffn_hidden_size", 512}, {"moe_num_experts", 4}}}};
  std::string msg = user_error([&] { (void)parse_hf_config(c, "dbrx.json"); });
  EXPECT_NE(msg.find("$.ffn_config.moe_top_k"), std::string::npos) << msg;
  c["ffn_config"]["moe_top_k"] = 5;
  msg = user_error([&] { (void)parse_hf_config(c, "dbrx.json"); });
  EXPECT_NE(msg.find("$.ffn_config.moe_top_k"), std::string::npos) << msg;
  c["ffn_config"]["moe_top_k"] = 2;
  // Valid now; head_dim is derived as d_model / n_heads = 256 / 4 = 64.
  EXPECT_EQ(parse_hf_config(c, "dbrx.json").head_dim, 64);
}

// Scenario: layer_types with the wrong length, and an unknown layer type. Expectation: UserError naming
// $.layer_types / $.layer_types[1].
TEST(HfConfig, LayerTypesValidated) {
  nlohmann::json c = tiny_mixtral();
  c["num_hidden_layers"] = 2;
  c["layer_types"] = {"full_attention"};
  std::string msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("$.layer_types"), std::string::npos) << msg;
  c["layer_types"] = {"full_attention", "cross_attention"};
  msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("$.layer_types[1]"), std::string::npos) << msg;
  // sliding_attention without a sliding_window.
  c["layer_types"] = {"full_attention", "sliding_attention"};
  msg = user_error([&] { (void)parse_hf_config(c, "my/config.json"); });
  EXPECT_NE(msg.find("$.sliding_window"), std::string::npos) << msg;
}

// Scenario: DeepSeek-style config with q_lora_rank null (no q compression, as DeepSeek-V2-Lite). Expectation:
// parses with q_lora_rank 0 and the q projection h·nh·(nope+rope) directly: MLA attention per layer =
// 64·4·48 + 64·(32+16) + 32 + 32·4·(32+32) + 4·32·64 = 12288 + 3072 + 32 + 8192 + 8192 = 31,776.
TEST(HfConfig, DeepSeekNullQLoraRank) {
  const nlohmann::json c = {{"model_type", "deepseek_v3"},
                            {"hidden_size", 64},
                            {"num_hidden_layers", 1},
                            {"num_attention_heads", 4},
                            {"vocab_size", 10},
                            {"q_lora_rank", nullptr},
                            {"kv_lora_rank", 32},
                            {"qk_nope_head_dim", 32},
                            {"qk_rope_head_dim", 16},
                            {"v_head_dim", 32},
                            {"n_routed_experts", 4},
                            {"num_experts_per_tok", 2},
                            {"moe_intermediate_size", 8},
                            {"n_shared_experts", 0},
                            {"first_k_dense_replace", 0}};
  const Architecture a = parse_hf_config(c, "ds.json");
  EXPECT_EQ(a.mla.q_lora_rank, 0);
  EXPECT_EQ(parameter_counts(a).attention, 31776);
  nlohmann::json missing = c;
  missing.erase("q_lora_rank");
  const std::string msg = user_error([&] { (void)parse_hf_config(missing, "ds.json"); });
  EXPECT_NE(msg.find("$.q_lora_rank"), std::string::npos) << msg;
}

// Qwen2: biases on q, k and v but not o (transformers' modeling_qwen2); sliding-window attention only with
// use_sliding_window, from layer max_window_layers on. Qwen2.5-Coder-7B's config sets it false: every
// layer attends to the whole context.
TEST(HfConfig, Qwen2BiasesAndOptionalSlidingWindow) {
  const Architecture a = load_model("qwen2.5-coder-7b");
  EXPECT_TRUE(a.attention_bias);
  EXPECT_FALSE(a.attention_out_bias);
  for (const auto& l : a.layer_specs) EXPECT_EQ(l.sliding_window, 0);
  nlohmann::json c = load_model_config("qwen2.5-coder-7b");
  c["use_sliding_window"] = true;
  c["max_window_layers"] = 20;
  c["sliding_window"] = 4096;
  const Architecture s = parse_hf_config(c, "swa.json");
  EXPECT_EQ(s.layer_specs[19].sliding_window, 0);
  EXPECT_EQ(s.layer_specs[20].sliding_window, 4096);
}

}  // namespace
}  // namespace moesim::model
