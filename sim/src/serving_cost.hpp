#pragma once
// The serving simulator's step cost model (internal to sim/src): what one engine step costs on each
// pipeline stage, from the shared layer costs (model/step_cost.hpp), the collectives and the routing trace.
// The model is described in sim/serving.hpp; the scheduler (serving_scheduler.hpp) forms the entries it
// prices, and the engine (serving.cpp) runs the step through the pipeline.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/sim/event_core.hpp"
#include "moesim/sim/serving.hpp"
#include "moesim/sim/streaming.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::sim::serving_detail {

/// One scheduled piece of work: `tokens` new tokens of sequence `seq` after `context` cached ones.
struct Entry {
  std::int64_t seq = 0;
  std::int64_t tokens = 0;
  std::int64_t context = 0;
  std::int64_t trace_at = 0;  ///< trace token of the first new token
  bool samples = false;       ///< this step ends with a sampled token for the sequence
  bool decode = false;        ///< one token of an already prefilled sequence
};

/// The cost of one step on each stage, and the decode split.
struct StepCost {
  std::vector<SimTime> stage;       ///< compute + collectives of each stage
  std::vector<SimTime> transfer;    ///< stage s → s + 1
  double io = 0, gpu = 0, cpu = 0;  ///< seconds over the whole step (all layers), for the split
};

/// Prices the engine steps of one configuration and plan. It keeps per-step buffers and the trace's
/// expert masks between calls, so each engine owns one.
class CostModel {
 public:
  CostModel(const ServingConfig& c, const ParallelPlan& p, std::vector<std::string>& assumptions);

  [[nodiscard]] std::int64_t moe_layers() const { return model::moe_layer_count(a_); }
  [[nodiscard]] const ExpertStreamer* streamer() const { return streamer_ ? &*streamer_ : nullptr; }

  /// The cost of the step that runs `batch`: a buffer of the model's that the next call overwrites.
  const StepCost& cost(const std::vector<Entry>& batch, const RoutingTrace* trace);

 private:
  // cost()'s parts are inline and defined in serving_cost.cpp, beside their only caller, so that the
  // compiler can still inline them into it (bench/bench_serve.cpp measures the step).

  /// Where each entry's first new token lies in the trace, and, on the fast path, the distinct experts
  /// of every MoE layer in one token-major walk (a token's layers are contiguous in the trace) that stops
  /// once every layer has seen every expert: a decode batch of 64 on Mixtral touches all 8 after a few
  /// tokens. With per-expert counts, every layer's counts in one token-major walk too.
  inline void prepare_routing(const std::vector<Entry>& batch, const RoutingTrace* trace);
  /// Every MoE layer's tokens per expert for the step (layer_counts_), in one token-major walk, and with
  /// the streamer each layer's distinct experts in the order first chosen (layer_seen_).
  void count_experts(const std::vector<Entry>& batch, const RoutingTrace& trace);
  /// Adds `times` per choice of trace tokens from..from + n − 1 (wrapping) to layer_counts_.
  void walk_tokens(const RoutingTrace& trace, std::int64_t from, std::int64_t n, std::uint32_t times, bool track_seen);

  struct Boundary {
    double latency = 0, bw = 0;                ///< the send: 1/split of the activations from each device
    double gather_latency = 0, gather_bw = 0;  ///< the receiving node's all-gather (0: none)
    std::int64_t split = 1;
  };
  struct MoeCost {
    double gpu = 0, io = 0, all_to_all = 0;
  };

  /// One EP group running `d` distinct experts over all the step's routed tokens, fused or parallel.
  double fused_expert_time(double d) const { return lc_.expert_group(c_.experts, d, routed_, routed_); }

  inline MoeCost moe_cost(const std::vector<Entry>& batch, const RoutingTrace* trace, std::int64_t layer);

  const ServingConfig& c_;
  const ParallelPlan& p_;
  const model::Architecture& a_;
  cost::LayerCosts lc_;
  double tp_ = 1;
  std::vector<std::int64_t> stage_starts_;  ///< pp + 1 entries (stage_layer_starts)
  double expert_bytes_ = 0;                 ///< one expert, one layer, on one device
  double kernel_overhead_ = 0, layer_overhead_ = 0;
  std::vector<cost::SeqWork> work_;   ///< per attention group, this step
  std::vector<double> group_tokens_;  ///< per attention group, this step
  double tp_latency_ = 0, tp_bw_ = 1;
  std::vector<Boundary> boundaries_;
  std::optional<ExpertStreamer> streamer_;
  LayerIo last_io_;  ///< the last MoE layer's reads, for the overlapped mode's bandwidth sharing
  double last_gpu_bytes_ = 0;
  std::vector<std::uint32_t> counts_;
  StepCost step_;
  std::vector<std::int64_t> starts_;
  std::vector<std::uint64_t> masks_;        ///< this step's chosen experts per MoE layer, words_ words each
  std::vector<std::uint64_t> token_masks_;  ///< each trace token's chosen experts per MoE layer, words_ words each
  std::vector<std::uint64_t> full_;         ///< masks_ with every expert of every layer chosen
  std::int64_t words_ = 0;                  ///< 64-bit words per expert mask (0: not built yet; -1: off)
  bool masks_ready_ = false;
  bool need_counts_ = false;
  double routed_ = 0;
  std::vector<double> by_distinct_;
  std::vector<std::uint16_t> seen_;
  // With per-expert counts (need_counts_), every MoE layer's, counted by prepare_routing():
  std::vector<std::uint32_t> layer_counts_;  ///< layers × experts: this step's tokens per expert
  std::vector<std::uint16_t> layer_seen_;    ///< layers × experts: each layer's distinct experts, first first
  std::vector<std::size_t> layer_distinct_;  ///< per layer: how many of its layer_seen_ row are set
  bool counts_ready_ = false;
  /// Running sums for long entries: row k (layers × experts) counts the choices of trace tokens
  /// [0, min(k kBlock, T)); blocks_ rows after row 0 (0: not built; -1: past the bound, off).
  static constexpr std::int64_t kBlock = 64;
  static constexpr std::int64_t kLongEntry = 4 * kBlock;  ///< entries this long or longer use the sums
  std::vector<std::uint32_t> block_counts_;
  std::int64_t blocks_ = 0;
};

}  // namespace moesim::sim::serving_detail
