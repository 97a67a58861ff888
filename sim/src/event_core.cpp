#include "moesim/sim/event_core.hpp"

#include <cmath>
#include <string>

#include "moesim/model/error.hpp"

namespace moesim::sim {

SimTime to_sim_time(units::Duration d) {
  const double ps = d.base() * static_cast<double>(kPicosecondsPerSecond);
  MOESIM_CHECK(ps >= 0 && ps < 9.2e18, "duration out of the simulator's range: " + std::to_string(d.base()) + " s");
  return SimTime{std::llround(ps)};
}

std::uint32_t Simulation::add_handler(EventHandler* h) {
  MOESIM_CHECK(h != nullptr, "null event handler");
  handlers_.push_back(h);
  return static_cast<std::uint32_t>(handlers_.size() - 1);
}

void Simulation::refuse(SimTime at, std::uint32_t handler) const {
  // SST's time-fault check: an event in the past would make the run order depend on the queue's
  // internals. It stays on in Release builds.
  MOESIM_CHECK(at >= now_, "event scheduled in the past (at " + std::to_string(at.ps()) + " ps, now " +
                               std::to_string(now_.ps()) + " ps)");
  MOESIM_CHECK(handler < handlers_.size(), "event for an unknown handler");
}

std::uint64_t Simulation::run() {
  stopped_ = false;
  const std::uint64_t start = events_;
  while (!queue_.empty() && !stopped_) {
    // Field by field: the event was often written a moment ago, and a whole-record copy reads it back
    // with wide loads that cannot be forwarded from those stores.
    const Event& e = queue_.top();
    now_ = e.time;
    EventHandler* const handler = handlers_[e.handler];
    const std::uint32_t kind = e.kind;
    const std::uint64_t arg = e.arg;
    queue_.pop();
    ++events_;
    handler->handle_event(kind, arg);
  }
  return events_ - start;
}

}  // namespace moesim::sim
