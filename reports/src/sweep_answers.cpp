// The answers to the purchase question: each point's headline figure and cost, the SLO on the simulated
// figures, the cheapest, best per USD, fastest and Pareto points (rank_points), and per workload.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "moesim/model/cost.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/sweep.hpp"
#include "sweep_detail.hpp"

namespace moesim::reports {

void rank_points(SweepResult& r) {
  const Grid& g = r.grid;
  const sweep_detail::Resolved res = sweep_detail::resolve(g);
  const auto& c = g.constraints;
  r.simulated = 0;
  r.answers.cheapest_meeting_slo = r.answers.best_per_usd = r.answers.fastest = -1;
  r.answers.pareto.clear();
  // Headline figures, SLO on the simulated numbers, answers.
  for (auto& p : r.points) {
    if (p.simulated) ++r.simulated;
    // A second ranking decides the SLO on the simulated figures afresh (those statuses end "(simulated)").
    if (sweep_detail::starts_with(p.status, "removed: ") && p.status.ends_with("(simulated)")) p.status = "ok";
    p.pareto = false;
    if (!p.simulated) p.instrument = "analytic";
    if (p.simulated)
      p.tokens_per_s = g.serving() ? p.output_tokens_per_s : p.sim_tokens_per_s;
    else
      p.tokens_per_s = p.analytic_tokens_per_s;
    if (sweep_detail::starts_with(p.status, "invalid")) continue;
    p.tokens_per_s_per_usd = model::tokens_per_second_per_usd(p.tokens_per_s, p.capital.total());
    p.running = model::running_cost(res.nodes.at(p.point.hw), p.point.nodes, p.capital, p.tokens_per_s, g.costs);
    if (p.status != "ok" || !p.simulated) continue;
    if (g.serving()) {
      if (c.min_tokens_per_s && p.per_user_tokens_per_s < *c.min_tokens_per_s)
        p.status = "removed: below the tokens/s SLO per user (simulated)";
      else if (c.max_ttft_s && p.ttft_p99 > *c.max_ttft_s)
        p.status = "removed: p99 TTFT above the SLO (simulated)";
      else if (c.max_itl_s && p.itl_p99 > *c.max_itl_s)
        p.status = "removed: p99 ITL above the SLO (simulated)";
    } else if (c.min_tokens_per_s && p.sim_tokens_per_s < *c.min_tokens_per_s) {
      p.status = "removed: below the tokens/s SLO (simulated)";
    }
  }
  std::vector<std::int64_t> ok;
  for (const auto& p : r.points)
    if (p.status == "ok") ok.push_back(p.point.index);
  if (ok.empty()) {
    std::map<std::string, std::int64_t> why;
    std::string first_invalid;
    for (const auto& p : r.points) {
      const bool invalid = sweep_detail::starts_with(p.status, "invalid");
      if (invalid && first_invalid.empty()) first_invalid = p.status.substr(std::string("invalid: ").size());
      ++why[invalid ? std::string("refused by the model") : p.status];
    }
    std::vector<std::string> parts;
    parts.reserve(why.size());
    for (const auto& [k, n] : why)
      parts.push_back(std::to_string(n) + " " + k +
                      (k == "refused by the model" ? " (the first: " + first_invalid + ")" : std::string()));
    throw UserError(g.origin + ": no configuration meets the constraints (" + std::to_string(r.points.size()) +
                    (r.points.size() == 1 ? " point: " : " points: ") + text::join(parts, "; ") +
                    "); relax a constraint or widen the grid");
  }
  const auto at = [&](std::int64_t i) -> PointResult& { return r.points[static_cast<std::size_t>(i)]; };
  std::vector<std::int64_t> by_cost = ok;
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](std::int64_t a, std::int64_t b) {
    const double ca = at(a).capital.total().base(), cb = at(b).capital.total().base();
    if (ca != cb) return ca < cb;
    return at(a).tokens_per_s > at(b).tokens_per_s;
  });
  r.answers.cheapest_meeting_slo = by_cost.front();
  double best = -1;
  for (auto i : by_cost) {
    if (at(i).tokens_per_s > best) {
      best = at(i).tokens_per_s;
      at(i).pareto = true;
      r.answers.pareto.push_back(i);
    }
  }
  r.answers.best_per_usd = ok.front();
  r.answers.fastest = ok.front();
  for (auto i : ok) {
    if (at(i).tokens_per_s_per_usd > at(r.answers.best_per_usd).tokens_per_s_per_usd) r.answers.best_per_usd = i;
    if (at(i).tokens_per_s > at(r.answers.fastest).tokens_per_s) r.answers.fastest = i;
  }
}

std::vector<std::pair<std::string, std::int64_t>> cheapest_per_workload(const SweepResult& r) {
  std::vector<std::pair<std::string, std::int64_t>> out;  // in the points' order: the grid's workloads' order
  for (const auto& p : r.points) {
    const std::string label = workload_label(p.point);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == label; });
    if (it == out.end()) it = out.insert(out.end(), {label, -1});
    if (p.status != "ok") continue;
    std::int64_t& best = it->second;
    if (best < 0) {
      best = p.point.index;
      continue;
    }
    const auto& b = r.points[static_cast<std::size_t>(best)];
    if (p.capital.total().base() < b.capital.total().base() ||
        (p.capital.total().base() == b.capital.total().base() && p.tokens_per_s > b.tokens_per_s))
      best = p.point.index;
  }
  return out;
}

}  // namespace moesim::reports
