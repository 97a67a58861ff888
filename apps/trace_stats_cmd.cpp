// `moesim trace stats`: the statistics of a routing trace (sim/trace_stats.hpp; their definitions are in
// sim/TRACES.md). This file parses the options, calls the library and prints, as a table or as JSON.

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/table.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_io.hpp"
#include "moesim/sim/trace_stats.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

std::string pct(double x) { return scenario::fixed(100.0 * x, 1); }

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

/// The options of `trace stats`, with the library's defaults.
po::options_description describe_trace_stats_options(const sim::TraceStatsOptions& defaults) {
  po::options_description desc("options");
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
  return desc;
}

/// --window, --batch, --cache-sizes and the placement (--placement, --nodes, --groups, --placement-file) for
/// the trace whose header is `h`.
sim::TraceStatsOptions stats_options_from(const po::variables_map& vm, const sim::TraceHeader& h) {
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
      sim::PlacementOptions placement_options;
      placement_options.groups = vm["groups"].as<std::int64_t>();
      so.placement = sim::make_placement(name, h.experts, nodes, placement_options);
    }
  }
  return so;
}

/// The statistics as JSON, every value with its unit.
nlohmann::json trace_stats_json(const std::string& path, const sim::RoutingTrace& trace, const sim::TraceStats& st) {
  const auto& h = trace.header;
  nlohmann::json j;
  j["command"] = "trace stats";
  j["trace"] = {{"path", path},      {"model", h.model},    {"layers", h.layers},      {"experts", h.experts},
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
  return j;
}

/// The placement's per-node table and E[max over nodes], after the per-layer table.
void print_placement_stats(std::ostream& out, const sim::TraceStats& st) {
  const auto& p = *st.placement;
  out << "\nplacement " << p.description << "\n";
  scenario::Table tn({"node", "experts held", "mean active experts", "max active experts", "share %"});
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const auto& ns = p.nodes[n];
    tn.add_row({std::to_string(n), std::to_string(ns.experts_held), scenario::fixed(ns.mean_active, 3),
                std::to_string(ns.max_active), pct(ns.share)});
  }
  tn.print_text(out);
  out << "E[max over nodes of experts executed per token and layer] = " << scenario::fixed(p.max_active, 3)
      << " (uniform routing, " << (p.max_active_uniform_note.empty() ? "exact" : "sampled") << ": "
      << scenario::fixed(p.max_active_uniform, 3) << "); per batch of " << st.batch
      << " tokens, distinct experts on the busiest node = " << scenario::fixed(p.max_active_batch, 3)
      << "; node load max/mean over windows = " << scenario::fixed(st.overall.node_load_max_mean, 3) << "\n";
  if (!p.max_active_uniform_note.empty()) out << "note: " << p.max_active_uniform_note << "\n";
}

/// The statistics as text: the trace's header, a table per layer, degenerate layers, the placement.
void print_trace_stats(std::ostream& out, const std::string& path, const sim::RoutingTrace& trace,
                       const sim::TraceStats& st) {
  const auto& h = trace.header;
  out << "trace " << path << ": model " << h.model << ", " << h.layers << " MoE layers, " << h.experts
      << " experts, top-" << h.top_k << ", " << st.tokens << " tokens in " << st.requests << " request"
      << (st.requests == 1 ? "" : "s") << ", gate weights " << (trace.has_weights() ? "yes" : "no") << "\n";
  out << "source: " << h.source << "\n\n";
  out << "load: " << st.windows << " window" << (st.windows == 1 ? "" : "s") << " of " << st.window << " tokens (mean "
      << scenario::fixed(st.window_mean_load, 1) << " assignments per expert); reuse and repeats: " << st.pairs
      << " consecutive token pairs within requests; distinct: " << st.batches << " batches of " << st.batch
      << " tokens\n";
  std::vector<std::string> headers = {"layer",   "load max/mean", "worst window", "whole trace",
                                      "reuse %", "1st repeat %",  "any overlap %"};
  for (const auto c : st.cache_sizes) headers.push_back("LRU" + std::to_string(c) + " hit %");
  headers.push_back("distinct/batch experts");
  if (st.placement) headers.push_back("max/node experts");
  scenario::Table t(headers);
  const auto row = [&](const std::string& name, const sim::TraceLayerStats& s) {
    std::vector<std::string> r = {name,
                                  scenario::fixed(s.load_max_mean, 3),
                                  scenario::fixed(s.load_max_mean_worst, 3),
                                  scenario::fixed(s.load_max_mean_all, 3),
                                  pct(s.reuse),
                                  pct(s.first_choice_repeat),
                                  pct(s.any_overlap)};
    for (const auto x : s.lru_hit) r.push_back(pct(x));
    r.push_back(scenario::fixed(s.distinct_per_batch, 2));
    if (st.placement) r.push_back(scenario::fixed(s.max_active, 3));
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
      << "%, distinct experts per batch E(1-(1-k/E)^B) = " << scenario::fixed(st.independent_distinct, 2) << "\n";
  if (st.placement) print_placement_stats(out, st);
}

}  // namespace

int cmd_trace_stats(const Args& args, std::ostream& out) {
  Args rest = args;
  const auto inputs = take_inputs(rest);
  const sim::TraceStatsOptions defaults;
  const po::options_description desc = describe_trace_stats_options(defaults);
  po::variables_map vm;
  if (!parse_options(
          rest, desc, vm, out,
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
  const sim::TraceStatsOptions so = stats_options_from(vm, trace.header);
  const auto t0 = std::chrono::steady_clock::now();
  const auto st = sim::compute_trace_stats(trace, so);
  if (seconds_since(t0) > 1.0) std::cerr << text::printf("moesim trace stats: %.1f s\n", seconds_since(t0));
  if (vm.count("json")) {
    out << trace_stats_json(path, trace, st).dump(2) << "\n";
    return 0;
  }
  print_trace_stats(out, path, trace, st);
  return 0;
}

}  // namespace moesim::apps
