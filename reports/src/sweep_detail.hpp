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
#include "moesim/model/json_reader.hpp"
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

/// "grid.json (point 3: 2 × dgx-h100 ...)": where a point's scenario comes from, for its messages.
std::string point_source(const Grid& g, const GridPoint& p);
/// A serving grid's point as a serve scenario: the workload's keys, then the plan's, then the point's axes
/// (sweep.cpp).
nlohmann::json serve_doc(const Grid& g, const GridPoint& p);
/// A tensor-parallel point's run (GridPoint::tensor_parallel): one user on the serving simulator, TP over
/// the node's devices, with the runtime the grid names for its hardware (so the point's resolved scenario
/// is what ran).
nlohmann::json tensor_parallel_doc(const Grid& g, const GridPoint& p);
/// A decode grid's point as a `moesim simulate` request (sweep.cpp).
scenario::SimulateRequest decode_request(const Grid& g, const GridPoint& p);

/// The grid's "axes" object, its keys checked against the instrument's parameter table (unknown keys
/// refused with the nearest, keys the grid lists itself refused) into g.axes (sweep_axes.cpp).
void read_axes(const json::Node& root, Grid& g);
/// Reads every axis value as the instrument reads its scenario (types, units, ranges, names); a workload
/// key inside `first`'s workload. UserError naming the grid file, the axis and the value.
void check_axes(const Grid& g, const GridPoint& first);
/// Sets each (dotted key, value) in `doc`, making the objects on the way; with `serve_keys_only`, only the
/// keys a serve scenario has (a decode grid's tensor-parallel point runs the serving simulator).
void apply_settings(nlohmann::json& doc, const std::vector<std::pair<std::string, nlohmann::json>>& settings,
                    bool serve_keys_only = false);
/// The settings as a nested scenario object ({"scheduler": {"max_num_seqs": 64}}).
nlohmann::json settings_object(const std::vector<std::pair<std::string, nlohmann::json>>& settings);
/// The first of a point's axes that a serve scenario does not have (a decode simulator's key), or "".
std::string decode_only_axis(const GridPoint& p);

/// Runs `work` on the listed point indices that belong to this rank, on `threads` threads, then
/// gathers every rank's results into `points` (sweep_exchange.cpp).
void run_stage(const char* stage, const std::vector<std::int64_t>& todo, std::vector<PointResult>& points,
               const SweepOptions& o, const SweepComm& comm, const std::function<void(PointResult&)>& work);

/// Whether `s` begins with `p` (a point's status: "invalid: ...", "removed: ...").
inline bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

}  // namespace moesim::reports::sweep_detail
