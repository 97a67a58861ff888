// `moesim trace gen|stats|convert`: routing traces (issue 3, part 1). The formats, the generator's model and
// the statistics' definitions are in sim/TRACES.md; the code is in sim/trace_*.hpp. This file only parses
// arguments, calls the libraries and prints.

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/table.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/trace_import.hpp"
#include "moesim/sim/trace_io.hpp"
#include "moesim/sim/trace_stats.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Leading arguments that are not options: the input files of `stats` and `convert`.
std::vector<std::string> take_inputs(Args& args) {
  std::vector<std::string> in;
  while (!args.empty() && (args.front().empty() || args.front()[0] != '-' || args.front() == "-")) {
    in.push_back(args.front());
    args.erase(args.begin());
  }
  return in;
}

std::string pct(double x) { return reports::fixed(100.0 * x, 1); }

const char* const kTraceUsage =
    "usage: moesim trace gen|stats|convert [options]     (moesim trace <sub> --help for its options)\n\n"
    "Routing traces: what each token's router chose, per MoE layer (formats: sim/TRACES.md).\n"
    "  gen      make a synthetic trace (uniform, Zipf or Dirichlet popularity, temporal locality), with\n"
    "           parameters named after the statistics they produce, and presets matching published measurements\n"
    "  stats    load max/mean, reuse, LRU hit rate per cache size, distinct experts per batch, per-node load,\n"
    "           degenerate layers\n"
    "  convert  between .jsonl and .mtrace, and import MoE_expert_selection_trace, speculative-moe and vLLM files\n"
    "           (the format is detected when --from is not given)\n"
    "Every input may be gzip or zstd compressed.\n";

// ------------------------------------------------------------------------------------------------------
// gen

std::string presets_help() {
  std::string s = "\npresets (--preset; flags given as well override the preset's):\n";
  for (const auto& p : sim::trace_presets()) s += "  " + p.name + ": " + p.description + "\n";
  return s;
}

int trace_gen(const Args& args, std::ostream& out) {
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
      "format", po::value<std::string>(), "jsonl or binary, when --out's extension does not say");
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
  const auto given = [&](const char* k) { return vm.count(k) && !vm[k].defaulted(); };
  if (!vm.count("out")) throw UserError("--out is missing; give the file to write (.jsonl or .mtrace)");
  const std::string out_path = vm["out"].as<std::string>();
  const auto format = vm.count("format")
                          ? std::optional(sim::parse_trace_format(vm["format"].as<std::string>(), "--format"))
                          : std::optional(sim::trace_format_for_path(out_path, "--out"));

  sim::TraceGenOptions o;
  sim::TraceGenTargets tg;
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
  o.seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  if (vm.count("popularity")) o.popularity = sim::parse_popularity(vm["popularity"].as<std::string>(), "--popularity");
  if (vm.count("zipf-s")) o.zipf_s = vm["zipf-s"].as<double>();
  if (vm.count("dirichlet-alpha")) o.dirichlet_alpha = vm["dirichlet-alpha"].as<double>();
  if (vm.count("drift")) o.drift = sim::parse_drift(vm["drift"].as<std::string>(), "--drift");
  if (vm.count("domains")) o.domains = vm["domains"].as<std::int64_t>();
  // A flag for a knob replaces the preset's target for that knob (and the other way round).
  if (given("reuse") || given("first-choice-repeat") || given("rho")) {
    tg.reuse.clear();
    tg.first_choice_repeat.clear();
  }
  if (given("max-mean-load") || given("lru-hit") || given("zipf-s") || given("dirichlet-alpha")) {
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
  o.weights = !vm.count("no-weights");
  if (vm.count("logit-std")) o.logit_std = vm["logit-std"].as<double>();

  const auto t0 = Clock::now();
  o = sim::solve_targets(o, tg);
  if (seconds_since(t0) > 1.0) {
    std::cerr << text::printf("moesim trace gen: solved the targets in %.1f s (%s)\n", seconds_since(t0),
                              o.solved_note.c_str());
  }
  const auto t1 = Clock::now();
  double next_report = 0.1;
  const auto trace = sim::generate_trace(o, [&](double done) {
    // Progress goes to stderr, and only for a run long enough to need it.
    if (done >= next_report && seconds_since(t1) > 1.0) {
      std::cerr << text::printf("moesim trace gen: %.0f%%\n", 100.0 * done);
      next_report = std::floor(done * 10.0 + 1.0) / 10.0;
    }
  });
  sim::write_trace(trace, out_path, format, "--out");
  out << "wrote " << out_path << " (" << sim::trace_format_name(*format) << "): " << trace.tokens() << " tokens, "
      << o.requests << " request" << (o.requests == 1 ? "" : "s") << ", " << o.layers << " MoE layers, " << o.experts
      << " experts, top-" << o.top_k << (o.weights ? ", gate weights" : "") << "\n";
  out << "source: " << trace.header.source << "\n";
  return 0;
}

// ------------------------------------------------------------------------------------------------------
// stats

nlohmann::json metric(double value, const char* unit) { return {{"value", value}, {"unit", unit}}; }

nlohmann::json layer_json(const sim::TraceLayerStats& s, const sim::TraceStats& st, bool placement) {
  nlohmann::json j = {{"load_max_mean", metric(s.load_max_mean, "ratio")},
                      {"load_max_mean_worst_window", metric(s.load_max_mean_worst, "ratio")},
                      {"load_max_mean_whole_trace", metric(s.load_max_mean_all, "ratio")},
                      {"reuse", metric(s.reuse, "fraction")},
                      {"first_choice_repeat", metric(s.first_choice_repeat, "fraction")},
                      {"any_overlap", metric(s.any_overlap, "fraction")},
                      {"distinct_per_batch", metric(s.distinct_per_batch, "experts")},
                      {"top_expert_share", metric(s.top_expert_share, "fraction")},
                      {"degenerate", s.degenerate}};
  if (s.top_expert >= 0) j["top_expert"] = s.top_expert;
  j["lru_hit"] = nlohmann::json::array();
  for (std::size_t i = 0; i < st.cache_sizes.size(); ++i) {
    j["lru_hit"].push_back({{"cache", metric(static_cast<double>(st.cache_sizes[i]), "experts")},
                            {"hit_rate", metric(s.lru_hit[i], "fraction")}});
  }
  if (placement) {
    j["max_active_per_node"] = metric(s.max_active, "experts");
    j["max_active_per_node_batch"] = metric(s.max_active_batch, "experts");
    j["node_load_max_mean"] = metric(s.node_load_max_mean, "ratio");
  }
  return j;
}

int trace_stats(Args args, std::ostream& out) {
  const auto inputs = take_inputs(args);
  po::options_description desc("options");
  const sim::TraceStatsOptions defaults;
  desc.add_options()("help,h", "show this help")("window", po::value<std::int64_t>()->default_value(defaults.window),
                                                 "tokens per load window for max/mean expert load")(
      "batch", po::value<std::int64_t>()->default_value(defaults.batch),
      "tokens per batch for distinct experts touched (and per-node distinct experts)")(
      "cache-sizes", po::value<std::string>()->default_value("16,32,64,128"),
      "LRU cache capacities, experts per layer (defaults outside [top-k, experts] are skipped)")(
      "placement", po::value<std::string>(),
      "expert placement for per-node load (`moesim estimate --help` lists them)")("nodes", po::value<std::int64_t>(),
                                                                                  "nodes of the placement")(
      "groups", po::value<std::int64_t>()->default_value(2), "replicated-groups: number of expert groups")(
      "placement-file", po::value<std::string>(), "custom placement JSON (with --placement custom)")(
      "json", "print the statistics as JSON (every value with its unit)");
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim trace stats FILE [--window W] [--batch B] [--cache-sizes 16,32,64,128]\n"
          "                          [--placement NAME --nodes N] [--json]\n\n"
          "Per MoE layer and overall: expert load max/mean over windows of W tokens; reuse (fraction of a token's\n"
          "experts its request's previous token also chose), first-choice repeat and any-overlap rates; LRU hit rate\n"
          "of a per-layer cache of C experts; distinct experts per batch of B tokens against the independence formula\n"
          "E(1-(1-k/E)^B); with a placement, experts per node per token and E[max over nodes] (Equation 1's\n"
          "E[active]); layers where one expert takes every token are flagged as degenerate. FILE is .jsonl or\n"
          ".mtrace, plain or gzip/zstd compressed. Definitions: sim/TRACES.md.")) {
    return 0;
  }
  if (inputs.size() != 1) {
    throw UserError(inputs.empty() ? "give the trace file: moesim trace stats FILE [options]"
                                   : "give one trace file (got " + std::to_string(inputs.size()) + ")");
  }
  const auto& path = inputs[0];
  const auto trace = sim::read_trace(path);
  const auto& h = trace.header;
  sim::TraceStatsOptions so;
  so.window = vm["window"].as<std::int64_t>();
  so.batch = vm["batch"].as<std::int64_t>();
  so.cache_sizes = parse_whole_numbers(vm["cache-sizes"].as<std::string>(), "--cache-sizes", 1,
                                       std::numeric_limits<std::int64_t>::max(), "16,32,64,128");
  if (vm["cache-sizes"].defaulted()) {
    std::erase_if(so.cache_sizes, [&](std::int64_t c) { return c < h.top_k || c > h.experts; });
  }
  if (vm.count("nodes") || vm.count("placement") || vm.count("placement-file")) {
    if (!vm.count("nodes")) throw UserError("--placement needs --nodes N");
    const auto nodes = vm["nodes"].as<std::int64_t>();
    if (nodes < 1) throw UserError("--nodes " + std::to_string(nodes) + ": need at least 1 node");
    const std::string name = vm.count("placement")        ? vm["placement"].as<std::string>()
                             : vm.count("placement-file") ? "custom"
                                                          : "replicated-groups";
    if (name == "custom") {
      if (!vm.count("placement-file")) throw UserError("--placement custom needs --placement-file FILE.json");
      so.placement = sim::load_placement(vm["placement-file"].as<std::string>(), h.experts, nodes);
    } else {
      sim::PlacementOptions po_;
      po_.groups = vm["groups"].as<std::int64_t>();
      so.placement = sim::make_placement(name, h.experts, nodes, po_);
    }
  }
  const auto t0 = Clock::now();
  const auto st = sim::compute_trace_stats(trace, so);
  if (seconds_since(t0) > 1.0) std::cerr << text::printf("moesim trace stats: %.1f s\n", seconds_since(t0));

  if (vm.count("json")) {
    nlohmann::json j;
    j["command"] = "trace stats";
    j["trace"] = {
        {"path", path},      {"model", h.model},    {"layers", h.layers},      {"experts", h.experts},
        {"top_k", h.top_k},  {"tokens", st.tokens}, {"requests", st.requests}, {"weights", trace.has_weights()},
        {"source", h.source}};
    j["options"] = {{"window", metric(static_cast<double>(st.window), "tokens")},
                    {"batch", metric(static_cast<double>(st.batch), "tokens")},
                    {"windows", st.windows},
                    {"batches", st.batches},
                    {"token_pairs", st.pairs}};
    j["reference"] = {{"window_mean_load", metric(st.window_mean_load, "assignments per expert")},
                      {"uniform_reuse", metric(st.uniform_reuse, "fraction")},
                      {"uniform_first_choice_repeat", metric(st.uniform_first_choice, "fraction")},
                      {"independent_distinct_per_batch", metric(st.independent_distinct, "experts")}};
    j["overall"] = layer_json(st.overall, st, st.placement.has_value());
    // Layers where one expert took every token: replaying them puts the whole layer on one node.
    j["degenerate_layers"] = st.degenerate_layers;
    j["layers"] = nlohmann::json::array();
    for (const auto& l : st.layers) j["layers"].push_back(layer_json(l, st, st.placement.has_value()));
    if (st.placement) {
      const auto& p = *st.placement;
      nlohmann::json pj = {{"placement", p.description},
                           {"max_active_per_node", metric(p.max_active, "experts")},
                           {"max_active_per_node_uniform_exact", metric(p.max_active_uniform, "experts")},
                           {"max_active_per_node_batch", metric(p.max_active_batch, "experts")}};
      if (!p.max_active_uniform_note.empty()) pj["max_active_per_node_uniform_note"] = p.max_active_uniform_note;
      pj["nodes"] = nlohmann::json::array();
      for (const auto& n : p.nodes) {
        pj["nodes"].push_back({{"experts_held", metric(static_cast<double>(n.experts_held), "experts")},
                               {"mean_active", metric(n.mean_active, "experts")},
                               {"max_active", metric(static_cast<double>(n.max_active), "experts")},
                               {"share", metric(n.share, "fraction")}});
      }
      j["placement"] = pj;
    }
    out << j.dump(2) << "\n";
    return 0;
  }

  out << "trace " << path << ": model " << h.model << ", " << h.layers << " MoE layers, " << h.experts
      << " experts, top-" << h.top_k << ", " << st.tokens << " tokens in " << st.requests << " request"
      << (st.requests == 1 ? "" : "s") << ", gate weights " << (trace.has_weights() ? "yes" : "no") << "\n";
  out << "source: " << h.source << "\n\n";
  out << "load: " << st.windows << " window" << (st.windows == 1 ? "" : "s") << " of " << st.window << " tokens (mean "
      << reports::fixed(st.window_mean_load, 1) << " assignments per expert); reuse and repeats: " << st.pairs
      << " consecutive token pairs within requests; distinct: " << st.batches << " batches of " << st.batch
      << " tokens\n";
  std::vector<std::string> headers = {"layer",   "load max/mean", "worst window", "whole trace",
                                      "reuse %", "1st repeat %",  "any overlap %"};
  for (const auto c : st.cache_sizes) headers.push_back("LRU" + std::to_string(c) + " hit %");
  headers.push_back("distinct/batch experts");
  if (st.placement) headers.push_back("max/node experts");
  reports::Table t(headers);
  const auto row = [&](const std::string& name, const sim::TraceLayerStats& s) {
    std::vector<std::string> r = {name,
                                  reports::fixed(s.load_max_mean, 3),
                                  reports::fixed(s.load_max_mean_worst, 3),
                                  reports::fixed(s.load_max_mean_all, 3),
                                  pct(s.reuse),
                                  pct(s.first_choice_repeat),
                                  pct(s.any_overlap)};
    for (const auto x : s.lru_hit) r.push_back(pct(x));
    r.push_back(reports::fixed(s.distinct_per_batch, 2));
    if (st.placement) r.push_back(reports::fixed(s.max_active, 3));
    t.add_row(std::move(r));
  };
  for (std::size_t l = 0; l < st.layers.size(); ++l) row(std::to_string(l), st.layers[l]);
  row("all", st.overall);
  t.print_text(out);
  if (!st.degenerate_layers.empty()) {
    std::vector<std::string> which;
    for (const auto l : st.degenerate_layers) {
      which.push_back(std::to_string(l) + " (expert " +
                      std::to_string(st.layers[static_cast<std::size_t>(l)].top_expert) + ")");
    }
    out << "degenerate layers: " << st.degenerate_layers.size() << " of " << h.layers
        << " layers send every token to one expert: layer " << text::join(which)
        << "; a placement cannot spread them (the node holding that expert runs the whole layer)\n";
  }
  out << "independent uniform routing: reuse " << pct(st.uniform_reuse) << "%, first-choice repeat "
      << pct(st.uniform_first_choice)
      << "%, distinct experts per batch E(1-(1-k/E)^B) = " << reports::fixed(st.independent_distinct, 2) << "\n";
  if (st.placement) {
    const auto& p = *st.placement;
    out << "\nplacement " << p.description << "\n";
    reports::Table tn({"node", "experts held", "mean active experts", "max active experts", "share %"});
    for (std::size_t n = 0; n < p.nodes.size(); ++n) {
      const auto& ns = p.nodes[n];
      tn.add_row({std::to_string(n), std::to_string(ns.experts_held), reports::fixed(ns.mean_active, 3),
                  std::to_string(ns.max_active), pct(ns.share)});
    }
    tn.print_text(out);
    out << "E[max over nodes of experts executed per token and layer] = " << reports::fixed(p.max_active, 3)
        << " (uniform routing, " << (p.max_active_uniform_note.empty() ? "exact" : "sampled") << ": "
        << reports::fixed(p.max_active_uniform, 3) << "); per batch of " << st.batch
        << " tokens, distinct experts on the busiest node = " << reports::fixed(p.max_active_batch, 3)
        << "; node load max/mean over windows = " << reports::fixed(st.overall.node_load_max_mean, 3) << "\n";
    if (!p.max_active_uniform_note.empty()) out << "note: " << p.max_active_uniform_note << "\n";
  }
  return 0;
}

// ------------------------------------------------------------------------------------------------------
// convert

int trace_convert(Args args, std::ostream& out) {
  const auto inputs = take_inputs(args);
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("out", po::value<std::string>(),
                                                 "output file: .jsonl or .mtrace; written atomically")(
      "format", po::value<std::string>(), "output format jsonl or binary, when --out's extension does not say")(
      "from", po::value<std::string>(),
      "input format: jsonl, binary (moesim's own), moe-selection, speculative-moe, vllm; detected when not given")(
      "model", po::value<std::string>(),
      "the model the trace was recorded with: gives the expert count importers need, and checks layers/top-k")(
      "experts", po::value<std::int64_t>(), "routed experts per layer, when the model is not in the zoo")(
      "decode-only", "leave out the prompt (prefill) tokens (moe-selection, vllm, speculative-moe raw files)");
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim trace convert IN [IN...] --out OUT [--from FORMAT] [--model M | --experts E]\n\n"
          "Converts between moesim's formats (lossless: .jsonl <-> .mtrace gives back the same bytes) and imports:\n"
          "  moe-selection    per-query JSON of the HF dataset core12345/MoE_expert_selection_trace (arXiv\n"
          "                   2510.05497): one file per request; decoder layers that are null are dense and skipped\n"
          "  speculative-moe  JSON lines {problem_id, layer, experts, gating_probs, token_idx or token_pos} of\n"
          "                   github.com/Mario928/speculative-moe: tokens missing a layer's record are dropped and\n"
          "                   counted; identical repeated records are dropped\n"
          "  vllm             a saved /v1/completions response of vLLM --enable-return-routed-experts\n"
          "                   (prompt_routed_experts and choices[i].routed_experts, or the base64 .npy form), or\n"
          "                   routed_experts [gen_len][layers][top_k] arrays: one request per file, or an array of\n"
          "                   {\"routed_experts\", \"prompt_routed_experts\"} objects\n"
          "Without --from the format is told from each file's start. Inputs may be gzip or zstd compressed.\n"
          "These files do not state the number of experts: give --model (a zoo id or config.json) or --experts.")) {
    return 0;
  }
  if (inputs.empty()) throw UserError("give the input file(s): moesim trace convert IN [IN...] --out OUT");
  if (!vm.count("out")) throw UserError("--out is missing; give the file to write (.jsonl or .mtrace)");
  const std::string out_path = vm["out"].as<std::string>();
  const auto format = vm.count("format") ? sim::parse_trace_format(vm["format"].as<std::string>(), "--format")
                                         : sim::trace_format_for_path(out_path, "--out");
  if (vm.count("model") && vm.count("experts")) {
    throw UserError("--model and --experts both give the expert count; give one of them");
  }
  std::optional<model::Architecture> arch;
  if (vm.count("model")) {
    arch = model::load_model(vm["model"].as<std::string>());
    if (!arch->is_moe()) throw UserError("--model " + arch->id + " is a dense model; routing traces need experts");
  }
  // A plain enum and a flag rather than an optional: GCC 12 warns (falsely) about the optional here.
  bool importing = false;
  sim::ImportFormat from = sim::ImportFormat::Vllm;
  if (vm.count("from")) {
    if (const auto f = sim::parse_import_format(vm["from"].as<std::string>(), "--from")) {
      importing = true;
      from = *f;
    }
  } else {
    // No --from: tell each input's format from its start (sim/trace_import.hpp), and say what was found.
    std::string first_name, first_path;
    for (const auto& in : inputs) {
      const auto d = sim::detect_trace_format(in);
      if (!first_name.empty() && d.name != first_name) {
        throw UserError(in + ": looks like " + d.name + " (" + d.evidence + ") but " + first_path + " looks like " +
                        first_name + "; convert them separately, or give --from FORMAT");
      }
      if (first_name.empty()) {
        first_name = d.name;
        first_path = in;
        if (d.format) {
          importing = true;
          from = *d.format;
          std::cerr << "moesim trace convert: " << in << ": reading it as " << d.name << " (" << d.evidence
                    << "); give --from to choose\n";
        }
      }
    }
  }
  sim::RoutingTrace trace;
  if (!importing) {
    if (inputs.size() != 1) {
      throw UserError("moesim's own formats convert one file at a time (got " + std::to_string(inputs.size()) +
                      " inputs); to import several files give --from moe-selection or --from vllm");
    }
    if (vm.count("decode-only")) {
      throw UserError(
          "--decode-only applies to the imported formats (moe-selection, speculative-moe, vllm), not to "
          "moesim's own");
    }
    trace = sim::read_trace(inputs[0]);
    if (arch) sim::check_trace_matches(trace, *arch, inputs[0]);
  } else {
    sim::ImportOptions io;
    if (arch) {
      io.experts = arch->routed_experts;
      io.layers = model::moe_layer_count(*arch);
      io.top_k = arch->top_k;
      io.model = arch->id;
    } else if (vm.count("experts")) {
      io.experts = vm["experts"].as<std::int64_t>();
    }
    io.include_prefill = !vm.count("decode-only");
    // What an importer drops (incomplete tokens, ...) is said on stderr as well as in the header's source.
    io.note = [](const std::string& line) { std::cerr << "moesim trace convert: " << line << "\n"; };
    trace = sim::import_trace(from, inputs, io);
  }
  for (const auto& in : inputs) {
    std::error_code ec;
    if (std::filesystem::equivalent(in, out_path, ec)) {
      throw UserError("--out " + out_path + " is the input file; write to another path");
    }
  }
  sim::write_trace(trace, out_path, format, "--out");
  out << "wrote " << out_path << " (" << sim::trace_format_name(format) << "): " << trace.tokens() << " tokens, "
      << sim::count_requests(trace) << (sim::count_requests(trace) == 1 ? " request, " : " requests, ")
      << trace.header.layers << " MoE layers, " << trace.header.experts << " experts, top-" << trace.header.top_k
      << (trace.has_weights() ? ", gate weights" : ", no gate weights") << "\n";
  return 0;
}

}  // namespace

int cmd_trace(const Args& args, std::ostream& out) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    out << kTraceUsage;
    return 0;
  }
  if (args.empty()) {
    throw UserError("give a subcommand: moesim trace gen|stats|convert (see `moesim trace --help`)");
  }
  const std::string sub = args[0];
  Args rest(args.begin() + 1, args.end());
  if (sub == "gen") return trace_gen(rest, out);
  if (sub == "stats") return trace_stats(rest, out);
  if (sub == "convert") return trace_convert(rest, out);
  std::string hint = text::did_you_mean(sub, {"gen", "stats", "convert"});
  for (const char* c : {"gen", "stats", "convert"}) {
    if (hint.empty() && sub.rfind(c, 0) == 0) hint = std::string(" (did you mean '") + c + "'?)";  // "generate"
  }
  throw UserError("unknown trace subcommand '" + sub + "'" + hint +
                  "; valid: gen, stats, convert (see `moesim trace --help`)");
}

}  // namespace moesim::apps
