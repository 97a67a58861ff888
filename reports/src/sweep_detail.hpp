#pragma once
// Private to reports/: the helpers the sweep's files share (grid, stages, MPI exchange, answers, outputs).
// One implementation each; see reports/include/moesim/reports/sweep.hpp for the sweep itself.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/simulate.hpp"

namespace moesim::reports::sweep_detail {

/// Caches of everything a point's analytic estimate needs, resolved once for the whole grid.
struct Resolved {
  std::map<std::string, model::Architecture> models;
  std::map<std::string, model::NodeProfile> nodes;
  std::map<std::string, model::NicProfile> nics;                           ///< grid NICs and intra-node links
  std::map<std::pair<std::string, std::string>, model::ModelCosts> costs;  ///< (model, precision)
};

/// Resolves every axis value of the grid once (sweep.cpp).
Resolved resolve(const Grid& g);

/// Runs `load` on an axis value; a UserError is re-raised naming the grid file and the entry.
template <class F>
auto on_axis(const Grid& g, const char* axis, const std::vector<std::string>& values, const std::string& value,
             F&& load) {
  try {
    return load(value);
  } catch (const UserError& e) {
    const auto i = std::find(values.begin(), values.end(), value) - values.begin();
    throw UserError(g.origin + ": $." + axis + "[" + std::to_string(i) + "]: " + e.what());
  }
}

/// A serving grid's point as a serve scenario: the workload's keys, then the plan's, then the point's axes
/// (sweep.cpp).
nlohmann::json serve_doc(const Grid& g, const GridPoint& p);
/// A tensor-parallel point's run (GridPoint::tensor_parallel): one user on the serving simulator, TP over
/// the node's devices, with the runtime the grid names for its hardware (so the point's resolved scenario
/// is what ran).
nlohmann::json tensor_parallel_doc(const Grid& g, const GridPoint& p);
/// A decode grid's point as a `moesim simulate` request (sweep.cpp).
scenario::SimulateRequest decode_request(const Grid& g, const GridPoint& p);

/// Runs `work` on the listed point indices that belong to this rank, on `threads` threads, then
/// gathers every rank's results into `points` (sweep_exchange.cpp).
void run_stage(const char* stage, const std::vector<std::int64_t>& todo, std::vector<PointResult>& points,
               const SweepOptions& o, const SweepComm& comm, const std::function<void(PointResult&)>& work);

/// Whether `s` begins with `p` (a point's status: "invalid: ...", "removed: ...").
inline bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

}  // namespace moesim::reports::sweep_detail
