// `moesim calibrate <part>`: dispatches to the microbenchmarks (apps/calibrate_bench_cmd.cpp), the network
// ping-pong (apps/calibrate_net_cmd.cpp), the whole-machine run (`all`) and the fit to measured runs
// (apps/calibrate_fit_cmd.cpp).

#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::apps {
namespace {

struct Part {
  const char* name;
  int (*run)(const Args&, std::ostream&);
  const char* summary;
};

const Part kParts[] = {
    {"kernels", cmd_calibrate_kernels,
     "OpenBLAS GEMV/GEMM (f32, bf16) at a model's matrix shapes: bytes/s, FLOP/s, size-banded efficiency"},
    {"memory", cmd_calibrate_memory, "STREAM copy/scale/add/triad per thread count: sustained memory bandwidth"},
    {"storage", cmd_calibrate_storage,
     "sequential and random reads of expert-sized blocks, cold and warm, 1..N readers"},
    {"net", cmd_calibrate_net, "TCP ping-pong (Boost.Asio) or MPI (--mpi): latency, bandwidth, Hockney fit"},
    {"all", cmd_calibrate_all, "all of the above on this machine: node, NIC and storage profiles with provenance"},
    {"fit", cmd_calibrate_fit, "fit efficiency parameters of a profile to measured runs (least squares, LAPACK)"},
};

void usage(std::ostream& out) {
  out << "usage: moesim calibrate <part> [options]     (moesim calibrate <part> --help)\n\n"
         "Measures this machine and writes hardware profiles in the hwprofiles/ format, every figure with its\n"
         "source (host, CPU, date, moesim commit, command). Parts:\n";
  for (const auto& p : kParts)
    out << "  " << p.name << std::string(9 - std::string(p.name).size(), ' ') << p.summary << "\n";
  out << "\nExamples:\n"
         "  moesim calibrate all --out my-host.json\n"
         "  moesim calibrate net --listen 0.0.0.0:5201        # on host A\n"
         "  moesim calibrate net --connect hostA:5201 --out my-nic.json   # on host B\n"
         "  mpirun -np 2 --host a,b moesim calibrate net --mpi --out my-nic.json\n"
         "  moesim calibrate fit --measured examples/measured/seed000-tables-3-4.json --out fitted.json\n";
}

}  // namespace

int cmd_calibrate(const Args& args, std::ostream& out) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    usage(out);
    return 0;
  }
  const Args rest(args.begin() + 1, args.end());
  for (const auto& p : kParts) {
    if (args[0] == p.name) return p.run(rest, out);
  }
  std::vector<std::string> names;
  for (const auto& p : kParts) names.emplace_back(p.name);
  throw UserError("unknown part '" + args[0] + "'" + text::did_you_mean(args[0], names) +
                  "; parts: " + text::join(names) + " (see `moesim calibrate --help`)");
}

}  // namespace moesim::apps
