// vLLM serving benchmarks replayed and the runtime's host costs fitted to them (calibrate/serving_fit.hpp).

#include "moesim/calibrate/serving_fit.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moesim/calibrate/lsq.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/sim/serving.hpp"

namespace moesim::calibrate {
namespace {

constexpr const char* kFix = "give the file benchmark_serving.py wrote with --save-result, unedited (calibrate/FIT.md)";

double positive(const json::Node& n, const char* key) {
  const double v = n.number(key);
  if (!(v > 0) || !std::isfinite(v)) throw n.error(key, "must be a positive number; " + std::string(kFix));
  return v;
}

std::vector<std::int64_t> lengths(const json::Node& n, const char* key) {
  std::vector<std::int64_t> out;
  if (!n.has(key) || n.is_null(key)) return out;
  if (!n.raw().at(key).is_array()) throw n.error(key, "is not an array of token counts; " + std::string(kFix));
  for (const auto& e : n.elements(key)) {
    if (!e.raw().is_number_integer() || e.raw().get<std::int64_t>() < 0)
      throw n.error(key,
                    "holds " + json::type_name(e.raw()) + " where a token count (an integer >= 0) belongs; " + kFix);
    out.push_back(e.raw().get<std::int64_t>());
  }
  return out;
}

}  // namespace

VllmServingResult read_vllm_serving(const std::filesystem::path& path) {
  const nlohmann::json doc = json::load_file(path);  // bounded before reading (read_input_file)
  const json::Node n(doc, path.string());
  if (!doc.is_object()) throw n.error("is not a benchmark_serving.py result (a JSON object); " + std::string(kFix));
  // The keys the replay and the fit need (benchmark_serving.py writes them all; the statistics only for
  // the metrics selected by --percentile-metrics, whose default "ttft,tpot,itl" includes these two).
  for (const char* key :
       {"num_prompts", "request_rate", "completed", "duration", "total_input_tokens", "total_output_tokens",
        "request_throughput", "output_throughput", "mean_ttft_ms", "mean_tpot_ms"})
    if (!n.has(key))
      throw n.error(key,
                    std::string("is missing; ") + kFix +
                        (std::string(key).starts_with("mean_") ? " (with ttft and tpot in --percentile-metrics)" : ""));
  VllmServingResult r;
  r.path = path.string();
  r.date = n.optional_string("date").value_or("");
  r.backend = n.optional_string("backend").value_or("");
  r.model_id = n.optional_string("model_id").value_or("");
  r.num_prompts = n.integer("num_prompts", 1);
  r.completed = n.integer("completed", 0);
  if (r.completed < 1)
    throw n.error("completed", "is 0: every request failed, there is nothing to fit; rerun the benchmark");
  if (r.completed < r.num_prompts)
    throw n.error("completed", std::to_string(r.completed) + " of " + std::to_string(r.num_prompts) +
                                   " requests completed: the failed ones (see \"errors\") would bias the replay; "
                                   "rerun the benchmark until every request succeeds");
  // "request_rate": a number, or the string "inf" (main(): `args.request_rate if < inf else "inf"`).
  const nlohmann::json& rate = n.raw().at("request_rate");
  if (rate.is_string()) {
    if (rate.get<std::string>() != "inf")
      throw n.error("request_rate", "\"" + text::one_line(rate.get<std::string>()) +
                                        "\" is neither a number of requests/s nor \"inf\"; " + kFix);
  } else {
    r.request_rate = positive(n, "request_rate");
  }
  if (n.has("burstiness") && !n.is_null("burstiness")) r.burstiness = positive(n, "burstiness");
  if (n.has("max_concurrency") && !n.is_null("max_concurrency")) r.max_concurrency = n.integer("max_concurrency", 1);
  r.duration = positive(n, "duration");
  r.total_input_tokens = n.integer("total_input_tokens", 1);
  r.total_output_tokens = n.integer("total_output_tokens", 1);
  r.request_throughput = positive(n, "request_throughput");
  r.output_throughput = positive(n, "output_throughput");
  r.input_lens = lengths(n, "input_lens");
  r.output_lens = lengths(n, "output_lens");
  if (!r.input_lens.empty() || !r.output_lens.empty()) {
    for (const char* key : {"input_lens", "output_lens"}) {
      const auto& v = std::string(key) == "input_lens" ? r.input_lens : r.output_lens;
      if (static_cast<std::int64_t>(v.size()) != r.num_prompts)
        throw n.error(key, "holds " + std::to_string(v.size()) + " lengths for num_prompts " +
                               std::to_string(r.num_prompts) + "; " + kFix);
    }
  }
  // The statistics are in milliseconds (calculate_metrics: `np.mean(ttfts) * 1000`).
  r.mean_ttft = positive(n, "mean_ttft_ms") / 1e3;
  r.mean_tpot = positive(n, "mean_tpot_ms") / 1e3;
  if (auto v = n.optional_number("median_ttft_ms")) r.median_ttft = *v / 1e3;
  if (auto v = n.optional_number("mean_itl_ms")) r.mean_itl = *v / 1e3;
  return r;
}

ServingFigures replay_vllm_serving(const VllmServingResult& run, const ServingImport& in, double step, double request) {
  const auto mean_of = [&](const std::vector<std::int64_t>& v, std::int64_t total) {
    const double m = v.empty() ? static_cast<double>(total) / static_cast<double>(run.num_prompts)
                               : static_cast<double>(std::accumulate(v.begin(), v.end(), std::int64_t{0})) /
                                     static_cast<double>(v.size());
    return std::max<std::int64_t>(1, std::llround(m));
  };
  const std::int64_t prompt = mean_of(run.input_lens, run.total_input_tokens);
  const std::int64_t output = mean_of(run.output_lens, run.total_output_tokens);
  nlohmann::json workload;
  if (run.max_concurrency) {
    // The benchmark's semaphore: at most max_concurrency requests in flight, the next sent when one ends.
    workload = {{"arrival", "closed-loop"}, {"users", *run.max_concurrency}, {"user_interval", "0s"},
                {"think_time", "0s"},       {"requests", run.num_prompts},   {"prompt", prompt},
                {"output", output}};
  } else {
    workload = {{"arrival", run.request_rate ? "poisson" : "uniform"},
                {"rate", text::printf("%.17g/s", run.request_rate.value_or(1.0))},
                {"requests", run.num_prompts},
                {"prompt", prompt},
                {"output", output},
                {"seed", 1}};
  }
  scenario::ServeScenario sc;
  sc.doc = {{"description", "replay of " + run.path},
            {"model", in.model},
            {"hw", in.hw},
            {"plan", {{"tp", in.tp}}},
            {"precision", in.precision},
            {"workload", workload},
            {"generate", {{"tokens", 8192}, {"seed", 1}}}};
  sc.source = run.path + " (replayed)";
  const std::unique_ptr<scenario::PreparedServe> p = scenario::prepare_serve(sc);
  // The runtime's GPU-side figures, then the host costs under test (config.node points at p->node).
  p->node = model::apply_runtime(p->node, in.runtime);
  p->node.devices.step_overhead = model::Sourced<units::Duration>{units::seconds(step), "fit in progress"};
  p->node.devices.request_overhead = model::Sourced<units::Duration>{units::seconds(request), "fit in progress"};
  auto& reqs = p->config.requests;
  if (!run.max_concurrency) {
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (!run.request_rate) reqs[i].arrival = sim::SimTime{};  // "inf": benchmark() sends every request at once
      if (i < run.input_lens.size()) {
        reqs[i].prompt_tokens = std::max<std::int64_t>(1, run.input_lens[i]);
        reqs[i].output_tokens = std::max<std::int64_t>(1, run.output_lens[i]);
      }
    }
  }
  const sim::ServingResult r = sim::run_serving(p->config);
  return {r.ttft.mean, r.tpot.mean, r.output_throughput, r.duration};
}

namespace {

struct Solved {
  double step = 0, request = 0, rms = 0;
  std::int64_t iterations = 0, simulations = 0;
};

/// Gauss-Newton with non-negative steps (the header's description) over `runs`. The simulator's figures
/// are piecewise smooth in the overheads (a prompt chunk or a queued request moves to another step), so a
/// step is taken only where it lowers the rms relative error, halved up to four times until it does
/// (a backtracking line search); none that does, or a move under 0.1%, ends the fit.
Solved solve(const std::vector<const VllmServingResult*>& runs, const ServingImport& in,
             const std::function<void(const std::string&)>& progress) {
  double tpot_scale = 0, ttft_scale = 0;
  for (const auto* r : runs) {
    tpot_scale += r->mean_tpot / static_cast<double>(runs.size());
    ttft_scale += r->mean_ttft / static_cast<double>(runs.size());
  }
  Solved s;
  const auto rms_at = [&](const std::vector<double>& x, std::vector<ServingFigures>* figures) {
    double sq = 0;
    for (const auto* m : runs) {
      const ServingFigures p = replay_vllm_serving(*m, in, x[0], x[1]);
      ++s.simulations;
      sq += std::pow(p.ttft / m->mean_ttft - 1.0, 2) + std::pow(p.tpot / m->mean_tpot - 1.0, 2);
      if (figures) figures->push_back(p);
    }
    return std::sqrt(sq / static_cast<double>(2 * runs.size()));
  };
  std::vector<double> x = {0.0, 0.0};
  std::vector<ServingFigures> base;
  double rms = rms_at(x, &base);
  constexpr int kMaxIterations = 20;
  for (int it = 0; it < kMaxIterations; ++it) {
    // Forward-difference steps: 1% of the parameter, or of the measured time it shows in when it is 0.
    const double ds = 0.01 * std::max(x[0], tpot_scale), dr = 0.01 * std::max(x[1], ttft_scale);
    Matrix a(2 * runs.size(), 2);
    std::vector<double> b(2 * runs.size());
    for (std::size_t f = 0; f < runs.size(); ++f) {
      const auto& m = *runs[f];
      const ServingFigures& p0 = base[f];
      const ServingFigures ps = replay_vllm_serving(m, in, x[0] + ds, x[1]);
      const ServingFigures pr = replay_vllm_serving(m, in, x[0], x[1] + dr);
      s.simulations += 2;
      const std::size_t i = 2 * f;
      // Rows: relative residuals of mean TTFT and mean TPOT, linearised around x.
      a(i, 0) = (ps.ttft - p0.ttft) / ds / m.mean_ttft;
      a(i, 1) = (pr.ttft - p0.ttft) / dr / m.mean_ttft;
      a(i + 1, 0) = (ps.tpot - p0.tpot) / ds / m.mean_tpot;
      a(i + 1, 1) = (pr.tpot - p0.tpot) / dr / m.mean_tpot;
      b[i] = (m.mean_ttft - p0.ttft) / m.mean_ttft + a(i, 0) * x[0] + a(i, 1) * x[1];
      b[i + 1] = (m.mean_tpot - p0.tpot) / m.mean_tpot + a(i + 1, 0) * x[0] + a(i + 1, 1) * x[1];
    }
    const std::vector<double> target = nonnegative_least_squares(a, b);
    ++s.iterations;
    bool moved = false;
    std::vector<double> next = x;
    for (double lambda = 1.0; lambda >= 1.0 / 16.0; lambda /= 2.0) {
      const std::vector<double> cand = {x[0] + lambda * (target[0] - x[0]), x[1] + lambda * (target[1] - x[1])};
      std::vector<ServingFigures> figures;
      const double r = rms_at(cand, &figures);
      if (r < rms) {
        next = cand;
        rms = r;
        base = std::move(figures);
        moved = true;
        break;
      }
    }
    const bool small = std::fabs(next[0] - x[0]) <= 1e-3 * std::max(next[0], 1e-3 * tpot_scale) &&
                       std::fabs(next[1] - x[1]) <= 1e-3 * std::max(next[1], 1e-3 * ttft_scale);
    x = next;
    if (progress)
      progress(text::printf("iteration %lld: step_overhead %.4g ms, request_overhead %.4g ms, rms relative error %.4f",
                            static_cast<long long>(s.iterations), x[0] * 1e3, x[1] * 1e3, rms));
    if (!moved || small) break;
  }
  s.step = x[0];
  s.request = x[1];
  s.rms = rms;
  return s;
}

}  // namespace

ServingFit fit_vllm_serving(const std::vector<VllmServingResult>& runs, const ServingImport& in,
                            const std::function<void(const std::string&)>& progress) {
  MOESIM_CHECK(!runs.empty(), "at least one serving result to fit");
  std::vector<const VllmServingResult*> all;
  all.reserve(runs.size());
  for (const auto& r : runs) all.push_back(&r);
  const Solved s = solve(all, in, progress);
  ServingFit fit;
  fit.step_overhead = s.step;
  fit.request_overhead = s.request;
  fit.iterations = s.iterations;
  fit.simulations = s.simulations;
  double sq = 0;
  for (std::size_t f = 0; f < runs.size(); ++f) {
    ServingFileFit x;
    x.path = runs[f].path;
    x.measured = {runs[f].mean_ttft, runs[f].mean_tpot, runs[f].output_throughput};
    x.before = replay_vllm_serving(runs[f], in, 0.0, 0.0);
    x.after = replay_vllm_serving(runs[f], in, s.step, s.request);
    fit.simulations += 2;
    sq += std::pow(x.after.ttft / x.measured.ttft - 1, 2) + std::pow(x.after.tpot / x.measured.tpot - 1, 2);
    if (runs.size() >= 2) {
      std::vector<const VllmServingResult*> others;
      for (std::size_t g = 0; g < runs.size(); ++g)
        if (g != f) others.push_back(&runs[g]);
      const Solved o = solve(others, in, {});
      x.loo = replay_vllm_serving(runs[f], in, o.step, o.request);
      x.loo_step = o.step;
      x.loo_request = o.request;
      fit.simulations += o.simulations + 1;
    }
    fit.files.push_back(x);
  }
  fit.rms_relative = std::sqrt(sq / static_cast<double>(2 * runs.size()));
  return fit;
}

VllmLatencyResult read_vllm_latency(const std::filesystem::path& path, const LatencyLengths& given) {
  const nlohmann::json doc = json::load_file(path);  // bounded before reading (read_input_file)
  const json::Node n(doc, path.string());
  const std::string fix = "give the file benchmark_latency.py wrote with --output-json, unedited (calibrate/FIT.md)";
  if (!doc.is_object()) throw n.error("is not a benchmark_latency.py result (a JSON object); " + fix);
  if (!n.has("avg_latency")) throw n.error("avg_latency", "is missing; " + fix);
  VllmLatencyResult r;
  r.path = path.string();
  r.avg_latency = n.number("avg_latency");
  if (!(r.avg_latency > 0) || !std::isfinite(r.avg_latency))
    throw n.error("avg_latency", "must be a positive number of seconds; " + fix);
  if (n.has("latencies") && !n.raw().at("latencies").is_array())
    throw n.error("latencies", "is not an array of seconds; " + fix);
  const bool in_file = n.has("input_len") || n.has("output_len") || n.has("batch_size");
  const bool on_line = given.input_len || given.output_len || given.batch_size;
  if (in_file && on_line)
    throw n.error(
        "the file records its lengths (input_len, output_len, batch_size): drop --input-len, "
        "--output-len and --batch-size");
  r.lengths_from = in_file ? "file" : on_line ? "command line" : "benchmark_latency.py defaults";
  // benchmark_latency.py's argparse defaults: --input-len 32, --output-len 128, --batch-size 8.
  r.input_len = in_file ? n.optional_integer("input_len", 1).value_or(32) : given.input_len.value_or(32);
  r.output_len = in_file ? n.optional_integer("output_len", 1).value_or(128) : given.output_len.value_or(128);
  r.batch_size = in_file ? n.optional_integer("batch_size", 1).value_or(8) : given.batch_size.value_or(8);
  if (r.input_len < 1 || r.output_len < 1 || r.batch_size < 1)
    throw UserError(r.path + ": --input-len, --output-len and --batch-size must be at least 1");
  return r;
}

namespace {

/// The latency's batch as a serving result: every prompt at once, fixed lengths.
VllmServingResult as_batch(const VllmLatencyResult& l) {
  VllmServingResult r;
  r.path = l.path;
  r.num_prompts = r.completed = l.batch_size;
  r.input_lens.assign(static_cast<std::size_t>(l.batch_size), l.input_len);
  r.output_lens.assign(static_cast<std::size_t>(l.batch_size), l.output_len);
  r.total_input_tokens = l.batch_size * l.input_len;
  r.total_output_tokens = l.batch_size * l.output_len;
  return r;
}

double solve_latency(const std::vector<LatencyFileFit>& files, const std::vector<std::size_t>& use) {
  Matrix a(use.size(), 1);
  std::vector<double> b(use.size());
  for (std::size_t k = 0; k < use.size(); ++k) {
    const LatencyFileFit& f = files[use[k]];
    a(k, 0) = f.steps / f.measured;
    b[k] = (f.measured - f.before) / f.measured;
  }
  return nonnegative_least_squares(a, b)[0];
}

}  // namespace

LatencyFit fit_vllm_latency(const std::vector<VllmLatencyResult>& runs, const ServingImport& in) {
  MOESIM_CHECK(!runs.empty(), "at least one latency result to fit");
  LatencyFit fit;
  for (const auto& l : runs) {
    LatencyFileFit f;
    f.path = l.path;
    f.measured = l.avg_latency;
    const VllmServingResult batch = as_batch(l);
    f.before = replay_vllm_serving(batch, in, 0.0, 0.0).duration;
    // The slope: the batch's engine steps (1% of the measured latency per step as the probe).
    const double probe = 0.01 * l.avg_latency;
    f.steps = (replay_vllm_serving(batch, in, probe, 0.0).duration - f.before) / probe;
    fit.files.push_back(f);
  }
  std::vector<std::size_t> all(runs.size());
  std::iota(all.begin(), all.end(), std::size_t{0});
  fit.step_overhead = solve_latency(fit.files, all);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    LatencyFileFit& f = fit.files[i];
    f.after = replay_vllm_serving(as_batch(runs[i]), in, fit.step_overhead, 0.0).duration;
    if (runs.size() >= 2) {
      std::vector<std::size_t> others;
      for (std::size_t j = 0; j < runs.size(); ++j)
        if (j != i) others.push_back(j);
      f.loo = replay_vllm_serving(as_batch(runs[i]), in, solve_latency(fit.files, others), 0.0).duration;
    }
  }
  return fit;
}

}  // namespace moesim::calibrate
