// `moesim sweep`: a grid of configurations screened by the analytic model, the promising points
// simulated, the purchase question answered (reports/sweep.hpp). Under mpirun the grid is split across
// ranks and gathered, with the same output as one process.

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "commands.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reference/run.hpp"
#include "moesim/reports/sweep.hpp"

namespace po = boost::program_options;

namespace moesim::apps {

namespace {

const char* const kGridHelp = R"(
grid file (JSON; every axis a list, the point set their cartesian product):
  models       zoo ids or config.json paths                      ["dbrx-instruct"]
  hw           node profiles                                      ["mac-studio-m2-ultra-192", "dgx-h100"]
  nodes        node counts, a list or "2-8"                        [1, 2, 4, 8]          (default [1])
  nics         NIC profiles (node counts > 1 need them)           ["10gbe-grpc", "rocev2-25g"]
  precisions   weight precisions                                   ["bf16", "fp8"]       (default bf16)
  runtimes     the software on a node profile (`moesim hw` lists   {"l4": "flexflow"}
               them); points on it run with it (estimate --help)
  placements   expert placements                                   (default replicated-groups)
  strategies   decode strategies for the simulator (seed 000)      ["naive", "P-LB", "P-LR-D"] (default P-LR-D)
  workloads    serving grids: named partial serve scenarios        [{"name": "2/s", "workload": {...}}]
  plans        serving grids: named parallel plans                 [{"name": "tp8", "plan": {"tp": 8}}]
  axes         any other scenario key, by its dotted name: each     {"scheduler.max_num_seqs": [64, 256],
               value a point of its own. A serving grid's are the    "workload.rate": ["1/s", "4/s"]}
               keys of `moesim serve --help`, a decode grid's those
               of `moesim simulate --help` ("scenario keys"); a
               workload's own keys as "workload.rate". The analytic
               screen sees the lists above only.
  constraints  {"budget": "50000USD", "min_tokens_per_s": "5tokens/s", "max_ttft": "2s", "max_itl": "100ms"}
               (fitting in memory is always required; TTFT and ITL are p99 and need workloads)
  costs        {"energy_price": "0.13USD/kWh", "amortisation": "3years", "utilisation": "50%", "source": "..."}
  simulate     {"points": 20 | "all", "tokens": 500, "seed": 1}

Capital cost = node price x nodes + NIC price x nodes (2+ nodes) + ceil(nodes / ports) switches (3+ nodes),
from the profiles (`moesim hw --json` lists every price with its source and date). Cost per million tokens =
amortised capital + energy (node power under load x price), at the point's throughput. Points pass a screen
(the memory fit: the analytic model's, or on a serving grid the serving simulator's own memory plan; the
budget; the analytic tokens/s bound); the best `simulate.points` by analytic tokens/s per USD are simulated;
the answers and the Pareto front (throughput against capital cost) use the simulated points.

Under `mpirun -np N moesim sweep ...` (any hosts, --hostfile) points are split across ranks by index and
gathered on rank 0, which alone writes: the output is byte for byte that of one process.
Example: examples/grid-dbrx-purchase.json (the default).
)";

}  // namespace

int cmd_sweep(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("grid", po::value<std::string>(), "grid JSON file (default: the built-in examples/grid-dbrx-purchase.json)")
    ("simulate", po::value<std::string>(), "points to simulate: a count or \"all\" (overrides simulate.points)")
    ("threads", po::value<unsigned>(), "worker threads per process (default: all cores)")
    ("csv", po::value<std::string>(), "write one CSV row per point (every metric, unit in the column name)")
    ("json-out", po::value<std::string>(), "write the whole result as JSON (points, resolved scenarios, answers)")
    ("json", "print the JSON result instead of the summary")
    ("traces", po::value<std::string>(), "directory: a Chrome/Perfetto trace per simulated point (point-<index>.json)")
    ("rows", po::value<std::size_t>()->default_value(20), "rows of the summary table")
    ("quiet,q", "no progress on stderr");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim sweep [--grid FILE] [options]\n\n"
                     "Answers \"what should I buy?\" over a grid of models x hardware x node counts x NICs x "
                     "precisions x strategies (or parallel plans x workloads): every point is screened by the "
                     "analytic model (memory fit, capital cost, the decode bound), the promising ones are "
                     "simulated, and the summary names the best tokens/s per USD, the cheapest configuration "
                     "meeting the SLO, the fastest, and the Pareto front of throughput against capital cost.",
                     kGridHelp)) {
    return 0;
  }
  const reference::World world;
  const bool root = world.rank() == 0;
  reports::Grid grid = reports::load_grid(vm.count("grid") ? vm["grid"].as<std::string>() : "");
  reports::SweepOptions o;
  if (vm.count("threads")) {
    o.threads = vm["threads"].as<unsigned>();
    if (o.threads == 0) throw UserError("--threads 0: give at least 1 (or leave it out for all cores)");
  }
  if (vm.count("simulate")) {
    const std::string v = vm["simulate"].as<std::string>();
    o.simulate = v == "all" ? -1 : parse_whole_numbers(v, "--simulate", 0, 1'000'000'000, "20 or all").front();
  }
  // Outputs are opened first (rank 0 only): a bad path fails before any work, and nothing half-written stays.
  OutputSet outputs;
  OutputFile *csv = nullptr, *json_out = nullptr;
  if (root && vm.count("csv")) csv = &outputs.add(vm["csv"].as<std::string>(), "--csv");
  if (root && vm.count("json-out")) json_out = &outputs.add(vm["json-out"].as<std::string>(), "--json-out");
  // The traces go to a directory built under a temporary name and put in place with the other outputs
  // (moesim::OutputDir). Under mpirun every rank writes its points' traces there: rank 0 makes it and the
  // others must see it (a shared file system).
  std::optional<OutputDir> traces;
  if (vm.count("traces")) {
    std::string error;
    if (root) {
      try {
        traces.emplace(vm["traces"].as<std::string>(), "--traces", "traces");
      } catch (const UserError& e) {
        error = e.what();
      }
    }
    world.agree(error);
    const auto paths = world.all_gather(root ? traces->path().string() : std::string());
    o.traces_dir = paths.front();
    std::error_code ec;
    world.agree(std::filesystem::is_directory(o.traces_dir, ec)
                    ? std::string()
                    : "--traces: rank " + std::to_string(world.rank()) + " cannot see " + o.traces_dir.string() +
                          ", which rank 0 made; under mpirun across hosts give a directory on a shared file system");
  }
  calibrate::Progress progress(root && !vm.count("quiet") ? &std::cerr : nullptr, 1.0);
  o.progress = [&](const char* stage, std::size_t done, std::size_t total) {
    progress.count(std::string("sweep: ") + stage, done, total);
  };
  const InterruptGuard guard;
  o.cancelled = [] { return InterruptGuard::interrupted(); };
  reports::SweepComm comm;
  comm.rank = world.rank();
  comm.size = world.size();
  comm.allgather = [&](const std::string& mine) { return world.all_gather(mine); };

  const auto t0 = std::chrono::steady_clock::now();
  const reports::SweepResult r = reports::run_sweep(grid, o, comm);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.finish();
  if (!root) return 0;
  if (vm.count("json")) {
    out << reports::sweep_to_json(r).dump(2) << "\n";
  } else {
    out << "moesim sweep: " << r.grid.origin << "\n";
    if (!r.grid.description.empty()) out << r.grid.description << "\n";
    out << "\n";
    reports::print_sweep_summary(r, out, false, vm["rows"].as<std::size_t>());
  }
  if (csv) reports::write_sweep_points_csv(r, csv->stream());
  if (json_out) json_out->stream() << reports::sweep_to_json(r).dump(2) << "\n";
  if (traces) {
    const SignalsHeld held;  // the files and the directory together
    outputs.commit();
    traces->commit();
  } else {
    outputs.commit();
  }
  if (!vm.count("quiet"))
    std::cerr << text::printf("sweep: %zu points (%lld simulated) in %.3f s wall on %d rank%s\n", r.points.size(),
                              static_cast<long long>(r.simulated), wall, world.size(), world.size() > 1 ? "s" : "");
  return 0;
}

}  // namespace moesim::apps
