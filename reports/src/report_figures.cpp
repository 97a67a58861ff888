#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "moesim/model/text.hpp"
#include "moesim/scenario/study.hpp"
#include "moesim/sim/trace_stats.hpp"
#include "moesim/sim/workload.hpp"
#include "report_sections.hpp"

// The report's figures, each with its tables and prose, split out of write_report with every file and
// word unchanged. Each plot is a PlotSpec drawn by Report::figure: its .csv, .gp, .png and .svg.

namespace moesim::reports::report_sections {

namespace {

std::string gp_quote(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) o += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return o + "\"";
}

double workload_rate(const Grid& g, const std::string& name) {
  for (const auto& w : g.workloads) {
    if (w.at("name") != name) continue;
    if (w.contains("workload") && w["workload"].contains("rate") && w["workload"]["rate"].is_string())
      return sim::parse_request_rate(w["workload"]["rate"].get<std::string>(), g.origin + ": workload " + name);
  }
  return NAN;
}

/// Figure 8's curves: one series per (hardware, NIC) at the grid's first model, precision, placement and
/// strategy, and the measured runs beside them.
struct NodeCurves {
  std::vector<std::pair<std::string, std::string>> series;  // (hw, nic)
  std::set<std::int64_t> ns;
  std::map<std::tuple<std::string, std::string, std::int64_t>, const PointResult*> lookup;
  std::map<std::pair<std::string, std::int64_t>, double> measured;  // (nic, nodes)
  std::set<std::string> measured_nics;
  std::set<std::pair<std::string, std::string>> fitted_series;
};

NodeCurves node_curves(const Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& pts = rep.sweep.points;
  NodeCurves nc;
  auto& [series, ns, lookup, measured, measured_nics, fitted_series] = nc;
  for (const auto& p : pts) {
    if (!on_node_curve(p, in.grid)) continue;
    if (p.status != "ok" && !p.simulated) continue;
    const auto key = std::make_pair(p.point.hw, p.point.nic);
    if (std::find(series.begin(), series.end(), key) == series.end()) series.push_back(key);
    ns.insert(p.point.nodes);
  }
  for (const auto& p : pts)
    if (on_node_curve(p, in.grid)) lookup[{p.point.hw, p.point.nic, p.point.nodes}] = &p;
  for (const auto& m : in.measured)
    if (m.tokens_per_s && m.scenario.strategy == (in.grid.strategies.empty() ? "" : in.grid.strategies.front())) {
      measured[{m.scenario.nic, m.scenario.nodes}] = *m.tokens_per_s;
      measured_nics.insert(m.scenario.nic);
      ns.insert(m.scenario.nodes);
    }
  // A series is calibrated when any of its points is: its columns are then the calibrated figure, the
  // interval's ends and the datasheet figure (the upper bound); else the simulated (datasheet) figure.
  for (const auto& [key, p] : lookup)
    if (p->calibration == "fitted") fitted_series.insert({std::get<0>(key), std::get<1>(key)});
  return nc;
}

std::string node_curves_csv(const NodeCurves& nc) {
  const auto& [series, ns, lookup, measured, measured_nics, fitted_series] = nc;
  std::ostringstream csv;
  csv << "nodes";
  std::set<std::string> series_hw;
  for (const auto& [hw, nic] : series) series_hw.insert(hw);
  for (const auto& [hw, nic] : series) {
    const std::string label = series_hw.size() > 1 ? hw + " " + nic : nic;
    csv << "," << scenario::csv_field(label + " analytic [tokens/s]");
    if (fitted_series.count({hw, nic}))
      csv << "," << scenario::csv_field(label + " calibrated [tokens/s]") << ","
          << scenario::csv_field(label + " low [tokens/s]") << "," << scenario::csv_field(label + " high [tokens/s]")
          << "," << scenario::csv_field(label + " datasheet [tokens/s]");
    else
      csv << "," << scenario::csv_field(label + " simulated [tokens/s]");
  }
  for (const auto& nic : measured_nics) csv << "," << scenario::csv_field("measured " + nic + " [tokens/s]");
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
  return csv.str();
}

std::string node_curves_gp(const NodeCurves& nc, const ReportInputs& in) {
  const auto& series = nc.series;
  const auto& measured_nics = nc.measured_nics;
  const auto& fitted_series = nc.fitted_series;
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
  return gp.str();
}

}  // namespace

void tokens_vs_nodes_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& cal = rep.cal;
  auto& doc = rep.doc;
  doc.push_back({Block::H2, "Tokens/s against node count, per NIC"});
  const NodeCurves nc = node_curves(rep);
  const auto& fitted_series = nc.fitted_series;
  const auto& nic_headers = rep.nic_headers;
  const auto& nic_rows = rep.nic_rows;
  // Without a series there is no curve to draw, measured points or not.
  if (nc.series.empty())
    doc.push_back({Block::Para,
                   "No configuration of two or more nodes meets the constraints: no curve against "
                   "node count to draw."});
  else
    rep.figure(
        {"fig8-tokens-vs-nodes", "tokens/s against node count per NIC (seed 000 Figure 8)", node_curves_csv(nc),
         node_curves_gp(nc, in)},
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
    doc.push_back(
        {Block::Para, std::string(cal ? "Calibrated tokens/s (leave-one-out interval), the datasheet figure (its "
                                        "upper bound)"
                                      : "Simulated tokens/s") +
                          " and capital cost (nodes, NICs, the switch from 3 nodes) per node count and NIC:"});
    doc.push_back({Block::TableBlock, "", {}, nic_headers, nic_rows});
  }
}

// ---- Tables 3-4: the time split, measured against simulated ----
void time_split_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& msims = rep.msims;
  const auto& cal = rep.cal;
  auto& doc = rep.doc;
  if (msims.empty()) return;
  doc.push_back({Block::H2, "Where the time goes: measured against simulated"});
  std::ostringstream csv;
  csv << "run,MoE [s/token],comm [s/token],misc [s/token]\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : msims) {
    const auto& m = *s.m;
    if (m.moe && m.comm && m.misc)
      csv << scenario::csv_field(m.name + " measured") << "," << csvnum(*m.moe) << "," << csvnum(*m.comm) << ","
          << csvnum(*m.misc) << "\n";
    csv << scenario::csv_field(m.name + " simulated") << "," << csvnum(s.split.moe) << "," << csvnum(s.split.comm)
        << "," << csvnum(s.split.misc) << "\n";
    // The fit's leave-one-out prediction of this run (the fit to the other runs) and its fit to all.
    const ReportCalibration::Run* fr = nullptr;
    if (cal)
      for (const auto& x : cal->runs)
        if (x.name == m.name) fr = &x;
    std::string loo = "-", fitted = "-";
    if (fr && fr->loo_time)
      loo = num(1.0 / *fr->loo_time, 1) + " (" +
            text::printf("%+.0f%%", (fr->measured_time / *fr->loo_time - 1) * 100) + ")";
    if (fr) fitted = num(1.0 / fr->fitted_time, 1);
    rows.push_back({m.name,
                    m.tokens_per_s ? num(*m.tokens_per_s, 1)
                    : fr           ? num(1.0 / fr->measured_time, 1)
                                   : "-",
                    loo, fitted, num(s.tokens_per_s, 1),
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
  rep.figure({"split-measured-vs-simulated", "per-token time split, measured vs simulated (seed 000 Tables 3-4)",
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
  doc.push_back(
      {Block::Para,
       std::string(cal ? "Leave-one-out: each run predicted by the fit to the other runs (err: tokens/s "
                         "predicted / measured - 1, from the measured time per token); their least and "
                         "greatest error give every calibrated figure's interval. Fitted: the fit to every "
                         "run, the one the calibrated figures use. "
                       : std::string()) +
           "The datasheet runs and the time split use the datasheet profiles; `moesim calibrate fit --measured "
           "<file>` fits the efficiencies to the measured runs (calibrate/FIT.md). "
           "Traces open in ui.perfetto.dev or chrome://tracing: one track per node, device "
           "and NIC."});
  if (cal) {
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
void tokens_per_usd_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& pts = rep.sweep.points;
  const auto& cal = rep.cal;
  auto& doc = rep.doc;
  doc.push_back({Block::H2, "Tokens/s per USD"});
  std::vector<const PointResult*> ok;
  for (const auto& p : pts)
    if (p.status == "ok") ok.push_back(&p);
  std::stable_sort(ok.begin(), ok.end(), [](const PointResult* a, const PointResult* b) {
    return a->tokens_per_s_per_usd > b->tokens_per_s_per_usd;
  });
  std::ostringstream csv;
  csv << "configuration," << (cal ? "predicted" : "simulated")
      << " [tokens/s per 1000 USD],measured [tokens/s per 1000 USD]\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto* p : ok) {
    csv << scenario::csv_field(hardware_words(p->point)) << "," << csvnum(p->tokens_per_s_per_usd * 1000) << ",0\n";
    rows.push_back({describe_point(p->point), tps_cell(*p),
                    p->datasheet_tokens_per_s ? num(*p->datasheet_tokens_per_s, 1) : "-", p->instrument,
                    num(p->capital.total().base(), 0), num(p->tokens_per_s_per_usd * 1000, 3),
                    p->running.usd_per_million_tokens ? num(*p->running.usd_per_million_tokens, 2) : "-",
                    p->running.cloud_usd_per_million_tokens ? num(*p->running.cloud_usd_per_million_tokens, 2) : "-",
                    p->pareto ? "yes" : ""});
  }
  for (const auto& cp : in.cost_points) {
    const scenario::CostRow row = scenario::price_point(cp);
    csv << scenario::csv_field(cp.label) << ",0," << csvnum(row.tokens_per_second_per_usd * 1000) << "\n";
    rows.push_back({cp.label, num(cp.tokens_per_second, 1), "-", "measured", num(row.cost.total().base(), 0),
                    num(row.tokens_per_second_per_usd * 1000, 3), "-", "-", ""});
  }
  const std::string gp =
      "set title 'Tokens/s per 1,000 USD of capital'\nset style data histograms\nset style histogram rowstacked\n"
      "set style fill solid 0.85 border -1\nset boxwidth 0.7\nset ylabel 'tokens/s per 1000 USD'\n"
      "set xtics rotate by -40 left font ',8'\nset bmargin 11\nset rmargin 12\nset key inside right top\n"
      "plot 'tokens-per-usd.csv' using 2:xtic(1) title columnhead(2) lc rgb '#3a7bd5', '' using 3 title "
      "columnhead(3) lc rgb 'black'\n";
  rep.figure({"tokens-per-usd", "tokens/s per USD per configuration (seed 000 Table 5)", csv.str(), gp, 1000, 600},
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
  doc.push_back(
      {Block::TableBlock,
       "",
       {},
       {"configuration", cal ? "tokens/s (calibrated, interval)" : "tokens/s", "datasheet tokens/s (upper bound)",
        "source", "cost USD", "tok/s per kUSD", "USD/Mtoken", "cloud USD/Mtoken", "Pareto"},
       rows});
}

// ---- Pareto front ----
void pareto_section(Report& rep) {
  const auto& pts = rep.sweep.points;
  const auto& cal = rep.cal;
  auto& doc = rep.doc;
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
        << csvnum(p->pareto ? p->tokens_per_s : NAN) << "," << scenario::csv_field(hardware_words(p->point)) << "\n";
  const std::string gp =
      "set title 'Throughput against capital cost'\nset logscale x\nset xlabel 'capital cost (USD)'\n"
      "set ylabel 'tokens/s'\nset key inside left top\nset format x '%.0s%c'\n"
      "plot 'pareto.csv' using 1:2 with points pt 6 ps 1.3 lc rgb '#888888' title columnhead(2), "
      "'' using 1:3 with linespoints pt 7 ps 1.3 lw 2 lc rgb '#d62728' title columnhead(3)\n";
  rep.figure({"pareto", "Pareto front of throughput against capital cost", csv.str(), gp},
             "Every configuration meeting the constraints (grey) and the Pareto front (red): no configuration is "
             "both cheaper and faster than a point on the front.");
  std::vector<std::vector<std::string>> rows;
  for (auto i : rep.sweep.answers.pareto) {
    const auto& p = rep.at(i);
    rows.push_back({describe_point(p.point), num(p.capital.total().base(), 0), tps_cell(p),
                    p.datasheet_tokens_per_s ? num(*p.datasheet_tokens_per_s, 1) : "-",
                    num(p.tokens_per_s_per_usd * 1000, 3)});
  }
  doc.push_back({Block::TableBlock,
                 "",
                 {},
                 {"on the front", "cost USD", cal ? "tokens/s (calibrated, interval)" : "tokens/s",
                  "datasheet tokens/s", "tok/s per kUSD"},
                 rows});
}

namespace {

/// One latency figure: TTFT or ITL percentiles per configuration against the arrival rate.
void latency_figure(Report& rep, const char* metric, const std::vector<std::string>& configs,
                    std::map<std::string, std::map<double, const PointResult*>>& by, const std::set<double>& rates) {
  const bool ttft = std::string(metric) == "ttft";
  std::ostringstream csv;
  csv << "arrival rate [requests/s]";
  for (const auto& cfg : configs)
    csv << "," << scenario::csv_field(cfg + (ttft ? " TTFT p50 [s]" : " ITL p50 [s]")) << ","
        << scenario::csv_field(cfg + (ttft ? " TTFT p99 [s]" : " ITL p99 [s]"));
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
  rep.figure({name, std::string(ttft ? "TTFT" : "ITL") + " percentiles against arrival rate", csv.str(), gp.str()},
             std::string(ttft ? "Time to first token" : "Inter-token latency") +
                 ", median (solid) and p99 (dashed), against the Poisson arrival rate.");
}

/// The cheapest configuration per arrival rate within the serving grid's constraints, as a table.
void cheapest_per_rate_table(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& serving = rep.serving;
  auto& doc = rep.doc;
  std::vector<std::vector<std::string>> rows;
  const auto per_rate = cheapest_per_workload(*serving);
  for (const auto& [name, best] : per_rate) {
    if (best < 0) {
      rows.push_back({name, "none meets the constraints", "-", "-", "-", "-"});
      continue;
    }
    const auto& p = serving->points[static_cast<std::size_t>(best)];
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

}  // namespace

// ---- latency against arrival rate ----
void latency_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& serving = rep.serving;
  auto& doc = rep.doc;
  if (!serving) return;
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
  for (const char* metric : {"ttft", "itl"}) latency_figure(rep, metric, configs, by, rates);
  cheapest_per_rate_table(rep);
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
void cache_hit_rate_section(Report& rep) {
  const ReportInputs& in = rep.in;
  auto& doc = rep.doc;
  check_cancel(rep.o, "measuring cache hit rates");
  const model::Architecture arch = model::load_model(in.grid.models.front());
  if (arch.is_moe()) {
    doc.push_back({Block::H2, "Expert-cache hit rate against cache size"});
    std::vector<std::int64_t> sizes;
    for (std::int64_t s = arch.top_k; s <= arch.routed_experts; s += std::max<std::int64_t>(1, arch.top_k / 2))
      sizes.push_back(s);
    if (sizes.back() != arch.routed_experts) sizes.push_back(arch.routed_experts);
    struct Kind {
      std::string label;
      scenario::GenerateRequest g;
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
    for (const auto& k : kinds) csv << "," << scenario::csv_field(k.label + " [hit fraction]");
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
    rep.figure({"cache-hit-rate", "expert-cache hit rate against cache size", csv.str(), gp},
               "Hit rate of a per-layer LRU cache of experts against its size, for routing traces from moesim's "
               "generator: what an SSD-streaming or a wired-memory budget keeps resident.");
  }
}

}  // namespace moesim::reports::report_sections
