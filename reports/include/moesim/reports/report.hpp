#pragma once
// `moesim report` as a library: a directory that answers the purchase question in words at the top,
// then shows why, with plots and tables:
//   report.md and report.html (self-contained: plots embedded as PNG), for every plot its .png, .svg,
//   .csv (data) and .gp (gnuplot script), sweep.csv / sweep.json (every point, every metric with its
//   unit, the resolved scenario), serving.csv, and traces/ (Chrome/Perfetto traces, one track per node,
//   device and NIC, linked from the report).
// The answers at the top are calibrated when measured runs are given (ReportInputs::calibrate): the node
// profile and the measured NIC are fitted to the runs (calibrate::fit_runs, calibrate/FIT.md); every
// decode-simulated point on that node is re-simulated with the fitted node (reports::calibrate_points), and
// with the fitted NIC only when it is on the measured NIC (other NICs keep their profiles). Each calibrated
// figure carries the interval of the fit's leave-one-out errors (model::prediction_interval) and its
// datasheet figure as an upper bound; points on hardware without measured runs are labelled uncalibrated.
// A fit that fails is stated in one line and the figures fall back to datasheet, labelled.
// Plots: tokens/s against node count per NIC, calibrated with error bars and the datasheet dashed, with the
// measured points (seed 000 Figure 8); the
// per-token time split, measured against simulated (Tables 3-4); tokens/s per USD per configuration with
// the measured throughputs (Table 5); the Pareto front of throughput against capital cost; TTFT and ITL
// percentiles against arrival rate; expert-cache hit rate against cache size.
//
// The directory is built under a temporary name beside <out> and renamed onto it only when complete
// (moesim::OutputDir): an error or an interrupt leaves either the previous report or none, never a
// half-written one. It carries a marker, .moesim-report, listing its files; an existing <out> is replaced
// only when it is empty or such a report holding nothing else, never a directory moesim did not write.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/scenario/study.hpp"

namespace moesim::reports {

/// A measured run to put beside its simulation (a measured-runs file's entry, see calibrate/fit.hpp).
struct MeasuredPoint {
  std::string name, source;
  scenario::SimulateRequest scenario;
  std::optional<double> tokens_per_s;
  std::optional<double> moe, comm, misc;  ///< seconds per token
};

/// The measured runs' fit as the report uses it: calibrate::report_calibration makes one with
/// calibrate::fit_runs (this library cannot call the fitter, which is built on it).
struct ReportCalibration {
  std::string origin;        ///< the measured-runs file
  ProfileOverride profiles;  ///< the fitted node (its hw id), the fitted NIC (its id) and the interval
  struct Parameter {
    std::string name, unit;  ///< unit: "ratio", "s" or "B/s"
    double start = 0, value = 0;
    bool determined = true;  ///< false: the runs do not constrain it; kept at its start value
    bool nic = false;        ///< a NIC parameter (else the node's)
  };
  std::vector<Parameter> parameters;
  struct Run {
    std::string name;
    double measured_time = 0;        ///< s per token, as measured
    double fitted_time = 0;          ///< s per token, the fit to every run
    std::optional<double> loo_time;  ///< s per token, the fit to the other runs
  };
  std::vector<Run> runs;
  /// The leave-one-out relative errors of tokens/s, predicted / measured - 1 = measured time / LOO time - 1:
  /// their least and greatest give the interval (model::prediction_interval).
  double error_low = 0, error_high = 0;
  double rms_relative = 0;  ///< of the fit to every run, over its residuals
  bool converged = false;
};

struct ReportInputs {
  Grid grid;                    ///< the decode grid: the purchase question
  std::optional<Grid> serving;  ///< latency against arrival rate (a serving grid)
  std::vector<MeasuredPoint> measured;
  std::string measured_origin;
  /// Fits the profiles to the measured runs (progress lines to the callback, which throws UserError when
  /// interrupted). Empty: the figures stay datasheet. A UserError from it (runs the fitter refuses) is
  /// reported in one line and the report falls back to the datasheet figures, labelled so.
  std::function<ReportCalibration(const std::function<void(const std::string&)>& progress)> calibrate;
  std::vector<scenario::CostPoint> cost_points;  ///< measured throughputs to price beside the grid (Table 5)
  std::string cost_points_origin;
};

/// The built-in study: examples/grid-dbrx-purchase.json, examples/grid-dbrx-serving.json, Table 5's
/// measured throughputs from examples/dbrx-mac-studio.json. (The measured runs come from the caller.)
ReportInputs default_report_inputs();

struct ReportOptions {
  std::filesystem::path out = "moesim-report";
  SweepOptions sweep;  ///< threads, progress, cancellation (shared by every stage)
  SweepComm comm;
  std::function<void(const std::string&)> stage;  ///< "simulating the measured runs", ...
};

struct ReportSummary {
  std::filesystem::path dir;
  std::vector<std::string> headline;  ///< the answers in words, as at the top of report.md
  std::vector<std::string> files;     ///< relative paths written
};

/// Builds the report. UserError for an unwritable output directory, for no configuration meeting the
/// grid's constraints, for a missing gnuplot, and when interrupted (nothing is left behind then).
/// Under MPI every rank shares the sweeps; only rank 0 writes, and returns the summary.
ReportSummary write_report(const ReportInputs& in, const ReportOptions& o);

}  // namespace moesim::reports
