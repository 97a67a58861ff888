#include "moesim/reports/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/compare.hpp"
#include "moesim/reports/estimate.hpp"
#include "moesim/reports/plot.hpp"
#include "moesim/reports/serve.hpp"
#include "moesim/reports/simulate.hpp"
#include "moesim/reports/study.hpp"
#include "moesim/reports/table.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"

namespace moesim::reports {

namespace {

constexpr double kGiB = 1073741824.0;

/// "5tokens/s" -> 5: a number followed by exactly `suffix` (no other unit is meaningful here).
double number_with_suffix(const json::Node& n, std::string_view key, const std::vector<std::string>& suffixes,
                          const std::string& example) {
  const std::string text = n.string(key);
  for (const auto& suffix : suffixes) {
    if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string num = text.substr(0, text.size() - suffix.size());
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(num, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == num.size() && std::isfinite(v) && v > 0) return v;
      throw n.error(key,
                    "\"" + text + "\" is not a positive number followed by " + suffix + ", e.g. \"" + example + "\"");
    }
  }
  throw n.error(key, "\"" + text + "\" needs its unit, e.g. \"" + example + "\"");
}

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

std::string fmt(double v) { return text::printf("%.6g", v); }

/// Caches of everything a point's analytic estimate needs, resolved once for the whole grid.
struct Resolved {
  std::map<std::string, model::Architecture> models;
  std::map<std::string, model::NodeProfile> nodes;
  std::map<std::string, model::NicProfile> nics;                           ///< grid NICs and intra-node links
  std::map<std::pair<std::string, std::string>, model::ModelCosts> costs;  ///< (model, precision)
};

/// Runs `load` on an axis value; a UserError is re-raised naming the grid file and the entry.
template <class F>
auto on_axis(const Grid& g, const char* axis, const std::vector<std::string>& values, const std::string& value,
             F&& load) {
  try {
    return load(value);
  } catch (const UserError& e) {
    const auto i = std::find(values.begin(), values.end(), value) - values.begin();
    throw UserError(g.origin + ": $." + axis + "[" + std::to_string(i) + "]: " + e.what());
  }
}

Resolved resolve(const Grid& g) {
  Resolved r;
  for (const auto& m : g.models)
    r.models.emplace(m, on_axis(g, "models", g.models, m, [](const std::string& v) { return model::load_model(v); }));
  for (const auto& h : g.hw) {
    auto node = on_axis(g, "hw", g.hw, h, [&](const std::string& v) {
      auto n = model::load_node(v);
      (void)n.node_price();  // a sweep prices every point: say now which profile lacks a price
      // The runtime the grid names for this hardware (checked when the grid was read).
      if (auto rt = g.runtimes.find(v); rt != g.runtimes.end())
        n = model::apply_runtime(n, model::find_runtime(rt->second, n));
      return n;
    });
    if (node.intra_node_link && !r.nics.count(*node.intra_node_link))
      r.nics.emplace(*node.intra_node_link, model::load_nic(*node.intra_node_link));
    r.nodes.emplace(h, std::move(node));
  }
  for (const auto& n : g.nics) {
    r.nics.emplace(n, on_axis(g, "nics", g.nics, n, [](const std::string& v) {
                     auto nic = model::load_nic(v);
                     (void)nic.nic_price();
                     return nic;
                   }));
  }
  for (const auto& p : g.precisions) {
    const auto& prec = model::precision(p);
    for (const auto& [id, a] : r.models) r.costs.emplace(std::make_pair(id, p), model::model_costs(a, prec));
  }
  return r;
}

nlohmann::json serve_doc(const Grid& g, const GridPoint& p) {
  nlohmann::json doc = nlohmann::json::object();
  const auto find = [](const std::vector<nlohmann::json>& list, const std::string& name) -> const nlohmann::json& {
    for (const auto& e : list)
      if (e.at("name") == name) return e;
    MOESIM_CHECK(false, "named grid entry vanished");
    return list.front();
  };
  for (const auto& [k, v] : find(g.workloads, p.workload).items())
    if (k != "name") doc[k] = v;
  if (!p.plan.empty())
    for (const auto& [k, v] : find(g.plans, p.plan).items())
      if (k != "name") doc[k] = v;
  doc["model"] = p.model;
  doc["hw"] = p.hw;
  doc["nodes"] = p.nodes;
  if (!p.nic.empty()) doc["nic"] = p.nic;
  doc["precision"] = p.precision;
  if (auto rt = g.runtimes.find(p.hw); rt != g.runtimes.end()) doc["runtime"] = rt->second;
  if (!doc.contains("generate") && !doc.contains("trace"))
    doc["generate"] = {{"tokens", g.simulate_tokens}, {"seed", g.seed}};
  return doc;
}

/// A serving scenario run for a point, named after the grid and the point in its messages.
ServeScenario point_scenario(const Grid& g, const GridPoint& p, nlohmann::json doc) {
  ServeScenario s;
  s.doc = std::move(doc);
  s.source = g.origin + " (point " + std::to_string(p.index) + ": " + describe_point(p) + ")";
  s.base_dir = g.base_dir;
  return s;
}

void analytic_point(const Grid& g, const Resolved& res, PointResult& out) {
  const GridPoint& p = out.point;
  try {
    const auto& arch = res.models.at(p.model);
    const auto& node = res.nodes.at(p.hw);
    const model::NicProfile* nic = p.nodes > 1 ? &res.nics.at(p.nic) : nullptr;
    const model::NicProfile* intra = node.intra_node_link ? &res.nics.at(*node.intra_node_link) : nullptr;
    out.capital = model::capital_cost(node, nic, p.nodes);
    if (g.serving()) {
      // A serving point fits when the serving simulator's own memory plan for its scenario says so (the
      // plan the run will make: its split, gpu_memory_utilization, activation reservation); the analytic
      // model's single-user node total below only ranks the points.
      const sim::MemoryPlan m = serve_memory_plan(point_scenario(g, p, serve_doc(g, p)));
      out.fits = m.fits;
      out.device_memory_needed = m.weights + m.activations;
      out.device_memory_usable = m.usable;
      out.why_not_fit = m.why_not;
    }
    if (p.nodes > 1 && !arch.is_moe()) {
      // Expert parallelism, which the analytic model and the decode simulator assume across nodes, needs
      // routed experts; the serving simulator runs dense models tensor- and pipeline-parallel instead, so
      // a serving grid passes such points on with no analytic figure.
      if (!g.serving())
        throw UserError(arch.id +
                        " is dense: expert parallelism across nodes needs routed experts (a serving "
                        "grid, with workloads and plans, runs it tensor- or pipeline-parallel)");
      return;
    }
    model::DecodeScenario s;
    s.arch = &arch;
    s.costs = &res.costs.at({p.model, p.precision});
    s.node = &node;
    s.nic = nic;
    s.intra_link = intra;
    s.nodes = p.nodes;
    s.weights = &model::precision(p.precision);
    if (arch.is_moe()) {
      const sim::Placement pl = sim::resolve_placement(p.placement, arch.routed_experts, p.nodes, {2, {}}, "");
      s.expected_active_experts = sim::expected_max_active_experts(pl, arch.top_k);
      s.max_experts_per_node = pl.max_experts_per_node();
    }
    const model::DecodeEstimate e = model::estimate_decode(s);
    if (!g.serving()) {
      out.fits = e.fits;
      out.memory_needed = e.memory_needed.base();
      out.memory_available = e.memory_available.base();
    }
    out.analytic_tokens_per_s = e.tokens_per_second;
  } catch (const UserError& e) {
    out.status = std::string("invalid: ") + e.what();
  }
}

/// A tensor-parallel point's run (GridPoint::tensor_parallel): one user on the serving simulator, TP over
/// the node's devices, with the runtime the grid names for its hardware (so the point's resolved scenario
/// is what ran).
nlohmann::json tensor_parallel_doc(const Grid& g, const GridPoint& p) {
  nlohmann::json doc = single_user_scenario(p.model, p.hw, p.precision, "fused", 1, {{"tp", p.tensor_parallel}}, 0);
  if (auto rt = g.runtimes.find(p.hw); rt != g.runtimes.end()) doc["runtime"] = rt->second;
  return doc;
}

SimulateRequest decode_request(const Grid& g, const GridPoint& p) {
  SimulateRequest r;
  r.model = p.model;
  r.hw = p.hw;
  if (!p.nic.empty()) r.nic = p.nic;
  r.nodes = p.nodes;
  r.placement = p.placement;
  r.precision = p.precision;
  r.strategy = p.strategy;
  if (auto rt = g.runtimes.find(p.hw); rt != g.runtimes.end()) r.runtime = rt->second;
  r.generate.tokens = g.simulate_tokens;
  r.generate.seed = g.seed;
  return r;
}

void simulate_point(const Grid& g, const SweepOptions& o, PointResult& out) {
  const GridPoint& p = out.point;
  try {
    // Serves the point's scenario, and writes its Chrome trace when asked.
    auto serve = [&](nlohmann::json doc) {
      ServeRun run = run_serve(point_scenario(g, p, std::move(doc)));
      if (!o.traces_dir.empty())
        write_file_atomically((o.traces_dir / ("point-" + std::to_string(p.index) + ".json")).string(), [&] {
          std::ostringstream t;
          write_serve_chrome_trace(run, t);
          return t.str();
        }());
      return run;
    };
    if (g.serving()) {
      const ServeRun run = serve(serve_doc(g, p));
      const auto& res = run.result;
      out.output_tokens_per_s = res.output_throughput;
      out.per_user_tokens_per_s = res.tpot.mean > 0 ? 1.0 / res.tpot.mean : 0;
      out.ttft_p50 = res.ttft.median;
      out.ttft_p99 = res.ttft.p99;
      out.itl_p50 = res.itl.median;
      out.itl_p99 = res.itl.p99;
      out.goodput = res.goodput;
      out.instrument = "serving-sim";
    } else if (p.tensor_parallel > 0) {
      // One server of several GPUs runs the model tensor-parallel over them (vLLM, TensorRT-LLM), not the
      // Mac cluster's expert-parallel strategy: its single-user figure comes from the serving simulator.
      const ServeRun run = serve(tensor_parallel_doc(g, p));
      out.sim_tokens_per_s = run.result.tpot.mean > 0 ? 1.0 / run.result.tpot.mean : 0;
      out.instrument = "serving-sim (TP " + std::to_string(p.tensor_parallel) + ")";
    } else {
      SimulateOutputs outputs;
      if (!o.traces_dir.empty())
        outputs.chrome_trace = (o.traces_dir / ("point-" + std::to_string(p.index) + ".json")).string();
      const SimulateResult r = run_simulate(decode_request(g, p), outputs);
      const TimeSplit split = mean_split(r.run);
      out.sim_tokens_per_s = r.run.tokens_per_second;
      out.split_moe = split.moe;
      out.split_comm = split.comm;
      out.split_misc = split.misc;
      out.instrument = "decode-sim";
    }
    out.simulated = true;
  } catch (const UserError& e) {
    out.status = std::string("invalid: ") + e.what();
  }
}

/// The per-point fields a stage computes, as JSON (doubles round-trip exactly through nlohmann's
/// shortest representation, so a gathered result equals a local one bit for bit).
nlohmann::json stage_blob(const PointResult& r) {
  return {{"i", r.point.index},
          {"status", r.status},
          {"fits", r.fits},
          {"mem", r.memory_needed},
          {"avail", r.memory_available},
          {"dmem", r.device_memory_needed},
          {"dusable", r.device_memory_usable},
          {"whynot", r.why_not_fit},
          {"atps", r.analytic_tokens_per_s},
          {"cn", r.capital.nodes.base()},
          {"cc", r.capital.nics.base()},
          {"cs", r.capital.switches.base()},
          {"sc", r.capital.switch_count},
          {"notes", r.capital.notes},
          {"sim", r.simulated},
          {"inst", r.instrument},
          {"stps", r.sim_tokens_per_s},
          {"moe", r.split_moe},
          {"comm", r.split_comm},
          {"misc", r.split_misc},
          {"otps", r.output_tokens_per_s},
          {"utps", r.per_user_tokens_per_s},
          {"t50", r.ttft_p50},
          {"t99", r.ttft_p99},
          {"i50", r.itl_p50},
          {"i99", r.itl_p99},
          {"good", r.goodput}};
}

void apply_blob(const nlohmann::json& j, PointResult& r) {
  r.status = j.at("status").get<std::string>();
  r.fits = j.at("fits").get<bool>();
  r.memory_needed = j.at("mem").get<double>();
  r.memory_available = j.at("avail").get<double>();
  r.device_memory_needed = j.at("dmem").get<double>();
  r.device_memory_usable = j.at("dusable").get<double>();
  r.why_not_fit = j.at("whynot").get<std::string>();
  r.analytic_tokens_per_s = j.at("atps").get<double>();
  r.capital.nodes = units::usd(j.at("cn").get<double>());
  r.capital.nics = units::usd(j.at("cc").get<double>());
  r.capital.switches = units::usd(j.at("cs").get<double>());
  r.capital.switch_count = j.at("sc").get<std::int64_t>();
  r.capital.notes = j.at("notes").get<std::vector<std::string>>();
  r.simulated = j.at("sim").get<bool>();
  r.instrument = j.at("inst").get<std::string>();
  r.sim_tokens_per_s = j.at("stps").get<double>();
  r.split_moe = j.at("moe").get<double>();
  r.split_comm = j.at("comm").get<double>();
  r.split_misc = j.at("misc").get<double>();
  r.output_tokens_per_s = j.at("otps").get<double>();
  r.per_user_tokens_per_s = j.at("utps").get<double>();
  r.ttft_p50 = j.at("t50").get<double>();
  r.ttft_p99 = j.at("t99").get<double>();
  r.itl_p50 = j.at("i50").get<double>();
  r.itl_p99 = j.at("i99").get<double>();
  r.goodput = j.at("good").get<double>();
}

/// Runs `work` on the listed point indices that belong to this rank, on `threads` threads, then
/// gathers every rank's results into `points`.
void run_stage(const char* stage, const std::vector<std::int64_t>& todo, std::vector<PointResult>& points,
               const SweepOptions& o, const SweepComm& comm, const std::function<void(PointResult&)>& work) {
  std::vector<std::int64_t> mine;
  for (std::size_t k = 0; k < todo.size(); ++k)
    if (static_cast<int>(k % static_cast<std::size_t>(comm.size)) == comm.rank) mine.push_back(todo[k]);
  unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(1, mine.size())));
  std::atomic<std::size_t> next{0}, done{0};
  std::atomic<bool> stop{false};
  std::mutex progress_mutex;
  std::exception_ptr failure;
  const auto worker = [&] {
    for (;;) {
      if (stop.load()) return;
      const std::size_t k = next.fetch_add(1);
      if (k >= mine.size()) return;
      try {
        work(points[static_cast<std::size_t>(mine[k])]);
      } catch (...) {
        std::lock_guard lock(progress_mutex);
        if (!failure) failure = std::current_exception();
        stop = true;
        return;
      }
      const std::size_t d = done.fetch_add(1) + 1;
      if (o.progress) {
        std::lock_guard lock(progress_mutex);
        o.progress(stage, d, mine.size());
      }
      if (o.cancelled && o.cancelled()) stop = true;
    }
  };
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);
  if (o.cancelled && o.cancelled())
    throw UserError(std::string("interrupted during the ") + stage + " stage after " + std::to_string(done.load()) +
                    " of " + std::to_string(mine.size()) + " points; nothing was written");
  if (comm.size > 1) {
    nlohmann::json local = nlohmann::json::array();
    for (auto i : mine) local.push_back(stage_blob(points[static_cast<std::size_t>(i)]));
    const auto blobs = comm.allgather(local.dump());
    for (const auto& b : blobs)
      for (const auto& j : nlohmann::json::parse(b)) apply_blob(j, points.at(j.at("i").get<std::size_t>()));
  }
}

bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

}  // namespace


model::CostAssumptions read_costs(const json::Node& c, std::string& source) {
  c.expect_only({"energy_price", "amortisation", "utilisation", "source"});
  model::CostAssumptions a;
  source = c.optional_string("source").value_or("");
  if (c.has("energy_price")) a.usd_per_kwh = number_with_suffix(c, "energy_price", {"USD/kWh"}, "0.15USD/kWh");
  if (c.has("amortisation")) a.years = number_with_suffix(c, "amortisation", {"years", "year", "y"}, "3years");
  if (c.has("utilisation")) {
    a.utilisation = number_with_suffix(c, "utilisation", {"%"}, "50%") / 100.0;
    if (a.utilisation > 1) throw c.error("utilisation", "is above 100%");
  }
  return a;
}

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
  return s;
}

Grid grid_from_json(const nlohmann::json& doc, const std::string& origin, const std::filesystem::path& base_dir) {
  const json::Node root(doc, origin);
  if (!doc.is_object()) throw root.error("a grid file is a JSON object (see `moesim sweep --help`)");
  root.expect_only({"description", "models", "hw", "nodes", "nics", "precisions", "placements", "strategies", "plans",
                    "workloads", "constraints", "costs", "simulate", "runtimes"});
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
      const std::string hw = item.key();
      // Checked now, so that a runtime not fitted on that hardware is refused before any point runs.
      (void)rt->resolving(hw, [&] { return model::find_runtime(name, model::load_node(hw)); });
      g.runtimes[hw] = name;
    }
  }
  if (root.has("nodes")) {
    const auto& raw = doc.at("nodes");
    if (raw.is_string()) {
      g.nodes = parse_node_list(raw.get<std::string>(), root.where("nodes"));
    } else {
      for (const auto& e : root.elements("nodes")) {
        if (!e.raw().is_number_integer() || e.raw().get<std::int64_t>() < 1) throw e.error("must be a node count >= 1");
        if (e.raw().is_number_unsigned() && e.raw().get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxClusterNodes))
          throw e.error("is " + std::to_string(e.raw().get<std::uint64_t>()) + " nodes, more than moesim models (" +
                        std::to_string(kMaxClusterNodes) + "); give a node count from 1 to " +
                        std::to_string(kMaxClusterNodes));
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
    on_axis(g, "strategies", g.strategies, s, [](const std::string& v) { return sim::strategy_by_name(v).name; });
  for (const auto& p : g.placements) {
    std::vector<std::string> names;
    for (const auto& info : sim::placements()) names.emplace_back(info.name);
    if (std::find(names.begin(), names.end(), p) == names.end())
      throw root.error("placements", "\"" + p + "\" is not a placement" + text::did_you_mean(p, names) + " (one of " +
                                         text::join(names) + ")");
  }
  for (const auto& p : g.precisions)
    on_axis(g, "precisions", g.precisions, p, [](const std::string& v) { return model::precision(v).name; });

  if (root.has("constraints")) {
    const json::Node c = root.child("constraints");
    c.expect_only({"budget", "min_tokens_per_s", "max_ttft", "max_itl"});
    if (c.has("budget")) g.constraints.budget_usd = c.quantity<units::Dimension::Money>("budget").base();
    if (c.has("min_tokens_per_s"))
      g.constraints.min_tokens_per_s = number_with_suffix(c, "min_tokens_per_s", {"tokens/s", "tok/s"}, "5tokens/s");
    if (c.has("max_ttft")) g.constraints.max_ttft_s = c.quantity<units::Dimension::Time>("max_ttft").base();
    if (c.has("max_itl")) g.constraints.max_itl_s = c.quantity<units::Dimension::Time>("max_itl").base();
    if ((g.constraints.max_ttft_s || g.constraints.max_itl_s) && g.workloads.empty())
      throw c.error("max_ttft/max_itl need a serving grid (\"workloads\"); a decode grid has one user and no queue");
  }
  if (root.has("costs")) g.costs = read_costs(root.child("costs"), g.costs_source);
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
  return g;
}

Grid load_grid(const std::string& path) {
  if (path.empty()) {
    const std::string file = "grid-dbrx-purchase.json";
    return grid_from_json(builtin_example(file), "built-in examples/" + file, ".");
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
                          static_cast<double>(workload_names.size());
    const double per_point =
        2.0 * (static_cast<double>(sizeof(GridPoint)) + 256.0) + static_cast<double>(sizeof(PointResult)) + 16.0;
    model::require_memory(units::bytes(points * per_point),
                          g.origin + ": the grid's " + text::printf("%.4g", points) + " points",
                          "shorten the grid's lists (models, hw, nodes, nics, precisions, placements, strategies, "
                          "plans, workloads), or use a machine with more memory");
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
                  for (const auto& w : workload_names) {
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
                    out.push_back(std::move(p));
                  }
      }
  if (out.empty()) throw UserError(g.origin + ": the grid has no points");
  return out;
}

void rank_points(SweepResult& r) {
  const Grid& g = r.grid;
  const Resolved res = resolve(g);
  const auto& c = g.constraints;
  r.simulated = 0;
  r.answers.cheapest_meeting_slo = r.answers.best_per_usd = r.answers.fastest = -1;
  r.answers.pareto.clear();
  // Headline figures, SLO on the simulated numbers, answers.
  for (auto& p : r.points) {
    if (p.simulated) ++r.simulated;
    // A second ranking decides the SLO on the simulated figures afresh (those statuses end "(simulated)").
    if (starts_with(p.status, "removed: ") && p.status.ends_with("(simulated)")) p.status = "ok";
    p.pareto = false;
    if (!p.simulated) p.instrument = "analytic";
    if (p.simulated)
      p.tokens_per_s = g.serving() ? p.output_tokens_per_s : p.sim_tokens_per_s;
    else
      p.tokens_per_s = p.analytic_tokens_per_s;
    if (starts_with(p.status, "invalid")) continue;
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
      const bool invalid = starts_with(p.status, "invalid");
      if (invalid && first_invalid.empty()) first_invalid = p.status.substr(std::string("invalid: ").size());
      ++why[invalid ? std::string("refused by the model") : p.status];
    }
    std::vector<std::string> parts;
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

void calibrate_points(SweepResult& r, const ProfileOverride& with, const SweepOptions& o) {
  const Grid& g = r.grid;
  std::vector<std::int64_t> todo;
  for (auto& p : r.points) {
    p.datasheet_tokens_per_s = p.tokens_per_s > 0 ? std::optional<double>(p.tokens_per_s) : std::nullopt;
    p.tokens_per_s_low = p.tokens_per_s_high = std::nullopt;
    if (p.point.hw != with.hw) {
      p.calibration = "uncalibrated: no measured runs on " + p.point.hw;
    } else if (!p.simulated || p.instrument != "decode-sim") {
      // The fitted parameters are the decode simulator's; the analytic bound and the serving simulator
      // do not take them.
      p.calibration = "uncalibrated: not decode-simulated (" + (p.simulated ? p.instrument : "analytic") + ")";
    } else {
      p.calibration = "fitted";
      todo.push_back(p.point.index);
    }
  }
  SweepComm self;
  self.allgather = [](const std::string& s) { return std::vector<std::string>{s}; };
  run_stage("calibrate", todo, r.points, o, self, [&](PointResult& out) {
    const GridPoint& p = out.point;
    const PreparedSimulate prepared = prepare_simulate(decode_request(g, p));
    const model::NicProfile* nic = nullptr;
    if (p.nodes > 1 && prepared.nic) nic = p.nic == with.nic && with.nic_profile ? &*with.nic_profile : &*prepared.nic;
    const sim::DecodeResult run = sim::run_decode(decode_config(prepared, with.node, nic), prepared.trace);
    const TimeSplit split = mean_split(run);
    out.sim_tokens_per_s = run.tokens_per_second;
    out.split_moe = split.moe;
    out.split_comm = split.comm;
    out.split_misc = split.misc;
    if (with.interval) std::tie(out.tokens_per_s_low, out.tokens_per_s_high) = with.interval(run.tokens_per_second);
  });
  rank_points(r);
}

SweepResult run_sweep(const Grid& g, const SweepOptions& o, const SweepComm& comm_in) {
  SweepComm comm = comm_in;
  if (!comm.allgather) comm.allgather = [](const std::string& s) { return std::vector<std::string>{s}; };
  SweepResult r;
  r.grid = g;
  const std::vector<GridPoint> grid_points = expand_grid(g);
  const Resolved res = resolve(g);
  r.points.resize(grid_points.size());
  std::vector<std::int64_t> all(grid_points.size());
  for (std::size_t i = 0; i < grid_points.size(); ++i) {
    r.points[i].point = grid_points[i];
    all[i] = static_cast<std::int64_t>(i);
    // A decode grid's one-node point on a node of several GPUs runs them tensor-parallel (GridPoint).
    GridPoint& p = r.points[i].point;
    if (const auto devices = res.nodes.at(p.hw).devices.count; !g.serving() && p.nodes == 1 && devices > 1)
      p.tensor_parallel = devices;
  }

  // Stage 1: the analytic screen.
  run_stage("analytic", all, r.points, o, comm, [&](PointResult& p) { analytic_point(g, res, p); });
  const auto& c = g.constraints;
  std::vector<std::int64_t> candidates;
  for (auto& p : r.points) {
    if (p.status != "ok") continue;
    if (!p.fits) {
      p.status = "removed: does not fit in memory";
    } else if (c.budget_usd && p.capital.total().base() > *c.budget_usd) {
      p.status = "removed: over the budget";
    } else if (!g.serving() && c.min_tokens_per_s && p.analytic_tokens_per_s < *c.min_tokens_per_s) {
      p.status = "removed: below the tokens/s SLO (analytic bound)";
    } else {
      candidates.push_back(p.point.index);
    }
  }
  r.screened_in = static_cast<std::int64_t>(candidates.size());

  // Stage 2: simulate the most promising points (analytic tokens/s per USD, then index).
  const std::int64_t want = o.simulate ? *o.simulate : g.simulate_points;
  if (g.serving() && want == 0)
    throw UserError("--simulate 0: a serving grid's TTFT and ITL come only from the simulator; simulate at least 1");
  if (want != 0) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::int64_t a, std::int64_t b) {
      const auto& pa = r.points[static_cast<std::size_t>(a)];
      const auto& pb = r.points[static_cast<std::size_t>(b)];
      return pa.analytic_tokens_per_s / pa.capital.total().base() >
             pb.analytic_tokens_per_s / pb.capital.total().base();
    });
    std::vector<std::int64_t> chosen = candidates;
    if (want > 0 && static_cast<std::int64_t>(chosen.size()) > want) chosen.resize(static_cast<std::size_t>(want));
    std::sort(chosen.begin(), chosen.end());
    run_stage("simulate", chosen, r.points, o, comm, [&](PointResult& p) { simulate_point(g, o, p); });
    for (auto i : candidates) {
      auto& p = r.points[static_cast<std::size_t>(i)];
      if (!p.simulated && p.status == "ok") p.status = "not simulated: ranked below the simulated points";
    }
  }

  r.answers.over = want != 0 ? "simulated" : "analytic";
  rank_points(r);
  return r;
}

namespace {

/// A metric: its CSV column (unit in the name), its JSON name and unit, and its value when it has one.
struct Column {
  const char* csv;
  const char* name;
  const char* unit;
  std::function<std::optional<double>(const PointResult&)> value;
  bool calibrated = false;  ///< a column of a calibrated sweep only (calibrate_points)
};

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
      {"tokens_per_s_low", "tokens_per_second_low", "tokens/s",
       [](const PointResult& p) { return p.tokens_per_s_low; }, true},
      {"tokens_per_s_high", "tokens_per_second_high", "tokens/s",
       [](const PointResult& p) { return p.tokens_per_s_high; }, true},
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

void write_sweep_points_csv(const SweepResult& r, std::ostream& out) {
  // A calibrated sweep (the report's) adds the calibration, the interval and the datasheet figure.
  const bool calibrated =
      std::any_of(r.points.begin(), r.points.end(), [](const PointResult& p) { return !p.calibration.empty(); });
  std::vector<const Column*> cols;
  for (const auto& c : metric_columns())
    if (calibrated || !c.calibrated) cols.push_back(&c);
  out << "index,model,hw,nodes,nic,precision,placement,strategy,plan,workload,status,instrument,fits,pareto";
  if (calibrated) out << ",calibration";
  for (const auto* c : cols) out << "," << c->csv;
  out << "\n";
  for (const auto& p : r.points) {
    const auto& g = p.point;
    out << g.index << "," << csv_field(g.model) << "," << csv_field(g.hw) << "," << g.nodes << "," << csv_field(g.nic)
        << "," << g.precision << "," << g.placement << "," << csv_field(strategy_label(g)) << "," << csv_field(g.plan)
        << "," << csv_field(g.workload) << "," << csv_field(p.status) << "," << p.instrument << ","
        << (p.fits ? "yes" : "no") << "," << (p.pareto ? "yes" : "no");
    if (calibrated) out << "," << csv_field(p.calibration);
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
      scenario = serve_doc(r.grid, g);
    } else if (g.tensor_parallel > 0) {
      scenario = tensor_parallel_doc(r.grid, g);
    } else {
      scenario = simulate_request_to_json(decode_request(r.grid, g));
    }
    nlohmann::json e = {{"index", g.index},         {"model", g.model},   {"hw", g.hw},
                        {"nodes", g.nodes},         {"nic", g.nic},       {"precision", g.precision},
                        {"placement", g.placement}, {"status", p.status}, {"instrument", p.instrument},
                        {"pareto", p.pareto},       {"metrics", m},       {"scenario", scenario}};
    if (const std::string st = strategy_label(g); !st.empty()) e["strategy"] = st;
    if (!g.plan.empty()) e["plan"] = g.plan;
    if (!g.workload.empty()) e["workload"] = g.workload;
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

std::vector<std::int64_t> cheapest_per_workload(const SweepResult& r) {
  std::vector<std::int64_t> out;
  for (const auto& wl : r.grid.workloads) {
    const std::string name = wl.at("name").get<std::string>();
    std::int64_t best = -1;
    for (const auto& p : r.points) {
      if (p.status != "ok" || p.point.workload != name) continue;
      if (best < 0) {
        best = p.point.index;
        continue;
      }
      const auto& b = r.points[static_cast<std::size_t>(best)];
      if (p.capital.total().base() < b.capital.total().base() ||
          (p.capital.total().base() == b.capital.total().base() && p.tokens_per_s > b.tokens_per_s))
        best = p.point.index;
    }
    out.push_back(best);
  }
  return out;
}

void print_sweep_summary(const SweepResult& r, std::ostream& out, bool markdown, std::size_t max_rows) {
  const auto& pts = r.points;
  const auto at = [&](std::int64_t i) -> const PointResult& { return pts[static_cast<std::size_t>(i)]; };
  const auto money = [](double v) { return units::format(v, units::Dimension::Money, 4); };
  const auto line = [&](const char* what, std::int64_t i) {
    if (i < 0) return;
    const auto& p = at(i);
    out << (markdown ? "- **" : "") << what << (markdown ? ":** " : ": ") << describe_point(p.point) << ": "
        << text::printf("%.1f", p.tokens_per_s) << " tokens/s for " << money(p.capital.total().base()) << " ("
        << text::printf("%.3f", p.tokens_per_s_per_usd * 1000) << " tokens/s per 1,000 USD";
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
  std::vector<std::string> headers = {"configuration",  "tokens/s",   "source", "cost USD",
                                      "tok/s per kUSD", "USD/Mtoken", "Pareto"};
  if (serving) headers.insert(headers.begin() + 2, {"per user tok/s", "TTFT p99 s", "ITL p99 ms"});
  Table t(headers);
  for (std::size_t k = 0; k < ok.size() && k < max_rows; ++k) {
    const auto& p = at(ok[k]);
    std::vector<std::string> row = {
        describe_point(p.point),
        text::printf("%.1f", p.tokens_per_s),
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
    Table w({"workload", "cheapest configuration", "cost USD", "output tok/s", "TTFT p99 s", "ITL p99 ms"});
    const auto best = cheapest_per_workload(r);
    for (std::size_t k = 0; k < best.size(); ++k) {
      const std::string name = r.grid.workloads[k].at("name").get<std::string>();
      if (best[k] < 0) {
        w.add_row({name, "none meets the constraints", "-", "-", "-", "-"});
        continue;
      }
      const auto& p = at(best[k]);
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
    const std::string k = starts_with(p.status, "invalid") ? std::string("refused by the model") : p.status;
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
