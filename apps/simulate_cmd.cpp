// `moesim simulate`: the discrete-event replay of expert-parallel decode (scenario/simulate.hpp).

#include <algorithm>
#include <boost/program_options.hpp>

#include "commands.hpp"
#include "moesim/model/error.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/placement.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

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
  desc.add_options()("help,h", "show this help")(
      "scenario", po::value<std::string>(), "scenario JSON file (keys as the flags; flags given here override it)");
  const auto& keys = scenario::simulate_params();
  keys.add_flags(desc);
  // clang-format off
  desc.add_options()
    ("json", "print results as JSON ({name, value, unit} per metric, with the resolved scenario)")
    ("per-token", po::value<std::string>(), "write one CSV row per token (time split in seconds) to this file")
    ("chrome-trace", po::value<std::string>(), "write a Chrome/Perfetto trace of the first tokens to this file")
    ("chrome-tokens", po::value<std::int64_t>(), "tokens the Chrome trace covers (default 20)")
    ("timing", "also print the replay's wall time and events per second (left out by default so that the same "
               "inputs give byte-identical output)");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim simulate [--scenario FILE] [options]\n\n"
                     "Replays a routing trace token by token and layer by layer through a cluster of nodes and NICs "
                     "(discrete-event): tokens/s, the per-token time split (seed 000 Table 3), the measured E[active "
                     "experts per node per layer], per-node busy/idle and re-wiring. Defaults: the paper's P-LR-D on "
                     "2 Mac Studios over 10 GbE, 1000 uniformly routed tokens of DBRX.",
                     policies_help() +
                         keys.help("scenario keys (a --scenario file holds them; a flag given overrides its key)"))) {
    return 0;
  }
  scenario::SimulateRequest r;
  if (vm.count("scenario")) r = scenario::load_simulate_scenario(vm["scenario"].as<std::string>());
  keys.apply_flags(vm, r);

  scenario::SimulateOutputs o;
  if (vm.count("per-token")) o.per_token_csv = vm["per-token"].as<std::string>();
  if (vm.count("chrome-trace")) o.chrome_trace = vm["chrome-trace"].as<std::string>();
  if (vm.count("chrome-tokens")) {
    o.chrome_tokens = vm["chrome-tokens"].as<std::int64_t>();
    if (o.chrome_tokens < 1) throw UserError("--chrome-tokens must be at least 1");
  }
  const auto result = scenario::run_simulate(r, o);
  if (vm.count("json")) {
    out << scenario::simulate_to_json(result).dump(2) << "\n";
  } else {
    scenario::print_simulate_text(result, out, vm.count("timing") > 0);
  }
  return 0;
}

}  // namespace moesim::apps
