#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "moesim/model/text.hpp"
#include "moesim/scenario/study.hpp"
#include "report_sections.hpp"

// The answers in words at the top of the report (ReportSummary::headline) and the paragraph on the grid,
// split out of write_report with their words unchanged.

namespace moesim::reports::report_sections {

namespace {

// The purchase question's answers: the fastest configuration for the money and the cheapest one meeting
// the grid's constraints.
void purchase_answers(const Report& rep, std::vector<std::string>& answers) {
  const ReportInputs& in = rep.in;
  const auto& cal_failure = rep.cal_failure;
  const auto& c = in.grid.constraints;
  const PointResult& best = rep.at(rep.sweep.answers.best_per_usd);
  const PointResult& cheapest = rep.at(rep.sweep.answers.cheapest_meeting_slo);
  const auto per_kusd = [](const PointResult& p) { return num(p.tokens_per_s_per_usd * 1000, 3); };
  // Calibration failed: every answer is the datasheet projection, and says so first.
  if (!cal_failure.empty())
    answers.push_back("**Not calibrated:** fitting the profiles to the measured runs failed (" + cal_failure +
                      "); every figure below is the datasheet projection, uncalibrated (an upper bound where the "
                      "measured runs are slower).");
  answers.push_back("**Fastest for the money:** " + hardware_words(best.point) + " (" + best.point.model + " " +
                    best.point.precision +
                    (strategy_label(best.point).empty() ? "" : ", " + strategy_label(best.point)) +
                    "): " + rep.tps_words(best) + " for " + usd(best.capital.total().base()) + ", " + per_kusd(best) +
                    " tokens/s per 1,000 USD (" + best.instrument + ")" +
                    (best.running.usd_per_million_tokens
                         ? ", " + num(*best.running.usd_per_million_tokens, 2) + " USD per million tokens"
                         : std::string()) +
                    ".");
  answers.push_back(std::string("**Cheapest") +
                    (c.min_tokens_per_s ? " meeting " + text::printf("%g", *c.min_tokens_per_s) + " tokens/s" : "") +
                    ":** " + hardware_words(cheapest.point) + ": " + rep.tps_words(cheapest) + " for " +
                    usd(cheapest.capital.total().base()) + ".");
}

// Where a faster NIC beats more nodes: per hardware, the cheapest NIC is the base; another NIC at n
// nodes "beats more nodes" when it is faster than the base NIC at every node count of the grid.
// Also makes the table of tokens/s and cost per node count and NIC (Report::nic_headers, nic_rows) that
// Figure 8's section shows.
std::vector<std::string> nic_answers(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& pts = rep.sweep.points;
  const auto& cal = rep.cal;
  auto& nic_headers = rep.nic_headers;
  auto& nic_rows = rep.nic_rows;
  std::vector<std::string> nic_words;
  std::map<std::string, std::map<std::string, std::map<std::int64_t, const PointResult*>>> by;  // hw, nic, nodes
  for (const auto& p : pts)
    if (p.simulated && on_node_curve(p, in.grid)) by[p.point.hw][p.point.nic][p.point.nodes] = &p;
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
                              " (" + rep.tps_words(*p) + ", " + usd(p->capital.total().base()) + ") is faster than " +
                              hw + " over " + base + " at any node count of the grid (at best " +
                              rep.tps_words(*base_best_p) + ", with " + std::to_string(base_best_n) + " nodes for " +
                              usd(base_best_p->capital.total().base()) + "): upgrade the NICs before adding nodes.");
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
  return nic_words;
}

// How far the datasheet simulation is from the measured runs, and what the calibration did, so that no
// answer above reads as a measurement.
std::string calibration_answer(const Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& pts = rep.sweep.points;
  const auto& cal = rep.cal;
  const auto& msims = rep.msims;
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  std::string lo_name, hi_name;
  std::size_t n = 0;
  for (const auto& ms : msims) {
    if (!ms.m->tokens_per_s) continue;
    const double ratio = ms.tokens_per_s / *ms.m->tokens_per_s - 1;
    ++n;
    if (ratio < lo) lo = ratio, lo_name = ms.m->name;
    if (ratio > hi) hi = ratio, hi_name = ms.m->name;
  }
  const std::string datasheet_error = n == 0
                                          ? std::string()
                                          : "off by " + text::printf("%+.0f%%", lo * 100) + " (" + lo_name + ") to " +
                                                text::printf("%+.0f%%", hi * 100) + " (" + hi_name + ") against the " +
                                                std::to_string(n) + " measured runs of " + in.measured_origin;
  if (cal) {
    std::vector<std::string> node_params, nic_params;
    for (const auto& q : cal->parameters) {
      if (!q.determined) continue;
      (q.nic ? nic_params : node_params).push_back(q.name + " " + parameter_value(q.value, q.unit));
    }
    std::set<std::string> uncalibrated_hw;
    for (const auto& p : pts)
      if (p.calibration.rfind("uncalibrated: no measured runs", 0) == 0) uncalibrated_hw.insert(p.point.hw);
    std::string words = "**Calibrated to measurements:** the " + cal->profiles.hw +
                        " figures above are the simulator with profiles fitted to the " +
                        std::to_string(cal->runs.size()) + " measured runs of " + cal->origin +
                        " (`moesim calibrate fit`, Levenberg-Marquardt; rms relative error " +
                        text::printf("%.3f", cal->rms_relative) + "). The node's fitted " +
                        (node_params.empty() ? std::string("(none)") : text::join(node_params)) +
                        " describe the machine with the software stack the runs were measured on and apply to every " +
                        cal->profiles.hw + " point";
    if (!nic_params.empty())
      words += "; the NIC's fitted " + text::join(nic_params) + " belongs to the NIC stack the runs were measured " +
               "on, " + cal->profiles.nic +
               ", and applies only to points on it: other NICs keep their datasheet profiles";
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
    return words;
  } else if (n > 0) {
    return "**Against measurements:** the simulator's tokens/s with the datasheet profiles is " + datasheet_error +
           " (table below). Fit the profiles to runs on your own machines (`moesim calibrate fit`) "
           "before you buy on these figures.";
  } else {
    return "**Uncalibrated:** no measured runs were given (--measured): every figure is a datasheet "
           "projection. Fit the profiles to runs on your own machines (`moesim calibrate fit`) "
           "before you buy on these figures.";
  }
}

// Under load: which configuration is the cheapest within the serving SLO at each arrival rate.
std::string serving_answer(const Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& serving = rep.serving;
  const auto per_rate = cheapest_per_workload(*serving);
  std::vector<std::pair<std::string, std::vector<std::string>>> runs;  // configuration, its rates
  for (const auto& [rate, best] : per_rate) {
    const std::string cfg = best < 0
                                ? std::string("nothing in the grid")
                                : hardware_words(serving->points[static_cast<std::size_t>(best)].point) + " (" +
                                      serving->points[static_cast<std::size_t>(best)].point.plan + ", " +
                                      usd(serving->points[static_cast<std::size_t>(best)].capital.total().base()) + ")";
    if (runs.empty() || runs.back().first != cfg) runs.push_back({cfg, {}});
    runs.back().second.push_back(rate);
  }
  std::vector<std::string> parts;
  parts.reserve(runs.size());
  for (const auto& [cfg, rates] : runs) parts.push_back(cfg + " at " + text::join(rates));
  return "**Under load** (" + in.serving->models.front() + ", the serving grid's SLO" +
         (in.measured.empty() ? "" : "; serving simulator, datasheet profiles, uncalibrated") +
         "): the cheapest configuration that meets it is " + text::join(parts, "; ") + ".";
}

}  // namespace

void answers_section(Report& rep) {
  const ReportInputs& in = rep.in;
  const auto& pts = rep.sweep.points;
  const auto& sweep = rep.sweep;
  const auto& c = in.grid.constraints;
  auto& doc = rep.doc;
  std::vector<std::string> answers;
  purchase_answers(rep, answers);
  for (const auto& w : nic_answers(rep)) answers.push_back(w);
  answers.push_back(calibration_answer(rep));
  // The measured comparison points (Table 5), priced the same way.
  for (const auto& cp : in.cost_points) {
    const scenario::CostRow row = scenario::price_point(cp);
    answers.push_back("Measured for comparison: " + cp.label + ", " + num(cp.tokens_per_second, 1) + " tokens/s for " +
                      usd(row.cost.total().base()) + ": " + num(row.tokens_per_second_per_usd * 1000, 3) +
                      " tokens/s per 1,000 USD (" + cp.source + ").");
  }
  if (rep.serving) answers.push_back(serving_answer(rep));
  rep.summary.headline = answers;
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
}

}  // namespace moesim::reports::report_sections
