// `moesim report`: the report directory (reports/report.hpp). With no arguments, the built-in study:
// DBRX on 2-8 Mac Studios over each NIC profile against one 8xH100 server, with the paper's measured runs.

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "commands.hpp"
#include "moesim/calibrate/fit.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reference/run.hpp"
#include "moesim/reports/report.hpp"
#include "moesim/reports/report_fit.hpp"

namespace po = boost::program_options;

namespace moesim::apps {

namespace {

void add_measured(const calibrate::MeasuredRuns& runs, reports::ReportInputs& in, unsigned threads) {
  in.measured_origin = runs.path;
  for (const auto& r : runs.runs)
    in.measured.push_back({r.name, r.source, r.scenario, r.tokens_per_s, r.moe, r.comm, r.misc});
  // The headline is calibrated: the profiles fitted to these runs (reports/report_fit.hpp).
  in.calibrate = [runs, threads](const std::function<void(const std::string&)>& progress) {
    return reports::report_calibration(runs, progress, threads);
  };
}

}  // namespace

int cmd_report(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("out,o", po::value<std::string>()->default_value("moesim-report"), "the report directory (replaced whole when complete)")
    ("grid", po::value<std::string>(), "decode or serving grid for the purchase question (default: the built-in DBRX study)")
    ("serving-grid", po::value<std::string>(), "serving grid for latency against arrival rate (default with no --grid: built-in)")
    ("measured", po::value<std::string>(), "measured-runs file: the profiles are fitted to it and the figures on its hardware calibrated (default with no --grid: seed 000 Tables 3-4)")
    ("study", po::value<std::string>(), "study file whose cost_comparison (measured throughputs) is priced beside the grid")
    ("threads", po::value<unsigned>(), "worker threads per process, for the sweeps and the fit's leave-one-out refits (default: all cores)")
    ("quiet,q", "no progress on stderr");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim report [--out DIR] [--grid FILE] [options]\n\n"
                     "Writes a report directory answering \"what should I buy?\": report.md and a self-contained "
                     "report.html with the answer in words at the top (best tokens/s per USD, cheapest meeting the "
                     "SLO, where faster NICs beat more nodes), plots (PNG and SVG, each with its .csv data and .gp "
                     "gnuplot script): tokens/s against nodes per NIC with measured points, the per-token time "
                     "split measured vs simulated, tokens/s per USD, the Pareto front, TTFT/ITL against arrival "
                     "rate, expert-cache hit rate against cache size; sweep.csv/json with every point; Chrome "
                     "traces. Built under a temporary name beside DIR and renamed onto DIR when complete: an "
                     "error or Ctrl-C leaves no half-written report. An existing DIR is replaced only if it is "
                     "empty or an earlier moesim report (its .moesim-report file lists what moesim wrote) holding "
                     "nothing else; any other directory is refused, never removed.",
                     "\nGrid files: see `moesim sweep --help`. Under mpirun the sweeps are split across ranks; rank 0 "
                     "writes.\n")) {
    return 0;
  }
  const reference::World world;
  reports::ReportInputs in;
  const bool custom = vm.count("grid") > 0;
  if (custom) {
    in.grid = reports::load_grid(vm["grid"].as<std::string>());
    if (vm.count("serving-grid")) in.serving = reports::load_grid(vm["serving-grid"].as<std::string>());
  } else {
    in = reports::default_report_inputs();
    if (vm.count("serving-grid")) in.serving = reports::load_grid(vm["serving-grid"].as<std::string>());
  }
  if (in.grid.serving()) {
    if (in.serving) throw UserError("--grid " + in.grid.origin + " is a serving grid already; drop --serving-grid");
    in.serving = in.grid;
  }
  unsigned threads = 0;  // every core
  if (vm.count("threads")) {
    threads = vm["threads"].as<unsigned>();
    if (threads == 0) throw UserError("--threads 0: give at least 1 (or leave it out for all cores)");
  }
  if (vm.count("measured")) {
    add_measured(calibrate::load_measured_runs(vm["measured"].as<std::string>()), in, threads);
  } else if (!custom) {
    add_measured(calibrate::builtin_measured_runs("measured/seed000-tables-3-4.json"), in, threads);
  }
  if (vm.count("study")) {
    const auto s = scenario::load_study(vm["study"].as<std::string>());
    in.cost_points = s.cost_comparison;
    in.cost_points_origin = s.origin;
  }
  reports::ReportOptions o;
  o.out = vm["out"].as<std::string>();
  o.sweep.threads = threads;
  const bool show = world.rank() == 0 && !vm.count("quiet");
  calibrate::Progress progress(show ? &std::cerr : nullptr, 1.0);
  o.sweep.progress = [&](const char* stage, std::size_t done, std::size_t total) {
    progress.count(std::string("report: ") + stage, done, total);
  };
  o.stage = [&](const std::string& s) {
    progress.finish();
    if (show) std::cerr << "report: " << s << "\n";
  };
  const InterruptGuard guard;
  o.sweep.cancelled = [] { return InterruptGuard::interrupted(); };
  o.comm.rank = world.rank();
  o.comm.size = world.size();
  o.comm.allgather = [&](const std::string& mine) { return world.all_gather(mine); };
  const auto t0 = std::chrono::steady_clock::now();
  const reports::ReportSummary s = reports::write_report(in, o);
  progress.finish();
  if (world.rank() != 0) return 0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "moesim report: " << s.dir.string() << "/report.html (and report.md), " << s.files.size() << " files\n\n";
  for (const auto& h : s.headline) {
    std::string plain;
    for (std::size_t i = 0; i < h.size(); ++i) {
      if (h.compare(i, 2, "**") == 0) {
        ++i;
        continue;
      }
      plain += h[i];
    }
    out << "- " << plain << "\n";
  }
  if (show) std::cerr << text::printf("report: written in %.1f s wall\n", wall);
  return 0;
}

}  // namespace moesim::apps
