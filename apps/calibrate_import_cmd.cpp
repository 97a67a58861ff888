// `moesim calibrate fit --llama-bench / --mlx-lm / --llama-batched-bench / --vllm-serving / --vllm-latency /
// --trtllm-bench FILE`:
// a runtime profile fitted to the outputs people already produce with their runtimes' own benchmarks (issue
// 20; calibrate/FIT.md). llama-bench runs, mlx_lm.generate's figures and llama-batched-bench's table go
// through calibrate::run_llama_bench (the same predictions and fit as `validate --llama-bench --fit`); vLLM
// serving benchmarks through calibrate::fit_vllm_serving, trtllm-bench throughput reports through
// calibrate::fit_trtllm_bench. The runtime profile written by --out is what
// `--runtime PATH` of every command reads.

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/calibrate/serving_fit.hpp"
#include "moesim/calibrate/trtllm_fit.hpp"
#include "moesim/calibrate/validation.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/table.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

std::string required(const po::variables_map& vm, const char* flag, const char* what) {
  if (!vm.count(flag))
    throw UserError(std::string("--") + flag + " is required with --llama-bench / --mlx-lm / --vllm-serving: " + what);
  return vm[flag].as<std::string>();
}

/// The runtime to start from: a runtime profile fitted on `node` (its id, a path, or a runtime name with a
/// profile on this node), else a new one named `name` whose GPU-side figures are the hardware profile's own
/// (efficiency 1 of its bandwidth, attention at its roofline, its kernel_overhead), not fitted here.
model::RuntimeProfile base_runtime(const std::string& name, const model::NodeProfile& node, bool* existing) {
  const std::filesystem::path path{name};
  std::error_code ec;
  if (std::filesystem::exists(path, ec) || path.extension() == ".json") {
    *existing = true;
    return model::find_runtime(name, node);
  }
  for (const auto& r : model::builtin_runtimes()) {
    if (r.id == name || (r.hw == node.id && (r.runtime == name || r.runtime.starts_with(name + "-")))) {
      *existing = true;
      return model::find_runtime(name, node);
    }
  }
  *existing = false;
  model::RuntimeProfile r;
  r.runtime = name;
  r.hw = node.id;
  r.id = name + "@" + node.id;
  r.name = name + " on " + node.id;
  r.origin = "moesim calibrate fit";
  const std::string datasheet = "not fitted: the hardware profile " + node.id + " as it is (no decode rows fitted)";
  r.bandwidth_efficiency = model::Sourced<double>{1.0, datasheet};
  r.attention_factor = model::Sourced<double>{1.0, datasheet};
  r.kernel_overhead =
      node.devices.kernel_overhead.value_or(model::Sourced<units::Duration>{units::seconds(0), datasheet});
  return r;
}

std::string ms(double s) { return text::printf("%.2f", s * 1e3); }
std::string err(double p, double m) { return text::printf("%+.1f%%", 100.0 * (p / m - 1.0)); }

nlohmann::json figures_json(const calibrate::ServingFigures& f) {
  return {{"mean_ttft", {{"value", f.ttft * 1e3}, {"unit", "ms"}}},
          {"mean_tpot", {{"value", f.tpot * 1e3}, {"unit", "ms"}}},
          {"output_throughput", {{"value", f.output_throughput}, {"unit", "tokens/s"}}}};
}

/// The flags of --measured fits refused, and the vLLM flags checked against the import they describe.
void check_import_flags(const po::variables_map& vm) {
  for (const char* flag : {"profile", "nic", "fit", "runs", "nic-out", "max-iterations", "no-loo"})
    if (vm.count(flag))
      throw UserError(std::string("--") + flag +
                      " belongs to --measured fits; --llama-bench / --vllm-serving fit "
                      "a runtime profile's own figures");
  const bool text_import = vm.count("mlx-lm") || vm.count("llama-batched-bench");
  const bool trtllm = vm.count("trtllm-bench") > 0;
  if (!vm.count("vllm-serving") && !vm.count("vllm-latency") &&
      (vm.count("tp") || (vm.count("precision") && !text_import && !trtllm)))
    throw UserError(
        "--tp and --precision describe a vLLM run (--precision also an --mlx-lm, --llama-batched-bench or "
        "--trtllm-bench one); give --vllm-serving or --vllm-latency too");
  if (trtllm && (vm.count("vllm-serving") || vm.count("vllm-latency") || vm.count("llama-bench") || text_import))
    throw UserError(
        "--trtllm-bench fits the runtime's efficiencies to max-load runs; give it alone (fit the other "
        "benchmarks into the written profile with a second run, --runtime PATH)");
  if (text_import && !vm.count("precision"))
    throw UserError(std::string(vm.count("mlx-lm") ? "--mlx-lm" : "--llama-batched-bench") +
                    " output does not name the weights' format: give --precision (e.g. q4 for an MLX 4-bit "
                    "model, q4_k_m or q8_0 for a GGUF, bf16)");
  if (vm.count("vllm-serving") && vm.count("vllm-latency"))
    throw UserError(
        "--vllm-serving fits step_overhead and request_overhead, --vllm-latency step_overhead alone: "
        "give one of them (fit the other into the written profile with a second run, --runtime PATH)");
  if (!vm.count("vllm-latency") && (vm.count("input-len") || vm.count("output-len") || vm.count("batch-size")))
    throw UserError("--input-len, --output-len and --batch-size describe a --vllm-latency run; give it too");
}

/// What every import names in its report and in the sources of the figures it fits.
struct ImportRun {
  std::string model_id;
  std::string hw;
  std::string runtime_name;
  model::NodeProfile node;
  calibrate::Provenance prov;
  std::string source_note;  ///< " (--source)", or empty
  bool existing = false;    ///< the runtime profile started from was one already (not the hardware's figures)
};

/// The llama-bench rows of the fitted class as JSON: datasheet, fitted and leave-one-out figures per row.
nlohmann::json llama_bench_rows_json(const calibrate::ValidationResult& r, const calibrate::ValidationFit& fit) {
  // The fit's held-out errors come with the id of the row each belongs to (ValidationFit::loo_ids).
  std::map<std::string, double> loo;
  for (std::size_t k = 0; k < fit.loo_errors.size() && k < fit.loo_ids.size(); ++k)
    loo[fit.loo_ids[k]] = fit.loo_errors[k];
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : r.rows) {
    if (!p.predicted || p.hw != fit.hw) continue;
    nlohmann::json j = {{"test", p.row.id},
                        {"role", p.row.role},
                        {"kind", p.kind},
                        {"measured", {{"value", p.row.measured}, {"unit", p.row.unit}}},
                        {"datasheet", {{"value", *p.predicted}, {"unit", p.row.unit}}}};
    if (p.fitted) j["fitted"] = {{"value", *p.fitted}, {"unit", p.row.unit}};
    if (const auto it = loo.find(p.row.id); it != loo.end())
      j["leave_one_out_error"] = {{"value", it->second}, {"unit", "fraction: predicted / measured - 1"}};
    rows.push_back(j);
  }
  return rows;
}

/// The benchmark-output options read as llama-bench tests (calibrate::LlamaBenchImport::format), and the
/// key of each in the profile's calibration block.
struct BenchOption {
  const char* flag;
  const char* format;
  const char* key;
};
constexpr BenchOption kBenchOptions[] = {{"llama-bench", "llama-bench", "llama_bench"},
                                         {"mlx-lm", "mlx-lm", "mlx_lm"},
                                         {"llama-batched-bench", "llama-batched-bench", "llama_batched_bench"}};

/// --llama-bench, --mlx-lm, --llama-batched-bench: the runtime's decode (and prefill) figures fitted to the
/// files, the same path as `validate --llama-bench --fit` (calibrate::run_llama_bench): one fit per runtime.
model::RuntimeProfile fit_llama_bench(const po::variables_map& vm, ImportRun& run, std::ostream& out,
                                      nlohmann::json& calibration) {
  std::vector<std::filesystem::path> files;
  std::vector<calibrate::LlamaBenchImport> imports;
  std::vector<std::string> flags, keys;
  for (const BenchOption& b : kBenchOptions) {
    if (!vm.count(b.flag)) continue;
    flags.push_back(std::string("--") + b.flag);
    keys.emplace_back(b.key);
    for (const auto& f : vm[b.flag].as<std::vector<std::string>>()) {
      calibrate::LlamaBenchImport in;
      in.model = run.model_id;
      in.hw = run.hw;
      in.runtime = run.runtime_name;
      in.format = b.format;
      if (vm.count("precision")) in.precision = vm["precision"].as<std::string>();
      if (vm.count("source")) in.source = vm["source"].as<std::string>();
      files.emplace_back(f);
      imports.push_back(in);
    }
  }
  calibrate::ValidationOptions o;
  o.fit = true;
  const calibrate::ValidationResult r = calibrate::run_llama_bench(files, imports, o);
  calibrate::print_validation_text(r, out, true);
  out << "\n";
  if (r.fits.empty())
    throw UserError(files.front().string() +
                    ": no batch-1 decode figure of a dense model to fit a runtime to (an MoE model's rows are "
                    "predictions, not calibration); run the benchmark on a dense model (llama-bench -p 0 -n 128 "
                    "-d 0,4096; llama-batched-bench -npl 1; mlx_lm.generate with --max-tokens 128)");
  const calibrate::ValidationFit& fit = r.fits.front();
  model::RuntimeProfile rp = fit.profile;
  rp.origin = "moesim calibrate fit " + text::join(flags);
  run.existing = true;
  // Each row of the class with its datasheet, fitted and (decode calibration rows) leave-one-out figures.
  const nlohmann::json rows = llama_bench_rows_json(r, fit);
  std::vector<std::string> names;
  names.reserve(files.size());
  for (const auto& f : files) names.push_back(f.string());
  const std::string key = keys.size() == 1 ? keys.front() : "benchmarks";
  calibration[key] = {{"files", names}, {"rows", rows}};
  nlohmann::json not_used = nlohmann::json::object();
  for (const auto& [why, n] : r.skipped) not_used[why] = n;
  if (!not_used.empty()) calibration[key]["not_used"] = not_used;
  if (fit.loo_errors.empty())
    calibration[key]["leave_one_out"] =
        "none of its own: leave-one-out needs three (model, format) configurations (calibrate/src/"
        "validation_detail.hpp kMinConfigurations) and holds out one model at a time where there are two or more, "
        "else one configuration; run the benchmark on more models or formats";
  const std::string src = "fitted by `moesim calibrate fit " + text::join(flags) + "` to " +
                          std::to_string(fit.calibration_rows) + " batch-1 decode tests of " + text::join(names) +
                          run.source_note + ", " + run.prov.day + ", moesim " + run.prov.commit;
  // The fit (calibrate::run_llama_bench) gives the three decode figures: their source is this command's.
  rp.bandwidth_efficiency->source = rp.attention_factor->source = rp.kernel_overhead->source = src;
  return rp;
}

/// The vLLM run's configuration as moesim inputs (--vllm-serving, --vllm-latency).
calibrate::ServingImport vllm_import(const po::variables_map& vm, const ImportRun& run,
                                     const model::RuntimeProfile& rp) {
  calibrate::ServingImport vin;
  vin.model = run.model_id;
  vin.hw = run.hw;
  if (vm.count("precision")) vin.precision = vm["precision"].as<std::string>();
  if (vm.count("tp")) {
    vin.tp = vm["tp"].as<std::int64_t>();
    if (vin.tp < 1) throw UserError("--tp must be at least 1");
  }
  vin.runtime = rp;
  return vin;
}

/// "moesim calibrate fit: N vLLM <kind> result(s) replayed on NODE with RUNTIME", the first line of a vLLM fit.
void print_vllm_heading(std::ostream& out, std::size_t files, const char* kind, const ImportRun& run,
                        const model::RuntimeProfile& rp) {
  out << "moesim calibrate fit: " << files << " vLLM " << kind << " result" << (files == 1 ? "" : "s")
      << " replayed on " << run.node.id << " with " << rp.id
      << (run.existing ? "" : " (new: the hardware profile's figures)");
}

/// --vllm-latency: step_overhead fitted to the files' avg_latency; the table and the calibration block.
void fit_latency_files(const po::variables_map& vm, const calibrate::ServingImport& vin, const ImportRun& run,
                       model::RuntimeProfile& rp, std::ostream& out, nlohmann::json& calibration) {
  calibrate::LatencyLengths given;
  if (vm.count("input-len")) given.input_len = vm["input-len"].as<std::int64_t>();
  if (vm.count("output-len")) given.output_len = vm["output-len"].as<std::int64_t>();
  if (vm.count("batch-size")) given.batch_size = vm["batch-size"].as<std::int64_t>();
  std::vector<calibrate::VllmLatencyResult> runs;
  for (const auto& f : vm["vllm-latency"].as<std::vector<std::string>>())
    runs.push_back(calibrate::read_vllm_latency(f, given));
  const calibrate::LatencyFit fit = calibrate::fit_vllm_latency(runs, vin);
  std::vector<std::string> names;
  names.reserve(runs.size());
  for (const auto& r : runs) names.push_back(r.path);
  rp.step_overhead = {units::seconds(fit.step_overhead),
                      "fitted by `moesim calibrate fit --vllm-latency` to the avg_latency of " + text::join(names) +
                          run.source_note + " replayed in the serving simulator with " + rp.id + ", " + run.prov.day +
                          ", moesim " + run.prov.commit};
  print_vllm_heading(out, runs.size(), "latency", run, rp);
  out << "\nfitted: step_overhead " << units::format(units::seconds(fit.step_overhead)) << " per engine step\n\n";
  scenario::Table t({"file", "batch x in / out", "lengths from", "steps", "measured s", "datasheet s", "err",
                     "fitted s", "err", "LOO s", "err"});
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < fit.files.size(); ++i) {
    const auto& f = fit.files[i];
    const auto& r = runs[i];
    t.add_row({f.path,
               text::printf("%lld x %lld / %lld", static_cast<long long>(r.batch_size),
                            static_cast<long long>(r.input_len), static_cast<long long>(r.output_len)),
               r.lengths_from, text::printf("%.0f", f.steps), text::printf("%.4f", f.measured),
               text::printf("%.4f", f.before), err(f.before, f.measured), text::printf("%.4f", f.after),
               err(f.after, f.measured), f.loo ? text::printf("%.4f", *f.loo) : "-",
               f.loo ? err(*f.loo, f.measured) : "-"});
    nlohmann::json j = {{"file", f.path},
                        {"batch_size", r.batch_size},
                        {"input_len", r.input_len},
                        {"output_len", r.output_len},
                        {"lengths_from", r.lengths_from},
                        {"engine_steps", f.steps},
                        {"measured_latency", {{"value", f.measured}, {"unit", "s"}}},
                        {"before_fit", {{"value", f.before}, {"unit", "s"}}},
                        {"after_fit", {{"value", f.after}, {"unit", "s"}}}};
    if (f.loo) j["leave_one_out"] = {{"value", *f.loo}, {"unit", "s"}};
    files.push_back(j);
  }
  t.print_text(out);
  out << "\nerr = predicted / measured - 1; datasheet: step_overhead 0; LOO: predicted by the fit to the other "
         "files\n";
  calibration["vllm_latency"] = {{"files", files},
                                 {"step_overhead", {{"value", fit.step_overhead * 1e3}, {"unit", "ms"}}}};
}

/// One --vllm-serving file's figures (measured, before and after the fit, leave-one-out) as JSON.
nlohmann::json serving_file_json(const calibrate::ServingFileFit& f) {
  nlohmann::json j = {{"file", f.path},
                      {"measured", figures_json(f.measured)},
                      {"before_fit", figures_json(f.before)},
                      {"after_fit", figures_json(f.after)}};
  if (f.loo) {
    j["leave_one_out"] = figures_json(*f.loo);
    j["leave_one_out"]["step_overhead"] = {{"value", *f.loo_step * 1e3}, {"unit", "ms"}};
    j["leave_one_out"]["request_overhead"] = {{"value", *f.loo_request * 1e3}, {"unit", "ms"}};
    j["leave_one_out_ttft_error"] = {{"value", f.loo->ttft / f.measured.ttft - 1.0},
                                     {"unit", "fraction: predicted / measured - 1"}};
  }
  j["ttft_error_before_fit"] = {{"value", f.before.ttft / f.measured.ttft - 1.0},
                                {"unit", "fraction: predicted / measured - 1"}};
  j["ttft_error_after_fit"] = {{"value", f.after.ttft / f.measured.ttft - 1.0},
                               {"unit", "fraction: predicted / measured - 1"}};
  return j;
}

/// --vllm-serving: step_overhead and request_overhead fitted to the files' mean TTFT and TPOT; the table and
/// the calibration block.
void fit_serving_files(const po::variables_map& vm, const calibrate::ServingImport& vin, const ImportRun& run,
                       model::RuntimeProfile& rp, std::ostream& out, nlohmann::json& calibration) {
  std::vector<calibrate::VllmServingResult> runs;
  for (const auto& f : vm["vllm-serving"].as<std::vector<std::string>>())
    runs.push_back(calibrate::read_vllm_serving(f));
  const calibrate::ServingFit fit = calibrate::fit_vllm_serving(
      runs, vin, [](const std::string& line) { std::cerr << "calibrate fit: " << line << "\n"; });
  std::vector<std::string> names;
  names.reserve(runs.size());
  for (const auto& r : runs) names.push_back(r.path);
  const std::string src = "fitted by `moesim calibrate fit --vllm-serving` to the mean TTFT and TPOT of " +
                          text::join(names) + run.source_note + " replayed in the serving simulator with " + rp.id +
                          ", " + run.prov.day + ", moesim " + run.prov.commit;
  rp.step_overhead = {units::seconds(fit.step_overhead), src};
  rp.request_overhead = {units::seconds(fit.request_overhead), src};

  print_vllm_heading(out, runs.size(), "serving", run, rp);
  out << "\n";
  out << "fitted: step_overhead " << units::format(units::seconds(fit.step_overhead)) << " per engine step, "
      << "request_overhead " << units::format(units::seconds(fit.request_overhead)) << " per request (rms relative "
      << text::printf("%.3f", fit.rms_relative) << ", " << fit.iterations << " Gauss-Newton iterations, "
      << fit.simulations << " simulator runs)\n\n";
  scenario::Table t({"file", "basis", "TTFT ms", "err", "TPOT ms", "err", "output tok/s", "err"});
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : fit.files) {
    const auto row = [&](const std::string& basis, const calibrate::ServingFigures& p) {
      t.add_row({f.path, basis, ms(p.ttft), basis == "measured" ? "" : err(p.ttft, f.measured.ttft), ms(p.tpot),
                 basis == "measured" ? "" : err(p.tpot, f.measured.tpot), text::printf("%.1f", p.output_throughput),
                 basis == "measured" ? "" : err(p.output_throughput, f.measured.output_throughput)});
    };
    row("measured", f.measured);
    row("datasheet", f.before);
    row("fitted", f.after);
    if (f.loo) row("leave-one-out", *f.loo);
    files.push_back(serving_file_json(f));
  }
  t.print_text(out);
  out << "\nerr = predicted / measured - 1; datasheet: host costs 0; leave-one-out: the file predicted by the fit "
         "to the other files\n";
  calibration["vllm_serving"] = {{"files", files},
                                 {"step_overhead", {{"value", fit.step_overhead * 1e3}, {"unit", "ms"}}},
                                 {"request_overhead", {{"value", fit.request_overhead * 1e3}, {"unit", "ms"}}},
                                 {"rms_relative_error", fit.rms_relative},
                                 {"iterations", fit.iterations},
                                 {"simulations", fit.simulations}};
}

/// --trtllm-bench: the runtime's bandwidth (and compute) efficiency fitted to the reports' output throughput;
/// the table and the calibration block.
void fit_trtllm_files(const po::variables_map& vm, const ImportRun& run, model::RuntimeProfile& rp, std::ostream& out,
                      nlohmann::json& calibration) {
  std::vector<calibrate::TrtllmBenchReport> runs;
  for (const auto& f : vm["trtllm-bench"].as<std::vector<std::string>>())
    runs.push_back(calibrate::read_trtllm_bench(f));
  calibrate::TrtllmImport tin;
  tin.model = run.model_id;
  tin.hw = run.hw;
  if (vm.count("precision"))
    tin.precision = calibrate::trtllm_precision(runs.front(), vm["precision"].as<std::string>());
  tin.runtime = rp;
  const calibrate::TrtllmFit fit = calibrate::fit_trtllm_bench(runs, tin);
  std::vector<std::string> names;
  names.reserve(runs.size());
  for (const auto& r : runs) names.push_back(r.path);
  const std::string src = "fitted by `moesim calibrate fit --trtllm-bench` to the output throughput of " +
                          text::join(names) + run.source_note +
                          " replayed as max-load runs in the serving simulator with " + rp.id + "'s host times, " +
                          run.prov.day + ", moesim " + run.prov.commit;
  const double bandwidth_before = rp.bandwidth_efficiency ? rp.bandwidth_efficiency->value : 1.0;
  const double compute_before = rp.compute_efficiency ? rp.compute_efficiency->value : 1.0;
  if (!fit.bandwidth_pinned) rp.bandwidth_efficiency = model::Sourced<double>{fit.bandwidth_efficiency, src};
  if (fit.compute_fitted && !fit.compute_pinned)
    rp.compute_efficiency = model::Sourced<double>{fit.compute_efficiency, src};
  // The interval its figures carry: the held-out errors of these reports (validate's rule,
  // calibrate::error_interval), or none with one report. An interval the starting profile carried belongs
  // to the fit that made it, not to this one.
  std::string interval_note;
  if (fit.files.size() >= 2) {
    std::vector<double> errors;
    errors.reserve(fit.files.size());
    for (const auto& f : fit.files) errors.push_back(*f.loo / f.measured - 1.0);
    const auto range = calibrate::error_interval(errors);
    rp.error_low = range->first;
    rp.error_high = range->second;
    rp.calibration_rows = static_cast<std::int64_t>(errors.size());
    rp.interval_source = "the leave-one-out errors of the " + std::to_string(errors.size()) +
                         " trtllm-bench reports it was fitted to (each predicted by the fit to the others), " +
                         run.prov.day;
    interval_note = "interval: " + text::printf("%+.1f%% .. %+.1f%%", 100.0 * rp.error_low, 100.0 * rp.error_high) +
                    " (the reports' held-out errors), what `estimate --runtime` and `serve --runtime` show\n";
  } else if (!rp.interval_source.empty()) {
    rp.interval_source.clear();
    rp.error_low = rp.error_high = 0;
    rp.calibration_rows = 0;
    interval_note = "interval: none (one report has no held-out error; " +
                    std::string(run.existing ? "the starting "
                                               "profile's interval belonged to its own fit"
                                             : "") +
                    ")\n";
  }
  const auto kept = [&](bool pinned) {
    return pinned ? std::string(" (kept: the reports leave it no time after the host times and the other part)")
                  : std::string();
  };

  out << "moesim calibrate fit: " << runs.size() << " trtllm-bench throughput report" << (runs.size() == 1 ? "" : "s")
      << " replayed on " << run.node.id << " with " << rp.id
      << (run.existing ? "" : " (new: the hardware profile's figures)") << "\nfitted: bandwidth efficiency "
      << text::printf("%.3f", fit.bandwidth_efficiency) << " (was " << text::printf("%.3f", bandwidth_before) << ")"
      << kept(fit.bandwidth_pinned) << ", compute efficiency " << text::printf("%.3f", fit.compute_efficiency)
      << (fit.compute_fitted ? " (was " + text::printf("%.3f", compute_before) + ")" + kept(fit.compute_pinned)
                             : std::string(" (kept: one report fits the bandwidth efficiency alone)"))
      << "; host times " << units::format(rp.step_overhead.value) << " per engine step, "
      << units::format(rp.sequence_overhead.value) << " per sequence and step (kept)\n\n";
  scenario::Table t({"file", "TP x PP", "requests", "in / out", "weights", "KV", "measured tok/s", "before tok/s",
                     "err", "fitted tok/s", "err", "LOO tok/s", "err"});
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < fit.files.size(); ++i) {
    const auto& f = fit.files[i];
    const auto& r = runs[i];
    t.add_row({f.path,
               std::to_string(r.tp) + " x " + std::to_string(r.pp) +
                   (f.moe_ep > 1 ? " (EP " + std::to_string(f.moe_ep) + ")" : std::string()),
               std::to_string(r.num_requests), text::printf("%.0f / %.0f", r.input_length, r.output_length),
               f.precision, f.kv_cache_dtype, text::printf("%.1f", f.measured), text::printf("%.1f", f.before),
               err(f.before, f.measured), text::printf("%.1f", f.after), err(f.after, f.measured),
               f.loo ? text::printf("%.1f", *f.loo) : "-", f.loo ? err(*f.loo, f.measured) : "-"});
    nlohmann::json j = {{"file", f.path},
                        {"tp", r.tp},
                        {"pp", r.pp},
                        {"ep", r.ep},
                        {"moe_ep_replayed", f.moe_ep},
                        {"requests", r.num_requests},
                        {"input_length", {{"value", r.input_length}, {"unit", "tokens"}}},
                        {"output_length", {{"value", r.output_length}, {"unit", "tokens"}}},
                        {"precision", f.precision},
                        {"kv_cache_dtype", f.kv_cache_dtype},
                        {"measured", {{"value", f.measured}, {"unit", "tokens/s"}}},
                        {"before_fit", {{"value", f.before}, {"unit", "tokens/s"}}},
                        {"after_fit", {{"value", f.after}, {"unit", "tokens/s"}}}};
    if (f.loo) j["leave_one_out"] = {{"value", *f.loo}, {"unit", "tokens/s"}};
    files.push_back(j);
  }
  t.print_text(out);
  out << "\nerr = predicted / measured - 1; before: " << rp.id
      << " as given; LOO: predicted by the fit to the other reports\n"
      << interval_note;

  calibration["trtllm_bench"] = {{"files", files},
                                 {"bandwidth_efficiency", fit.bandwidth_efficiency},
                                 {"compute_efficiency", fit.compute_efficiency},
                                 {"compute_efficiency_fitted", fit.compute_fitted && !fit.compute_pinned},
                                 {"bandwidth_efficiency_fitted", !fit.bandwidth_pinned}};
}

}  // namespace

int cmd_calibrate_fit_imports(const po::variables_map& vm, const Args& args, std::ostream& stdout_stream) {
  // The text report is collected here and printed at the end, or replaced by the profile as JSON (--json).
  std::ostringstream out;
  ImportRun run;
  run.model_id = required(vm, "model", "the zoo id or config.json of the model the runs served");
  run.hw = required(vm, "hw", "the node profile of the machine that ran them");
  run.runtime_name = required(vm, "runtime",
                              "the runtime's name (e.g. vllm, llama.cpp-metal) or a "
                              "runtime profile to add to");
  check_import_flags(vm);
  run.node = model::load_node(run.hw);
  // Outputs are opened before any work, so a bad path fails at once; written together at the end.
  OutputSet outputs;
  OutputFile* file = vm.count("out") ? &outputs.add(vm["out"].as<std::string>(), "--out") : nullptr;
  run.prov = calibrate::current_provenance(command_line("calibrate fit", args));
  run.source_note = vm.count("source") ? " (" + vm["source"].as<std::string>() + ")" : std::string();
  nlohmann::json calibration = {{"provenance", calibrate::to_json(run.prov)}};

  const bool bench = vm.count("llama-bench") || vm.count("mlx-lm") || vm.count("llama-batched-bench");
  model::RuntimeProfile rp =
      bench ? fit_llama_bench(vm, run, out, calibration) : base_runtime(run.runtime_name, run.node, &run.existing);
  const calibrate::ServingImport vin = vllm_import(vm, run, rp);
  if (vm.count("vllm-latency")) fit_latency_files(vm, vin, run, rp, out, calibration);
  if (vm.count("vllm-serving")) fit_serving_files(vm, vin, run, rp, out, calibration);
  if (vm.count("trtllm-bench")) fit_trtllm_files(vm, run, rp, out, calibration);

  nlohmann::json doc = calibrate::runtime_profile_json(rp);
  doc["calibration"] = calibration;
  if (file) {
    file->stream() << doc.dump(2) << "\n";
    out << "runtime profile  " << file->path() << " (use it with --runtime " << file->path() << ")\n";
  }
  if (vm.count("json")) {
    stdout_stream << doc.dump(2) << "\n";  // the profile with its calibration block, units in every figure
  } else {
    stdout_stream << out.str();
  }
  outputs.commit();
  return 0;
}

}  // namespace moesim::apps
