// Runtime profiles laid over a node profile (model::apply_runtime, issue 20): a runtime sets the figures it
// gives and leaves the node's own for the rest, so a runtime written from a seed's published figures may
// give only its overheads and keep the node's measured efficiency bands.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "../test_support.hpp"
#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/scenario/estimate.hpp"
#include "moesim/scenario/serve.hpp"

namespace moesim::model {
namespace {

namespace fs = std::filesystem;

/// A runtime profile written to a scratch file (removed at the end) and loaded from it, as `--runtime PATH`.
class RuntimeFile {
 public:
  explicit RuntimeFile(const std::string& figures, const std::string& suffix = "")
      : dir_("moesim_runtime"),
        path_(dir_.write(
            "runtime" + suffix + ".json",
            R"({"id": "test@h100-sxm", "kind": "runtime", "runtime": "test", "hw": "h100-sxm", )" + figures + "}")) {}
  RuntimeFile(const RuntimeFile&) = delete;
  RuntimeFile& operator=(const RuntimeFile&) = delete;
  [[nodiscard]] RuntimeProfile load() const { return load_runtime(path_.string()); }
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  moesim::test::TestDir dir_;
  fs::path path_;
};

/// h100-sxm with measured-looking figures of its own: memory bands 0.70 below 1 MiB and 0.90 above,
/// compute 0.60, 3 us per kernel, 1 ms per layer.
NodeProfile measured_h100() {
  NodeProfile n = load_node("h100-sxm");
  EfficiencyTable t;
  t.source = "test bands";
  t.memory = {{units::bytes(0), units::bytes(1 << 20), 0.70, 4}, {units::bytes(1 << 20), units::bytes(1e12), 0.90, 4}};
  t.compute = {{units::bytes(0), units::bytes(1e12), 0.60, 4}};
  n.devices.efficiency = t;
  n.devices.kernel_overhead = Sourced<units::Duration>{units::seconds(3e-6), "test"};
  n.devices.layer_overhead = Sourced<units::Duration>{units::seconds(1e-3), "test"};
  return n;
}

// A runtime of overheads only (10 us per kernel, 0.2 ms per layer) replaces those two and nothing else:
// the node's two memory bands and its compute band stay, and no attention factor appears.
TEST(RuntimeProfile, OverheadsOnlyLeaveTheNodesEfficiencyBands) {
  const RuntimeFile f(R"("kernel_overhead": {"value": "10us", "source": "t"},
                         "layer_overhead": {"value": "0.2ms", "source": "t"})");
  const RuntimeProfile rt = f.load();
  EXPECT_FALSE(rt.bandwidth_efficiency.has_value());
  EXPECT_FALSE(rt.attention_factor.has_value());
  const NodeProfile n = apply_runtime(measured_h100(), rt);
  ASSERT_TRUE(n.devices.kernel_overhead && n.devices.layer_overhead);
  EXPECT_DOUBLE_EQ(n.devices.kernel_overhead->value.base(), 10e-6);
  EXPECT_DOUBLE_EQ(n.devices.layer_overhead->value.base(), 0.2e-3);
  ASSERT_TRUE(n.devices.efficiency);
  ASSERT_EQ(n.devices.efficiency->memory.size(), 2u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory[0].value, 0.70);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory[1].value, 0.90);
  ASSERT_EQ(n.devices.efficiency->compute.size(), 1u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->compute[0].value, 0.60);
  EXPECT_EQ(n.devices.efficiency->source, "test bands");
  EXPECT_FALSE(n.devices.attention_factor.has_value());
}

// A bandwidth efficiency alone (0.8) becomes one memory band over every size; the node's compute band
// (0.60) and its overheads (3 us, 1 ms) stay.
TEST(RuntimeProfile, BandwidthEfficiencyAloneKeepsComputeAndOverheads) {
  const RuntimeFile f(R"("bandwidth_efficiency": {"value": 0.8, "source": "t"})");
  const NodeProfile n = apply_runtime(measured_h100(), f.load());
  ASSERT_TRUE(n.devices.efficiency);
  ASSERT_EQ(n.devices.efficiency->memory.size(), 1u);
  EXPECT_DOUBLE_EQ(efficiency_at(n.devices.efficiency->memory, units::bytes(1000)).value, 0.8);
  EXPECT_DOUBLE_EQ(efficiency_at(n.devices.efficiency->memory, units::bytes(1e10)).value, 0.8);
  ASSERT_EQ(n.devices.efficiency->compute.size(), 1u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->compute[0].value, 0.60);
  EXPECT_DOUBLE_EQ(n.devices.kernel_overhead->value.base(), 3e-6);
  EXPECT_DOUBLE_EQ(n.devices.layer_overhead->value.base(), 1e-3);
}

// A compute efficiency alone (0.5) replaces the compute band and keeps the node's two memory bands.
TEST(RuntimeProfile, ComputeEfficiencyAloneKeepsTheMemoryBands) {
  const RuntimeFile f(R"("compute_efficiency": {"value": 0.5, "source": "t"})");
  const NodeProfile n = apply_runtime(measured_h100(), f.load());
  ASSERT_TRUE(n.devices.efficiency);
  ASSERT_EQ(n.devices.efficiency->memory.size(), 2u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory[0].value, 0.70);
  ASSERT_EQ(n.devices.efficiency->compute.size(), 1u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->compute[0].value, 0.5);
}

// A fitted runtime of every figure replaces them all, its explicit 0 per layer included (the fit has no
// per-layer term, so the node's 1 ms must not be added to its fitted per-kernel cost).
TEST(RuntimeProfile, EveryFigureGivenReplacesEveryFigure) {
  const RuntimeFile f(R"("bandwidth_efficiency": {"value": 0.8, "source": "t"},
                         "attention_factor": {"value": 2.5, "source": "t"},
                         "prefill_attention_factor": {"value": 3.7, "source": "t"},
                         "kernel_overhead": {"value": "7us", "source": "t"},
                         "layer_overhead": {"value": "0us", "source": "t"})");
  const NodeProfile n = apply_runtime(measured_h100(), f.load());
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory.at(0).value, 0.8);
  EXPECT_DOUBLE_EQ(n.devices.attention_factor->value, 2.5);
  EXPECT_DOUBLE_EQ(n.devices.prefill_attention_factor->value, 3.7);
  EXPECT_DOUBLE_EQ(n.devices.kernel_overhead->value.base(), 7e-6);
  EXPECT_DOUBLE_EQ(n.devices.layer_overhead->value.base(), 0.0);
}

// The seeds' overheads live in the runtime that produced them, not in the node profile (issue 20): the
// L4, the MacBook and the DGX H100 carry no kernel or layer overhead of their own, and their runtimes
// (flexflow, flash-moe, cuda-eager) bring back exactly the figure the node profiles gave before the move.
// Expected tokens/s: `moesim estimate ... --lm-head --json` with the node profiles as they were before
// the move, when they still held the overheads (TinyMistral sequential on the L4: 28.55 ms/token, seed
// 001's calibration point; Qwen3.5 q4 streamed with no page cache on the MacBook; DBRX TP 8 at 2000
// tokens of context on the DGX, examples/README.md's 103.53). Without the runtime each token is faster by
// exactly the overheads the runtime charges: kernels per token × its kernel_overhead + decoder layers ×
// its layer_overhead, the kernels counted as the profiles' sources count them: 433 for TinyMistral with 6
// sequential experts (12 layers × (8 attention + 3 router + 1 combine + 6 × 4 expert) + the LM head); 60
// Qwen3.5 layers × 20 + the LM head = 1201; 40 DBRX layers × (8 attention + 3 router + 4 fused experts +
// 1 combine + 2 all-reduces) + the LM head = 721.
TEST(RuntimeProfile, SeedOverheadsMovedFromTheNodeToTheRuntime) {
  struct Seed {
    const char* model;
    const char* hw;
    const char* runtime;
    const char* precision;
    const char* experts;
    std::int64_t context;
    bool streamed;
    double kernel_overhead;                // s, the figure the node profile held
    std::optional<double> layer_overhead;  // s
    double kernels;                        // per token
    double layers;
    double tokens_per_s_before;
  };
  const Seed seeds[] = {
      {"tinymistral-6x248m", "l4", "flexflow", "bf16", "sequential", 0, false, 51e-6, std::nullopt, 433, 12,
       35.024179848517214},
      {"qwen3.5-397b-a17b", "macbook-pro-m3-max-48", "flash-moe", "q4", "fused", 0, true, 75e-6, 0.1e-3, 1201, 60,
       1.0103557281957272},
      {"dbrx-instruct", "dgx-h100", "cuda-eager", "bf16", "fused", 2000, false, 5e-6, std::nullopt, 721, 40,
       103.53340946533449},
  };
  for (const auto& seed : seeds) {
    SCOPED_TRACE(seed.hw);
    const NodeProfile bare = load_node(seed.hw);
    EXPECT_FALSE(bare.devices.kernel_overhead.has_value());
    EXPECT_FALSE(bare.devices.layer_overhead.has_value());
    const RuntimeProfile rt = find_runtime(seed.runtime, bare);
    EXPECT_EQ(rt.id, std::string(seed.runtime) + "@" + seed.hw);
    EXPECT_FALSE(rt.bandwidth_efficiency.has_value());  // the node's own efficiency stays
    const NodeProfile with = apply_runtime(bare, rt);
    ASSERT_TRUE(with.devices.kernel_overhead.has_value());
    EXPECT_DOUBLE_EQ(with.devices.kernel_overhead->value.base(), seed.kernel_overhead);
    EXPECT_EQ(with.devices.layer_overhead.has_value(), seed.layer_overhead.has_value());
    if (seed.layer_overhead) {
      EXPECT_DOUBLE_EQ(with.devices.layer_overhead->value.base(), *seed.layer_overhead);
    }

    scenario::EstimateRequest r;
    r.model = seed.model;
    r.hw = seed.hw;
    r.nodes = {1};
    r.precision = seed.precision;
    r.experts = seed.experts;
    r.context = seed.context;
    r.lm_head = true;
    if (seed.streamed) {
      r.streaming.emplace();
      r.streaming->storage = "apple-ssd-m3-max";
      r.streaming->page_cache = units::bytes(0);
    }
    const double alone = scenario::run_estimate(r).rows.front().estimate.tokens_per_second;
    r.runtime = seed.runtime;
    const auto est = scenario::run_estimate(r);
    const double seeded = est.rows.front().estimate.tokens_per_second;
    EXPECT_NEAR(seeded / seed.tokens_per_s_before, 1.0, 1e-12) << seeded;
    // Without the runtime the node alone has no dispatch cost: faster, by exactly the overheads it charges.
    const double charged = seed.kernels * seed.kernel_overhead + seed.layers * seed.layer_overhead.value_or(0.0);
    EXPECT_NEAR(1.0 / seeded - 1.0 / alone, charged, 1e-12);
  }
}

// A runtime's expert token tile reaches the serving simulator: Qwen3-30B-A3B (128 experts, 8 per token)
// prefilled on one H100 in 8192-token chunks gives each expert about 512 tokens a chunk; with
// (hypothetical) tiles of 1024 tokens each expert computes one whole tile, twice its tokens, and its
// expert GEMMs turn compute-bound (at 512 their FLOPs and their activations' traffic are about even), so
// the prefill takes longer, but less than twice as long; a decode step (one token, memory-bound) does not
// move.
// super_block_read_factor (2 here) doubles the time of the weights stored in GGUF super-blocks and of no
// other: Llama 3.1 8B at one token and no context, kernel overheads off, takes twice as long in Q4_K (all its
// weights K-quants) and exactly as long in Q8_0; gpt-oss-20b in Q4_K experts beside Q8_0 others doubles only
// the experts' share.
TEST(RuntimeProfile, SuperBlockReadFactorSlowsOnlySuperBlockWeights) {
  const RuntimeFile plain(R"("bandwidth_efficiency": {"value": 0.8, "source": "t"})", "_plain");
  const RuntimeFile slow(R"("bandwidth_efficiency": {"value": 0.8, "source": "t"},
                            "super_block_read_factor": {"value": 2, "source": "t"})",
                         "_slow");
  EXPECT_DOUBLE_EQ(slow.load().super_block_read_factor->value, 2.0);
  EXPECT_FALSE(plain.load().super_block_read_factor.has_value());
  auto seconds = [](const RuntimeFile& rt, const char* model, const char* format) {
    NodeProfile n = apply_runtime(load_node("h100-sxm"), rt.load());
    n.devices.kernel_overhead = Sourced<units::Duration>{units::seconds(0), "test"};
    const Architecture a = load_model(model);
    DecodeScenario s;
    s.arch = &a;
    s.node = &n;
    s.weights = &precision(format);
    s.include_lm_head = true;
    s.expected_active_experts = a.is_moe() ? static_cast<double>(a.top_k) : 0.0;
    s.max_experts_per_node = a.routed_experts;
    return 1.0 / estimate_decode(s).tokens_per_second;
  };
  // Twice, but for the new token's own KV entry (tens of ns of the 1.6 ms), which is no weight.
  EXPECT_NEAR(seconds(slow, "llama-3.1-8b", "q4_k"), 2.0 * seconds(plain, "llama-3.1-8b", "q4_k"),
              1e-4 * seconds(plain, "llama-3.1-8b", "q4_k"));
  EXPECT_DOUBLE_EQ(seconds(slow, "llama-3.1-8b", "q8_0"), seconds(plain, "llama-3.1-8b", "q8_0"));
  const double oss = seconds(plain, "gpt-oss-20b", "q4_k/q8_0");
  const double oss_slow = seconds(slow, "gpt-oss-20b", "q4_k/q8_0");
  EXPECT_GT(oss_slow, 1.2 * oss);
  EXPECT_LT(oss_slow, 2.0 * oss);
}

// A runtime's expert_gemm_efficiency (its grouped expert GEMM's rate over its dense GEMM's) reaches the
// node it is laid on, alone among its figures; a ratio outside (0, 2] or without a source is refused with
// the field named.
TEST(RuntimeProfile, ExpertGemmEfficiencyReachesTheNodeAndIsBounded) {
  const RuntimeFile slow(R"("expert_gemm_efficiency": {"value": 0.69, "source": "t"})", "_gemm");
  const NodeProfile node = apply_runtime(load_node("h100-sxm"), slow.load());
  ASSERT_TRUE(node.devices.expert_gemm_efficiency);
  EXPECT_DOUBLE_EQ(node.devices.expert_gemm_efficiency->value, 0.69);
  EXPECT_EQ(node.devices.expert_gemm_efficiency->source, "t");
  EXPECT_FALSE(node.devices.expert_token_tile);
  EXPECT_FALSE(apply_runtime(load_node("h100-sxm"),
                             RuntimeFile(R"("attention_factor": {"value": 1, "source": "t"})", "_plain").load())
                   .devices.expert_gemm_efficiency);
  for (const char* bad :
       {R"("expert_gemm_efficiency": {"value": 0, "source": "t"})",
        R"("expert_gemm_efficiency": {"value": 2.5, "source": "t"})",
        R"("expert_gemm_efficiency": {"value": 0.7, "source": ""})", R"("expert_gemm_efficiency": {"value": 0.7})"}) {
    try {
      (void)RuntimeFile(bad, "_bad").load();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("expert_gemm_efficiency"), std::string::npos) << e.what();
    }
  }
}

TEST(RuntimeProfile, ExpertTokenTilePadsTheServingSimulatorsExpertGemms) {
  const RuntimeFile tiled(R"("expert_token_tile": {"value": 1024, "source": "t"})", "_tiled");
  const RuntimeFile none(R"("attention_factor": {"value": 1, "source": "t"})", "_none");
  EXPECT_DOUBLE_EQ(apply_runtime(load_node("h100-sxm"), tiled.load()).devices.expert_token_tile->value, 1024);
  auto run = [&](const RuntimeFile& rt, int prompt, int output) {
    scenario::ServeScenario s;
    s.doc = {{"model", "qwen3-30b-a3b"},
             {"hw", "h100-sxm"},
             {"precision", "bf16"},
             {"runtime", rt.path()},
             {"scheduler", {{"kind", "chunked"}, {"max_num_seqs", 1}, {"max_num_batched_tokens", 8192}}},
             {"workload",
              {{"arrival", "uniform"}, {"rate", "1/s"}, {"requests", 1}, {"prompt", prompt}, {"output", output}}}};
    return scenario::run_serve(s).result;
  };
  const auto base = run(none, 16384, 2);
  const auto tiles = run(tiled, 16384, 2);
  EXPECT_GT(tiles.ttft.mean, 1.1 * base.ttft.mean);
  EXPECT_LT(tiles.ttft.mean, 2.0 * base.ttft.mean);
  EXPECT_NEAR(run(tiled, 16, 64).tpot.mean, run(none, 16, 64).tpot.mean, 1e-12);
}

// A runtime whose expert kernel takes one (token, expert) pair at a time at small steps
// (expert_matvec_tokens: llama.cpp's mul_mat_vec_q and kernel_mul_mv_id for MUL_MAT_ID) reads an expert once
// per token that chose it: Mixtral's 8 experts, 2 a token, decoding 8 users at once read 16 experts' matrices
// a layer where the grouped GEMM reads the at most 8 distinct ones; at a limit below the batch, and for one
// user (a pair per expert), nothing changes. Bad figures are refused with the field named.
TEST(RuntimeProfile, ExpertMatvecReadsAnExpertOncePerTokenThatChoseIt) {
  const RuntimeFile matvec(R"("expert_matvec_tokens": {"value": 8, "source": "t"})", "_matvec");
  const RuntimeFile small(R"("expert_matvec_tokens": {"value": 4, "source": "t"})", "_small");
  const RuntimeFile none(R"("attention_factor": {"value": 1, "source": "t"})", "_none");
  EXPECT_DOUBLE_EQ(apply_runtime(load_node("h100-sxm"), matvec.load()).devices.expert_matvec_tokens->value, 8);
  EXPECT_FALSE(apply_runtime(load_node("h100-sxm"), none.load()).devices.expert_matvec_tokens);
  auto serve = [&](const RuntimeFile& rt, int users) {
    scenario::ServeScenario s;
    s.doc = {{"model", "mixtral-8x7b"},
             {"hw", "h100-sxm"},
             {"precision", "fp8"},
             {"runtime", rt.path()},
             {"scheduler", {{"kind", "chunked"}, {"max_num_seqs", 64}, {"max_num_batched_tokens", 8192}}},
             {"workload",
              {{"arrival", "closed-loop"},
               {"users", users},
               {"requests", users},
               {"user_interval", "0s"},
               {"prompt", 16},
               {"output", 64}}}};
    return scenario::run_serve(s).result;
  };
  const auto tpot = [&](const RuntimeFile& rt, int users) { return serve(rt, users).tpot.mean; };
  // The run says so among its assumptions, and only where the runtime has the kernel.
  const auto says = [&](const RuntimeFile& rt) {
    const auto a = serve(rt, 1).assumptions;
    return std::any_of(a.begin(), a.end(), [](const std::string& s) {
      return s.find("at most 8 tokens reads each MoE expert once per token that chose it") != std::string::npos;
    });
  };
  EXPECT_TRUE(says(matvec));
  EXPECT_FALSE(says(none));
  const double grouped = tpot(none, 8);
  EXPECT_GT(tpot(matvec, 8), 1.3 * grouped);
  EXPECT_NEAR(tpot(small, 8), grouped, 1e-9 * grouped);
  EXPECT_NEAR(tpot(matvec, 1), tpot(none, 1), 1e-9 * grouped);
  for (const char* bad : {R"("expert_matvec_tokens": {"value": 0, "source": "t"})",
                          R"("expert_matvec_tokens": {"value": 100000, "source": "t"})",
                          R"("expert_matvec_tokens": {"value": 8, "source": ""})"}) {
    try {
      (void)RuntimeFile(bad, "_bad").load();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("expert_matvec_tokens"), std::string::npos) << e.what();
    }
  }
}

// A runtime whose non-expert matmuls at small steps run a matrix-vector kernel that takes a few tokens at a
// time (dense_small_batch: llama.cpp Metal's kernel_mul_mv_ext, r1ptg tokens a threadgroup) reads each weight
// matrix once per group of tokens, and above those counts computes whole tiles of token columns
// (kernel_mul_mm, 32): a dense model decoding 8 users with 2 reads takes longer a step than with 1; 16 users
// are computed as 32. Bad figures are refused with the field named.
TEST(RuntimeProfile, DenseSmallBatchReadsTheWeightsPerTokenGroupAndPadsTheMatrixKernel) {
  const RuntimeFile metal(
      R"("dense_small_batch": {"matvec_passes": [1, 1, 1, 1, 2, 2, 2], "token_tile": 32, "source": "t"})", "_metal");
  const RuntimeFile none(R"("attention_factor": {"value": 1, "source": "t"})", "_none");
  const NodeProfile node = apply_runtime(load_node("h100-sxm"), metal.load());
  ASSERT_TRUE(node.devices.dense_small_batch);
  EXPECT_EQ(node.devices.dense_small_batch->matvec_passes.size(), 7u);
  EXPECT_DOUBLE_EQ(node.devices.dense_small_batch->token_tile, 32);
  EXPECT_FALSE(apply_runtime(load_node("h100-sxm"), none.load()).devices.dense_small_batch);

  const Architecture a = load_model("llama-3.1-8b");
  const cost::LayerCosts lc(a, model::precision("bf16"), node, cost::DeviceSplit{1, 1, false}, 2.0, nullptr);
  const cost::LayerCosts plain(a, model::precision("bf16"), apply_runtime(load_node("h100-sxm"), none.load()),
                               cost::DeviceSplit{1, 1, false}, 2.0, nullptr);
  EXPECT_DOUBLE_EQ(lc.weight_passes(1), 1);
  EXPECT_DOUBLE_EQ(lc.weight_passes(4), 1);
  EXPECT_DOUBLE_EQ(lc.weight_passes(8), 2);
  EXPECT_DOUBLE_EQ(lc.weight_passes(9), 1);
  EXPECT_DOUBLE_EQ(lc.matrix_tokens(8), 8);
  EXPECT_DOUBLE_EQ(lc.matrix_tokens(16), 32);
  EXPECT_DOUBLE_EQ(lc.matrix_tokens(40), 64);
  EXPECT_DOUBLE_EQ(plain.weight_passes(8), 1);
  EXPECT_DOUBLE_EQ(plain.matrix_tokens(16), 16);
  // Decode of 8 tokens is bound by the weights' reads: twice as many take twice the time; 4 tokens once.
  EXPECT_NEAR(lc.dense(8), 2 * plain.dense(8), 0.05 * plain.dense(8));
  EXPECT_NEAR(lc.dense(4), plain.dense(4), 1e-12);

  for (const char* bad : {R"("dense_small_batch": {"matvec_passes": [], "source": "t"})",
                          R"("dense_small_batch": {"matvec_passes": [1, 0], "source": "t"})",
                          R"("dense_small_batch": {"matvec_passes": [1.5], "source": "t"})",
                          R"("dense_small_batch": {"matvec_passes": [1], "token_tile": 0, "source": "t"})",
                          R"("dense_small_batch": {"matvec_passes": [1], "source": ""})",
                          R"("dense_small_batch": {"matvec_passes": [1], "tile": 32, "source": "t"})"}) {
    try {
      (void)RuntimeFile(bad, "_bad").load();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("dense_small_batch"), std::string::npos) << e.what();
    }
  }
}

// A transferred runtime (hw "any") belongs to every node whose GPUs are of its maker (gpu_vendor), says which
// machines' fits it was taken from, and is what `--runtime NAME` finds on such a node with no fit of that
// runtime of its own: the RTX 5090 has no dense llama.cpp rows, the RTX 4090 has its own fit, which comes
// first. A profile for "any" without the machines or the maker, or a profile of one node that names some,
// is refused.
TEST(RuntimeProfile, TransferredRuntimeAppliesToAnyNodeWhereNoneIsFitted) {
  moesim::test::TestDir dir("moesim_runtime");
  const auto write = [&](const std::string& name, const std::string& header) {
    return dir
        .write(name, R"({"id": "x", "kind": "runtime", "runtime": "x", )" + header +
                         R"(, "bandwidth_efficiency": {"value": 0.5, "source": "t"}})")
        .string();
  };
  const RuntimeProfile any = load_runtime(
      write("any.json", R"("hw": "any", "gpu_vendor": "nvidia", "transferred_from": ["rtx-4090", "rtx-3090"])"));
  EXPECT_EQ(any.transferred_from, (std::vector<std::string>{"rtx-4090", "rtx-3090"}));
  EXPECT_EQ(any.gpu_vendor, "nvidia");
  const NodeProfile n = apply_runtime(load_node("rtx-5090"), any);
  ASSERT_TRUE(n.devices.efficiency.has_value());
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory.front().value, 0.5);
  EXPECT_THROW((void)load_runtime(write("bare.json", R"("hw": "any")")), UserError);
  EXPECT_THROW((void)load_runtime(write("no-maker.json", R"("hw": "any", "transferred_from": ["rtx-3090"])")),
               UserError);
  EXPECT_THROW((void)load_runtime(write("named.json", R"("hw": "rtx-4090", "transferred_from": ["rtx-3090"])")),
               UserError);
  EXPECT_THROW((void)load_runtime(write("maker.json", R"("hw": "rtx-4090", "gpu_vendor": "nvidia")")), UserError);
  EXPECT_THROW((void)load_runtime(
                   write("bad-maker.json", R"("hw": "any", "gpu_vendor": "NVIDIA", "transferred_from": ["rtx-3090"])")),
               UserError);

  const RuntimeProfile on_5090 = find_runtime("llama.cpp-cuda", load_node("rtx-5090"));
  EXPECT_EQ(on_5090.hw, kAnyNode);
  EXPECT_EQ(on_5090.gpu_vendor, "nvidia");
  EXPECT_FALSE(on_5090.transferred_from.empty());
  EXPECT_EQ(find_runtime("llama.cpp-cuda", load_node("rtx-4090")).hw, "rtx-4090");
  // "llama.cpp" names the CUDA and the Metal transfers, and the node's GPUs say which: CUDA on an NVIDIA
  // card or an H100, Metal on an M4 Max.
  EXPECT_EQ(find_runtime("llama.cpp", load_node("rtx-5090")).runtime, "llama.cpp-cuda");
  EXPECT_EQ(find_runtime("llama.cpp", load_node("dgx-h100")).runtime, "llama.cpp-cuda");
  EXPECT_EQ(find_runtime("llama.cpp", load_node("macbook-pro-m4-max-128")).runtime, "llama.cpp-metal");
}

// A runtime's figures measured on one maker's GPUs say nothing of another's: llama.cpp's Metal medians are
// refused on an H100 and on the Ryzen AI Max's Radeon, its CUDA medians on a Mac, and a node that names no
// GPU maker takes no transferred runtime. Each refusal names the transfer, the maker it carries to and the
// node's.
TEST(RuntimeProfile, TransferredRuntimeCarriesOnlyToGpusOfItsMaker) {
  const auto refusal = [](std::string_view runtime, const NodeProfile& node) {
    try {
      (void)find_runtime(runtime, node);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string on_h100 = refusal("llama.cpp-metal", load_node("dgx-h100"));
  EXPECT_NE(on_h100.find("llama.cpp-metal@any-apple carries only to apple GPUs"), std::string::npos) << on_h100;
  EXPECT_NE(on_h100.find("dgx-h100's are nvidia"), std::string::npos) << on_h100;
  const std::string on_mac = refusal("llama.cpp-cuda", load_node("macbook-pro-m4-max-128"));
  EXPECT_NE(on_mac.find("llama.cpp-cuda@any-nvidia carries only to nvidia GPUs"), std::string::npos) << on_mac;
  EXPECT_NE(refusal("llama.cpp-metal", load_node("ryzen-ai-max-395-128")).find("are amd"), std::string::npos);
  NodeProfile cpu = load_node("rtx-5090");
  cpu.devices.gpu_vendor.clear();
  EXPECT_NE(refusal("llama.cpp-cuda", cpu).find("names no devices.gpu_vendor"), std::string::npos);
  // Laid over a node directly, the same rule: the profile is refused on the other maker's GPUs.
  const RuntimeProfile metal = find_runtime("llama.cpp-metal", load_node("macbook-pro-m4-max-128"));
  EXPECT_THROW((void)apply_runtime(load_node("rtx-5090"), metal), UserError);
  EXPECT_THROW((void)apply_runtime(cpu, find_runtime("llama.cpp-cuda", load_node("rtx-5090"))), UserError);
  EXPECT_NO_THROW((void)apply_runtime(load_node("mac-studio-m4-max-128"), metal));
  // A runtime fitted on fewer machines than a transfer needs (MLX on the 64 and 128 GB M4 Max MacBooks) has
  // no transfer: asked for on another Mac, the refusal says where it is fitted and why it does not carry.
  const std::string mlx = refusal("mlx", load_node("mac-studio-m4-max-128"));
  EXPECT_NE(mlx.find("mlx is fitted on macbook-pro-m4-max-128, macbook-pro-m4-max-64 only"), std::string::npos) << mlx;
  EXPECT_NE(mlx.find("no transfer of it to apple GPUs exists"), std::string::npos) << mlx;
}

// A runtime profile may say how its figures did on the validation table's MoE rows, one check per kind of
// row (prediction_check, written by `validate --fit`); a check of no rows, a negative error, a share outside
// [0, 1], an unknown kind (with the valid ones), a kind twice or a check that is not a list is refused. The
// line beside a range quotes the kinds asked for, every check where none are named, and none for a dense
// model.
TEST(RuntimeProfile, PredictionChecksAreReadAndBounded) {
  moesim::test::TestDir dir("moesim_runtime");
  const auto write = [&](const std::string& name, const std::string& check) {
    return dir
        .write(name, R"({"id": "x", "kind": "runtime", "runtime": "x", "hw": "rtx-4090",
          "bandwidth_efficiency": {"value": 0.9, "source": "t"},
          "prediction_interval": {"low": -0.1, "high": 0.2, "rows": 20, "source": "t"}, "prediction_check": )" +
                         check + "}")
        .string();
  };
  const RuntimeProfile ok = load_runtime(
      write("ok.json",
            R"([{"kind": "decode b1", "rows": 46, "median_abs_error": 0.109, "interval_coverage": 0.674, "source": "t"},
          {"kind": "max-load", "rows": 58, "median_abs_error": 0.138, "interval_coverage": 0.9, "source": "t"}])"));
  ASSERT_EQ(ok.prediction_checks.size(), 2u);
  const auto* decode = ok.prediction_check("decode b1");
  ASSERT_NE(decode, nullptr);
  EXPECT_EQ(decode->rows, 46);
  EXPECT_DOUBLE_EQ(decode->median_abs_error, 0.109);
  EXPECT_DOUBLE_EQ(decode->interval_coverage, 0.674);
  EXPECT_EQ(ok.prediction_check("prefill b1"), nullptr);
  const std::string decode_only = ok.interval_basis(true, {"decode b1"});
  EXPECT_NE(decode_only.find("on the 46 MoE batch-1 decode rows"), std::string::npos) << decode_only;
  EXPECT_EQ(decode_only.find("max-load"), std::string::npos) << decode_only;
  const std::string all = ok.interval_basis(true);
  EXPECT_NE(all.find("on the 58 MoE max-load rows of validation/measurements.csv it was checked on, its figures were "
                     "14% off (median) and 90% of them inside such a range"),
            std::string::npos)
      << all;
  EXPECT_EQ(ok.interval_basis(false), "x's interval from held-out dense rows (-10% .. +20% error)");
  for (const char* bad :
       {R"([{"kind": "decode b1", "rows": 0, "median_abs_error": 0.1, "interval_coverage": 0.5, "source": "t"}])",
        R"([{"kind": "decode b1", "rows": 3, "median_abs_error": -0.1, "interval_coverage": 0.5, "source": "t"}])",
        R"([{"kind": "decode b1", "rows": 3, "median_abs_error": 0.1, "interval_coverage": 1.5, "source": "t"}])",
        R"([{"kind": "decode b1", "rows": 3, "median_abs_error": 0.1, "interval_coverage": 0.5}])",
        R"([{"kind": "decode", "rows": 3, "median_abs_error": 0.1, "interval_coverage": 0.5, "source": "t"}])",
        R"([{"kind": "max-load", "rows": 3, "median_abs_error": 0.1, "interval_coverage": 0.5, "source": "t"},
            {"kind": "max-load", "rows": 4, "median_abs_error": 0.1, "interval_coverage": 0.5, "source": "t"}])",
        R"({"kind": "decode b1", "rows": 3, "median_abs_error": 0.1, "interval_coverage": 0.5, "source": "t"})"})
    EXPECT_THROW((void)load_runtime(write("bad.json", bad)), UserError) << bad;
  try {
    (void)load_runtime(write(
        "typo.json",
        R"([{"kind": "max_load", "rows": 3, "median_abs_error": 0.1, "interval_coverage": 0.5, "source": "t"}])"));
    ADD_FAILURE() << "an unknown kind was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("prediction_check[0].kind"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max-load"), std::string::npos) << e.what();
  }
}

// A node profile's devices.gpu_vendor is one of the makers moesim knows, or absent; a typo is refused with
// the valid ones.
TEST(RuntimeProfile, NodeGpuVendorIsAKnownMaker) {
  moesim::test::TestDir dir("moesim_runtime");
  const auto node = [&](const std::string& vendor) {
    return dir
        .write("n.json", R"({"id": "n", "kind": "node", "devices": {"count": 1, )" + vendor +
                             R"("memory_bandwidth": {"value": "100GB/s", "source": "t"}}})")
        .string();
  };
  EXPECT_EQ(load_node(node(R"("gpu_vendor": "amd", )")).devices.gpu_vendor, "amd");
  EXPECT_EQ(load_node(node("")).devices.gpu_vendor, "");
  try {
    (void)load_node(node(R"("gpu_vendor": "geforce", )"));
    ADD_FAILURE() << "an unknown maker was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_vendor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nvidia, amd, apple, intel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moesim::model

// find-max-rate's JSON carries the capacity answer's range where the search found one (MaxRate::
// max_rate_range: low and high beside the value, and what the range is made of), and nothing of it where not.
TEST(RuntimeProfile, MaxRateJsonCarriesItsRange) {
  moesim::scenario::MaxRate m;
  m.probes.resize(1);
  m.probes[0].rate = 10.0;
  m.probes[0].attainment = 0.95;
  const nlohmann::json plain = moesim::scenario::max_rate_to_json(m);
  EXPECT_FALSE(plain.at("max_rate").contains("low"));
  EXPECT_FALSE(plain.contains("range"));
  m.max_rate_range = std::make_pair(6.0, 16.5);
  m.range_basis = "x's interval from held-out dense rows (-36% .. +56% error)";
  m.engine_time_scale_low = 0.64;
  m.engine_time_scale_high = 1.56;
  const nlohmann::json j = moesim::scenario::max_rate_to_json(m);
  EXPECT_DOUBLE_EQ(j.at("max_rate").at("value").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j.at("max_rate").at("low").get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(j.at("max_rate").at("high").get<double>(), 16.5);
  EXPECT_EQ(j.at("range").at("basis"), m.range_basis);
  EXPECT_DOUBLE_EQ(j.at("range").at("engine_time_scale_low").get<double>(), 0.64);
  EXPECT_DOUBLE_EQ(j.at("range").at("engine_time_scale_high").get<double>(), 1.56);
}
