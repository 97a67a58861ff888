// Tests of model architectures: parameter counts of every zoo model against the counts computed from the
// dimensions in shared/data/model_configs.json ("computed_params") and against the published figures,
// per-expert bytes, KV-cache bytes, layer layouts, the Hugging Face config parser's errors, precisions
// and load_model(). Expected values are hand-derived from models_and_routing.md §A.1–A.4.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"

namespace moesim::model {
namespace {

/// The zoo ids, in zoo() order.
const std::vector<std::string> kZooIds = {
    "mixtral-8x7b",    "mixtral-8x22b",      "tinymistral-6x248m", "dbrx-instruct", "qwen3-30b-a3b",
    "qwen3-235b-a22b", "qwen3-next-80b-a3b", "qwen3.5-397b-a17b",  "deepseek-v3",   "kimi-k2",
    "glm-4.5",         "gpt-oss-20b",        "gpt-oss-120b",       "olmoe-1b-7b",   "llama-3.1-8b",
    "llama-3.1-70b",   "llama-3.1-405b",     "qwen2.5-coder-7b",
};

/// How a computed count meets a published figure.
enum class Match {
  Within1Pct,  ///< |computed − published| <= 1% of published
  Rounds,      ///< computed rounded at the printed precision equals the figure ("36B" for 36.47B)
  Truncates,   ///< computed truncated at the printed precision equals the figure ("37B" for 37.55B)
  None,
};

/// The first rule that holds, tried in the order above.
Match classify(double computed, double published, int digits) {
  if (std::abs(computed - published) <= 0.01 * published) return Match::Within1Pct;
  // One unit in the last printed digit: "3.3B" (2 digits) -> 1e8; "1T" (1 digit) -> 1e12.
  const double step = std::pow(10.0, std::floor(std::log10(published)) - digits + 1);
  const auto same = [&](double x) { return std::abs(x - published) <= 1e-9 * published; };
  if (same(std::round(computed / step) * step)) return Match::Rounds;
  if (same(std::floor(computed / step) * step)) return Match::Truncates;
  return Match::None;
}

struct Expected {
  const char* id;
  std::int64_t total;         ///< model_configs.json computed_params.total
  std::int64_t active;        ///< model_configs.json computed_params.active_incl_embed_and_lm_head
  std::int64_t expert_bytes;  ///< model_configs.json bytes_per_routed_expert_bf16 (0: dense)
  std::int64_t kv_per_token;  ///< kv_cache_bytes_per_token_bf16 total, over every attention layer
  bool has_published;
  Match total_match;   ///< rule the published total meets
  Match active_match;  ///< rule the published active figure meets (under the entry's convention)
};

// Which models need which rule (published figures printed with few significant digits):
//  - Rounds: dbrx active (36.47B -> "36B"), qwen3.5 active (17.35B -> "17B"), kimi-k2 total (1026.4B ->
//    "1T"), olmoe active (1.282B -> "1.3B").
//  - Truncates: qwen3-30b-a3b active (3.353B -> "3.3B"), qwen3-next active (3.875B -> "3B", the A3B of
//    its name), deepseek-v3 active (37.55B -> "37B"), kimi-k2 active (32.86B -> "32B"). These four meet
//    neither the 1% rule nor the rounding rule under their documented convention (embedding and LM head
//    included, §A.3); their authors print the figure truncated. No convention was changed to hit them.
//  - tinymistral-6x248m has no published figure (its card states none).
// gpt-oss KV: every layer caches 2·8·64·2 = 2048 B per token (sliding layers included; they stop at 128
// tokens, see GptOssAlternatesSlidingAndFullLayers).
const std::vector<Expected> kExpected = {
    {"mixtral-8x7b", 46702792704, 12879925248, 352321536, 131072, true, Match::Within1Pct, Match::Within1Pct},
    {"mixtral-8x22b", 140620634112, 39152031744, 603979776, 229376, true, Match::Within1Pct, Match::Within1Pct},
    {"tinymistral-6x248m", 1003072512, 399092736, 25165824, 12288, false, Match::None, Match::None},
    {"dbrx-instruct", 131596523520, 36469708800, 396361728, 163840, true, Match::Within1Pct, Match::Rounds},
    {"qwen3-30b-a3b", 30532122624, 3353032704, 9437184, 98304, true, Match::Within1Pct, Match::Truncates},
    {"qwen3-235b-a22b", 235093634560, 22190763520, 37748736, 192512, true, Match::Within1Pct, Match::Within1Pct},
    {"qwen3-next-80b-a3b", 79674391296, 3874929408, 6291456, 24576, true, Match::Within1Pct, Match::Truncates},
    {"qwen3.5-397b-a17b", 396346350336, 17349040896, 25165824, 30720, true, Match::Within1Pct, Match::Rounds},
    {"deepseek-v3", 671026419200, 37552297472, 88080384, 70272, true, Match::Within1Pct, Match::Truncates},
    {"kimi-k2", 1026408232448, 32861500928, 88080384, 70272, true, Match::Rounds, Match::Truncates},
    {"glm-4.5", 352797829024, 33632266144, 47185920, 376832, true, Match::Within1Pct, Match::Within1Pct},
    {"gpt-oss-20b", 20914757184, 4187440704, 49783680, 24 * 2048, true, Match::Within1Pct, Match::Within1Pct},
    {"gpt-oss-120b", 116829156672, 5711982912, 49783680, 36 * 2048, true, Match::Within1Pct, Match::Within1Pct},
    {"olmoe-1b-7b", 6919161856, 1282017280, 12582912, 131072, true, Match::Within1Pct, Match::Rounds},
    {"llama-3.1-8b", 8030261248, 8030261248, 0, 131072, true, Match::Within1Pct, Match::Within1Pct},
    {"llama-3.1-70b", 70553706496, 70553706496, 0, 327680, true, Match::Within1Pct, Match::Within1Pct},
    {"llama-3.1-405b", 405853388800, 405853388800, 0, 516096, true, Match::Within1Pct, Match::Within1Pct},
    // Qwen2.5-Coder-7B: 2·152064·3584 embedding and head + 28 × (q,k,v,o with q/k/v biases + 3·3584·18944
    // + 2 norms) + the final norm; KV 2·4·128·2 B × 28 layers.
    {"qwen2.5-coder-7b", 7615616512, 7615616512, 0, 57344, true, Match::Within1Pct, Match::Within1Pct},
};

const char* name(Match m) {
  switch (m) {
    case Match::Within1Pct:
      return "within 1%";
    case Match::Rounds:
      return "rounds to it";
    case Match::Truncates:
      return "truncates to it";
    case Match::None:
      return "no match";
  }
  return "?";
}

using moesim::test::user_error;

/// A small valid Mixtral config (TinyMistral's dimensions) for the parser tests.
nlohmann::json tiny_mixtral() {
  return {{"model_type", "mixtral"},   {"hidden_size", 1024},         {"num_hidden_layers", 12},
          {"num_attention_heads", 32}, {"num_key_value_heads", 8},    {"intermediate_size", 4096},
          {"num_local_experts", 6},    {"num_experts_per_tok", 2},    {"vocab_size", 32005},
          {"sliding_window", nullptr}, {"tie_word_embeddings", false}};
}

// ---- Zoo -------------------------------------------------------------------------------------------------

// Scenario: list the zoo. Expectation: exactly the 17 ids of the brief, family by family.
TEST(Zoo, HasTheEighteenModelsInOrder) { EXPECT_EQ(zoo_ids(), kZooIds); }

// Scenario: every zoo entry came through parse_hf_config. Expectation: its family is the config's
// model_type, it has one LayerSpec per layer, names and sources are filled.
TEST(Zoo, EntriesAreParsedConfigs) {
  for (const Architecture& a : zoo()) {
    SCOPED_TRACE(a.id);
    EXPECT_FALSE(a.name.empty());
    EXPECT_FALSE(a.hf_repo.empty());
    EXPECT_FALSE(a.source.empty());
    EXPECT_FALSE(a.family.empty());
    EXPECT_EQ(static_cast<std::int64_t>(a.layer_specs.size()), a.layers);
  }
  EXPECT_EQ(load_model("kimi-k2").family, "kimi_k2");
  EXPECT_EQ(load_model("qwen3.5-397b-a17b").family, "qwen3_5_moe");
  EXPECT_EQ(load_model("dbrx-instruct").family, "dbrx");
}

// Scenario: published figures are parsed from strings. Expectation: "46.7B" -> 46.7e9 with 3 significant
// digits, "1T" -> 1e12 with 1, "3.3B" -> 3.3e9 with 2; TinyMistral has none.
TEST(Zoo, PublishedFiguresKeepTheirPrintedDigits) {
  const auto mixtral = load_model("mixtral-8x7b");
  ASSERT_TRUE(mixtral.published);
  EXPECT_DOUBLE_EQ(mixtral.published->total, 46.7e9);
  EXPECT_EQ(mixtral.published->total_digits, 3);
  const auto kimi = load_model("kimi-k2");
  ASSERT_TRUE(kimi.published);
  EXPECT_DOUBLE_EQ(kimi.published->total, 1e12);
  EXPECT_EQ(kimi.published->total_digits, 1);
  const auto qwen = load_model("qwen3-30b-a3b");
  ASSERT_TRUE(qwen.published);
  EXPECT_DOUBLE_EQ(qwen.published->active, 3.3e9);
  EXPECT_EQ(qwen.published->active_digits, 2);
  EXPECT_FALSE(load_model("tinymistral-6x248m").published);
  // §A.3 conventions: gpt-oss leaves out the input embedding, GLM both embedding and head.
  EXPECT_EQ(load_model("gpt-oss-120b").published->active_convention, "excl_embedding");
  EXPECT_EQ(load_model("glm-4.5").published->active_convention, "excl_embedding_and_head");
  EXPECT_EQ(load_model("deepseek-v3").published->active_convention, "incl_embedding_and_head");
}

// Scenario: an unknown id. Expectation: UserError naming it, a suggestion for a near miss, the valid ids,
// and the hint to give a config.json path.
TEST(Zoo, UnknownIdListsTheValidIds) {
  const std::string msg = user_error([] { (void)load_model("dbrx"); });
  EXPECT_NE(msg.find("unknown model 'dbrx'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'dbrx-instruct'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama-3.1-405b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("or give a path to a Hugging Face config.json"), std::string::npos) << msg;
}

// Scenario: a .json path that does not exist. Expectation: UserError "no such file" naming the path.
TEST(Zoo, MissingConfigFileIsNoSuchFile) {
  const std::string msg = user_error([] { (void)load_model("no/such/dir/config.json"); });
  EXPECT_NE(msg.find("no/such/dir/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
}

// Scenario: a user's config.json on disk (TinyMistral's dimensions). Expectation: load_model parses it
// and the count equals the zoo's TinyMistral, 1,003,072,512 parameters; the id is the path.
TEST(Zoo, LoadsAConfigFileFromDisk) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "moesim_arch_test";
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "config.json";
  {
    std::ofstream out(file);
    out << tiny_mixtral().dump(2);
  }
  const Architecture a = load_model(file.string());
  EXPECT_EQ(a.id, file.string());
  EXPECT_EQ(parameter_counts(a).total(), 1003072512);
  // A snapshot folder works too: its config.json is read.
  EXPECT_EQ(parameter_counts(load_model(dir.string())).total(), 1003072512);
  std::filesystem::remove_all(dir);
}

// ---- Architecture: counts for every zoo model ------------------------------------------------------------

// Scenario: every zoo model's total and active parameters. Expectation: exactly model_configs.json's
// computed_params (§A.3 formulas on the config dimensions).
TEST(Architecture, ParameterCountsEqualModelConfigs) {
  ASSERT_EQ(kExpected.size(), zoo().size());
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.id);
    const Architecture a = load_model(e.id);
    EXPECT_EQ(parameter_counts(a).total(), e.total);
    EXPECT_EQ(active_parameters(a), e.active);
    EXPECT_EQ(active_parameters(a, "incl_embedding_and_head"), e.active);
  }
}

// Scenario: computed counts against the published figures, active counted under each model's convention.
// Expectation: the rule listed in kExpected (within 1%, or rounds/truncates at the printed precision).
TEST(Architecture, ParameterCountsMeetPublishedFigures) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.id);
    const Architecture a = load_model(e.id);
    ASSERT_EQ(a.published.has_value(), e.has_published);
    if (!a.published) continue;
    const auto& p = *a.published;
    const auto total = static_cast<double>(parameter_counts(a).total());
    const auto active = static_cast<double>(active_parameters(a, p.active_convention));
    EXPECT_STREQ(name(classify(total, p.total, p.total_digits)), name(e.total_match))
        << "total " << total << " vs published " << p.total;
    EXPECT_STREQ(name(classify(active, p.active, p.active_digits)), name(e.active_match))
        << "active " << active << " vs published " << p.active;
  }
}

// Scenario: the conventions of §A.3 on gpt-oss-120b and GLM-4.5. Expectation: gpt-oss excl_embedding =
// 5,711,982,912 − 201088·2880 = 5,132,849,472 ("5.13B"); GLM excl both = 33,632,266,144 − 2·151552·5120 =
// 32,080,373,664 ("32B"). An unknown convention is a UserError.
TEST(Architecture, ActiveParameterConventions) {
  EXPECT_EQ(active_parameters(load_model("gpt-oss-120b"), "excl_embedding"), 5132849472);
  EXPECT_EQ(active_parameters(load_model("glm-4.5"), "excl_embedding_and_head"), 32080373664);
  const std::string msg = user_error([] { (void)active_parameters(load_model("glm-4.5"), "no_embedding"); });
  EXPECT_NE(msg.find("excl_embedding_and_head"), std::string::npos) << msg;
}

// Scenario: per-expert parameters and bf16 bytes. Expectation: model_configs.json
// bytes_per_routed_expert_bf16 = 2·3·h·I (gpt-oss: + 2·(2I + h) bias bytes), e.g. DBRX 6·6144·10752 =
// 396,361,728; dense Llama 0.
TEST(Precision, RoutedExpertBytesBf16MatchModelConfigs) {
  const Precision& bf16 = precision("bf16");
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.id);
    const Architecture a = load_model(e.id);
    EXPECT_DOUBLE_EQ(routed_expert_bytes(a, bf16).base(), static_cast<double>(e.expert_bytes));
    EXPECT_EQ(2 * params_per_routed_expert(a), e.expert_bytes);
  }
}

// Scenario: KV-cache bytes one token adds, bf16. Expectation: model_configs.json kv_cache_bytes_per_token
// totals, e.g. Mixtral-8x7B 32 layers · 2·8·128·2 B = 131,072; DeepSeek-V3 61 · (512+64)·2 = 70,272;
// Qwen3-Next only its 12 full layers, 12 · 2048 = 24,576.
TEST(Architecture, KvBytesPerTokenMatchModelConfigs) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.id);
    EXPECT_DOUBLE_EQ(kv_bytes_per_token(load_model(e.id)).base(), static_cast<double>(e.kv_per_token));
  }
  // fp8 KV halves it.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(load_model("mixtral-8x7b"), 1.0).base(), 65536.0);
}

// Scenario: the identity of the component split. Expectation: total = per-layer non-expert weights +
// routed experts + embedding + LM head + final norm (h).
TEST(Architecture, ComponentsAddUp) {
  for (const Architecture& a : zoo()) {
    SCOPED_TRACE(a.id);
    const ComponentParams c = parameter_counts(a);
    EXPECT_EQ(c.total(), non_expert_layer_params(a) + c.routed_experts + c.embedding + c.lm_head + a.hidden);
    EXPECT_EQ(c.routed_experts, moe_layer_count(a) * a.routed_experts * params_per_routed_expert(a));
  }
}

// ---- Architecture: layer layouts ---------------------------------------------------------------------------

// Scenario: DBRX's nested config (d_model/n_heads/n_layers, attn_config, ffn_config). Expectation: 40 MoE
// layers, 48 q / 8 kv heads of 128 (= 6144/48), 16 experts top-4 of 10752.
TEST(Architecture, DbrxLayerCounts) {
  const Architecture a = load_model("dbrx-instruct");
  EXPECT_EQ(a.layers, 40);
  EXPECT_EQ(moe_layer_count(a), 40);
  EXPECT_EQ(a.heads, 48);
  EXPECT_EQ(a.kv_heads, 8);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.routed_experts, 16);
  EXPECT_EQ(a.top_k, 4);
  EXPECT_EQ(a.expert_ffn, 10752);
  EXPECT_EQ(a.max_context, 32768);
}

// Scenario: gpt-oss-120b layer_types. Expectation (§A.2): even layers slide over 128 tokens, odd layers are
// full; at 4096 tokens the KV cache is 18·2048·4096 + 18·2048·128 = 155,713,536 B.
TEST(Architecture, GptOssAlternatesSlidingAndFullLayers) {
  const Architecture a = load_model("gpt-oss-120b");
  ASSERT_EQ(a.layer_specs.size(), 36u);
  for (std::size_t i = 0; i < a.layer_specs.size(); ++i) {
    EXPECT_EQ(a.layer_specs[i].sliding_window, i % 2 == 0 ? 128 : 0) << "layer " << i;
    EXPECT_EQ(a.layer_specs[i].attention, AttentionType::Gqa);
  }
  EXPECT_DOUBLE_EQ(kv_bytes_at_context(a, 4096).base(), 155713536.0);
  // Below the window every layer holds every token: 36 · 2048 · 100.
  EXPECT_DOUBLE_EQ(kv_bytes_at_context(a, 100).base(), 36.0 * 2048 * 100);
}

// Scenario: Qwen3-Next (flat config, full_attention_interval 4). Expectation: 36 Gated DeltaNet + 12 full
// layers, full at i % 4 == 3; recurrent state 36 · (32·128·128 + 8192·3) · 4 B = 79,036,416 (§A.4).
TEST(Architecture, Qwen3NextHas36LinearAnd12FullLayers) {
  const Architecture a = load_model("qwen3-next-80b-a3b");
  int linear = 0, full = 0;
  for (std::size_t i = 0; i < a.layer_specs.size(); ++i) {
    const bool is_full = a.layer_specs[i].attention == AttentionType::Gqa;
    EXPECT_EQ(is_full, i % 4 == 3) << "layer " << i;
    (is_full ? full : linear) += 1;
    EXPECT_TRUE(a.layer_specs[i].moe);
  }
  EXPECT_EQ(linear, 36);
  EXPECT_EQ(full, 12);
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(a).base(), 79036416.0);
  EXPECT_EQ(a.shared_experts, 1);
  EXPECT_EQ(a.shared_ffn, 512);
}

// Scenario: Qwen3.5 (fields under text_config, explicit layer_types). Expectation: 45 Gated DeltaNet + 15
// full layers; recurrent state 45 · (64·128·128 + 12288·3) · 4 B = 195,379,200 (flash-moe's buffers).
TEST(Architecture, Qwen35Has45LinearAnd15FullLayers) {
  const Architecture a = load_model("qwen3.5-397b-a17b");
  int linear = 0, full = 0;
  for (const LayerSpec& l : a.layer_specs) (l.attention == AttentionType::GatedDeltaNet ? linear : full) += 1;
  EXPECT_EQ(linear, 45);
  EXPECT_EQ(full, 15);
  EXPECT_EQ(a.hidden, 4096);
  EXPECT_EQ(a.vocab, 248320);
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(a).base(), 195379200.0);
}

// Scenario: DeepSeek-V3 first_k_dense_replace 3. Expectation: layers 0–2 dense (FFN 18432), 58 MoE
// layers, all MLA.
TEST(Architecture, DeepSeekV3FirstThreeLayersAreDense) {
  const Architecture a = load_model("deepseek-v3");
  for (std::size_t i = 0; i < a.layer_specs.size(); ++i) {
    EXPECT_EQ(a.layer_specs[i].moe, i >= 3) << "layer " << i;
    EXPECT_EQ(a.layer_specs[i].attention, AttentionType::Mla);
  }
  EXPECT_EQ(moe_layer_count(a), 58);
  EXPECT_EQ(a.dense_ffn, 18432);
  EXPECT_EQ(a.mla.q_lora_rank, 1536);
  // Kimi-K2 has a single leading dense layer (§A.2).
  EXPECT_EQ(moe_layer_count(load_model("kimi-k2")), 60);
}

// Scenario: attention FLOPs of one token at context 1000. Expectation (§A.4): Mixtral-8x7B 32 · 4·32·128·1000
// = 524,288,000; DeepSeek-V3 61 · (2·128·576 + 2·128·512)·1000 = 16,990,208,000; Qwen3-Next only its 12 full
// layers, 12 · 4·16·256·1000 = 196,608,000; gpt-oss-20b 12 full · 4·64·64·1000 + 12 sliding · 4·64·64·128.
TEST(Architecture, AttentionContextFlops) {
  EXPECT_DOUBLE_EQ(attention_context_flops(load_model("mixtral-8x7b"), 1000).base(), 524288000.0);
  EXPECT_DOUBLE_EQ(attention_context_flops(load_model("deepseek-v3"), 1000).base(), 16990208000.0);
  EXPECT_DOUBLE_EQ(attention_context_flops(load_model("qwen3-next-80b-a3b"), 1000).base(), 196608000.0);
  EXPECT_DOUBLE_EQ(attention_context_flops(load_model("gpt-oss-20b"), 1000).base(),
                   12.0 * 4 * 64 * 64 * 1000 + 12.0 * 4 * 64 * 64 * 128);
}

// ---- Precision -----------------------------------------------------------------------------------------------

// Scenario: a Qwen3.5-397B expert in MLX 4- and 2-bit (§A.2, flash-moe expert_index.json). Expectation:
// 3 matrices of 1024·4096 weights + 1024·64 groups · 4 B of scale and bias each: q4 7,077,888 B,
// q2 3,932,160 B, exactly.
TEST(Precision, FlashMoeQwen35ExpertBytes) {
  const Architecture a = load_model("qwen3.5-397b-a17b");
  EXPECT_DOUBLE_EQ(routed_expert_bytes(a, precision("q4")).base(), 7077888.0);
  EXPECT_DOUBLE_EQ(routed_expert_bytes(a, precision("q2")).base(), 3932160.0);
}

// Scenario: the other formats on known shapes. Expectation: int8 4096x4096 = 16,777,216 + 4096 rows · 2 B
// = 16,785,408; mxfp4 1024 weights = 1024·4/8 + 32 blocks · 1 B = 544 (4.25 bits/weight); fp8 1 B/weight;
// gpt-oss expert in mxfp4 = 3·2880²·4.25/8 + (2·2880 + 2880)·2 B = 13,236,480.
TEST(Precision, MatrixBytesPerFormat) {
  EXPECT_DOUBLE_EQ(matrix_bytes(4096, 4096, precision("int8")).base(), 16785408.0);
  EXPECT_DOUBLE_EQ(matrix_bytes(1, 1024, precision("mxfp4")).base(), 544.0);
  EXPECT_DOUBLE_EQ(matrix_bytes(10, 100, precision("fp8")).base(), 1000.0);
  EXPECT_DOUBLE_EQ(matrix_bytes(10, 100, precision("fp32")).base(), 4000.0);
  EXPECT_DOUBLE_EQ(param_bytes(1024, precision("mxfp4")).base(), 544.0);
  EXPECT_DOUBLE_EQ(param_bytes(640, precision("q4")).base(), 640 * 4.5 / 8);
  EXPECT_DOUBLE_EQ(routed_expert_bytes(load_model("gpt-oss-120b"), precision("mxfp4")).base(), 13236480.0);
  // A partial last group still stores its scale: 65 columns at q4 are 2 groups.
  EXPECT_DOUBLE_EQ(matrix_bytes(1, 65, precision("q4")).base(), (65 * 4 + 2 * 32) / 8.0);
}

// GGUF block types: a matrix of whole blocks takes blocks × sizeof(block), the sizes ggml's
// static_asserts fix (ggml/src/ggml-common.h): one row of 256 weights is one k-quant super-block or 8
// legacy blocks of 32.
TEST(Precision, GgufBlocksHaveGgmlSizes) {
  const std::vector<std::pair<const char*, double>> block_bytes_per_256 = {
      {"q8_0", 8 * 34}, {"q4_0", 8 * 18},   {"q4_1", 8 * 20},   {"q5_0", 8 * 22},    {"q5_1", 8 * 24},
      {"q2_k", 84},     {"q3_k", 110},      {"q4_k", 144},      {"q5_k", 176},       {"q6_k", 210},
      {"iq1_s", 50},    {"iq1_m", 56},      {"iq2_xxs", 66},    {"iq2_xs", 74},      {"iq2_s", 82},
      {"iq3_xxs", 98},  {"iq3_s", 110},     {"iq4_nl", 8 * 18}, {"iq4_xs", 136}};
  for (const auto& [name, bytes] : block_bytes_per_256) {
    EXPECT_DOUBLE_EQ(matrix_bytes(3, 256, precision(name)).base(), 3 * bytes) << name;
    EXPECT_DOUBLE_EQ(param_bytes(768, precision(name)).base(), 3 * bytes) << name;
  }
}

// Scenario: the registry. Expectation: the first nine names, each described and sourced; an unknown name is a
// UserError that suggests the near miss and lists the valid names.
TEST(Precision, RegistryAndUnknownName) {
  std::vector<std::string> names;
  for (const Precision& p : precisions()) {
    names.push_back(p.name);
    EXPECT_FALSE(p.description.empty()) << p.name;
    EXPECT_FALSE(p.source.empty()) << p.name;
  }
  const std::vector<std::string> first = {"bf16", "fp16", "fp32", "fp8", "int8", "q4", "q2", "mxfp4", "nvfp4"};
  ASSERT_GE(names.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(first.size())), first);
  EXPECT_EQ(&precision("Q4_K"), &precision("q4_k"));  // GGUF's spelling
  const std::string msg = user_error([] { (void)precision("bf61"); });
  EXPECT_NE(msg.find("did you mean 'bf16'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mxfp4"), std::string::npos) << msg;
}

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
  for (const char* t : {"mixtral", "dbrx", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "deepseek_v3", "kimi_k2",
                        "glm4_moe", "gpt_oss", "olmoe", "llama", "qwen2", "qwen2_moe", "qwen3", "deepseek_v2",
                        "deepseek_v32", "llama4", "llama4_text", "qwen3_vl_moe", "minimax_m2",
                        "glm4_moe_lite", "glm_moe_dsa", "hunyuan_v1_moe", "hunyuan", "nemotron_h"}) {
    EXPECT_NE(msg.find(t), std::string::npos) << t << " missing from: " << msg;
  }
  EXPECT_EQ(supported_families().size(), 25u);
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

}  // namespace
}  // namespace moesim::model

namespace moesim::model {
namespace {

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

namespace moesim::model {
namespace {

// Scenario: quantization_config in config.json. Expectation: gpt-oss is sized as released (experts MXFP4,
// the rest bf16), DeepSeek-V3 as FP8, a 4-bit group-128 AWQ config as int4_g128; a config without one is
// bf16; an explicit name overrides it; a quant_method moesim does not size is refused naming the field.
TEST(Precision, CheckpointFormatFromQuantizationConfig) {
  EXPECT_EQ(precision_for("checkpoint", load_model("gpt-oss-120b")).name, "mxfp4/bf16");
  EXPECT_EQ(precision_for("checkpoint", load_model("deepseek-v3")).name, "fp8");
  EXPECT_EQ(precision_for("checkpoint", load_model("mixtral-8x7b")).name, "bf16");
  EXPECT_EQ(precision_for("q8_0", load_model("gpt-oss-120b")).name, "q8_0");
  nlohmann::json config = load_model_config("qwen3-30b-a3b");
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}};
  EXPECT_EQ(precision_for("checkpoint", parse_hf_config(config, "awq.json")).name, "int4_g128");
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
  try {
    (void)precision_for("checkpoint", parse_hf_config(config, "bnb.json"));
    FAIL() << "an unknown quant_method was sized";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bnb.json: quantization_config.quant_method is \"bitsandbytes\""),
              std::string::npos)
        << e.what();
  }
  // AWQ/GPTQ group-128 int4: 4 bits plus 20 bits per 128 weights.
  EXPECT_DOUBLE_EQ(matrix_bytes(1, 128, precision("int4_g128")).base(), (128 * 4 + 20) / 8.0);
}

}  // namespace
}  // namespace moesim::model

namespace moesim::model {
namespace {

// ---- Real config.json files of the families added for issue 21 (tests/data/hf_configs, sources in its README)

/// One real config, its exact counts (§A.3 formulas) and the model card's published figures.
struct RealConfig {
  const char* dir;     ///< tests/data/hf_configs/<dir>/config.json
  const char* family;  ///< the model_type it is read as
  std::int64_t total;  ///< computed total parameters
  std::int64_t active;  ///< computed active parameters, embedding and LM head included
  double published_total;
  int total_digits;
  double published_active;  ///< 0: no published figure the count can be checked against
  int active_digits;
  const char* convention;  ///< what the published active figure counts (§A.3)
  Match total_match;
  Match active_match;
};

// Published figures (each card quoted in tests/data/hf_configs/README.md):
//  - Qwen1.5-MoE-A2.7B card: "14.3B parameters in total and 2.7B activated parameters".
//  - Qwen2-57B-A14B card and name: 57B total, 14B activated (A14B). Computed active 14.25B is 1.8% above:
//    the shared expert (3·3584·20480 = 220M per layer) is active for every token, and Qwen prints the
//    figure rounded to two digits (as "A3B" for Qwen3-30B-A3B's 3.35B, kExpected above).
//  - Qwen3-0.6B card: 0.6B (non-embedding 0.44B); Qwen3-8B card: 8.2B (non-embedding 6.95B). Dense.
//  - DeepSeek-V2-Lite: 15.7B total, 2.4B activated (DeepSeek-V2 paper arXiv:2405.04434 appendix B; the card
//    rounds to "16B total params, 2.4B active params"). The 2.4B leaves out the input embedding: counted
//    with it, active is 2.66B (11% over); without it, 2.45B, which DeepSeek prints truncated (as 37B for
//    DeepSeek-V3's 37.55B).
//  - DeepSeek-V3.2: the DeepSeek-V3 card's 671B total; V3.2 is V3's architecture plus the lightning
//    indexer, 61 × 13,959,424 = 851,524,864 parameters more (checked exactly in DeepSeekV32AddsTheIndexer).
//    No active figure is checked: the V3 card's 37B does not count the indexer.
//  - Llama 4 Scout card (https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E): 17B activated, 109B
//    total. moesim counts the text model, 107.77B: the card's total also holds the vision encoder (34 layers
//    of width 1408 with MLPs of 5632, ≈ 0.81B, plus its adapter and projector) that moesim does not model,
//    so the total is 1.1% under and meets no rule; text model + encoder ≈ 108.6B would. Active 17.17B
//    (embedding and head included) rounds to 17B.
//  - Llama 4 Maverick card (https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E): 17B activated,
//    400B total. Text model 400.71B (its vision encoder is Scout's size, 0.2% here); active 17.18B.
//  - Qwen3-VL-30B-A3B-Instruct: the name's 30B total and A3B (3B activated). Its text model has
//    Qwen3-30B-A3B's shape (30.53B, 3.35B, the zoo entry's counts): Qwen prints 30.5 as "30B" and 3.35 as
//    "A3B", as for Qwen3-30B-A3B (kExpected above).
//  - MiniMax-M2.5: M2's architecture (https://huggingface.co/MiniMaxAI/MiniMax-M2: "230 billion total
//    parameters with 10 billion active parameters"). Total 228.69B; the active 10B leaves out embedding and
//    LM head (9.80B without them, 11.03B with), as MiniMax's M2.5 report's 229.9B / 9.8B shows.
//  - GLM-4.7-Flash card (https://huggingface.co/zai-org/GLM-4.7-Flash): "a 30B-A3B MoE model". Total 29.94B;
//    active 3.90B with embedding and head (3.58B without), which the "A3B" truncates, as Qwen's names do.
//  - Hunyuan-A13B (its release README): "a total of 80 billion parameters with 13 billion active parameters".
//    Total 80.39B (tied embedding); active 12.75B with the embedding (12.22B without), which Tencent rounds
//    to 13B: it meets neither 1% (−1.9%) nor any other convention. No count was changed to hit it.
//  - GLM-5 technical report (arXiv:2602.15763, table 1): 744B total, 40B activated. Total 743.91B; active
//    39.88B without embedding and LM head, GLM's convention (as for GLM-4.5, kExpected above).
//  - Nemotron 3 Nano (NVIDIA's Nemotron 3 page): "a 3.2B active (3.6B with embeddings), 31.6B total parameter
//    model". Total 31.58B; active 3.58B with embedding and LM head; 3.23B without the input embedding
//    (checked in NemotronHBlocksAndMamba2State).
const std::vector<RealConfig> kRealConfigs = {
    {"qwen1.5-moe-a2.7b", "qwen2_moe", 14315784192, 2689173504, 14.3e9, 3, 2.7e9, 2, "incl_embedding_and_head",
     Match::Within1Pct, Match::Within1Pct},
    {"qwen2-57b-a14b", "qwen2_moe", 57408658944, 14249270784, 57e9, 2, 14e9, 2, "incl_embedding_and_head",
     Match::Within1Pct, Match::Rounds},
    {"qwen3-0.6b", "qwen3", 596049920, 596049920, 0.6e9, 1, 0.6e9, 1, "incl_embedding_and_head", Match::Within1Pct,
     Match::Within1Pct},
    {"qwen3-8b", "qwen3", 8190735360, 8190735360, 8.2e9, 2, 8.2e9, 2, "incl_embedding_and_head", Match::Within1Pct,
     Match::Within1Pct},
    {"deepseek-v2-lite", "deepseek_v2", 15706484224, 2661150208, 15.7e9, 3, 2.4e9, 2, "excl_embedding",
     Match::Within1Pct, Match::Truncates},
    {"deepseek-v3.2", "deepseek_v32", 671877944064, 38403822336, 671e9, 3, 0, 0, "incl_embedding_and_head",
     Match::Within1Pct, Match::None},
    {"llama-4-scout-17b-16e", "llama4", 107769861120, 17172894720, 109e9, 3, 17e9, 2, "incl_embedding_and_head",
     Match::None, Match::Rounds},
    {"llama-4-maverick-17b-128e", "llama4", 400711848960, 17184691200, 400e9, 3, 17e9, 2, "incl_embedding_and_head",
     Match::Within1Pct, Match::Rounds},
    {"qwen3-vl-30b-a3b", "qwen3_vl_moe", 30532122624, 3353032704, 30e9, 2, 3e9, 1, "incl_embedding_and_head",
     Match::Truncates, Match::Rounds},
    {"minimax-m2.5", "minimax_m2", 228689764864, 11030553088, 230e9, 3, 10e9, 2, "excl_embedding_and_head",
     Match::Within1Pct, Match::Rounds},
    {"glm-4.7-flash", "glm4_moe_lite", 29943393920, 3896766080, 30e9, 2, 3e9, 1, "incl_embedding_and_head",
     Match::Within1Pct, Match::Truncates},
    {"hunyuan-a13b", "hunyuan", 80393183232, 12747448320, 80e9, 2, 13e9, 2, "incl_embedding_and_head",
     Match::Within1Pct, Match::Rounds},
    {"glm-5", "glm_moe_dsa", 743911218432, 41784728832, 744e9, 3, 40e9, 2, "excl_embedding_and_head",
     Match::Within1Pct, Match::Within1Pct},
    {"nemotron-3-nano-30b-a3b", "nemotron_h", 31577940288, 3580076352, 31.6e9, 3, 3.6e9, 2,
     "incl_embedding_and_head", Match::Within1Pct, Match::Within1Pct},
};

std::string real_config_path(const char* dir) {
  return std::string(MOESIM_SOURCE_DIR) + "/tests/data/hf_configs/" + dir + "/config.json";
}

// Scenario: each real config of a newly supported family, read from its file. Expectation: the family, the
// exact counts (hand check for Qwen1.5-MoE-A2.7B: 24 layers × (attention 4·2048² + 3·2048 biases, norms
// 2·2048, router 2048·60, experts 60·3·2048·1408, shared 3·2048·5632 + 2048 gate) = 24 × 570,560,512,
// + 2·151936·2048 + 2048 = 14,315,784,192), and the published figure met by the listed rule.
TEST(HfConfig, RealConfigsOfNewFamiliesMeetTheirCards) {
  for (const RealConfig& r : kRealConfigs) {
    SCOPED_TRACE(r.dir);
    const Architecture a = load_model(real_config_path(r.dir));
    EXPECT_EQ(a.family, r.family);
    EXPECT_EQ(a.name.rfind(r.dir, 0), 0u) << a.name;  // named by its folder
    EXPECT_EQ(parameter_counts(a).total(), r.total);
    EXPECT_EQ(active_parameters(a), r.active);
    const auto total = static_cast<double>(parameter_counts(a).total());
    EXPECT_STREQ(name(classify(total, r.published_total, r.total_digits)), name(r.total_match))
        << "total " << total << " vs published " << r.published_total;
    if (r.published_active > 0) {
      const auto active = static_cast<double>(active_parameters(a, r.convention));
      EXPECT_STREQ(name(classify(active, r.published_active, r.active_digits)), name(r.active_match))
          << "active " << active << " vs published " << r.published_active;
    }
  }
}

// Scenario: the Qwen3 cards' non-embedding figures (0.6B: 0.44B tied; 8B: 6.95B untied). Expectation:
// total minus embedding and LM head within 1%: 596,049,920 − 151936·1024 = 440,467,456;
// 8,190,735,360 − 2·151936·4096 = 6,946,075,648.
TEST(HfConfig, Qwen3NonEmbeddingCounts) {
  EXPECT_EQ(active_parameters(load_model(real_config_path("qwen3-0.6b")), "excl_embedding_and_head"), 440467456);
  EXPECT_EQ(active_parameters(load_model(real_config_path("qwen3-8b")), "excl_embedding_and_head"), 6946075648);
}

// Scenario: Qwen2-57B-A14B (qwen2_moe). Expectation: one gated shared expert of its own size (20480, not
// the routed 2560), q/k/v biases without an o bias, no QK norm, every layer MoE.
TEST(HfConfig, Qwen2MoeSharedExpertHasItsOwnSize) {
  const Architecture a = load_model(real_config_path("qwen2-57b-a14b"));
  EXPECT_EQ(a.shared_experts, 1);
  EXPECT_EQ(a.shared_ffn, 20480);
  EXPECT_EQ(a.expert_ffn, 2560);
  EXPECT_TRUE(a.shared_expert_gate);
  EXPECT_TRUE(a.attention_bias);
  EXPECT_FALSE(a.attention_out_bias);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_EQ(moe_layer_count(a), 28);
  // 28 × (3·3584·20480 + 3584) = 28 × 220,204,544 = 6,165,727,232.
  EXPECT_EQ(parameter_counts(a).shared_experts, 6165727232);
  // Without shared_expert_intermediate_size the reader refuses (transformers would silently use 5632).
  nlohmann::json c = json::load_file(real_config_path("qwen2-57b-a14b"));
  c.erase("shared_expert_intermediate_size");
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "q2.json"); });
  EXPECT_NE(msg.find("q2.json: $.shared_expert_intermediate_size: is missing"), std::string::npos) << msg;
}

// Scenario: DeepSeek-V2-Lite (deepseek_v2). Expectation: MLA without a q low-rank projection (q_lora_rank
// null), first_k_dense_replace 1 → layer 0 dense and 26 MoE layers, 2 shared experts of 1408, a plain
// softmax router (topk_method greedy: no e_score_correction_bias).
TEST(HfConfig, DeepSeekV2LiteLayout) {
  const Architecture a = load_model(real_config_path("deepseek-v2-lite"));
  EXPECT_EQ(a.mla.q_lora_rank, 0);
  EXPECT_EQ(a.mla.kv_lora_rank, 512);
  EXPECT_FALSE(a.layer_specs[0].moe);
  EXPECT_EQ(moe_layer_count(a), 26);
  EXPECT_EQ(a.shared_experts, 2);
  EXPECT_EQ(a.shared_ffn, 1408);
  EXPECT_FALSE(a.router_bias);
  for (const auto& l : a.layer_specs) EXPECT_EQ(l.attention, AttentionType::Mla);
}

// Scenario: DeepSeek-V3.2 against DeepSeek-V3 (the zoo entry). Expectation: the same layout, plus per layer
// the lightning indexer: wq_b 1536·64·128 + wk 7168·128 + k_norm 2·128 + weights_proj 7168·64 =
// 13,959,424; × 61 layers = 851,524,864 more in total. An indexer without a q latent is refused.
TEST(HfConfig, DeepSeekV32AddsTheIndexer) {
  const Architecture v32 = load_model(real_config_path("deepseek-v3.2"));
  const Architecture v3 = load_model("deepseek-v3");
  EXPECT_EQ(v32.mla.index_heads, 64);
  EXPECT_EQ(v32.mla.index_head_dim, 128);
  EXPECT_EQ(parameter_counts(v32).total() - parameter_counts(v3).total(), 851524864);
  EXPECT_EQ(parameter_counts(v32).attention - parameter_counts(v3).attention, 851524864);
  EXPECT_EQ(v32.checkpoint_precision, "fp8");
  nlohmann::json c = json::load_file(real_config_path("deepseek-v3.2"));
  c["q_lora_rank"] = nullptr;
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "v32.json"); });
  EXPECT_NE(msg.find("v32.json: $.q_lora_rank: is null"), std::string::npos) << msg;
}

// Scenario (issue 21): an unsupported model_type one letter from a supported one. Expectation: no "did you
// mean": qwen2_moe read as qwen3_moe would drop its shared expert. A hint comes only from the config's own
// architectures[0] when that is the class a supported family reads.
TEST(HfConfig, HintsOnlyTheSameArchitecture) {
  nlohmann::json c = json::load_file(real_config_path("qwen2-57b-a14b"));
  c["model_type"] = "qwen4_moe";
  c["architectures"] = {"Qwen4MoeForCausalLM"};
  std::string msg = user_error([&] { (void)parse_hf_config(c, "q.json"); });
  EXPECT_NE(msg.find("q.json: $.model_type: is \"qwen4_moe\", an unsupported model family"), std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("set model_type"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("qwen3_moe?"), std::string::npos) << msg;

  c.erase("architectures");
  msg = user_error([&] { (void)parse_hf_config(c, "q.json"); });
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;

  // A renamed model_type over a supported model class: that family is named, with the reason.
  c["model_type"] = "my_qwen2_moe";
  c["architectures"] = {"Qwen2MoeForCausalLM"};
  msg = user_error([&] { (void)parse_hf_config(c, "q.json"); });
  EXPECT_NE(msg.find("architectures[0] \"Qwen2MoeForCausalLM\" is the model class of model_type \"qwen2_moe\""),
            std::string::npos)
      << msg;
}

// Scenario (issue 21): a config whose _name_or_path is a leftover private path. Expectation: the displayed
// name comes from the file's path (its folder for .../<model>/config.json, else the file name), never from
// _name_or_path.
TEST(HfConfig, NameNeverComesFromNameOrPath) {
  nlohmann::json c = json::load_file(real_config_path("qwen3-8b"));
  c["_name_or_path"] = "/home/someone/private/checkpoint-3890";
  EXPECT_EQ(parse_hf_config(c, "models/qwen3-8b/config.json").name, "qwen3-8b");
  EXPECT_EQ(parse_hf_config(c, "my-model.json").name, "my-model");
  EXPECT_EQ(parse_hf_config(c, "config.json").name, "config");
}

// Scenario: a multimodal config (Qwen3.5, text fields under text_config). Expectation: read from its text
// model, and the name says so.
TEST(HfConfig, MultimodalConfigSaysItIsTheTextModel) {
  const nlohmann::json c = load_model_config("qwen3.5-397b-a17b");
  const Architecture a = parse_hf_config(c, "q35/config.json");
  EXPECT_EQ(a.name, "q35 (text model: $.text_config; the vision tower is not modelled)");
  EXPECT_EQ(parameter_counts(a).total(), parameter_counts(load_model("qwen3.5-397b-a17b")).total());
}

// Scenario: Llama 4 Scout (text_config of Llama4ForConditionalGeneration). Expectation: all 48 layers MoE
// (interleave_moe_layer_step 1), 16 experts top-1 plus one ungated shared expert of 8192; no_rope_layers
// empty, so transformers' default interval 4 makes layers 3, 7, …, 47 global (NoPE) and the other 36
// chunked at 8192 tokens; use_qk_norm adds no parameters (an L2 norm without weights).
TEST(HfConfig, Llama4ScoutLayout) {
  const Architecture a = load_model(real_config_path("llama-4-scout-17b-16e"));
  EXPECT_EQ(moe_layer_count(a), 48);
  EXPECT_EQ(a.shared_experts, 1);
  EXPECT_EQ(a.shared_ffn, 8192);
  EXPECT_FALSE(a.shared_expert_gate);
  EXPECT_FALSE(a.qk_norm);
  int chunked = 0;
  for (std::size_t i = 0; i < a.layer_specs.size(); ++i) {
    EXPECT_EQ(a.layer_specs[i].sliding_window, (i + 1) % 4 == 0 ? 0 : 8192) << "layer " << i;
    chunked += a.layer_specs[i].sliding_window > 0 ? 1 : 0;
  }
  EXPECT_EQ(chunked, 36);
  EXPECT_NE(a.name.find("text model: $.text_config"), std::string::npos) << a.name;
  // Per layer: attention 2·5120·5120 + 2·5120·1024, 17 experts' 3·5120·8192, router 5120·16, 2 norms.
  EXPECT_EQ(parameter_counts(a).total(), 48LL * (62914560 + 17 * 125829120LL + 81920 + 10240) +
                                             2LL * 202048 * 5120 + 5120);
}

// Scenario: Llama 4 with interleave_moe_layer_step 2 (Maverick's rule) as a flat llama4_text config.
// Expectation: the odd layers are MoE, the even ones dense MLPs of intermediate_size_mlp; a config that
// needs a dense layer without intermediate_size_mlp names that field.
TEST(HfConfig, Llama4InterleavedMoeLayers) {
  nlohmann::json text = json::load_file(real_config_path("llama-4-scout-17b-16e")).at("text_config");
  text["interleave_moe_layer_step"] = 2;
  const Architecture a = parse_hf_config(text, "l4.json");
  EXPECT_EQ(a.family, "llama4_text");
  EXPECT_EQ(moe_layer_count(a), 24);
  EXPECT_FALSE(a.layer_specs[0].moe);
  EXPECT_TRUE(a.layer_specs[1].moe);
  EXPECT_EQ(a.dense_ffn, 16384);
  EXPECT_EQ(parameter_counts(a).dense_ffn, 24LL * 3 * 5120 * 16384);
  text.erase("intermediate_size_mlp");
  const std::string msg = user_error([&] { (void)parse_hf_config(text, "l4.json"); });
  EXPECT_NE(msg.find("l4.json: $.intermediate_size_mlp: is missing"), std::string::npos) << msg;
}

// Scenario: Qwen3-VL-30B-A3B (qwen3_vl_moe). Expectation: its text_config read by the Qwen3-MoE reader: the
// same counts as the zoo's Qwen3-30B-A3B, and the name says only the text model is modelled.
TEST(HfConfig, Qwen3VlMoeIsItsTextModel) {
  const Architecture vl = load_model(real_config_path("qwen3-vl-30b-a3b"));
  const Architecture text = load_model("qwen3-30b-a3b");
  EXPECT_EQ(parameter_counts(vl).total(), parameter_counts(text).total());
  EXPECT_EQ(active_parameters(vl), active_parameters(text));
  EXPECT_NE(vl.name.find("the vision tower is not modelled"), std::string::npos) << vl.name;
}

// Scenario: MiniMax-M2.5 (minimax_m2). Expectation: QK norms over the whole q and k rows (per_layer: 48·128 +
// 8·128 weights per layer), a routing bias (use_routing_bias), fp8 as released; a shared expert, which no
// release has, is refused naming the field.
TEST(HfConfig, MiniMaxM2Layout) {
  const Architecture a = load_model(real_config_path("minimax-m2.5"));
  EXPECT_TRUE(a.qk_norm);
  EXPECT_TRUE(a.qk_norm_full_width);
  EXPECT_TRUE(a.router_bias);
  EXPECT_EQ(a.shared_experts, 0);
  EXPECT_EQ(moe_layer_count(a), 62);
  EXPECT_EQ(a.checkpoint_precision, "fp8");
  // Per layer: q, k, v, o 2·3072·6144 + 2·3072·1024, QK norms 6144 + 1024, 2 norms, router 3072·256 + 256,
  // experts 256·3·3072·1536; plus embedding and LM head 2·200064·3072 and the final norm.
  EXPECT_EQ(parameter_counts(a).total(),
            62LL * (44040192 + 7168 + 6144 + 786688 + 3623878656LL) + 2LL * 200064 * 3072 + 3072);
  nlohmann::json c = json::load_file(real_config_path("minimax-m2.5"));
  c["shared_intermediate_size"] = 1536;
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "mm.json"); });
  EXPECT_NE(msg.find("mm.json: $.shared_intermediate_size: is positive"), std::string::npos) << msg;
}

}  // namespace
}  // namespace moesim::model
