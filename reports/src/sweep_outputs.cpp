// A sweep's outputs: the points CSV, the JSON document, the summary in words and tables, and the labels
// of a point (describe_point, strategy_label).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/text.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/plot.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/scenario/table.hpp"
#include "sweep_detail.hpp"

namespace moesim::reports {

namespace {

constexpr double kGiB = 1073741824.0;

std::string fmt(double v) { return text::short_number(v); }

/// An axis value as a point's description and its CSV cell show it: a string as is, else its JSON.
std::string setting_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

/// A metric: its CSV column (unit in the name), its JSON name and unit, and its value when it has one.
struct Column {
  const char* csv;
  const char* name;
  const char* unit;
  std::function<std::optional<double>(const PointResult&)> value;
  bool calibrated = false;  ///< a column of a calibrated sweep only (calibrate_points)
  bool ranged = false;      ///< a column of a sweep with ranges (calibrated, or a fitted runtime's) only
};

/// Whether any point's figure has a range (a calibrated one's, or its runtime's).
bool any_range(const SweepResult& r) {
  return std::any_of(r.points.begin(), r.points.end(),
                     [](const PointResult& p) { return p.tokens_per_s_low && p.tokens_per_s_high; });
}

/// A point's headline with its range where it has one: "56.4 (36.1-88.0)".
std::string with_range(const PointResult& p) {
  std::string s = text::printf("%.1f", p.tokens_per_s);
  if (p.tokens_per_s_low && p.tokens_per_s_high)
    s += " (" + text::printf("%.1f", *p.tokens_per_s_low) + "-" + text::printf("%.1f", *p.tokens_per_s_high) + ")";
  return s;
}

std::optional<double> opt(bool have, double v) { return have ? std::optional<double>(v) : std::nullopt; }

const std::vector<Column>& metric_columns() {
  static const std::vector<Column> cols = {
      {"memory_needed_GiB", "memory_needed", "GiB",
       [](const PointResult& p) { return opt(p.memory_available > 0, p.memory_needed / kGiB); }},
      {"memory_per_node_GiB", "memory_per_node", "GiB",
       [](const PointResult& p) { return opt(p.memory_available > 0, p.memory_available / kGiB); }},
      {"device_memory_needed_GiB", "device_memory_needed", "GiB",
       [](const PointResult& p) { return opt(p.device_memory_usable > 0, p.device_memory_needed / kGiB); }},
      {"device_memory_usable_GiB", "device_memory_usable", "GiB",
       [](const PointResult& p) { return opt(p.device_memory_usable > 0, p.device_memory_usable / kGiB); }},
      {"analytic_tokens_per_s", "analytic_tokens_per_second", "tokens/s",
       [](const PointResult& p) { return opt(p.analytic_tokens_per_s > 0, p.analytic_tokens_per_s); }},
      {"simulated_tokens_per_s", "simulated_tokens_per_second", "tokens/s",
       [](const PointResult& p) { return opt(p.sim_tokens_per_s > 0, p.sim_tokens_per_s); }},
      {"moe_s_per_token", "moe_time_per_token", "s",
       [](const PointResult& p) { return opt(p.sim_tokens_per_s > 0, p.split_moe); }},
      {"comm_s_per_token", "comm_time_per_token", "s",
       [](const PointResult& p) { return opt(p.sim_tokens_per_s > 0, p.split_comm); }},
      {"misc_s_per_token", "misc_time_per_token", "s",
       [](const PointResult& p) { return opt(p.sim_tokens_per_s > 0, p.split_misc); }},
      {"output_tokens_per_s", "output_tokens_per_second", "tokens/s",
       [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.output_tokens_per_s); }},
      {"per_user_tokens_per_s", "per_user_tokens_per_second", "tokens/s",
       [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.per_user_tokens_per_s); }},
      {"ttft_p50_s", "ttft_p50", "s", [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.ttft_p50); }},
      {"ttft_p99_s", "ttft_p99", "s", [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.ttft_p99); }},
      {"itl_p50_s", "itl_p50", "s", [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.itl_p50); }},
      {"itl_p99_s", "itl_p99", "s", [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.itl_p99); }},
      {"goodput_requests_per_s", "goodput", "requests/s",
       [](const PointResult& p) { return opt(p.output_tokens_per_s > 0, p.goodput); }},
      {"tokens_per_s", "tokens_per_second", "tokens/s",
       [](const PointResult& p) { return opt(p.tokens_per_s > 0, p.tokens_per_s); }},
      {"tokens_per_s_low", "tokens_per_second_low", "tokens/s", [](const PointResult& p) { return p.tokens_per_s_low; },
       false, true},
      {"tokens_per_s_high", "tokens_per_second_high", "tokens/s",
       [](const PointResult& p) { return p.tokens_per_s_high; }, false, true},
      {"datasheet_tokens_per_s", "datasheet_tokens_per_second", "tokens/s",
       [](const PointResult& p) { return p.datasheet_tokens_per_s; }, true},
      {"cost_nodes_usd", "cost_nodes", "USD",
       [](const PointResult& p) { return opt(p.capital.total().base() > 0, p.capital.nodes.base()); }},
      {"cost_nics_usd", "cost_nics", "USD",
       [](const PointResult& p) { return opt(p.capital.total().base() > 0, p.capital.nics.base()); }},
      {"cost_switches_usd", "cost_switches", "USD",
       [](const PointResult& p) { return opt(p.capital.total().base() > 0, p.capital.switches.base()); }},
      {"cost_usd", "cost", "USD",
       [](const PointResult& p) { return opt(p.capital.total().base() > 0, p.capital.total().base()); }},
      {"tokens_per_s_per_usd", "tokens_per_second_per_usd", "tokens/s/USD",
       [](const PointResult& p) { return opt(p.tokens_per_s_per_usd > 0, p.tokens_per_s_per_usd); }},
      {"power_W", "power", "W", [](const PointResult& p) { return p.running.power_watts; }},
      {"usd_per_million_tokens", "cost_per_million_tokens", "USD/Mtoken",
       [](const PointResult& p) { return p.running.usd_per_million_tokens; }},
      {"energy_usd_per_million_tokens", "energy_cost_per_million_tokens", "USD/Mtoken",
       [](const PointResult& p) { return p.running.energy_usd_per_million_tokens; }},
      {"cloud_usd_per_hour", "cloud_cost_per_hour", "USD/h",
       [](const PointResult& p) { return p.running.cloud_usd_per_hour; }},
      {"cloud_usd_per_million_tokens", "cloud_cost_per_million_tokens", "USD/Mtoken",
       [](const PointResult& p) { return p.running.cloud_usd_per_million_tokens; }},
  };
  return cols;
}

}  // namespace

std::string strategy_label(const GridPoint& p) {
  return p.tensor_parallel > 0 ? "TP " + std::to_string(p.tensor_parallel) : p.strategy;
}

std::string describe_point(const GridPoint& p) {
  std::string s = std::to_string(p.nodes) + " × " + p.hw;
  if (!p.nic.empty()) s += " over " + p.nic;
  s += ", " + p.model + " " + p.precision;
  if (const std::string st = strategy_label(p); !st.empty()) s += ", " + st;
  if (!p.plan.empty()) s += ", plan " + p.plan;
  if (!p.workload.empty()) s += ", workload " + p.workload;
  for (const auto& [key, value] : p.settings) s += ", " + key + " " + setting_text(value);
  return s;
}

std::string workload_label(const GridPoint& p) {
  std::string s = p.workload;
  for (const auto& [key, value] : p.settings)
    if (key == "workload" || key.rfind("workload.", 0) == 0) s += ", " + key + " " + setting_text(value);
  return s;
}

void write_sweep_points_csv(const SweepResult& r, std::ostream& out) {
  // A calibrated sweep (the report's) adds the calibration, the interval and the datasheet figure.
  const bool calibrated =
      std::any_of(r.points.begin(), r.points.end(), [](const PointResult& p) { return !p.calibration.empty(); });
  const bool ranged = calibrated || any_range(r);
  std::vector<const Column*> cols;
  for (const auto& c : metric_columns())
    if ((calibrated || !c.calibrated) && (ranged || !c.ranged)) cols.push_back(&c);
  out << "index,model,hw,nodes,nic,precision,placement,strategy,plan,workload";
  for (const auto& axis : r.grid.axes) out << "," << scenario::csv_field(axis.first);
  out << ",status,instrument,fits,pareto";
  if (calibrated) out << ",calibration";
  for (const auto* c : cols) out << "," << c->csv;
  out << "\n";
  for (const auto& p : r.points) {
    const auto& g = p.point;
    out << g.index << "," << scenario::csv_field(g.model) << "," << scenario::csv_field(g.hw) << "," << g.nodes << ","
        << scenario::csv_field(g.nic) << "," << g.precision << "," << g.placement << ","
        << scenario::csv_field(strategy_label(g)) << "," << scenario::csv_field(g.plan) << ","
        << scenario::csv_field(g.workload);
    for (const auto& setting : g.settings) out << "," << scenario::csv_field(setting_text(setting.second));
    out << "," << scenario::csv_field(p.status) << "," << p.instrument << "," << (p.fits ? "yes" : "no") << ","
        << (p.pareto ? "yes" : "no");
    if (calibrated) out << "," << scenario::csv_field(p.calibration);
    for (const auto* c : cols) {
      const auto v = c->value(p);
      out << "," << (v ? fmt(*v) : std::string());
    }
    out << "\n";
  }
}

nlohmann::json sweep_to_json(const SweepResult& r) {
  nlohmann::json j;
  j["command"] = "sweep";
  j["grid"] = grid_to_json(r.grid);
  j["grid"]["origin"] = r.grid.origin;
  j["points_total"] = r.points.size();
  j["screened_in"] = r.screened_in;
  j["simulated"] = r.simulated;
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& p : r.points) {
    const auto& g = p.point;
    nlohmann::json m = nlohmann::json::array();
    for (const auto& c : metric_columns()) {
      const auto v = c.value(p);
      if (!v) continue;
      m.push_back({{"name", c.name}, {"value", *v}, {"unit", c.unit}});
    }
    nlohmann::json scenario;
    if (r.grid.serving()) {
      scenario = sweep_detail::serve_doc(r.grid, g);
    } else if (g.tensor_parallel > 0) {
      scenario = sweep_detail::tensor_parallel_doc(r.grid, g);
    } else {
      scenario = scenario::simulate_request_to_json(sweep_detail::decode_request(r.grid, g));
    }
    nlohmann::json e = {{"index", g.index},         {"model", g.model},   {"hw", g.hw},
                        {"nodes", g.nodes},         {"nic", g.nic},       {"precision", g.precision},
                        {"placement", g.placement}, {"status", p.status}, {"instrument", p.instrument},
                        {"pareto", p.pareto},       {"metrics", m},       {"scenario", scenario}};
    if (const std::string st = strategy_label(g); !st.empty()) e["strategy"] = st;
    if (!g.plan.empty()) e["plan"] = g.plan;
    if (!g.workload.empty()) e["workload"] = g.workload;
    if (!g.settings.empty()) {
      e["axes"] = nlohmann::json::object();
      for (const auto& [key, value] : g.settings) e["axes"][key] = value;
    }
    if (!p.calibration.empty()) e["calibration"] = p.calibration;
    std::vector<std::string> notes = p.capital.notes;
    notes.insert(notes.end(), p.running.notes.begin(), p.running.notes.end());
    if (!p.why_not_fit.empty()) notes.push_back(p.why_not_fit);
    if (!notes.empty()) e["notes"] = notes;
    pts.push_back(std::move(e));
  }
  j["points"] = std::move(pts);
  const auto idx = [](std::int64_t i) { return i < 0 ? nlohmann::json(nullptr) : nlohmann::json(i); };
  j["answers"] = {{"over", r.answers.over},
                  {"cheapest_meeting_slo", idx(r.answers.cheapest_meeting_slo)},
                  {"best_tokens_per_s_per_usd", idx(r.answers.best_per_usd)},
                  {"fastest", idx(r.answers.fastest)},
                  {"pareto", r.answers.pareto}};
  return j;
}

void print_sweep_summary(const SweepResult& r, std::ostream& out, bool markdown, std::size_t max_rows) {
  const auto& pts = r.points;
  const auto at = [&](std::int64_t i) -> const PointResult& { return pts[static_cast<std::size_t>(i)]; };
  const auto money = [](double v) { return units::format(v, units::Dimension::Money, 4); };
  const auto line = [&](const char* what, std::int64_t i) {
    if (i < 0) return;
    const auto& p = at(i);
    out << (markdown ? "- **" : "") << what << (markdown ? ":** " : ": ") << describe_point(p.point) << ": "
        << text::printf("%.1f", p.tokens_per_s) << " tokens/s"
        << (p.tokens_per_s_low && p.tokens_per_s_high ? " (range " + text::printf("%.1f", *p.tokens_per_s_low) + "-" +
                                                            text::printf("%.1f", *p.tokens_per_s_high) + ")"
                                                      : std::string())
        << " for " << money(p.capital.total().base()) << " (" << text::printf("%.3f", p.tokens_per_s_per_usd * 1000)
        << " tokens/s per 1,000 USD";
    if (p.running.usd_per_million_tokens)
      out << ", " << text::printf("%.2f", *p.running.usd_per_million_tokens) << " USD per million tokens";
    out << ")\n";
  };
  const auto& c = r.grid.constraints;
  std::vector<std::string> cons;
  if (c.budget_usd) cons.push_back("budget " + money(*c.budget_usd));
  if (c.min_tokens_per_s) cons.push_back(text::printf("at least %.3g tokens/s", *c.min_tokens_per_s));
  if (c.max_ttft_s) cons.push_back("p99 TTFT at most " + units::format(*c.max_ttft_s, units::Dimension::Time));
  if (c.max_itl_s) cons.push_back("p99 ITL at most " + units::format(*c.max_itl_s, units::Dimension::Time));
  out << r.points.size() << " points, " << r.screened_in
      << (r.grid.serving() ? " through the screen (fits the serving plan's memory"
                           : " through the analytic screen (fits in memory")
      << (c.budget_usd ? ", within budget" : "") << "), " << r.simulated << " simulated; answers over the "
      << r.answers.over << " points" << (cons.empty() ? "" : " meeting " + text::join(cons, ", ")) << "\n"
      << (markdown ? "\n" : "");
  line("Best tokens/s per USD", r.answers.best_per_usd);
  line(c.min_tokens_per_s || c.max_ttft_s || c.max_itl_s ? "Cheapest meeting the SLO" : "Cheapest",
       r.answers.cheapest_meeting_slo);
  line("Fastest", r.answers.fastest);
  out << "\n";
  std::vector<std::int64_t> ok;
  for (const auto& p : pts)
    if (p.status == "ok") ok.push_back(p.point.index);
  std::stable_sort(ok.begin(), ok.end(), [&](std::int64_t a, std::int64_t b) {
    return at(a).tokens_per_s_per_usd > at(b).tokens_per_s_per_usd;
  });
  const bool serving = r.grid.serving();
  const bool ranged = any_range(r);
  std::vector<std::string> headers = {
      "configuration", ranged ? "tokens/s (range)" : "tokens/s", "source", "cost USD", "tok/s per kUSD", "USD/Mtoken",
      "Pareto"};
  if (serving) headers.insert(headers.begin() + 2, {"per user tok/s", "TTFT p99 s", "ITL p99 ms"});
  scenario::Table t(headers);
  for (std::size_t k = 0; k < ok.size() && k < max_rows; ++k) {
    const auto& p = at(ok[k]);
    std::vector<std::string> row = {
        describe_point(p.point),
        with_range(p),
        p.instrument,
        text::printf("%.0f", p.capital.total().base()),
        text::printf("%.3f", p.tokens_per_s_per_usd * 1000),
        p.running.usd_per_million_tokens ? text::printf("%.2f", *p.running.usd_per_million_tokens) : std::string("-"),
        p.pareto ? "yes" : ""};
    if (serving)
      row.insert(row.begin() + 2, {text::printf("%.1f", p.per_user_tokens_per_s), text::printf("%.3f", p.ttft_p99),
                                   text::printf("%.1f", p.itl_p99 * 1000)});
    t.add_row(row);
  }
  if (markdown)
    t.print_markdown(out);
  else
    t.print_text(out);
  if (ok.size() > max_rows) out << "(" << ok.size() - max_rows << " more meet the constraints; see the CSV)\n";
  if (serving) {
    // Throughput under an open-loop workload is capped by its arrival rate, so points of different
    // workloads do not compete: the purchase question is asked again for each workload.
    out << "\n" << (markdown ? "" : "Cheapest configuration meeting the constraints, per workload:\n\n");
    scenario::Table w({"workload", "cheapest configuration", "cost USD", "output tok/s", "TTFT p99 s", "ITL p99 ms"});
    for (const auto& [name, best] : cheapest_per_workload(r)) {
      if (best < 0) {
        w.add_row({name, "none meets the constraints", "-", "-", "-", "-"});
        continue;
      }
      const auto& p = at(best);
      w.add_row({name, describe_point(p.point), text::printf("%.0f", p.capital.total().base()),
                 text::printf("%.1f", p.tokens_per_s), text::printf("%.3f", p.ttft_p99),
                 text::printf("%.1f", p.itl_p99 * 1000)});
    }
    if (markdown)
      w.print_markdown(out);
    else
      w.print_text(out);
  }
  std::map<std::string, std::int64_t> removed;
  std::map<std::string, std::string> first_reason;  // the serving plan's, for points that do not fit
  for (const auto& p : pts) {
    if (p.status == "ok") continue;
    const std::string k =
        sweep_detail::starts_with(p.status, "invalid") ? std::string("refused by the model") : p.status;
    ++removed[k];
    if (!p.why_not_fit.empty()) first_reason.emplace(k, p.why_not_fit);
  }
  if (!removed.empty()) {
    out << "\n";
    for (const auto& [k, n] : removed) {
      out << (markdown ? "- " : "") << n << (n == 1 ? " point " : " points ") << k;
      if (const auto it = first_reason.find(k); it != first_reason.end())
        out << " (" << (n == 1 ? "" : "the first: ") << it->second << ")";
      out << "\n";
    }
  }
}

}  // namespace moesim::reports
