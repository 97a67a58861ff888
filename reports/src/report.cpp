#include "moesim/reports/report.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/plot.hpp"
#include "moesim/sim/trace_stats.hpp"
#include "moesim/sim/workload.hpp"
#include "report_render.hpp"

namespace moesim::reports {

namespace fs = std::filesystem;

namespace {

using report_doc::Block;
using report_doc::render_html;
using report_doc::render_markdown;

// ---- helpers ----

std::string num(double v, int decimals) { return text::printf("%.*f", decimals, v); }
std::string csvnum(double v) { return std::isfinite(v) ? text::printf("%.6g", v) : std::string("NaN"); }
std::string usd(double v) { return units::format(v, units::Dimension::Money, 5); }
std::string gp_quote(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) o += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return o + "\"";
}

/// "2 × Mac Studio M2 Ultra over rocev2-25g": the hardware part of a point, for prose.
std::string hardware_words(const GridPoint& p) {
  std::string s = std::to_string(p.nodes) + " × " + p.hw;
  if (!p.nic.empty()) s += " over " + p.nic;
  return s;
}

/// A fitted parameter's value with its unit ("ratio": achieved / peak, as a plain number).
std::string parameter_value(double v, const std::string& unit) {
  if (unit == "s") return units::format(units::seconds(v));
  if (unit == "B/s") return units::format(units::Bandwidth::from_base(v));
  return text::printf("%.3f", v);
}

/// Removes the temporary directory unless released.
void check_cancel(const ReportOptions& o, const std::string& during) {
  if (o.sweep.cancelled && o.sweep.cancelled())
    throw UserError("interrupted while " + during + "; no report was written");
}

double workload_rate(const Grid& g, const std::string& name) {
  for (const auto& w : g.workloads) {
    if (w.at("name") != name) continue;
    if (w.contains("workload") && w["workload"].contains("rate") && w["workload"]["rate"].is_string())
      return sim::parse_request_rate(w["workload"]["rate"].get<std::string>(), g.origin + ": workload " + name);
  }
  return NAN;
}

}  // namespace

ReportInputs default_report_inputs() {
  ReportInputs in;
  in.grid = load_grid("");
  in.serving =
      grid_from_json(builtin_example("grid-dbrx-serving.json"), "built-in examples/grid-dbrx-serving.json", ".");
  const Study study = load_study("");
  in.cost_points = study.cost_comparison;
  in.cost_points_origin = study.origin;
  return in;
}

ReportSummary write_report(const ReportInputs& in, const ReportOptions& o) {
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
  const auto stage = [&](const std::string& s) {
    if (o.stage && root) o.stage(s);
  };

  // 1. The purchase question.
  stage("sweeping " + in.grid.origin);
  SweepResult sweep = run_sweep(in.grid, o.sweep, o.comm);
  check_cancel(o, "sweeping");
  std::optional<SweepResult> serving;
  if (in.serving) {
    stage("sweeping " + in.serving->origin);
    serving = run_sweep(*in.serving, o.sweep, o.comm);
    check_cancel(o, "sweeping the serving grid");
  }
  if (!root) return {};
  const fs::path dir = tmp->path();
  ReportSummary summary;

  // 1b. The calibration: the profiles fitted to the measured runs (calibrate::fit_runs through
  // in.calibrate), the grid's decode-simulated points on the measured hardware re-simulated with them
  // (calibrate_points); their datasheet figures stay beside them as upper bounds. A fit that fails leaves
  // the datasheet figures, labelled so in the report.
  std::optional<ReportCalibration> cal;
  std::string cal_failure;  ///< why the figures stay datasheet although measured runs were given
  if (in.calibrate && !in.grid.serving()) {
    stage("fitting the profiles to the measured runs of " + in.measured_origin + " (leave-one-out refits too)");
    try {
      cal = in.calibrate([&](const std::string& line) {
        check_cancel(o, "fitting the profiles");
        stage("fit: " + line);
      });
      if (std::none_of(sweep.points.begin(), sweep.points.end(),
                       [&](const PointResult& p) { return p.point.hw == cal->profiles.hw; })) {
        cal_failure = "the measured runs of " + in.measured_origin + " are on " + cal->profiles.hw +
                      ", which is not in the grid";
        cal.reset();
      } else {
        stage("re-simulating the points on " + cal->profiles.hw + " with the fitted profiles");
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

  // 2. The measured runs, simulated beside their measurements (with a Chrome trace each).
  struct MeasuredSim {
    const MeasuredPoint* m;
    TimeSplit split;
    double tokens_per_s = 0;
    std::string trace;
  };
  std::vector<MeasuredSim> msims;
  if (!in.measured.empty()) stage("simulating the measured runs of " + in.measured_origin);
  for (const auto& m : in.measured) {
    check_cancel(o, "simulating the measured runs");
    SimulateOutputs outs;
    outs.chrome_tokens = 4;
    const std::string trace = "traces/" + m.name + ".json";
    outs.chrome_trace = (dir / trace).string();
    const SimulateResult r = run_simulate(m.scenario, outs);
    msims.push_back({&m, mean_split(r.run), r.run.tokens_per_second, trace});
  }
  // A trace of the best configuration too.
  const auto& pts = sweep.points;
  const auto at = [&](std::int64_t i) -> const PointResult& { return pts[static_cast<std::size_t>(i)]; };
  const PointResult& best = at(sweep.answers.best_per_usd);
  const PointResult& cheapest = at(sweep.answers.cheapest_meeting_slo);
  std::string best_trace;
  if (!in.grid.serving() && best.simulated && best.point.tensor_parallel == 0) {  // a decode-sim run
    SimulateRequest q;
    q.model = best.point.model;
    q.hw = best.point.hw;
    if (!best.point.nic.empty()) q.nic = best.point.nic;
    q.nodes = best.point.nodes;
    q.placement = best.point.placement;
    q.precision = best.point.precision;
    q.strategy = best.point.strategy;
    q.generate.tokens = in.grid.simulate_tokens;
    q.generate.seed = in.grid.seed;
    SimulateOutputs outs;
    outs.chrome_tokens = 4;
    best_trace = "traces/best-per-usd.json";
    outs.chrome_trace = (dir / best_trace).string();
    (void)run_simulate(q, outs);
  }

  std::vector<Block> doc;
  const std::string title = "moesim report: " + in.grid.origin;
  doc.push_back({Block::H1, "What to buy: " + [&] {
                   std::set<std::string> models(in.grid.models.begin(), in.grid.models.end());
                   return text::join(std::vector<std::string>(models.begin(), models.end()));
                 }()});
  if (!in.grid.description.empty()) doc.push_back({Block::Para, in.grid.description});

  // ---- the answers in words ----
  const auto& c = in.grid.constraints;
  // "5.8 tokens/s (4.5–6.6; datasheet upper bound 9.7)" for a calibrated point; an uncalibrated one says
  // why, and a report without a calibration says its figures are the datasheet's.
  const auto tps_words = [&](const PointResult& p) {
    std::string s = num(p.tokens_per_s, 1) + " tokens/s";
    if (p.calibration == "fitted" && p.tokens_per_s_low && p.tokens_per_s_high)
      s += " (" + num(*p.tokens_per_s_low, 1) + "–" + num(*p.tokens_per_s_high, 1) + "; datasheet upper bound " +
           num(p.datasheet_tokens_per_s.value_or(NAN), 1) + ")";
    else if (!p.calibration.empty())
      s += " (" + p.calibration + ": datasheet profiles)";
    else if (!in.measured.empty())
      s += " (datasheet, uncalibrated)";
    return s;
  };
  // A table cell: "5.8 (4.5–6.6)" for a calibrated point, the figure alone otherwise.
  const auto tps_cell = [&](const PointResult& p) {
    if (p.calibration == "fitted" && p.tokens_per_s_low && p.tokens_per_s_high)
      return num(p.tokens_per_s, 1) + " (" + num(*p.tokens_per_s_low, 1) + "–" + num(*p.tokens_per_s_high, 1) + ")";
    return num(p.tokens_per_s, 1) + (p.calibration.rfind("uncalibrated", 0) == 0 ? " (uncalibrated)" : "");
  };
  std::vector<std::string> answers;
  const auto per_kusd = [](const PointResult& p) { return num(p.tokens_per_s_per_usd * 1000, 3); };
  // Calibration failed: every answer is the datasheet projection, and says so first.
  if (!cal_failure.empty())
    answers.push_back("**Not calibrated:** fitting the profiles to the measured runs failed (" + cal_failure +
                      "); every figure below is the datasheet projection, uncalibrated (an upper bound where the "
                      "measured runs are slower).");
  answers.push_back("**Fastest for the money:** " + hardware_words(best.point) + " (" + best.point.model + " " +
                    best.point.precision +
                    (strategy_label(best.point).empty() ? "" : ", " + strategy_label(best.point)) +
                    "): " + tps_words(best) + " for " + usd(best.capital.total().base()) + ", " +
                    per_kusd(best) + " tokens/s per 1,000 USD (" + best.instrument + ")" +
                    (best.running.usd_per_million_tokens
                         ? ", " + num(*best.running.usd_per_million_tokens, 2) + " USD per million tokens"
                         : std::string()) +
                    ".");
  answers.push_back(std::string("**Cheapest") +
                    (c.min_tokens_per_s ? " meeting " + text::printf("%g", *c.min_tokens_per_s) + " tokens/s" : "") +
                    ":** " + hardware_words(cheapest.point) + ": " + tps_words(cheapest) + " for " +
                    usd(cheapest.capital.total().base()) + ".");
  // Where a faster NIC beats more nodes: per hardware, the cheapest NIC is the base; another NIC at n
  // nodes "beats more nodes" when it is faster than the base NIC at every node count of the grid.
  std::vector<std::string> nic_words;
  std::vector<std::vector<std::string>> nic_rows;
  std::vector<std::string> nic_headers = {"nodes"};
  {
    std::map<std::string, std::map<std::string, std::map<std::int64_t, const PointResult*>>> by;  // hw, nic, nodes
    for (const auto& p : pts)
      if (p.simulated && p.point.nodes > 1 && p.point.model == in.grid.models.front() &&
          p.point.precision == in.grid.precisions.front() && p.point.placement == in.grid.placements.front() &&
          (in.grid.strategies.empty() || p.point.strategy == in.grid.strategies.front()))
        by[p.point.hw][p.point.nic][p.point.nodes] = &p;
    for (const auto& [hw, nics] : by) {
      if (nics.size() < 2) continue;
      std::string base;
      double base_price = INFINITY;
      for (const auto& [nic, m] : nics) {
        const auto* any = m.begin()->second;
        const double price = any->capital.nics.base() / static_cast<double>(any->point.nodes);
        if (price < base_price) {
          base_price = price;
          base = nic;
        }
      }
      double base_best = 0;
      std::int64_t base_best_n = 0;
      for (const auto& [n, p] : nics.at(base))
        if (p->tokens_per_s > base_best) {
          base_best = p->tokens_per_s;
          base_best_n = n;
        }
      const PointResult* base_best_p = nics.at(base).at(base_best_n);
      for (const auto& [nic, m] : nics) {
        if (nic == base) continue;
        for (const auto& [n, p] : m) {
          if (p->tokens_per_s > base_best) {
            nic_words.push_back("**" + nic + " beats more nodes:** " + std::to_string(n) + " × " + hw + " over " + nic +
                                " (" + tps_words(*p) + ", " + usd(p->capital.total().base()) +
                                ") is faster than " + hw + " over " + base +
                                " at any node count of the grid (at best " + tps_words(*base_best_p) + ", with " +
                                std::to_string(base_best_n) + " nodes for " + usd(base_best_p->capital.total().base()) +
                                "): upgrade the NICs before adding nodes.");
            break;
          }
        }
      }
      if (nic_headers.size() == 1) {
        for (const auto& [nic, m] : nics) {
          nic_headers.push_back(hw + " " + nic + " tokens/s" + (cal ? " (calibrated, interval)" : ""));
          if (cal) nic_headers.push_back(nic + " datasheet tokens/s (upper bound)");
          nic_headers.push_back(nic + " cost USD");
        }
        std::set<std::int64_t> ns;
        for (const auto& [nic, m] : nics)
          for (const auto& [n, p] : m) ns.insert(n);
        for (auto n : ns) {
          std::vector<std::string> row = {std::to_string(n)};
          for (const auto& [nic, m] : nics) {
            const auto it = m.find(n);
            row.push_back(it == m.end() ? "-" : tps_cell(*it->second));
            if (cal)
              row.push_back(it == m.end() || !it->second->datasheet_tokens_per_s
                                ? "-"
                                : num(*it->second->datasheet_tokens_per_s, 1));
            row.push_back(it == m.end() ? "-" : num(it->second->capital.total().base(), 0));
          }
          nic_rows.push_back(std::move(row));
        }
      }
    }
  }
  for (const auto& w : nic_words) answers.push_back(w);
  // How far the datasheet simulation is from the measured runs, and what the calibration did, so that no
  // answer above reads as a measurement.
  {
    double lo = INFINITY, hi = -INFINITY;
    std::string lo_name, hi_name;
    std::size_t n = 0;
    for (const auto& ms : msims) {
      if (!ms.m->tokens_per_s) continue;
      const double ratio = ms.tokens_per_s / *ms.m->tokens_per_s - 1;
      ++n;
      if (ratio < lo) lo = ratio, lo_name = ms.m->name;
      if (ratio > hi) hi = ratio, hi_name = ms.m->name;
    }
    const std::string datasheet_error =
        n == 0 ? std::string()
               : "off by " + text::printf("%+.0f%%", lo * 100) + " (" + lo_name + ") to " +
                     text::printf("%+.0f%%", hi * 100) + " (" + hi_name + ") against the " + std::to_string(n) +
                     " measured runs of " + in.measured_origin;
    if (cal) {
      std::vector<std::string> node_params, nic_params;
      for (const auto& q : cal->parameters) {
        if (!q.determined) continue;
        (q.nic ? nic_params : node_params).push_back(q.name + " " + parameter_value(q.value, q.unit));
      }
      std::set<std::string> uncalibrated_hw;
      for (const auto& p : pts)
        if (p.calibration.rfind("uncalibrated: no measured runs", 0) == 0) uncalibrated_hw.insert(p.point.hw);
      std::string words =
          "**Calibrated to measurements:** the " + cal->profiles.hw + " figures above are the simulator with "
          "profiles fitted to the " + std::to_string(cal->runs.size()) + " measured runs of " + cal->origin +
          " (`moesim calibrate fit`, Levenberg-Marquardt; rms relative error " +
          text::printf("%.3f", cal->rms_relative) + "). The node's fitted " +
          (node_params.empty() ? std::string("(none)") : text::join(node_params)) +
          " describe the machine with the software stack the runs were measured on and apply to every " +
          cal->profiles.hw + " point";
      if (!nic_params.empty())
        words += "; the NIC's fitted " + text::join(nic_params) + " belongs to the NIC stack the runs were measured " +
                 "on, " + cal->profiles.nic + ", and applies only to points on it: other NICs keep their datasheet "
                 "profiles";
      words += ". Ranges are leave-one-out: each measured run predicted by a fit to the others is off by " +
               text::printf("%+.0f%%", cal->error_low * 100) + " to " + text::printf("%+.0f%%", cal->error_high * 100) +
               " in tokens/s, so a calibrated figure v reads [v / " + text::printf("%.2f", 1 + cal->error_high) +
               ", v / " + text::printf("%.2f", 1 + cal->error_low) + "] (table below).";
      if (n > 0)
        words += " With the datasheet profiles alone the simulator is " + datasheet_error +
                 ": those figures stay beside the calibrated ones as upper bounds.";
      if (!uncalibrated_hw.empty())
        words += " " + text::join(std::vector<std::string>(uncalibrated_hw.begin(), uncalibrated_hw.end())) +
                 (uncalibrated_hw.size() == 1 ? " has" : " have") +
                 " no measured runs: its figures are uncalibrated datasheet projections.";
      answers.push_back(words);
    } else if (n > 0) {
      answers.push_back("**Against measurements:** the simulator's tokens/s with the datasheet profiles is " +
                        datasheet_error +
                        " (table below). Fit the profiles to runs on your own machines (`moesim calibrate fit`) "
                        "before you buy on these figures.");
    } else {
      answers.push_back("**Uncalibrated:** no measured runs were given (--measured): every figure is a datasheet "
                        "projection. Fit the profiles to runs on your own machines (`moesim calibrate fit`) "
                        "before you buy on these figures.");
    }
  }
  // The measured comparison points (Table 5), priced the same way.
  for (const auto& cp : in.cost_points) {
    const CostRow row = price_point(cp);
    answers.push_back("Measured for comparison: " + cp.label + ", " + num(cp.tokens_per_second, 1) + " tokens/s for " +
                      usd(row.cost.total().base()) + ": " + num(row.tokens_per_second_per_usd * 1000, 3) +
                      " tokens/s per 1,000 USD (" + cp.source + ").");
  }
  // Under load: which configuration is the cheapest within the serving SLO at each arrival rate.
  if (serving) {
    const auto per_rate = cheapest_per_workload(*serving);
    std::vector<std::pair<std::string, std::vector<std::string>>> runs;  // configuration, its rates
    for (std::size_t k = 0; k < per_rate.size(); ++k) {
      const std::string rate = in.serving->workloads[k].at("name").get<std::string>();
      const std::string cfg =
          per_rate[k] < 0
              ? std::string("nothing in the grid")
              : hardware_words(serving->points[static_cast<std::size_t>(per_rate[k])].point) + " (" +
                    serving->points[static_cast<std::size_t>(per_rate[k])].point.plan + ", " +
                    usd(serving->points[static_cast<std::size_t>(per_rate[k])].capital.total().base()) + ")";
      if (runs.empty() || runs.back().first != cfg) runs.push_back({cfg, {}});
      runs.back().second.push_back(rate);
    }
    std::vector<std::string> parts;
    for (const auto& [cfg, rates] : runs) parts.push_back(cfg + " at " + text::join(rates));
    answers.push_back("**Under load** (" + in.serving->models.front() + ", the serving grid's SLO" +
                      (in.measured.empty() ? "" : "; serving simulator, datasheet profiles, uncalibrated") +
                      "): the cheapest configuration that meets it is " +
                      text::join(parts, "; ") + ".");
  }
  summary.headline = answers;
  doc.push_back({Block::Bullets, "", answers});
  doc.push_back({Block::Para, std::to_string(pts.size()) + " configurations in the grid; " +
                                  std::to_string(sweep.screened_in) +
                                  (in.grid.serving() ? " pass the screen (fit the serving plan's memory"
                                                     : " pass the analytic screen (fit in memory") +
                                  (c.budget_usd ? ", within " + usd(*c.budget_usd) : std::string()) + "); " +
                                  std::to_string(sweep.simulated) +
                                  " simulated by the discrete-event simulator. Figures marked simulated come from "
                                  "it; analytic ones from Equation 1 of seed 000 generalised. Every point: "
                                  "[sweep.csv](sweep.csv), [sweep.json](sweep.json)."});

  const auto figure = [&](const PlotSpec& spec, const std::string& caption) {
    check_cancel(o, "drawing " + spec.name);
    draw_plot(dir, spec);
    doc.push_back({Block::Figure, caption, {}, {}, {}, spec.name});
    for (const char* ext : {".png", ".svg", ".csv", ".gp"}) summary.files.push_back(spec.name + ext);
  };
  stage("drawing the plots");

  // ---- Figure 8: tokens/s against nodes per NIC ----
  {
    doc.push_back({Block::H2, "Tokens/s against node count, per NIC"});
    std::vector<std::pair<std::string, std::string>> series;  // (hw, nic)
    std::set<std::int64_t> ns;
    for (const auto& p : pts) {
      if (p.point.nodes < 2 || p.point.model != in.grid.models.front() ||
          p.point.precision != in.grid.precisions.front() || p.point.placement != in.grid.placements.front() ||
          (!in.grid.strategies.empty() && p.point.strategy != in.grid.strategies.front()))
        continue;
      if (p.status != "ok" && !p.simulated) continue;
      const auto key = std::make_pair(p.point.hw, p.point.nic);
      if (std::find(series.begin(), series.end(), key) == series.end()) series.push_back(key);
      ns.insert(p.point.nodes);
    }
    std::map<std::tuple<std::string, std::string, std::int64_t>, const PointResult*> lookup;
    for (const auto& p : pts)
      if (p.point.nodes > 1 && p.point.model == in.grid.models.front() &&
          p.point.precision == in.grid.precisions.front() && p.point.placement == in.grid.placements.front() &&
          (in.grid.strategies.empty() || p.point.strategy == in.grid.strategies.front()))
        lookup[{p.point.hw, p.point.nic, p.point.nodes}] = &p;
    std::map<std::pair<std::string, std::int64_t>, double> measured;  // (nic, nodes)
    std::set<std::string> measured_nics;
    for (const auto& m : in.measured)
      if (m.tokens_per_s && m.scenario.strategy == (in.grid.strategies.empty() ? "" : in.grid.strategies.front())) {
        measured[{m.scenario.nic, m.scenario.nodes}] = *m.tokens_per_s;
        measured_nics.insert(m.scenario.nic);
        ns.insert(m.scenario.nodes);
      }
    std::ostringstream csv;
    csv << "nodes";
    std::set<std::string> series_hw;
    for (const auto& [hw, nic] : series) series_hw.insert(hw);
    // A series is calibrated when any of its points is: its columns are then the calibrated figure, the
    // interval's ends and the datasheet figure (the upper bound); else the simulated (datasheet) figure.
    std::set<std::pair<std::string, std::string>> fitted_series;
    for (const auto& [key, p] : lookup)
      if (p->calibration == "fitted") fitted_series.insert({std::get<0>(key), std::get<1>(key)});
    for (const auto& [hw, nic] : series) {
      const std::string label = series_hw.size() > 1 ? hw + " " + nic : nic;
      csv << "," << csv_field(label + " analytic [tokens/s]");
      if (fitted_series.count({hw, nic}))
        csv << "," << csv_field(label + " calibrated [tokens/s]") << "," << csv_field(label + " low [tokens/s]") << ","
            << csv_field(label + " high [tokens/s]") << "," << csv_field(label + " datasheet [tokens/s]");
      else
        csv << "," << csv_field(label + " simulated [tokens/s]");
    }
    for (const auto& nic : measured_nics) csv << "," << csv_field("measured " + nic + " [tokens/s]");
    csv << "\n";
    for (auto n : ns) {
      csv << n;
      for (const auto& [hw, nic] : series) {
        const auto it = lookup.find({hw, nic, n});
        const PointResult* p = it == lookup.end() ? nullptr : it->second;
        csv << "," << csvnum(p ? p->analytic_tokens_per_s : NAN) << ","
            << csvnum(p && p->simulated ? p->tokens_per_s : NAN);
        if (fitted_series.count({hw, nic})) {
          const bool fitted = p && p->calibration == "fitted";
          csv << "," << csvnum(fitted && p->tokens_per_s_low ? *p->tokens_per_s_low : NAN) << ","
              << csvnum(fitted && p->tokens_per_s_high ? *p->tokens_per_s_high : NAN) << ","
              << csvnum(p && p->datasheet_tokens_per_s ? *p->datasheet_tokens_per_s : NAN);
        }
      }
      for (const auto& nic : measured_nics) {
        const auto it = measured.find({nic, n});
        csv << "," << csvnum(it == measured.end() ? NAN : it->second);
      }
      csv << "\n";
    }
    std::ostringstream gp;
    gp << "set title "
       << gp_quote("Decode tokens/s, one user: " + in.grid.models.front() + " " + in.grid.precisions.front() +
                   (in.grid.strategies.empty() ? "" : ", " + in.grid.strategies.front()))
       << "\nset xlabel 'nodes'\nset ylabel 'tokens/s'\nset key outside right top\nset yrange [0:*]\n"
       << "set xtics 1\nplot ";
    int col = 2, color = 1;
    std::vector<std::string> clauses;
    for (std::size_t s = 0; s < series.size(); ++s, ++color) {
      const std::string lc = " lc " + std::to_string(color) + " title columnhead(";
      const auto cn = [&](int k) { return std::to_string(col + k); };
      if (fitted_series.count(series[s])) {
        // Calibrated: the figure with its interval as error bars, the datasheet figure dashed (its upper
        // bound); the analytic bound stays in the CSV.
        clauses.push_back("'' using 1:" + cn(1) + ":" + cn(2) + ":" + cn(3) + " with yerrorlines pt 7 lw 2" + lc + cn(1) +
                          ")");
        clauses.push_back("'' using 1:" + cn(4) + " with linespoints dt 2 pt 6 lw 1.5" + lc + cn(4) + ")");
        col += 5;
      } else {
        clauses.push_back("'' using 1:" + cn(0) + " with lines dt 2 lw 1.5" + lc + cn(0) + ")");
        clauses.push_back("'' using 1:" + cn(1) + " with linespoints pt 7 lw 2" + lc + cn(1) + ")");
        col += 2;
      }
    }
    for (std::size_t m = 0; m < measured_nics.size(); ++m, ++col)
      clauses.push_back("'' using 1:" + std::to_string(col) +
                        " with points pt 5 ps 1.6 lc rgb 'black' title columnhead(" + std::to_string(col) + ")");
    if (!clauses.empty() && clauses.front().rfind("''", 0) == 0)
      clauses.front().replace(0, 2, "'fig8-tokens-vs-nodes.csv'");
    gp << text::join(clauses, ", \\\n     ") << "\n";
    if (clauses.empty() || series.empty())
      doc.push_back({Block::Para,
                     "No configuration of two or more nodes meets the constraints: no curve against "
                     "node count to draw."});
    else
      figure({"fig8-tokens-vs-nodes", "tokens/s against node count per NIC (seed 000 Figure 8)", csv.str(), gp.str()},
             std::string(fitted_series.empty()
                             ? "Decode tokens/s against node count, per NIC: the analytic bound (dashed), the "
                               "simulator (solid) and "
                             : "Decode tokens/s against node count, per NIC: the simulator calibrated to the measured "
                               "runs (solid, error bars: the leave-one-out interval), the simulator with the "
                               "datasheet profiles (dashed: the upper bound; uncalibrated series: the analytic bound "
                               "dashed and the datasheet simulator solid) and ") +
                 "the measured runs (black squares, " +
                 (in.measured_origin.empty() ? std::string("none given") : in.measured_origin) + ").");
    if (!nic_rows.empty()) {
      doc.push_back({Block::Para,
                     std::string(cal ? "Calibrated tokens/s (leave-one-out interval), the datasheet figure (its "
                                       "upper bound)"
                                     : "Simulated tokens/s") +
                         " and capital cost (nodes, NICs, the switch from 3 nodes) per node count and NIC:"});
      doc.push_back({Block::TableBlock, "", {}, nic_headers, nic_rows});
    }
  }

  // ---- Tables 3-4: the time split, measured against simulated ----
  if (!msims.empty()) {
    doc.push_back({Block::H2, "Where the time goes: measured against simulated"});
    std::ostringstream csv;
    csv << "run,MoE [s/token],comm [s/token],misc [s/token]\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : msims) {
      const auto& m = *s.m;
      if (m.moe && m.comm && m.misc)
        csv << csv_field(m.name + " measured") << "," << csvnum(*m.moe) << "," << csvnum(*m.comm) << ","
            << csvnum(*m.misc) << "\n";
      csv << csv_field(m.name + " simulated") << "," << csvnum(s.split.moe) << "," << csvnum(s.split.comm) << ","
          << csvnum(s.split.misc) << "\n";
      // The fit's leave-one-out prediction of this run (the fit to the other runs) and its fit to all.
      const ReportCalibration::Run* fr = nullptr;
      if (cal)
        for (const auto& x : cal->runs)
          if (x.name == m.name) fr = &x;
      std::string loo = "-", fitted = "-";
      if (fr && fr->loo_time)
        loo = num(1.0 / *fr->loo_time, 1) + " (" + text::printf("%+.0f%%", (fr->measured_time / *fr->loo_time - 1) * 100) +
              ")";
      if (fr) fitted = num(1.0 / fr->fitted_time, 1);
      rows.push_back({m.name, m.tokens_per_s ? num(*m.tokens_per_s, 1) : fr ? num(1.0 / fr->measured_time, 1) : "-", loo,
                      fitted,
                      num(s.tokens_per_s, 1),
                      m.moe ? num(*m.moe, 3) + " / " + num(s.split.moe, 3) : "- / " + num(s.split.moe, 3),
                      m.comm ? num(*m.comm, 3) + " / " + num(s.split.comm, 3) : "- / " + num(s.split.comm, 3),
                      m.misc ? num(*m.misc, 3) + " / " + num(s.split.misc, 3) : "- / " + num(s.split.misc, 3),
                      "[trace](" + s.trace + ")"});
    }
    const std::string gp =
        "set title 'Per-token time split (seconds per token)'\nset style data histograms\n"
        "set style histogram rowstacked\nset style fill solid 0.85 border -1\nset boxwidth 0.7\n"
        "set ylabel 's per token'\nset xtics rotate by -35 left\nset bmargin 8\nset key outside right top\n"
        "plot 'split-measured-vs-simulated.csv' using 2:xtic(1) title columnhead(2) lc rgb '#3a7bd5', "
        "'' using 3 title columnhead(3) lc rgb '#e8a33d', '' using 4 title columnhead(4) lc rgb '#7fbf7f'\n";
    figure({"split-measured-vs-simulated", "per-token time split, measured vs simulated (seed 000 Tables 3-4)",
            csv.str(), gp},
           "Seconds per token in the experts (MoE), waiting on the network (comm) and the rest (misc): each "
           "measured run (" +
               in.measured_origin + ") beside its simulation with the datasheet profiles.");
    doc.push_back({Block::TableBlock,
                   "",
                   {},
                   {"run", "measured tok/s", "leave-one-out tok/s (err)", "fitted tok/s", "datasheet tok/s",
                    "MoE s meas/datasheet", "comm s meas/datasheet", "misc s meas/datasheet", "Chrome trace"},
                   rows});
    doc.push_back({Block::Para,
                   std::string(cal ? "Leave-one-out: each run predicted by the fit to the other runs (err: tokens/s "
                                     "predicted / measured - 1, from the measured time per token); their least and "
                                     "greatest error give every calibrated figure's interval. Fitted: the fit to every "
                                     "run, the one the calibrated figures use. "
                                   : std::string()) +
                   "The datasheet runs and the time split use the datasheet profiles; `moesim calibrate fit --measured "
                   "<file>` fits the efficiencies to the measured runs (calibrate/FIT.md). "
                   "Traces open in ui.perfetto.dev or chrome://tracing: one track per node, device "
                   "and NIC."});    if (cal) {
      std::vector<std::vector<std::string>> prow;
      for (const auto& q : cal->parameters)
        prow.push_back({q.name, q.nic ? "NIC " + cal->profiles.nic : "node " + cal->profiles.hw,
                        parameter_value(q.start, q.unit),
                        q.determined ? parameter_value(q.value, q.unit) : "- (not constrained by these runs: kept)"});
      doc.push_back({Block::Para, "The fitted parameters (calibrate/FIT.md; " +
                                      std::string(cal->converged ? "converged" : "iteration limit") + "):"});
      doc.push_back({Block::TableBlock, "", {}, {"parameter", "profile", "datasheet", "fitted"}, prow});
    }
  }

  // ---- Table 5: tokens/s per USD per configuration ----
  {
    doc.push_back({Block::H2, "Tokens/s per USD"});
    std::vector<const PointResult*> ok;
    for (const auto& p : pts)
      if (p.status == "ok") ok.push_back(&p);
    std::stable_sort(ok.begin(), ok.end(), [](const PointResult* a, const PointResult* b) {
      return a->tokens_per_s_per_usd > b->tokens_per_s_per_usd;
    });
    std::ostringstream csv;
    csv << "configuration," << (cal ? "predicted" : "simulated") << " [tokens/s per 1000 USD],measured [tokens/s per 1000 USD]\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto* p : ok) {
      csv << csv_field(hardware_words(p->point)) << "," << csvnum(p->tokens_per_s_per_usd * 1000) << ",0\n";
      rows.push_back({describe_point(p->point), tps_cell(*p),
                      p->datasheet_tokens_per_s ? num(*p->datasheet_tokens_per_s, 1) : "-", p->instrument,
                      num(p->capital.total().base(), 0), num(p->tokens_per_s_per_usd * 1000, 3),
                      p->running.usd_per_million_tokens ? num(*p->running.usd_per_million_tokens, 2) : "-",
                      p->running.cloud_usd_per_million_tokens ? num(*p->running.cloud_usd_per_million_tokens, 2) : "-",
                      p->pareto ? "yes" : ""});
    }
    for (const auto& cp : in.cost_points) {
      const CostRow row = price_point(cp);
      csv << csv_field(cp.label) << ",0," << csvnum(row.tokens_per_second_per_usd * 1000) << "\n";
      rows.push_back({cp.label, num(cp.tokens_per_second, 1), "-", "measured", num(row.cost.total().base(), 0),
                      num(row.tokens_per_second_per_usd * 1000, 3), "-", "-", ""});
    }
    const std::string gp =
        "set title 'Tokens/s per 1,000 USD of capital'\nset style data histograms\nset style histogram rowstacked\n"
        "set style fill solid 0.85 border -1\nset boxwidth 0.7\nset ylabel 'tokens/s per 1000 USD'\n"
        "set xtics rotate by -40 left font ',8'\nset bmargin 11\nset rmargin 12\nset key inside right top\n"
        "plot 'tokens-per-usd.csv' using 2:xtic(1) title columnhead(2) lc rgb '#3a7bd5', '' using 3 title "
        "columnhead(3) lc rgb 'black'\n";
    figure({"tokens-per-usd", "tokens/s per USD per configuration (seed 000 Table 5)", csv.str(), gp, 1000, 600},
           "Tokens/s per 1,000 USD of capital for every configuration that meets the constraints, best first, "
           "and the measured throughputs of " +
               (in.cost_points_origin.empty() ? std::string("-") : in.cost_points_origin) + " priced the same way.");
    std::ostringstream costs;
    costs << "Capital cost = node price × nodes + NIC price × nodes (2+ nodes) + ceil(nodes / ports) switches (3+ "
             "nodes), from the profiles (`moesim hw --json` gives each price's source and date). USD per million "
             "tokens = capital amortised over "
          << text::printf("%g", in.grid.costs.years) << " years at "
          << text::printf("%g", in.grid.costs.utilisation * 100) << "% use"
          << (in.grid.costs.usd_per_kwh
                  ? text::printf(" + energy at %g USD/kWh (node power under load)", *in.grid.costs.usd_per_kwh)
                  : std::string())
          << "; cloud: the profile's hourly price, paid only while serving.";
    doc.push_back({Block::Para, costs.str()});
    doc.push_back({Block::TableBlock,
                   "",
                   {},
                   {"configuration", cal ? "tokens/s (calibrated, interval)" : "tokens/s",
                    "datasheet tokens/s (upper bound)", "source", "cost USD", "tok/s per kUSD", "USD/Mtoken",
                    "cloud USD/Mtoken", "Pareto"},
                   rows});
  }

  // ---- Pareto front ----
  {
    doc.push_back({Block::H2, "Throughput against capital cost: the Pareto front"});
    std::vector<const PointResult*> ok;
    for (const auto& p : pts)
      if (p.status == "ok") ok.push_back(&p);
    std::stable_sort(ok.begin(), ok.end(), [](const PointResult* a, const PointResult* b) {
      return a->capital.total().base() < b->capital.total().base();
    });
    std::ostringstream csv;
    csv << "capital cost [USD],all configurations [tokens/s],Pareto front [tokens/s],configuration\n";
    for (const auto* p : ok)
      csv << csvnum(p->capital.total().base()) << "," << csvnum(p->tokens_per_s) << ","
          << csvnum(p->pareto ? p->tokens_per_s : NAN) << "," << csv_field(hardware_words(p->point)) << "\n";
    const std::string gp =
        "set title 'Throughput against capital cost'\nset logscale x\nset xlabel 'capital cost (USD)'\n"
        "set ylabel 'tokens/s'\nset key inside left top\nset format x '%.0s%c'\n"
        "plot 'pareto.csv' using 1:2 with points pt 6 ps 1.3 lc rgb '#888888' title columnhead(2), "
        "'' using 1:3 with linespoints pt 7 ps 1.3 lw 2 lc rgb '#d62728' title columnhead(3)\n";
    figure({"pareto", "Pareto front of throughput against capital cost", csv.str(), gp},
           "Every configuration meeting the constraints (grey) and the Pareto front (red): no configuration is "
           "both cheaper and faster than a point on the front.");
    std::vector<std::vector<std::string>> rows;
    for (auto i : sweep.answers.pareto) {
      const auto& p = at(i);
      rows.push_back({describe_point(p.point), num(p.capital.total().base(), 0), tps_cell(p),
                      p.datasheet_tokens_per_s ? num(*p.datasheet_tokens_per_s, 1) : "-",
                      num(p.tokens_per_s_per_usd * 1000, 3)});
    }
    doc.push_back({Block::TableBlock, "", {}, {"on the front", "cost USD", cal ? "tokens/s (calibrated, interval)" : "tokens/s",
                                    "datasheet tokens/s", "tok/s per kUSD"}, rows});
  }

  // ---- latency against arrival rate ----
  if (serving) {
    doc.push_back({Block::H2, "Latency against arrival rate"});
    if (!in.serving->description.empty()) doc.push_back({Block::Para, in.serving->description});
    std::vector<std::string> configs;
    std::map<std::string, std::map<double, const PointResult*>> by;
    for (const auto& p : serving->points) {
      if (!p.simulated) continue;
      const std::string cfg = hardware_words(p.point) + " " + p.point.plan;  // no comma: a gnuplot column head
      if (std::find(configs.begin(), configs.end(), cfg) == configs.end()) configs.push_back(cfg);
      by[cfg][workload_rate(*in.serving, p.point.workload)] = &p;
    }
    std::set<double> rates;
    for (const auto& [cfg, m] : by)
      for (const auto& [r, p] : m) rates.insert(r);
    for (const char* metric : {"ttft", "itl"}) {
      const bool ttft = std::string(metric) == "ttft";
      std::ostringstream csv;
      csv << "arrival rate [requests/s]";
      for (const auto& cfg : configs)
        csv << "," << csv_field(cfg + (ttft ? " TTFT p50 [s]" : " ITL p50 [s]")) << ","
            << csv_field(cfg + (ttft ? " TTFT p99 [s]" : " ITL p99 [s]"));
      csv << "\n";
      for (double r : rates) {
        csv << csvnum(r);
        for (const auto& cfg : configs) {
          const auto it = by[cfg].find(r);
          const PointResult* p = it == by[cfg].end() ? nullptr : it->second;
          csv << "," << csvnum(p ? (ttft ? p->ttft_p50 : p->itl_p50) : NAN) << ","
              << csvnum(p ? (ttft ? p->ttft_p99 : p->itl_p99) : NAN);
        }
        csv << "\n";
      }
      std::ostringstream gp;
      const std::string name = std::string(ttft ? "ttft" : "itl") + "-vs-rate";
      gp << "set title '" << (ttft ? "Time to first token" : "Inter-token latency")
         << " against arrival rate'\nset logscale xy\nset xlabel 'arrival rate (requests/s)'\nset ylabel '"
         << (ttft ? "TTFT" : "ITL") << " (s)'\nset key outside right top\nplot ";
      std::vector<std::string> clauses;
      int col = 2;
      for (std::size_t k = 0; k < configs.size(); ++k, col += 2) {
        clauses.push_back(std::string(k == 0 ? "'" + name + ".csv'" : "''") + " using 1:" + std::to_string(col) +
                          " with linespoints pt 7 lc " + std::to_string(k + 1) + " title columnhead(" +
                          std::to_string(col) + ")");
        clauses.push_back("'' using 1:" + std::to_string(col + 1) + " with linespoints dt 2 pt 6 lc " +
                          std::to_string(k + 1) + " title columnhead(" + std::to_string(col + 1) + ")");
      }
      gp << text::join(clauses, ", \\\n     ") << "\n";
      figure({name, std::string(ttft ? "TTFT" : "ITL") + " percentiles against arrival rate", csv.str(), gp.str()},
             std::string(ttft ? "Time to first token" : "Inter-token latency") +
                 ", median (solid) and p99 (dashed), against the Poisson arrival rate.");
    }
    {
      std::vector<std::vector<std::string>> rows;
      const auto per_rate = cheapest_per_workload(*serving);
      for (std::size_t k = 0; k < per_rate.size(); ++k) {
        const std::string name = in.serving->workloads[k].at("name").get<std::string>();
        if (per_rate[k] < 0) {
          rows.push_back({name, "none meets the constraints", "-", "-", "-", "-"});
          continue;
        }
        const auto& p = serving->points[static_cast<std::size_t>(per_rate[k])];
        rows.push_back({name, hardware_words(p.point) + " " + p.point.plan, num(p.capital.total().base(), 0),
                        num(p.tokens_per_s, 1), num(p.ttft_p99, 3), num(p.itl_p99 * 1000, 1)});
      }
      const auto& sc = in.serving->constraints;
      std::vector<std::string> slo;
      if (sc.max_ttft_s) slo.push_back("p99 TTFT at most " + units::format(*sc.max_ttft_s, units::Dimension::Time));
      if (sc.max_itl_s) slo.push_back("p99 ITL at most " + units::format(*sc.max_itl_s, units::Dimension::Time));
      if (sc.min_tokens_per_s) slo.push_back(text::printf("at least %g tokens/s per user", *sc.min_tokens_per_s));
      if (sc.budget_usd) slo.push_back("within " + usd(*sc.budget_usd));
      doc.push_back({Block::Para, "**Cheapest configuration per arrival rate" +
                                      (slo.empty() ? std::string() : " meeting " + text::join(slo, ", ")) +
                                      ":** (throughput under an open-loop load is capped by the rate, so each "
                                      "rate is its own purchase question)"});
      doc.push_back({Block::TableBlock,
                     "",
                     {},
                     {"arrival rate", "cheapest configuration", "cost USD", "output tok/s", "TTFT p99 s", "ITL p99 ms"},
                     rows});
    }
    doc.push_back({Block::Para, "Serving grid " + in.serving->origin + ", every point: [serving.csv](serving.csv)."});
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : serving->points) {
      if (!p.simulated) continue;
      rows.push_back({hardware_words(p.point) + ", " + p.point.plan, p.point.workload, num(p.output_tokens_per_s, 1),
                      num(p.per_user_tokens_per_s, 1), num(p.ttft_p50, 3), num(p.ttft_p99, 3), num(p.itl_p50 * 1000, 1),
                      num(p.itl_p99 * 1000, 1), num(p.tokens_per_s_per_usd * 1000, 3)});
    }
    doc.push_back({Block::TableBlock,
                   "",
                   {},
                   {"configuration", "rate", "output tok/s", "per user tok/s", "TTFT p50 s", "TTFT p99 s", "ITL p50 ms",
                    "ITL p99 ms", "tok/s per kUSD"},
                   rows});
  }

  // ---- expert-cache hit rate against cache size ----
  {
    check_cancel(o, "measuring cache hit rates");
    const model::Architecture arch = model::load_model(in.grid.models.front());
    if (arch.is_moe()) {
      doc.push_back({Block::H2, "Expert-cache hit rate against cache size"});
      std::vector<std::int64_t> sizes;
      for (std::int64_t s = arch.top_k; s <= arch.routed_experts; s += std::max<std::int64_t>(1, arch.top_k / 2))
        sizes.push_back(s);
      if (sizes.back() != arch.routed_experts) sizes.push_back(arch.routed_experts);
      struct Kind {
        std::string label;
        GenerateRequest g;
      };
      std::vector<Kind> kinds(3);
      kinds[0].label = "uniform routing";
      kinds[1].label = "Zipf s=1.2 popularity";
      kinds[1].g.popularity = "zipf";
      kinds[1].g.zipf_s = 1.2;
      kinds[2].label = "uniform, 25% reuse";
      kinds[2].g.reuse = 0.25;
      std::vector<std::vector<double>> hits;
      for (auto& k : kinds) {
        k.g.tokens = 2000;
        k.g.seed = in.grid.seed;
        const sim::RoutingTrace t = make_trace(k.g, "", arch);
        sim::TraceStatsOptions so;
        so.cache_sizes = sizes;
        hits.push_back(sim::compute_trace_stats(t, so).overall.lru_hit);
      }
      std::ostringstream csv;
      csv << "cache size [experts per layer]";
      for (const auto& k : kinds) csv << "," << csv_field(k.label + " [hit fraction]");
      csv << "\n";
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        csv << sizes[i];
        for (const auto& h : hits) csv << "," << csvnum(h[i]);
        csv << "\n";
      }
      const std::string gp =
          "set title 'LRU expert-cache hit rate per layer, " + arch.id +
          " (2,000 generated tokens)'\nset xlabel 'cache size (experts per layer)'\nset ylabel 'hit rate'\n"
          "set yrange [0:1]\nset key inside left top\n"
          "plot 'cache-hit-rate.csv' using 1:2 with linespoints pt 7 title columnhead(2), '' using 1:3 with "
          "linespoints pt 5 title columnhead(3), '' using 1:4 with linespoints pt 9 title columnhead(4)\n";
      figure({"cache-hit-rate", "expert-cache hit rate against cache size", csv.str(), gp},
             "Hit rate of a per-layer LRU cache of experts against its size, for routing traces from moesim's "
             "generator: what an SSD-streaming or a wired-memory budget keeps resident.");
    }
  }

  // ---- data files, the documents, and the rename ----
  {
    OutputFile f((dir / "sweep.csv").string());
    write_sweep_points_csv(sweep, f.stream());
    f.commit();
    nlohmann::json sj = sweep_to_json(sweep);
    if (cal) {
      nlohmann::json params = nlohmann::json::array(), runs = nlohmann::json::array();
      for (const auto& q : cal->parameters)
        params.push_back({{"name", q.name},
                          {"unit", q.unit},
                          {"profile", q.nic ? cal->profiles.nic : cal->profiles.hw},
                          {"datasheet", q.start},
                          {"fitted", q.value},
                          {"determined", q.determined}});
      for (const auto& x : cal->runs) {
        nlohmann::json j = {{"name", x.name},
                            {"measured_time_per_token_s", x.measured_time},
                            {"fitted_time_per_token_s", x.fitted_time}};
        if (x.loo_time) {
          j["leave_one_out_time_per_token_s"] = *x.loo_time;
          j["leave_one_out_error"] = x.measured_time / *x.loo_time - 1;
        }
        runs.push_back(j);
      }
      sj["calibration"] = {{"measured", cal->origin},
                           {"hw", cal->profiles.hw},
                           {"nic", cal->profiles.nic},
                           {"parameters", params},
                           {"runs", runs},
                           {"error_low", cal->error_low},
                           {"error_high", cal->error_high},
                           {"error_unit", "relative: tokens/s predicted (leave-one-out) / measured - 1"},
                           {"interval", "[tokens/s / (1 + error_high), tokens/s / (1 + error_low)]"},
                           {"rms_relative_error", cal->rms_relative}};
    } else if (!cal_failure.empty()) {
      sj["calibration"] = {{"failed", cal_failure}};
    }
    write_file_atomically((dir / "sweep.json").string(), sj.dump(2) + "\n");
    summary.files.insert(summary.files.end(), {"sweep.csv", "sweep.json"});
    if (serving) {
      OutputFile s((dir / "serving.csv").string());
      write_sweep_points_csv(*serving, s.stream());
      s.commit();
      summary.files.push_back("serving.csv");
    }
  }
  doc.push_back({Block::Para,
                 "Made by moesim. Every figure above is recomputed from the files beside this report: "
                 "the grids (" +
                     in.grid.origin + (in.serving ? ", " + in.serving->origin : "") +
                     ") and the profiles named in them."});
  write_file_atomically((dir / "report.md").string(), render_markdown(doc));
  write_file_atomically((dir / "report.html").string(), render_html(doc, dir, title));
  summary.files.insert(summary.files.begin(), {"report.md", "report.html"});
  for (const auto& s : msims) summary.files.push_back(s.trace);
  if (!best_trace.empty()) summary.files.push_back(best_trace);
  check_cancel(o, "writing the report");

  // Replace an earlier report only now that this one is whole.
  tmp->commit();
  summary.dir = out;
  return summary;
}

}  // namespace moesim::reports
