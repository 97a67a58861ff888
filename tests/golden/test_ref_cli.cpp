// `moesim ref init|run` and `moesim validate` end to end on a tiny random Mixtral-shaped checkpoint:
// - expert parallelism changes nothing: the generated tokens and the last logits are the same for 1, 2 and
//   4 MPI ranks, centralised and decentralised, for every balancing (logits within 1e-5 relative to the
//   largest), and equal to a run without mpirun;
// - the routing trace it writes is one the simulator's tools read; the timing file has a row per layer;
// - validate prints a comparison; bad input is one line and exit code 2.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "moesim/sim/trace_io.hpp"

using namespace moesim::test;

namespace {

// Weights of standard deviation 0.3 so that attention and the experts decide the tokens (see
// test_reference_decoder.cpp); 5 experts, so 2 and 4 ranks hold unequal shares.
const char* const kConfig = R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 48,
  "intermediate_size": 80, "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2,
  "num_local_experts": 5, "num_experts_per_tok": 2, "vocab_size": 97, "max_position_embeddings": 128,
  "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "initializer_range": 0.3, "sliding_window": null,
  "tie_word_embeddings": false})";

const std::string kRun = " ref run --prompt 5,17,42,3,88,60,1 --tokens 8 --threads 1 --quiet ";

/// Max |a - b| over the logits, relative to the largest |b|; the tokens must be equal.
void expect_same_output(const std::string& got_path, const nlohmann::json& want, const std::string& what) {
  SCOPED_TRACE(what);
  const auto got = nlohmann::json::parse(slurp(got_path));
  EXPECT_EQ(got["tokens"], want["tokens"]);
  const auto& a = got["logits"];
  const auto& b = want["logits"];
  ASSERT_EQ(a.size(), b.size());
  double largest = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::abs(b[i].get<double>()));
    diff = std::max(diff, std::abs(a[i].get<double>() - b[i].get<double>()));
  }
  EXPECT_LE(diff, 1e-5 * largest) << "max |difference| " << diff;
}

class RefCli : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = std::make_unique<Scratch>("moesim_ref_cli");
    s_->write("config.json", kConfig);
    const auto r = s_->moesim("ref init --quiet --config " + s_->path("config.json") + " --out " + s_->path("ckpt"));
    ASSERT_EQ(r.code, 0) << r.err;
    ckpt_ = " --checkpoint " + s_->path("ckpt");
  }
  std::unique_ptr<Scratch> s_;
  std::string ckpt_;
};

}  // namespace

TEST_F(RefCli, SameTokensAndLogitsForOneTwoFourRanksEveryModeAndBalancing) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun (Open MPI) on this machine";
  auto r = s_->moesim(kRun + ckpt_ + " --logits-out " + s_->path("single.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto want = nlohmann::json::parse(slurp(s_->path("single.json")));
  ASSERT_EQ(want["tokens"].size(), 8u);
  for (const char* attention : {"centralised", "decentralised"}) {
    for (const char* balancing : {"none", "busy", "lru-fill"}) {
      for (const int ranks : {1, 2, 4}) {
        const std::string what = std::string(attention) + ", " + balancing + ", " + std::to_string(ranks) + " ranks";
        const auto out = s_->path("logits.json");
        r = s_->shell(kMpirun + std::to_string(ranks) + " " + kBin + kRun + ckpt_ + " --attention " + attention +
                      " --balancing " + balancing + " --logits-out " + out);
        ASSERT_EQ(r.code, 0) << what << "\n" << r.err;
        expect_same_output(out, want, what);
      }
    }
  }
  // Replicated groups split one expert's prompt tokens between its replicas (the i mod r dispatch).
  for (const char* attention : {"centralised", "decentralised"}) {
    r = s_->shell(kMpirun + "4 " + kBin + kRun + ckpt_ + " --placement replicated-groups --groups 2 --attention " +
                  attention + " --logits-out " + s_->path("rg.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_output(s_->path("rg.json"), want, std::string("replicated-groups, ") + attention);
  }
}

// The trace is the simulator's format (request 0, positions 0..), one record per token fed; the timing
// CSV has one row per step and layer plus one per step for embedding and LM head.
TEST_F(RefCli, WritesTraceTimingAndSummary) {
  const auto r =
      s_->moesim(kRun + ckpt_ + " --json --trace-out " + s_->path("t.jsonl") + " --timing-out " + s_->path("t.csv"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto trace = moesim::sim::read_trace(s_->path("t.jsonl"));
  EXPECT_EQ(trace.tokens(), 7 + 8 - 1);
  EXPECT_EQ(trace.header.layers, 3);
  EXPECT_EQ(trace.header.experts, 5);
  EXPECT_EQ(trace.header.top_k, 2);
  EXPECT_TRUE(trace.has_weights());
  EXPECT_EQ(trace.position.back(), 13u);
  const auto csv = slurp(s_->path("t.csv"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 8 * (3 + 1));
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["decode_steps"], 7);
  EXPECT_EQ(j["generated"].size(), 8u);
  EXPECT_GT(j["decode_time_per_token"]["value"].get<double>(), 0);
  EXPECT_EQ(j["decode_time_per_token"]["unit"], "s");
  const auto st = s_->moesim("trace stats " + s_->path("t.jsonl"));
  EXPECT_EQ(st.code, 0) << st.err;
}

// validate on one rank with this repository's measured profile: it runs both and reports an error in %.
TEST_F(RefCli, ValidateOneRankReportsError) {
  const auto r = s_->moesim("validate" + ckpt_ +
                            " --prompt 5,17,42 --tokens 12 --threads 1 --quiet --json --hw " MOESIM_SOURCE_DIR
                            "/hwprofiles/measured/dev-vm-xeon-2cpu-2026-11-21.json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["decode_tokens"], 11);
  EXPECT_GT(j["measured"]["time"]["value"].get<double>(), 0);
  EXPECT_GT(j["predicted"]["time"]["value"].get<double>(), 0);
  EXPECT_TRUE(std::isfinite(j["error"]["value"].get<double>()));
  EXPECT_EQ(j["error"]["unit"], "%");
}

TEST_F(RefCli, BadInputIsOneLine) {
  const std::string c = ckpt_;
  const std::string missing = s_->path("nowhere");
  const BadInput cases[] = {
      {"no checkpoint", "ref run --checkpoint " + missing + " --prompt 1 --quiet", {"nowhere"}},
      {"prompt id outside the vocabulary", "ref run" + c + " --prompt 1,97 --quiet", {"--prompt", "97", "0 .. 96"}},
      {"no tokens", "ref run" + c + " --prompt 1 --tokens 0 --quiet", {"--tokens"}},
      {"unknown strategy", "ref run" + c + " --prompt 1 --strategy P-XX --quiet", {"P-XX"}},
      {"too many tokens", "ref run" + c + " --prompt 1 --tokens 200 --quiet", {"max_position_embeddings", "128"}},
      {"init over a checkpoint",
       "ref init --quiet --config " + s_->path("config.json") + " --out " + s_->path("ckpt"),
       {"ckpt"}},
      {"init of an unknown model", "ref init --quiet --config no-such-model --out " + s_->path("x"), {"no-such-model"}},
      {"init of a non-Mixtral model", "ref init --quiet --config dbrx-instruct --out " + s_->path("x"), {"dbrx"}},
      {"bad dtype",
       "ref init --quiet --config " + s_->path("config.json") + " --dtype i8 --out " + s_->path("x"),
       {"--dtype", "bf16"}},
      {"validate without a profile", "validate" + c + " --prompt 1 --quiet", {"--hw"}},
      {"validate with an unknown profile", "validate" + c + " --prompt 1 --quiet --hw no-such-node", {"no-such-node"}},
      {"unknown ref part", "ref runn", {"runn", "run"}},
  };
  for (const auto& bad : cases) expect_bad_input(bad);
  EXPECT_FALSE(fs::exists(s_->path("x")));
}

// A config.json that does not match the weights names the tensor and both shapes.
TEST_F(RefCli, ConfigThatDoesNotMatchTheWeightsIsRefused) {
  auto cfg = nlohmann::json::parse(kConfig);
  cfg["intermediate_size"] = 64;
  s_->write("ckpt/config.json", cfg.dump());
  expect_bad_input({"mis-shaped expert", "ref run" + ckpt_ + " --prompt 1 --quiet", {"experts.0.w1.weight", "64"}});
}
