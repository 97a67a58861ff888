// Workload arrival processes: the open-loop request list (Poisson, gamma, uniform gaps, or a request
// trace) and the closed-loop users.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "det_random.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/sim/workload.hpp"
#include "workload_detail.hpp"

namespace moesim::sim {
namespace workload_detail {
namespace {

SimTime seconds_to_ps(double s) {
  return static_cast<SimTime>(std::llround(s * static_cast<double>(kPicosecondsPerSecond)));
}

/// Mean gap in picoseconds. Each gap is rounded to a whole picosecond and the times are summed as integers, so
/// the arrival times are exact sums and cannot drift with floating-point accumulation.
double mean_gap_ps(const WorkloadSpec& w) { return static_cast<double>(kPicosecondsPerSecond) / w.rate; }

/// `previous` + `gap` (ps): the first request arrives after the first gap, as the process starts at 0 with no
/// arrival there. UserError when the sum runs past SimTime's range.
SimTime after_gap(const WorkloadSpec& w, double gap, SimTime previous) {
  if (!(gap <= static_cast<double>((SimTime::max() - previous).ps()) - 1e6)) {
    throw UserError("workload: the " + std::string(name_of(w.arrival)) + " arrivals of " + std::to_string(w.requests) +
                    " requests at " + short_number(w.rate) +
                    "/s run past the simulator's time range; raise the rate or lower requests" +
                    (w.arrival == ArrivalKind::Gamma ? " (or raise the burstiness: below 1 a gap can be "
                                                       "many times the mean)"
                                                     : ""));
  }
  return previous + static_cast<SimTime>(std::llround(gap));
}

}  // namespace

SimTime poisson_arrival(const WorkloadSpec& w, std::int64_t i, SimTime previous) {
  // A Poisson process's gaps are i.i.d. exponential with mean 1/rate; inversion gives -ln(U)/rate for
  // U uniform in (0, 1) (Devroye, Non-Uniform Random Variate Generation, 1986, §II.2.1).
  const double u = det::uniform_open(det::bits(w.seed, kArrivalStream, static_cast<std::uint64_t>(i)));
  return after_gap(w, -det::det_log(u) * mean_gap_ps(w), previous);
}

SimTime gamma_arrival(const WorkloadSpec& w, std::int64_t i, SimTime previous) {
  // vLLM's get_request (vllm/benchmarks/serve.py): np.random.gamma(shape=burstiness,
  // scale=1/(rate*burstiness)). The variate is drawn in logs (det_random.hpp), from request i's own
  // counter-based draws, so it does not depend on any other request's. Gamma(shape k, scale theta) has mean
  // k theta: theta = 1 / (rate k) keeps the mean gap at 1/rate.
  det::CounterRng rng(w.seed, kGammaStream, static_cast<std::uint64_t>(i));
  const double lg = det::log_gamma_variate(w.burstiness, rng);
  return after_gap(w, det::det_exp(lg) * (mean_gap_ps(w) / w.burstiness), previous);
}

SimTime uniform_arrival(const WorkloadSpec& w, std::int64_t i, SimTime /*previous*/) {
  // Request i at i / rate (validate_workload keeps (requests - 1) / rate within range).
  return static_cast<SimTime>(std::llround(static_cast<double>(i) * mean_gap_ps(w)));
}

}  // namespace workload_detail

std::vector<Request> open_loop_requests(const WorkloadSpec& w) {
  MOESIM_CHECK(w.arrival != ArrivalKind::ClosedLoop,
               "open_loop_requests called for a closed-loop workload; use ClosedLoopUsers");
  if (w.arrival == ArrivalKind::Trace) return read_request_trace(w.trace_path, request_trace_options(w)).requests;
  MOESIM_CHECK(w.requests >= 1 && w.rate > 0 && w.burstiness > 0, "open_loop_requests: workload not validated");
  const ArrivalInfo& process = registered(arrival_kinds(), w.arrival, "arrival process");
  MOESIM_CHECK(process.arrival != nullptr, "open_loop_requests: arrival " + process.name + " draws no times");
  // The list itself: a Request per request.
  model::require_memory(units::bytes(static_cast<double>(w.requests) * static_cast<double>(sizeof(Request))),
                        "the workload's " + std::to_string(w.requests) + " requests",
                        "give fewer requests (--requests, workload.requests), or use a machine with more memory");
  std::vector<Request> out(static_cast<std::size_t>(w.requests));
  SimTime t{};
  for (std::int64_t i = 0; i < w.requests; ++i) {
    Request& r = out[static_cast<std::size_t>(i)];
    r.id = i;
    t = process.arrival(w, i, t);
    r.arrival = t;
    std::tie(r.prompt_tokens, r.output_tokens) = lengths_for(w, i);
  }
  return out;
}

// ------------------------------------------------------------------------------------------------------

ClosedLoopUsers::ClosedLoopUsers(const WorkloadSpec& spec)
    : spec_(spec),
      interval_(workload_detail::seconds_to_ps(spec.user_interval_s)),
      think_(workload_detail::seconds_to_ps(spec.think_time_s)) {
  MOESIM_CHECK(spec.arrival == ArrivalKind::ClosedLoop, "ClosedLoopUsers needs a closed-loop workload");
  MOESIM_CHECK(spec.users >= 1 && spec.requests >= 1 && interval_ >= SimTime{} && think_ >= SimTime{},
               "ClosedLoopUsers: workload not validated");
}

std::int64_t ClosedLoopUsers::users() const { return std::min(spec_.users, spec_.requests); }

SimTime ClosedLoopUsers::join_time(std::int64_t user) const {
  MOESIM_CHECK(user >= 0 && user < users(), "ClosedLoopUsers::join_time: no user " + std::to_string(user));
  return user * interval_;
}

SimTime ClosedLoopUsers::next_send_time(SimTime completed) const { return completed + think_; }

std::optional<Request> ClosedLoopUsers::send(std::int64_t user, SimTime now) {
  MOESIM_CHECK(user >= 0 && user < users(), "ClosedLoopUsers::send: no user " + std::to_string(user));
  MOESIM_CHECK(now >= last_send_, "ClosedLoopUsers::send: requests must be sent in time order (ids follow arrivals)");
  if (sent_ >= spec_.requests) return std::nullopt;
  last_send_ = now;
  Request r;
  r.id = sent_++;
  r.arrival = now;
  r.user = user;
  std::tie(r.prompt_tokens, r.output_tokens) = lengths_for(spec_, r.id);
  return r;
}

}  // namespace moesim::sim
