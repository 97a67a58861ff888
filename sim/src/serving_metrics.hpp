#pragma once
// The serving simulator's metrics (internal to sim/src): from the engine's records of a run to the figures
// vLLM's benchmark_serving reports (ServingResult in sim/serving.hpp).

#include <vector>

#include "moesim/sim/serving.hpp"

namespace moesim::sim::serving_detail {

/// Fills `r`'s metrics from its records (r.requests, sorted here by id, and r.steps) and every inter-token
/// gap `itl` of the run (seconds); c gives the SLO, the extra percentiles and the model's layer count.
void summarise(const ServingConfig& c, std::vector<float> itl, ServingResult& r);

}  // namespace moesim::sim::serving_detail
