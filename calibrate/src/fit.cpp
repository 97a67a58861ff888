#include "moesim/calibrate/fit.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <set>

#include "moesim/calibrate/lsq.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/parallel.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/study.hpp"
#include "moesim/sim/decode.hpp"

namespace moesim::calibrate {

using units::Dimension;

double MeasuredRun::time() const { return time_per_token ? *time_per_token : 1.0 / *tokens_per_s; }

namespace {

MeasuredRuns measured_runs_from_json(
    const nlohmann::json& doc, const std::string& path,
    const std::function<scenario::SimulateRequest(const std::string&)>& scenario_file) {
  const json::Node root(doc, path);
  root.expect_only({"description", "source", "runs", "note"});
  MeasuredRuns out;
  out.path = path;
  out.description = root.optional_string("description").value_or("");
  out.source = root.string("source");
  if (out.source.empty()) throw root.error("source", "is empty; say where the measurements come from");
  const auto runs = root.elements("runs");
  if (runs.empty()) throw root.error("runs", "is empty; give at least one measured run");
  std::set<std::string> names;
  for (const auto& r : runs) {
    r.expect_only({"name", "source", "scenario", "scenario_file", "measured", "note"});
    MeasuredRun m;
    m.where = r.where();
    m.name = r.string("name");
    if (!names.insert(m.name).second)
      throw r.error("name", "\"" + m.name + "\" is used by an earlier run; give every run its own name");
    m.source = r.optional_string("source").value_or(out.source);
    if (r.has("scenario") == r.has("scenario_file"))
      throw r.error(
          "give exactly one of \"scenario\" (an object with the keys of a simulate scenario) or "
          "\"scenario_file\" (a path relative to this file)");
    if (r.has("scenario")) {
      m.scenario = scenario::load_simulate_scenario(r.child("scenario"));
    } else {
      m.scenario = scenario_file(r.string("scenario_file"));
    }
    try {
      (void)model::load_model(m.scenario.model);
    } catch (const UserError& e) {
      throw UserError(r.where("scenario") + ".model: " + e.what());
    }
    const json::Node meas = r.child("measured");
    meas.expect_only({"tokens_per_s", "time_per_token", "split", "note"});
    if (meas.has("tokens_per_s")) {
      m.tokens_per_s = meas.number("tokens_per_s");
      if (!(*m.tokens_per_s > 0)) throw meas.error("tokens_per_s", "must be a positive number of tokens per second");
    }
    if (auto t = meas.optional_quantity<Dimension::Time>("time_per_token")) m.time_per_token = t->base();
    if (!m.tokens_per_s && !m.time_per_token) {
      throw meas.error(
          "has neither tokens_per_s nor time_per_token; give the run's measured decode speed, e.g. "
          "\"tokens_per_s\": 6.1 or \"time_per_token\": \"0.166s\"");
    }
    if (auto split = meas.optional_child("split")) {
      split->expect_only({"moe", "comm", "misc"});
      auto part = [&](const char* k) -> std::optional<double> {
        if (auto q = split->optional_quantity<Dimension::Time>(k, true)) return q->base();
        return std::nullopt;
      };
      m.moe = part("moe");
      m.comm = part("comm");
      m.misc = part("misc");
      const double sum = m.moe.value_or(0) + m.comm.value_or(0) + m.misc.value_or(0);
      if (sum > m.time() * 1.05) {
        throw split->error("adds up to " + text::printf("%.4g", sum) + " s, more than the time per token (" +
                           text::printf("%.4g", m.time()) + " s); check the figures");
      }
    }
    out.runs.push_back(std::move(m));
  }
  return out;
}

}  // namespace

MeasuredRuns load_measured_runs(const std::string& path) {
  return measured_runs_from_json(json::load_file(path), path, [&](const std::string& rel) {
    return scenario::load_simulate_scenario((std::filesystem::path(path).parent_path() / rel).string());
  });
}

MeasuredRuns builtin_measured_runs(const std::string& file) {
  const std::string origin = "built-in examples/" + file;
  return measured_runs_from_json(scenario::builtin_example(file), origin, [&](const std::string& rel) {
    const std::string name = std::filesystem::path(rel).filename().string();
    const nlohmann::json scenario = scenario::builtin_example(name);
    return scenario::load_simulate_scenario(json::Node(scenario, "built-in examples/" + name));
  });
}

// ---------------------------------------------------------------------------------------------------
// The parameters.

namespace {

model::Sourced<units::Duration> duration_figure(double s, std::string source) {
  return {units::seconds(s), std::move(source)};
}

/// The memory efficiency a node's expert-sized kernels get (1 without a table).
double memory_scale(const model::NodeProfile& n) {
  if (!n.devices.efficiency || n.devices.efficiency->memory.empty()) return 1.0;
  return n.devices.efficiency->memory.front().value;
}

}  // namespace

const std::vector<FitParameter>& fit_parameters() {
  static const std::vector<FitParameter> all = [] {
    std::vector<FitParameter> list;
    list.push_back({"memory_efficiency", "ratio",
                    "achieved / peak memory bandwidth of the kernels (scales every band of devices.efficiency.memory; "
                    "a profile without a table gets one band covering all sizes)",
                    "devices.efficiency.memory", false, 0.01, 4.0, 1.0,
                    [](const model::NodeProfile& n, const model::NicProfile*) { return memory_scale(n); },
                    [](model::NodeProfile& n, model::NicProfile*, double v, const model::NodeProfile& base) {
                      const double start = memory_scale(base);
                      model::EfficiencyTable t = base.devices.efficiency.value_or(model::EfficiencyTable{});
                      if (t.memory.empty()) {
                        t.memory.push_back({units::bytes(0), units::bytes(1e18), 1.0, 0});
                      }
                      for (auto& b : t.memory) b.value *= v / start;
                      n.devices.efficiency = t;
                    }});
    list.push_back({"layer_overhead", "s",
                    "fixed time per decoder layer outside the kernels (framework dispatch, Python), counted as misc",
                    "devices.layer_overhead", false, 0.0, 1.0, 1e-3,
                    [](const model::NodeProfile& n, const model::NicProfile*) {
                      return n.devices.layer_overhead ? n.devices.layer_overhead->value.base() : 0.0;
                    },
                    [](model::NodeProfile& n, model::NicProfile*, double v, const model::NodeProfile&) {
                      n.devices.layer_overhead = duration_figure(v, "fitted");
                    }});
    list.push_back(
        {"message_latency", "s",
         "one-way time per message between nodes (software + wire); the sender's overhead keeps its "
         "share of it",
         "latency (and overhead)", true, 1e-7, 1.0, 1e-3,
         [](const model::NodeProfile&, const model::NicProfile* nic) { return nic ? nic->latency.value.base() : 0.0; },
         [](model::NodeProfile&, model::NicProfile* nic, double v, const model::NodeProfile&) {
           if (!nic) return;
           if (nic->overhead) {
             const double share = nic->overhead->value.base() / nic->latency.value.base();
             nic->overhead->value = units::seconds(v * share);
           }
           nic->latency.value = units::seconds(v);
         }});
    list.push_back({"rewire_bandwidth", "B/s",
                    "bytes per second the driver re-wires an unwired weight buffer at (residency.rewire_bandwidth)",
                    "residency.rewire_bandwidth", false, 1e6, 1e14, 1e10,
                    [](const model::NodeProfile& n, const model::NicProfile*) {
                      return n.residency ? n.residency->rewire_bandwidth.value.base() : 0.0;
                    },
                    [](model::NodeProfile& n, model::NicProfile*, double v, const model::NodeProfile&) {
                      if (n.residency) n.residency->rewire_bandwidth.value = units::Bandwidth::from_base(v);
                    }});
    list.push_back({"kernel_overhead", "s", "fixed time per kernel launch, added to every kernel's roofline time",
                    "devices.kernel_overhead", false, 0.0, 0.1, 1e-4,
                    [](const model::NodeProfile& n, const model::NicProfile*) {
                      return n.devices.kernel_overhead ? n.devices.kernel_overhead->value.base() : 0.0;
                    },
                    [](model::NodeProfile& n, model::NicProfile*, double v, const model::NodeProfile&) {
                      n.devices.kernel_overhead = duration_figure(v, "fitted");
                    }});
    return list;
  }();
  return all;
}

std::vector<std::string> default_fit_parameters() {
  return {"memory_efficiency", "layer_overhead", "message_latency", "rewire_bandwidth"};
}

const FitParameter& fit_parameter(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : fit_parameters()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  throw UserError("--fit: unknown parameter '" + name + "'" + text::did_you_mean(name, names) +
                  "; parameters: " + text::join(names) + " (see `moesim calibrate fit --help`)");
}

// ---------------------------------------------------------------------------------------------------
// The fit.

namespace {

struct Prepared {
  const MeasuredRun* run = nullptr;
  scenario::PreparedSimulate sim;
  bool fitted = true;
};

struct Problem {
  std::vector<Prepared> runs;
  model::NodeProfile base_node;
  std::optional<model::NicProfile> base_nic;
  std::vector<const FitParameter*> params;
  std::vector<double> scale;                  ///< value = u × scale
  std::atomic<std::int64_t> simulations = 0;  ///< counted from the leave-one-out refits' threads too

  /// The profiles at normalised values u (one per parameter).
  std::pair<model::NodeProfile, std::optional<model::NicProfile>> profiles(const std::vector<double>& u) const {
    model::NodeProfile node = base_node;
    std::optional<model::NicProfile> nic = base_nic;
    for (std::size_t j = 0; j < params.size(); ++j)
      params[j]->set(node, nic ? &*nic : nullptr, u[j] * scale[j], base_node);
    return {node, nic};
  }

  scenario::TimeSplit simulate(const Prepared& p, const model::NodeProfile& node,
                               const std::optional<model::NicProfile>& nic) {
    ++simulations;
    const sim::DecodeConfig c = scenario::decode_config(p.sim, node, p.sim.request.nodes > 1 && nic ? &*nic : nullptr);
    return scenario::mean_split(sim::run_decode(c, p.sim.trace));
  }

  /// Relative residuals of the runs selected by `use`, in a fixed order.
  std::vector<double> residuals(const std::vector<double>& u, const std::vector<bool>& use) {
    const auto [node, nic] = profiles(u);
    std::vector<double> r;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (!use[i]) continue;
      const MeasuredRun& m = *runs[i].run;
      const scenario::TimeSplit s = simulate(runs[i], node, nic);
      if (m.moe || m.comm || m.misc) {
        if (m.moe) r.push_back((s.moe - *m.moe) / *m.moe);
        if (m.comm) r.push_back((s.comm - *m.comm) / *m.comm);
        if (m.misc) r.push_back((s.misc - *m.misc) / *m.misc);
      } else {
        r.push_back((s.time - m.time()) / m.time());
      }
    }
    return r;
  }
};

/// Residuals a run contributes: one per measured split component, else one for its time.
std::size_t observation_count(const MeasuredRun& m) {
  const std::size_t parts = (m.moe ? 1 : 0) + (m.comm ? 1 : 0) + (m.misc ? 1 : 0);
  return parts > 0 ? parts : 1;
}

double sum_sq(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x * x;
  return s;
}

struct Solution {
  std::vector<double> u;
  std::vector<bool> active;
  double cost = 0;
  std::int64_t iterations = 0;
  bool converged = false;
};

/// Levenberg-Marquardt over the parameters marked `active`, within their bounds.
Solution solve(Problem& pb, std::vector<double> u, std::vector<bool> active, const std::vector<bool>& use,
               std::int64_t max_iterations, bool drop_insensitive,
               const std::function<void(const std::string&)>& progress) {
  const std::size_t p = u.size();
  std::vector<double> lo(p), hi(p);
  for (std::size_t j = 0; j < p; ++j) {
    lo[j] = pb.params[j]->lower / pb.scale[j];
    hi[j] = pb.params[j]->upper / pb.scale[j];
  }
  std::vector<double> r = pb.residuals(u, use);
  double cost = sum_sq(r);
  double lambda = 1e-2;
  Solution s;
  for (s.iterations = 0; s.iterations < max_iterations; ++s.iterations) {
    // Forward-difference Jacobian; a step of 1% of the parameter's scale smooths the simulator's
    // discrete effects (integer picoseconds, re-wire thresholds) without losing the slope.
    std::vector<std::size_t> cols;
    for (std::size_t j = 0; j < p; ++j)
      if (active[j]) cols.push_back(j);
    if (cols.empty()) break;
    Matrix jac(r.size(), cols.size());
    for (std::size_t c = 0; c < cols.size(); ++c) {
      const std::size_t j = cols[c];
      double h = 0.01 * std::max(std::fabs(u[j]), 1.0);
      if (u[j] + h > hi[j]) h = -h;
      std::vector<double> up = u;
      up[j] += h;
      const std::vector<double> rp = pb.residuals(up, use);
      double norm = 0;
      for (std::size_t i = 0; i < r.size(); ++i) {
        jac(i, c) = (rp[i] - r[i]) / h;
        norm += jac(i, c) * jac(i, c);
      }
      if (drop_insensitive && s.iterations == 0 && std::sqrt(norm) < 1e-6) active[j] = false;
    }
    if (drop_insensitive && s.iterations == 0) {
      // Rebuild without the parameters these runs do not constrain.
      std::vector<std::size_t> kept;
      for (std::size_t c = 0; c < cols.size(); ++c)
        if (active[cols[c]]) kept.push_back(c);
      if (kept.size() != cols.size()) {
        Matrix k(r.size(), kept.size());
        for (std::size_t i = 0; i < r.size(); ++i)
          for (std::size_t c = 0; c < kept.size(); ++c) k(i, c) = jac(i, kept[c]);
        std::vector<std::size_t> kc;
        kc.reserve(kept.size());
        for (const auto c : kept) kc.push_back(cols[c]);
        jac = k;
        cols = kc;
      }
      if (cols.empty()) break;
    }
    // Damped step: minimise |J d + r|^2 + lambda |D d|^2, D = the column norms (Marquardt's scaling).
    bool improved = false;
    double new_cost = cost;
    std::vector<double> new_u = u, new_r = r;
    while (lambda < 1e10) {
      Matrix a(r.size() + cols.size(), cols.size());
      std::vector<double> b(r.size() + cols.size(), 0.0);
      for (std::size_t i = 0; i < r.size(); ++i) {
        for (std::size_t c = 0; c < cols.size(); ++c) a(i, c) = jac(i, c);
        b[i] = -r[i];
      }
      for (std::size_t c = 0; c < cols.size(); ++c) {
        double d = 0;
        for (std::size_t i = 0; i < r.size(); ++i) d += jac(i, c) * jac(i, c);
        a(r.size() + c, c) = std::sqrt(lambda * std::max(d, 1e-12));
      }
      const LeastSquares step = least_squares(a, b);
      new_u = u;
      for (std::size_t c = 0; c < cols.size(); ++c)
        new_u[cols[c]] = std::clamp(u[cols[c]] + step.x[c], lo[cols[c]], hi[cols[c]]);
      new_r = pb.residuals(new_u, use);
      new_cost = sum_sq(new_r);
      if (new_cost < cost) {
        improved = true;
        lambda = std::max(lambda / 3.0, 1e-9);
        break;
      }
      lambda *= 4.0;
    }
    if (!improved) {
      s.converged = true;  // no descent direction left at any damping: a (local) minimum
      break;
    }
    double moved = 0;
    for (std::size_t j = 0; j < p; ++j)
      moved = std::max(moved, std::fabs(new_u[j] - u[j]) / std::max(1.0, std::fabs(u[j])));
    const double gain = (cost - new_cost) / std::max(cost, 1e-300);
    u = new_u;
    r = new_r;
    cost = new_cost;
    if (progress)
      progress("iteration " + std::to_string(s.iterations + 1) + ": rms relative error " +
               text::printf("%.4f", std::sqrt(cost / static_cast<double>(std::max<std::size_t>(1, r.size())))));
    // Stop when a step no longer changes anything a measurement could tell apart: the sum of squares falls
    // by under 1e-6 of itself (the rms error by under 5e-7 of itself) or no parameter moves by 1e-6 of
    // its value. Measured runs repeat to about 1% (seed 000's tables), and the simulator's discrete
    // effects (integer picoseconds) leave a floor of the same order, so the iterations past this point
    // only polished the fourth digit at one full Jacobian each (MINPACK's lmder uses the same two tests,
    // ftol and xtol, with 1.5e-8 for smooth functions; More, "The Levenberg-Marquardt algorithm:
    // implementation and theory", 1978).
    if (gain < 1e-6 || moved < 1e-6) {
      s.converged = true;
      ++s.iterations;
      break;
    }
  }
  s.u = u;
  s.active = active;
  s.cost = cost;
  return s;
}

std::string num(double v, const char* unit) { return text::short_number(v) + unit; }

nlohmann::json band_json(const model::EfficiencyBand& b) {
  nlohmann::json j = {{"from", num(b.from.base(), "B")}, {"to", num(b.to.base(), "B")}, {"value", b.value}};
  if (b.samples > 0) j["samples"] = b.samples;
  return j;
}

/// The node and NIC profile ids of a fit: given, or the one every run (every multi-node run, for the NIC)
/// names. The NIC id is empty when no run spans nodes.
std::pair<std::string, std::string> fit_profile_ids(const MeasuredRuns& measured, const FitOptions& o) {
  auto common = [&](auto field, const char* key) {
    std::string v = field(measured.runs.front().scenario);
    for (const auto& r : measured.runs) {
      if (field(r.scenario) != v) {
        throw UserError(measured.path + ": the runs name different " + key + " profiles ('" + v + "', '" +
                        field(r.scenario) + "'); fit one profile at a time: give --" +
                        (std::string(key) == "hw" ? "profile" : "nic") + " or keep runs of one machine in the file");
      }
    }
    return v;
  };
  std::string node_id = o.node.empty() ? common([](const auto& s) { return s.hw; }, "hw") : o.node;
  bool any_cluster = false;
  for (const auto& r : measured.runs) any_cluster = any_cluster || r.scenario.nodes > 1;
  std::string nic_id;
  if (any_cluster) {
    if (o.nic.empty()) {
      std::vector<const MeasuredRun*> multi;
      for (const auto& r : measured.runs)
        if (r.scenario.nodes > 1) multi.push_back(&r);
      nic_id = multi.front()->scenario.nic;
      for (const auto* r : multi) {
        if (r->scenario.nic != nic_id)
          throw UserError(measured.path + ": the runs name different NIC profiles ('" + nic_id + "', '" +
                          r->scenario.nic + "'); give --nic or fit one NIC at a time");
      }
    } else {
      nic_id = o.nic;
    }
  }
  return {node_id, nic_id};
}

/// Every measured run, prepared for simulation on the fit's profiles; fitted unless --runs leaves it out.
void prepare_fit_runs(Problem& pb, const MeasuredRuns& measured, const FitOptions& o, const std::string& node_id,
                      const std::string& nic_id) {
  std::set<std::string> fit_names(o.fit_runs.begin(), o.fit_runs.end());
  for (const auto& n : fit_names) {
    if (std::none_of(measured.runs.begin(), measured.runs.end(), [&](const auto& r) { return r.name == n; })) {
      std::vector<std::string> names;
      for (const auto& r : measured.runs) names.push_back(r.name);
      throw UserError("--runs: " + measured.path + " has no run named '" + n + "'" + text::did_you_mean(n, names) +
                      "; runs: " + text::join(names));
    }
  }
  for (std::size_t i = 0; i < measured.runs.size(); ++i) {
    const MeasuredRun& m = measured.runs[i];
    scenario::SimulateRequest req = m.scenario;
    req.hw = node_id;
    if (!nic_id.empty()) req.nic = nic_id;
    Prepared p;
    p.run = &m;
    try {
      p.sim = scenario::prepare_simulate(req);
    } catch (const UserError& e) {
      throw UserError(m.where + ".scenario: " + e.what());
    }
    p.fitted = fit_names.empty() || fit_names.count(m.name) > 0;
    pb.runs.push_back(std::move(p));
  }
}

/// The fitted parameters (given, or the defaults) into `pb`, and their normalised start values.
std::vector<double> add_fit_parameters(Problem& pb, const FitOptions& o) {
  std::vector<std::string> names = o.parameters;
  if (names.empty()) names = default_fit_parameters();
  std::vector<double> u;
  for (const auto& n : names) {
    const FitParameter& p = fit_parameter(n);
    if (std::find(pb.params.begin(), pb.params.end(), &p) != pb.params.end())
      throw UserError("--fit: '" + n + "' is given twice");
    const double start = p.get(pb.base_node, pb.base_nic ? &*pb.base_nic : nullptr);
    // A parameter whose field the profiles lack (no NIC, no residency) leaves every run unchanged: the
    // solver's sensitivity check marks it not constrained, like any other parameter the runs cannot move.
    pb.params.push_back(&p);
    pb.scale.push_back(std::max(std::fabs(start), p.typical));
    u.push_back(start / pb.scale.back());
  }
  return u;
}

/// Predictions: every run at the fitted values; leave-one-out for each fitted run, the refits on
/// `o.threads` threads (each refit reads the problem and writes only its own run's prediction).
void predict_fit_runs(FitResult& out, Problem& pb, const Solution& best, const std::vector<bool>& use,
                      const model::NodeProfile& node, const std::optional<model::NicProfile>& nic, const FitOptions& o,
                      const std::function<void(const std::string&)>& progress) {
  const auto fitted_runs = static_cast<std::size_t>(std::count(use.begin(), use.end(), true));
  std::vector<std::size_t> refits;
  for (std::size_t i = 0; i < pb.runs.size(); ++i) {
    const MeasuredRun& m = *pb.runs[i].run;
    RunPrediction rp;
    rp.name = m.name;
    rp.fitted = pb.runs[i].fitted;
    rp.measured_time = m.time();
    rp.moe = m.moe;
    rp.comm = m.comm;
    rp.misc = m.misc;
    rp.predicted = pb.simulate(pb.runs[i], node, nic);
    if (o.leave_one_out && rp.fitted && fitted_runs >= 2) refits.push_back(i);
    out.runs.push_back(rp);
  }
  std::mutex progress_lock;
  std::size_t finished = 0;
  model::parallel_for(refits.size(), o.threads, [&](std::size_t k) {
    const std::size_t i = refits[k];
    std::vector<bool> others = use;
    others[i] = false;
    const Solution loo = solve(pb, best.u, best.active, others, o.max_iterations, false, {});
    const auto [ln, lnic] = pb.profiles(loo.u);
    out.runs[i].loo_time = pb.simulate(pb.runs[i], ln, lnic).time;
    if (progress) {
      const std::lock_guard<std::mutex> hold(progress_lock);
      progress("leave-one-out: refitted without " + out.runs[i].name + " (" + std::to_string(++finished) + " of " +
               std::to_string(refits.size()) + ")");
    }
  });
}

/// The documents: the profile files as written, with the fitted figures replaced.
void write_fitted_documents(FitResult& out, const Problem& pb, const Solution& best, const std::string& node_id,
                            const std::string& nic_id) {
  out.node_document = model::load_node_document(node_id);
  if (out.has_nic) out.nic_document = model::load_nic_document(nic_id);
  const model::NodeProfile& node = out.node;
  for (std::size_t j = 0; j < pb.params.size(); ++j) {
    if (!best.active[j]) continue;
    const std::string& n = pb.params[j]->name;
    const double v = best.u[j] * pb.scale[j];
    auto& d = out.node_document;
    if (n == "memory_efficiency") {
      nlohmann::json t = {{"source", "fitted"}, {"memory", nlohmann::json::array()}};
      for (const auto& b : node.devices.efficiency->memory) t["memory"].push_back(band_json(b));
      if (!node.devices.efficiency->compute.empty()) {
        t["compute"] = nlohmann::json::array();
        for (const auto& b : node.devices.efficiency->compute) t["compute"].push_back(band_json(b));
      }
      d["devices"]["efficiency"] = t;
    } else if (n == "layer_overhead") {
      d["devices"]["layer_overhead"] = {{"value", num(v, "s")}, {"source", "fitted"}};
    } else if (n == "kernel_overhead") {
      d["devices"]["kernel_overhead"] = {{"value", num(v, "s")}, {"source", "fitted"}};
    } else if (n == "rewire_bandwidth") {
      d["residency"]["rewire_bandwidth"] = {{"value", num(v, "B/s")}, {"source", "fitted"}};
    } else if (n == "message_latency") {
      out.nic_document["latency"] = {{"value", num(out.nic.latency.value.base(), "s")}, {"source", "fitted"}};
      if (out.nic.overhead)
        out.nic_document["overhead"] = {{"value", num(out.nic.overhead->value.base(), "s")}, {"source", "fitted"}};
    }
  }
}

}  // namespace

FitResult fit_runs(const MeasuredRuns& measured, const FitOptions& o,
                   const std::function<void(const std::string&)>& progress) {
  Problem pb;
  const auto [node_id, nic_id] = fit_profile_ids(measured, o);
  pb.base_node = model::load_node(node_id);
  if (!nic_id.empty()) pb.base_nic = model::load_nic(nic_id);

  for (const auto& n : o.parameters) (void)fit_parameter(n);  // unknown names fail before any work

  prepare_fit_runs(pb, measured, o, node_id, nic_id);
  const std::vector<double> u0 = add_fit_parameters(pb, o);  // the start values
  const std::vector<bool> active(u0.size(), true);

  std::vector<bool> use(pb.runs.size());
  for (std::size_t i = 0; i < pb.runs.size(); ++i) use[i] = pb.runs[i].fitted;
  const Solution best = solve(pb, u0, active, use, o.max_iterations, true, progress);

  FitResult out;
  out.iterations = best.iterations;
  out.converged = best.converged;
  std::size_t observations = 0;
  for (std::size_t i = 0; i < pb.runs.size(); ++i)
    if (use[i]) observations += observation_count(*pb.runs[i].run);
  out.observations = observations;
  out.rms_relative = std::sqrt(best.cost / static_cast<double>(std::max<std::size_t>(1, observations)));
  for (std::size_t j = 0; j < pb.params.size(); ++j) {
    out.parameters.push_back({pb.params[j]->name, pb.params[j]->unit, u0[j] * pb.scale[j], best.u[j] * pb.scale[j],
                              static_cast<bool>(best.active[j])});
  }
  auto [node, nic] = pb.profiles(best.u);
  predict_fit_runs(out, pb, best, use, node, nic, o, progress);
  out.simulations = pb.simulations.load();

  out.node = node;
  if (nic) {
    out.nic = *nic;
    out.has_nic = true;
  }
  write_fitted_documents(out, pb, best, node_id, nic_id);
  return out;
}

}  // namespace moesim::calibrate
