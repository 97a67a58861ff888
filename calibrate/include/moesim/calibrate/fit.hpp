#pragma once
// `moesim calibrate fit`: fitting a small, named set of efficiency parameters of a node and NIC profile to
// measured runs, by nonlinear least squares with the simulator as the model.
//
// The measured-runs format (calibrate/FIT.md documents it; examples/measured/ has seed 000's Tables 3-4):
//   {"description": "...", "source": "...",
//    "runs": [{"name": "table4-2-nodes", "source": "seed 000 Table 4",
//              "scenario": {simulate scenario keys} | "scenario_file": "path.json",
//              "measured": {"tokens_per_s": 6.1, "time_per_token": "0.166s",
//                           "split": {"moe": "0.081s", "comm": "0.038s", "misc": "0.047s"}}}]}
//
// The fit (Levenberg 1944, Marquardt 1963): residuals are relative, (predicted - measured) / measured,
// one per split component when a run gives its split (seed 000 Table 3's MoE / Comm. / Misc.), else one
// for the time per token. The Jacobian is taken by forward differences of the simulator; each damped
// Gauss-Newton step is a linear least-squares solve (LAPACK dgelsd, calibrate/lsq.hpp). Parameters the
// runs do not constrain (a zero Jacobian column: re-wire cost when nothing re-wires) are held at their
// start values and reported as such, never moved at random.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/hardware.hpp"
#include "moesim/scenario/simulate.hpp"

namespace moesim::calibrate {

/// A measured run: a scenario and what was measured on it.
struct MeasuredRun {
  std::string name;
  std::string source;
  scenario::SimulateRequest scenario;
  std::optional<double> tokens_per_s;
  std::optional<double> time_per_token;   ///< seconds
  std::optional<double> moe, comm, misc;  ///< seconds per token (the split), each optional
  std::string where;                      ///< "file: $.runs[i]" for messages

  /// The measured time per token: time_per_token, else 1 / tokens_per_s.
  [[nodiscard]] double time() const;
};

struct MeasuredRuns {
  std::string path;
  std::string description;
  std::string source;
  std::vector<MeasuredRun> runs;
};

/// Reads and checks a measured-runs file: unknown keys, a run without a measured speed, a split that
/// exceeds the time, duplicate names: UserError naming the file and the JSON path.
MeasuredRuns load_measured_runs(const std::string& path);
/// The same for a file of examples/ compiled into the binary ("measured/seed000-tables-3-4.json"); its
/// scenario_file paths resolve among the compiled-in examples.
MeasuredRuns builtin_measured_runs(const std::string& file);

/// A named parameter the fit can move, and how it maps onto the profiles.
struct FitParameter {
  std::string name;
  std::string unit;         ///< of the value: "ratio" (achieved / peak), "s" or "B/s"
  std::string description;  ///< for --help
  std::string field;        ///< the profile field it writes
  bool nic = false;         ///< written into the NIC profile (else the node profile)
  double lower = 0;         ///< bounds on the value
  double upper = 0;
  double typical = 1;  ///< the scale of the value, for the finite-difference step when the start is 0
  /// The current value in a profile pair.
  std::function<double(const model::NodeProfile&, const model::NicProfile*)> get;
  /// Sets the value in copies of the profiles (`base` is the unfitted node, for multiplicative forms).
  std::function<void(model::NodeProfile&, model::NicProfile*, double value, const model::NodeProfile& base)> set;
};

/// The registry: memory_efficiency, layer_overhead, message_latency, rewire_bandwidth, kernel_overhead.
const std::vector<FitParameter>& fit_parameters();
const FitParameter& fit_parameter(const std::string& name);
/// The four: memory_efficiency, layer_overhead, message_latency, rewire_bandwidth. kernel_overhead
/// is opt-in: per-token times cannot tell it from the other two per-layer costs.
std::vector<std::string> default_fit_parameters();

struct FitOptions {
  std::vector<std::string> parameters;  ///< names; empty: default_fit_parameters()
  std::vector<std::string> fit_runs;    ///< run names to fit; empty: all (the others are predicted)
  std::string node;                     ///< node profile id/path (empty: the runs' common "hw")
  std::string nic;                      ///< NIC profile id/path (empty: the runs' common "nic")
  std::int64_t max_iterations = 60;
  bool leave_one_out = true;
  /// Worker threads for the leave-one-out refits, each a fit of its own (0: every core). The result is the
  /// same for any count.
  unsigned threads = 0;
};

/// One run's prediction next to its measurement.
struct RunPrediction {
  std::string name;
  bool fitted = false;  ///< in the fit (else held out and predicted)
  double measured_time = 0;
  scenario::TimeSplit predicted;
  std::optional<double> moe, comm, misc;  ///< measured split
  std::optional<double> loo_time;         ///< time per token predicted by the fit without this run
};

struct FittedParameter {
  std::string name;
  std::string unit;
  double start = 0;
  double value = 0;
  bool determined = true;  ///< false: the fitted runs do not constrain it; kept at start
};

struct FitResult {
  std::vector<FittedParameter> parameters;
  std::vector<RunPrediction> runs;
  double rms_relative = 0;  ///< over the fitted observations
  std::int64_t iterations = 0;
  std::int64_t simulations = 0;
  std::size_t observations = 0;  ///< fitted residuals (split components or times)
  bool converged = false;
  model::NodeProfile node;  ///< with the fitted values
  model::NicProfile nic;
  bool has_nic = false;
  nlohmann::json node_document;  ///< the profile files to write
  nlohmann::json nic_document;
};

/// `progress` (may be empty) is called with a line now and then.
FitResult fit_runs(const MeasuredRuns& runs, const FitOptions& options,
                   const std::function<void(const std::string&)>& progress = {});

}  // namespace moesim::calibrate
