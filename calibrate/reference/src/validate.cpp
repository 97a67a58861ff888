// `moesim validate`: the simulator on the reference run's configuration and trace (see validate.hpp).
#include "moesim/reference/validate.hpp"

#include <iomanip>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/sim/trace_io.hpp"

namespace moesim::reference {

void check_validate_options(const ValidateOptions& o, int ranks) {
  (void)model::load_node(o.hw);
  if (ranks > 1 && o.nic.empty()) {
    throw UserError("--nic: " + std::to_string(ranks) +
                    " ranks exchange expert outputs; give the profile of the link between them, e.g. measured with "
                    "`mpirun -np 2 moesim calibrate net --mpi --out mpi.json` on the same hosts");
  }
  if (!o.nic.empty()) (void)model::load_nic(o.nic);
}

ValidateResult validate_run(const RunResult& r, const ValidateOptions& o) {
  if (r.decode_steps() < 1) {
    throw UserError(
        "--tokens: the run has no decode step to compare (the first token comes from the prefill); "
        "generate at least 2 tokens, better 32 or more");
  }
  check_validate_options(o, r.ranks);
  ValidateResult v;
  scenario::SimulateRequest req;
  req.model = r.trace.header.model;
  req.hw = o.hw;
  req.nic = o.nic;  // loaded only for more than one node
  req.nodes = r.ranks;
  req.placement = o.placement;
  req.groups = o.groups;
  req.placement_file = o.placement_file;
  req.precision = "fp32";
  req.attention = std::string(sim::name_of(r.attention));
  req.balancing = std::string(sim::name_of(r.balancing));
  req.residency = false;
  req.lm_head = true;
  // The generated trace prepare_simulate would make is replaced by the run's own below: ask for one token.
  req.generate.tokens = 1;
  auto p = scenario::prepare_simulate(req);
  p.trace = decode_trace(r);
  sim::validate_trace(p.trace, "the reference run's trace");
  sim::check_trace_matches(p.trace, p.arch, "the reference run's trace");
  v.tokens = p.trace.tokens();
  // Mean KV-cache length over the decode steps.
  double context = 0;
  for (const auto pos : p.trace.position) context += static_cast<double>(pos);
  // Half up, as the results were recorded (context >= 0; std::lround differs at 0.49999999999999994).
  // NOLINTNEXTLINE(bugprone-incorrect-roundings)
  p.request.context = static_cast<std::int64_t>(context / static_cast<double>(v.tokens) + 0.5);

  model::NodeProfile node = p.node;
  if (r.ranks_on_host > 1) {
    const double share = 1.0 / r.ranks_on_host;
    auto& d = node.devices;
    if (d.memory_bandwidth) d.memory_bandwidth->value = d.memory_bandwidth->value * share;
    for (auto& [dtype, peak] : d.peak_flops) peak.value = peak.value * share;
    std::ostringstream s;
    s << r.ranks_on_host << " ranks share this host: each rank's node is " << node.id
      << " with memory bandwidth and FLOP peaks divided by " << r.ranks_on_host;
    v.assumptions.push_back(s.str());
  }
  auto cfg = scenario::decode_config(p, node, p.nic ? &*p.nic : nullptr);
  cfg.activation_bytes = 4.0;
  const auto run = sim::run_decode(cfg, p.trace);
  v.predicted = scenario::mean_split(run);
  v.measured = decode_split(r);
  v.node_id = node.id;
  v.nic_id = p.nic ? p.nic->id : "";
  for (const auto& a : run.assumptions) v.assumptions.push_back(a);
  return v;
}

namespace {

std::string ms(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << s * 1e3 << " ms";
  return o.str();
}

std::string pct(double predicted, double measured) {
  if (measured <= 0) return "n/a";
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(1) << (predicted - measured) / measured * 100 << "%";
  return o.str();
}

nlohmann::json seconds(double v) { return {{"value", v}, {"unit", "s"}}; }

}  // namespace

void print_validate(const RunResult& r, const ValidateResult& v, std::ostream& out) {
  out << "validate: " << r.trace.header.model << ", " << r.ranks << " rank(s), " << sim::name_of(r.attention)
      << ", balancing " << sim::name_of(r.balancing) << ", " << v.tokens << " decode tokens\n";
  out << "profile: " << v.node_id << (v.nic_id.empty() ? "" : ", link " + v.nic_id) << "\n\n";
  out << std::left << std::setw(24) << "per decode token" << std::right << std::setw(14) << "measured" << std::setw(14)
      << "predicted" << std::setw(10) << "error"
      << "\n";
  const auto row = [&](const char* what, double m, double p) {
    out << std::left << std::setw(24) << what << std::right << std::setw(14) << ms(m) << std::setw(14) << ms(p)
        << std::setw(10) << pct(p, m) << "\n";
  };
  row("time", v.measured.time, v.predicted.time);
  row("  misc (attn, router)", v.measured.misc, v.predicted.misc);
  row("  moe (experts)", v.measured.moe, v.predicted.moe);
  row("  comm (exchange)", v.measured.comm, v.predicted.comm);
  out << "\ndecode: measured " << std::fixed << std::setprecision(2) << 1.0 / v.measured.time << " tokens/s, predicted "
      << 1.0 / v.predicted.time << " tokens/s; error in decode time per token "
      << pct(v.predicted.time, v.measured.time) << "\n";
  for (const auto& a : v.assumptions) out << "assumption: " << a << "\n";
}

nlohmann::json validate_json(const RunResult& r, const ValidateResult& v) {
  nlohmann::json j;
  j["model"] = r.trace.header.model;
  j["ranks"] = r.ranks;
  j["attention"] = std::string(sim::name_of(r.attention));
  j["balancing"] = std::string(sim::name_of(r.balancing));
  j["decode_tokens"] = v.tokens;
  j["hw"] = v.node_id;
  j["nic"] = v.nic_id;
  const auto split = [](double t, double misc, double moe, double comm) {
    return nlohmann::json{
        {"time", seconds(t)}, {"misc", seconds(misc)}, {"moe", seconds(moe)}, {"comm", seconds(comm)}};
  };
  j["measured"] = split(v.measured.time, v.measured.misc, v.measured.moe, v.measured.comm);
  j["measured"]["wait"] = seconds(v.measured.wait);
  j["predicted"] = split(v.predicted.time, v.predicted.misc, v.predicted.moe, v.predicted.comm);
  j["error"] = {{"value", v.error() * 100}, {"unit", "%"}};
  j["assumptions"] = v.assumptions;
  return j;
}

}  // namespace moesim::reference
