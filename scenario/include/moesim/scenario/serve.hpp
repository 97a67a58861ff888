#pragma once
// `moesim serve` as a library: a serving scenario (JSON; every flag of the command sets one of its keys)
// resolved into profiles, a parallel plan, a workload and a routing trace, run through the serving
// simulator (sim/serving.hpp), and rendered as text, JSON ({name, value, unit} per metric plus the
// resolved scenario), per-request and per-step CSVs. A scenario may carry a "sweep": dotted keys with
// lists of values; every combination is run and tabulated (the arrival-rate curves of seed 003, the
// TP/EP/hybrid grid of seed 002).
//
// Scenario keys: serve_params() declares every one (with its type, unit, default and flag; `moesim serve
// --help` lists them); the "workload" object is sim::parse_workload's (sim/workload.hpp).

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "moesim/model/cost.hpp"
#include "moesim/model/expert_streaming.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/scenario/params.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/sim/serving.hpp"

namespace moesim::scenario {

/// A scenario document and where relative paths in it resolve.
struct ServeScenario {
  nlohmann::json doc = nlohmann::json::object();
  std::string source = "command line";  ///< file name for error messages
  std::filesystem::path base_dir = ".";
  /// Parts the caller filled in because the user gave none (`moesim serve`'s flags-only workload): said in
  /// the run's assumptions, never silently.
  std::vector<std::string> defaults;
};

ServeScenario load_serve_scenario(const std::string& path);

/// A serving run's figures as they would come out with the engine slower or faster by the extremes of its
/// runtime's held-out errors (model::RuntimeProfile::error_low, error_high): the same requests run again
/// with every step and host time × (1 + error_low) (`fast`) and × (1 + error_high) (`slow`)
/// (sim::ServingConfig::engine_time_scale). A figure's interval is then the two runs' values of it: a
/// rate's measured value fell in [value / (1 + high), value / (1 + low)] as often as the runtime's dense
/// rows' did (model::prediction_interval) where the engine alone sets it, and a throughput that the
/// arrival rate sets comes out with a narrow interval, as it should.
struct ServeRange {
  model::RuntimeProfile runtime;  ///< whose interval: its id, errors and prediction_check
  bool moe = false;               ///< the model is an MoE model (the range line quotes the MoE check)
  sim::ServingResult fast, slow;  ///< the summaries only (requests and steps are dropped)
  /// A figure's interval: its values in the fast and the slow run, lower first.
  [[nodiscard]] std::pair<double, double> interval(
      const std::function<double(const sim::ServingResult&)>& figure) const {
    const double a = figure(fast), b = figure(slow);
    return {std::min(a, b), std::max(a, b)};
  }
};

struct ServeRun {
  nlohmann::json scenario;  ///< the resolved scenario (defaults filled in)
  std::string model_id;
  std::string hw_id;
  std::string precision;
  bool moe = true;  ///< the model routes tokens to experts (a dense model's plan line names no MoE split)
  sim::ServingResult result;
  double wall_seconds = 0;  ///< wall-clock time of the simulation itself
  std::int64_t requests = 0;
  /// What the run's output tokens cost (issue 21: serve prints it as `cost` does): the capital of its nodes
  /// (and NICs) when they are priced, else `price_missing` says which price to add; the running cost at the
  /// run's output throughput under `costs` (the scenario's "costs", else 3 years at 100% use, no energy).
  std::optional<model::CapitalCost> capital;
  std::optional<model::RunningCost> running;
  std::string price_missing;
  model::CostAssumptions costs;
  /// With a runtime that gives an interval, where run_serve was asked for one.
  std::optional<ServeRange> range;
};

/// A scenario resolved into the serving simulator's configuration, not yet run: the profiles, plan,
/// scheduler, workload, routing trace and streaming it names, owned here (`config` points into them, so a
/// PreparedServe stays where it was made).
struct PreparedServe {
  ServeRun run;  ///< the ids and the resolved scenario; no result yet
  model::Architecture arch;
  model::NodeProfile node;
  std::optional<model::NicProfile> nic, intra;
  sim::RoutingTrace trace;
  sim::ServingConfig config;
  std::vector<std::string> defaults;  ///< said first in the run's assumptions (ServeScenario::defaults and more)
  std::optional<model::RuntimeProfile> runtime;  ///< the scenario's runtime profile, applied to `node`

  PreparedServe() = default;
  PreparedServe(const PreparedServe&) = delete;
  PreparedServe& operator=(const PreparedServe&) = delete;
};

/// A serve scenario's "plan" keys as a file or the flags give them; prepare_serve resolves them against
/// the node profile (sim::resolve_plan).
struct PlanKeys {
  std::optional<std::int64_t> tp;  ///< none: every device used, over the pipeline stages
  std::int64_t pp = 1;
  std::optional<std::int64_t> moe_tp, moe_ep;  ///< none: sim::ParallelPlan's (moe_tp = tp)
  bool attention_dp = false;
  bool attention_replicated = false;
  std::optional<std::int64_t> devices_per_node;  ///< none: all the node's devices
  std::optional<std::int64_t> nics_per_node;     ///< none: the node profile's nics_per_node, else 1
  /// vLLM's parallel keys (ParallelConfig): data_parallel_size attention replicas, each over tp devices
  /// (vLLM's tensor_parallel_size when data_parallel_size is given), with the experts over all of them when
  /// enable_expert_parallel. plan_from maps them onto the keys above.
  std::optional<std::int64_t> data_parallel_size;
  bool enable_expert_parallel = false;
};

/// The serving simulator's own defaults (sim::ServingConfig's member initialisers), which a scenario's keys
/// start from.
const sim::ServingConfig& serving_defaults();

/// A serve scenario's keys as read (serve_params()), before they are resolved into profiles and a plan.
struct ServeRequest {
  std::string model = "mixtral-8x7b";
  nlohmann::json model_overrides;  ///< config.json keys laid over the model's; null when none
  std::string hw = "dgx-h100";
  std::optional<std::string> nic;
  std::int64_t nodes = 1;
  PlanKeys plan;
  std::string precision = "checkpoint";
  std::optional<std::string> experts;
  sim::SchedulerConfig scheduler;
  /// Where the scheduler keys a scenario leaves out come from: "moesim" (sim::SchedulerConfig's) or "vllm"
  /// (vLLM's for `vllm serve` on the node's GPU: vllm_batch_defaults).
  std::string scheduler_defaults = "moesim";
  nlohmann::json workload;  ///< sim::parse_workload's object (read there, with the scenario's base directory)
  sim::Slo slo;
  std::vector<double> percentiles = serving_defaults().percentiles;
  std::optional<std::string> trace;
  GenerateRequest generate = serve_generate_defaults();
  std::optional<cost::StreamingSpec> streaming;
  double activation_bytes = serving_defaults().activation_bytes;
  double kv_bytes = serving_defaults().kv_bytes;
  std::optional<std::string> kv_cache_dtype;  ///< vLLM's name for the KV cache's element type (kv_cache_bytes)
  std::optional<std::string> runtime;
  std::optional<model::CostAssumptions> costs;

  /// A serve run's routing trace, when generated: 4096 tokens (simulate's GenerateRequest otherwise).
  static GenerateRequest serve_generate_defaults() {
    GenerateRequest g;
    g.tokens = 4096;
    return g;
  }
};

/// vLLM's scheduler defaults for `vllm serve` on one of `device`'s GPUs (EngineArgs.get_batch_defaults,
/// vllm/engine/arg_utils.py, the OPENAI_API_SERVER context): 8192 tokens per step and 1024 sequences on a
/// GPU of at least 70 GiB that is not an A100 ("for GPUs like H100 and MI300x"; an A100 loses throughput
/// with the larger budget, vLLM PR #17885), else 2048 and 256; the V1 engine always chunks prefills.
/// Other keys keep `base`'s.
sim::SchedulerConfig vllm_batch_defaults(const model::DeviceSpec& device, sim::SchedulerConfig base = {});

/// Bytes per KV-cache element of vLLM's --kv-cache-dtype `name` (vllm/config/cache.py CacheDType): 2 for
/// bfloat16 and float16, 1 for the fp8 and int8 forms, `model_bytes` (the kv_bytes key) for "auto", which
/// is the model's own type. UserError listing the names for another, and for fp8_ds_mla (DeepSeek's sparse
/// MLA layout of 656 bytes per token, which moesim does not model).
double kv_cache_bytes(const std::string& name, double model_bytes);

/// Every key of a serve scenario, declared once (scenario/params.hpp): the reader prepare_serve uses, the
/// flags of `moesim serve` (each writes its key into the scenario: ParamTable::flags_to_json), and the
/// "scenario keys" section of its --help. The workload object's own keys are sim::parse_workload's.
const scenario::ParamTable<ServeRequest>& serve_params();

/// The keys of a scenario's "scheduler" object, each declared once (scenario/params.hpp): its reader, the
/// flags of `serve` that set them, their --help and the resolved scenario's "scheduler" come from them.
const scenario::ParamTable<sim::SchedulerConfig>& scheduler_params();
/// A scenario's "scheduler" object (absent keys take sim::SchedulerConfig's defaults). UserError naming
/// the key.
sim::SchedulerConfig read_scheduler(const json::Node& scheduler);

/// Generated routing traces kept for the scenarios that follow: a fit runs the same configurations at many
/// parameter values, and generating each one's trace again was a third of `moesim validate --fit`'s time.
/// Keyed by all a generated trace depends on (the model's id, MoE layers, routed experts and top-k, and the
/// scenario's "generate" request), or by the model and the file a trace was read from (validation rows
/// priced on a recorded trace read it once, not at every trial of a fit). Holds at most kMaxBytes of traces
/// (then starts again empty). One per thread; it must outlive the runs prepared with it.
class TraceCache {
 public:
  static constexpr double kMaxBytes = 256.0 * 1024 * 1024;
  /// The trace under `key`, made by `make` the first time.
  const sim::RoutingTrace& get(const std::string& key, const std::function<sim::RoutingTrace()>& make);

 private:
  std::map<std::string, sim::RoutingTrace> traces_;
  double bytes_ = 0;
};

/// Reads and checks a scenario (its "sweep" key must be absent). With `traffic` false it leaves out what
/// only a run needs (the open-loop requests and the routing trace; run.requests is then 0 for an open
/// loop). With a `cache`, a generated routing trace comes from it (config.trace points into the cache).
/// UserError for bad input.
std::unique_ptr<PreparedServe> prepare_serve(const ServeScenario& s, bool traffic = true, TraceCache* cache = nullptr);

/// Runs one scenario (its "sweep" key must be absent). UserError for bad input. With `range`, and a runtime
/// profile that gives an interval, also its ServeRange (two more runs of the same requests). Every engine
/// time × `engine_time_scale` (sim::ServingConfig::engine_time_scale; find_max_rate's range searches).
ServeRun run_serve(const ServeScenario& s, const std::function<void(double)>& progress = {}, bool range = false,
                   double engine_time_scale = 1.0);

/// The memory plan the run of this scenario would make (sim::check_memory), without running it: whether
/// the fullest device holds its weights and activations, and why not. UserError for bad input.
sim::MemoryPlan serve_memory_plan(const ServeScenario& s);

/// The sweep's points: each is the scenario with one combination of the swept values set, and the
/// combination itself ("key=value" labels). No sweep: one point, no labels.
struct SweepPoint {
  ServeScenario scenario;
  std::vector<std::pair<std::string, nlohmann::json>> values;
};
std::vector<SweepPoint> expand_sweep(const ServeScenario& s);

/// The results; the simulation's wall time only with `timing` (`--timing`): without it the same inputs
/// give byte-identical output.
/// The capacity question (issue 21, `serve --find-max-rate`): the highest arrival rate at which at least
/// `attainment` of the requests meet the scenario's SLO. DistServe's definition of goodput (Zhong et al.,
/// OSDI 2024, §2: "the maximum request rate that can be served adhering to the SLO attainment goal (say,
/// 90%)"). The rate is bracketed by doubling or halving from the scenario's own (at most 24 times each),
/// then bisected geometrically until the bracket is within 2% (at most 16 runs); each probe offers load
/// for the scenario's own arrival window (its requests over its rate) at the probe's rate, with its seed,
/// so the answer is reproducible and an overload shows as a queue that grows for the whole window. Needs an SLO and a
/// rate-driven arrival (poisson, gamma or uniform); UserError otherwise, or when even the lowest rate tried fails.
struct RateProbe {
  double rate = 0;        ///< requests/s
  double attainment = 0;  ///< share of the requests that met the SLO
  ServeRun run;
};
struct MaxRate {
  double attainment_target = 0.9;
  double window_s = 0;                 ///< every probe's arrival window: the scenario's requests over its rate
  std::vector<RateProbe> probes;       ///< in the order run
  std::size_t best = 0;                ///< the probe at the highest rate that met the target
  std::optional<double> failing_rate;  ///< the lowest rate that did not, when one was found
  /// With a runtime that gives an interval: the max rate found again with every engine time × (1 +
  /// error_high) and × (1 + error_low) (as ServeRange's runs), lower first; 0 where the SLO is out of reach
  /// that slow. `range_basis`: what the interval is made of (model::RuntimeProfile::interval_basis).
  std::optional<std::pair<double, double>> max_rate_range;
  std::string range_basis;
  double engine_time_scale_low = 1, engine_time_scale_high = 1;
};
MaxRate find_max_rate(const ServeScenario& s, double attainment,
                      const std::function<void(double rate, std::size_t probe)>& progress = {});
void print_max_rate_text(const MaxRate& m, std::ostream& out);
nlohmann::json max_rate_to_json(const MaxRate& m);

void print_serve_text(const ServeRun& r, std::ostream& out, bool timing = false);
nlohmann::json serve_to_json(const ServeRun& r, bool timing = false);
void write_requests_csv(const ServeRun& r, std::ostream& out);
void write_steps_csv(const ServeRun& r, std::ostream& out);
/// Engine steps a serving trace holds at most by default (`serve --chrome-steps`): three events each,
/// about 0.9 KB of file and 7.5 KB of memory while it is written; 5,000 steps are a few minutes of a busy
/// server. An Azure-trace replay has hundreds of thousands of steps (112 MB of trace before this bound).
inline constexpr std::size_t kServeTraceSteps = 5000;
/// Request tracks a serving trace holds at most.
inline constexpr std::size_t kServeTraceRequests = 200;

/// A Chrome/Perfetto trace (chrome_trace.hpp): the engine's first `max_steps` steps with queue and
/// KV-cache counters, and one track for each of the first `max_requests` requests that arrive before the
/// last of those steps ends, from arrival to first token and on to its last token. Returns what the trace
/// covers ("the first 5000 of 51234 engine steps (to 93.2 s of 812.0 s) and 200 of 3000 requests"),
/// which the trace's "otherData" also says.
std::string write_serve_chrome_trace(const ServeRun& r, std::ostream& out, std::size_t max_steps = kServeTraceSteps,
                                     std::size_t max_requests = kServeTraceRequests);

/// A sweep as a table (one row per point: the swept values, then the key metrics with units).
void print_sweep_table(const std::vector<SweepPoint>& points, const std::vector<ServeRun>& runs, std::ostream& out,
                       bool markdown = false);
void write_sweep_csv(const std::vector<SweepPoint>& points, const std::vector<ServeRun>& runs, std::ostream& out);

}  // namespace moesim::scenario
