// `moesim simulate`: the discrete-event replay of expert-parallel decode (reports/simulate.hpp).

#include <algorithm>
#include <boost/program_options.hpp>

#include "commands.hpp"
#include "moesim/model/error.hpp"
#include "moesim/reports/simulate.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

bool on_off(const std::string& v, const std::string& flag) {
  if (v == "on" || v == "true" || v == "yes") return true;
  if (v == "off" || v == "false" || v == "no") return false;
  throw UserError(flag + " " + v + ": write on or off");
}

std::string policies_help() {
  std::string s = "\nstrategies (--strategy; --packing/--balancing/--attention override a part):\n";
  for (const auto& x : sim::strategies()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\npacking (--packing):\n";
  for (const auto& x : sim::packings()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nbalancing (--balancing):\n";
  for (const auto& x : sim::balancings()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nattention (--attention):\n";
  for (const auto& x : sim::attention_modes()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\ncollectives (--collective, decentralised attention):\n";
  for (const auto& x : sim::collectives()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nexpert execution (--experts):\n";
  for (const auto& x : cost::expert_executions()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nplacements (--placement):\n";
  for (const auto& x : sim::placements()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nThe time split follows seed 000 Table 3: MoE = computing experts (re-wiring included), comm = waiting on "
       "the network and on slower nodes, misc = attention, router and weighted sum. Residency parameters (the Metal "
       "driver's wiring) and the NIC's per-message overhead come from the profiles (`moesim hw`), with sources.\n";
  return s;
}

}  // namespace

int cmd_simulate(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("scenario", po::value<std::string>(), "scenario JSON file (keys as the flags; flags given here override it)")
    ("model", po::value<std::string>(), "zoo id or config.json path (default dbrx-instruct)")
    ("hw", po::value<std::string>(), "node profile id or path (default mac-studio-m2-ultra-192)")
    ("nic", po::value<std::string>(), "NIC profile id or path (default 10gbe-grpc)")
    ("nodes", po::value<std::int64_t>(), "number of nodes (default 2)")
    ("placement", po::value<std::string>(), "expert placement (default replicated-groups)")
    ("groups", po::value<std::int64_t>(), "replicated-groups: number of expert groups (default 2)")
    ("placement-file", po::value<std::string>(), "a custom placement JSON (implies --placement custom)")
    ("precision", po::value<std::string>(), "weight precision (default checkpoint: the format the model's config.json declares in quantization_config, else bf16)")
    ("strategy", po::value<std::string>(), "naive, P-LB or P-LR-D (default P-LR-D)")
    ("packing", po::value<std::string>(), "override the strategy's packing")
    ("balancing", po::value<std::string>(), "override the strategy's balancing")
    ("attention", po::value<std::string>(), "override the strategy's attention placement")
    ("collective", po::value<std::string>(), "exchange of decentralised nodes (default expert-outputs)")
    ("experts", po::value<std::string>(), "how a node runs the experts of a layer: its kernel launches (default fused)")
    ("contention", po::value<std::string>(), "on|off: flows share NIC bandwidth and sender overheads queue (default on)")
    ("residency", po::value<std::string>(), "on|off: model weight wiring when the node profile has it (default on)")
    ("start-cold", "every weight buffer starts unwired (default: wired, as after a warm-up)")
    ("context", po::value<std::int64_t>(), "tokens in the KV cache (default 0, as Equation 1)")
    ("lm-head", "count the LM head (Equation 1 omits it)")
    ("trace", po::value<std::string>(), "routing trace file (.jsonl or .mtrace, also gzip or zstd compressed); without it a trace is generated")
    ("tokens", po::value<std::int64_t>(), "tokens to replay: generated when there is no --trace (default 1000), else the first N")
    ("seed", po::value<std::string>(), "generator seed, 0 .. 2^64-1 (default 1)")
    ("requests", po::value<std::int64_t>(), "generator: requests the tokens are split into (default 1)")
    ("popularity", po::value<std::string>(), "generator: uniform, zipf or dirichlet (default uniform)")
    ("zipf-s", po::value<double>(), "generator: Zipf exponent")
    ("dirichlet-alpha", po::value<double>(), "generator: Dirichlet concentration")
    ("reuse", po::value<double>(), "generator: target fraction of a token's experts reused from the previous token")
    ("max-mean-load", po::value<double>(), "generator: target per-layer max/mean expert load over --window tokens")
    ("window", po::value<std::int64_t>(), "generator: tokens per load window (default 1024)")
    ("json", "print results as JSON ({name, value, unit} per metric, with the resolved scenario)")
    ("per-token", po::value<std::string>(), "write one CSV row per token (time split in seconds) to this file")
    ("chrome-trace", po::value<std::string>(), "write a Chrome/Perfetto trace of the first tokens to this file")
    ("chrome-tokens", po::value<std::int64_t>(), "tokens the Chrome trace covers (default 20)")
    ("timing", "also print the replay's wall time and events per second (left out by default so that the same "
               "inputs give byte-identical output)");
  // clang-format on
  const std::string runtime = runtime_help();
  desc.add_options()("runtime", po::value<std::string>(), runtime.c_str());
  add_streaming_options(desc);
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim simulate [--scenario FILE] [options]\n\n"
                     "Replays a routing trace token by token and layer by layer through a cluster of nodes and NICs "
                     "(discrete-event): tokens/s, the per-token time split (seed 000 Table 3), the measured E[active "
                     "experts per node per layer], per-node busy/idle and re-wiring. Defaults: the paper's P-LR-D on "
                     "2 Mac Studios over 10 GbE, 1000 uniformly routed tokens of DBRX.",
                     policies_help())) {
    return 0;
  }
  reports::SimulateRequest r;
  if (vm.count("scenario")) r = reports::load_simulate_scenario(vm["scenario"].as<std::string>());
  // A flag overrides the scenario file's key, and is reported as itself, not as the file's.
  auto flag_given = [&](const char* k) {
    std::string key = k;
    std::replace(key.begin(), key.end(), '-', '_');
    r.origins.erase(key);
  };
  auto str = [&](const char* k, std::string& dst) {
    if (vm.count(k)) {
      dst = vm[k].as<std::string>();
      flag_given(k);
    }
  };
  auto opt = [&](const char* k, std::optional<std::string>& dst) {
    if (vm.count(k)) {
      dst = vm[k].as<std::string>();
      flag_given(k);
    }
  };
  str("model", r.model);
  str("hw", r.hw);
  str("nic", r.nic);
  if (vm.count("nodes")) r.nodes = vm["nodes"].as<std::int64_t>();
  str("placement", r.placement);
  if (vm.count("groups")) {
    r.groups = vm["groups"].as<std::int64_t>();
    flag_given("groups");
  }
  str("placement-file", r.placement_file);
  str("precision", r.precision);
  str("strategy", r.strategy);
  opt("packing", r.packing);
  opt("balancing", r.balancing);
  opt("attention", r.attention);
  str("collective", r.collective);
  str("experts", r.experts);
  if (vm.count("contention")) r.contention = on_off(vm["contention"].as<std::string>(), "--contention");
  if (vm.count("residency")) r.residency = on_off(vm["residency"].as<std::string>(), "--residency");
  if (vm.count("start-cold")) r.start_wired = false;
  if (vm.count("context")) r.context = vm["context"].as<std::int64_t>();
  if (vm.count("lm-head")) r.lm_head = true;
  str("runtime", r.runtime);
  if (vm.count("stream-from")) flag_given("streaming");
  apply_streaming_options(vm, r.streaming);
  str("trace", r.trace);
  if (vm.count("tokens")) {
    const auto n = vm["tokens"].as<std::int64_t>();
    if (n < 1) throw UserError("--tokens " + std::to_string(n) + ": replay at least 1 token");
    if (r.trace.empty()) {
      r.generate.tokens = n;
    } else {
      r.max_tokens = n;
    }
  }
  if (vm.count("seed")) r.generate.seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  if (vm.count("requests")) r.generate.requests = vm["requests"].as<std::int64_t>();
  str("popularity", r.generate.popularity);
  if (vm.count("zipf-s")) r.generate.zipf_s = vm["zipf-s"].as<double>();
  if (vm.count("dirichlet-alpha")) r.generate.dirichlet_alpha = vm["dirichlet-alpha"].as<double>();
  if (vm.count("reuse")) r.generate.reuse = vm["reuse"].as<double>();
  if (vm.count("max-mean-load")) r.generate.max_mean_load = vm["max-mean-load"].as<double>();
  if (vm.count("window")) r.generate.window = vm["window"].as<std::int64_t>();
  if (r.context < 0) throw UserError("--context must be >= 0 tokens");

  reports::SimulateOutputs o;
  if (vm.count("per-token")) o.per_token_csv = vm["per-token"].as<std::string>();
  if (vm.count("chrome-trace")) o.chrome_trace = vm["chrome-trace"].as<std::string>();
  if (vm.count("chrome-tokens")) {
    o.chrome_tokens = vm["chrome-tokens"].as<std::int64_t>();
    if (o.chrome_tokens < 1) throw UserError("--chrome-tokens must be at least 1");
  }
  const auto result = reports::run_simulate(r, o);
  if (vm.count("json")) {
    out << reports::simulate_to_json(result).dump(2) << "\n";
  } else {
    reports::print_simulate_text(result, out, vm.count("timing") > 0);
  }
  return 0;
}

}  // namespace moesim::apps
