// `moesim calibrate fit`: fit efficiency parameters of a node (and NIC) profile to measured runs
// (calibrate/fit.hpp, calibrate/FIT.md).

#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>

#include "commands.hpp"
#include "moesim/calibrate/fit.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/table.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

std::string value_text(double v, const std::string& unit) {
  if (unit == "s") return units::format(units::seconds(v));
  if (unit == "B/s") return units::format(units::Bandwidth::from_base(v));
  return text::printf("%.4f", v);
}

std::string pct(double predicted, double measured) {
  return text::printf("%+.1f%%", 100.0 * (predicted - measured) / measured);
}

/// The options of `calibrate fit`: --measured fits, and the runtimes' own benchmarks (--llama-bench, --vllm-*).
po::options_description describe_fit_options() {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("measured", po::value<std::string>(), "measured-runs JSON file (format: calibrate/FIT.md; example: "
                                           "examples/measured/seed000-tables-3-4.json)")
    ("profile", po::value<std::string>(), "node profile to fit, id or path (default: the runs' common \"hw\")")
    ("nic", po::value<std::string>(), "NIC profile to fit, id or path (default: the runs' common \"nic\")")
    ("fit", po::value<std::string>(), "comma-separated parameters to fit (default: memory_efficiency, "
                                      "layer_overhead, message_latency, rewire_bandwidth; those the runs do not "
                                      "constrain are kept and reported)")
    ("runs", po::value<std::string>(), "comma-separated run names to fit (default: all); the others are predicted")
    ("out", po::value<std::string>(), "write the fitted node profile here")
    ("nic-out", po::value<std::string>(), "write the fitted NIC profile here (default: --out with .nic.json, when a "
                                          "NIC parameter was fitted)")
    ("max-iterations", po::value<std::int64_t>(), "Levenberg-Marquardt iterations (default 60)")
    ("no-loo", "skip the leave-one-out refits")
    ("threads", po::value<unsigned>(), "worker threads for the leave-one-out refits (default: all cores; the "
                                       "result is the same for any count)")
    ("json", "print the results as JSON")
    ("llama-bench", po::value<std::vector<std::string>>()->composing(),
     "instead of --measured: a llama-bench output file (`-o json`, or its default markdown table) of --model on "
     "--hw; fits the runtime's bandwidth efficiency, attention factor and per-kernel cost (repeatable)")
    ("mlx-lm", po::value<std::vector<std::string>>()->composing(),
     "instead of --measured: `mlx_lm.generate --verbose` output (its Prompt: and Generation: lines) or "
     "`mlx_lm.benchmark` output (its Timing with and Averages: lines; batch size 1), several runs may be "
     "concatenated, of --model on --hw, with --precision; fitted as --llama-bench's pp and tg tests (repeatable)")
    ("llama-batched-bench", po::value<std::vector<std::string>>()->composing(),
     "instead of --measured: llama-batched-bench's table with its main: line (or its --output-format jsonl lines), "
     "of --model on --hw, with --precision; "
     "B = 1 rows fitted as --llama-bench's pp and tg tests, B > 1 rows predicted (batched decode) (repeatable)")
    ("vllm-serving", po::value<std::vector<std::string>>()->composing(),
     "instead of --measured: a vLLM benchmark_serving.py --save-result JSON of --model on --hw; fits the runtime's "
     "step_overhead and request_overhead to its mean TTFT and TPOT (repeatable: each file is also predicted by "
     "the fit to the others)")
    ("vllm-latency", po::value<std::vector<std::string>>()->composing(),
     "instead of --measured: a vLLM benchmark_latency.py --output-json file of --model on --hw; fits the runtime's "
     "step_overhead to its avg_latency (repeatable)")
    ("trtllm-bench", po::value<std::vector<std::string>>()->composing(),
     "instead of --measured: a `trtllm-bench throughput` report (the text it prints, or its --report_json file) of "
     "--model on --hw; fits the runtime's bandwidth efficiency (and with two reports or more its compute "
     "efficiency) to the output throughput, the host times kept from --runtime (repeatable: each report is also "
     "predicted by the fit to the others)")
    ("input-len", po::value<std::int64_t>(), "with --vllm-latency: its --input-len (default 32, the script's)")
    ("output-len", po::value<std::int64_t>(), "with --vllm-latency: its --output-len (default 128, the script's)")
    ("batch-size", po::value<std::int64_t>(), "with --vllm-latency: its --batch-size (default 8, the script's)")
    ("model", po::value<std::string>(), "with an import (--llama-bench, --mlx-lm, --vllm-serving, ...): the zoo id or config.json of the model run")
    ("hw", po::value<std::string>(), "with an import (--llama-bench, --mlx-lm, --vllm-serving, ...): the node profile of the machine that ran it")
    ("runtime", po::value<std::string>(), "with an import (--llama-bench, --mlx-lm, --vllm-serving, ...): the runtime, a name (llama.cpp-metal, "
                                          "vllm) or a runtime profile (id or path) to start from and add to")
    ("tp", po::value<std::int64_t>(), "with --vllm-serving: tensor-parallel devices of the run (default 1)")
    ("precision", po::value<std::string>(), "with --vllm-serving: the weights' precision of the run (default bf16); "
                                            "with --trtllm-bench: overrides the report's Quantization / Dtype; "
                                            "with --mlx-lm / --llama-batched-bench (required): the weights' format, "
                                            "e.g. q4 (MLX 4-bit), q4_k_m, q8_0, bf16")
    ("source", po::value<std::string>(), "with an import (--llama-bench, --mlx-lm, --vllm-serving, ...): where the measurements come from (a "
                                         "URL; default the files)");
  // clang-format on
  return desc;
}

/// The --fit parameters and how the residuals are formed, after the options in --help.
std::string fit_footer() {
  std::string footer = "\nparameters (--fit):\n";
  for (const auto& p : calibrate::fit_parameters())
    footer += "  " + p.name + (p.unit.empty() ? "" : " [" + p.unit + "]") + ": " + p.description + "\n";
  footer +=
      "\nResiduals are relative: (predicted - measured) / measured, one per split component (MoE, comm, misc) when "
      "a run gives its split, else one for the time per token. Each prediction is a simulator run of the run's "
      "scenario with the profile at the current parameter values. Leave-one-out: each fitted run is predicted by a "
      "fit to the others.\n";
  return footer;
}

/// --profile, --nic, --fit, --runs, --max-iterations, --no-loo and --threads as the fit's options.
calibrate::FitOptions fit_options_from(const po::variables_map& vm) {
  calibrate::FitOptions o;
  if (vm.count("profile")) o.node = vm["profile"].as<std::string>();
  if (vm.count("nic")) o.nic = vm["nic"].as<std::string>();
  if (vm.count("fit")) o.parameters = text::split(vm["fit"].as<std::string>(), ',');
  if (vm.count("runs")) o.fit_runs = text::split(vm["runs"].as<std::string>(), ',');
  if (vm.count("max-iterations")) {
    o.max_iterations = vm["max-iterations"].as<std::int64_t>();
    if (o.max_iterations < 1) throw UserError("--max-iterations must be at least 1");
  }
  o.leave_one_out = !vm.count("no-loo");
  if (vm.count("threads")) {
    o.threads = vm["threads"].as<unsigned>();
    if (o.threads == 0) throw UserError("--threads 0: give at least 1 (or leave it out for all cores)");
  }
  return o;
}

/// The NIC profile's output when a NIC parameter was fitted and --out was given: --nic-out, else --out's
/// name with .nic.json; null otherwise.
OutputFile* add_nic_output(const po::variables_map& vm, const calibrate::FitResult& r, const OutputFile* node_file,
                           OutputSet& outputs) {
  bool nic_fitted = false;
  for (const auto& p : r.parameters)
    if (p.determined && calibrate::fit_parameter(p.name).nic) nic_fitted = true;
  if (!node_file || !nic_fitted || !r.has_nic) return nullptr;
  std::string nic_path = vm.count("nic-out") ? vm["nic-out"].as<std::string>() : node_file->path();
  if (!vm.count("nic-out")) {
    if (nic_path.size() > 5 && nic_path.ends_with(".json")) nic_path.resize(nic_path.size() - 5);
    nic_path += ".nic.json";
  }
  return &outputs.add(nic_path, "--nic-out");
}

/// One run of the fit: measured and predicted time per token, the split when measured, leave-one-out.
nlohmann::json fitted_run_json(const calibrate::RunPrediction& x) {
  nlohmann::json j = {{"name", x.name},
                      {"fitted", x.fitted},
                      {"measured_time_per_token", {{"value", x.measured_time}, {"unit", "s"}}},
                      {"predicted",
                       {{"time_per_token", x.predicted.time},
                        {"moe", x.predicted.moe},
                        {"comm", x.predicted.comm},
                        {"misc", x.predicted.misc},
                        {"unit", "s"}}},
                      {"error_time_per_token",
                       {{"value", (x.predicted.time - x.measured_time) / x.measured_time},
                        {"unit", "relative: (predicted - measured) / measured"}}}};
  if (x.moe || x.comm || x.misc) {
    j["measured_split"] = {{"unit", "s"}};
    if (x.moe) j["measured_split"]["moe"] = *x.moe;
    if (x.comm) j["measured_split"]["comm"] = *x.comm;
    if (x.misc) j["measured_split"]["misc"] = *x.misc;
  }
  if (x.loo_time) j["leave_one_out_time_per_token"] = {{"value", *x.loo_time}, {"unit", "s"}};
  return j;
}

/// What the fit did, as the profiles' calibration block holds it (and --json prints it).
nlohmann::json fit_json(const calibrate::MeasuredRuns& runs, const calibrate::FitResult& r) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : r.parameters) {
    params.push_back(
        {{"name", p.name}, {"unit", p.unit}, {"start", p.start}, {"value", p.value}, {"determined", p.determined}});
  }
  nlohmann::json run_rows = nlohmann::json::array();
  for (const auto& x : r.runs) run_rows.push_back(fitted_run_json(x));
  return {{"measured", runs.path},
          {"parameters", params},
          {"runs", run_rows},
          {"rms_relative_error", r.rms_relative},
          {"iterations", r.iterations},
          {"converged", r.converged},
          {"simulations", r.simulations}};
}

/// A fitted profile's id, name and calibration block; every fitted figure names the fit as its source.
void stamp_fitted(nlohmann::json& doc, const std::string& suffix, const calibrate::Provenance& prov,
                  const nlohmann::json& fit, const std::string& source) {
  doc["id"] = doc.value("id", std::string("profile")) + "-fitted";
  doc["name"] = doc.value("name", std::string("")) + suffix;
  doc["calibration"] = {{"provenance", calibrate::to_json(prov)}, {"fit", fit}};
  std::function<void(nlohmann::json&)> mark = [&](nlohmann::json& j) {
    if (j.is_object()) {
      if (j.contains("source") && j["source"] == "fitted") j["source"] = source;
      for (auto& [k, v] : j.items()) mark(v);
    } else if (j.is_array()) {
      for (auto& v : j) mark(v);
    }
  };
  mark(doc);
}

/// The parameters' table, the fit's quality and the runs' table, measured against predicted.
void print_fit_text(std::ostream& out, const calibrate::MeasuredRuns& runs, std::size_t fitted_runs,
                    const calibrate::FitResult& r) {
  out << "moesim calibrate fit: " << runs.path << " (" << runs.runs.size() << " runs; " << fitted_runs << " fitted)\n";
  out << "source     " << runs.source << "\n\n";
  scenario::Table pt({"parameter", "start", "fitted", "status"});
  for (const auto& p : r.parameters) {
    pt.add_row({p.name, value_text(p.start, p.unit), p.determined ? value_text(p.value, p.unit) : "-",
                p.determined ? "fitted" : "not constrained by these runs: kept"});
  }
  pt.print_text(out);
  std::size_t determined = 0;
  for (const auto& p : r.parameters) determined += p.determined ? 1 : 0;
  if (determined > r.observations) {
    out << "\nwarning: " << determined << " parameters from " << r.observations
        << " measured figures: the fit is underdetermined (the minimum-norm change from the start is taken); fit "
           "fewer parameters (--fit) or add runs\n";
  }
  out << "\nrms relative error " << text::printf("%.3f", r.rms_relative) << " after " << r.iterations << " iterations ("
      << (r.converged ? "converged" : "iteration limit") << ", " << r.simulations << " simulator runs)\n\n";
  scenario::Table rt({"run", "role", "measured s", "predicted s", "err", "MoE s meas/pred", "err", "comm s meas/pred",
                      "err", "misc s meas/pred", "err", "LOO err"});
  auto part = [&](std::optional<double> m, double p) -> std::pair<std::string, std::string> {
    if (!m) return {"-", "-"};
    return {text::printf("%.3f/%.3f", *m, p), pct(p, *m)};
  };
  for (const auto& x : r.runs) {
    const auto [moe, moe_e] = part(x.moe, x.predicted.moe);
    const auto [comm, comm_e] = part(x.comm, x.predicted.comm);
    const auto [misc, misc_e] = part(x.misc, x.predicted.misc);
    rt.add_row({x.name, x.fitted ? "fitted" : "predicted", text::printf("%.3f", x.measured_time),
                text::printf("%.3f", x.predicted.time), pct(x.predicted.time, x.measured_time), moe, moe_e, comm,
                comm_e, misc, misc_e, x.loo_time ? pct(*x.loo_time, x.measured_time) : "-"});
  }
  rt.print_text(out);
  out << "\nerr = (predicted - measured) / measured; LOO err: the run predicted by a fit to the other fitted runs.\n";
}

}  // namespace

int cmd_calibrate_fit(const Args& args, std::ostream& out) {
  const po::options_description desc = describe_fit_options();
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim calibrate fit --measured runs.json [options]\n"
          "       moesim calibrate fit --llama-bench FILE --model M --hw NODE --runtime NAME --out runtime.json\n"
          "       moesim calibrate fit --mlx-lm FILE | --llama-batched-bench FILE --precision P --model M --hw NODE "
          "--runtime NAME --out runtime.json\n"
          "       moesim calibrate fit --vllm-serving FILE [--vllm-serving FILE ...] --model M --hw NODE "
          "--runtime NAME|PROFILE [--tp N] --out runtime.json\n"
          "       moesim calibrate fit --vllm-latency FILE [--input-len N --output-len N --batch-size N] "
          "--model M --hw NODE --runtime NAME|PROFILE --out runtime.json\n"
          "       moesim calibrate fit --trtllm-bench FILE [--trtllm-bench FILE ...] --model M --hw NODE "
          "--runtime NAME|PROFILE --out runtime.json",
          fit_footer()))
    return 0;
  if (vm.count("llama-bench") || vm.count("mlx-lm") || vm.count("llama-batched-bench") || vm.count("vllm-serving") ||
      vm.count("vllm-latency") || vm.count("trtllm-bench")) {
    if (vm.count("measured"))
      throw UserError(
          "give --measured (moesim's measured-runs file) or --llama-bench / --vllm-serving (a runtime's "
          "own benchmark output), not both");
    return cmd_calibrate_fit_imports(vm, args, out);  // apps/calibrate_import_cmd.cpp
  }
  if (!vm.count("measured"))
    throw UserError(
        "--measured is required: the measured-runs JSON file to fit (or --llama-bench FILE / "
        "--vllm-serving FILE with --model, --hw and --runtime)");
  const auto runs = calibrate::load_measured_runs(vm["measured"].as<std::string>());
  const calibrate::FitOptions o = fit_options_from(vm);
  // Outputs are opened before the fit, so a bad path fails at once; both are committed together.
  OutputSet outputs;
  OutputFile* node_file = vm.count("out") ? &outputs.add(vm["out"].as<std::string>(), "--out") : nullptr;

  const calibrate::Provenance prov = calibrate::current_provenance(command_line("calibrate fit", args));
  calibrate::FitResult r =
      calibrate::fit_runs(runs, o, [](const std::string& line) { std::cerr << "calibrate fit: " << line << "\n"; });
  OutputFile* nic_file = add_nic_output(vm, r, node_file, outputs);

  // What the fit did, in the profiles' calibration block and on screen.
  std::vector<std::string> fitted_runs;
  for (const auto& x : r.runs)
    if (x.fitted) fitted_runs.push_back(x.name);
  const std::string source = calibrate::measured_source(
      prov, "fitted to " + text::join(fitted_runs) + " of " + runs.path + " (" + runs.source + ")");
  const nlohmann::json fit = fit_json(runs, r);
  stamp_fitted(r.node_document, " (fitted)", prov, fit, source);
  if (nic_file) stamp_fitted(r.nic_document, " (fitted)", prov, fit, source);

  if (vm.count("json")) {
    nlohmann::json j = fit;
    j["provenance"] = calibrate::to_json(prov);
    if (node_file) j["node_profile"] = node_file->path();
    if (nic_file) j["nic_profile"] = nic_file->path();
    out << j.dump(2) << "\n";
  } else {
    print_fit_text(out, runs, fitted_runs.size(), r);
    if (node_file) out << "node profile  " << node_file->path() << "\n";
    if (nic_file) out << "NIC profile   " << nic_file->path() << "\n";
  }
  if (node_file) node_file->stream() << r.node_document.dump(2) << "\n";
  if (nic_file) nic_file->stream() << r.nic_document.dump(2) << "\n";
  outputs.commit();
  return 0;
}

}  // namespace moesim::apps
