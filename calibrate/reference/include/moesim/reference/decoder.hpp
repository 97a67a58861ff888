#pragma once
// The reference decoder (issue 5, part 2): a Mixtral-architecture forward pass in f32 on OpenBLAS.
//
// Per decoder layer, as Hugging Face's modeling_mixtral.py computes it (MixtralDecoderLayer):
//   h   = x + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))   n1 = RMSNorm(x)
//   out = h + sum_i w_i · SwiGLU_{e_i}(n2)                                          n2 = RMSNorm(h)
// with grouped-query attention over a KV cache (each of the kv_heads serves heads/kv_heads query heads),
// rotary embeddings in the rotate_half form (inv_freq_i = theta^(-2i/d)), the router's softmax over all
// experts, its top-k renormalised to sum to 1 (MixtralSparseMoeBlock), and SwiGLU experts
// w2(silu(w1 n) * w3 n) (seed 001: gate, top-k, group-by, SwiGLU experts, weighted aggregate). After the
// last layer: RMSNorm and the LM head; greedy decoding takes the arg-max (lowest id on a tie).
//
// Weights are widened to f32 once at load (checkpoint.hpp to_f32): Debian's OpenBLAS 0.3.21 is built
// without BUILD_BFLOAT16 and has no sbgemv/sbgemm, so the kernels read f32, 4 bytes per weight. A rank
// loads only what it runs: the experts its placement gives it, and the attention, router, embedding and
// LM head only where it runs them.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/reference/checkpoint.hpp"

namespace moesim::reference {

/// The architecture plus what the forward pass needs from config.json beyond it.
struct DecoderShape {
  model::Architecture arch;
  double rope_theta = 0;
  double rms_eps = 0;
  std::int64_t sliding_window = 0;  ///< 0: full attention
  std::vector<std::string> notes;   ///< HF defaults the config relied on
};

/// Reads config.json (UserError naming the file and field; HF MixtralConfig's documented defaults for an
/// absent rope_theta (1e6) or rms_norm_eps (1e-5) are used and noted) and checks the architecture is one
/// the reference decoder runs.
DecoderShape load_decoder_shape(const std::filesystem::path& config_path);

struct ExpertWeights {
  std::vector<float> w1, w3;  ///< [I, h]
  std::vector<float> w2;      ///< [h, I]
};

struct LayerWeights {
  std::vector<float> input_norm, post_norm;             ///< [h]
  std::vector<float> wq, wk, wv, wo;                    ///< [nq·hd, h], [nkv·hd, h], [nkv·hd, h], [h, nq·hd]
  std::vector<float> gate;                              ///< [E, h]
  std::vector<std::unique_ptr<ExpertWeights>> experts;  ///< E entries; null where not held
};

struct Weights {
  bool dense = false;                ///< embedding, attention, router, final norm and LM head loaded
  std::vector<float> embed;          ///< [vocab, h]
  std::vector<float> final_norm;     ///< [h]
  std::vector<float> lm_head;        ///< [vocab, h] (a copy of embed when tied)
  std::vector<LayerWeights> layers;  ///< always `layers` entries
  std::vector<std::int64_t> experts_held;
  std::uint64_t bytes = 0;  ///< f32 bytes held
};

/// Loads `experts` (the same ids in every layer) and, when `dense`, every non-expert tensor, checking
/// each name and shape first (check_checkpoint). `progress` (may be empty) gets tensors loaded / total.
Weights load_weights(const Checkpoint& ckpt, const DecoderShape& shape, bool dense,
                     const std::vector<std::int64_t>& experts,
                     const std::function<void(std::size_t, std::size_t)>& progress = {});

// ---- Kernels. Row-major; X is [T, K], W is [M, K], Y is [T, M]. ----

/// Y = X · Wᵀ: cblas_sgemv for one row, cblas_sgemm otherwise.
void linear(const float* w, std::int64_t m, std::int64_t k, const float* x, std::int64_t t, float* y);
/// y = x / sqrt(mean(x²) + eps) ⊙ w, per row of length h.
void rms_norm(const float* x, const float* w, std::int64_t h, double eps, float* y);
/// Rotates one head vector of length d at `position` in place (rotate_half convention).
void rope(float* v, std::int64_t d, std::int64_t position, double theta);
/// y = w2 · (silu(w1 x) ⊙ w3 x) for T rows of x; `scratch` grows to 2·T·I floats.
void expert_forward(const ExpertWeights& e, std::int64_t h, std::int64_t inter, const float* x, std::int64_t t,
                    float* y, std::vector<float>& scratch);

/// The router for one token: softmax over `experts` logits, the top_k in descending weight (lowest id
/// first on a tie), weights renormalised to sum to 1.
void route(const float* logits, std::int64_t experts, std::int64_t top_k, std::int32_t* chosen, float* weights);

/// Index of the largest value (lowest index on a tie).
std::int64_t argmax(const float* v, std::int64_t n);

/// A KV cache and the attention block of every layer for one sequence.
class Attention {
 public:
  Attention(const DecoderShape& shape, std::int64_t capacity);
  /// x [T, h] holds the residual stream of positions start..start+T-1; adds the attention output to it
  /// (RMSNorm, q/k/v projections, RoPE, causal attention over the cache, o projection).
  void forward(const LayerWeights& w, std::int64_t layer, std::int64_t start, std::int64_t t, float* x);
  [[nodiscard]] std::int64_t capacity() const { return capacity_; }

 private:
  const DecoderShape* shape_;
  std::int64_t capacity_;
  std::vector<std::vector<float>> k_, v_;  ///< per layer [capacity, nkv·hd]
  std::vector<float> normed_, q_, ctx_, out_, scores_;
};

}  // namespace moesim::reference
