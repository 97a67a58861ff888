// The sweep's stages: the analytic screen and the simulation of the best points (run_sweep), and the
// re-simulation of a calibrated sweep (calibrate_points); what each stage computes for one point.
#include "moesim/reports/sweep.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/reports/compare.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/scenario/study.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"
#include "sweep_detail.hpp"

namespace moesim::reports {

namespace sweep_detail {

std::string point_source(const Grid& g, const GridPoint& p) {
  return g.origin + " (point " + std::to_string(p.index) + ": " + describe_point(p) + ")";
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
  apply_settings(doc, p.settings);
  return doc;
}

nlohmann::json tensor_parallel_doc(const Grid& g, const GridPoint& p) {
  nlohmann::json doc = single_user_scenario(p.model, p.hw, p.precision, "fused", 1, {{"tp", p.tensor_parallel}}, 0);
  if (auto rt = g.runtimes.find(p.hw); rt != g.runtimes.end()) doc["runtime"] = rt->second;
  apply_settings(doc, p.settings, true);
  return doc;
}

scenario::SimulateRequest decode_request(const Grid& g, const GridPoint& p) {
  scenario::SimulateRequest r;
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
  if (!p.settings.empty())
    scenario::simulate_params().read(json::Node(settings_object(p.settings), point_source(g, p)), r);
  return r;
}

}  // namespace sweep_detail

namespace {

/// A serving scenario run for a point, named after the grid and the point in its messages.
scenario::ServeScenario point_scenario(const Grid& g, const GridPoint& p, nlohmann::json doc) {
  scenario::ServeScenario s;
  s.doc = std::move(doc);
  s.source = sweep_detail::point_source(g, p);
  s.base_dir = g.base_dir;
  return s;
}

void analytic_point(const Grid& g, const sweep_detail::Resolved& res, PointResult& out) {
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
      const sim::MemoryPlan m = scenario::serve_memory_plan(point_scenario(g, p, sweep_detail::serve_doc(g, p)));
      out.fits = m.fits;
      out.device_memory_needed = (m.weights + m.activations).base();
      out.device_memory_usable = m.usable.base();
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

void simulate_point(const Grid& g, const SweepOptions& o, PointResult& out) {
  const GridPoint& p = out.point;
  try {
    // Serves the point's scenario, and writes its Chrome trace when asked.
    // A point whose hardware has a fitted runtime gets its figure's range (ServeRange: the serving runs
    // twice more; RuntimeProfile::interval for the decode simulator's tokens/s).
    auto serve = [&](nlohmann::json doc) {
      scenario::ServeRun run = scenario::run_serve(point_scenario(g, p, std::move(doc)), {}, /*range=*/true);
      if (!o.traces_dir.empty())
        write_file_atomically((o.traces_dir / ("point-" + std::to_string(p.index) + ".json")).string(), [&] {
          std::ostringstream t;
          scenario::write_serve_chrome_trace(run, t);
          return t.str();
        }());
      return run;
    };
    if (g.serving()) {
      const scenario::ServeRun run = serve(sweep_detail::serve_doc(g, p));
      const auto& res = run.result;
      out.output_tokens_per_s = res.output_throughput;
      out.per_user_tokens_per_s = res.tpot.mean > 0 ? 1.0 / res.tpot.mean : 0;
      out.ttft_p50 = res.ttft.median;
      out.ttft_p99 = res.ttft.p99;
      out.itl_p50 = res.itl.median;
      out.itl_p99 = res.itl.p99;
      out.goodput = res.goodput;
      if (run.range)
        std::tie(out.tokens_per_s_low, out.tokens_per_s_high) =
            run.range->interval([](const sim::ServingResult& x) { return x.output_throughput; });
      out.instrument = "serving-sim";
    } else if (p.tensor_parallel > 0) {
      if (const std::string k = sweep_detail::decode_only_axis(p); !k.empty())
        throw UserError("the axis \"" + k + "\" is a key of the decode simulator, and this point (one node of " +
                        std::to_string(p.tensor_parallel) +
                        " devices) runs the serving simulator tensor-parallel, which has no such key");
      // One server of several GPUs runs the model tensor-parallel over them (vLLM, TensorRT-LLM), not the
      // Mac cluster's expert-parallel strategy: its single-user figure comes from the serving simulator.
      const scenario::ServeRun run = serve(sweep_detail::tensor_parallel_doc(g, p));
      const auto per_user = [](const sim::ServingResult& x) { return x.tpot.mean > 0 ? 1.0 / x.tpot.mean : 0.0; };
      out.sim_tokens_per_s = per_user(run.result);
      if (run.range) std::tie(out.tokens_per_s_low, out.tokens_per_s_high) = run.range->interval(per_user);
      out.instrument = "serving-sim (TP " + std::to_string(p.tensor_parallel) + ")";
    } else {
      scenario::SimulateOutputs outputs;
      if (!o.traces_dir.empty())
        outputs.chrome_trace = (o.traces_dir / ("point-" + std::to_string(p.index) + ".json")).string();
      const scenario::SimulateResult r = scenario::run_simulate(sweep_detail::decode_request(g, p), outputs);
      const scenario::TimeSplit split = scenario::mean_split(r.run);
      out.sim_tokens_per_s = r.run.tokens_per_second;
      out.split_moe = split.moe;
      out.split_comm = split.comm;
      out.split_misc = split.misc;
      if (r.runtime && !r.runtime->interval_source.empty())
        std::tie(out.tokens_per_s_low, out.tokens_per_s_high) = r.runtime->interval(r.run.tokens_per_second);
      out.instrument = "decode-sim";
    }
    out.simulated = true;
  } catch (const UserError& e) {
    out.status = std::string("invalid: ") + e.what();
  }
}

}  // namespace

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
  sweep_detail::run_stage("calibrate", todo, r.points, o, self, [&](PointResult& out) {
    const GridPoint& p = out.point;
    const scenario::PreparedSimulate prepared = scenario::prepare_simulate(sweep_detail::decode_request(g, p));
    const model::NicProfile* nic = nullptr;
    if (p.nodes > 1 && prepared.nic) nic = p.nic == with.nic && with.nic_profile ? &*with.nic_profile : &*prepared.nic;
    const sim::DecodeResult run = sim::run_decode(scenario::decode_config(prepared, with.node, nic), prepared.trace);
    const scenario::TimeSplit split = scenario::mean_split(run);
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
  const sweep_detail::Resolved res = sweep_detail::resolve(g);
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
  sweep_detail::run_stage("analytic", all, r.points, o, comm, [&](PointResult& p) { analytic_point(g, res, p); });
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
    sweep_detail::run_stage("simulate", chosen, r.points, o, comm, [&](PointResult& p) { simulate_point(g, o, p); });
    for (auto i : candidates) {
      auto& p = r.points[static_cast<std::size_t>(i)];
      if (!p.simulated && p.status == "ok") p.status = "not simulated: ranked below the simulated points";
    }
  }

  r.answers.over = want != 0 ? "simulated" : "analytic";
  rank_points(r);
  return r;
}

}  // namespace moesim::reports
