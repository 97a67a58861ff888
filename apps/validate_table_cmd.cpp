// `moesim validate --table DIR`: predicted vs measured over the public validation table (issue 20).

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "commands.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/validation.hpp"
#include "moesim/model/output_file.hpp"

namespace moesim::apps {

namespace po = boost::program_options;

int cmd_validate_table(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("table", po::value<std::string>(), "the validation directory: measurements.csv and mapping.json (the repo's validation/)")
    ("llama-bench", po::value<std::vector<std::string>>()->composing(), "MODEL=FILE: a `llama-bench -o json` file of this machine and the zoo model (or config.json) its GGUF holds; repeat for several models (instead of --table)")
    ("hw", po::value<std::string>(), "with --llama-bench: the node profile of the machine that ran it")
    ("runtime", po::value<std::string>(), "with --llama-bench: the runtime's name, e.g. llama.cpp-metal or llama.cpp-cuda")
    ("source", po::value<std::string>(), "with --llama-bench: where the measurements come from (a URL; default the file)")
    ("role", po::value<std::string>(), "calibration (dense rows) or prediction (MoE rows); default both")
    ("fit", "fit each (hardware profile, runtime) to its calibration rows (dense models, batch-1 decode): bandwidth efficiency and a cost per kernel; predict with it, with an interval from the leave-one-out errors")
    ("write-runtimes", po::value<std::string>(), "with --fit: write each fitted runtime as a profile <runtime>@<hw>.json into this new directory (for `estimate --runtime`; the repo's are in hwprofiles/runtimes/)")
    ("explain", po::value<std::string>(), "with --fit: print where the row with this id spends its fitted figure's time (memory-bound, compute-bound, KV reads, kernels, host per step, per sequence, per request, the rest) instead of the summary")
    ("floors", "also price every predicted row on one device at its floor (every byte its steps read once at the datasheet bandwidth, nothing else: no run of that configuration is faster) and count the measurements above it per kind; JSON rows get a floor figure")
    ("rows", "also print every predicted row: measured, predicted, error")
    ("csv", po::value<std::string>(), "write every row (predicted or why not) to this CSV file")
    ("plot", po::value<std::string>(), "write the plot of predicted against measured (fitted figures with their intervals as error bars) into this new directory: validation.png, .svg, .csv, .gp")
    ("json", "print the result as JSON (every figure with its unit)")
    ("threads", po::value<unsigned>(), "worker threads for the rows' simulations and the classes' fits (default: all cores; the result is the same for any count)")
    ("quiet", "no progress line on stderr");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim validate --table DIR [--role calibration|prediction] [--fit] [--floors] [--rows] [--csv "
          "FILE]\n"
          "       moesim validate --table DIR --fit --explain ROW_ID\n"
          "       moesim validate --llama-bench MODEL=FILE [...] --hw PROFILE --runtime NAME [--fit] "
          "[--write-runtimes DIR]\n\n"
          "Predicts every row of a public measurement table that moesim can express, with the shipped\n"
          "profiles and nothing fitted, and prints the error per row and its summary (median and p90\n"
          "|error|, share within 10% and 25%, worst factor) per role, kind of figure, hardware family\n"
          "and runtime. Batch-1 decode comes from the analytic model (equal to both simulators at\n"
          "batch 1), prefill (one prompt, or llama-batched-bench's B prompts at once), batched decode and\n"
          "max-load throughput from the serving simulator; rows it cannot express yet are counted with\n"
          "the reason. The table's columns and sources: validation/README.md.\n\n"
          "With --llama-bench the rows are your own `llama-bench -o json` runs (tg tests: batch-1 decode\n"
          "at n_depth; pp tests: prefill); with --fit and dense models among them, the runtime fitted to\n"
          "them is written by --write-runtimes for `estimate --runtime`.\n\n"
          "With --fit --explain ROW_ID, one row's fitted figure is split into the time each cost of the fitted\n"
          "profile takes (each rate halved, each host cost removed, by the row's own instrument): where a\n"
          "prediction spends its time, e.g. how much of a max-load figure is the runtime's host time, and\n"
          "its floor: the figure with every byte read once at the datasheet bandwidth and nothing else.\n"
          "--floors prices every row's floor and counts the measurements faster than it: runs that read\n"
          "fewer bytes than the configuration moesim prices (an MoE benchmark of random token ids whose\n"
          "routing touched fewer experts than the uniform trace, a small model held in a cache).\n\n"
          "examples:\n  moesim validate --table validation --role prediction --rows\n"
          "  moesim validate --table validation --fit --explain trt10-q30-b200-tp1-128-128\n"
          "  moesim validate --llama-bench llama-3.1-8b=8b.json --llama-bench qwen3-30b-a3b=moe.json "
          "--hw mac-studio-m2-ultra-192 --runtime llama.cpp-metal --fit --write-runtimes my-runtimes")) {
    return 0;
  }
  if (vm.count("write-runtimes") && !vm.count("fit"))
    throw UserError("--write-runtimes writes the fitted runtimes: give --fit too");
  if (vm.count("explain") && (!vm.count("fit") || !vm.count("table")))
    throw UserError("--explain splits a row's fitted figure: give --table DIR and --fit too");
  if (vm.count("explain") && (vm.count("csv") || vm.count("plot") || vm.count("write-runtimes") || vm.count("rows")))
    throw UserError("--explain prints one row alone: leave out --csv, --plot, --write-runtimes and --rows");
  OutputSet outputs;
  OutputFile* csv = vm.count("csv") ? &outputs.add(vm["csv"].as<std::string>(), "--csv") : nullptr;
  std::optional<OutputDir> runtimes, plot;
  if (vm.count("plot")) plot.emplace(vm["plot"].as<std::string>(), "--plot", "validation-plot");
  if (vm.count("write-runtimes"))
    runtimes.emplace(vm["write-runtimes"].as<std::string>(), "--write-runtimes", "runtimes");
  calibrate::Progress progress(!vm.count("quiet") && !vm.count("json") ? &std::cerr : nullptr, 1.0);
  calibrate::ValidationOptions o;
  if (vm.count("role")) o.role = vm["role"].as<std::string>();
  o.fit = vm.count("fit") > 0;
  if (vm.count("explain")) o.explain = vm["explain"].as<std::string>();
  o.floors = vm.count("floors") > 0;
  if (vm.count("threads")) {
    o.threads = vm["threads"].as<unsigned>();
    if (o.threads == 0) throw UserError("--threads 0: give at least 1 (or leave it out for all cores)");
  }
  o.progress = [&](std::size_t done, std::size_t total) { progress.count("validate", done, total, "rows"); };
  if (vm.count("table") == vm.count("llama-bench"))
    throw UserError("give --table DIR (the public table) or --llama-bench MODEL=FILE (your own runs), one of them");
  calibrate::ValidationResult r;
  if (vm.count("table")) {
    r = calibrate::run_validation(vm["table"].as<std::string>(), o);
  } else {
    if (!vm.count("hw") || !vm.count("runtime"))
      throw UserError("--llama-bench needs --hw (the machine's node profile) and --runtime (e.g. llama.cpp-metal)");
    std::vector<std::filesystem::path> files;
    std::vector<calibrate::LlamaBenchImport> imports;
    for (const auto& arg : vm["llama-bench"].as<std::vector<std::string>>()) {
      const auto eq = arg.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        throw UserError("--llama-bench " + arg + ": write MODEL=FILE, e.g. --llama-bench llama-3.1-8b=bench.json");
      calibrate::LlamaBenchImport in;
      in.model = arg.substr(0, eq);
      in.hw = vm["hw"].as<std::string>();
      in.runtime = vm["runtime"].as<std::string>();
      if (vm.count("source")) in.source = vm["source"].as<std::string>();
      files.emplace_back(arg.substr(eq + 1));
      imports.push_back(in);
    }
    r = calibrate::run_llama_bench(files, imports, o);
  }
  progress.finish();
  if (r.explanation) {
    if (vm.count("json"))
      out << calibrate::explanation_to_json(r).dump(2) << "\n";
    else
      calibrate::print_explanation_text(r, out);
    return 0;
  }
  if (vm.count("json")) {
    out << calibrate::validation_to_json(r).dump(2) << "\n";
  } else {
    calibrate::print_validation_text(r, out, vm.count("rows") > 0);
  }
  if (csv) calibrate::write_validation_csv(r, csv->stream());
  if (plot) scenario::draw_plot(plot->path(), calibrate::validation_plot(r));
  if (runtimes) {
    for (const auto& f : r.fits)
      write_file_atomically((runtimes->path() / (f.profile.id + ".json")).string(),
                            calibrate::runtime_profile_json(f.profile).dump(2) + "\n", "--write-runtimes");
    for (const auto& t : r.transfers)
      write_file_atomically((runtimes->path() / (t.profile.id + ".json")).string(),
                            calibrate::runtime_profile_json(t.profile).dump(2) + "\n", "--write-runtimes");
  }
  const SignalsHeld held;  // the files and the directories together
  outputs.commit();
  if (runtimes) runtimes->commit();
  if (plot) plot->commit();
  return 0;
}

}  // namespace moesim::apps
