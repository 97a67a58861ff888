#pragma once
// One physics (issue 19): what one decoder layer, one expert set and one engine step cost on one device.
// The analytic model (model/analytic.hpp) sums it at batch 1, the decode simulator (sim/decode.hpp)
// schedules its per-layer and per-expert parts in time, and the serving simulator (sim/serving.hpp)
// prices every engine step with it at batch > 1. Nothing else in moesim computes a kernel's time.
//
// The model, and where each piece comes from:
//   - A kernel group's time is a roofline (Williams, Waterman & Patterson, CACM 2009):
//       max(bytes / bandwidth, FLOPs / peak × (1 + dequant)) + kernels × kernel_overhead,
//     seed 000 Eq. 1a applied per kernel group, with the per-launch overhead of seed 001 (§5: 19 Linear
//     calls per MoE block are what makes FlexFlow slow) and seed 004's per-layer CPU time (layer_overhead).
//   - Rates are the profile's peaks times its measured efficiency (devices.efficiency, issue 4), looked up
//     by ONE size key: the bytes of one weight matrix of the kernel on one device, i.e. the part's bytes
//     on that device over its weight matrices (attention 4: q, k, v, o; router 1; an FFN or expert 3:
//     w1, w3, w2; the LM head 1).
//   - The compute path of a weight format (compute_path): storage at the format's bits per weight
//     (model/precision.hpp); the matmuls run at the format's own peak when the profile gives one (FP8 and
//     INT8 tensor cores, FP4 on Blackwell), else dequantised to bf16 inside the kernel at the profile's
//     dequant_overhead (MLX and flash-moe for q4/q2, seed 004; Marlin-style W4A16 on Hopper).
//   - Kernels per layer part: one table (kKernels) counted after the Mixtral MoE block's operators in
//     seed 001 (Linear, SiLU, Softmax, TopK, GroupBy, Aggregate) and a GQA attention block.
//   - The experts of one MoE layer on one device run in one of four ways (ExpertExecution, seed 001).
//   - An FFN's bytes are its weights and the activations its kernels read and write (the same roofline's
//     bytes; Williams et al. count every byte a kernel moves): per token, its input and output hidden
//     states and, for the intermediate side, 6 × its width when gated (the up-and-gate GEMM writes 2I, the
//     activation reads 2I and writes I, the down GEMM reads I), 4 × ungated; a routed expert adds the
//     dispatch that copies the token into its rows and the combine that reads its output back (2 hidden
//     more), per token routed to it. 16-bit activations (kActivationBytes). Negligible for a wide FFN (Llama
//     3.1 8B: ~1,700 FLOPs per byte moved), not for narrow experts with a large top-k (Qwen3-30B-A3B: 768
//     wide, 8 per token: ~370 FLOPs per byte, below the FP4 ridge of a B200), where it is what costs.
//   - KV-cache reads and attention FLOPs per sequence: each new token attends to every cached token and
//     itself, sliding-window layers to at most their window (attended_sum below).
//   - The weights one device holds (device_weight_bytes): the one memory-fit sum. Each part is split as
//     Megatron-LM splits it (attention, dense FFN and shared experts over the TP devices, norms and router
//     replicated), the embedding and LM head vocabulary-parallel (vLLM's VocabParallelEmbedding /
//     ParallelLMHead), a pipeline stage holding its own layers (vLLM's get_pp_indices), the first the
//     embedding, the last the final norm and the LM head.
// Collectives are in model/collective.hpp; the serving simulator's memory plan (activations, KV capacity)
// adds the engine's own reservations to device_weight_bytes.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/registry.hpp"

namespace moesim::cost {

/// How the experts of one MoE layer run on one device (seed 001).
enum class ExpertExecution {
  Sequential,        ///< every local expert in turn, each its own kernels, chosen or not (FlexFlow's for-loop)
  SequentialRouted,  ///< the chosen local experts in turn, each its own kernels (HF, MLX)
  Fused,             ///< one grouped kernel set over the chosen experts (vLLM/TRT-LLM fused MoE)
  Parallel,          ///< the chosen experts' kernels on concurrent streams: launches overlap execution
};
const std::vector<NamedOption<ExpertExecution>>& expert_executions();
ExpertExecution expert_execution_by_name(std::string_view name);
std::string_view name_of(ExpertExecution e);

/// Kernels per layer part, the one table every instrument counts (they multiply the profile's
/// devices.kernel_overhead).
struct KernelTable {
  int attention = 8;       ///< RMSNorm, QKV, RoPE, attention, O, residual, RMSNorm, residual
  int router = 3;          ///< Linear, Softmax, TopK
  int ffn = 4;             ///< w1 and w3 Linear, SiLU·mul, w2 Linear: a dense FFN, a shared expert, one expert
  int combine = 1;         ///< Aggregate (the weighted sum of the expert outputs)
  int tp_collectives = 2;  ///< the two all-reduces of a tensor-parallel layer (Megatron-LM, §3)
  int head = 1;            ///< the LM head's Linear
};
inline constexpr KernelTable kKernels{};

/// Weight matrices per part, for the efficiency size key.
inline constexpr double kAttentionMatrices = 4;  ///< q, k, v, o
inline constexpr double kFfnMatrices = 3;        ///< w1, w3, w2
/// Bytes of an activation element between kernels: 16-bit (vLLM's and TensorRT-LLM's bf16/fp16 activations;
/// an FP8 or FP4 GEMM quantises its input inside the GEMM's prologue or a fused kernel).
inline constexpr double kActivationBytes = 2;
/// Activations a kernel group passes to the next through the on-chip cache rather than DRAM: a lower bound
/// of the last-level cache of every device moesim profiles (NVIDIA's L2: A100 40 MB, H100 50 MB in their
/// architecture whitepapers; Apple's and AMD's system-level caches are tens of MB), taken well below them
/// because the weights streaming through evict part of it. One decode token's activations of any zoo model
/// are under 1 MB per layer, so batch-1 decode moves none through DRAM; a max-load step moves gigabytes.
/// The validation table's summaries move by under half a point for 1 or 32 MB instead (single rows up to
/// 6 points).
inline constexpr double kOnChipActivationBytes = 4e6;
/// The part of `bytes` of activations that goes through DRAM: beyond kOnChipActivationBytes.
double off_chip(double bytes);

/// The dtype a weight format's matmuls run in on a node, and the dequantisation they pay.
struct ComputePath {
  std::string dtype;     ///< key of devices.peak_flops
  double dequant = 0;    ///< extra fraction of the compute time (devices.dequant_overhead); 0 when native
  bool native = true;    ///< the weights' own format is the compute dtype
  bool has_peak = true;  ///< the profile gives a peak for `dtype`; else compute time is not modelled
};
/// fp8/int8 run natively where the profile gives their peak, mxfp4/nvfp4 where it gives "fp4"; every other
/// quantised format (and those without their peak) is dequantised to bf16; bf16/fp16/fp32 run as is.
/// Appends to `notes` what the path assumes (a missing dequant_overhead or peak).
ComputePath compute_path(const model::NodeProfile& node, const model::Precision& weights,
                         std::vector<std::string>* notes = nullptr);

/// The devices.peak_flops key attention's score and value products (QK^T, PV) run at on `path`: the path's
/// own on a 16- or 32-bit path; on a low-precision one (FP8, INT8, FP4 weights) fp8 for a 1-byte KV cache
/// where the node has an FP8 peak and the runtime FP8 matmuls, else the 16-bit peak (bf16, or fp16), never
/// FP4 or INT8.
std::string attention_dtype(const model::NodeProfile& node, const ComputePath& path, double kv_element_bytes);

/// What the cost model assumes of a node for a weight format, one line each (appended once): a missing
/// dequant_overhead or peak (compute_path), kernel_overhead or efficiency table. Every instrument prints
/// them; LayerCosts adds only the kernel sizes outside the measured efficiency bands.
void profile_notes(const model::NodeProfile& node, const model::Precision& weights, std::vector<std::string>& notes);

/// A roofline rate: bytes/s and FLOP/s of the devices one kernel runs on.
struct Rate {
  double bw = 0;
  double peak = 0;
};
/// Seconds of one kernel group (no launch overhead): max(bytes / bw, FLOPs / peak × (1 + dequant)).
double roofline(double bytes, double flops, const Rate& r, double dequant = 0);

/// Σ_{i=1..n} min(context + i, window): the tokens a chunk of n new tokens after `context` cached ones
/// attends to in a layer (window 0: unbounded). Exact (closed form).
double attended_sum(std::int64_t context, std::int64_t n, std::int64_t window);
/// Tokens whose K and V that chunk reads in the layer: context + n, or at most window + n − 1. Inline:
/// the model's per-layer KV and FLOP sums (architecture.cpp) call it once per layer.
inline double kv_tokens_read(std::int64_t context, std::int64_t n, std::int64_t window) {
  const auto end = static_cast<double>(context + n);
  if (window <= 0) return end;
  return std::min(end, static_cast<double>(window + n - 1));
}

/// How one pipeline stage's weights are split over its devices.
struct DeviceSplit {
  std::int64_t tp = 1;           ///< devices sharing attention and dense weights (tensor parallel)
  std::int64_t moe_tp = 1;       ///< devices sharing each routed expert's width
  bool attention_whole = false;  ///< attention and dense weights whole on every device (attention DP, replicated)
};

/// The fraction of a sequence's KV cache one device holds: GQA's KV heads are split over the TP devices,
/// each holding at least one (vLLM replicates a head when tp > kv_heads); MLA's latent is replicated; with
/// attention whole on a device (data-parallel or replicated) it holds its sequences' whole cache.
double kv_share(const model::Architecture& a, const DeviceSplit& split);

/// The first layer of each pipeline stage, with `layers` appended: stage s holds layers
/// [starts[s], starts[s + 1]), so the result has pp + 1 entries. vLLM's rule (get_pp_indices): layers / pp
/// each, the remainder one each to the stages just before the last (the last stage holds the final norm
/// and LM head, the first the embedding). UserError when pp < 1 or pp > layers.
std::vector<std::int64_t> stage_layer_starts(std::int64_t layers, std::int64_t pp);

/// The decoder layers one pipeline stage holds, [begin, end), and which ends of the model come with them.
struct StageLayers {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  bool first = true;  ///< holds the embedding
  bool last = true;   ///< holds the final norm and the LM head
};
/// Every layer and both ends: a model without a pipeline.
StageLayers whole_model(const model::Architecture& a);
/// The pp stages of stage_layer_starts(layers, pp), in order.
std::vector<StageLayers> pipeline_stages(std::int64_t layers, std::int64_t pp);
/// The stage's layers as a model of their own: parameter_counts and kv_bytes_per_token of it sum the
/// stage's layers (DeepSeek-V3's first three dense layers fall in stage 0, its MoE layers in every stage).
model::Architecture stage_architecture(const model::Architecture& a, const StageLayers& stage);

/// Bytes of weights one device holds, the one memory-fit sum of every instrument: the stage's attention,
/// dense FFN and shared experts over split.tp (whole when split.attention_whole), its router and norms on
/// every device, `expert_fraction` of its routed experts (every expert of every MoE layer of the stage;
/// the serving plan: 1 / tp, 0 when they stream from storage; the analytic model: the experts its fullest
/// node holds over the experts, over the node's devices), the embedding on the first stage and the LM head
/// (a tied head: the embedding again unless that stage holds it already) on the last, vocabulary-parallel
/// over split.tp. split.moe_tp is not used: the experts' split is in `expert_fraction`.
double device_weight_bytes(const model::Architecture& a, const model::Precision& weights, const DeviceSplit& split,
                           double expert_fraction, const StageLayers& stage);
/// The same from the stage's parameter counts and MoE layer count (parameter_counts and moe_layer_count of
/// stage_architecture(a, stage)), for a caller that keeps them: the analytic model prices a whole model per
/// estimate, and copying the architecture each time cost it a third of its speed.
double device_weight_bytes(const model::Architecture& a, const model::ComponentParams& stage_params,
                           std::int64_t stage_moe_layers, const model::Precision& weights, const DeviceSplit& split,
                           double expert_fraction, const StageLayers& stage);

/// The work of one sequence in one step, per layer (averaged over the decoder layers) on one device.
struct SeqWork {
  double kv_bytes = 0;  ///< KV cache (and recurrent state) read
  double flops = 0;     ///< attention score and value FLOPs
};

/// A model's weights and attention per decoder layer (averaged over the layers, exact in their sum), whole
/// (not yet split over devices), at one weight format: what LayerCosts needs from the architecture,
/// computed once per model and format (a sweep prices the same model at many points).
struct LayerParts {
  struct Window {
    std::int64_t window = 0;  ///< 0: full attention
    double kv_elements = 0;   ///< KV-cache elements per attended token, per layer (averaged)
    double flops = 0;         ///< attention FLOPs per attended token, per layer (averaged)
  };
  double attn_params = 0, attn_bytes = 0;      ///< attention projections and norms
  double router_params = 0, router_bytes = 0;  ///< one MoE layer's router
  double dense_params = 0, dense_bytes = 0;    ///< dense FFN layers and shared experts, averaged over all layers
  double head_params = 0, head_bytes = 0;      ///< the LM head (the embedding when tied)
  double expert_params = 0, expert_bytes = 0;  ///< one routed expert, one layer
  /// Activation elements the FFN kernels read and write per token (2·hidden + ffn_intermediate_io), whole on every
  /// device (the hidden-state side) and split as the weights are (the intermediate side): the dense FFN layers and
  /// shared experts averaged over all layers; one routed expert per token routed to it, with its dispatch
  /// and combine.
  double dense_io_whole = 0, dense_io_split = 0, expert_io_whole = 0, expert_io_split = 0;
  double state_bytes = 0;          ///< recurrent state (DeltaNet, Mamba-1/2), per layer (averaged)
  bool ffn_on_moe_layers = false;  ///< shared experts run beside the routed ones
  std::vector<Window> windows;     ///< grouped by sliding window: a step costs O(sequences × windows)
};
LayerParts layer_parts(const model::Architecture& a, const model::Precision& weights);

/// Activation elements of its intermediate side an FFN of `intermediate` width moves per token: its GEMMs and
/// its activation function each read their input and write their output (gated: 6·intermediate; ungated:
/// 4·intermediate). Its hidden-state input and output add 2·hidden.
double ffn_intermediate_io(const model::Architecture& a, double intermediate);

/// The cost of the parts of a layer on one device, for a model, a weight format, a node and a split.
/// Per-layer figures are averages over the decoder layers (exact in their sum over the layers); the
/// serving simulator and the analytic model walk the layers to add the MoE parts where they are.
class LayerCosts {
 public:
  /// `kv_element_bytes`: bytes per KV-cache element (bf16: 2). Appends to `notes` the kernel sizes that lie
  /// outside the profile's measured efficiency bands (profile_notes says the rest).
  LayerCosts(const model::Architecture& a, const model::Precision& weights, const model::NodeProfile& node,
             const DeviceSplit& split, double kv_element_bytes, std::vector<std::string>* notes = nullptr);
  /// The same from parts computed before (layer_parts(a, weights)).
  LayerCosts(const model::Architecture& a, const LayerParts& parts, const model::Precision& weights,
             const model::NodeProfile& node, const DeviceSplit& split, double kv_element_bytes,
             std::vector<std::string>* notes = nullptr);
  LayerCosts(const LayerCosts&) = delete;  // holds a pointer to its own parts
  LayerCosts& operator=(const LayerCosts&) = delete;

  /// Attention weights for `tokens` on this device, plus the KV reads and context FLOPs of its sequences.
  [[nodiscard]] double attention(double tokens, const SeqWork& w) const;
  /// Dense FFN and shared experts for `tokens` (averaged over the layers; 0 when the model has none).
  [[nodiscard]] double dense(double tokens) const;
  /// The router of one MoE layer for `tokens`.
  [[nodiscard]] double router(double tokens) const;
  /// One routed expert's roofline for `routed` tokens routed to it, of which its kernels compute `computed`
  /// (expert_compute_tokens; the padding moves no activations) (its kernels' overhead not included).
  [[nodiscard]] double expert(double computed, double routed) const;
  /// `distinct` experts over `routed` token-expert pairs as one grouped kernel set: fused or parallel.
  /// `computed` is what the kernels compute: the pairs themselves, or expert_compute_tokens() of each.
  [[nodiscard]] double expert_group(ExpertExecution mode, double distinct, double computed, double routed) const;
  /// The LM head for `samples` sampled tokens, its kernel included.
  [[nodiscard]] double head(double samples) const;
  /// One sequence's work in one layer for a chunk of n new tokens after `context` cached ones.
  [[nodiscard]] SeqWork sequence(std::int64_t context, std::int64_t n) const;
  /// Kernels of a decoder layer other than its experts: attention, the FFN when the layer has one, the
  /// router and combine on MoE layers, the TP collectives when `tp_collectives`. A Nemotron-H block runs
  /// only its one mixer or its one FFN.
  [[nodiscard]] int layer_kernels(const model::LayerSpec& layer, bool tp_collectives) const;
  [[nodiscard]] int layer_kernels(bool moe_layer, bool tp_collectives) const;
  /// Launch overhead of the experts of one MoE layer run `mode` over `distinct` experts (parallel: the
  /// part that does not overlap is decided by expert_group, which includes it).
  [[nodiscard]] double expert_kernels_time(ExpertExecution mode, double distinct) const;

  /// The tokens the runtime's expert GEMM computes for an expert given `n` of a step's `step_tokens`:
  /// n, or n rounded up to whole tiles of min(devices.expert_token_tile, step_tokens) where the runtime
  /// gives a tile.
  [[nodiscard]] double expert_compute_tokens(double n, double step_tokens) const;
  /// How many times a non-expert weight matrix is read at a step of `tokens` tokens (devices.dense_small_batch:
  /// a small-batch matrix-vector kernel's passes at 2, 3, ... tokens): 1 unless the runtime lists that count.
  [[nodiscard]] double weight_passes(double tokens) const;
  /// The token columns a non-expert matmul computes at a step of `tokens` tokens: `tokens`, or rounded up to
  /// whole tiles of devices.dense_small_batch's token_tile above its matrix-vector counts.
  [[nodiscard]] double matrix_tokens(double tokens) const;
  /// Whether the runtime pads each expert's tokens to a tile (the serving simulator then counts tokens per
  /// expert).
  [[nodiscard]] bool pads_expert_tokens() const { return expert_token_tile_ > 0; }
  /// Whether a step of `step_tokens` tokens runs the experts one token and chosen expert at a time
  /// (devices.expert_matvec_tokens): each (token, expert) pair then reads the expert's matrices.
  [[nodiscard]] bool expert_matvec(double step_tokens) const {
    return expert_matvec_tokens_ > 0 && step_tokens <= expert_matvec_tokens_;
  }

  [[nodiscard]] double kernel_overhead() const { return kernel_overhead_; }
  [[nodiscard]] double layer_overhead() const { return layer_overhead_; }
  /// The runtime's host time of an engine step of one sequence (devices.step_overhead + sequence_overhead):
  /// at batch-1 decode, once per token.
  [[nodiscard]] double step_overhead() const { return step_overhead_; }
  [[nodiscard]] const ComputePath& path() const { return path_; }
  [[nodiscard]] double expert_bytes() const { return expert_bytes_; }    ///< one expert, one layer, this device
  [[nodiscard]] double expert_params() const { return expert_params_; }  ///< one expert, one layer, all devices
  [[nodiscard]] double weight_bytes_per_layer() const { return attn_bytes_ + dense_bytes_; }
  [[nodiscard]] const Rate& memory_rate() const { return kv_rate_; }  ///< the device's bandwidth and peak

 private:
  void init(const LayerParts& p, const model::Precision& weights, const model::NodeProfile& node,
            const DeviceSplit& split, double kv_element_bytes, std::vector<std::string>* notes);
  const model::Architecture& a_;
  std::optional<LayerParts> own_parts_;  ///< when built from the architecture
  const LayerParts* parts_ = nullptr;
  double kv_scale_ = 0;     ///< bytes per KV element × this device's share of the heads
  double flops_scale_ = 0;  ///< this device's share of the attention FLOPs
  ComputePath path_;
  double tp_ = 1, attn_tp_ = 1, moe_tp_ = 1;
  bool has_ffn_on_moe_layers_ = false;
  double attn_params_ = 0, attn_bytes_ = 0, router_params_ = 0, router_bytes_ = 0;
  double dense_params_ = 0, dense_bytes_ = 0, head_params_ = 0, head_bytes_ = 0;
  double expert_params_ = 0, expert_bytes_ = 0, state_bytes_ = 0;
  double expert_token_tile_ = 0;      ///< devices.expert_token_tile, tokens (0: none)
  double expert_matvec_tokens_ = 0;   ///< devices.expert_matvec_tokens, tokens (0: none)
  double expert_gemm_ = 1.0;          ///< devices.expert_gemm_efficiency (1: the dense GEMM's rate)
  std::vector<double> dense_passes_;  ///< devices.dense_small_batch's matvec_passes (index: tokens - 2)
  double dense_token_tile_ = 0;       ///< devices.dense_small_batch's token_tile, tokens (0: none)
  double dense_io_bytes_ = 0;         ///< activation bytes the dense FFN moves per token, this device
  double expert_io_bytes_ = 0;        ///< activation bytes one expert moves per token routed to it, this device
  double kernel_overhead_ = 0, layer_overhead_ = 0, step_overhead_ = 0;
  Rate attn_rate_, router_rate_, dense_rate_, head_rate_, expert_rate_, kv_rate_;
  /// The node's size-banded efficiencies when they vary with size (a measured profile), for the grouped
  /// expert kernel's own size (grouped_expert_rate); the device's bare bandwidth and peak they scale.
  std::optional<model::EfficiencyTable> size_bands_;
  Rate bare_rate_;
  double super_block_experts_ = 1;  ///< the experts' super_block_read_factor (1: not a super-block format)
  /// The rate of one fused kernel over `distinct` experts' matrices: that of a matrix of their summed size.
  [[nodiscard]] Rate grouped_expert_rate(double distinct) const;
};

}  // namespace moesim::cost
