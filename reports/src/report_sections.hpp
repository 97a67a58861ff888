#pragma once
// write_report's sections, one function each, and what they share. Internal to the reports module.
//
// write_report (report.cpp) runs the sweeps, then hands one Report to each section in the order the
// report reads: the calibration, the measured runs' simulations, the answers in words (report_answers.cpp),
// the figures with their tables (report_figures.cpp), the data files, and last the documents. A section
// appends its blocks to Report::doc and its files to Report::summary; the order of the calls is the order
// of the work, the progress lines and the output.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moesim/reports/report.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/plot.hpp"
#include "report_render.hpp"

namespace moesim::reports::report_sections {

using report_doc::Block;

/// A measured run simulated beside its measurement, with a Chrome trace.
struct MeasuredSim {
  const MeasuredPoint* m;
  scenario::TimeSplit split;
  double tokens_per_s = 0;
  std::string trace;  ///< relative to the report directory
};

/// The state the sections share on rank 0: the inputs, the swept points (calibrated once the calibration
/// has run), the document so far and the files written so far.
struct Report {
  Report(const ReportInputs& inputs, const ReportOptions& options, std::filesystem::path directory, SweepResult swept,
         std::optional<SweepResult> serving_swept)
      : in(inputs), o(options), dir(std::move(directory)), sweep(std::move(swept)), serving(std::move(serving_swept)) {}

  const ReportInputs& in;
  const ReportOptions& o;
  std::filesystem::path dir;  ///< the temporary directory the report is built in
  SweepResult sweep;
  std::optional<SweepResult> serving;
  std::optional<ReportCalibration> cal;
  std::string cal_failure;  ///< why the figures stay datasheet although measured runs were given
  std::vector<MeasuredSim> msims;
  std::string best_trace;  ///< the best configuration's Chrome trace, or empty
  std::vector<Block> doc;
  ReportSummary summary;
  /// Tokens/s and capital cost per node count and NIC: made with the answers, shown under Figure 8.
  std::vector<std::string> nic_headers = {"nodes"};
  std::vector<std::vector<std::string>> nic_rows;

  /// The swept point at index i of sweep.points (as SweepResult::answers holds them).
  const PointResult& at(std::int64_t i) const { return sweep.points[static_cast<std::size_t>(i)]; }

  /// Draws a plot into dir and adds it to the document with its caption, and its files to the summary.
  void figure(const scenario::PlotSpec& spec, const std::string& caption);

  /// "5.8 tokens/s (4.5–6.6; datasheet upper bound 9.7)" for a calibrated point; an uncalibrated one says
  /// why, and a report without a calibration says its figures are the datasheet's.
  std::string tps_words(const PointResult& p) const;
};

// ---- helpers shared by the sections ----

/// v with a fixed number of decimals, for prose and tables.
std::string num(double v, int decimals);
/// v for a plot's CSV: 6 significant digits, "NaN" (a missing value, as PlotSpec::csv says) when not finite.
std::string csvnum(double v);
/// An amount in USD, as units::format writes money.
std::string usd(double v);

/// "2 × Mac Studio M2 Ultra over rocev2-25g": the hardware part of a point, for prose.
std::string hardware_words(const GridPoint& p);

/// Whether a point lies on Figure 8's node-count curves (and the NIC answers' table): more than one node,
/// the grid's first model, precision and placement, and its first strategy when it names strategies.
bool on_node_curve(const PointResult& p, const Grid& grid);

/// A fitted parameter's value with its unit ("ratio": achieved / peak, as a plain number).
std::string parameter_value(double v, const std::string& unit);

/// A table cell: "5.8 (4.5–6.6)" for a calibrated point, the figure alone otherwise.
std::string tps_cell(const PointResult& p);

/// Passes a progress line to o.stage, when there is one.
void stage(const ReportOptions& o, const std::string& what);

/// UserError when the user interrupted: `during` says what was under way.
void check_cancel(const ReportOptions& o, const std::string& during);

// ---- the sections, in the order write_report calls them ----

/// The answers in words at the top (the report's headline), and the paragraph on the grid's size.
/// Fills Report::nic_headers and nic_rows on the way.
void answers_section(Report& rep);

/// Figure 8: tokens/s against node count per NIC, with the NIC table.
void tokens_vs_nodes_section(Report& rep);
/// Tables 3-4: the time split, measured against simulated, and the fitted parameters.
void time_split_section(Report& rep);
/// Table 5: tokens/s per USD per configuration.
void tokens_per_usd_section(Report& rep);
/// The Pareto front of throughput against capital cost.
void pareto_section(Report& rep);
/// Latency against arrival rate (with a serving grid).
void latency_section(Report& rep);
/// Expert-cache hit rate against cache size (an MoE model).
void cache_hit_rate_section(Report& rep);

}  // namespace moesim::reports::report_sections
