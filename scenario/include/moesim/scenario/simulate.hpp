#pragma once
// `moesim simulate` as a library: a scenario (JSON file or flags: every flag has a key and the other way
// round) is resolved into profiles, a placement, a routing trace (a file, or the generator) and the
// decode engine's settings; the run's result renders as text, as JSON ({name, value, unit} per metric plus
// the resolved scenario), as a per-token CSV and as a Chrome/Perfetto trace.
//
// Scenario keys: model, hw, nic, nodes, placement, groups, placement_file, precision, strategy, packing,
// balancing, attention, collective, experts, contention, residency, start_wired, context, lm_head, trace (a path),
// generate ({tokens, seed, requests, popularity, zipf_s, dirichlet_alpha, reuse, max_mean_load, window}),
// tokens (replay at most this many), description.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/expert_streaming.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/scenario/params.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::scenario {

/// How to make a trace when the scenario names no file (sim/trace_gen.hpp).
struct GenerateRequest {
  std::int64_t tokens = 1000;
  std::uint64_t seed = 1;
  std::int64_t requests = 1;
  std::string popularity = "uniform";
  std::optional<double> zipf_s;
  std::optional<double> dirichlet_alpha;
  std::optional<double> reuse;          ///< target fraction of experts reused from the previous token
  std::optional<double> max_mean_load;  ///< target per-layer max/mean load over `window` tokens
  std::int64_t window = 1024;
  std::optional<double> lru_hit;  ///< target per-layer LRU hit rate with `lru_cache` experts cached per layer
  std::int64_t lru_cache = 16;
  std::optional<std::int64_t> top_k;  ///< override of the model's top-k (a measurement's own, e.g. flash-moe's K=4)
  std::vector<double> reuse_profile;  ///< reuse targets at control points over the layers (a list for "reuse")
  std::string drift = "none";         ///< popularity drift between requests (sim/trace_gen.hpp)
};

/// The routing trace a scenario names: read from `trace` (checked against the model), or generated, with
/// gate weights unless `gate_weights` is false (the serving simulator reads only the expert ids; the ids are
/// the same either way, sim/trace_gen.hpp).
sim::RoutingTrace make_trace(const GenerateRequest& g, const std::string& trace, const model::Architecture& a,
                             bool gate_weights = true);
/// Parses a "generate" object into `q` (unknown keys, bad values: UserError with the JSON path).
void parse_generate(const json::Node& g, GenerateRequest& q);
nlohmann::json generate_to_json(const GenerateRequest& g);

struct SimulateRequest {
  json::Origins origins;  ///< where the scenario file gave each id (messages); a flag's value has none
  std::string model = "dbrx-instruct";
  std::string hw = "mac-studio-m2-ultra-192";
  std::string nic = "10gbe-grpc";
  std::int64_t nodes = 2;
  std::string placement = "replicated-groups";
  std::int64_t groups = 2;
  std::string placement_file;
  std::string precision = "checkpoint";  ///< a precision name, or the model config's own (model::precision_for)
  std::string strategy = "P-LR-D";
  std::optional<std::string> packing;    ///< overrides the strategy's
  std::optional<std::string> balancing;  ///< overrides the strategy's
  std::optional<std::string> attention;  ///< overrides the strategy's
  std::string collective = "expert-outputs";
  std::string experts = "fused";  ///< cost::ExpertExecution by name
  bool contention = true;
  bool residency = true;
  bool start_wired = true;
  std::int64_t context = 0;
  bool lm_head = false;
  std::optional<cost::StreamingSpec> streaming;  ///< routed experts read from storage (serial)
  std::string runtime;  ///< a runtime profile fitted on `hw` (model::find_runtime); empty: the hardware alone
  std::string trace;    ///< a trace file; empty: generate
  GenerateRequest generate;
  std::int64_t max_tokens = 0;  ///< replay at most this many tokens (0: all)
};

/// Reads a scenario file (unknown keys, wrong types and bare numbers are errors with their JSON path).
/// Keys absent from the file keep the values already in `base` (the defaults, or earlier flags).
SimulateRequest load_simulate_scenario(const std::string& path, SimulateRequest base = {});
/// The keys of a simulate scenario and of its "generate" object, each declared once (scenario/params.hpp):
/// the file reader, the flags, their --help and the resolved scenario come from them.
const scenario::ParamTable<SimulateRequest>& simulate_params();
const scenario::ParamTable<GenerateRequest>& generate_params();
/// The same, from a scenario object inside another file (a measured-runs file's "scenario").
SimulateRequest load_simulate_scenario(const json::Node& scenario, SimulateRequest base = {});

/// What a simulate scenario resolves into (prepare_simulate): the profiles, the placement and the
/// policies by value. A prepared scenario adds its routing trace, a result the replay.
struct SimulateSetup {
  SimulateRequest request;
  model::Architecture arch;
  model::NodeProfile node;
  std::optional<model::NicProfile> nic;
  std::optional<model::NicProfile> intra_link;
  const model::Precision* precision = nullptr;
  sim::Placement placement;
  sim::AttentionMode attention{};
  sim::Balancing balancing{};
  sim::Packing packing{};
  sim::Collective collective{};
  cost::ExpertExecution experts{};
  std::optional<cost::StreamingParams> streaming;
  std::optional<model::RuntimeProfile> runtime;  ///< the request's runtime profile, applied to `node`
};

struct SimulateResult : SimulateSetup {
  sim::TraceHeader trace;
  std::int64_t trace_tokens = 0;
  double exact_expected_active = 0;  ///< the placement's E[max routed] for uniform routing (for comparison)
  model::DecodeEstimate estimate;    ///< the analytic model on the same configuration
  sim::DecodeResult run;
  double wall_seconds = 0;  ///< wall-clock time of the replay itself
};

/// A scenario resolved once (model, profiles, placement, routing trace, policies) that can be replayed
/// many times with changed profiles: `calibrate fit` replays each measured run at every step of a fit.
struct PreparedSimulate : SimulateSetup {
  sim::RoutingTrace trace;
};

/// Resolves the request (UserError for unknown names, a trace that does not fit the model, ...).
PreparedSimulate prepare_simulate(const SimulateRequest& request);
/// The engine's settings for a prepared scenario, run on `node` and `nic` (the prepared ones, or
/// modified copies of them).
sim::DecodeConfig decode_config(const PreparedSimulate& p, const model::NodeProfile& node,
                                const model::NicProfile* nic);

/// Seed 000 Table 3's per-token time split, averaged over the replayed tokens (node 0's timeline).
struct TimeSplit {
  double time = 0, misc = 0, moe = 0, comm = 0, rewire = 0;  ///< seconds per token
};
TimeSplit mean_split(const sim::DecodeResult& r);

/// Optional outputs written (atomically) alongside the run.
struct SimulateOutputs {
  std::string per_token_csv;        ///< --per-token
  std::string chrome_trace;         ///< --chrome-trace
  std::int64_t chrome_tokens = 20;  ///< tokens the Chrome trace covers
};

/// Resolves the request (UserError for unknown names, a trace that does not fit the model, ...) and runs.
SimulateResult run_simulate(const SimulateRequest& request, const SimulateOutputs& outputs = {});

/// The results; the replay's wall time and events per second only with `timing` (`--timing`): without it
/// the same inputs give byte-identical output.
void print_simulate_text(const SimulateResult& r, std::ostream& out, bool timing = false);
nlohmann::json simulate_to_json(const SimulateResult& r);
/// The resolved scenario as a scenario file would write it.
nlohmann::json simulate_request_to_json(const SimulateRequest& r);

}  // namespace moesim::scenario
