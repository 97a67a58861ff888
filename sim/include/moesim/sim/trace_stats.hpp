#pragma once
// Statistics of a routing trace: what `moesim trace stats` prints, what the generator's named parameters
// are calibrated against, and what the simulator's results can be checked with.
//
// All of them are computed in one pass per MoE layer (the layer's ids are gathered into a contiguous buffer
// first), so the cost is O(tokens x layers x top_k x (1 + cache sizes)): a 100,000-token, 40-layer, top-4
// trace takes a fraction of a second.
//
// Definitions (sim/TRACES.md has them with their sources):
//  - load max/mean: in each window of `window` consecutive trace tokens, count how often each expert was
//    chosen at a layer; max count / mean count (mean = window * top_k / experts). 1 is perfect balance;
//    DeepSeek's EPLB example has about 2 (models_and_routing.md §B.3). The trace's last partial window is
//    dropped unless the trace is shorter than one window.
//  - reuse: for each token whose request has an earlier token, the fraction of its top_k experts that the
//    request's previous token also chose at the same layer (flash-moe's "consecutive-token overlap", §B.2).
//    first-choice repeat: how often the first (highest-weight) expert equals the previous token's first
//    (Mixtral Table 5, left half); any overlap: how often the two tokens share at least one expert (its right
//    half, "first or second choice", for top-2).
//  - LRU hit rate: a per-layer cache of C experts, least recently used evicted, fed the trace in order; per
//    token the cached experts are hits (and become most recent), then the misses are loaded (what flash-moe
//    measured for C = 16, 32, 64, 128). Cold misses at the start count as misses.
//  - distinct experts per batch: experts touched at a layer by `batch` consecutive trace tokens, against the
//    independence formula E * (1 - (1 - k/E)^B) of §B.4.
//  - degenerate layer: one expert is among the chosen of every token of the layer (for top-1: every token
//    goes to the same expert), as in some layers of the Llama-4-Maverick traces of moe-selection (a trace
//    of one token is not flagged). Every placement then sends the whole layer to one node.
//  - per-node load under a placement: the experts each node executes per token and layer under the i-mod-r
//    dispatch rule of sim::dispatch(); E[max over nodes] is Equation 1's E[#exec. experts node/layer].

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::sim {

struct TraceStatsOptions {
  std::int64_t window = 1024;                                 ///< tokens per load window (>= 1)
  std::int64_t batch = 16;                                    ///< tokens per batch for distinct experts (>= 1)
  std::vector<std::int64_t> cache_sizes = {16, 32, 64, 128};  ///< LRU capacities, experts per layer (>= top_k)
  std::optional<Placement> placement;                         ///< per-node load when set (experts must match)
};

/// One MoE layer's statistics (or their mean over layers, for TraceStats::overall).
struct TraceLayerStats {
  double load_max_mean = 0;        ///< mean over windows of (max expert count / mean count), dimensionless
  double load_max_mean_worst = 0;  ///< the largest window's max/mean
  double load_max_mean_all = 0;    ///< max/mean of the counts over the whole trace (the popularity skew)
  double reuse = 0;                ///< fraction of a token's experts also chosen by its request's previous token
  double first_choice_repeat = 0;  ///< fraction of token pairs whose first experts are equal
  double any_overlap = 0;          ///< fraction of token pairs sharing at least one expert
  std::vector<double> lru_hit;     ///< hit fraction per TraceStatsOptions::cache_sizes entry
  double distinct_per_batch = 0;   ///< mean distinct experts touched per batch, experts
  double max_active = 0;           ///< placement: mean over tokens of max over nodes of experts executed
  double max_active_batch = 0;     ///< placement: mean over batches of max over nodes of distinct experts
  double node_load_max_mean = 0;   ///< placement: mean over windows of max/mean node load (SGLang's 1/balancedness)
  std::int64_t top_expert = -1;    ///< the expert chosen by the most tokens (per layer; -1 in TraceStats::overall)
  double top_expert_share = 0;     ///< fraction of the layer's tokens that chose top_expert (overall: the largest)
  bool degenerate = false;         ///< top_expert_share == 1 and the trace has >= 2 tokens (overall: any layer)
};

/// One node's share of the work under a placement, over all tokens and layers.
struct TraceNodeStats {
  std::int64_t experts_held = 0;  ///< experts per layer whose weights the node holds
  double mean_active = 0;         ///< experts executed per token and layer, mean
  std::int64_t max_active = 0;    ///< experts executed per token and layer, largest seen
  double share = 0;               ///< fraction of all expert executions
};

struct TracePlacementStats {
  std::string description;  ///< Placement::describe()
  std::vector<TraceNodeStats> nodes;
  double max_active = 0;                ///< E[max over nodes] per token and layer, measured on the trace
  double max_active_uniform = 0;        ///< the same under uniform routing, exact (expected_max_active_experts)
  std::string max_active_uniform_note;  ///< non-empty when max_active_uniform was sampled, not exact: how
  double max_active_batch = 0;          ///< E[max over nodes] of distinct experts per batch of `batch` tokens
};

struct TraceStats {
  std::int64_t tokens = 0;
  std::int64_t requests = 0;
  std::int64_t pairs = 0;           ///< tokens with an earlier token in their request (the reuse denominators / top_k)
  std::int64_t windows = 0;         ///< load windows used
  std::int64_t batches = 0;         ///< batches used
  std::int64_t window = 0;          ///< tokens per window actually used (the trace length if shorter)
  std::int64_t batch = 0;           ///< tokens per batch actually used
  double window_mean_load = 0;      ///< mean expert count per window: window * top_k / experts
  double independent_distinct = 0;  ///< E * (1 - (1 - k/E)^batch), experts
  double uniform_first_choice = 0;  ///< first-choice repeat of independent uniform routing: 1/E
  double uniform_reuse = 0;         ///< reuse of independent uniform routing: k/E
  std::vector<std::int64_t> cache_sizes;
  std::vector<TraceLayerStats> layers;
  TraceLayerStats overall;                      ///< means over layers
  std::vector<std::int64_t> degenerate_layers;  ///< indices of the layers with TraceLayerStats::degenerate
  std::optional<TracePlacementStats> placement;
};

/// Computes every statistic above. UserError for options the trace cannot serve (a cache smaller than
/// top_k, a placement for a different expert count, window or batch < 1).
TraceStats compute_trace_stats(const RoutingTrace& trace, const TraceStatsOptions& options);

}  // namespace moesim::sim
