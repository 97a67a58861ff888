// Readers of the families added for issue 21 beyond the first twelve (Hunyuan, GLM-5, Nemotron-H, Jamba), each on
// its real config.json (tests/data/hf_configs, sources in its README). Their totals and active counts against
// the published figures are in HfConfig.RealConfigsOfNewFamiliesMeetTheirCards (test_architecture.cpp).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/step_cost.hpp"

namespace moesim::model {
namespace {

std::string config_path(const char* dir) {
  return std::string(MOESIM_SOURCE_DIR) + "/tests/data/hf_configs/" + dir + "/config.json";
}

using moesim::test::user_error;

// Scenario: Nemotron-3-Nano-30B-A3B (nemotron_h), 52 blocks "MEMEM*E...". Expectation, by hand:
//  - blocks: 23 Mamba-2, 6 attention, 23 MoE; each block one RMSNorm: 52·2688 + 2688 (final) = 142,464.
//  - Mamba-2 mixer (d_inner 64·64 = 4096, 2·G·N = 2·8·128 = 2048): in_proj 2688·(8192 + 2048 + 64) =
//    27,697,152; conv (4096 + 2048)·4 + 6144 bias = 30,720; dt_bias, A_log, D 3·64; norm 4096; out_proj
//    4096·2688 = 11,010,048 → 38,742,208.
//  - attention 2688·32·128·2 + 2·2688·2·128 = 23,396,352; so mixers 23·38,742,208 + 6·23,396,352 =
//    1,031,448,896.
//  - experts have no gate: 2·2688·1856 = 9,977,856 each; shared MLP 2·2688·3712 = 19,955,712; router
//    128·2688 + 128 bias.
//  - state per sequence: 23 × (SSM 64·64·128 fp32 = 2,097,152 B + conv 6144·3 bf16 = 36,864 B) = 49,082,368 B;
//    KV per token: 6 layers × 2·2·128 × 2 B = 6,144 B.
//  - NVIDIA's "3.2B active": without the input embedding, 3,227,754,816 (+0.9%).
TEST(HfFamilies, NemotronHBlocksAndMamba2State) {
  const Architecture a = load_model(config_path("nemotron-3-nano-30b-a3b"));
  int mamba = 0, attention = 0, moe = 0;
  for (const LayerSpec& l : a.layer_specs) {
    mamba += l.attention == AttentionType::Mamba2 ? 1 : 0;
    attention += l.attention == AttentionType::Gqa ? 1 : 0;
    moe += l.moe ? 1 : 0;
    EXPECT_NE(l.ffn, l.attention != AttentionType::None);  // one mixer or one FFN per block
  }
  EXPECT_EQ(mamba, 23);
  EXPECT_EQ(attention, 6);
  EXPECT_EQ(moe, 23);
  EXPECT_FALSE(a.gated_ffn);
  const ComponentParams c = parameter_counts(a);
  EXPECT_EQ(c.norms, 142464);
  EXPECT_EQ(c.attention, 23LL * 38742208 + 6LL * 23396352);
  EXPECT_EQ(params_per_routed_expert(a), 9977856);
  EXPECT_EQ(c.shared_experts, 23LL * 19955712);
  EXPECT_EQ(c.router, 23LL * (128 * 2688 + 128));
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(a).base(), 49082368.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(a).base(), 6144.0);
  EXPECT_EQ(active_parameters(a, "excl_embedding"), 3227754816);
  EXPECT_NEAR(static_cast<double>(active_parameters(a, "excl_embedding")), 3.2e9, 0.01 * 3.2e9);
  // An ungated expert is two matrices at bf16: 2 × 2688·1856 × 2 B.
  EXPECT_DOUBLE_EQ(routed_expert_bytes(a, precision("bf16")).base(), 2.0 * 2688 * 1856 * 2);
}

// Scenario: AI21-Jamba-1.5-Mini (jamba), 32 layers. Expectation, by hand:
//  - attention at i % 8 == 4 (layers 4, 12, 20, 28), the other 28 Mamba-1; MoE at i % 2 == 1 (16 layers, 16
//    experts of 14336 top-2), the other 16 a dense SwiGLU MLP of 14336; every layer 2 RMSNorms.
//  - Mamba-1 mixer (d_inner 2·4096 = 8192, N 16, kernel 4, dt_rank 256): in_proj 4096·16384 = 67,108,864; conv
//    8192·4 + 8192 bias = 40,960; x_proj 8192·(256 + 32) = 2,359,296; dt_proj 256·8192 + 8192 = 2,105,344; A_log
//    8192·16 = 131,072; D 8192; out_proj 8192·4096 = 33,554,432; dt/B/C norms 256 + 16 + 16 = 288 → 105,308,448.
//  - attention (32 heads, 8 KV heads of 128, no biases): 4096·(4096 + 2·1024) + 4096·4096 = 41,943,040.
//  - state per sequence (bf16, vLLM's shapes): 28 × (SSM 8192·16·2 B + conv 8192·3·2 B) = 28 × 311,296 =
//    8,716,288 B; KV per token: 4 layers × 2·8·128 × 2 B = 16,384 B.
TEST(HfFamilies, JambaLayersAndMamba1State) {
  const Architecture a = load_model(config_path("jamba-1.5-mini"));
  int mamba = 0, attention = 0;
  for (std::size_t i = 0; i < a.layer_specs.size(); ++i) {
    const LayerSpec& l = a.layer_specs[i];
    EXPECT_EQ(l.attention, i % 8 == 4 ? AttentionType::Gqa : AttentionType::Mamba1) << "layer " << i;
    EXPECT_EQ(l.moe, i % 2 == 1) << "layer " << i;
    EXPECT_TRUE(l.ffn);
    mamba += l.attention == AttentionType::Mamba1 ? 1 : 0;
    attention += l.attention == AttentionType::Gqa ? 1 : 0;
  }
  EXPECT_EQ(mamba, 28);
  EXPECT_EQ(attention, 4);
  EXPECT_EQ(a.mamba1.dt_rank, 256);
  const ComponentParams c = parameter_counts(a);
  EXPECT_EQ(c.attention, 28LL * 105308448 + 4LL * 41943040);
  EXPECT_EQ(c.norms, 32LL * 2 * 4096 + 4096);
  EXPECT_EQ(c.router, 16LL * 4096 * 16);
  EXPECT_EQ(c.dense_ffn, 16LL * 3 * 4096 * 14336);
  EXPECT_EQ(c.routed_experts, 16LL * 16 * 3 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(a).base(), 8716288.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(a).base(), 16384.0);
  // Only the 4 attention layers' score and value products grow with the context: 4 × 4·32·128 per token.
  EXPECT_DOUBLE_EQ(attention_flops_per_context_token(a).base(), 4.0 * 4 * 32 * 128);
  // The step cost reads and writes the state of each layer (its average over the 32 layers) every token.
  EXPECT_DOUBLE_EQ(cost::layer_parts(a, precision("bf16")).state_bytes, 8716288.0 / 32);
}

// Scenario: Jamba's configurable parts. Expectation: mamba_dt_rank "auto" is ceil(4096 / 16) = 256, the
// release's value, so the counts do not move; an SSM cache in float32 doubles the SSM state (28 × 8192·16·2 B
// more); num_experts 1 makes every FFN a dense MLP (JambaConfig.layers_num_experts).
TEST(HfFamilies, JambaOptions) {
  const nlohmann::json base = json::load_file(config_path("jamba-1.5-mini"));
  const Architecture a = parse_hf_config(base, "j.json");
  nlohmann::json c = base;
  c["mamba_dt_rank"] = "auto";
  EXPECT_EQ(parameter_counts(parse_hf_config(c, "j.json")).total(), parameter_counts(a).total());
  c = base;
  c["mamba_ssm_cache_dtype"] = "float32";
  EXPECT_DOUBLE_EQ(recurrent_state_bytes(parse_hf_config(c, "j.json")).base() - recurrent_state_bytes(a).base(),
                   28.0 * 8192 * 16 * 2);
  c = base;
  c["num_experts"] = 1;
  const Architecture dense = parse_hf_config(c, "j.json");
  EXPECT_FALSE(dense.is_moe());
  EXPECT_EQ(parameter_counts(dense).dense_ffn, 32LL * 3 * 4096 * 14336);
}

// Scenario: Jamba configs that moesim would count wrong. Expectation: one error naming the file and the
// field: an attention offset not below its period, a sliding window, a dt rank that is neither a number nor
// "auto", a missing expert count (1 would mean no MoE layers, so it is not guessed).
TEST(HfFamilies, JambaRefusesWhatItCannotCount) {
  nlohmann::json c = json::load_file(config_path("jamba-1.5-mini"));
  c["attn_layer_offset"] = 8;
  std::string msg = user_error([&] { (void)parse_hf_config(c, "j.json"); });
  EXPECT_NE(msg.find("j.json: $.attn_layer_offset: is 8, not below attn_layer_period 8"), std::string::npos) << msg;
  c = json::load_file(config_path("jamba-1.5-mini"));
  c["sliding_window"] = 4096;
  msg = user_error([&] { (void)parse_hf_config(c, "j.json"); });
  EXPECT_NE(msg.find("j.json: $.sliding_window: is set"), std::string::npos) << msg;
  c = json::load_file(config_path("jamba-1.5-mini"));
  c["mamba_dt_rank"] = "wide";
  msg = user_error([&] { (void)parse_hf_config(c, "j.json"); });
  EXPECT_NE(msg.find("j.json: $.mamba_dt_rank: is \"wide\""), std::string::npos) << msg;
  c = json::load_file(config_path("jamba-1.5-mini"));
  c.erase("num_experts");
  msg = user_error([&] { (void)parse_hf_config(c, "j.json"); });
  EXPECT_NE(msg.find("j.json: $.num_experts: is missing"), std::string::npos) << msg;
}

// Scenario: the kernels of Nemotron-H's single-part blocks (kKernels: attention 8, router 3, FFN 4, combine
// 1, 2 all-reduces per TP layer). Expectation: a Mamba-2 block runs its mixer's 8 (9 under TP: one
// all-reduce), an MoE block router + combine + its shared expert's FFN, 8 (9 under TP), not a whole
// attention-plus-FFN layer's kernels.
TEST(HfFamilies, NemotronHBlocksLaunchOnlyTheirPart) {
  const Architecture a = load_model(config_path("nemotron-3-nano-30b-a3b"));
  const cost::LayerCosts lc(a, precision("bf16"), load_node("h100-sxm"), {}, 2.0);
  ASSERT_EQ(a.layer_specs[0].attention, AttentionType::Mamba2);
  ASSERT_TRUE(a.layer_specs[1].moe);
  EXPECT_EQ(lc.layer_kernels(a.layer_specs[0], false), 8);
  EXPECT_EQ(lc.layer_kernels(a.layer_specs[0], true), 9);
  EXPECT_EQ(lc.layer_kernels(a.layer_specs[1], false), 8);
  EXPECT_EQ(lc.layer_kernels(a.layer_specs[1], true), 9);
}

// Scenario: Nemotron-H configs that moesim would count wrong. Expectation: one error naming the file and
// the field: a pattern of the wrong length, an unknown block letter, a latent MoE projection.
TEST(HfFamilies, NemotronHRefusesWhatItCannotCount) {
  nlohmann::json c = json::load_file(config_path("nemotron-3-nano-30b-a3b"));
  c["hybrid_override_pattern"] = "MEM";
  std::string msg = user_error([&] { (void)parse_hf_config(c, "n.json"); });
  EXPECT_NE(msg.find("n.json: $.hybrid_override_pattern: has 3 letters but num_hidden_layers is 52"), std::string::npos)
      << msg;
  c = json::load_file(config_path("nemotron-3-nano-30b-a3b"));
  std::string pattern = c["hybrid_override_pattern"];
  pattern[0] = 'X';
  c["hybrid_override_pattern"] = pattern;
  msg = user_error([&] { (void)parse_hf_config(c, "n.json"); });
  EXPECT_NE(msg.find("n.json: $.hybrid_override_pattern: has \"X\""), std::string::npos) << msg;
  c = json::load_file(config_path("nemotron-3-nano-30b-a3b"));
  c["moe_latent_size"] = 1024;
  msg = user_error([&] { (void)parse_hf_config(c, "n.json"); });
  EXPECT_NE(msg.find("n.json: $.moe_latent_size: is set"), std::string::npos) << msg;
}

// Scenario: Hunyuan-A13B as released (model_type "hunyuan", per-layer lists). Expectation: GQA 32/8 heads of
// 128 with per-head QK norm (2·128 per layer), tied embedding, 64 experts of 3072 top-8 in all 32 layers, one
// shared SwiGLU MLP of 3072 (3·4096·3072 = 37,748,736 per layer). A list whose entries differ is refused.
TEST(HfFamilies, HunyuanReadsItsPerLayerLists) {
  const Architecture a = load_model(config_path("hunyuan-a13b"));
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.kv_heads, 8);
  EXPECT_TRUE(a.qk_norm);
  EXPECT_TRUE(a.tie_embeddings);
  EXPECT_EQ(a.routed_experts, 64);
  EXPECT_EQ(a.top_k, 8);
  EXPECT_EQ(a.expert_ffn, 3072);
  EXPECT_EQ(moe_layer_count(a), 32);
  EXPECT_EQ(parameter_counts(a).shared_experts, 32LL * 37748736);
  nlohmann::json c = json::load_file(config_path("hunyuan-a13b"));
  c["moe_topk"][5] = 4;
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "h.json"); });
  EXPECT_NE(msg.find("h.json: $.moe_topk[5]: is 4 but moe_topk[0] is 8"), std::string::npos) << msg;
}

// Scenario: GLM-5 (glm_moe_dsa), read as DeepSeek-V3.2's architecture. Expectation: 3 dense + 75 MoE layers,
// an indexer in all 78 layers (q_lora 2048·32·128 + 6144·128 + 2·128 + 6144·32 = 9,371,904 each). With
// GLM-5.2's schedule (index_topk_freq 4, index_skip_topk_offset 3: layer i keeps its indexer iff
// max(i − 2, 0) % 4 == 0, i.e. layers 0-2 and 6, 10, ..., 74: 21 layers), 57 indexers fewer.
TEST(HfFamilies, Glm5IndexerSchedule) {
  const Architecture a = load_model(config_path("glm-5"));
  EXPECT_EQ(moe_layer_count(a), 75);
  EXPECT_EQ(a.mla.index_heads, 32);
  for (const LayerSpec& l : a.layer_specs) EXPECT_TRUE(l.indexer);
  nlohmann::json c = json::load_file(config_path("glm-5"));
  c["index_topk_freq"] = 4;
  c["index_skip_topk_offset"] = 3;
  const Architecture shared = parse_hf_config(c, "glm.json");
  int with_indexer = 0;
  for (const LayerSpec& l : shared.layer_specs) with_indexer += l.indexer ? 1 : 0;
  EXPECT_EQ(with_indexer, 21);
  EXPECT_EQ(parameter_counts(a).attention - parameter_counts(shared).attention, 57LL * 9371904);
  c["indexer_types"] = nlohmann::json::array({"full", "skip"});
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "glm.json"); });
  EXPECT_NE(msg.find("glm.json: $.indexer_types: has 2 entries but num_hidden_layers is 78"), std::string::npos) << msg;
}

// Scenario: MiMo-V2-Flash (mimo_v2_flash). Expectation: hybrid_layer_pattern gives 9 full-attention layers
// (64 query heads, 4 KV heads, q/k 192 and v 128 wide, no sinks) and 39 sliding ones of 128 tokens (8 KV
// heads, one sink per head); layer 0 is a dense MLP of 16384, the other 47 MoE. By hand: full attention
// 4096·(64·192 + 4·192 + 4·128) + 64·128·4096 = 89,128,960, sliding 4096·(64·192 + 8·320) + 64·128·4096 + 64
// = 94,371,904; KV per token (1 byte per element): 9·4·320 + 39·8·320 = 11,520 + 99,840 = 111,360.
TEST(HfFamilies, MimoV2FlashShapesItsLayers) {
  const Architecture a = load_model(config_path("mimo-v2-flash"));
  int sliding = 0;
  for (const LayerSpec& l : a.layer_specs) {
    const GqaShape s = gqa_shape(a, l);
    sliding += l.sliding_window == 128 ? 1 : 0;
    EXPECT_EQ(s.kv_heads, l.sliding_window > 0 ? 8 : 4);
    EXPECT_EQ(s.v_head_dim, 128);
    EXPECT_EQ(s.sinks, l.sliding_window > 0);
  }
  EXPECT_EQ(sliding, 39);
  EXPECT_FALSE(a.layer_specs[0].moe);
  EXPECT_EQ(moe_layer_count(a), 47);
  EXPECT_EQ(parameter_counts(a).attention, 9LL * 89128960 + 39LL * 94371904);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(a, 1.0).base(), 111360.0);
  // At 4096 tokens the sliding layers hold only their 128.
  EXPECT_DOUBLE_EQ(kv_bytes_at_context(a, 4096, 1.0).base(), 11520.0 * 4096 + 99840.0 * 128);
  nlohmann::json c = json::load_file(config_path("mimo-v2-flash"));
  c["hybrid_layer_pattern"].erase(0);
  const std::string msg = user_error([&] { (void)parse_hf_config(c, "mimo.json"); });
  EXPECT_NE(msg.find("mimo.json: $.hybrid_layer_pattern: has 47 entries but num_hidden_layers is 48"),
            std::string::npos)
      << msg;
}

// Scenario: Gemma-4-26B-A4B (gemma4, its text_config). Expectation: 25 sliding layers (8 KV heads of 256,
// window 1024) and 5 global ones (2 KV heads of 512, k = v: no v_proj); every layer MoE with the dense MLP of
// 2112 counted as one shared expert, 7 norms of 2816 per layer, the router's two scales. By hand: global
// attention 2816·(16·512 + 2·512) + 16·512·2816 + 2·512 = 49,021,952; sliding 2816·(16·256 + 2·8·256) +
// 16·256·2816 + 2·256 = 34,603,520; router 2816·128 + 2816 + 128 = 363,392.
TEST(HfFamilies, Gemma4GlobalLayersShareKeyAndValue) {
  const Architecture a = load_model(config_path("gemma-4-26b-a4b"));
  int global = 0;
  for (const LayerSpec& l : a.layer_specs) {
    const GqaShape s = gqa_shape(a, l);
    global += l.sliding_window == 0 ? 1 : 0;
    EXPECT_EQ(s.k_is_v, l.sliding_window == 0);
    EXPECT_EQ(s.head_dim, l.sliding_window == 0 ? 512 : 256);
    if (l.sliding_window != 0) {
      EXPECT_EQ(l.sliding_window, 1024);
    }
  }
  EXPECT_EQ(global, 5);
  EXPECT_EQ(a.shared_experts, 1);
  EXPECT_EQ(a.shared_ffn, 2112);
  const ComponentParams c = parameter_counts(a);
  EXPECT_EQ(c.attention, 5LL * 49021952 + 25LL * 34603520);
  EXPECT_EQ(c.router, 30LL * 363392);
  EXPECT_EQ(c.norms, 30LL * 7 * 2816 + 2816);
  EXPECT_EQ(c.lm_head, 0);  // tied
  // The small Gemma 4 models' per-layer input embeddings are refused, naming the field.
  nlohmann::json j = json::load_file(config_path("gemma-4-26b-a4b"));
  j["text_config"]["hidden_size_per_layer_input"] = 256;
  const std::string msg = user_error([&] { (void)parse_hf_config(j, "g4.json"); });
  EXPECT_NE(msg.find("g4.json: $.text_config.hidden_size_per_layer_input:"), std::string::npos) << msg;
}

// Scenario: DeepSeek-V4-Flash (deepseek_v4). Expectation: 43 layers (compress_ratios' 44th entry is the MTP
// layer's): 2 window-only (128 tokens), 21 CSA (ratio 4), 20 HCA (ratio 128). By hand, per layer: attention
// core 4096·1024 + 1024 + 1024·64·512 + 4096·512 + 512 + 64·512·1024 + 8·1024·4096 + 64 = 106,956,352; HCA
// compressor 2·4096·512 + 128·512 + 512 = 4,260,352; CSA compressor 2·4096·1024 + 4·1024 + 512 = 8,393,216 and
// indexer 1024·64·128 + 4096·64 + (2·4096·256 + 4·256 + 128) = 10,749,056. Hyper-connections 2·(24·16384 + 27)
// per layer. KV per token (1 byte per element): 2·512 + 21·(512 + 128)/4 + 20·512/128 = 4,464.
TEST(HfFamilies, DeepSeekV4CompressedAttention) {
  const Architecture a = load_model(config_path("deepseek-v4-flash"));
  ASSERT_EQ(a.layers, 43);
  int window = 0, csa = 0, hca = 0;
  for (const LayerSpec& l : a.layer_specs) {
    EXPECT_EQ(l.attention, AttentionType::CompressedMqa);
    window += l.compress_ratio == 0 ? 1 : 0;
    csa += l.compress_ratio == 4 ? 1 : 0;
    hca += l.compress_ratio == 128 ? 1 : 0;
    EXPECT_EQ(l.sliding_window, l.compress_ratio == 0 ? 128 : 0);
  }
  EXPECT_EQ(window, 2);
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  const ComponentParams c = parameter_counts(a);
  EXPECT_EQ(c.attention, 43LL * 106956352 + 20LL * 4260352 + 21LL * (8393216 + 10749056));
  EXPECT_EQ(c.norms, 43LL * (2 * 4096 + 2 * (24 * 16384 + 24 + 3)) + 4096 + (16 * 4096 + 4 + 1));
  EXPECT_EQ(c.shared_experts, 43LL * 3 * 4096 * 2048);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(a, 1.0).base(), 4464.0);
  EXPECT_EQ(a.checkpoint_precision, "mxfp4/fp8");  // expert_dtype fp4, quantization_config fp8
  // A CSA layer attends to at most index_topk (512) compressed entries besides its 128-token window: at
  // 100,000 tokens 4·64·512·(128 + 512) plus the indexer's 2·64·128·25,000.
  Architecture one = a;
  one.layer_specs = {a.layer_specs[2]};
  EXPECT_DOUBLE_EQ(attention_context_flops(one, 100000).base(), 4.0 * 64 * 512 * 640 + 2.0 * 64 * 128 * 25000);
  nlohmann::json j = json::load_file(config_path("deepseek-v4-flash"));
  j["o_groups"] = 7;
  const std::string msg = user_error([&] { (void)parse_hf_config(j, "v4.json"); });
  EXPECT_NE(msg.find("v4.json: $.o_groups: is 7, which does not divide num_attention_heads 64"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace moesim::model
