// The three instruments side by side (reports/compare.hpp).

#include "moesim/reports/compare.hpp"

#include <algorithm>
#include <cmath>

#include "moesim/model/text.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::reports {

double CompareRow::spread() const {
  double worst = 0;
  for (const auto& x : {simulate, serve})
    if (x && estimate > 0) worst = std::max(worst, std::fabs(*x / estimate - 1.0));
  return worst;
}

nlohmann::json single_user_scenario(const std::string& model, const std::string& hw, const std::string& precision,
                                    const std::string& experts, std::int64_t nodes, const nlohmann::json& plan,
                                    std::int64_t context) {
  // Requests whose decode steps average the context: the k-th of 2m + 1 decode steps after a prompt of
  // context − m tokens attends context − m + k tokens, k = 1 .. 2m + 1 (mean: context + 1, as the
  // estimate's token). Eight of them in turn, so the mean over the trace's routing is within ~0.1% of the
  // placement's E[active].
  const std::int64_t m = std::clamp<std::int64_t>(context - 1, 0, 64);
  const std::int64_t prompt = std::max<std::int64_t>(1, context - m);
  return {{"description", "one user, decode at a context of " + std::to_string(context) + " tokens"},
          {"model", model},
          {"hw", hw},
          {"nodes", nodes},
          {"plan", plan},
          {"precision", precision},
          {"experts", experts},
          {"scheduler", {{"kind", "chunked"}, {"max_num_seqs", 1}, {"max_num_batched_tokens", 2048}}},
          {"workload",
           {{"arrival", "closed-loop"}, {"users", 1}, {"requests", 8}, {"prompt", prompt}, {"output", 2 * m + 2}}},
          {"generate", {{"tokens", 8192}, {"seed", 1}}}};
}

namespace {

std::optional<double> simulate_row(const scenario::EstimateResult& r, const scenario::EstimateRow& row,
                                   const CompareOptions& o, std::vector<std::string>& notes) {
  if (!r.arch.is_moe()) {
    notes.push_back("simulate replays expert routing: a dense model has none");
    return std::nullopt;
  }
  const auto& q = r.request;
  scenario::SimulateRequest s;
  s.model = q.model;
  s.hw = q.hw;
  s.nic = row.nodes > 1 ? row.nic : std::string();
  s.nodes = row.nodes;
  s.placement = q.placement;
  s.groups = q.groups;
  s.placement_file = q.placement_file;
  s.precision = q.precision;
  // Contention and residency off: what is left is the cost model and the exchange. Balancing fills every
  // node up to the layer's largest routed count (P-L_R-D), so each layer's nodes finish together and the
  // layer takes E[max] experts, as the estimate counts; without it a node that finished early runs ahead
  // into the next layer and the replay beats the fork-join bound (seed 000 §4.2).
  s.balancing = "lru-fill";
  s.attention = q.exchange == "centralised" ? "centralised" : "decentralised";
  s.collective = q.exchange == "centralised" ? "expert-outputs" : q.exchange;
  s.experts = q.experts;
  s.contention = false;
  s.residency = false;
  s.context = q.context;
  s.lm_head = q.lm_head;
  s.streaming = q.streaming;
  s.runtime = q.runtime;
  s.generate.tokens = o.tokens;
  if (s.nic.empty()) s.nic = "10gbe-grpc";  // unused by one node, but the request names one
  return scenario::run_simulate(s).run.tokens_per_second;
}

std::optional<double> serve_row(const scenario::EstimateResult& r, const scenario::EstimateRow& row,
                                std::vector<std::string>& notes) {
  const auto& q = r.request;
  nlohmann::json plan;
  if (row.nodes == 1) {
    plan = {{"tp", r.node.devices.count}};
  } else if (r.node.devices.count == 1 && q.exchange == "expert-outputs" && q.placement == "replicated-groups" &&
             q.groups == row.nodes) {
    plan = {{"tp", row.nodes}, {"moe_ep", row.nodes}, {"attention_replicated", true}};
  } else {
    notes.push_back(row.nodes > 1 && r.node.devices.count > 1
                        ? "serve has no plan for expert parallelism over nodes of several devices each"
                        : "serve matches only the decentralised expert-outputs exchange over one expert group per "
                          "node (--exchange expert-outputs --groups " +
                              std::to_string(row.nodes) + ")");
    return std::nullopt;
  }
  nlohmann::json doc = single_user_scenario(q.model, q.hw, q.precision, q.experts, row.nodes, plan, q.context);
  if (row.nodes > 1) doc["nic"] = row.nic;
  if (q.streaming) doc["streaming"] = cost::streaming_spec_to_json(*q.streaming);
  if (!q.runtime.empty()) doc["runtime"] = q.runtime;
  if (!q.lm_head) notes.push_back("serve always reads the LM head to sample; give --lm-head to compare like with like");
  scenario::ServeScenario sc;
  sc.doc = doc;
  sc.source = "estimate --compare";
  const scenario::ServeRun run = scenario::run_serve(sc);
  const double tpot = run.result.tpot.mean;
  if (!(tpot > 0)) return std::nullopt;
  return 1.0 / tpot;
}

}  // namespace

std::vector<CompareRow> compare_instruments(const scenario::EstimateResult& r, const CompareOptions& o) {
  std::vector<CompareRow> out;
  for (const auto& row : r.rows) {
    CompareRow c;
    c.nodes = row.nodes;
    c.nic = row.nic;
    c.estimate = row.estimate.tokens_per_second;
    c.simulate = simulate_row(r, row, o, c.notes);
    c.serve = serve_row(r, row, c.notes);
    out.push_back(std::move(c));
  }
  return out;
}

void print_compare_text(const std::vector<CompareRow>& rows, std::ostream& out) {
  out << "\nthe three instruments on each row (contention and residency off, P-L_R-D balancing; tokens/s):\n";
  scenario::Table t({"nodes", "nic", "estimate", "simulate", "serve", "spread %"});
  std::vector<std::string> notes;
  for (const auto& c : rows) {
    auto fig = [](const std::optional<double>& x) { return x ? text::printf("%.2f", *x) : std::string("-"); };
    t.add_row({std::to_string(c.nodes), c.nic, text::printf("%.2f", c.estimate), fig(c.simulate), fig(c.serve),
               text::printf("%.2f", 100.0 * c.spread())});
    for (const auto& n : c.notes)
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
  }
  t.print_text(out);
  for (const auto& n : notes) out << "note: " << n << "\n";
}

nlohmann::json compare_to_json(const std::vector<CompareRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : rows) {
    auto fig = [](const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
    out.push_back({{"nodes", c.nodes},
                   {"nic", c.nic},
                   {"estimate", {{"value", c.estimate}, {"unit", "tokens/s"}}},
                   {"simulate", {{"value", fig(c.simulate)}, {"unit", "tokens/s"}}},
                   {"serve", {{"value", fig(c.serve)}, {"unit", "tokens/s"}}},
                   {"spread", {{"value", c.spread()}, {"unit", "fraction"}}},
                   {"notes", c.notes}});
  }
  return out;
}

}  // namespace moesim::reports
