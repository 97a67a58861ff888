#pragma once
// Helpers shared by the workload tests (test_workload*.cpp): one second of simulated time and an open-loop
// spec with fixed lengths.

#include <cstdint>

#include "moesim/sim/workload.hpp"

namespace moesim::test::workload {

using moesim::sim::ArrivalKind;
using moesim::sim::kPicosecondsPerSecond;
using moesim::sim::LengthKind;
using moesim::sim::WorkloadSpec;

inline constexpr moesim::sim::SimTime kSecond{kPicosecondsPerSecond};

inline WorkloadSpec open_spec(ArrivalKind kind, double rate, std::int64_t requests, std::uint64_t seed = 1) {
  WorkloadSpec w;
  w.arrival = kind;
  w.rate = rate;
  w.requests = requests;
  w.seed = seed;
  w.prompt = {LengthKind::Fixed, 2000};
  w.output = {LengthKind::Fixed, 256};
  return w;
}

}  // namespace moesim::test::workload
