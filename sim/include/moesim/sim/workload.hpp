#pragma once
// Request workloads for the serving simulator (issue 6, part 1; issue 21): when requests arrive and how
// long their prompts and outputs are.
//
// Arrivals
//  - poisson:     exponential gaps with mean 1/rate (an open-loop Poisson process).
//  - gamma:       gamma-distributed gaps with mean 1/rate and shape `burstiness`, scale 1/(rate *
//                 burstiness): vLLM's benchmark_serving --burstiness (vllm/benchmarks/serve.py get_request,
//                 commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1). Burstiness 1 is a Poisson process; below 1
//                 the arrivals come in bursts (the gaps' coefficient of variation is 1/sqrt(burstiness)),
//                 above 1 they are more even. Unlike that get_request, the gaps are not rescaled to end at
//                 exactly requests/rate: the realised rate varies with the seed, as a Poisson process's does.
//  - uniform:     request i at exactly i / rate (Snowflake's Llama 3.1 405B benchmark, TARGETS.md §5).
//  - closed-loop: user u joins at u * user_interval and sends its first request then; each later request
//                 is sent think_time after its previous one completed (Databricks' DBRX benchmark: one new
//                 user per second, TARGETS.md §2). The serving engine drives this with ClosedLoopUsers.
//  - trace:       replay of a request trace (sim/request_traces.hpp: moesim's CSV, the Azure LLM
//                 inference traces 2023 and 2024, BurstGPT, Mooncake).
// Any open-loop kind (not closed-loop) may cap the requests in flight with max_concurrency, vLLM's
// --max-concurrency: a request is sent at its arrival time or, when max_concurrency requests are in flight
// then, as soon as one of them completes (first come, first served), and its TTFT and E2EL count from when
// it was sent, as vLLM's client counts them (the serving engine does this).
// Prompt and output lengths (not for trace: the file has them) are fixed or drawn from a distribution,
// deterministically in (seed, request index) on every platform: counter-based splitmix64 random numbers
// and this module's own inverse-CDF conversions (det_random.hpp), never std::*_distribution
// (implementation-defined).
//
// The "workload" object of a scenario file. Durations and rates are strings with their unit:
//   "workload": {"arrival": "poisson", "rate": "2/s", "requests": 1000, "seed": 7,
//                "prompt": {"dist": "normal", "mean": 2000, "std": 200, "min": 1, "max": 4096},
//                "output": 256}
//   "workload": {"arrival": "gamma", "rate": "4/s", "burstiness": 0.5, "max_concurrency": 32,
//                "requests": 1000, "prompt": 512, "output": 128}
//   "workload": {"arrival": "closed-loop", "users": 32, "user_interval": "1s", "think_time": "0s",
//                "requests": 500, "prompt": 2000, "output": 256}
//   "workload": {"arrival": "trace", "trace": "traces/azure_conv.csv", "requests": 0}
//   "workload": {"arrival": "trace", "trace": "BurstGPT_1.csv", "trace_format": "burstgpt", "time_scale": 0.1}
//  - arrival:  "poisson" | "gamma" | "uniform" | "closed-loop" | "trace" (required).
//  - rate:     poisson, gamma, uniform (required): requests per time, "2/s", "2req/s", "120/min", "7200/h".
//  - burstiness: gamma only: the gaps' shape, > 0 (default 1: Poisson).
//  - requests: how many requests in all (default 100); trace: at most this many requests (default 0 = all).
//  - max_concurrency: poisson, gamma, uniform, trace: at most this many requests in flight (default: no cap).
//  - users (default 1), user_interval (default "1s"), think_time (default "0s"): closed-loop only.
//  - prompt, output (required except for trace): an integer (fixed) or an object
//      {"dist": "fixed", "value": 2000}
//      {"dist": "uniform", "min": 100, "max": 4000}                 every integer in [min, max] equally likely
//      {"dist": "normal", "mean": 2000, "std": 200, "min": 1, "max": 4096}
//      {"dist": "lognormal", "mean": 256, "std": 128, "min": 1, "max": 2048}
//    normal/lognormal: mean and std of the untruncated length (lognormal: of the length itself, not of its
//    log), rounded to an integer and truncated to [min, max] (min defaults to 1; max omitted = no upper
//    bound); mean must lie in [min, max]. Wide bounds keep the mean; tight ones shift it.
//  - seed:     random seed (default 1).
//  - trace:    trace only: the request-trace file, relative to the scenario file's directory.
//  - trace_format: trace only: "auto" (default: detected from the first line), "moesim", "azure",
//    "burstgpt" or "mooncake".
//  - time_scale: trace only: every arrival time is multiplied by it, > 0 (default 1): 0.5 replays the trace
//    twice as fast (Vidur's time_scale_factor).
// Keys a kind does not use are refused (e.g. "rate" with "closed-loop"), like unknown keys.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moesim/model/json_reader.hpp"
#include "moesim/sim/event_core.hpp"
#include "moesim/sim/request.hpp"
#include "moesim/sim/request_traces.hpp"

namespace moesim::sim {

enum class ArrivalKind { Poisson, Gamma, Uniform, ClosedLoop, Trace };

enum class LengthKind {
  Fixed,      ///< always `value`
  Uniform,    ///< every integer in [min, max] equally likely
  Normal,     ///< N(mean, std), rounded, truncated to [min, max]
  Lognormal,  ///< lognormal with this mean and std of the length itself, rounded, truncated to [min, max]
};

/// A prompt or output length distribution, in tokens.
struct LengthSpec {
  LengthKind kind = LengthKind::Fixed;
  std::int64_t value = 0;  ///< Fixed
  std::int64_t min = 1;    ///< Uniform, Normal, Lognormal: smallest length (>= 1)
  std::int64_t max = 0;    ///< Uniform: largest length; Normal, Lognormal: largest, or 0 = no upper bound
  double mean = 0;         ///< Normal, Lognormal: mean of the untruncated length
  double std = 0;          ///< Normal, Lognormal: standard deviation of the untruncated length
  bool operator==(const LengthSpec&) const = default;
};

struct WorkloadSpec {
  ArrivalKind arrival = ArrivalKind::Poisson;
  double rate = 1.0;        ///< requests per second (Poisson, Gamma, Uniform)
  double burstiness = 1.0;  ///< Gamma: the gaps' shape (vLLM's --burstiness); 1 is a Poisson process
  /// How many requests in all (every kind); Trace: at most this many of the file's requests, 0 = all.
  std::int64_t requests = 100;
  /// Open-loop kinds: at most this many requests in flight (sent, not yet completed); 0 = no cap (vLLM's
  /// --max-concurrency; the serving engine holds a request back until a slot frees).
  std::int64_t max_concurrency = 0;
  // Closed loop (Databricks): user u (0-based) joins at u * user_interval and sends its first request
  // then; each later request is sent think_time after its previous one completed; at most `users` users.
  std::int64_t users = 1;
  double user_interval_s = 1.0;  ///< seconds between users joining
  double think_time_s = 0.0;     ///< seconds from a completion to the user's next request
  LengthSpec prompt, output;     ///< ignored for Trace (the file has them)
  std::uint64_t seed = 1;
  std::string trace_path;                                      ///< Trace: the request-trace file
  RequestTraceFormat trace_format = RequestTraceFormat::Auto;  ///< Trace: Auto = detected from the file
  double time_scale = 1.0;  ///< Trace: every arrival time is multiplied by this (0.5: twice as fast)
  bool operator==(const WorkloadSpec&) const = default;
};

/// An arrival process as the registry holds it: its workload keys, how it reads and writes them, and (open
/// loop) when each request arrives.
struct ArrivalInfo {
  ArrivalKind value;
  std::string name;
  std::string description;
  /// The workload keys it uses besides "arrival", "requests" and "seed"; with "prompt" and "output" the
  /// lengths are drawn (a trace file has its own).
  std::vector<std::string> keys;
  std::int64_t default_requests = 100;  ///< "requests" when absent (0: all a file holds)
  std::int64_t min_requests = 1;        ///< the least "requests" may be
  /// Reads its own keys (not "prompt" and "output") from the workload object into `w`; a relative file name
  /// is resolved against `base_dir`.
  void (*parse)(const json::Node& node, const std::filesystem::path& base_dir, WorkloadSpec& w) = nullptr;
  /// Writes its own keys back (workload_to_json).
  void (*write)(const WorkloadSpec& w, nlohmann::json& j) = nullptr;
  /// Open loop with drawn times: request i's arrival (ps), given request i - 1's (0 for the first); nullptr for
  /// closed-loop users and a trace, whose times come from the serving engine and the file.
  SimTime (*arrival)(const WorkloadSpec& w, std::int64_t i, SimTime previous) = nullptr;
};
/// The registered arrival processes, in registration order (--help lists them); the built-in ones first.
const std::vector<ArrivalInfo>& arrival_kinds();
/// Adds an arrival process: workload.arrival and --arrival then accept its name. UserError for a name or
/// value taken. Not thread-safe: register before running.
void register_arrival(ArrivalInfo info);

/// "poisson", "gamma", "uniform", "closed-loop", "trace" (the registered names).
std::string_view name_of(ArrivalKind);
/// "fixed", "uniform", "normal", "lognormal".
std::string_view name_of(LengthKind);

/// Parses a request rate written with its unit ("2/s", "2req/s", "2 req/s", "120/min", "7200/h") into
/// requests per second. UserError naming `where` for a bare number (with "2/s" as the example), an
/// unknown unit, or a rate that is not positive and finite.
double parse_request_rate(std::string_view text, std::string_view where);

/// Parses the "workload" object of a scenario file (keys in the comment at the top of this file); a
/// relative trace path is resolved against `base_dir`. UserError naming the file and JSON path for unknown
/// keys, keys the arrival kind does not use, wrong types, bare durations or rates, and anything
/// validate_workload refuses.
WorkloadSpec parse_workload(const json::Node& node, const std::filesystem::path& base_dir);

/// The "workload" object for `spec`, with only the keys its arrival kind uses. parse_workload gives back
/// `spec` exactly in those fields (numbers are written with 17 significant digits); the unused fields
/// come back at their defaults. A relative trace_path is written as is (and parse_workload resolves it).
nlohmann::json workload_to_json(const WorkloadSpec& spec);

/// Checks the fields `spec`'s arrival kind uses: rate > 0, burstiness > 0, requests >= 1 (Trace: >= 0),
/// max_concurrency >= 0 (0 with closed-loop), users >= 1, durations >= 0, lengths (value >= 1,
/// 1 <= min <= max, mean in [min, max], std >= 0), a trace path and time_scale > 0, and that the run fits
/// SimTime's range. UserError starting with `where` (e.g. "scenario.json: $.workload").
void validate_workload(const WorkloadSpec& spec, std::string_view where);

/// The reading options of a Trace workload: its format, time scale and requests (as max_requests).
RequestTraceOptions request_trace_options(const WorkloadSpec& spec);

/// Open-loop kinds (Poisson, Gamma, Uniform, Trace): all the requests, sorted by arrival, ids 0, 1, 2, ...
/// Poisson and Gamma: the first request arrives after the first gap, not at 0 (a renewal process started
/// at 0 has no arrival at 0). Uniform: request i at i / rate, so the first is at 0. Trace: the file's
/// requests (read_request_trace with the spec's format, time scale and max_requests = requests; the
/// serving report calls read_request_trace itself for its summary line). Deterministic in the seed on every
/// platform. Calling it for ClosedLoop is a bug in the caller (use ClosedLoopUsers).
std::vector<Request> open_loop_requests(const WorkloadSpec& spec);

/// Prompt and output length of the request with id `index` (closed loop draws them as users send),
/// deterministic in (seed, index) and independent of every other request. Not for Trace.
std::pair<std::int64_t, std::int64_t> lengths_for(const WorkloadSpec& spec, std::int64_t index);

/// The mean length of `spec` in tokens (Normal, Lognormal: the untruncated mean), for estimating what a
/// run will hold before it starts.
double mean_length(const LengthSpec& spec);

/// Closed-loop users (Databricks), driven by the serving engine as its simulation runs:
///   for u in 0 .. users()-1: schedule a "user u sends" event at join_time(u)
///   on "user u sends" at now:    if (auto r = loop.send(u, now)) admit *r
///   on completion of r at t:     schedule "user r.user sends" at next_send_time(t)
/// send() hands out ids in call order, so calling it in simulated-time order (as events run) gives ids in
/// arrival order; it returns nullopt once `requests` requests have been sent.
class ClosedLoopUsers {
 public:
  /// `spec` must be a validated ClosedLoop workload (anything else is a bug in the caller).
  explicit ClosedLoopUsers(const WorkloadSpec& spec);

  /// Users that will send at least one request: min(users, requests).
  [[nodiscard]] std::int64_t users() const;
  /// When user `user` joins and sends its first request: user * user_interval.
  [[nodiscard]] SimTime join_time(std::int64_t user) const;
  /// When a user whose request completed at `completed` sends its next one: completed + think_time.
  [[nodiscard]] SimTime next_send_time(SimTime completed) const;
  /// The request `user` sends at `now` (next id, lengths_for(spec, id)), or nullopt once all have been
  /// sent. `now` must not be earlier than the previous call's.
  std::optional<Request> send(std::int64_t user, SimTime now);
  /// Requests sent so far.
  [[nodiscard]] std::int64_t sent() const { return sent_; }

 private:
  WorkloadSpec spec_;
  SimTime interval_{};
  SimTime think_{};
  std::int64_t sent_ = 0;
  SimTime last_send_{};
};

}  // namespace moesim::sim
