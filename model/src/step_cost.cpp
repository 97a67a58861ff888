// One physics: the cost of a layer's parts on one device (model/step_cost.hpp explains the model).

#include "moesim/model/step_cost.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "moesim/model/error.hpp"

namespace moesim::cost {

const std::vector<NamedOption<ExpertExecution>>& expert_executions() {
  static const std::vector<NamedOption<ExpertExecution>> all = {
      {ExpertExecution::Sequential, "sequential",
       "every local expert in turn with its own kernels, chosen or not (FlexFlow's for-loop, seed 001: 19 "
       "Linear calls per MoE block of 6 experts)"},
      {ExpertExecution::SequentialRouted, "sequential-routed",
       "the chosen local experts in turn, each with its own kernels (Hugging Face, MLX, llama.cpp's CPU path)"},
      {ExpertExecution::Fused, "fused",
       "one grouped kernel set over the chosen experts (vLLM / TensorRT-LLM fused MoE, llama.cpp mul_mat_id)"},
      {ExpertExecution::Parallel, "parallel",
       "the chosen experts' kernels on concurrent streams: launch overheads overlap the execution"},
  };
  return all;
}
ExpertExecution expert_execution_by_name(std::string_view name) {
  return by_name(expert_executions(), name, "expert execution");
}
std::string_view name_of(ExpertExecution e) { return name_in(expert_executions(), e); }

namespace {
void note(std::vector<std::string>* notes, std::string line) {
  if (notes && std::find(notes->begin(), notes->end(), line) == notes->end()) notes->push_back(std::move(line));
}
}  // namespace

ComputePath compute_path(const model::NodeProfile& node, const model::Precision& weights,
                         std::vector<std::string>* notes) {
  ComputePath p;
  const auto& peaks = node.devices.peak_flops;
  // The routed experts' format decides the path (they are most of the work); a composite's other tensors
  // (attention, dense layers) are priced on the same path.
  const std::string w(model::expert_format(weights));
  if (w == "bf16" || w == "fp16" || w == "fp32") {
    p.dtype = w;
    // The two 16-bit float formats run at one rate on every GPU a profile describes (NVIDIA's datasheets
    // give the same FP16 and BF16 tensor-core figures; Apple GPUs compute in fp16): a profile with one of
    // the two peaks prices the other with it.
    const std::string other = w == "bf16" ? "fp16" : w == "fp16" ? "bf16" : "";
    if (!other.empty() && !peaks.count(w) && peaks.count(other)) {
      note(notes, node.origin + " gives no devices.peak_flops." + w + ": " + w + " runs at its " + other + " peak");
      p.dtype = other;
    }
  } else {
    // The format's own tensor-core type: FP8 (Hopper, Ada), INT8 (every tensor-core GPU since Turing; the
    // CUDA MMQ kernels of llama.cpp run Q8_0 in it), FP4 (Blackwell's NVFP4 and MXFP4).
    const std::string own = w == "fp8" ? "fp8" : w == "int8" ? "int8" : (w == "mxfp4" || w == "nvfp4") ? "fp4" : "";
    const auto& native = node.devices.native_dtypes;
    const bool runtime_uses =
        !native || std::find(native->value.begin(), native->value.end(), own) != native->value.end();
    if (!own.empty() && peaks.count(own) && runtime_uses) {
      p.dtype = own;
    } else {
      p.dtype = "bf16";
      p.native = false;
      if (auto it = node.devices.dequant_overhead.find(w); it != node.devices.dequant_overhead.end()) {
        p.dequant = it->second.value;
      } else {
        note(notes, node.origin + " gives no devices.dequant_overhead for " + w + ": its weights are dequantised to " +
                        "bf16 inside the matmuls at no extra cost");
      }
    }
  }
  p.has_peak = peaks.count(p.dtype) > 0;
  if (!p.has_peak)
    note(notes, node.origin + " has no devices.peak_flops." + p.dtype +
                    ": compute time is not modelled (kernels are memory-bound); batch-1 decode is, prefill and "
                    "large batches come out too fast (add the peak, or measure it with `moesim calibrate kernels`)");
  return p;
}

std::string attention_dtype(const model::NodeProfile& node, const ComputePath& path, double kv_element_bytes) {
  const auto& peaks = node.devices.peak_flops;
  // A 16- or 32-bit path computes attention as it computes the rest (FlashAttention in the activations'
  // type), and so does a path without a peak.
  if (!path.native || !path.has_peak || path.dtype == "bf16" || path.dtype == "fp16" || path.dtype == "fp32")
    return path.dtype;
  // Low-precision weights (FP8, INT8, FP4) leave attention's QK^T and PV to the FMHA kernels, which take an
  // FP8 KV cache in FP8 where the runtime runs FP8 matmuls at all (trtllm-bench build sets
  // use_fp8_context_fmha for FP8 checkpoints, which force an FP8 KV cache: NVIDIA/TensorRT-LLM
  // tensorrt_llm/bench/build/build.py at 258c7540c03517def55d9a5aadfa9288af474e1b; vLLM: "When using the
  // Flash Attention 3 backend with FP8 KV cache, attention operations are also performed in the quantized
  // (FP8) domain", docs/features/quantization/quantized_kvcache.md), and a 16-bit cache in 16 bits. The
  // operands are the KV cache's, which is FP8 or 16-bit in every checkpoint these runtimes serve (ModelOpt's
  // NVFP4 checkpoints quantise the cache to FP8 or leave it: validation/mapping.json's kv_cache_dtype rules),
  // so an NVFP4 model's attention does not run at the FP4 rate of its GEMMs.
  const auto& native = node.devices.native_dtypes;
  const bool fp8_native =
      !native || std::find(native->value.begin(), native->value.end(), "fp8") != native->value.end();
  if (kv_element_bytes == 1.0 && fp8_native && peaks.count("fp8")) return "fp8";
  if (peaks.count("bf16")) return "bf16";
  if (peaks.count("fp16")) return "fp16";
  return path.dtype;  // no 16-bit figure: the weights' own, as before
}

void profile_notes(const model::NodeProfile& node, const model::Precision& weights, std::vector<std::string>& notes) {
  (void)compute_path(node, weights, &notes);
  if (!node.devices.kernel_overhead)
    note(&notes, node.origin + " gives no devices.kernel_overhead: kernels cost their roofline time only");
  if (!node.devices.efficiency)
    note(&notes, node.origin + " has no devices.efficiency: kernels run at 100% of the peak bandwidth and FLOP rate " +
                     "(measure them with `moesim calibrate kernels`, or fit them with `moesim calibrate fit`)");
}

double roofline(double bytes, double flops, const Rate& r, double dequant) {
  return std::max(bytes / r.bw, flops / r.peak * (1.0 + dequant));
}

double attended_sum(std::int64_t context, std::int64_t n, std::int64_t window) {
  const auto c = static_cast<double>(context);
  const auto m = static_cast<double>(n);
  const double full = m * c + m * (m + 1.0) / 2.0;  // Σ (c + i)
  if (window <= 0 || context + n <= window) return full;
  const auto w = static_cast<double>(window);
  // Tokens i <= window − c attend to c + i; the rest attend to the window.
  const double below = static_cast<double>(std::max<std::int64_t>(0, window - context));
  return below * c + below * (below + 1.0) / 2.0 + (m - below) * w;
}

double kv_share(const model::Architecture& a, const DeviceSplit& split) {
  if (split.attention_whole || a.kv_heads <= 0 || a.mla.kv_lora_rank > 0) return 1.0;
  return std::max(1.0 / static_cast<double>(split.tp), 1.0 / static_cast<double>(a.kv_heads));
}

std::vector<std::int64_t> stage_layer_starts(std::int64_t layers, std::int64_t pp) {
  if (pp < 1) throw UserError("pipeline parallelism " + std::to_string(pp) + " must be at least 1");
  if (pp > layers) {
    throw UserError("pipeline parallelism " + std::to_string(pp) + " is more than the " + std::to_string(layers) +
                    " layers: every stage needs at least one layer; use at most " + std::to_string(layers) + " stages");
  }
  // vLLM's split, vllm/distributed/utils.py get_pp_indices (vllm-project/vllm, commit 5a6541db):
  //   partitions = [num_hidden_layers // pp_size] * pp_size
  //   for i in range(2, remaining_layers + 2): partitions[-i] += 1
  // The last stage gets no extra layer (it holds the final norm and the LM head); with 0 < remainder ≤
  // pp − 2 neither does the first (it holds the embedding). 61 layers over 2 stages: 31 + 30.
  std::vector<std::int64_t> count(static_cast<std::size_t>(pp), layers / pp);
  const std::int64_t remaining = layers % pp;
  for (std::int64_t i = 2; i < remaining + 2; ++i) ++count[static_cast<std::size_t>(pp - i)];
  std::vector<std::int64_t> starts(static_cast<std::size_t>(pp) + 1, 0);
  for (std::size_t s = 0; s < count.size(); ++s) starts[s + 1] = starts[s] + count[s];
  MOESIM_CHECK(starts.back() == layers, "the pipeline stages do not cover the layers");
  return starts;
}

StageLayers whole_model(const model::Architecture& a) { return {0, a.layers, true, true}; }

std::vector<StageLayers> pipeline_stages(std::int64_t layers, std::int64_t pp) {
  const std::vector<std::int64_t> starts = stage_layer_starts(layers, pp);
  std::vector<StageLayers> out;
  for (std::size_t s = 0; s + 1 < starts.size(); ++s)
    out.push_back({starts[s], starts[s + 1], s == 0, s + 2 == starts.size()});
  return out;
}

model::Architecture stage_architecture(const model::Architecture& a, const StageLayers& stage) {
  MOESIM_CHECK(0 <= stage.begin && stage.begin < stage.end && stage.end <= a.layers &&
                   static_cast<std::int64_t>(a.layer_specs.size()) == a.layers,
               "a pipeline stage outside the model's layers");
  model::Architecture sub = a;
  sub.layer_specs.assign(a.layer_specs.begin() + stage.begin, a.layer_specs.begin() + stage.end);
  sub.layers = stage.end - stage.begin;
  return sub;
}

double device_weight_bytes(const model::Architecture& a, const model::Precision& weights, const DeviceSplit& split,
                           double expert_fraction, const StageLayers& stage) {
  const model::Architecture sub = stage_architecture(a, stage);
  return device_weight_bytes(a, model::parameter_counts(sub), model::moe_layer_count(sub), weights, split,
                             expert_fraction, stage);
}

double device_weight_bytes(const model::Architecture& a, const model::ComponentParams& params,
                           std::int64_t stage_moe_layers, const model::Precision& weights, const DeviceSplit& split,
                           double expert_fraction, const StageLayers& stage) {
  MOESIM_CHECK(split.tp >= 1, "a device split needs tp >= 1");
  MOESIM_CHECK(expert_fraction >= 0 && expert_fraction <= 1, "the experts' fraction on a device is not in [0, 1]");
  // Parameters per component of the stage's layers (models_and_routing.md §A.3); parameter_counts adds
  // the final norm (h) and the embedding and LM head of a whole model: only the stage's ends are kept.
  const double tp = split.attention_whole ? 1.0 : static_cast<double>(split.tp);
  // Every tensor but the routed experts at the others' format (a composite precision, e.g. mxfp4/q8_0).
  const model::Precision& others = model::others_precision(weights);
  auto bytes = [&](double n) { return model::param_bytes(static_cast<std::int64_t>(std::llround(n)), others).base(); };
  const auto norms = static_cast<double>(params.norms - (stage.last ? 0 : a.hidden));
  // Megatron-LM (Shoeybi et al. 2019, §3): attention heads and the FFN's columns/rows split over the TP
  // devices; the norms (and an MoE router, a small h × E matrix) are replicated on every device.
  double w = bytes(static_cast<double>(params.attention) / tp) + bytes(static_cast<double>(params.router) + norms) +
             bytes(static_cast<double>(params.shared_experts + params.dense_ffn) / tp);
  // Routed experts at their exact stored size (model::routed_expert_bytes: group scales per row, bf16
  // biases), every expert of every MoE layer of the stage, the device's fraction of them.
  if (a.is_moe() && expert_fraction > 0) {
    w += model::routed_expert_bytes(a, weights).base() * static_cast<double>(a.routed_experts) *
         static_cast<double>(stage_moe_layers) * expert_fraction;
  }
  // Embedding and LM head, vocabulary-parallel over TP (vLLM's VocabParallelEmbedding / ParallelLMHead). A
  // tied LM head on a last stage of its own holds a copy of the embedding (vLLM builds embed_tokens on the
  // last rank too when tie_word_embeddings).
  double ends = 0;
  if (stage.first) ends += static_cast<double>(params.embedding);
  if (stage.last) ends += static_cast<double>((params.lm_head > 0 || stage.first) ? params.lm_head : params.embedding);
  return w + bytes(ends / tp);
}

double off_chip(double bytes) { return std::max(0.0, bytes - kOnChipActivationBytes); }

double ffn_intermediate_io(const model::Architecture& a, double intermediate) {
  // Gated (SwiGLU): the up-and-gate GEMM writes 2·I, the activation reads 2·I and writes I, the down GEMM
  // reads I. Ungated: I; I and I; I.
  return (a.gated_ffn ? 6.0 : 4.0) * intermediate;
}

LayerParts layer_parts(const model::Architecture& a, const model::Precision& weights) {
  MOESIM_CHECK(a.layers > 0, "a layer cost needs layers");
  LayerParts p;
  const model::ComponentParams params = model::parameter_counts(a);
  const auto L = static_cast<double>(a.layers);
  // Every tensor but the routed experts at the others' format (a composite precision, e.g. mxfp4/q8_0).
  const model::Precision& others = model::others_precision(weights);
  auto bytes = [&](double n) { return model::param_bytes(static_cast<std::int64_t>(std::llround(n)), others).base(); };
  // The norms ride with the attention block (its two RMSNorm kernels).
  p.attn_params = static_cast<double>(params.attention + params.norms) / L;
  p.attn_bytes = bytes(p.attn_params);
  const auto moe_layers = static_cast<double>(std::max<std::int64_t>(1, model::moe_layer_count(a)));
  p.router_params = static_cast<double>(params.router) / moe_layers;
  p.router_bytes = bytes(p.router_params);
  p.dense_params = static_cast<double>(params.dense_ffn + params.shared_experts) / L;
  p.dense_bytes = bytes(p.dense_params);
  p.head_params = static_cast<double>(params.lm_head > 0 ? params.lm_head : params.embedding);
  p.head_bytes = bytes(p.head_params);
  if (a.is_moe()) {
    p.expert_params = static_cast<double>(model::params_per_routed_expert(a));
    p.expert_bytes = model::routed_expert_bytes(a, weights).base();
  }
  // The activations an FFN's kernels read and write per token: its input and output hidden states (2·hidden)
  // and its intermediate side (ffn_intermediate_io): the dense FFN layers'
  // and the shared experts', averaged over the layers; one routed expert's per token routed to it, with
  // the dispatch that gathers the token's hidden state into its expert's rows and the combine that reads
  // the expert's output back into the token's (+ 2 hidden).
  const auto h = static_cast<double>(a.hidden);
  for (const model::LayerSpec& layer : a.layer_specs) {
    if (!layer.ffn) continue;
    if (layer.moe && a.is_moe()) {
      if (a.shared_experts > 0) {
        p.dense_io_whole += 2.0 * h / L;
        p.dense_io_split += ffn_intermediate_io(a, static_cast<double>(a.shared_experts * a.shared_ffn)) / L;
      }
    } else {
      p.dense_io_whole += 2.0 * h / L;
      p.dense_io_split += ffn_intermediate_io(a, static_cast<double>(a.dense_ffn)) / L;
    }
  }
  if (a.is_moe()) {
    p.expert_io_whole = 4.0 * h;
    p.expert_io_split = ffn_intermediate_io(a, static_cast<double>(a.expert_ffn));
  }
  p.ffn_on_moe_layers = a.shared_experts > 0;
  std::map<std::int64_t, std::vector<model::LayerSpec>> by_window;
  for (const auto& spec : a.layer_specs) by_window[spec.sliding_window].push_back(spec);
  for (const auto& [window, specs] : by_window) {
    model::Architecture sub = a;
    sub.layer_specs = specs;
    p.windows.push_back({window, model::kv_bytes_per_token(sub, 1.0).base() / L,
                         model::attention_flops_per_context_token(sub).base() / L});
  }
  // Recurrent layers (Gated DeltaNet, Mamba-1, Mamba-2) read and write their fixed state every token
  // (sequence(), twice).
  p.state_bytes = model::recurrent_state_bytes(a).base() / L;
  return p;
}

LayerCosts::LayerCosts(const model::Architecture& a, const model::Precision& weights, const model::NodeProfile& node,
                       const DeviceSplit& split, double kv_element_bytes, std::vector<std::string>* notes)
    : a_(a), own_parts_(layer_parts(a, weights)) {
  init(*own_parts_, weights, node, split, kv_element_bytes, notes);
}

LayerCosts::LayerCosts(const model::Architecture& a, const LayerParts& p, const model::Precision& weights,
                       const model::NodeProfile& node, const DeviceSplit& split, double kv_element_bytes,
                       std::vector<std::string>* notes)
    : a_(a) {
  init(p, weights, node, split, kv_element_bytes, notes);
}

void LayerCosts::init(const LayerParts& p, const model::Precision& weights, const model::NodeProfile& node,
                      const DeviceSplit& split, double kv_element_bytes, std::vector<std::string>* notes) {
  parts_ = &p;
  MOESIM_CHECK(split.tp >= 1 && split.moe_tp >= 1, "a layer cost needs a split");
  path_ = compute_path(node, weights);
  tp_ = static_cast<double>(split.tp);
  attn_tp_ = split.attention_whole ? 1.0 : tp_;
  moe_tp_ = static_cast<double>(split.moe_tp);
  // Per device: attention and dense weights split over the TP group (whole under attention DP or
  // replicated attention), the router replicated (vLLM's gate is a ReplicatedLinear), each expert's width
  // over moe_tp, the LM head vocabulary-parallel over the TP group (vLLM's ParallelLMHead) or whole where
  // attention is (as the memory plan holds it).
  attn_params_ = p.attn_params;
  attn_bytes_ = p.attn_bytes / attn_tp_;
  router_params_ = p.router_params;
  router_bytes_ = p.router_bytes;
  dense_params_ = p.dense_params;
  dense_bytes_ = p.dense_bytes / attn_tp_;
  head_params_ = p.head_params;
  head_bytes_ = p.head_bytes / attn_tp_;
  expert_params_ = p.expert_params;
  expert_bytes_ = p.expert_bytes / moe_tp_;
  has_ffn_on_moe_layers_ = p.ffn_on_moe_layers;
  // Activations in 16 bits between kernels (kActivationBytes); the wide side of each FFN split as its
  // weights are, the hidden states whole on every device (each reads the whole input and writes a whole
  // partial output before the all-reduce).
  dense_io_bytes_ = kActivationBytes * (p.dense_io_whole + p.dense_io_split / attn_tp_);
  expert_io_bytes_ = kActivationBytes * (p.expert_io_whole + p.expert_io_split / moe_tp_);
  kv_scale_ = kv_element_bytes * kv_share(a_, split);
  flops_scale_ = 1.0 / attn_tp_;
  state_bytes_ = p.state_bytes / attn_tp_;

  if (node.devices.kernel_overhead) kernel_overhead_ = node.devices.kernel_overhead->value.base();
  if (node.devices.layer_overhead) layer_overhead_ = node.devices.layer_overhead->value.base();
  if (node.devices.step_overhead) step_overhead_ = node.devices.step_overhead->value.base();
  if (node.devices.expert_token_tile) expert_token_tile_ = node.devices.expert_token_tile->value;
  if (node.devices.expert_matvec_tokens) expert_matvec_tokens_ = node.devices.expert_matvec_tokens->value;
  if (const auto& d = node.devices.dense_small_batch) {
    dense_passes_ = d->matvec_passes;
    dense_token_tile_ = d->token_tile;
  }
  // A step of one sequence also pays the runtime's host time per sequence (the serving simulator adds it
  // once per sequence of a step: the same figure at batch 1).
  if (node.devices.sequence_overhead) step_overhead_ += node.devices.sequence_overhead->value.base();

  const double peak = path_.has_peak ? node.peak(path_.dtype).value.base() : std::numeric_limits<double>::infinity();
  const double bandwidth = node.bandwidth().value.base();
  // The one size rule: the bytes of one weight matrix of the kernel on this device.
  // A part the model does not have (no dense FFN in an all-MoE model, no router in a dense one) moves no
  // bytes: no band is looked up for it, and no note says its size lies outside them.
  auto rate = [&](double matrix_bytes, const char* what) {
    if (!node.devices.efficiency || matrix_bytes <= 0) return Rate{bandwidth, peak};
    const model::KernelRates kr =
        model::kernel_rates(node, units::flops_per_second(peak), units::bytes(matrix_bytes), what);
    if (!kr.note.empty()) note(notes, kr.note);
    return Rate{kr.bandwidth.base(), kr.peak.base()};
  };
  bare_rate_ = Rate{bandwidth, peak};
  if (const auto& t = node.devices.efficiency; t && (t->memory.size() > 1 || t->compute.size() > 1)) size_bands_ = *t;
  attn_rate_ = rate(attn_bytes_ / kAttentionMatrices, "attention");
  router_rate_ = rate(router_bytes_, "router");
  dense_rate_ = rate(dense_bytes_ / kFfnMatrices, "dense FFN");
  head_rate_ = rate(head_bytes_, "LM head");
  expert_rate_ = rate(expert_bytes_ / kFfnMatrices, "expert");
  // A runtime whose grouped expert GEMM computes slower than its dense GEMM at the same FLOPs
  // (devices.expert_gemm_efficiency, a microbenchmark of the two kernels): the routed experts' FLOPs run at
  // that fraction of the compute rate the dense rows were fitted on. Their bytes are unchanged, so where
  // the experts are bound by their weights' reads (decode, small batches) it changes nothing.
  if (node.devices.expert_gemm_efficiency) {
    expert_gemm_ = node.devices.expert_gemm_efficiency->value;
    expert_rate_.peak *= expert_gemm_;
  }
  // A runtime whose kernels read GGUF super-block formats (K-quants, i-quants) slower than its others
  // (devices.super_block_read_factor): the parts stored in one take that many times their bytes' time. The
  // routed experts are in the precision's expert format, every other tensor in its others' format.
  if (node.devices.super_block_read_factor) {
    const double f = node.devices.super_block_read_factor->value;
    if (model::super_block_format(model::others_precision(weights))) {
      for (Rate* r : {&attn_rate_, &router_rate_, &dense_rate_, &head_rate_}) r->bw /= f;
    }
    if (model::super_block_format(model::experts_precision(weights))) {
      expert_rate_.bw /= f;
      super_block_experts_ = f;
    }
  }
  // KV-cache reads stream at the full bandwidth: they are no weight matrix the bands were measured on. A
  // runtime's attention kernels may take a multiple of that roofline (devices.attention_factor: fitted to
  // batch-1 decode, where reading the cache is the whole cost). The attention FLOPs (prefill's QK^T and PV,
  // which FlashAttention-style kernels run near the matmul rate: Dao et al. 2022) run at the attention
  // block's compute rate, or a multiple of its time where the runtime's kernels are not that
  // (devices.prefill_attention_factor: fitted to dense prefill after a context depth).
  const double attention = node.devices.attention_factor ? node.devices.attention_factor->value : 1.0;
  const double attention_flops =
      node.devices.prefill_attention_factor ? node.devices.prefill_attention_factor->value : 1.0;
  // At the attention block's compute efficiency, but in the precision of the attention kernels, which need
  // not be the weights' (attention_dtype).
  const double score_peak =
      path_.has_peak ? node.peak(attention_dtype(node, path_, kv_element_bytes)).value.base() : peak;
  kv_rate_ = Rate{bandwidth / attention, std::isfinite(peak) ? attn_rate_.peak / peak * score_peak / attention_flops
                                                             : attn_rate_.peak / attention_flops};
}

double LayerCosts::weight_passes(double tokens) const {
  // llama.cpp Metal's kernel_mul_mv_ext at 2-8 tokens: a threadgroup multiplies its rows by r1ptg tokens, so the
  // grid's ceil(n / r1ptg) token groups each read the matrix (ggml_metal_op_mul_mat; the runtime profile cites it).
  const double n = std::round(tokens);
  if (dense_passes_.empty() || n < 2 || n - 2 >= static_cast<double>(dense_passes_.size())) return 1.0;
  return dense_passes_[static_cast<std::size_t>(n - 2)];
}

double LayerCosts::matrix_tokens(double tokens) const {
  // Above the matrix-vector counts, llama.cpp Metal's kernel_mul_mm computes 32 token columns a threadgroup
  // whether the step fills them or not.
  if (dense_token_tile_ <= 0 || tokens <= 1.0 + static_cast<double>(dense_passes_.size())) return tokens;
  return std::ceil(tokens / dense_token_tile_) * dense_token_tile_;
}

double LayerCosts::attention(double tokens, const SeqWork& w) const {
  return roofline(attn_bytes_ * weight_passes(tokens), 2.0 * attn_params_ / attn_tp_ * matrix_tokens(tokens),
                  attn_rate_, path_.dequant) +
         roofline(w.kv_bytes, w.flops, kv_rate_);
}

double LayerCosts::dense(double tokens) const {
  if (dense_params_ <= 0) return 0;
  return roofline(dense_bytes_ * weight_passes(tokens) + off_chip(tokens * dense_io_bytes_),
                  2.0 * dense_params_ / attn_tp_ * matrix_tokens(tokens), dense_rate_, path_.dequant);
}

double LayerCosts::router(double tokens) const {
  return roofline(router_bytes_ * weight_passes(tokens), 2.0 * router_params_ * matrix_tokens(tokens), router_rate_);
}

double LayerCosts::expert(double computed, double routed) const {
  return roofline(expert_bytes_ + off_chip(routed * expert_io_bytes_), computed * 2.0 * expert_params_ / moe_tp_,
                  expert_rate_, path_.dequant);
}

double LayerCosts::expert_compute_tokens(double n, double step_tokens) const {
  if (expert_token_tile_ <= 0 || n <= 0) return n;
  // A tile's token columns are computed whether the expert has tokens for them or not: llama.cpp's CUDA
  // MMQ picks mmq_x for MUL_MAT_ID from the step's whole token count (ncols_max = ne12), up to 128, and
  // loops over each expert's tokens in mmq_x columns; Metal's kernel_mul_mm_id runs 32 token columns per
  // threadgroup (runtime profiles cite the kernel source of their tile).
  const double tile = std::min(expert_token_tile_, std::max(step_tokens, 1.0));
  return std::ceil(n / tile) * tile;
}

Rate LayerCosts::grouped_expert_rate(double distinct) const {
  if (!size_bands_ || distinct <= 1) return expert_rate_;
  // A grouped GEMM (TensorRT-LLM's and vLLM's fused MoE, llama.cpp's MUL_MAT_ID) reads every selected
  // expert's matrix in one launch, so its ramp-up and tail are paid once over their summed bytes: measured
  // bands (calibrate/BENCH.md: an H100's bf16 GEMV reaches 20% of the copy bandwidth on a 3 MiB matrix and
  // 68-74% on 24-30 MiB) are looked up at that size. Out-of-range sizes take the nearest band, as for any
  // kernel; the expert rate's own note already says when the bands are short of the model's sizes.
  const units::Bytes bytes = units::bytes(distinct * expert_bytes_ / kFfnMatrices);
  return Rate{bare_rate_.bw * model::efficiency_at(size_bands_->memory, bytes).value / super_block_experts_,
              bare_rate_.peak * model::efficiency_at(size_bands_->compute, bytes).value * expert_gemm_};
}

double LayerCosts::expert_group(ExpertExecution mode, double distinct, double computed, double routed) const {
  MOESIM_CHECK(mode == ExpertExecution::Fused || mode == ExpertExecution::Parallel,
               "expert_group prices grouped execution only");
  // Parallel: one kernel per expert, each at one expert's size; fused: one over them all.
  const Rate rate = mode == ExpertExecution::Fused ? grouped_expert_rate(distinct) : expert_rate_;
  const double work = roofline(distinct * expert_bytes_ + off_chip(routed * expert_io_bytes_),
                               computed * 2.0 * expert_params_ / moe_tp_, rate, path_.dequant);
  const double launches = distinct * kKernels.ffn * kernel_overhead_;
  return mode == ExpertExecution::Parallel ? std::max(work, launches) : work + kKernels.ffn * kernel_overhead_;
}

double LayerCosts::expert_kernels_time(ExpertExecution mode, double distinct) const {
  switch (mode) {
    case ExpertExecution::Sequential:
    case ExpertExecution::SequentialRouted:
      return distinct * kKernels.ffn * kernel_overhead_;
    case ExpertExecution::Fused:
      return kKernels.ffn * kernel_overhead_;
    case ExpertExecution::Parallel:
      return 0;  // overlapped with the work: expert_group takes the max
  }
  return 0;
}

double LayerCosts::head(double samples) const {
  return roofline(head_bytes_ * weight_passes(samples), 2.0 * head_params_ / attn_tp_ * matrix_tokens(samples),
                  head_rate_, path_.dequant) +
         kKernels.head * kernel_overhead_;
}

SeqWork LayerCosts::sequence(std::int64_t context, std::int64_t n) const {
  SeqWork w;
  for (const LayerParts::Window& win : parts_->windows) {
    w.flops += win.flops * flops_scale_ * attended_sum(context, n, win.window);
    w.kv_bytes += win.kv_elements * kv_scale_ * kv_tokens_read(context, n, win.window);
  }
  w.kv_bytes += 2.0 * state_bytes_;
  return w;
}

int LayerCosts::layer_kernels(const model::LayerSpec& layer, bool tp_collectives) const {
  const int all = layer_kernels(layer.moe && a_.is_moe(), tp_collectives);
  // A block without a mixer skips the attention kernels; one without an FFN the dense FFN's (a non-MoE
  // layer counts kKernels.ffn).
  const int no_mixer = layer.attention == model::AttentionType::None ? kKernels.attention : 0;
  const int no_ffn = layer.ffn ? 0 : kKernels.ffn;
  // Megatron-LM's two all-reduces close the attention and the FFN; a block with one of them has one.
  const int one_collective = tp_collectives && (no_mixer > 0 || no_ffn > 0) ? kKernels.tp_collectives / 2 : 0;
  return all - no_mixer - no_ffn - one_collective;
}

int LayerCosts::layer_kernels(bool moe_layer, bool tp_collectives) const {
  int k = kKernels.attention + (tp_collectives ? kKernels.tp_collectives : 0);
  if (moe_layer) {
    k += kKernels.router + kKernels.combine + (has_ffn_on_moe_layers_ ? kKernels.ffn : 0);
  } else {
    k += kKernels.ffn;
  }
  return k;
}

}  // namespace moesim::cost
