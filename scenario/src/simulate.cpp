#include "moesim/scenario/simulate.hpp"

#include <chrono>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/chrome_trace.hpp"
#include "moesim/scenario/common_keys.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/table.hpp"
#include "moesim/sim/network.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/trace_io.hpp"

namespace moesim::scenario {
namespace {

/// Collects compute spans and NIC transfers of the first tokens as a Chrome trace (chrome_trace.hpp): one
/// process per node, with a "compute" thread and a "NIC send" thread.
class DecodeTimeline final : public sim::TimelineObserver, public sim::TransferObserver {
 public:
  explicit DecodeTimeline(std::int64_t tokens) : tokens_(tokens) {}

  void on_compute(std::int32_t node, std::string_view what, std::int64_t token, std::int64_t layer, sim::SimTime start,
                  sim::SimTime end) override {
    const std::string category = what.starts_with("expert")   ? "expert"
                                 : what.starts_with("filler") ? "filler"
                                 : what == "rewire"           ? "rewire"
                                                              : "misc";
    trace_.complete(std::string(what), category, node, 0, us(start), us(end - start),
                    {{"token", token}, {"layer", layer}});
    nodes_ = std::max(nodes_, node + 1);
  }
  void on_token(std::int64_t token, sim::SimTime /*start*/, sim::SimTime end) override {
    if (token + 1 == tokens_) cutoff_ = end;
  }
  void on_transfer(std::int32_t from, std::int32_t to, double bytes, sim::SimTime start, sim::SimTime end) override {
    if (cutoff_ >= sim::SimTime{} && start > cutoff_) return;
    trace_.complete("to node " + std::to_string(to), "nic", from, 1, us(start), us(end - start), {{"bytes", bytes}});
    nodes_ = std::max(nodes_, std::max(from, to) + 1);
  }

  /// Writes the trace; `total_tokens`: the run's, for the note of what the trace covers.
  void write(std::ostream& out, std::int64_t total_tokens) {
    for (std::int32_t n = 0; n < nodes_; ++n) {
      trace_.process(n, "node " + std::to_string(n));
      trace_.thread(n, 0, "compute");
      trace_.thread(n, 1, "NIC send");
    }
    trace_.note("covers", "the first " + std::to_string(std::min(tokens_, total_tokens)) + " of " +
                              std::to_string(total_tokens) + " decoded tokens (--chrome-tokens)");
    trace_.write(out);
  }

 private:
  static double us(sim::SimTime t) { return static_cast<double>(t.ps()) / 1e6; }
  std::int64_t tokens_;
  sim::SimTime cutoff_{-1};
  std::int32_t nodes_ = 0;
  ChromeTrace trace_;
};

void write_per_token_csv(const sim::DecodeResult& r, std::ostream& o) {
  o << "token,start_s,end_s,time_s,misc_s,moe_s,comm_s,rewire_s,max_routed_experts\n";
  for (std::size_t i = 0; i < r.per_token.size(); ++i) {
    const auto& t = r.per_token[i];
    o << i << ','
      << text::printf("%.9f,%.9f,%.9f,%.9f,%.9f,%.9f,%.9f", sim::to_seconds(t.start), sim::to_seconds(t.end),
                      sim::to_seconds(t.end - t.start), sim::to_seconds(t.misc), sim::to_seconds(t.moe),
                      sim::to_seconds(t.comm()), sim::to_seconds(t.rewire))
      << ',' << t.max_routed << '\n';
  }
}

/// The simulated tokens/s's interval from the runtime profile's held-out errors, as `estimate` gives its
/// figure's (model::RuntimeProfile::interval); none without a runtime that gives one.
std::optional<std::pair<double, double>> simulated_interval(const SimulateResult& r) {
  if (!r.runtime || r.runtime->interval_source.empty()) return std::nullopt;
  return r.runtime->interval(r.run.tokens_per_second);
}

}  // namespace

SimulateRequest load_simulate_scenario(const std::string& path, SimulateRequest base) {
  const nlohmann::json doc = json::load_file(path);
  return load_simulate_scenario(json::Node(doc, path), std::move(base));
}

const scenario::ParamTable<GenerateRequest>& generate_params() {
  using G = GenerateRequest;
  static const auto table = [] {
    scenario::ParamTable<G> t;
    t.field("tokens", &G::tokens).min(1).unit("tokens").no_flag().describe("routing-trace tokens to generate");
    t.field("seed", &G::seed).describe("generator seed, 0 .. 2^64-1");
    t.field("requests", &G::requests).min(1).describe("generator: requests the tokens are split into");
    t.field("popularity", &G::popularity).describe("generator: uniform, zipf or dirichlet");
    t.field("zipf_s", &G::zipf_s).describe("generator: Zipf exponent");
    t.field("dirichlet_alpha", &G::dirichlet_alpha).positive().describe("generator: Dirichlet concentration");
    // A fraction, or a profile over the layers (control points, interpolated) as `trace gen --reuse 0.22,0.34`.
    t.custom("reuse", "number in [0, 1] or a list of them")
        .describe(
            "generator: target fraction of a token's experts reused from the previous token; a list is a "
            "profile over the layers (control points, interpolated)")
        .reader([](const scenario::Param<G>& p, const json::Node& g, G& q) {
          if (!g.raw()[p.key()].is_array()) {
            q.reuse = g.number(p.key());
            return;
          }
          for (const auto& v : g.raw()[p.key()]) {
            if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1))
              throw g.error(p.key(), "must be a fraction in [0, 1] or a list of them, e.g. [0.22, 0.34]");
            q.reuse_profile.push_back(v.get<double>());
          }
        })
        .writer([](const scenario::Param<G>& p, const G& q, nlohmann::json& out) {
          if (q.reuse) out[p.key()] = *q.reuse;
          if (!q.reuse_profile.empty()) out[p.key()] = q.reuse_profile;
        })
        .flag_value<double>()
        .flag_applier([](const scenario::Param<G>& p, const scenario::po::variables_map& vm, G& q) {
          q.reuse = vm[p.flag_name()].as<double>();
        });
    t.field("max_mean_load", &G::max_mean_load)
        .positive()
        .describe("generator: target per-layer max/mean expert load over --window tokens");
    t.field("window", &G::window).min(1).unit("tokens").describe("generator: tokens per load window");
    t.field("lru_hit", &G::lru_hit)
        .no_flag()
        .describe("generator: target per-layer LRU hit rate with lru_cache experts cached per layer, between 0 and 1")
        .reader([](const scenario::Param<G>& p, const json::Node& g, G& q) {
          q.lru_hit = g.number(p.key());
          if (!(*q.lru_hit > 0 && *q.lru_hit < 1)) throw g.error(p.key(), "must lie between 0 and 1 (a hit rate)");
        });
    t.field("lru_cache", &G::lru_cache)
        .min(1)
        .no_flag()
        .unit("experts")
        .written_if([](const G& q) { return q.lru_hit.has_value(); })
        .describe("generator: experts per layer the LRU cache of lru_hit holds");
    t.field("top_k", &G::top_k)
        .min(1)
        .no_flag()
        .describe("generator: experts per token, overriding the model's (a measurement's own, e.g. flash-moe's K=4)");
    t.field("drift", &G::drift)
        .no_flag()
        .written_if([](const G& q) { return q.drift != "none"; })
        .describe("generator: popularity drift between requests (sim/trace_gen.hpp)")
        .reader([](const scenario::Param<G>& p, const json::Node& g, G& q) {
          q.drift = g.string(p.key());
          (void)sim::parse_drift(q.drift, g.where(p.key()));
        });
    return t;
  }();
  return table;
}

const scenario::ParamTable<SimulateRequest>& simulate_params() {
  using R = SimulateRequest;
  static const auto table = [] {
    scenario::ParamTable<R> t(&R::origins);
    t.field("model", &R::model).origin().describe("zoo id or config.json path");
    t.field("hw", &R::hw).origin().describe("node profile id or path");
    t.field("nic", &R::nic).origin().describe("NIC profile id or path");
    t.field("nodes", &R::nodes).min(1).describe("number of nodes");
    t.field("placement", &R::placement).origin().describe("expert placement");
    t.field("groups", &R::groups).min(1).origin().describe("replicated-groups: number of expert groups");
    t.field("placement_file", &R::placement_file)
        .origin()
        .written_if([](const R& r) { return !r.placement_file.empty(); })
        .describe("a custom placement JSON (implies --placement custom)");
    t.field("precision", &R::precision)
        .origin()
        .describe(
            "weight precision; checkpoint: the format the model's config.json declares in "
            "quantization_config, else bf16");
    t.field("strategy", &R::strategy).origin().describe("naive, P-LB or P-LR-D");
    t.field("packing", &R::packing).origin().describe("override the strategy's packing");
    t.field("balancing", &R::balancing).origin().describe("override the strategy's balancing");
    t.field("attention", &R::attention).origin().describe("override the strategy's attention placement");
    t.field("collective", &R::collective).origin().describe("exchange of decentralised nodes");
    t.field("contention", &R::contention).describe("flows share NIC bandwidth and sender overheads queue");
    t.field("residency", &R::residency).describe("model weight wiring when the node profile has it");
    t.field("start_wired", &R::start_wired)
        .describe("every weight buffer starts wired, as after a warm-up (off: unwired)")
        .switch_flag("start-cold", false, "every weight buffer starts unwired (default: wired, as after a warm-up)");
    t.field("context", &R::context).min(0).unit("tokens").describe("tokens in the KV cache (0 as Equation 1)");
    t.field("lm_head", &R::lm_head)
        .describe("count the LM head (Equation 1 omits it; always counted with a runtime)")
        .switch_flag("lm-head", true, "count the LM head (Equation 1 omits it; always counted with --runtime)");
    t.field("trace", &R::trace)
        .origin()
        .written_if([](const R& r) { return !r.trace.empty(); })
        .describe(
            "routing trace file (.jsonl or .mtrace, also gzip or zstd compressed); without it a trace is "
            "generated");
    t.group("generate", &R::generate, generate_params(), "how the routing trace is generated when there is no trace",
            [](const R& r) { return r.trace.empty(); });
    t.custom("tokens", "integer >= 1")
        .unit("tokens")
        .describe("replay at most this many tokens of the trace")
        .flag_help(
            "tokens to replay: generated when there is no --trace (generate.tokens, default 1000), else the "
            "first N")
        .reader([](const scenario::Param<R>& p, const json::Node& n, R& r) { r.max_tokens = n.integer(p.key(), 1); })
        .writer([](const scenario::Param<R>& p, const R& r, nlohmann::json& out) {
          if (r.max_tokens > 0) out[p.key()] = r.max_tokens;
        })
        .flag_value<std::int64_t>()
        .flag_applier([](const scenario::Param<R>& p, const scenario::po::variables_map& vm, R& r) {
          const auto n = vm[p.flag_name()].as<std::int64_t>();
          if (n < 1) throw UserError(p.shown(std::to_string(n)) + ": replay at least 1 token");
          (r.trace.empty() ? r.generate.tokens : r.max_tokens) = n;
        });
    t.field("experts", &R::experts).origin().describe("how a node runs the experts of a layer: its kernel launches");
    scenario::streaming_key(t, &R::streaming).origin();
    t.field("runtime", &R::runtime)
        .origin()
        .written_if([](const R& r) { return !r.runtime.empty(); })
        .describe(
            "a runtime profile fitted on hw, or transferred to any node with GPUs of its maker (hw \"any\"); none: "
            "the node profile alone")
        .flag_help(scenario::runtime_help() + "; a fitted one gives tokens/s an interval");
    t.ignored("description", "what the scenario is, for the reader (not used)");
    return t;
  }();
  return table;
}

SimulateRequest load_simulate_scenario(const json::Node& root, SimulateRequest r) {
  if (root.raw().is_object() && root.has("generate") && root.has("trace"))
    throw root.error("generate", "and \"trace\" are both given; keep one (a file or a generator)");
  simulate_params().read(root, r);
  return r;
}

nlohmann::json simulate_request_to_json(const SimulateRequest& r) { return simulate_params().to_json(r); }

void parse_generate(const json::Node& g, GenerateRequest& q) { generate_params().read(g, q); }

nlohmann::json generate_to_json(const GenerateRequest& g) { return generate_params().to_json(g); }

sim::RoutingTrace make_trace(const GenerateRequest& g, const std::string& trace, const model::Architecture& a,
                             bool gate_weights) {
  if (!trace.empty()) {
    sim::RoutingTrace t = sim::read_trace(trace);
    sim::check_trace_matches(t, a, trace);
    return t;
  }
  sim::TraceGenOptions o = sim::gen_options_for(a, g.tokens, g.seed);
  o.weights = gate_weights;
  o.requests = g.requests;
  o.popularity = sim::parse_popularity(g.popularity, "--popularity (generate.popularity)");
  if (g.zipf_s) o.zipf_s = *g.zipf_s;
  if (g.dirichlet_alpha) o.dirichlet_alpha = *g.dirichlet_alpha;
  if (g.top_k) o.top_k = *g.top_k;
  o.drift = sim::parse_drift(g.drift, "generate.drift");
  sim::TraceGenTargets targets;
  if (g.reuse) targets.reuse = {*g.reuse};
  if (!g.reuse_profile.empty()) targets.reuse = g.reuse_profile;
  if (g.max_mean_load) {
    targets.max_mean_load = *g.max_mean_load;
    targets.window = g.window;
  }
  if (g.lru_hit) {
    targets.lru_hit = *g.lru_hit;
    targets.lru_cache = g.lru_cache;
  }
  if (g.reuse || !g.reuse_profile.empty() || g.max_mean_load || g.lru_hit) o = sim::solve_targets(o, targets);
  sim::validate_gen_options(o);
  return sim::generate_trace(o);
}

PreparedSimulate prepare_simulate(const SimulateRequest& req) {
  PreparedSimulate r;
  r.request = req;
  if (req.nodes < 1) throw UserError("--nodes " + std::to_string(req.nodes) + ": a cluster needs at least 1 node");
  if (req.nodes > sim::kMaxNodes) {
    throw UserError("--nodes " + std::to_string(req.nodes) + ": the simulator models up to " +
                    std::to_string(sim::kMaxNodes) + " nodes; use `moesim estimate` for larger clusters");
  }
  const auto& at = req.origins;
  r.arch = json::resolving(at, "model", [&] { return model::load_model(req.model); });
  if (!r.arch.is_moe()) {
    throw UserError(r.arch.id +
                    " is a dense model; `moesim simulate` replays expert routing and needs an MoE model "
                    "(see `moesim models`)");
  }
  r.node = json::resolving(at, "hw", [&] { return model::load_node(req.hw); });
  std::optional<model::RuntimeProfile>& runtime = r.runtime;
  if (!req.runtime.empty()) {
    runtime = json::resolving(at, "runtime", [&] { return model::find_runtime(req.runtime, r.node); });
    r.node = model::apply_runtime(r.node, *runtime);
    // As `estimate`: the runtime was fitted to figures that read the LM head each token.
    r.request.lm_head = true;
  }
  if (req.nodes > 1) r.nic = json::resolving(at, "nic", [&] { return model::load_nic(req.nic); });
  if (r.node.intra_node_link) r.intra_link = model::load_nic(*r.node.intra_node_link);
  const auto* stored_as = runtime && runtime->checkpoint_formats ? &runtime->checkpoint_formats->value : nullptr;
  r.precision =
      json::resolving(at, "precision", [&] { return &model::precision_for(req.precision, r.arch, stored_as); });
  const auto& preset = *json::resolving(at, "strategy", [&] { return &sim::strategy_by_name(req.strategy); });
  r.packing =
      req.packing ? json::resolving(at, "packing", [&] { return sim::packing_by_name(*req.packing); }) : preset.packing;
  r.balancing = req.balancing ? json::resolving(at, "balancing", [&] { return sim::balancing_by_name(*req.balancing); })
                              : preset.balancing;
  r.attention = req.attention
                    ? json::resolving(at, "attention", [&] { return sim::attention_mode_by_name(*req.attention); })
                    : preset.attention;
  r.collective = json::resolving(at, "collective", [&] { return sim::collective_by_name(req.collective); });
  r.experts = json::resolving(at, "experts", [&] { return cost::expert_execution_by_name(req.experts); });
  if (req.streaming)
    r.streaming =
        json::resolving(at, "streaming", [&] { return cost::resolve_streaming(*req.streaming, r.arch, *r.precision); });
  r.trace = json::resolving(at, "trace", [&] { return make_trace(req.generate, req.trace, r.arch); });
  sim::PlacementOptions placement_options{req.groups, {}};
  if (req.placement == "load-aware") {
    // The load a load-aware placement balances: how often the replayed tokens chose each expert.
    placement_options.expert_load.assign(static_cast<std::size_t>(r.arch.routed_experts), 0.0);
    const std::int64_t replayed = req.max_tokens > 0 ? std::min(req.max_tokens, r.trace.tokens()) : r.trace.tokens();
    const auto ids = static_cast<std::size_t>(replayed * r.trace.header.layers * r.trace.header.top_k);
    for (std::size_t i = 0; i < ids; ++i) placement_options.expert_load[r.trace.experts[i]] += 1.0;
  }
  r.placement = json::resolving(at, "placement", [&] {
    return sim::resolve_placement(req.placement, r.arch.routed_experts, req.nodes, placement_options,
                                  req.placement_file);
  });
  return r;
}

sim::DecodeConfig decode_config(const PreparedSimulate& p, const model::NodeProfile& node,
                                const model::NicProfile* nic) {
  const auto& req = p.request;
  sim::DecodeConfig c;
  c.arch = &p.arch;
  c.weights = p.precision;
  c.node = &node;
  c.nic = nic;
  c.intra_link = p.intra_link ? &*p.intra_link : nullptr;
  c.placement = &p.placement;
  c.nodes = static_cast<std::int32_t>(req.nodes);
  c.attention = p.attention;
  c.balancing = p.balancing;
  c.packing = p.packing;
  c.collective = p.collective;
  c.experts = p.experts;
  c.contention = req.contention;
  c.residency = req.residency;
  c.start_wired = req.start_wired;
  c.context = req.context;
  c.lm_head = req.lm_head;
  c.streaming = p.streaming;
  c.max_tokens = req.max_tokens;
  return c;
}

SimulateResult run_simulate(const SimulateRequest& req, const SimulateOutputs& outputs) {
  const PreparedSimulate p = prepare_simulate(req);
  SimulateResult r;
  static_cast<SimulateSetup&>(r) = p;
  r.request = req;
  r.trace = p.trace.header;
  r.trace_tokens = p.trace.tokens();
  const sim::ExpectedActive active = sim::expected_active_experts(r.placement, r.arch.top_k);
  r.exact_expected_active = active.value;

  // The analytic model on the same configuration, for the comparison line.
  model::DecodeScenario s;
  s.arch = &r.arch;
  s.node = &r.node;
  s.nic = r.nic ? &*r.nic : nullptr;
  s.intra_link = r.intra_link ? &*r.intra_link : nullptr;
  s.nodes = req.nodes;
  s.weights = r.precision;
  s.context = req.context;
  s.include_lm_head = r.request.lm_head;
  s.expected_active_experts = r.exact_expected_active;
  s.max_experts_per_node = r.placement.max_experts_per_node();
  s.exchange = sim::analytic_exchange(r.attention, r.collective);
  s.experts = r.experts;
  s.streaming = r.streaming ? &*r.streaming : nullptr;
  r.estimate = model::estimate_decode(s);

  sim::DecodeConfig c = decode_config(p, p.node, p.nic ? &*p.nic : nullptr);
  // Output files are opened before the run, so an unwritable path fails at once rather than after a long
  // replay, and committed together at the end: a failed run leaves neither behind.
  OutputSet files;
  OutputFile *csv_file = nullptr, *chrome_file = nullptr;
  if (!outputs.per_token_csv.empty()) csv_file = &files.add(outputs.per_token_csv, "--per-token");
  if (!outputs.chrome_trace.empty()) chrome_file = &files.add(outputs.chrome_trace, "--chrome-trace");
  std::optional<DecodeTimeline> chrome;
  const std::int64_t run_tokens = req.max_tokens > 0 ? std::min(req.max_tokens, r.trace_tokens) : r.trace_tokens;
  if (chrome_file) {
    // The Chrome trace holds its events as JSON objects until the end, then a copy in one array and the
    // dumped text: ~2.5 KiB per event (an 8-key object is a std::map of ~8 x 80 bytes, twice, plus ~200
    // characters of text). Per token, each node and layer has at most the attention, router, combine and
    // re-wire spans and one span per routed expert (top_k), and sends at most 2 (nodes - 1) messages (a ring).
    const double tokens = static_cast<double>(std::min(outputs.chrome_tokens, run_tokens));
    const double n = static_cast<double>(req.nodes);
    const double events =
        tokens * static_cast<double>(r.arch.layers) * n * (4.0 + static_cast<double>(r.arch.top_k) + 2.0 * (n - 1));
    model::require_memory(
        units::bytes(2560.0 * events),
        "--chrome-trace of " + text::printf("%.0f", tokens) + " tokens (~" + text::printf("%.3g", events) + " events)",
        "give fewer --chrome-tokens, or use a machine with more memory");
    chrome.emplace(outputs.chrome_tokens);
    c.timeline = &*chrome;
    c.transfers = &*chrome;
    c.timeline_tokens = outputs.chrome_tokens;
  }
  const auto t0 = std::chrono::steady_clock::now();
  r.run = sim::run_decode(c, p.trace);
  if (!active.note.empty()) r.run.assumptions.push_back(active.note);
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (csv_file) write_per_token_csv(r.run, csv_file->stream());
  if (chrome) chrome->write(chrome_file->stream(), run_tokens);
  files.commit();
  return r;
}

TimeSplit mean_split(const sim::DecodeResult& r) {
  TimeSplit s;
  for (const auto& t : r.per_token) {
    s.time += sim::to_seconds(t.end - t.start);
    s.misc += sim::to_seconds(t.misc);
    s.moe += sim::to_seconds(t.moe);
    s.comm += sim::to_seconds(t.comm());
    s.rewire += sim::to_seconds(t.rewire);
  }
  const auto n = static_cast<double>(std::max<std::size_t>(1, r.per_token.size()));
  return {s.time / n, s.misc / n, s.moe / n, s.comm / n, s.rewire / n};
}

void print_simulate_text(const SimulateResult& r, std::ostream& out, bool timing) {
  const auto& q = r.request;
  const auto& run = r.run;
  out << "moesim simulate: expert-parallel decode replayed token by token (discrete-event), one user\n";
  out << "model      " << r.arch.id << " at " << r.precision->name << ": " << model::moe_layer_count(r.arch)
      << " MoE layers, " << r.arch.routed_experts << " experts top-" << r.arch.top_k << ", "
      << units::format(model::routed_expert_bytes(r.arch, *r.precision)) << " per expert per layer\n";
  out << "cluster    " << q.nodes << " x " << r.node.id;
  if (r.nic) out << " over " << r.nic->id;
  out << "; placement " << r.placement.describe() << "\n";
  out << "strategy   " << q.strategy << ": packing " << sim::name_of(r.packing) << ", balancing "
      << sim::name_of(r.balancing) << ", attention " << sim::name_of(r.attention);
  if (r.attention == sim::AttentionMode::Decentralised) out << ", collective " << sim::name_of(r.collective);
  out << ", experts " << cost::name_of(r.experts);
  out << "; contention " << (q.contention ? "on" : "off") << ", residency " << (q.residency ? "on" : "off") << "\n";
  out << "trace      " << (q.trace.empty() ? "generated: " : q.trace + ": ") << r.trace.source << "\n";
  out << "replayed   " << run.tokens << " tokens\n\n";

  const TimeSplit s = mean_split(run);
  Table t({"", "per token s", "share %"});
  auto share = [&](double v) { return s.time > 0 ? text::printf("%.1f", 100.0 * v / s.time) : std::string("-"); };
  t.add_row({"time", fixed(s.time, 4), "100.0"});
  t.add_row({"  MoE (experts)", fixed(s.moe, 4), share(s.moe)});
  t.add_row({"    of which re-wiring", fixed(s.rewire, 4), share(s.rewire)});
  t.add_row({"  comm (waiting)", fixed(s.comm, 4), share(s.comm)});
  t.add_row({"  misc (attention, router, combine)", fixed(s.misc, 4), share(s.misc)});
  t.print_text(out);
  const std::optional<std::pair<double, double>> range = simulated_interval(r);
  out << "\ntokens/s   " << text::printf("%.2f", run.tokens_per_second)
      << (range ? " (range " + text::printf("%.2f", range->first) + "-" + text::printf("%.2f", range->second) + ")"
                : std::string())
      << "   (analytic estimate " << text::printf("%.2f", r.estimate.tokens_per_second) << " tokens/s, "
      << fixed(r.estimate.time.base(), 4) << " s per token; simulated/estimated time "
      << text::printf("%.3f", s.time / r.estimate.time.base()) << ")\n";
  if (r.streaming && q.streaming && !run.nodes.empty()) {
    out << "streaming  experts read serially from " << q.streaming->storage << ": page-cache hit rate "
        << text::printf("%.1f", 100.0 * run.cache_hit_rate) << "% over all nodes, node 0 reads "
        << fixed(sim::to_seconds(run.nodes.front().io) / static_cast<double>(std::max<std::int64_t>(1, run.tokens)), 4)
        << " s per token (in MoE); the analytic estimate assumed "
        << text::printf("%.1f", 100.0 * r.estimate.cache_hit_rate) << "%\n";
  }
  if (range) out << "range      " << r.runtime->interval_basis(r.arch.is_moe(), {"decode b1"}) << "\n";
  out << "E[active]  " << text::printf("%.3f", run.mean_max_routed)
      << " experts on the busiest node per MoE layer, measured on the trace (uniform-routing expectation for this "
         "placement: "
      << text::printf("%.3f", r.exact_expected_active) << "); computed per node incl. fillers "
      << text::printf("%.2f", run.mean_executed_per_node) << "\n";
  out << "time split is node 0's timeline (the driver when centralised): busy on experts, busy on other work, "
         "and the rest waiting on the network and slower nodes\n\n";

  Table nodes({"node", "misc busy %", "MoE busy %", "idle %", "rewire s/token", "routed/layer", "fillers/layer",
               "rewires", "sent MB/token", "uplink busy %"});
  const double span = sim::to_seconds(run.makespan);
  const double tokens = static_cast<double>(std::max<std::int64_t>(1, run.tokens));
  const double steps = tokens * static_cast<double>(model::moe_layer_count(r.arch));
  for (std::size_t i = 0; i < run.nodes.size(); ++i) {
    const auto& n = run.nodes[i];
    const double misc = sim::to_seconds(n.misc), moe = sim::to_seconds(n.moe);
    nodes.add_row({std::to_string(i), text::printf("%.1f", 100 * misc / span), text::printf("%.1f", 100 * moe / span),
                   text::printf("%.1f", 100 * std::max(0.0, span - misc - moe) / span),
                   fixed(sim::to_seconds(n.rewire) / tokens, 4),
                   text::printf("%.2f", static_cast<double>(n.routed) / steps),
                   text::printf("%.2f", static_cast<double>(n.fillers) / steps), std::to_string(n.rewires),
                   text::printf("%.3f", n.bytes_sent / tokens / 1e6),
                   text::printf("%.1f", 100 * sim::to_seconds(n.uplink_busy) / span)});
  }
  nodes.print_text(out);
  for (const auto& a : run.assumptions) out << "\nassumes    " << a;
  if (!run.assumptions.empty()) out << "\n";
  out << "\nsimulator  " << run.events << " events, " << run.messages << " messages";
  if (timing) {
    out << text::printf(", %.3f s wall, %.2f M events/s", r.wall_seconds,
                        r.wall_seconds > 0 ? static_cast<double>(run.events) / r.wall_seconds / 1e6 : 0.0);
  }
  out << "\n";
}

nlohmann::json simulate_to_json(const SimulateResult& r) {
  const auto& run = r.run;
  const TimeSplit s = mean_split(run);
  nlohmann::json m = nlohmann::json::array();
  m.push_back(metric("tokens", static_cast<double>(run.tokens), "tokens"));
  m.push_back(metric("tokens_per_second", run.tokens_per_second, "tokens/s"));
  if (const auto range = simulated_interval(r)) {
    m.back()["low"] = range->first;
    m.back()["high"] = range->second;
  }
  m.push_back(metric("time_per_token", s.time, "s"));
  m.push_back(metric("moe_per_token", s.moe, "s"));
  m.push_back(metric("rewire_per_token", s.rewire, "s"));
  m.push_back(metric("comm_per_token", s.comm, "s"));
  m.push_back(metric("misc_per_token", s.misc, "s"));
  m.push_back(metric("mean_max_routed_experts", run.mean_max_routed, "experts per MoE layer"));
  m.push_back(metric("expected_max_routed_experts_uniform", r.exact_expected_active, "experts per MoE layer"));
  m.push_back(metric("mean_executed_experts_per_node", run.mean_executed_per_node, "experts per MoE layer"));
  m.push_back(metric("estimate_time_per_token", r.estimate.time.base(), "s"));
  m.push_back(metric("estimate_tokens_per_second", r.estimate.tokens_per_second, "tokens/s"));
  if (r.streaming) {
    m.push_back(metric("page_cache_hit_rate", run.cache_hit_rate, "fraction of expert reads"));
    m.push_back(metric("io_per_token",
                       sim::to_seconds(run.nodes.empty() ? sim::SimTime{} : run.nodes.front().io) /
                           static_cast<double>(std::max<std::int64_t>(1, run.tokens)),
                       "s"));
  }
  m.push_back(metric("makespan", sim::to_seconds(run.makespan), "s"));
  m.push_back(metric("events", static_cast<double>(run.events), "events"));
  m.push_back(metric("messages", static_cast<double>(run.messages), "messages"));
  nlohmann::json nodes = nlohmann::json::array();
  for (std::size_t i = 0; i < run.nodes.size(); ++i) {
    const auto& n = run.nodes[i];
    nodes.push_back(
        {{"node", i},
         {"metrics",
          {metric("misc_busy", sim::to_seconds(n.misc), "s"), metric("moe_busy", sim::to_seconds(n.moe), "s"),
           metric("rewire", sim::to_seconds(n.rewire), "s"),
           metric("routed_experts", static_cast<double>(n.routed), "expert computations"),
           metric("filler_experts", static_cast<double>(n.fillers), "expert computations"),
           metric("rewires", static_cast<double>(n.rewires), "buffers"), metric("bytes_sent", n.bytes_sent, "B"),
           metric("uplink_busy", sim::to_seconds(n.uplink_busy), "s")}}});
  }
  nlohmann::json trace = {{"model", r.trace.model}, {"layers", r.trace.layers}, {"experts", r.trace.experts},
                          {"top_k", r.trace.top_k}, {"source", r.trace.source}, {"tokens", r.trace_tokens}};
  return {{"command", "simulate"},
          {"scenario", simulate_request_to_json(r.request)},
          {"resolved",
           {{"placement", r.placement.describe()},
            {"packing", sim::name_of(r.packing)},
            {"balancing", sim::name_of(r.balancing)},
            {"attention", sim::name_of(r.attention)},
            {"collective", sim::name_of(r.collective)},
            {"node_origin", r.node.origin},
            {"nic_origin", r.nic ? r.nic->origin : ""},
            {"trace", trace},
            {"assumptions", run.assumptions}}},
          {"metrics", m},
          {"nodes", nodes}};
}

}  // namespace moesim::scenario
