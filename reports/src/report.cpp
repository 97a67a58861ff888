#include "moesim/reports/report.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "report_render.hpp"
#include "report_sections.hpp"

// write_report's driver and the sections around the answers and figures: the sweeps, the calibration, the
// measured runs' simulations, the data files and the documents. report_sections.hpp says how the sections
// share their state.

namespace moesim::reports {

namespace fs = std::filesystem;

namespace report_sections {

// ---- helpers ----

std::string num(double v, int decimals) { return text::printf("%.*f", decimals, v); }
std::string csvnum(double v) { return std::isfinite(v) ? text::short_number(v) : std::string("NaN"); }
std::string usd(double v) { return units::format(v, units::Dimension::Money, 5); }

std::string hardware_words(const GridPoint& p) {
  std::string s = std::to_string(p.nodes) + " × " + p.hw;
  if (!p.nic.empty()) s += " over " + p.nic;
  return s;
}

bool on_node_curve(const PointResult& p, const Grid& grid) {
  return p.point.nodes > 1 && p.point.model == grid.models.front() && p.point.precision == grid.precisions.front() &&
         p.point.placement == grid.placements.front() &&
         (grid.strategies.empty() || p.point.strategy == grid.strategies.front());
}

std::string parameter_value(double v, const std::string& unit) {
  if (unit == "s") return units::format(units::seconds(v));
  if (unit == "B/s") return units::format(units::Bandwidth::from_base(v));
  return text::printf("%.3f", v);
}

std::string tps_cell(const PointResult& p) {
  if (p.calibration == "fitted" && p.tokens_per_s_low && p.tokens_per_s_high)
    return num(p.tokens_per_s, 1) + " (" + num(*p.tokens_per_s_low, 1) + "–" + num(*p.tokens_per_s_high, 1) + ")";
  return num(p.tokens_per_s, 1) + (p.calibration.rfind("uncalibrated", 0) == 0 ? " (uncalibrated)" : "");
}

void stage(const ReportOptions& o, const std::string& what) {
  if (o.stage) o.stage(what);
}

void check_cancel(const ReportOptions& o, const std::string& during) {
  if (o.sweep.cancelled && o.sweep.cancelled())
    throw UserError("interrupted while " + during + "; no report was written");
}

void Report::figure(const scenario::PlotSpec& spec, const std::string& caption) {
  check_cancel(o, "drawing " + spec.name);
  scenario::draw_plot(dir, spec);
  doc.push_back({Block::Figure, caption, {}, {}, {}, spec.name});
  for (const char* ext : {".png", ".svg", ".csv", ".gp"}) summary.files.push_back(spec.name + ext);
}

std::string Report::tps_words(const PointResult& p) const {
  std::string s = num(p.tokens_per_s, 1) + " tokens/s";
  if (p.calibration == "fitted" && p.tokens_per_s_low && p.tokens_per_s_high)
    s += " (" + num(*p.tokens_per_s_low, 1) + "–" + num(*p.tokens_per_s_high, 1) + "; datasheet upper bound " +
         num(p.datasheet_tokens_per_s.value_or(NAN), 1) + ")";
  else if (!p.calibration.empty())
    s += " (" + p.calibration + ": datasheet profiles)";
  else if (!in.measured.empty())
    s += " (datasheet, uncalibrated)";
  return s;
}

namespace {

// ---- the sections before the answers and after the figures ----

// 1b. The calibration: the profiles fitted to the measured runs (calibrate::fit_runs through
// in.calibrate), the grid's decode-simulated points on the measured hardware re-simulated with them
// (calibrate_points); their datasheet figures stay beside them as upper bounds. A fit that fails leaves
// the datasheet figures, labelled so in the report.
void calibrate_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const ReportOptions& o = rep.o;
  auto& cal = rep.cal;
  auto& cal_failure = rep.cal_failure;
  auto& sweep = rep.sweep;
  if (in.calibrate && !in.grid.serving()) {
    stage(o, "fitting the profiles to the measured runs of " + in.measured_origin + " (leave-one-out refits too)");
    try {
      cal = in.calibrate([&](const std::string& line) {
        check_cancel(o, "fitting the profiles");
        stage(o, "fit: " + line);
      });
      if (std::none_of(sweep.points.begin(), sweep.points.end(),
                       [&](const PointResult& p) { return p.point.hw == cal->profiles.hw; })) {
        cal_failure =
            "the measured runs of " + in.measured_origin + " are on " + cal->profiles.hw + ", which is not in the grid";
        cal.reset();
      } else {
        stage(o, "re-simulating the points on " + cal->profiles.hw + " with the fitted profiles");
        SweepResult calibrated = sweep;
        calibrate_points(calibrated, cal->profiles, o.sweep);
        sweep = std::move(calibrated);
      }
    } catch (const UserError& e) {
      check_cancel(o, "fitting the profiles");  // an interrupt is not a failed fit
      cal_failure = e.what();
      cal.reset();
    }
  } else if (in.calibrate) {
    cal_failure = "the grid is a serving grid, whose figures the decode fit does not apply to";
  }
}

// 2. The measured runs, simulated beside their measurements (with a Chrome trace each).
void measured_runs_section(Report& rep) {
  const ReportInputs& in = rep.in;
  if (!in.measured.empty()) stage(rep.o, "simulating the measured runs of " + in.measured_origin);
  for (const auto& m : in.measured) {
    check_cancel(rep.o, "simulating the measured runs");
    scenario::SimulateOutputs outs;
    outs.chrome_tokens = 4;
    const std::string trace = "traces/" + m.name + ".json";
    outs.chrome_trace = (rep.dir / trace).string();
    const scenario::SimulateResult r = scenario::run_simulate(m.scenario, outs);
    rep.msims.push_back({&m, scenario::mean_split(r.run), r.run.tokens_per_second, trace});
  }
}

// A trace of the best configuration too.
void best_trace_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const PointResult& best = rep.at(rep.sweep.answers.best_per_usd);
  if (!in.grid.serving() && best.simulated && best.point.tensor_parallel == 0) {  // a decode-sim run
    scenario::SimulateRequest q;
    q.model = best.point.model;
    q.hw = best.point.hw;
    if (!best.point.nic.empty()) q.nic = best.point.nic;
    q.nodes = best.point.nodes;
    q.placement = best.point.placement;
    q.precision = best.point.precision;
    q.strategy = best.point.strategy;
    q.generate.tokens = in.grid.simulate_tokens;
    q.generate.seed = in.grid.seed;
    scenario::SimulateOutputs outs;
    outs.chrome_tokens = 4;
    rep.best_trace = "traces/best-per-usd.json";
    outs.chrome_trace = (rep.dir / rep.best_trace).string();
    (void)scenario::run_simulate(q, outs);
  }
}

void title_section(Report& rep) {
  const ReportInputs& in = rep.in;
  rep.doc.push_back({Block::H1, "What to buy: " + [&] {
                       std::set<std::string> models(in.grid.models.begin(), in.grid.models.end());
                       return text::join(std::vector<std::string>(models.begin(), models.end()));
                     }()});
  if (!in.grid.description.empty()) rep.doc.push_back({Block::Para, in.grid.description});
}

/// sweep.json's "calibration": the fitted parameters, the runs and their leave-one-out errors.
nlohmann::json calibration_json(const ReportCalibration& cal) {
  nlohmann::json params = nlohmann::json::array(), runs = nlohmann::json::array();
  for (const auto& q : cal.parameters)
    params.push_back({{"name", q.name},
                      {"unit", q.unit},
                      {"profile", q.nic ? cal.profiles.nic : cal.profiles.hw},
                      {"datasheet", q.start},
                      {"fitted", q.value},
                      {"determined", q.determined}});
  for (const auto& x : cal.runs) {
    nlohmann::json j = {
        {"name", x.name}, {"measured_time_per_token_s", x.measured_time}, {"fitted_time_per_token_s", x.fitted_time}};
    if (x.loo_time) {
      j["leave_one_out_time_per_token_s"] = *x.loo_time;
      j["leave_one_out_error"] = x.measured_time / *x.loo_time - 1;
    }
    runs.push_back(j);
  }
  return {{"measured", cal.origin},
          {"hw", cal.profiles.hw},
          {"nic", cal.profiles.nic},
          {"parameters", params},
          {"runs", runs},
          {"error_low", cal.error_low},
          {"error_high", cal.error_high},
          {"error_unit", "relative: tokens/s predicted (leave-one-out) / measured - 1"},
          {"interval", "[tokens/s / (1 + error_high), tokens/s / (1 + error_low)]"},
          {"rms_relative_error", cal.rms_relative}};
}

// ---- data files, the documents, and the rename ----
void data_files_section(Report& rep) {
  const fs::path& dir = rep.dir;
  OutputFile f((dir / "sweep.csv").string());
  write_sweep_points_csv(rep.sweep, f.stream());
  f.commit();
  nlohmann::json sj = sweep_to_json(rep.sweep);
  if (rep.cal) {
    sj["calibration"] = calibration_json(*rep.cal);
  } else if (!rep.cal_failure.empty()) {
    sj["calibration"] = {{"failed", rep.cal_failure}};
  }
  write_file_atomically((dir / "sweep.json").string(), sj.dump(2) + "\n");
  rep.summary.files.insert(rep.summary.files.end(), {"sweep.csv", "sweep.json"});
  if (rep.serving) {
    OutputFile s((dir / "serving.csv").string());
    write_sweep_points_csv(*rep.serving, s.stream());
    s.commit();
    rep.summary.files.push_back("serving.csv");
  }
}

void documents_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const std::string title = "moesim report: " + in.grid.origin;
  rep.doc.push_back({Block::Para,
                     "Made by moesim. Every figure above is recomputed from the files beside this report: "
                     "the grids (" +
                         in.grid.origin + (in.serving ? ", " + in.serving->origin : "") +
                         ") and the profiles named in them."});
  write_file_atomically((rep.dir / "report.md").string(), report_doc::render_markdown(rep.doc));
  write_file_atomically((rep.dir / "report.html").string(), report_doc::render_html(rep.doc, rep.dir, title));
  auto& files = rep.summary.files;
  files.insert(files.begin(), {"report.md", "report.html"});
  for (const auto& s : rep.msims) files.push_back(s.trace);
  if (!rep.best_trace.empty()) files.push_back(rep.best_trace);
  check_cancel(rep.o, "writing the report");
}

}  // namespace
}  // namespace report_sections

ReportInputs default_report_inputs() {
  ReportInputs in;
  in.grid = load_grid("");
  in.serving = grid_from_json(scenario::builtin_example("grid-dbrx-serving.json"),
                              "built-in examples/grid-dbrx-serving.json", ".");
  const scenario::Study study = scenario::load_study("");
  in.cost_points = study.cost_comparison;
  in.cost_points_origin = study.origin;
  return in;
}

ReportSummary write_report(const ReportInputs& in, const ReportOptions& o) {
  using namespace report_sections;
  const bool root = o.comm.rank == 0;
  const fs::path out = o.out.empty() ? fs::path("moesim-report") : o.out;
  // Built under a temporary directory and put in place whole; an existing --out is replaced only if it is
  // an earlier moesim report holding nothing else (moesim/model/output_file.hpp, OutputDir).
  std::optional<OutputDir> tmp;
  if (root) {
    tmp.emplace(out, "--out", "report");
    std::error_code ec;
    fs::create_directory(tmp->path() / "traces", ec);
  }

  // 1. The purchase question. Under MPI every rank shares the sweeps; only rank 0 reports its stages.
  if (root) stage(o, "sweeping " + in.grid.origin);
  SweepResult sweep = run_sweep(in.grid, o.sweep, o.comm);
  check_cancel(o, "sweeping");
  std::optional<SweepResult> serving;
  if (in.serving) {
    if (root) stage(o, "sweeping " + in.serving->origin);
    serving = run_sweep(*in.serving, o.sweep, o.comm);
    check_cancel(o, "sweeping the serving grid");
  }
  if (!root) return {};
  Report rep{in, o, tmp->path(), std::move(sweep), std::move(serving)};

  calibrate_section(rep);
  measured_runs_section(rep);
  best_trace_section(rep);

  title_section(rep);
  answers_section(rep);

  stage(o, "drawing the plots");
  tokens_vs_nodes_section(rep);
  time_split_section(rep);
  tokens_per_usd_section(rep);
  pareto_section(rep);
  latency_section(rep);
  cache_hit_rate_section(rep);

  data_files_section(rep);
  documents_section(rep);

  // Replace an earlier report only now that this one is whole.
  tmp->commit();
  rep.summary.dir = out;
  return rep.summary;
}

}  // namespace moesim::reports
