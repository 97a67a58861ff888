// The reference decoder's kernels and weight loading (see decoder.hpp for the equations and sources).
#include "moesim/reference/decoder.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/resources.hpp"

namespace moesim::reference {

namespace {

int as_int(std::int64_t v) {
  MOESIM_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "BLAS dimension out of int range");
  return static_cast<int>(v);
}

// HF MixtralConfig defaults (transformers/models/mixtral/configuration_mixtral.py): rope_theta=1e6,
// rms_norm_eps=1e-5. A config that omits them means these values to transformers too.
constexpr double kHfDefaultRopeTheta = 1e6;
constexpr double kHfDefaultRmsEps = 1e-5;

}  // namespace

DecoderShape load_decoder_shape(const std::filesystem::path& config_path) {
  const auto where = config_path.string();
  if (!std::filesystem::exists(config_path)) {
    throw UserError(where +
                    ": no config.json beside the weights; copy the model's config.json from its "
                    "Hugging Face repository into the checkpoint directory");
  }
  const auto doc = json::load_file(config_path);
  DecoderShape s;
  s.arch = model::parse_hf_config(doc, where);
  check_reference_architecture(s.arch, where);
  const json::Node n(doc, where);
  if (auto theta = n.optional_number("rope_theta")) {
    if (!(*theta > 0)) throw n.error("$.rope_theta must be positive; the model's config.json has the right value");
    s.rope_theta = *theta;
  } else {
    s.rope_theta = kHfDefaultRopeTheta;
    s.notes.push_back("config.json has no rope_theta: transformers' MixtralConfig default 1e6 is used");
  }
  if (auto eps = n.optional_number("rms_norm_eps")) {
    if (!(*eps > 0)) throw n.error("$.rms_norm_eps must be positive; the model's config.json has the right value");
    s.rms_eps = *eps;
  } else {
    s.rms_eps = kHfDefaultRmsEps;
    s.notes.push_back("config.json has no rms_norm_eps: transformers' MixtralConfig default 1e-5 is used");
  }
  s.sliding_window = s.arch.layer_specs.empty() ? 0 : s.arch.layer_specs.front().sliding_window;
  return s;
}

Weights load_weights(const Checkpoint& ckpt, const DecoderShape& shape, bool dense,
                     const std::vector<std::int64_t>& experts,
                     const std::function<void(std::size_t, std::size_t)>& progress) {
  const auto& a = shape.arch;
  check_checkpoint(ckpt, a);
  const std::int64_t h = a.hidden, hd = a.head_dim, inter = a.expert_ffn;
  const std::size_t total = (dense ? 3 + static_cast<std::size_t>(a.layers) * 7 : 0) +
                            static_cast<std::size_t>(a.layers) * experts.size() * 3;
  // Every weight this rank holds, widened to f32, before the first is read: a checkpoint too large for this
  // machine is refused here, not killed by the kernel part-way through loading.
  {
    const auto vocab = static_cast<double>(a.vocab), hh = static_cast<double>(h);
    const double per_layer_dense = 2 * hh + static_cast<double>((a.heads + 2 * a.kv_heads) * hd) * hh +
                                   hh * static_cast<double>(a.heads * hd) + static_cast<double>(a.routed_experts) * hh;
    const double floats =
        (dense ? 2 * vocab * hh + hh + static_cast<double>(a.layers) * per_layer_dense : 0) +
        static_cast<double>(a.layers) * static_cast<double>(experts.size()) * 3 * hh * static_cast<double>(inter);
    model::require_memory(units::bytes(4 * floats),
                          ckpt.path().string() + ": this rank's weights in f32 (" + std::to_string(experts.size()) +
                              " experts per layer" + (dense ? ", attention, router, embedding and LM head" : "") + ")",
                          "spread the experts over more ranks (mpirun -np N), or use a machine with more memory");
  }
  std::size_t done = 0;
  Weights w;
  w.dense = dense;
  w.experts_held = experts;
  auto load = [&](const std::string& name, const std::vector<std::int64_t>& dims) {
    auto v = ckpt.load_f32(name, dims);
    w.bytes += v.size() * sizeof(float);
    ++done;
    if (progress) progress(done, total);
    return v;
  };
  if (dense) {
    w.embed = load("model.embed_tokens.weight", {a.vocab, h});
    w.final_norm = load("model.norm.weight", {h});
    if (a.tie_embeddings) {
      w.lm_head = w.embed;
      w.bytes += w.lm_head.size() * sizeof(float);
      ++done;
    } else {
      w.lm_head = load("lm_head.weight", {a.vocab, h});
    }
  }
  w.layers.resize(static_cast<std::size_t>(a.layers));
  for (std::int64_t i = 0; i < a.layers; ++i) {
    auto& l = w.layers[static_cast<std::size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    if (dense) {
      l.input_norm = load(p + "input_layernorm.weight", {h});
      l.post_norm = load(p + "post_attention_layernorm.weight", {h});
      l.wq = load(p + "self_attn.q_proj.weight", {a.heads * hd, h});
      l.wk = load(p + "self_attn.k_proj.weight", {a.kv_heads * hd, h});
      l.wv = load(p + "self_attn.v_proj.weight", {a.kv_heads * hd, h});
      l.wo = load(p + "self_attn.o_proj.weight", {h, a.heads * hd});
      l.gate = load(p + "block_sparse_moe.gate.weight", {a.routed_experts, h});
    }
    l.experts.resize(static_cast<std::size_t>(a.routed_experts));
    for (const auto e : experts) {
      MOESIM_CHECK(e >= 0 && e < a.routed_experts, "expert id out of range");
      const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      auto ew = std::make_unique<ExpertWeights>();
      ew->w1 = load(q + "w1.weight", {inter, h});
      ew->w3 = load(q + "w3.weight", {inter, h});
      ew->w2 = load(q + "w2.weight", {h, inter});
      l.experts[static_cast<std::size_t>(e)] = std::move(ew);
    }
  }
  return w;
}

void linear(const float* w, std::int64_t m, std::int64_t k, const float* x, std::int64_t t, float* y) {
  if (t == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, as_int(m), as_int(k), 1.0F, w, as_int(k), x, 1, 0.0F, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_int(t), as_int(m), as_int(k), 1.0F, x, as_int(k), w,
                as_int(k), 0.0F, y, as_int(m));
  }
}

void rms_norm(const float* x, const float* w, std::int64_t h, double eps, float* y) {
  double sum = 0;
  for (std::int64_t i = 0; i < h; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(h) + eps));
  for (std::int64_t i = 0; i < h; ++i) y[i] = w[i] * (x[i] * scale);
}

void rope(float* v, std::int64_t d, std::int64_t position, double theta) {
  const std::int64_t half = d / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const double angle = static_cast<double>(position) * inv_freq;
    const auto c = static_cast<float>(std::cos(angle));
    const auto s = static_cast<float>(std::sin(angle));
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

void expert_forward(const ExpertWeights& e, std::int64_t h, std::int64_t inter, const float* x, std::int64_t t,
                    float* y, std::vector<float>& scratch) {
  const auto n = static_cast<std::size_t>(t * inter);
  if (scratch.size() < 2 * n) scratch.resize(2 * n);
  float* g = scratch.data();
  float* u = scratch.data() + n;
  linear(e.w1.data(), inter, h, x, t, g);
  linear(e.w3.data(), inter, h, x, t, u);
  for (std::size_t i = 0; i < n; ++i) g[i] = g[i] / (1.0F + std::exp(-g[i])) * u[i];  // silu(g) * u
  linear(e.w2.data(), h, inter, g, t, y);
}

void route(const float* logits, std::int64_t experts, std::int64_t top_k, std::int32_t* chosen, float* weights) {
  float mx = logits[0];
  for (std::int64_t e = 1; e < experts; ++e) mx = std::max(mx, logits[e]);
  std::vector<float> p(static_cast<std::size_t>(experts));
  float sum = 0;
  for (std::int64_t e = 0; e < experts; ++e) sum += p[static_cast<std::size_t>(e)] = std::exp(logits[e] - mx);
  for (auto& v : p) v /= sum;
  std::vector<std::int32_t> order(static_cast<std::size_t>(experts));
  for (std::int64_t e = 0; e < experts; ++e) order[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)];
  });
  float top = 0;
  for (std::int64_t i = 0; i < top_k; ++i) top += p[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])];
  for (std::int64_t i = 0; i < top_k; ++i) {
    chosen[i] = order[static_cast<std::size_t>(i)];
    weights[i] = p[static_cast<std::size_t>(chosen[i])] / top;
  }
}

std::int64_t argmax(const float* v, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

Attention::Attention(const DecoderShape& shape, std::int64_t capacity) : shape_(&shape), capacity_(capacity) {
  const auto& a = shape.arch;
  const auto row = static_cast<std::size_t>(a.kv_heads * a.head_dim);
  k_.assign(static_cast<std::size_t>(a.layers), std::vector<float>(static_cast<std::size_t>(capacity) * row));
  v_ = k_;
}

void Attention::forward(const LayerWeights& w, std::int64_t layer, std::int64_t start, std::int64_t t, float* x) {
  const auto& a = shape_->arch;
  const std::int64_t h = a.hidden, hd = a.head_dim, nq = a.heads, nkv = a.kv_heads;
  const std::int64_t qw = nq * hd, kw = nkv * hd, group = nq / nkv;
  MOESIM_CHECK(start + t <= capacity_, "KV cache capacity exceeded");
  const auto tt = static_cast<std::size_t>(t);
  normed_.resize(tt * static_cast<std::size_t>(h));
  q_.resize(tt * static_cast<std::size_t>(qw));
  ctx_.resize(tt * static_cast<std::size_t>(qw));
  out_.resize(tt * static_cast<std::size_t>(h));
  scores_.resize(static_cast<std::size_t>(start + t));
  for (std::int64_t r = 0; r < t; ++r)
    rms_norm(x + r * h, w.input_norm.data(), h, shape_->rms_eps, &normed_[static_cast<std::size_t>(r * h)]);
  float* kc = k_[static_cast<std::size_t>(layer)].data();
  float* vc = v_[static_cast<std::size_t>(layer)].data();
  linear(w.wq.data(), qw, h, normed_.data(), t, q_.data());
  // New keys and values go straight into the cache rows of their positions.
  linear(w.wk.data(), kw, h, normed_.data(), t, kc + start * kw);
  linear(w.wv.data(), kw, h, normed_.data(), t, vc + start * kw);
  for (std::int64_t r = 0; r < t; ++r) {
    const std::int64_t pos = start + r;
    for (std::int64_t hq = 0; hq < nq; ++hq)
      rope(&q_[static_cast<std::size_t>(r * qw + hq * hd)], hd, pos, shape_->rope_theta);
    for (std::int64_t hk = 0; hk < nkv; ++hk) rope(kc + pos * kw + hk * hd, hd, pos, shape_->rope_theta);
  }
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const std::int64_t window = shape_->sliding_window;
  for (std::int64_t r = 0; r < t; ++r) {
    const std::int64_t pos = start + r;
    // Causal, and within the sliding window when the config sets one (Mistral: i - j < window).
    const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, pos - window + 1) : 0;
    for (std::int64_t hq = 0; hq < nq; ++hq) {
      const float* q = &q_[static_cast<std::size_t>(r * qw + hq * hd)];
      const std::int64_t hk = hq / group;
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = first; j <= pos; ++j) {
        const float* k = kc + j * kw + hk * hd;
        float s = 0;
        for (std::int64_t d = 0; d < hd; ++d) s += q[d] * k[d];
        s *= scale;
        scores_[static_cast<std::size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      float sum = 0;
      for (std::int64_t j = first; j <= pos; ++j) {
        auto& s = scores_[static_cast<std::size_t>(j)];
        s = std::exp(s - mx);
        sum += s;
      }
      float* c = &ctx_[static_cast<std::size_t>(r * qw + hq * hd)];
      std::fill(c, c + hd, 0.0F);
      for (std::int64_t j = first; j <= pos; ++j) {
        const float p = scores_[static_cast<std::size_t>(j)] / sum;
        const float* v = vc + j * kw + hk * hd;
        for (std::int64_t d = 0; d < hd; ++d) c[d] += p * v[d];
      }
    }
  }
  linear(w.wo.data(), h, qw, ctx_.data(), t, out_.data());
  for (std::size_t i = 0; i < tt * static_cast<std::size_t>(h); ++i) x[i] += out_[i];
}

}  // namespace moesim::reference
