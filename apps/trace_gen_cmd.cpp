// `moesim trace gen`: a synthetic routing trace (sim/trace_gen.hpp; the generator's model is in
// sim/TRACES.md). This file parses the options, calls the generator and writes the trace.

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>

#include "commands.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/trace_io.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

std::string presets_help() {
  std::string s = "\npresets (--preset; flags given as well override the preset's):\n";
  for (const auto& p : sim::trace_presets()) s += "  " + p.name + ": " + p.description + "\n";
  return s;
}

/// The options of `trace gen`: the shape, the raw knobs, the TARGET statistics and the output.
po::options_description describe_trace_gen_options() {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("preset", po::value<std::string>(),
                                                 "start from a named configuration (below)")(
      "model", po::value<std::string>(),
      "model: a zoo id (`moesim models`) or a config.json; gives MoE layers, experts and top-k")(
      "layers", po::value<std::int64_t>(), "MoE layers (overrides the model's)")(
      "experts", po::value<std::int64_t>(), "routed experts per layer (overrides the model's; <= 65,535)")(
      "top-k", po::value<std::int64_t>(), "experts chosen per token and layer (overrides the model's)")(
      "tokens", po::value<std::int64_t>()->default_value(10000), "tokens to generate")(
      "requests", po::value<std::int64_t>(), "split the tokens evenly over this many requests (default 1)")(
      "tokens-per-request", po::value<std::int64_t>(), "or: tokens per request (the last one may be shorter)")(
      "seed", po::value<std::string>()->default_value("1"), "random seed; the same seed gives the same bytes")(
      "popularity", po::value<std::string>(),
      "per-layer expert popularity: uniform (default), zipf (p ~ 1/rank^s, random ranks per layer) or dirichlet")(
      "zipf-s", po::value<double>(), "raw knob: Zipf exponent s >= 0 (default 1)")(
      "dirichlet-alpha", po::value<double>(), "raw knob: Dirichlet concentration > 0 (default 1; small = skewed)")(
      "drift", po::value<std::string>(),
      "popularity drift per request: none (default), redraw (a new vector per request) or mixture (--domains)")(
      "domains", po::value<std::int64_t>(), "mixture drift: domain vectors per layer (default 4)")(
      "reuse", po::value<std::string>(),
      "TARGET: fraction of a token's experts that the previous token (same request, same layer) also chose; one "
      "value, or a depth profile of evenly spaced control points (0.08,0.34); valid range [chance, 1] where "
      "chance is k/E for uniform popularity")(
      "first-choice-repeat", po::value<std::string>(),
      "TARGET: fraction of tokens whose first (highest-weight) expert is the previous token's first; value or "
      "profile; chance is 1/E for uniform popularity (Mixtral Table 5)")(
      "rho", po::value<std::string>(),
      "raw knob: probability of keeping each previous expert, in its slot; one value, a profile, or one per layer")(
      "max-mean-load", po::value<double>(),
      "TARGET: per-layer max/mean expert load over windows of --window tokens (solves --zipf-s, or "
      "--dirichlet-alpha with --popularity dirichlet)")("window", po::value<std::int64_t>(),
                                                        "tokens per window for --max-mean-load (default 1024)")(
      "lru-hit", po::value<double>(),
      "TARGET: per-layer LRU hit rate with a cache of --lru-cache experts (solves the skew like --max-mean-load)")(
      "lru-cache", po::value<std::int64_t>(), "experts per layer in the --lru-hit cache (default 16)")(
      "no-weights", "do not write gate weights")(
      "logit-std", po::value<double>(),
      "gate weights are softmax(N(0, sigma) logits) over the chosen experts, sorted; sigma (default 1)")(
      "out", po::value<std::string>(), "output file: .jsonl (JSON lines) or .mtrace (binary); written atomically")(
      "format", po::value<std::string>(),
      (choices_in(sim::trace_formats()) + ", when --out's extension does not say").c_str());
  return desc;
}

/// --preset, then --model (or the preset's), then --layers, --experts and --top-k: the trace's shape, and the
/// preset's popularity, drift and targets. Returns the preset's tokens per request, when it gives them.
std::optional<std::int64_t> resolve_trace_shape(const po::variables_map& vm, sim::TraceGenOptions& o,
                                                sim::TraceGenTargets& tg) {
  std::optional<std::int64_t> preset_tpr;
  std::string model = vm.count("model") ? vm["model"].as<std::string>() : "";
  if (vm.count("preset")) {
    const auto& p = sim::find_trace_preset(vm["preset"].as<std::string>());
    o.preset = p.name;
    if (model.empty()) model = p.model;
    if (p.top_k) o.top_k = *p.top_k;
    o.popularity = p.popularity;
    o.zipf_s = p.zipf_s;
    o.drift = p.drift;
    o.domains = p.domains;
    tg = p.targets;
    if (p.tokens_per_request > 0) preset_tpr = p.tokens_per_request;
  }
  if (!model.empty()) {
    const auto arch = model::load_model(model);
    if (!arch.is_moe()) {
      throw UserError("--model " + model +
                      " is a dense model; a routing trace needs routed experts (see `moesim "
                      "models` for the MoE ones)");
    }
    o.model = arch.id;
    o.layers = model::moe_layer_count(arch);
    o.experts = arch.routed_experts;
    if (o.top_k == 0) o.top_k = arch.top_k;
  } else {
    o.model = "custom";
  }
  if (vm.count("layers")) o.layers = vm["layers"].as<std::int64_t>();
  if (vm.count("experts")) o.experts = vm["experts"].as<std::int64_t>();
  if (vm.count("top-k")) o.top_k = vm["top-k"].as<std::int64_t>();
  if (o.layers == 0 || o.experts == 0 || o.top_k == 0) {
    throw UserError(
        "--model is missing; give a zoo id (see `moesim models`), a config.json, or all of --layers, "
        "--experts and --top-k");
  }
  return preset_tpr;
}

/// --tokens and how they split into requests (--requests, --tokens-per-request, else the preset's).
void resolve_trace_requests(const po::variables_map& vm, const std::optional<std::int64_t>& preset_tpr,
                            sim::TraceGenOptions& o) {
  o.tokens = vm["tokens"].as<std::int64_t>();
  if (o.tokens < 1) throw UserError("--tokens must be at least 1");
  if (vm.count("requests") && vm.count("tokens-per-request")) {
    throw UserError("--requests and --tokens-per-request both split the tokens; give one of them");
  }
  o.requests = 1;
  if (vm.count("requests")) o.requests = vm["requests"].as<std::int64_t>();
  std::optional<std::int64_t> tpr = preset_tpr;
  if (vm.count("tokens-per-request")) tpr = vm["tokens-per-request"].as<std::int64_t>();
  if (tpr && !vm.count("requests")) {
    if (*tpr < 1) throw UserError("--tokens-per-request must be at least 1");
    o.requests = (o.tokens + *tpr - 1) / *tpr;
  }
}

/// The seed, the raw knobs (--popularity, --zipf-s, --rho, ...) and the TARGET statistics solved for them.
void resolve_trace_targets(const po::variables_map& vm, sim::TraceGenOptions& o, sim::TraceGenTargets& tg) {
  o.seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  if (vm.count("popularity")) o.popularity = sim::parse_popularity(vm["popularity"].as<std::string>(), "--popularity");
  if (vm.count("zipf-s")) o.zipf_s = vm["zipf-s"].as<double>();
  if (vm.count("dirichlet-alpha")) o.dirichlet_alpha = vm["dirichlet-alpha"].as<double>();
  if (vm.count("drift")) o.drift = sim::parse_drift(vm["drift"].as<std::string>(), "--drift");
  if (vm.count("domains")) o.domains = vm["domains"].as<std::int64_t>();
  // A flag for a knob replaces the preset's target for that knob (and the other way round).
  if (flag_given(vm, "reuse") || flag_given(vm, "first-choice-repeat") || flag_given(vm, "rho")) {
    tg.reuse.clear();
    tg.first_choice_repeat.clear();
  }
  if (flag_given(vm, "max-mean-load") || flag_given(vm, "lru-hit") || flag_given(vm, "zipf-s") ||
      flag_given(vm, "dirichlet-alpha")) {
    tg.max_mean_load.reset();
    tg.lru_hit.reset();
  }
  if (vm.count("reuse"))
    tg.reuse = parse_numbers(vm["reuse"].as<std::string>(), "--reuse", "0.25 or a profile 0.14,0.27,0.22");
  if (vm.count("first-choice-repeat")) {
    tg.first_choice_repeat = parse_numbers(vm["first-choice-repeat"].as<std::string>(), "--first-choice-repeat",
                                           "0.25 or a profile 0.14,0.27,0.22");
  }
  if (vm.count("rho")) {
    const auto r = parse_numbers(vm["rho"].as<std::string>(), "--rho", "0.25 or a profile 0.14,0.27,0.22");
    o.rho = r.size() == 1 || r.size() == static_cast<std::size_t>(o.layers) ? r : sim::interpolate_profile(r, o.layers);
  }
  if (vm.count("max-mean-load")) tg.max_mean_load = vm["max-mean-load"].as<double>();
  if (vm.count("window")) tg.window = vm["window"].as<std::int64_t>();
  if (vm.count("lru-hit")) tg.lru_hit = vm["lru-hit"].as<double>();
  if (vm.count("lru-cache")) tg.lru_cache = vm["lru-cache"].as<std::int64_t>();
  if (vm.count("window") && !tg.max_mean_load) throw UserError("--window goes with --max-mean-load; give both");
  if (vm.count("lru-cache") && !tg.lru_hit) throw UserError("--lru-cache goes with --lru-hit; give both");
  if (tg.lru_hit && !(*tg.lru_hit >= 0 && *tg.lru_hit <= 1)) {
    throw UserError("--lru-hit " + text::printf("%g", *tg.lru_hit) + " is not a fraction in [0, 1]");
  }
  if (tg.max_mean_load && !(*tg.max_mean_load >= 1)) {
    throw UserError("--max-mean-load " + text::printf("%g", *tg.max_mean_load) +
                    " is below 1; the busiest expert always carries at least the mean load");
  }
}

/// The targets solved for the raw knobs (`o` gets the solved values), then the trace; both say on stderr how
/// long they took, and only when that is over a second.
sim::RoutingTrace solve_and_generate(sim::TraceGenOptions& o, const sim::TraceGenTargets& tg) {
  const auto t0 = std::chrono::steady_clock::now();
  o = sim::solve_targets(o, tg);
  if (seconds_since(t0) > 1.0) {
    std::cerr << text::printf("moesim trace gen: solved the targets in %.1f s (%s)\n", seconds_since(t0),
                              o.solved_note.c_str());
  }
  const auto t1 = std::chrono::steady_clock::now();
  double next_report = 0.1;
  return sim::generate_trace(o, [&](double done) {
    // Progress goes to stderr, and only for a run long enough to need it.
    if (done >= next_report && seconds_since(t1) > 1.0) {
      std::cerr << text::printf("moesim trace gen: %.0f%%\n", 100.0 * done);
      next_report = std::floor(done * 10.0 + 1.0) / 10.0;
    }
  });
}

}  // namespace

int cmd_trace_gen(const Args& args, std::ostream& out) {
  const po::options_description desc = describe_trace_gen_options();
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim trace gen --model M --tokens N --out F [options]\n\n"
          "A synthetic routing trace (models_and_routing.md §B.4): per layer a popularity vector (uniform, Zipf,\n"
          "Dirichlet; optionally drifting per request), and temporal locality (each of the previous token's experts\n"
          "kept with probability rho, the rest drawn from the popularity without replacement). Options marked TARGET\n"
          "name a statistic (as `moesim trace stats` measures it) and are solved for the raw knobs: rho exactly for\n"
          "uniform popularity, by calibration on short pilot traces otherwise. The header's \"source\" records every\n"
          "parameter, solved values included.\n"
          "examples:\n"
          "  moesim trace gen --model dbrx-instruct --tokens 100000 --out dbrx.mtrace\n"
          "  moesim trace gen --preset flash-moe-qwen3.5 --tokens 20000 --out qwen.jsonl\n"
          "  moesim trace gen --model deepseek-v3 --popularity zipf --max-mean-load 2 --window 2752 --reuse 0.2 "
          "--out ds.mtrace",
          presets_help())) {
    return 0;
  }
  if (!vm.count("out")) throw UserError("--out is missing; give the file to write (.jsonl or .mtrace)");
  const std::string out_path = vm["out"].as<std::string>();
  const auto format = vm.count("format")
                          ? std::optional(sim::parse_trace_format(vm["format"].as<std::string>(), "--format"))
                          : std::optional(sim::trace_format_for_path(out_path, "--out"));

  sim::TraceGenOptions o;
  sim::TraceGenTargets tg;
  const std::optional<std::int64_t> preset_tpr = resolve_trace_shape(vm, o, tg);
  resolve_trace_requests(vm, preset_tpr, o);
  resolve_trace_targets(vm, o, tg);
  o.weights = !vm.count("no-weights");
  if (vm.count("logit-std")) o.logit_std = vm["logit-std"].as<double>();

  const auto trace = solve_and_generate(o, tg);
  sim::write_trace(trace, out_path, format, "--out");
  out << "wrote " << out_path << " (" << sim::trace_format_name(*format) << "): " << trace.tokens() << " tokens, "
      << o.requests << " request" << (o.requests == 1 ? "" : "s") << ", " << o.layers << " MoE layers, " << o.experts
      << " experts, top-" << o.top_k << (o.weights ? ", gate weights" : "") << "\n";
  out << "source: " << trace.header.source << "\n";
  return 0;
}

}  // namespace moesim::apps
