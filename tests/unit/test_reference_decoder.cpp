// The reference decoder (calibrate/reference/) against a plain scalar implementation written here from the
// equations of HF's modeling_mixtral.py (no BLAS, no batching, one position at a time, double accumulators),
// on a tiny random Mixtral-shaped checkpoint. Tokens must be equal and the last logits within 1e-5 of each
// other relative to the largest logit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../test_support.hpp"
#include "moesim/reference/checkpoint.hpp"
#include "moesim/reference/decoder.hpp"
#include "moesim/reference/run.hpp"

namespace fs = std::filesystem;
using namespace moesim::reference;

namespace {

nlohmann::json tiny_config(double init_std, std::int64_t window = 0) {
  nlohmann::json c = {{"architectures", {"MixtralForCausalLM"}},
                      {"model_type", "mixtral"},
                      {"hidden_size", 48},
                      {"intermediate_size", 80},
                      {"num_hidden_layers", 3},
                      {"num_attention_heads", 6},
                      {"num_key_value_heads", 2},
                      {"num_local_experts", 5},
                      {"num_experts_per_tok", 2},
                      {"vocab_size", 97},
                      {"max_position_embeddings", 128},
                      {"rope_theta", 10000.0},
                      {"rms_norm_eps", 1e-5},
                      {"initializer_range", init_std},
                      {"tie_word_embeddings", false}};
  c["sliding_window"] = window > 0 ? nlohmann::json(window) : nlohmann::json(nullptr);
  return c;
}

/// `path`: a checkpoint folder not yet there, inside a test folder of its own (test::TestDir), removed at the end.
struct CheckpointDir {
  moesim::test::TestDir dir;
  fs::path path;
  explicit CheckpointDir(const std::string& name) : dir(name), path(dir.path() / "checkpoint") {}
};

/// The scalar model: every weight as f32, every sum in double, one position at a time.
class Scalar {
 public:
  explicit Scalar(const fs::path& dir) : ckpt_(Checkpoint::open(dir)), shape_(load_decoder_shape(ckpt_.config_path())) {
    const auto& a = shape_.arch;
    h_ = a.hidden;
    hd_ = a.head_dim;
    k_.resize(static_cast<std::size_t>(a.layers));
    v_.resize(static_cast<std::size_t>(a.layers));
  }

  std::vector<float> w(const std::string& name, const std::vector<std::int64_t>& shape) const {
    return ckpt_.load_f32(name, shape);
  }

  // y[m] = sum_k W[m][k] x[k]
  static std::vector<double> matvec(const std::vector<float>& W, std::int64_t m, std::int64_t k,
                                    const std::vector<double>& x) {
    std::vector<double> y(static_cast<std::size_t>(m), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < k; ++j)
        y[static_cast<std::size_t>(i)] += W[static_cast<std::size_t>(i * k + j)] * x[static_cast<std::size_t>(j)];
    return y;
  }
  std::vector<double> norm(const std::vector<double>& x, const std::vector<float>& g) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + shape_.rms_eps);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * g[i];
    return y;
  }
  void rope(double* v, std::int64_t pos) const {
    const std::int64_t half = hd_ / 2;
    for (std::int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos) *
                         std::pow(shape_.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd_));
      const double a = v[i], b = v[i + half];
      v[i] = a * std::cos(ang) - b * std::sin(ang);
      v[i + half] = b * std::cos(ang) + a * std::sin(ang);
    }
  }

  /// Logits after feeding `token` at `pos`.
  std::vector<double> step(std::int32_t token, std::int64_t pos) {
    const auto& a = shape_.arch;
    const auto emb = w("model.embed_tokens.weight", {a.vocab, h_});
    std::vector<double> x(emb.begin() + token * h_, emb.begin() + (token + 1) * h_);
    for (std::int64_t l = 0; l < a.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const auto n1 = norm(x, w(p + "input_layernorm.weight", {h_}));
      auto q = matvec(w(p + "self_attn.q_proj.weight", {a.heads * hd_, h_}), a.heads * hd_, h_, n1);
      auto k = matvec(w(p + "self_attn.k_proj.weight", {a.kv_heads * hd_, h_}), a.kv_heads * hd_, h_, n1);
      auto v = matvec(w(p + "self_attn.v_proj.weight", {a.kv_heads * hd_, h_}), a.kv_heads * hd_, h_, n1);
      for (std::int64_t hq = 0; hq < a.heads; ++hq) rope(&q[static_cast<std::size_t>(hq * hd_)], pos);
      for (std::int64_t hk = 0; hk < a.kv_heads; ++hk) rope(&k[static_cast<std::size_t>(hk * hd_)], pos);
      auto& K = k_[static_cast<std::size_t>(l)];
      auto& V = v_[static_cast<std::size_t>(l)];
      K.push_back(k);
      V.push_back(v);
      std::vector<double> ctx(static_cast<std::size_t>(a.heads * hd_), 0.0);
      const std::int64_t first =
          shape_.sliding_window > 0 ? std::max<std::int64_t>(0, pos - shape_.sliding_window + 1) : 0;
      for (std::int64_t hq = 0; hq < a.heads; ++hq) {
        const std::int64_t hk = hq / (a.heads / a.kv_heads);
        std::vector<double> s;
        for (std::int64_t j = first; j <= pos; ++j) {
          double d = 0;
          for (std::int64_t i = 0; i < hd_; ++i)
            d += q[static_cast<std::size_t>(hq * hd_ + i)] *
                 K[static_cast<std::size_t>(j)][static_cast<std::size_t>(hk * hd_ + i)];
          s.push_back(d / std::sqrt(static_cast<double>(hd_)));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (std::int64_t j = first; j <= pos; ++j)
          for (std::int64_t i = 0; i < hd_; ++i)
            ctx[static_cast<std::size_t>(hq * hd_ + i)] +=
                s[static_cast<std::size_t>(j - first)] / sum *
                V[static_cast<std::size_t>(j)][static_cast<std::size_t>(hk * hd_ + i)];
      }
      const auto o = matvec(w(p + "self_attn.o_proj.weight", {h_, a.heads * hd_}), h_, a.heads * hd_, ctx);
      for (std::int64_t i = 0; i < h_; ++i) x[static_cast<std::size_t>(i)] += o[static_cast<std::size_t>(i)];
      // MoE block: softmax router, top-k renormalised, SwiGLU experts, weighted sum.
      const auto n2 = norm(x, w(p + "post_attention_layernorm.weight", {h_}));
      const auto logits =
          matvec(w(p + "block_sparse_moe.gate.weight", {a.routed_experts, h_}), a.routed_experts, h_, n2);
      std::vector<std::int64_t> order(static_cast<std::size_t>(a.routed_experts));
      for (std::size_t e = 0; e < order.size(); ++e) order[e] = static_cast<std::int64_t>(e);
      std::stable_sort(order.begin(), order.end(), [&](auto i, auto j) {
        return logits[static_cast<std::size_t>(i)] > logits[static_cast<std::size_t>(j)];
      });
      double top = 0;  // softmax then renormalising the top-k = softmax over the top-k logits
      for (std::int64_t i = 0; i < a.top_k; ++i)
        top += std::exp(logits[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] -
                        logits[static_cast<std::size_t>(order[0])]);
      for (std::int64_t i = 0; i < a.top_k; ++i) {
        const auto e = order[static_cast<std::size_t>(i)];
        const double g =
            std::exp(logits[static_cast<std::size_t>(e)] - logits[static_cast<std::size_t>(order[0])]) / top;
        const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        const auto I = a.expert_ffn;
        const auto u1 = matvec(w(ep + "w1.weight", {I, h_}), I, h_, n2);
        const auto u3 = matvec(w(ep + "w3.weight", {I, h_}), I, h_, n2);
        std::vector<double> act(static_cast<std::size_t>(I));
        for (std::size_t j = 0; j < act.size(); ++j) act[j] = u1[j] / (1 + std::exp(-u1[j])) * u3[j];
        const auto y = matvec(w(ep + "w2.weight", {h_, I}), h_, I, act);
        for (std::int64_t j = 0; j < h_; ++j) x[static_cast<std::size_t>(j)] += g * y[static_cast<std::size_t>(j)];
      }
    }
    const auto n = norm(x, w("model.norm.weight", {h_}));
    return matvec(w("lm_head.weight", {a.vocab, h_}), a.vocab, h_, n);
  }

  const DecoderShape& shape() const { return shape_; }

 private:
  Checkpoint ckpt_;
  DecoderShape shape_;
  std::int64_t h_ = 0, hd_ = 0;
  std::vector<std::vector<std::vector<double>>> k_, v_;
};

void expect_same_run(const nlohmann::json& config, const std::vector<std::int32_t>& prompt, std::int64_t tokens) {
  CheckpointDir dir("moesim_ref_scalar");
  InitOptions io;
  io.dtype = DType::F32;
  io.init_std = config["initializer_range"].get<double>();
  write_random_checkpoint(config, dir.path, io);

  World world;  // not under mpirun: one process
  RunOptions o;
  o.checkpoint = dir.path;
  o.prompt = prompt;
  o.new_tokens = tokens;
  o.progress = false;
  o.threads = 1;
  const auto r = run_reference(world, o);

  Scalar s(dir.path);
  std::vector<std::int32_t> generated;
  std::vector<double> logits;
  std::int64_t pos = 0;
  for (const auto t : prompt) logits = s.step(t, pos++);
  for (std::int64_t i = 0; i < tokens; ++i) {
    const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    generated.push_back(next);
    if (i + 1 < tokens) logits = s.step(next, pos++);
  }
  EXPECT_EQ(r.generated, generated);
  ASSERT_EQ(r.logits.size(), logits.size());
  double largest = 0, diff = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    largest = std::max(largest, std::abs(logits[i]));
    diff = std::max(diff, std::abs(logits[i] - static_cast<double>(r.logits[i])));
  }
  EXPECT_LE(diff, 1e-5 * largest) << "max |difference| " << diff << ", largest |logit| " << largest;
  // The routing trace covers every position that was fed: the prompt and all but the last generated token.
  EXPECT_EQ(r.trace.tokens(), static_cast<std::int64_t>(prompt.size()) + tokens - 1);
  EXPECT_EQ(r.steps.size(), static_cast<std::size_t>(tokens));
  EXPECT_TRUE(r.steps.front().prefill);
}

}  // namespace

// Weights of standard deviation 0.3 (not HF's 0.02) so that attention and experts, not the embedding alone,
// decide the next token: with 0.02 a random model repeats a short cycle whatever the layers compute.
// A balancing registered beside the built-in ones runs in the simulator only: the reference decoder refuses it,
// naming the flag and the ones it implements, before it opens the checkpoint.
TEST(ReferenceDecoder, RefusesARegisteredBalancing) {
  namespace sim = moesim::sim;
  const auto mine = static_cast<sim::Balancing>(92);
  sim::register_balancing({mine, "test-ref-busy", "busy full loading, registered again",
                           sim::balancing_info(sim::Balancing::BusyAll).fill});
  World world;  // not under mpirun: one process
  RunOptions o;
  o.checkpoint = "/nonexistent/moesim-checkpoint";
  o.balancing = mine;
  o.progress = false;
  moesim::test::expect_user_error([&] { (void)run_reference(world, o); },
                                  {"--balancing test-ref-busy: the reference decoder implements the built-in "
                                   "balancings only (none, busy, lru-fill)"});
}

TEST(ReferenceDecoder, MatchesScalarImplementation) { expect_same_run(tiny_config(0.3), {5, 17, 42, 3, 88, 60}, 10); }

TEST(ReferenceDecoder, MatchesScalarWithSlidingWindow) {
  expect_same_run(tiny_config(0.3, 4), {5, 17, 42, 3, 88, 60, 1, 2}, 8);
}

TEST(ReferenceDecoder, MatchesScalarWithOneTokenPrompt) { expect_same_run(tiny_config(0.3), {7}, 6); }

// The router: softmax over all experts, top-k in descending weight, renormalised; ties to the lower id.
TEST(ReferenceDecoder, RouterRenormalisesTopK) {
  const float logits[4] = {0.0F, 2.0F, 1.0F, 2.0F};
  std::int32_t chosen[2];
  float w[2];
  route(logits, 4, 2, chosen, w);
  EXPECT_EQ(chosen[0], 1);  // tie between 1 and 3: the lower id first
  EXPECT_EQ(chosen[1], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5F);
  EXPECT_FLOAT_EQ(w[1], 0.5F);
  const float l2[3] = {std::log(1.0F), std::log(3.0F), std::log(6.0F)};
  route(l2, 3, 2, chosen, w);
  EXPECT_EQ(chosen[0], 2);
  EXPECT_EQ(chosen[1], 1);
  EXPECT_NEAR(w[0], 6.0 / 9.0, 1e-6);  // p = (1, 3, 6) / 10, renormalised over {6, 3}
  EXPECT_NEAR(w[1], 3.0 / 9.0, 1e-6);
}

// RMSNorm of (3, 4): mean square 12.5, so y = x / sqrt(12.5 + eps) * w.
TEST(ReferenceDecoder, RmsNorm) {
  const float x[2] = {3, 4}, g[2] = {1, 2};
  float y[2];
  rms_norm(x, g, 2, 0.0, y);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 2 * 4 / std::sqrt(12.5), 1e-6);
}

// RoPE at position 0 is the identity; at position p it rotates pair (i, i + d/2) by p·theta^(-2i/d), so
// norms are kept.
TEST(ReferenceDecoder, RopeRotatesPairs) {
  float v[4] = {1, 2, 3, 4};
  rope(v, 4, 0, 10000.0);
  EXPECT_FLOAT_EQ(v[0], 1);
  EXPECT_FLOAT_EQ(v[3], 4);
  rope(v, 4, 1, 10000.0);
  EXPECT_NEAR(v[0], std::cos(1.0) * 1 - std::sin(1.0) * 3, 1e-6);  // i = 0: angle 1
  EXPECT_NEAR(v[2], 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(v[1] * v[1] + v[3] * v[3], 4 + 16, 1e-5);
}
