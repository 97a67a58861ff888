#include "moesim/sim/residency.hpp"

#include <cmath>

#include "moesim/model/error.hpp"

namespace moesim::sim {

WeightResidency::WeightResidency(ResidencyParams params, std::int32_t nodes, std::size_t buffers, bool start_wired)
    : params_(params),
      buffers_(buffers),
      last_use_(static_cast<std::size_t>(nodes) * buffers, SimTime{start_wired ? 0 : -1}) {
  MOESIM_CHECK(params_.bytes_per_ps > 0, "re-wire bandwidth must be positive (profiles check this)");
}

SimTime WeightResidency::rewire(std::int32_t count, double bytes) {
  ++rewires_;
  return params_.per_buffer * count + SimTime{static_cast<std::int64_t>(std::ceil(bytes / params_.bytes_per_ps))};
}

}  // namespace moesim::sim
