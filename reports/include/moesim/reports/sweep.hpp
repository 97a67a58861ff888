#pragma once
// `moesim sweep` as a library: the purchase question over a grid of configurations.
//
// A grid file names the axes: models × hw × nodes × nics × precisions × placements × strategies (the
// decode simulator's, seed 000) or × plans × workloads (the serving simulator's, sim/serving.hpp), the
// constraints (a budget in USD, an SLO on tokens/s, TTFT, ITL; fitting in memory is always required) and
// the cost assumptions (energy price, amortisation, utilisation; model/cost.hpp). Its "axes" add any other
// key of the instrument's parameter table as an axis of its own, by its dotted name: {"scheduler.max_num_seqs":
// [64, 256]} on a serving grid (serve_params), {"contention": [true, false]} on a decode grid (simulate_params).
//
// The run has two stages. The analytic model (model/analytic.hpp, Equation 1 of seed 000 generalised)
// screens every point: memory fit, capital cost, the single-user decode bound; a serving grid's points are
// fitted by the serving simulator's own memory plan of their scenario (scenario::serve_memory_plan). The
// points that pass the screen are ranked by analytic tokens/s per USD and the best `simulate.points` of
// them are simulated (the decode DES, or the serving engine when the grid has workloads). The answers
// (cheapest meeting the SLO, best tokens/s per USD within the budget, the Pareto front of throughput
// against capital cost) are taken over the simulated points, or over the analytic ones when nothing is
// simulated.
//
// Work is split by point index: across threads, and across MPI ranks through `SweepComm` (apps/ wires
// it to Boost.MPI). Results are stored by index and every figure is a pure function of the grid, so the
// output bytes do not depend on the thread or rank count.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "moesim/model/cost.hpp"
#include "moesim/model/json_reader.hpp"

namespace moesim::reports {

struct SweepConstraints {
  std::optional<double> budget_usd;
  std::optional<double> min_tokens_per_s;  ///< decode grids: single-user tokens/s; serving: per user (1/TPOT)
  std::optional<double> max_ttft_s;        ///< serving grids: p99 TTFT
  std::optional<double> max_itl_s;         ///< serving grids: p99 ITL
};

struct Grid {
  std::string description;
  std::string origin;  ///< file name, or "built-in ..."
  std::filesystem::path base_dir = ".";
  std::vector<std::string> models, hw, nics, precisions, placements, strategies;
  std::vector<std::int64_t> nodes;
  /// The software on each node profile: hw id -> a runtime fitted on it (model::find_runtime: a name such as
  /// "llama.cpp", an id or a path). Points on that hardware run with it (model::apply_runtime); others not.
  std::map<std::string, std::string> runtimes;
  /// Serving grids: named partial serve scenarios ({"name", "plan": {...}, ...} and {"name", "workload":
  /// {...}, ...}); a point's scenario is the workload's keys, then the plan's, then the point's axes.
  std::vector<nlohmann::json> plans, workloads;
  /// The grid's "axes": a dotted key of the instrument's parameter table and its values, in key order. A
  /// point sets one value of each on top of its scenario (GridPoint::settings).
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes;
  SweepConstraints constraints;
  model::CostAssumptions costs;
  std::string costs_source;           ///< where the energy price and the other assumptions come from
  std::int64_t simulate_points = 20;  ///< -1: every screened point
  std::int64_t simulate_tokens = 500;
  std::uint64_t seed = 1;
  [[nodiscard]] bool serving() const { return !workloads.empty(); }
};

/// Reads a grid file, or the built-in examples/grid-dbrx-purchase.json when `path` is empty (UserError with the JSON
/// path for unknown keys, empty axes, unit-less numbers, ...).
Grid load_grid(const std::string& path);
Grid grid_from_json(const nlohmann::json& doc, const std::string& origin, const std::filesystem::path& base_dir);
nlohmann::json grid_to_json(const Grid& g);

struct GridPoint {
  std::int64_t index = 0;
  std::string model, hw, nic;  ///< nic empty for one node
  std::int64_t nodes = 1;
  std::string precision, placement, strategy, plan, workload;  ///< strategy: decode grids; plan/workload: serving
  /// One value of each of the grid's "axes" (Grid::axes), as (dotted key, value), in the axes' order.
  std::vector<std::pair<std::string, nlohmann::json>> settings;
  /// Decode grids, set by run_sweep: the devices of a one-node point on a node of several GPUs, which run
  /// the model tensor-parallel (vLLM, TensorRT-LLM; the serving simulator with one user) instead of the
  /// grid's expert-parallel `strategy`; 0 for every other point.
  std::int64_t tensor_parallel = 0;
};
/// The grid's points in index order (one node collapses the NIC axis). UserError for an empty grid.
std::vector<GridPoint> expand_grid(const Grid& g);

struct PointResult {
  GridPoint point;
  std::string status = "ok";  ///< "ok", or why the point was removed / not simulated / refused
  /// Where the headline figures come from: "decode-sim" (expert-parallel clusters), "serving-sim (TP n)" (one
  /// server of n GPUs in a decode grid: GridPoint::tensor_parallel), "serving-sim" (serving grids) or
  /// "analytic" (not simulated).
  std::string instrument;
  // analytic screen
  bool fits = false;
  double memory_needed = 0, memory_available = 0;  ///< decode grids: bytes per node (the analytic fit)
  /// Serving grids: the serving plan's fullest device, its weights + activations and its usable bytes
  /// (device memory × gpu_memory_utilization), and why it does not fit (empty when it does).
  double device_memory_needed = 0, device_memory_usable = 0;
  std::string why_not_fit;
  double analytic_tokens_per_s = 0;
  model::CapitalCost capital;
  // simulation
  bool simulated = false;
  double sim_tokens_per_s = 0;                                  ///< decode: single user
  double split_moe = 0, split_comm = 0, split_misc = 0;         ///< decode: seconds per token
  double output_tokens_per_s = 0, per_user_tokens_per_s = 0;    ///< serving
  double ttft_p50 = 0, ttft_p99 = 0, itl_p50 = 0, itl_p99 = 0;  ///< serving, seconds
  double goodput = 0;                                           ///< serving, requests/s
  // derived from the headline throughput
  double tokens_per_s = 0;  ///< the headline: simulated if simulated, else analytic
  double tokens_per_s_per_usd = 0;
  model::RunningCost running;
  bool pareto = false;
  // calibration (set by calibrate_points, the report's fit to measured runs; unset in a plain sweep)
  /// "fitted" (re-simulated with the fitted profiles), or why the point keeps its datasheet figure
  /// ("uncalibrated: ..."); empty when the sweep was not calibrated.
  std::string calibration;
  std::optional<double> datasheet_tokens_per_s;  ///< the headline with the datasheet profiles (an upper bound)
  std::optional<double> tokens_per_s_low, tokens_per_s_high;  ///< the interval of a fitted headline
};

/// The answers to the purchase question (indices into the results; -1 when none).
struct SweepAnswers {
  std::int64_t cheapest_meeting_slo = -1;
  std::int64_t best_per_usd = -1;
  std::int64_t fastest = -1;
  std::vector<std::int64_t> pareto;  ///< by capital cost ascending
  std::string over;                  ///< "simulated" or "analytic" points
};

struct SweepResult {
  Grid grid;
  std::vector<PointResult> points;
  SweepAnswers answers;
  std::int64_t screened_in = 0;  ///< points that passed the analytic screen
  std::int64_t simulated = 0;
};

/// How the work is shared: this process is rank `rank` of `size`; `allgather` returns every rank's
/// blob in rank order (identity for one process).
struct SweepComm {
  int rank = 0;
  int size = 1;
  std::function<std::vector<std::string>(const std::string&)> allgather;
};

struct SweepOptions {
  unsigned threads = 0;                  ///< 0: all cores
  std::optional<std::int64_t> simulate;  ///< overrides the grid's simulate.points
  std::filesystem::path traces_dir;      ///< when set: a Chrome trace per simulated point (point-<index>.json)
  std::function<void(const char* stage, std::size_t done, std::size_t total)> progress;
  std::function<bool()> cancelled;  ///< polled between points; true stops the run (UserError)
};

/// Runs the sweep. Every rank returns the whole result. UserError when no point meets the constraints
/// (naming how many each constraint removed), or when `cancelled` says so.
SweepResult run_sweep(const Grid& g, const SweepOptions& o, const SweepComm& comm = {});

/// Profiles that replace the named ones in a decode grid's simulated points: a node profile fitted to
/// measured runs (its points are all those on `hw`) and, optionally, the NIC profile fitted with it (it
/// replaces `nic` only; points on other NICs keep their profiles).
struct ProfileOverride {
  std::string hw;
  model::NodeProfile node;
  std::string nic;
  std::optional<model::NicProfile> nic_profile;
  /// The interval of a figure simulated with these profiles (model::prediction_interval).
  std::function<std::pair<double, double>(double tokens_per_s)> interval;
};

/// Re-simulates the decode-simulated points on `with.hw` with the overriding profiles (threads as in
/// run_sweep; this process only, no MPI), sets every point's calibration fields (the datasheet figure
/// kept as datasheet_tokens_per_s; points on other hardware, or not decode-simulated, are labelled
/// uncalibrated), then ranks the points again (rank_points). UserError when interrupted.
void calibrate_points(SweepResult& r, const ProfileOverride& with, const SweepOptions& o);

/// run_sweep's last step: the headline figure of each point (simulated, else analytic), its cost per token,
/// the SLO on the simulated figures, and the answers. Idempotent: statuses the SLO set are recomputed.
/// UserError when no point meets the constraints.
void rank_points(SweepResult& r);

/// Serving grids: for each workload (in grid order; a workload once per value of an axis inside it, such as
/// "workload.rate"), its label (workload_label) and the cheapest point meeting the constraints (-1: none).
/// Open-loop throughput is capped by the arrival rate, so the question is asked per workload.
std::vector<std::pair<std::string, std::int64_t>> cheapest_per_workload(const SweepResult& r);
/// A serving point's workload as the answers name it: its name, then the values of the axes that change it
/// ("2/s, workload.rate 4/s").
std::string workload_label(const GridPoint& p);

/// One line per point with every metric and its unit in the column name.
void write_sweep_points_csv(const SweepResult& r, std::ostream& out);
nlohmann::json sweep_to_json(const SweepResult& r);
/// The answers in words and the best points as a table (markdown: a Markdown table).
void print_sweep_summary(const SweepResult& r, std::ostream& out, bool markdown = false, std::size_t max_rows = 20);
/// "2 × mac-studio-m2-ultra-192 over rocev2-25g, bf16, P-LR-D" for messages and reports; a tensor-parallel
/// point says "TP 8" where the others name their strategy (strategy_label).
std::string describe_point(const GridPoint& p);
/// What a decode-grid point runs: "TP n" for a tensor-parallel point, else its strategy ("" in a serving grid).
std::string strategy_label(const GridPoint& p);

}  // namespace moesim::reports
