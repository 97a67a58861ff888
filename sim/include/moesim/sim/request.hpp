#pragma once
// One inference request, as the workload generators (sim/workload.hpp) and the request-trace readers
// (sim/request_traces.hpp) hand it to the serving engine (sim/serving.hpp).

#include <cstdint>

#include "moesim/sim/event_core.hpp"

namespace moesim::sim {

/// The longest run accepted, in seconds: about 46 days, half of SimTime's 2^63 ps (106 days), so Poisson
/// gaps that run longer than their mean cannot overflow. Workloads and request traces are refused beyond.
inline constexpr double kMaxRunSeconds = 4.0e6;

/// One inference request.
struct Request {
  std::int64_t id = 0;             ///< 0, 1, 2, ... in arrival order
  SimTime arrival{};               ///< picoseconds from the start of the run
  std::int64_t prompt_tokens = 0;  ///< >= 1
  std::int64_t output_tokens = 0;  ///< >= 1
  std::int64_t user = -1;          ///< closed loop: the user who sent it; else -1
  bool operator==(const Request&) const = default;
};

}  // namespace moesim::sim
