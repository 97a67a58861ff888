#pragma once
// Synthetic routing traces: `moesim trace gen` (issue 3, part 1; the model is models_and_routing.md §B.4).
//
// Per MoE layer l, a popularity vector p_l over the experts (uniform, Zipf with a random rank order, or
// symmetric Dirichlet), optionally drifting per request (redrawn for each request, or one of D domain
// vectors chosen per request). Temporal locality: each of the previous token's experts (same request, same
// layer) is kept, in its slot, with probability rho_l; the free slots are filled by sampling p_l without
// replacement. Gate weights: softmax of k N(0, sigma) logits, sorted descending onto the slots.
//
// Parameters are named after the statistics they produce (TraceGenTargets): a reuse fraction, a
// first-choice repeat rate or a max/mean expert load, solved for the raw knobs (rho_l, the Zipf exponent,
// the Dirichlet alpha) before generating. The raw knobs can also be set directly.
//
// Determinism: the same options and seed give byte-identical traces on every platform. Random numbers come
// from std::mt19937_64 (whose output sequence the standard fixes) through this file's own conversions
// (std::uniform_*_distribution and std::normal_distribution are implementation-defined), and exp/log are
// computed here from + - * / only, not by the C library. The one assumption left is IEEE-754 double
// arithmetic without fused multiply-add contraction (the default on x86-64).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::sim {

enum class PopularityKind {
  Uniform,    ///< every expert equally likely
  Zipf,       ///< p ∝ 1 / rank^s, ranks a random permutation per layer
  Dirichlet,  ///< p ~ Dirichlet(alpha, ..., alpha): small alpha = few hot experts
};
enum class DriftKind {
  None,     ///< one popularity vector per layer for the whole trace
  Redraw,   ///< a fresh vector per layer for every request
  Mixture,  ///< D domain vectors per layer; each request uses one, chosen uniformly
};

std::string popularity_name(PopularityKind k);
PopularityKind parse_popularity(std::string_view name, const std::string& flag);
std::string drift_name(DriftKind k);
DriftKind parse_drift(std::string_view name, const std::string& flag);

/// The raw knobs. layers/experts/top_k come from the model (model::load_model) unless overridden.
struct TraceGenOptions {
  std::string model;  ///< recorded in the header
  std::int64_t layers = 0;
  std::int64_t experts = 0;
  std::int64_t top_k = 0;
  std::int64_t tokens = 1000;
  std::int64_t requests = 1;  ///< tokens are split evenly over requests, request after request
  std::uint64_t seed = 1;
  PopularityKind popularity = PopularityKind::Uniform;
  double zipf_s = 1.0;           ///< Zipf exponent (>= 0; 0 = uniform)
  double dirichlet_alpha = 1.0;  ///< Dirichlet concentration (> 0)
  DriftKind drift = DriftKind::None;
  std::int64_t domains = 4;  ///< Mixture: domain vectors per layer
  /// Probability of keeping each of the previous token's experts, per layer (size layers), or one value
  /// for all layers, or empty for 0 (no temporal locality).
  std::vector<double> rho;
  bool weights = true;      ///< write gate weights
  double logit_std = 1.0;   ///< sigma of the gate logits (larger = a more dominant first expert)
  std::string preset;       ///< recorded in `source` when the options came from a preset
  std::string solved_note;  ///< how the knobs were solved from targets (recorded in `source`)
};

/// Options for a trace of `arch` (its id, MoE layers, routed experts and top-k), uniform routing, the
/// given tokens and seed; the other knobs at their defaults.
TraceGenOptions gen_options_for(const model::Architecture& arch, std::int64_t tokens, std::uint64_t seed = 1);

/// Statistics to reach; each replaces a raw knob. Profiles (reuse, first_choice_repeat) are control points
/// evenly spaced from the first to the last MoE layer, linearly interpolated: one value = every layer.
struct TraceGenTargets {
  std::vector<double> reuse;                ///< fraction of a token's experts also chosen by the previous token
  std::vector<double> first_choice_repeat;  ///< fraction of tokens whose first expert repeats the previous one
  std::optional<double> max_mean_load;      ///< per-layer max/mean expert load over windows of `window` tokens
  std::int64_t window = 1024;               ///< tokens per load window
  /// Per-layer LRU hit rate with a cache of `lru_cache` experts (solves the skew, like max_mean_load).
  std::optional<double> lru_hit;
  std::int64_t lru_cache = 16;  ///< experts per layer in that cache
};

/// Per-layer values from evenly spaced control points, linearly interpolated (1 point: constant).
std::vector<double> interpolate_profile(const std::vector<double>& points, std::int64_t layers);

/// Expected reuse fraction under uniform popularity with keep probability rho, exact:
///   R = (k*rho + E_K[(k-K)^2 / (E-K)]) / k,  K ~ Binomial(k, rho)
/// (the k-K fresh experts are drawn from the E-K not kept, and k-K of those are the previous token's other
/// experts). §B.4's rho + (1-rho)*k/E is its approximation for E >> k.
double uniform_reuse(std::int64_t experts, std::int64_t top_k, double rho);
/// Expected first-choice repeat under uniform popularity, exact:
///   f = rho + (1-rho) * E_K'[1 / (E-K')],  K' ~ Binomial(k-1, rho)
/// (slot 0 not kept is filled by the first fresh draw, uniform over the E-K' experts not kept).
double uniform_first_choice_repeat(std::int64_t experts, std::int64_t top_k, double rho);

/// Solves the raw knobs for `targets` and returns the options to generate with (rho per layer; zipf_s or
/// dirichlet_alpha for max_mean_load or lru_hit). Uniform popularity uses the exact formulas above (bisection); skewed
/// popularity calibrates on short pilot traces generated with a seed derived from base.seed, so the result
/// is deterministic. UserError, with the achievable range, for a target out of reach.
TraceGenOptions solve_targets(TraceGenOptions base, const TraceGenTargets& targets);

/// Checks ranges (tokens >= 1, 1 <= requests <= tokens, top_k <= experts <= 65,535, rho in [0, 1], ...);
/// UserError naming the flag.
void validate_gen_options(const TraceGenOptions& o);

/// Bytes generate_trace(o) holds at its peak (the trace, the popularity vectors, scratch), estimated in
/// double precision so that absurd sizes are refused rather than wrapped.
double generated_trace_bytes(const TraceGenOptions& o);

/// Generates the trace. `progress`, when given, is called with the fraction done (0..1) now and then.
/// UserError (model::require_memory) when generated_trace_bytes(options) exceeds the memory budget.
RoutingTrace generate_trace(const TraceGenOptions& options, const std::function<void(double)>& progress = {});

/// "moesim trace gen: ..." with every parameter, for the header's `source`.
std::string describe_gen_options(const TraceGenOptions& o);

/// A named configuration matching a published measurement.
struct TracePreset {
  std::string name;
  std::string description;            ///< what it reproduces, with the measured result and the target
  std::string model;                  ///< zoo id
  std::optional<std::int64_t> top_k;  ///< override of the model's top-k (the measurement's own)
  PopularityKind popularity = PopularityKind::Uniform;
  double zipf_s = 1.0;
  DriftKind drift = DriftKind::None;
  std::int64_t domains = 4;
  std::int64_t tokens_per_request = 0;  ///< 0 = one request
  TraceGenTargets targets;
};

/// The registered presets, for --help and --preset.
const std::vector<TracePreset>& trace_presets();
/// UserError naming the valid presets for an unknown name.
const TracePreset& find_trace_preset(std::string_view name);

}  // namespace moesim::sim
