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

}  // namespace
}  // namespace workload_detail

std::vector<Request> open_loop_requests(const WorkloadSpec& w) {
  using det::bits;
  using det::det_exp;
  using det::det_log;
  using det::uniform_open;
  using workload_detail::kArrivalStream;
  using workload_detail::kGammaStream;
  using workload_detail::short_number;
  MOESIM_CHECK(w.arrival != ArrivalKind::ClosedLoop,
               "open_loop_requests called for a closed-loop workload; use ClosedLoopUsers");
  if (w.arrival == ArrivalKind::Trace) return read_request_trace(w.trace_path, request_trace_options(w)).requests;
  MOESIM_CHECK(w.requests >= 1 && w.rate > 0 && w.burstiness > 0, "open_loop_requests: workload not validated");
  // The list itself: a Request per request.
  model::require_memory(units::bytes(static_cast<double>(w.requests) * static_cast<double>(sizeof(Request))),
                        "the workload's " + std::to_string(w.requests) + " requests",
                        "give fewer requests (--requests, workload.requests), or use a machine with more memory");
  std::vector<Request> out(static_cast<std::size_t>(w.requests));
  // Mean gap in picoseconds; each gap is rounded to a whole picosecond and the times are summed as
  // integers, so the arrival times are exact sums and cannot drift with floating-point accumulation.
  const double mean_gap_ps = static_cast<double>(kPicosecondsPerSecond) / w.rate;
  // Gamma(shape k, scale theta) has mean k theta: theta = 1 / (rate k) keeps the mean gap at 1/rate.
  const double gamma_scale_ps = mean_gap_ps / w.burstiness;
  SimTime t = 0;
  for (std::int64_t i = 0; i < w.requests; ++i) {
    Request& r = out[static_cast<std::size_t>(i)];
    r.id = i;
    if (w.arrival == ArrivalKind::Uniform) {
      // Request i at i / rate (validate_workload keeps (requests - 1) / rate within range).
      r.arrival = static_cast<SimTime>(std::llround(static_cast<double>(i) * mean_gap_ps));
    } else {
      double gap = 0;
      if (w.arrival == ArrivalKind::Poisson) {
        // A Poisson process's gaps are i.i.d. exponential with mean 1/rate; inversion gives -ln(U)/rate for
        // U uniform in (0, 1) (Devroye, Non-Uniform Random Variate Generation, 1986, §II.2.1).
        const double u = uniform_open(bits(w.seed, kArrivalStream, static_cast<std::uint64_t>(i)));
        gap = -det_log(u) * mean_gap_ps;
      } else {
        // vLLM's get_request (vllm/benchmarks/serve.py): np.random.gamma(shape=burstiness,
        // scale=1/(rate*burstiness)). The variate is drawn in logs (det_random.hpp), from request i's own
        // counter-based draws, so it does not depend on any other request's.
        det::CounterRng rng(w.seed, kGammaStream, static_cast<std::uint64_t>(i));
        const double lg = det::log_gamma_variate(w.burstiness, rng);
        gap = det_exp(lg) * gamma_scale_ps;
      }
      // The first request arrives after the first gap: the process starts at 0 with no arrival there.
      if (!(gap <= static_cast<double>(std::numeric_limits<SimTime>::max() - t) - 1e6)) {
        throw UserError("workload: the " + std::string(name_of(w.arrival)) + " arrivals of " +
                        std::to_string(w.requests) + " requests at " + short_number(w.rate) +
                        "/s run past the simulator's time range; raise the rate or lower requests" +
                        (w.arrival == ArrivalKind::Gamma ? " (or raise the burstiness: below 1 a gap can be "
                                                           "many times the mean)"
                                                         : ""));
      }
      t += static_cast<SimTime>(std::llround(gap));
      r.arrival = t;
    }
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
  MOESIM_CHECK(spec.users >= 1 && spec.requests >= 1 && interval_ >= 0 && think_ >= 0,
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
