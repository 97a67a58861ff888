// Grid files: reading and writing a sweep's grid (its axes, constraints, costs, simulate budget), and
// expanding it into points.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/common_keys.hpp"
#include "moesim/scenario/estimate.hpp"
#include "moesim/scenario/study.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "sweep_detail.hpp"

namespace moesim::reports {

namespace {

std::vector<std::string> string_axis(const json::Node& root, std::string_view key, std::vector<std::string> dflt) {
  if (!root.has(key)) return dflt;
  std::vector<std::string> out;
  if (root.raw().at(std::string(key)).is_string()) {
    out.push_back(root.string(key));
  } else {
    for (const auto& e : root.elements(key)) {
      if (!e.raw().is_string()) throw e.error("must be a string (a name or a path)");
      out.push_back(e.raw().get<std::string>());
    }
  }
  if (out.empty())
    throw root.error(key, "is empty: the grid has no points along it; give at least one value or leave the key out");
  return out;
}

std::vector<nlohmann::json> named_objects(const json::Node& root, std::string_view key,
                                          const std::vector<std::string>& forbidden) {
  std::vector<nlohmann::json> out;
  if (!root.has(key)) return out;
  std::vector<std::string> names;
  for (const auto& e : root.elements(key)) {
    if (!e.raw().is_object()) throw e.error("must be an object with a \"name\" and serve scenario keys");
    const std::string name = e.string("name");
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw e.error("name", "\"" + name + "\" is used twice; each entry needs its own name");
    names.push_back(name);
    for (const auto& f : forbidden) {
      if (e.has(f))
        throw e.error(
            f, "is a grid axis; put it in the grid's own \"" + f + "s\" list (or \"" + f + "\" for nodes) instead");
    }
    out.push_back(e.raw());
  }
  if (out.empty()) throw root.error(key, "is empty: the grid has no points along it; give at least one entry");
  return out;
}

}  // namespace

Grid grid_from_json(const nlohmann::json& doc, const std::string& origin, const std::filesystem::path& base_dir) {
  const json::Node root(doc, origin);
  if (!doc.is_object()) throw root.error("a grid file is a JSON object (see `moesim sweep --help`)");
  root.expect_only({"description", "models", "hw", "nodes", "nics", "precisions", "placements", "strategies", "plans",
                    "workloads", "axes", "constraints", "costs", "simulate", "runtimes"});
  Grid g;
  g.origin = origin;
  g.base_dir = base_dir;
  g.description = root.optional_string("description").value_or("");
  if (!root.has("models"))
    throw root.error("models", "is missing: name the models to compare, e.g. [\"dbrx-instruct\"]");
  if (!root.has("hw")) throw root.error("hw", "is missing: name the node profiles to compare, e.g. [\"dgx-h100\"]");
  g.models = string_axis(root, "models", {});
  g.hw = string_axis(root, "hw", {});
  g.nics = string_axis(root, "nics", {});
  g.precisions = string_axis(root, "precisions", {"bf16"});
  g.placements = string_axis(root, "placements", {"replicated-groups"});
  if (auto rt = root.optional_child("runtimes")) {
    if (!rt->raw().is_object())
      throw rt->error("give an object of {\"node profile\": \"runtime\"}, e.g. {\"dgx-spark\": \"llama.cpp\"}");
    for (const auto& item : rt->raw().items()) {
      if (std::find(g.hw.begin(), g.hw.end(), item.key()) == g.hw.end())
        throw rt->error(item.key(), "is not on the grid's hw axis (" + text::join(g.hw) + ")");
      if (!item.value().is_string()) throw rt->error(item.key(), "is not a runtime name (see `moesim hw`)");
      const std::string name = item.value().get<std::string>();
      const std::string& hw = item.key();
      // Checked now, so that a runtime not fitted on that hardware is refused before any point runs.
      (void)rt->resolving(hw, [&] { return model::find_runtime(name, model::load_node(hw)); });
      g.runtimes[hw] = name;
    }
  }
  if (root.has("nodes")) {
    const auto& raw = doc.at("nodes");
    if (raw.is_string()) {
      g.nodes = scenario::parse_node_list(raw.get<std::string>(), root.where("nodes"));
    } else {
      for (const auto& e : root.elements("nodes")) {
        if (!e.raw().is_number_integer() || e.raw().get<std::int64_t>() < 1) throw e.error("must be a node count >= 1");
        if (e.raw().is_number_unsigned() &&
            e.raw().get<std::uint64_t>() > static_cast<std::uint64_t>(scenario::kMaxClusterNodes))
          throw e.error("is " + std::to_string(e.raw().get<std::uint64_t>()) + " nodes, more than moesim models (" +
                        std::to_string(scenario::kMaxClusterNodes) + "); give a node count from 1 to " +
                        std::to_string(scenario::kMaxClusterNodes));
        g.nodes.push_back(e.raw().get<std::int64_t>());
      }
      if (g.nodes.empty()) throw root.error("nodes", "is empty: give at least one node count, e.g. [1, 2, 4]");
    }
  } else {
    g.nodes = {1};
  }
  const bool multi = std::any_of(g.nodes.begin(), g.nodes.end(), [](auto n) { return n > 1; });
  if (multi && g.nics.empty())
    throw root.error("nics", "is missing: node counts above 1 need NIC profiles, e.g. [\"10gbe-grpc\"]");
  g.workloads = named_objects(root, "workloads", {"model", "hw", "nic", "nodes", "precision", "sweep"});
  g.plans = named_objects(root, "plans", {"model", "hw", "nic", "nodes", "precision", "sweep", "workload"});
  if (!g.plans.empty() && g.workloads.empty())
    throw root.error("plans",
                     "are for the serving simulator: give \"workloads\" too, or use \"strategies\" for "
                     "single-user decode");
  if (root.has("strategies") && !g.workloads.empty())
    throw root.error("strategies",
                     "are the decode simulator's (seed 000) and \"workloads\" the serving "
                     "simulator's; split them into two grids");
  g.strategies = g.workloads.empty() ? string_axis(root, "strategies", {"P-LR-D"}) : std::vector<std::string>{};
  for (const auto& s : g.strategies)
    sweep_detail::on_axis(g, "strategies", g.strategies, s,
                          [](const std::string& v) { return sim::strategy_by_name(v).name; });
  for (const auto& p : g.placements) {
    std::vector<std::string> names;
    for (const auto& info : sim::placements()) names.emplace_back(info.name);
    if (std::find(names.begin(), names.end(), p) == names.end())
      throw root.error("placements", "\"" + p + "\" is not a placement" + text::did_you_mean(p, names) + " (one of " +
                                         text::join(names) + ")");
  }
  for (const auto& p : g.precisions)
    sweep_detail::on_axis(g, "precisions", g.precisions, p,
                          [](const std::string& v) { return model::precision(v).name; });
  sweep_detail::read_axes(root, g);

  if (root.has("constraints")) {
    const json::Node c = root.child("constraints");
    c.expect_only({"budget", "min_tokens_per_s", "max_ttft", "max_itl"});
    if (c.has("budget")) g.constraints.budget_usd = c.quantity<units::Dimension::Money>("budget").base();
    if (c.has("min_tokens_per_s"))
      g.constraints.min_tokens_per_s =
          scenario::number_with_suffix(c, "min_tokens_per_s", {"tokens/s", "tok/s"}, "5tokens/s");
    if (c.has("max_ttft")) g.constraints.max_ttft_s = c.quantity<units::Dimension::Time>("max_ttft").base();
    if (c.has("max_itl")) g.constraints.max_itl_s = c.quantity<units::Dimension::Time>("max_itl").base();
    if ((g.constraints.max_ttft_s || g.constraints.max_itl_s) && g.workloads.empty())
      throw c.error("max_ttft/max_itl need a serving grid (\"workloads\"); a decode grid has one user and no queue");
  }
  if (root.has("costs")) g.costs = scenario::read_costs(root.child("costs"), g.costs_source);
  if (root.has("simulate")) {
    const json::Node s = root.child("simulate");
    s.expect_only({"points", "tokens", "seed"});
    if (s.has("points")) {
      if (doc.at("simulate").at("points").is_string()) {
        if (s.string("points") != "all") throw s.error("points", "is a count of points or \"all\"");
        g.simulate_points = -1;
      } else {
        g.simulate_points = s.integer("points", 0);
      }
    }
    if (s.has("tokens")) g.simulate_tokens = s.integer("tokens", 1);
    if (s.has("seed")) g.seed = static_cast<std::uint64_t>(s.integer("seed", 0));
  }
  if (g.serving() && g.simulate_points == 0)
    throw root.error("simulate",
                     "points is 0, but TTFT and ITL come only from the serving simulator; simulate "
                     "at least one point or drop \"workloads\"");
  if (!g.axes.empty()) {
    GridPoint first;
    first.model = g.models.front();
    first.hw = g.hw.front();
    first.nodes = g.nodes.front();
    first.nic = first.nodes > 1 ? g.nics.front() : "";
    first.precision = g.precisions.front();
    first.placement = g.placements.front();
    if (!g.strategies.empty()) first.strategy = g.strategies.front();
    if (!g.plans.empty()) first.plan = g.plans.front().at("name").get<std::string>();
    if (!g.workloads.empty()) first.workload = g.workloads.front().at("name").get<std::string>();
    sweep_detail::check_axes(g, first);
  }
  return g;
}

Grid load_grid(const std::string& path) {
  if (path.empty()) {
    const std::string file = "grid-dbrx-purchase.json";
    return grid_from_json(scenario::builtin_example(file), "built-in examples/" + file, ".");
  }
  const std::filesystem::path p(path);
  return grid_from_json(json::load_file(p), path, p.has_parent_path() ? p.parent_path() : ".");
}

nlohmann::json grid_to_json(const Grid& g) {
  nlohmann::json j = {{"description", g.description}, {"models", g.models},        {"hw", g.hw}, {"nodes", g.nodes},
                      {"precisions", g.precisions},   {"placements", g.placements}};
  if (!g.nics.empty()) j["nics"] = g.nics;
  if (!g.runtimes.empty()) j["runtimes"] = g.runtimes;
  if (!g.strategies.empty()) j["strategies"] = g.strategies;
  if (!g.plans.empty()) j["plans"] = g.plans;
  if (!g.workloads.empty()) j["workloads"] = g.workloads;
  if (!g.axes.empty()) {
    j["axes"] = nlohmann::json::object();
    for (const auto& [key, values] : g.axes) j["axes"][key] = values;
  }
  nlohmann::json c = nlohmann::json::object();
  if (g.constraints.budget_usd) c["budget"] = {{"value", *g.constraints.budget_usd}, {"unit", "USD"}};
  if (g.constraints.min_tokens_per_s)
    c["min_tokens_per_s"] = {{"value", *g.constraints.min_tokens_per_s}, {"unit", "tokens/s"}};
  if (g.constraints.max_ttft_s) c["max_ttft"] = {{"value", *g.constraints.max_ttft_s}, {"unit", "s"}};
  if (g.constraints.max_itl_s) c["max_itl"] = {{"value", *g.constraints.max_itl_s}, {"unit", "s"}};
  j["constraints"] = c;
  nlohmann::json costs = {{"amortisation", {{"value", g.costs.years}, {"unit", "years"}}},
                          {"utilisation", {{"value", g.costs.utilisation * 100}, {"unit", "%"}}}};
  if (g.costs.usd_per_kwh) costs["energy_price"] = {{"value", *g.costs.usd_per_kwh}, {"unit", "USD/kWh"}};
  if (!g.costs_source.empty()) costs["source"] = g.costs_source;
  j["costs"] = costs;
  j["simulate"] = {{"points", g.simulate_points < 0 ? nlohmann::json("all") : nlohmann::json(g.simulate_points)},
                   {"tokens", g.simulate_tokens},
                   {"seed", g.seed}};
  return j;
}

std::vector<GridPoint> expand_grid(const Grid& g) {
  std::vector<GridPoint> out;
  const std::vector<std::string> none{""};
  const auto& strategies = g.strategies.empty() ? none : g.strategies;
  std::vector<std::string> plan_names, workload_names;
  for (const auto& p : g.plans) plan_names.push_back(p.at("name").get<std::string>());
  for (const auto& w : g.workloads) workload_names.push_back(w.at("name").get<std::string>());
  if (plan_names.empty()) plan_names = none;
  if (workload_names.empty()) workload_names = none;
  // The axes' values in odometer order (the last axis fastest): one list of settings per combination.
  double combinations = 1, settings_bytes = 0;
  for (const auto& [key, values] : g.axes) {
    combinations *= static_cast<double>(values.size());
    std::size_t widest = 0;
    for (const auto& v : values) widest = std::max(widest, v.dump().size());
    // A setting's key and value, held once as text and once as a JSON tree (about 4 bytes of tree per
    // byte of text is generous for numbers, strings and small objects).
    settings_bytes += static_cast<double>(sizeof(std::pair<std::string, nlohmann::json>) + key.size() + 5 * widest);
  }
  {
    // Points in all, counted in doubles before any is made (a product of axes can overflow 64 bits). Each
    // point is held as a GridPoint here and again inside its PointResult in run_sweep, with an index in the
    // stage lists; its names (model, hw, nic, ... ids) may outgrow std::string's inline buffer: 256 bytes
    // of heap per copy is a generous allowance for ids of ~20-40 characters.
    double multi_nics = 0;
    for (const auto n : g.nodes) multi_nics += n > 1 ? static_cast<double>(g.nics.size()) : 1.0;
    const double points = static_cast<double>(g.models.size()) * static_cast<double>(g.hw.size()) * multi_nics *
                          static_cast<double>(g.precisions.size()) * static_cast<double>(g.placements.size()) *
                          static_cast<double>(strategies.size()) * static_cast<double>(plan_names.size()) *
                          static_cast<double>(workload_names.size()) * combinations;
    const double per_point = 2.0 * (static_cast<double>(sizeof(GridPoint)) + 256.0 + settings_bytes) +
                             static_cast<double>(sizeof(PointResult)) + 16.0;
    model::require_memory(units::bytes(points * per_point),
                          g.origin + ": the grid's " + text::printf("%.4g", points) + " points",
                          "shorten the grid's lists (models, hw, nodes, nics, precisions, placements, strategies, "
                          "plans, workloads, axes), or use a machine with more memory");
  }
  std::vector<std::vector<std::pair<std::string, nlohmann::json>>> settings(1);
  for (const auto& [key, values] : g.axes) {
    std::vector<std::vector<std::pair<std::string, nlohmann::json>>> next;
    next.reserve(settings.size() * values.size());
    for (const auto& s : settings)
      for (const auto& v : values) {
        next.push_back(s);
        next.back().emplace_back(key, v);
      }
    settings = std::move(next);
  }
  for (const auto& m : g.models)
    for (const auto& h : g.hw)
      for (const auto n : g.nodes) {
        const std::vector<std::string>& nics = n > 1 ? g.nics : none;
        for (const auto& nic : nics)
          for (const auto& prec : g.precisions)
            for (const auto& pl : g.placements)
              for (const auto& st : strategies)
                for (const auto& plan : plan_names)
                  for (const auto& w : workload_names)
                    for (const auto& set : settings) {
                      GridPoint p;
                      p.index = static_cast<std::int64_t>(out.size());
                      p.model = m;
                      p.hw = h;
                      p.nodes = n;
                      p.nic = nic;
                      p.precision = prec;
                      p.placement = pl;
                      p.strategy = st;
                      p.plan = plan;
                      p.workload = w;
                      p.settings = set;
                      out.push_back(std::move(p));
                    }
      }
  if (out.empty()) throw UserError(g.origin + ": the grid has no points");
  return out;
}

}  // namespace moesim::reports
