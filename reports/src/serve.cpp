#include "moesim/reports/serve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/chrome_trace.hpp"
#include "moesim/reports/json_out.hpp"
#include "moesim/reports/simulate.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/reports/table.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/workload.hpp"

namespace moesim::reports {
namespace {

std::string ms(double s) { return fixed(s * 1e3, 1); }

/// A percentile as vLLM names it: 99 -> "99", 99.9 -> "99.9" (benchmark_serving: p{int(p) if int(p) == p
/// else p}).
std::string percent_label(double p) { return text::printf("%g", p); }

/// The percentiles to report: a list of 1 to 16 numbers, each in (0, 100] (vLLM --metric-percentiles).
std::vector<double> read_percentiles(const json::Node& root, std::string_view key) {
  const std::vector<json::Node> items = root.elements(key);
  if (items.empty() || items.size() > 16)
    throw root.error(key, "must list 1 to 16 percentiles, e.g. [90, 99]");
  std::vector<double> out;
  for (const auto& item : items) {
    const nlohmann::json& v = item.raw();
    if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() <= 100))
      throw item.error("is " + v.dump() + "; a percentile is a number in (0, 100], e.g. 99");
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace

const scenario::ParamTable<sim::SchedulerConfig>& scheduler_params() {
  using C = sim::SchedulerConfig;
  static const auto table = [] {
    scenario::ParamTable<C> t;
    t.choice("kind", &C::kind, sim::scheduler_by_name, [](sim::SchedulerKind k) { return sim::name_of(k); })
        .flag("scheduler")
        .describe("static, continuous or chunked");
    t.choice("capacity", &C::capacity, sim::capacity_policy_by_name,
             [](sim::CapacityPolicy k) { return sim::name_of(k); })
        .describe("max-utilization (vLLM: preempt when the KV cache runs out) or guaranteed-no-evict "
                  "(TensorRT-LLM: a request starts only with blocks for its whole prompt + output)");
    t.field("max_num_seqs", &C::max_num_seqs).min(1).describe("sequences per step (vLLM's max_num_seqs)");
    t.field("max_num_batched_tokens", &C::max_num_batched_tokens)
        .min(1)
        .unit("tokens")
        .describe("tokens per engine step, prompt chunks included (vLLM's max_num_batched_tokens)");
    t.field("block_size", &C::block_size).min(1).unit("tokens").describe("KV-cache block (vLLM's block_size)");
    t.field("gpu_memory_utilization", &C::gpu_memory_utilization)
        .positive()
        .max(1)
        .describe("fraction of device memory the engine may use, weights and KV cache (vLLM's "
                  "gpu_memory_utilization)");
    t.field("max_model_len", &C::max_model_len)
        .min(1)
        .unit("tokens")
        .describe("longest request, prompt + output (vLLM's max_model_len): a longer request is refused, and a "
                  "KV cache that cannot hold one is refused at start, as vLLM does; none: only the KV cache bounds it");
    return t;
  }();
  return table;
}

sim::SchedulerConfig read_scheduler(const json::Node& sc) {
  sim::SchedulerConfig c;
  scheduler_params().read(sc, c);
  return c;
}

ServeScenario load_serve_scenario(const std::string& path) {
  ServeScenario s;
  s.doc = json::load_file(path);
  s.source = path;
  s.base_dir = std::filesystem::path(path).parent_path();
  if (!s.doc.is_object()) throw UserError(path + ": $: a scenario is a JSON object, not " + json::type_name(s.doc));
  return s;
}

namespace {

/// Sets `value` at a dotted key ("workload.rate") of `doc`, creating objects on the way.
void set_dotted(nlohmann::json& doc, const std::string& key, const nlohmann::json& value, const std::string& where) {
  nlohmann::json* at = &doc;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      throw UserError(where + ": sweep key \"" + key + "\" has an empty part; write e.g. \"workload.rate\"");
    if (dot == std::string::npos) {
      (*at)[part] = value;
      return;
    }
    if (!at->contains(part)) (*at)[part] = nlohmann::json::object();
    at = &(*at)[part];
    if (!at->is_object()) throw UserError(where + ": sweep key \"" + key + "\": \"" + part + "\" is not an object");
    start = dot + 1;
  }
}

std::string label_of(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

std::vector<SweepPoint> expand_sweep(const ServeScenario& s) {
  std::vector<SweepPoint> points;
  if (!s.doc.contains("sweep")) {
    points.push_back({s, {}});
    return points;
  }
  const json::Node root(s.doc, s.source);
  const json::Node sweep = root.child("sweep");
  if (!sweep.raw().is_object() || sweep.raw().empty()) {
    throw sweep.error(
        "must be an object of dotted keys to lists of values, e.g. {\"workload.rate\": [\"1/s\", \"2/s\"]}");
  }
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes;
  for (const auto& [key, values] : sweep.raw().items()) {
    if (!values.is_array() || values.empty()) throw sweep.error(key, "must be a non-empty list of values");
    axes.emplace_back(key, std::vector<nlohmann::json>(values.begin(), values.end()));
  }
  std::size_t total = 1;
  for (const auto& a : axes) total *= a.second.size();
  if (total > 10000)
    throw sweep.error("has " + std::to_string(total) + " points; keep a serve sweep to 10,000 or fewer");
  for (std::size_t i = 0; i < total; ++i) {
    SweepPoint p{s, {}};
    p.scenario.doc.erase("sweep");
    std::size_t rest = i;
    // The first key varies slowest (row-major), so tables group by it.
    std::vector<std::size_t> idx(axes.size());
    for (std::size_t a = axes.size(); a-- > 0;) {
      idx[a] = rest % axes[a].second.size();
      rest /= axes[a].second.size();
    }
    for (std::size_t a = 0; a < axes.size(); ++a) {
      const auto& v = axes[a].second[idx[a]];
      set_dotted(p.scenario.doc, axes[a].first, v, s.source + ": $.sweep");
      p.values.emplace_back(axes[a].first, v);
    }
    points.push_back(std::move(p));
  }
  return points;
}

const sim::RoutingTrace& TraceCache::get(const std::string& key, const std::function<sim::RoutingTrace()>& make) {
  if (const auto it = traces_.find(key); it != traces_.end()) return it->second;
  sim::RoutingTrace t = make();
  const double bytes = static_cast<double>(t.experts.size() * sizeof(std::uint16_t) + t.weights.size() * sizeof(float));
  if (bytes_ + bytes > kMaxBytes) {
    traces_.clear();
    bytes_ = 0;
  }
  bytes_ += bytes;
  return traces_.emplace(key, std::move(t)).first->second;
}

std::unique_ptr<PreparedServe> prepare_serve(const ServeScenario& s, bool traffic, TraceCache* cache) {
  const json::Node root(s.doc, s.source);
  root.expect_only({"description", "model", "model_overrides", "hw", "nic", "nodes", "plan", "precision", "experts",
                    "scheduler", "workload", "slo", "percentiles", "trace", "generate", "streaming",
                    "activation_bytes", "kv_bytes", "runtime", "costs"});
  auto prepared = std::make_unique<PreparedServe>();
  ServeRun& run = prepared->run;
  model::Architecture& arch = prepared->arch;
  sim::ServingConfig& c = prepared->config;
  nlohmann::json resolved = s.doc;

  // Model (with overrides applied to its config.json), precision, profiles.
  run.model_id = root.optional_string("model").value_or("mixtral-8x7b");
  if (auto o = root.optional_child("model_overrides")) {
    nlohmann::json config = root.resolving("model", [&] { return model::load_model_config(run.model_id); });
    if (!o->raw().is_object()) throw o->error("must be an object of config.json keys, e.g. {\"num_local_experts\": 4}");
    for (const auto& [k, v] : o->raw().items()) config[k] = v;
    arch = model::parse_hf_config(config, s.source + ": $.model_overrides on " + run.model_id);
    arch.id = run.model_id + "+overrides";
  } else {
    arch = root.resolving("model", [&] { return model::load_model(run.model_id); });
  }
  run.hw_id = root.optional_string("hw").value_or("dgx-h100");
  prepared->node = root.resolving("hw", [&] { return model::load_node(run.hw_id); });
  std::optional<model::RuntimeProfile> runtime;
  if (auto rt = root.optional_string("runtime")) {
    // The software on the hardware (model::apply_runtime): the figures it gives (efficiencies, attention
    // factor, kernel and layer costs, host costs) replace the node's own.
    runtime = root.resolving("runtime", [&] { return model::find_runtime(*rt, prepared->node); });
    prepared->node = model::apply_runtime(prepared->node, *runtime);
    resolved["runtime"] = runtime->id;
  }
  // Default: the format the model's config.json declares (quantization_config), as the runtime stores it,
  // else bf16.
  const auto* stored_as = runtime && runtime->checkpoint_formats ? &runtime->checkpoint_formats->value : nullptr;
  const model::Precision& prec = *root.resolving("precision", [&] {
    return &model::precision_for(root.optional_string("precision").value_or("checkpoint"), arch, stored_as);
  });
  run.precision = prec.name;
  const model::NodeProfile& node = prepared->node;
  (void)node.memory_total();  // UserError naming the field when the profile has no memory
  (void)node.bandwidth();

  c.arch = &arch;
  c.weights = &prec;
  c.node = &node;
  sim::ParallelPlan plan;
  plan.nodes = root.optional_integer("nodes", 1).value_or(1);
  if (node.nics_per_node) plan.nics_per_node = node.nics_per_node->value;
  if (auto p = root.optional_child("plan")) {
    p->expect_only({"tp", "pp", "moe_tp", "moe_ep", "attention_dp", "attention_replicated", "devices_per_node",
                    "nics_per_node"});
    if (auto v = p->optional_integer("pp", 1)) plan.pp = *v;
    if (auto v = p->optional_integer("devices_per_node", 1)) plan.devices_per_node = *v;
    // No tp: every device of a stage (the devices over the pipeline stages).
    const std::int64_t devices = (plan.devices_per_node > 0 ? plan.devices_per_node : node.devices.count) * plan.nodes;
    plan.tp = p->optional_integer("tp", 1).value_or(std::max<std::int64_t>(1, devices / plan.pp));
    if (auto v = p->optional_integer("moe_tp", 1)) plan.moe_tp = *v;
    if (auto v = p->optional_integer("moe_ep", 1)) plan.moe_ep = *v;
    if (auto v = p->optional_boolean("attention_dp")) plan.attention_dp = *v;
    if (auto v = p->optional_boolean("attention_replicated")) plan.attention_replicated = *v;
    if (auto v = p->optional_integer("nics_per_node", 1)) plan.nics_per_node = *v;
  } else {
    plan.tp = node.devices.count * plan.nodes;
  }
  c.plan = sim::resolve_plan(plan, arch, node, s.source + ": $.plan");
  std::optional<model::NicProfile>& nic = prepared->nic;
  std::optional<model::NicProfile>& intra = prepared->intra;
  if (c.plan.nodes > 1) {
    const auto id = root.optional_string("nic");
    if (!id)
      throw root.error("nic", "is missing; a plan over " + std::to_string(c.plan.nodes) +
                                  " nodes needs a NIC profile (`moesim hw`)");
    nic = root.resolving("nic", [&] { return model::load_nic(*id); });
    c.nic = &*nic;
  }
  if (node.intra_node_link) {
    intra = model::load_nic(*node.intra_node_link);
    c.intra_link = &*intra;
  } else if (c.plan.devices_per_node > 1) {
    throw UserError(node.origin +
                    ": intra_node_link is missing; a node of several devices needs the link between them");
  }
  if (auto v = root.optional_string("experts"))
    c.experts = root.resolving("experts", [&] { return sim::expert_execution_by_name(*v); });

  // A default the user did not choose is said (issue 21), once, in the run's assumptions.
  std::vector<std::string>& defaults = prepared->defaults;
  defaults = s.defaults;
  if (auto sc = root.optional_child("scheduler")) {
    c.scheduler = read_scheduler(*sc);
  } else {
    defaults.push_back("no scheduler given: " + std::string(sim::name_of(c.scheduler.kind)) + ", max_num_seqs " +
                       std::to_string(c.scheduler.max_num_seqs) + ", max_num_batched_tokens " +
                       std::to_string(c.scheduler.max_num_batched_tokens) + ", gpu_memory_utilization " +
                       text::printf("%g", c.scheduler.gpu_memory_utilization) +
                       " (moesim's defaults; set \"scheduler\" to your engine's)");
  }
  if (auto v = root.optional_number("activation_bytes")) c.activation_bytes = *v;
  if (auto v = root.optional_number("kv_bytes")) c.kv_bytes = *v;
  if (!(c.activation_bytes > 0) || !(c.kv_bytes > 0))
    throw root.error("activation_bytes and kv_bytes must be positive");

  if (auto sl = root.optional_child("slo")) {
    // vLLM's goodput keys (benchmark_serving --goodput ttft:MS tpot:MS e2el:MS). moesim's "itl" used to
    // bound a request's TPOT under the wrong name: refused with the right one.
    if (sl->has("itl"))
      throw sl->error("itl", "bounded a request's TPOT (its mean time per output token), not its inter-token "
                             "latency: write \"tpot\" (vLLM's goodput key)");
    sl->expect_only({"ttft", "tpot", "e2el"});
    if (auto v = sl->optional_quantity<units::Dimension::Time>("ttft")) c.slo.ttft_s = v->base();
    if (auto v = sl->optional_quantity<units::Dimension::Time>("tpot")) c.slo.tpot_s = v->base();
    if (auto v = sl->optional_quantity<units::Dimension::Time>("e2el")) c.slo.e2el_s = v->base();
    if (!c.slo.given()) throw sl->error("is empty; give ttft, tpot or e2el with a unit, e.g. {\"ttft\": \"1s\"}");
  } else {
    defaults.push_back("no SLO given: no goodput (set \"slo\" or --goodput, e.g. ttft:1000 tpot:50 in ms)");
  }
  if (root.has("percentiles")) c.percentiles = read_percentiles(root, "percentiles");
  if (root.has("costs")) {
    std::string source;
    run.costs = read_costs(root.child("costs"), source);
  }
  resolved["percentiles"] = c.percentiles;

  // Workload.
  if (auto w = root.optional_child("workload")) {
    c.workload = sim::parse_workload(*w, s.base_dir);
  } else {
    throw root.error("workload",
                     "is missing; say how requests arrive, e.g. {\"arrival\": \"poisson\", \"rate\": \"2/s\", "
                     "\"requests\": 100, \"prompt\": 512, \"output\": 128}");
  }
  sim::validate_workload(c.workload, s.source + ": $.workload");
  if (traffic && c.workload.arrival == sim::ArrivalKind::Trace) {
    // Read here rather than through open_loop_requests, for the line that says what the file gave.
    sim::RequestTrace t = sim::read_request_trace(c.workload.trace_path, sim::request_trace_options(c.workload));
    defaults.push_back(t.summary(c.workload.trace_path, c.workload.time_scale));
    c.requests = std::move(t.requests);
  } else if (traffic && c.workload.arrival != sim::ArrivalKind::ClosedLoop) {
    c.requests = sim::open_loop_requests(c.workload);
  }
  run.requests = c.workload.arrival == sim::ArrivalKind::ClosedLoop ? c.workload.requests
                                                                    : static_cast<std::int64_t>(c.requests.size());
  resolved["workload"] = sim::workload_to_json(c.workload);

  // Routing trace.
  if (arch.is_moe()) {
    GenerateRequest g;
    g.tokens = 4096;
    std::string trace_path;
    if (auto t = root.optional_string("trace")) {
      if (root.has("generate")) throw root.error("generate", "and \"trace\" are both given; keep one");
      trace_path = (std::filesystem::path(*t).is_absolute() ? std::filesystem::path(*t) : s.base_dir / *t).string();
    } else if (auto gn = root.optional_child("generate")) {
      parse_generate(*gn, g);
    }
    if (g.top_k && *g.top_k != arch.top_k) {
      // The measurement ran with another top-k (flash-moe uses K = 4 of Qwen3.5's 10): the model runs it too.
      arch.top_k = *g.top_k;
    }
    if (traffic && cache != nullptr && trace_path.empty()) {
      const std::string key = arch.id + "|" + std::to_string(model::moe_layer_count(arch)) + "|" +
                              std::to_string(arch.routed_experts) + "|" + std::to_string(arch.top_k) + "|" +
                              generate_to_json(g).dump();
      c.trace = &cache->get(key, [&] { return make_trace(g, trace_path, arch); });
    } else if (traffic) {
      prepared->trace = make_trace(g, trace_path, arch);
      c.trace = &prepared->trace;
    }
    if (trace_path.empty()) resolved["generate"] = generate_to_json(g);
  }

  // Experts streamed from storage (cost::StreamingSpec, the scenario object estimate and simulate read too).
  if (auto st = root.optional_child("streaming")) {
    const cost::StreamingSpec spec = cost::streaming_spec_from_json(*st);
    c.streaming = root.resolving("streaming", [&] { return cost::resolve_streaming(spec, arch, prec); });
  }

  resolved["model"] = run.model_id;
  resolved["hw"] = run.hw_id;
  resolved["precision"] = run.precision;
  resolved["nodes"] = c.plan.nodes;
  resolved["plan"] = {{"tp", c.plan.tp},
                      {"pp", c.plan.pp},
                      {"moe_tp", c.plan.moe_tp},
                      {"moe_ep", c.plan.moe_ep},
                      {"attention_dp", c.plan.attention_dp},
                      {"attention_replicated", c.plan.attention_replicated},
                      {"devices_per_node", c.plan.devices_per_node},
                      {"nics_per_node", c.plan.nics_per_node}};
  resolved["experts"] = std::string(sim::name_of(c.experts));
  resolved["scheduler"] = scheduler_params().to_json(c.scheduler);
  resolved["activation_bytes"] = c.activation_bytes;
  resolved["kv_bytes"] = c.kv_bytes;
  run.scenario = resolved;
  return prepared;
}

ServeRun run_serve(const ServeScenario& s, const std::function<void(double)>& progress) {
  const std::unique_ptr<PreparedServe> prepared = prepare_serve(s);
  prepared->config.progress = progress;
  ServeRun& run = prepared->run;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run.result = sim::run_serving(prepared->config);
    run.result.assumptions.insert(run.result.assumptions.begin(), prepared->defaults.begin(),
                                  prepared->defaults.end());
  } catch (const UserError& e) {
    // The engine's refusals (a request larger than the cache, a prompt beyond the step budget, a model
    // that does not fit) name what is wrong; say which scenario it came from.
    const std::string what = e.what();
    if (what.starts_with(s.source)) throw;
    throw UserError(s.source + ": " + what);
  }
  run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The cost of the tokens, as `moesim cost` and the sweep price them (model/cost.hpp).
  const model::NicProfile* nic = prepared->nic ? &*prepared->nic : nullptr;
  const std::int64_t nodes = prepared->config.plan.nodes;
  if (auto missing = model::missing_price(prepared->node, nic, nodes)) {
    run.price_missing = *missing;
  } else {
    run.capital = model::capital_cost(prepared->node, nic, nodes);
    run.running = model::running_cost(prepared->node, nodes, *run.capital, run.result.output_throughput, run.costs);
  }
  return std::move(run);
}

sim::MemoryPlan serve_memory_plan(const ServeScenario& s) { return sim::check_memory(prepare_serve(s, false)->config); }

MaxRate find_max_rate(const ServeScenario& s, double attainment,
                      const std::function<void(double, std::size_t)>& progress) {
  if (!(attainment > 0 && attainment <= 1))
    throw UserError("--slo-attainment " + text::printf("%g", attainment) + ": give a share in (0, 1], e.g. 0.9");
  if (!s.doc.contains("slo"))
    throw UserError(s.source + ": $.slo: --find-max-rate needs an SLO to meet: give \"slo\" (e.g. {\"ttft\": \"2s\", "
                    "\"tpot\": \"100ms\"}) or --goodput ttft:2000 tpot:100");
  if (s.doc.contains("sweep")) throw UserError(s.source + ": $.sweep: --find-max-rate varies the rate itself; drop \"sweep\"");
  const nlohmann::json* w = s.doc.contains("workload") ? &s.doc.at("workload") : nullptr;
  const std::string arrival = w && w->contains("arrival") && w->at("arrival").is_string() ? w->at("arrival").get<std::string>() : "";
  if (arrival != "poisson" && arrival != "gamma" && arrival != "uniform")
    throw UserError(s.source +
                    ": $.workload.arrival: --find-max-rate needs requests arriving at a rate (poisson, "
                    "gamma or uniform), not \"" +
                    arrival + "\"");
  // The scenario's own rate starts the search (read as the workload reader reads it).
  const sim::WorkloadSpec parsed = sim::parse_workload(json::Node(*w, s.source, "$.workload"), s.base_dir);
  // Every probe offers load for the same time, the scenario's own arrival window (its requests at its
  // rate): a fixed count of requests at a rate beyond capacity is a burst the queue drains after the last
  // arrival, which a finite test passes at any rate; a fixed window makes an overload build its queue for
  // the whole window, as a server in steady state would (DistServe's traces, like vLLM's benchmark at a
  // rate, are long against the latencies they bound).
  const double window = static_cast<double>(parsed.requests) / parsed.rate;
  constexpr std::int64_t kMaxProbeRequests = 200000;
  MaxRate m;
  m.attainment_target = attainment;
  m.window_s = window;
  auto probe = [&](double rate) -> const RateProbe& {
    ServeScenario at = s;
    at.doc["workload"]["rate"] = text::printf("%.9g/s", rate);
    const auto count = static_cast<std::int64_t>(std::llround(rate * window));
    if (count > kMaxProbeRequests)
      throw UserError("--find-max-rate: " + text::printf("%.3g", rate) + " requests/s over the workload's " +
                      text::printf("%.3g", window) + " s window is " + std::to_string(count) + " requests, above the " +
                      std::to_string(kMaxProbeRequests) + " a probe may run; give fewer workload requests");
    at.doc["workload"]["requests"] = std::max<std::int64_t>(count, 1);
    if (progress) progress(rate, m.probes.size());
    RateProbe p;
    p.rate = rate;
    p.run = run_serve(at);
    const auto n = static_cast<double>(p.run.result.requests.size());
    p.attainment = n > 0 ? static_cast<double>(p.run.result.good_requests) / n : 0.0;
    m.probes.push_back(std::move(p));
    return m.probes.back();
  };
  auto meets = [&](const RateProbe& p) { return p.attainment >= attainment; };
  double lo = 0, hi = 0;  // lo meets, hi does not
  double r = parsed.rate;
  if (meets(probe(r))) {
    lo = r;
    for (int i = 0; i < 24 && hi == 0; ++i) {
      r *= 2;
      if (meets(probe(r))) lo = r; else hi = r;
    }
  } else {
    hi = r;
    for (int i = 0; i < 24 && lo == 0; ++i) {
      r /= 2;
      if (meets(probe(r))) lo = r; else hi = r;
    }
    if (lo == 0)
      throw UserError(s.source + ": even " + text::printf("%.3g", hi) + " requests/s does not meet the SLO for " +
                      text::printf("%g", attainment * 100) + "% of the requests: the SLO is out of reach of this " +
                      "hardware at any load (loosen it, or look at the single-request TTFT and TPOT)");
  }
  for (int i = 0; i < 16 && hi > 0 && hi / lo > 1.02; ++i) {
    const double mid = std::sqrt(lo * hi);
    if (meets(probe(mid))) lo = mid; else hi = mid;
  }
  for (std::size_t i = 0; i < m.probes.size(); ++i)
    if (m.probes[i].rate == lo) m.best = i;
  if (hi > 0) m.failing_rate = hi;
  return m;
}

void print_max_rate_text(const MaxRate& m, std::ostream& out) {
  Table t({"rate req/s", "met SLO", "output tok/s", "median TTFT ms", "median TPOT ms"});
  std::vector<std::size_t> order(m.probes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return m.probes[a].rate < m.probes[b].rate; });
  for (std::size_t i : order) {
    const auto& p = m.probes[i];
    t.add_row({text::printf("%.3f", p.rate), text::printf("%.1f%%", p.attainment * 100),
               fixed(p.run.result.output_throughput, 1), ms(p.run.result.ttft.median), ms(p.run.result.tpot.median)});
  }
  t.print_text(out);
  const RateProbe& b = m.probes[m.best];
  out << "\neach probe offers load for " << text::printf("%.1f", m.window_s)
      << " s (the workload's requests at its rate); the rate is bracketed, then bisected to 2%\n";
  out << "max rate    " << text::printf("%.3f", b.rate) << " requests/s with " << text::printf("%.1f", b.attainment * 100)
      << "% of requests meeting the SLO (target " << text::printf("%g", m.attainment_target * 100) << "%)";
  if (m.failing_rate) out << "; " << text::printf("%.3f", *m.failing_rate) << " requests/s misses it";
  out << "\nthere       " << fixed(b.run.result.output_throughput, 1) << " output tokens/s";
  if (b.run.running && b.run.running->usd_per_million_tokens)
    out << ", " << text::printf("%.3f", *b.run.running->usd_per_million_tokens) << " USD per million output tokens";
  out << "\n\nAt the max rate:\n";
  print_serve_text(b.run, out);
}

nlohmann::json max_rate_to_json(const MaxRate& m) {
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& p : m.probes)
    probes.push_back({{"rate", {{"value", p.rate}, {"unit", "requests/s"}}},
                      {"slo_attainment", {{"value", p.attainment}, {"unit", "fraction"}}},
                      {"output_throughput", {{"value", p.run.result.output_throughput}, {"unit", "tokens/s"}}}});
  nlohmann::json j = {{"slo_attainment_target", m.attainment_target},
                      {"window", {{"value", m.window_s}, {"unit", "s"}}},
                      {"max_rate", {{"value", m.probes[m.best].rate}, {"unit", "requests/s"}}},
                      {"probes", probes},
                      {"at_max_rate", serve_to_json(m.probes[m.best].run)}};
  if (m.failing_rate) j["failing_rate"] = {{"value", *m.failing_rate}, {"unit", "requests/s"}};
  return j;
}

void print_serve_text(const ServeRun& r, std::ostream& out, bool timing) {
  const auto& res = r.result;
  const auto& p = res.plan;
  out << "model      " << r.model_id << " at " << r.precision << " on " << p.nodes << " × " << r.hw_id;
  if (r.scenario.contains("runtime")) out << " with runtime " << r.scenario["runtime"].get<std::string>();
  out << "\n";
  out << "plan       tp " << p.tp << " × pp " << p.pp;
  if (p.pp > 1) {
    // The layers of each stage (vLLM's split, sim::stage_layer_starts), e.g. 61 layers over 2: 31 + 30.
    const auto& starts = res.memory.stage_starts;
    std::vector<std::string> counts;
    for (std::size_t s = 0; s + 1 < starts.size(); ++s) counts.push_back(std::to_string(starts[s + 1] - starts[s]));
    out << " (layers " << text::join(counts, " + ") << ")";
  }
  out << "; MoE: moe_tp " << p.moe_tp << " × moe_ep " << p.moe_ep << (p.attention_dp ? ", attention data-parallel" : "")
      << (p.attention_replicated ? ", attention replicated (expert outputs exchanged)" : "") << "\n";
  out << "memory     " << units::format(units::bytes(res.memory.weights)) << " of weights per device"
      << (p.pp > 1 ? " (stage " + std::to_string(res.memory.busiest_stage) + ", the fullest)" : std::string()) << ", "
      << units::format(units::bytes(res.memory.activations)) << " of activations, KV cache " << res.memory.kv_tokens
      << " tokens (" << res.memory.kv_blocks << " blocks)\n";
  out << "requests   " << res.requests.size() << " completed in " << fixed(res.duration, 2) << " s simulated ("
      << (timing ? fixed(r.wall_seconds, 3) + " s wall, " : std::string()) << res.events << " events)\n\n";
  std::vector<std::string> head = {"metric", "mean ms", "median ms", "std ms"};
  for (const auto& [pct, value] : res.ttft.requested) head.push_back("p" + percent_label(pct) + " ms");
  Table t(head);
  auto row = [&](const char* name, const sim::Percentiles& q) {
    std::vector<std::string> cells = {name, ms(q.mean), ms(q.median), ms(q.std)};
    for (const auto& [pct, value] : q.requested) cells.push_back(ms(value));
    t.add_row(cells);
  };
  row("TTFT", res.ttft);
  row("TPOT", res.tpot);
  row("ITL", res.itl);
  row("E2EL", res.e2el);
  t.print_text(out);
  out << "\nthroughput  " << fixed(res.request_throughput, 3) << " requests/s, " << fixed(res.output_throughput, 1)
      << " output tokens/s, " << fixed(res.total_throughput, 1) << " total tokens/s\n";
  if (res.slo_given)
    out << "goodput     " << fixed(res.goodput, 3) << " requests/s (" << res.good_requests << " of "
        << res.requests.size() << " met the SLO)\n";
  if (res.tpot.mean > 0) out << "per user    " << fixed(1.0 / res.tpot.mean, 1) << " tokens/s (1 / mean TPOT)\n";
  if (r.capital && r.running && r.running->usd_per_million_tokens) {
    const auto& a = r.costs;
    out << "cost        " << text::printf("%.0f", r.capital->total().base()) << " USD of hardware; "
        << text::printf("%.3f", *r.running->usd_per_million_tokens) << " USD per million output tokens at this "
        << "throughput (capital over " << text::printf("%g", a.years) << " years at " << text::printf("%g", a.utilisation * 100)
        << "% use" << (r.running->energy_usd_per_million_tokens
                           ? ", energy " + text::printf("%.3f", *r.running->energy_usd_per_million_tokens)
                           : std::string(", no energy price")) << ")";
    if (r.running->cloud_usd_per_million_tokens)
      out << "; rented " << text::printf("%.3f", *r.running->cloud_usd_per_million_tokens) << " USD per million";
    out << "\n";
  } else if (!r.price_missing.empty()) {
    out << "cost        not computed: " << r.price_missing << "\n";
  }
  out << "batching    mean decode batch " << fixed(res.mean_decode_batch, 1) << ", max queue " << res.max_waiting
      << ", peak KV use " << fixed(100.0 * res.max_kv_used, 1) << "%, " << res.preemptions << " preemptions\n";
  if (res.cache_hit_rate >= 0) {
    out << "streaming   page-cache hit rate " << fixed(100.0 * res.cache_hit_rate, 1) << "%; per layer (decode): I/O "
        << ms(res.layer_split.io) << " ms, GPU " << ms(res.layer_split.gpu) << " ms, CPU "
        << fixed(res.layer_split.cpu * 1e3, 2) << " ms\n";
  }
  for (const auto& a : res.assumptions) out << "assumption  " << a << "\n";
}

nlohmann::json serve_to_json(const ServeRun& r, bool timing) {
  const auto& res = r.result;
  nlohmann::json m = nlohmann::json::array();
  // vLLM benchmark_serving's names and units (--save-result): mean_ttft_ms, median_ttft_ms, std_ttft_ms and
  // p<P>_ttft_ms for each percentile asked for, the same for tpot, itl and e2el.
  auto pct = [&](const std::string& name, const sim::Percentiles& q) {
    m.push_back(metric("mean_" + name + "_ms", q.mean * 1e3, "ms"));
    m.push_back(metric("median_" + name + "_ms", q.median * 1e3, "ms"));
    m.push_back(metric("std_" + name + "_ms", q.std * 1e3, "ms"));
    for (const auto& [p, value] : q.requested)
      m.push_back(metric("p" + percent_label(p) + "_" + name + "_ms", value * 1e3, "ms"));
  };
  pct("ttft", res.ttft);
  pct("tpot", res.tpot);
  pct("itl", res.itl);
  pct("e2el", res.e2el);
  double input_tokens = 0, output_tokens = 0;
  for (const auto& q : res.requests) {
    input_tokens += static_cast<double>(q.prompt_tokens);
    output_tokens += static_cast<double>(q.output_tokens);
  }
  m.push_back(metric("completed", static_cast<double>(res.requests.size()), "requests"));
  m.push_back(metric("total_input_tokens", input_tokens, "tokens"));
  m.push_back(metric("total_output_tokens", output_tokens, "tokens"));
  m.push_back(metric("duration", res.duration, "s"));
  m.push_back(metric("request_throughput", res.request_throughput, "requests/s"));
  m.push_back(metric("output_throughput", res.output_throughput, "tokens/s"));
  m.push_back(metric("total_token_throughput", res.total_throughput, "tokens/s"));
  if (res.slo_given) m.push_back(metric("request_goodput", res.goodput, "requests/s"));
  if (r.capital) m.push_back(metric("capital_cost", r.capital->total().base(), "USD"));
  if (r.running && r.running->usd_per_million_tokens)
    m.push_back(metric("usd_per_million_output_tokens", *r.running->usd_per_million_tokens, "USD"));
  if (r.running && r.running->cloud_usd_per_million_tokens)
    m.push_back(metric("cloud_usd_per_million_output_tokens", *r.running->cloud_usd_per_million_tokens, "USD"));
  m.push_back(metric("per_user_tokens_per_second", res.tpot.mean > 0 ? 1.0 / res.tpot.mean : 0.0, "tokens/s"));
  m.push_back(metric("mean_decode_batch", res.mean_decode_batch, "sequences"));
  m.push_back(metric("max_queue_depth", res.max_waiting, "requests"));
  m.push_back(metric("peak_kv_usage", res.max_kv_used, "fraction"));
  m.push_back(metric("preemptions", static_cast<double>(res.preemptions), "requests"));
  m.push_back(metric("weights_per_device", res.memory.weights, "B"));
  m.push_back(metric("kv_capacity", static_cast<double>(res.memory.kv_tokens), "tokens"));
  if (res.cache_hit_rate >= 0) {
    m.push_back(metric("page_cache_hit_rate", res.cache_hit_rate, "fraction"));
    m.push_back(metric("layer_io", res.layer_split.io, "s"));
    m.push_back(metric("layer_gpu", res.layer_split.gpu, "s"));
    m.push_back(metric("layer_cpu", res.layer_split.cpu, "s"));
  }
  if (timing) m.push_back(metric("wall_time", r.wall_seconds, "s"));
  return {{"metrics", m}, {"scenario", r.scenario}, {"assumptions", res.assumptions}};
}

void write_requests_csv(const ServeRun& r, std::ostream& o) {
  o << "id,prompt_tokens,output_tokens,arrival_s,first_token_s,finish_s,ttft_s,tpot_s,e2el_s,max_itl_s,preemptions\n";
  for (const auto& q : r.result.requests) {
    o << q.id << ',' << q.prompt_tokens << ',' << q.output_tokens << ','
      << text::printf("%.9f,%.9f,%.9f,%.9f,%.9f,%.9f,%.9f", q.arrival, q.first_token, q.finish, q.ttft(), q.tpot(),
                      q.e2el(), q.max_itl)
      << ',' << q.preemptions << '\n';
  }
}

void write_steps_csv(const ServeRun& r, std::ostream& o) {
  o << "start_s,duration_s,decode_sequences,prefill_tokens,waiting_requests,running_requests,kv_used_fraction\n";
  for (const auto& s : r.result.steps) {
    o << text::printf("%.9f,%.9f,", s.start, s.duration) << s.decode << ',' << s.prefill_tokens << ',' << s.waiting
      << ',' << s.running << ',' << text::printf("%.6f", s.kv_used) << '\n';
  }
}

std::string write_serve_chrome_trace(const ServeRun& r, std::ostream& o, std::size_t max_steps,
                                     std::size_t max_requests) {
  // Process 0 is the server: one track of engine steps (stage 0 of the plan), counters for the queue and the
  // KV cache; process 1 holds one track per request (queued, prefill until the first token, decode until
  // the last).
  ChromeTrace trace;
  const auto us = [](double s) { return s * 1e6; };
  const auto& plan = r.result.plan;
  const auto& steps = r.result.steps;
  const auto& requests = r.result.requests;
  trace.process(0, r.model_id + " on " + std::to_string(plan.nodes) + " x " + r.hw_id + " (tp " +
                       std::to_string(plan.tp) + ", pp " + std::to_string(plan.pp) + ")");
  trace.thread(0, 0, "engine steps");
  trace.process(1, "requests");
  const std::size_t n_steps = std::min(max_steps, steps.size());
  for (std::size_t i = 0; i < n_steps; ++i) {
    const auto& st = steps[i];
    trace.complete(st.prefill_tokens > 0 ? "step (prefill + decode)" : "step (decode)", "step", 0, 0, us(st.start),
                   us(st.duration), {{"decode_sequences", st.decode}, {"prefill_tokens", st.prefill_tokens}});
    trace.counter("queue", 0, us(st.start), {{"waiting", st.waiting}, {"running", st.running}});
    trace.counter("KV cache used %", 0, us(st.start), {{"used", st.kv_used * 100}});
  }
  // With the steps cut, requests that arrive after the last traced step would have no steps beside them.
  const bool cut = n_steps < steps.size();
  const double until = cut && n_steps > 0 ? steps[n_steps - 1].start + steps[n_steps - 1].duration
                                          : std::numeric_limits<double>::infinity();
  std::size_t n_requests = 0;
  for (const auto& q : requests) {
    if (n_requests >= max_requests) break;
    if (q.arrival > until) continue;
    ++n_requests;
    const auto tid = q.id + 1;
    trace.thread(1, tid, "request " + std::to_string(q.id));
    const nlohmann::json args = {{"prompt_tokens", q.prompt_tokens}, {"output_tokens", q.output_tokens}};
    trace.complete("until first token", "request", 1, tid, us(q.arrival), us(q.first_token - q.arrival), args);
    trace.complete("decode", "request", 1, tid, us(q.first_token), us(q.finish - q.first_token), args);
  }
  std::string covers = (cut ? "the first " + std::to_string(n_steps) + " of " : "all ") + std::to_string(steps.size()) +
                       " engine steps";
  if (cut && !steps.empty()) {
    covers += " (to " + text::printf("%.1f", until) + " s of " +
              text::printf("%.1f", steps.back().start + steps.back().duration) + " s; --chrome-steps)";
  }
  covers += " and " + (n_requests == requests.size() ? "all " : std::to_string(n_requests) + " of ") +
            std::to_string(requests.size()) + " requests";
  trace.note("covers", covers);
  trace.write(o);
  return covers;
}

namespace {

std::vector<std::string> sweep_headers(const std::vector<SweepPoint>& points) {
  std::vector<std::string> h;
  if (!points.empty())
    for (const auto& [k, v] : points.front().values) h.push_back(k);
  for (const char* x : {"req/s", "out tok/s", "per-user tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
                        "ITL p99 ms", "E2EL p50 s", "goodput req/s", "decode batch seqs"})
    h.emplace_back(x);
  return h;
}

std::vector<std::string> sweep_cells(const SweepPoint& p, const ServeRun& r) {
  std::vector<std::string> c;
  for (const auto& [k, v] : p.values) c.push_back(label_of(v));
  const auto& s = r.result;
  c.push_back(fixed(s.request_throughput, 3));
  c.push_back(fixed(s.output_throughput, 1));
  c.push_back(fixed(s.tpot.mean > 0 ? 1.0 / s.tpot.mean : 0.0, 1));
  c.push_back(ms(s.ttft.median));
  c.push_back(ms(s.ttft.p99));
  c.push_back(ms(s.itl.median));
  c.push_back(ms(s.itl.p99));
  c.push_back(fixed(s.e2el.median, 2));
  c.push_back(fixed(s.goodput, 3));
  c.push_back(fixed(s.mean_decode_batch, 1));
  return c;
}

}  // namespace

void print_sweep_table(const std::vector<SweepPoint>& points, const std::vector<ServeRun>& runs, std::ostream& out,
                       bool markdown) {
  Table t(sweep_headers(points));
  for (std::size_t i = 0; i < runs.size(); ++i) t.add_row(sweep_cells(points[i], runs[i]));
  if (markdown) {
    t.print_markdown(out);
  } else {
    t.print_text(out);
  }
}

void write_sweep_csv(const std::vector<SweepPoint>& points, const std::vector<ServeRun>& runs, std::ostream& out) {
  auto csv = [](std::string s) {
    for (char& ch : s)
      if (ch == ',') ch = ';';
    return s;
  };
  std::vector<std::string> h;
  if (!points.empty())
    for (const auto& [k, v] : points.front().values) h.push_back(k);
  for (const char* x :
       {"request_throughput_per_s", "output_tokens_per_s", "per_user_tokens_per_s", "ttft_median_s", "ttft_p99_s",
        "itl_median_s", "itl_p99_s", "e2el_median_s", "goodput_per_s", "mean_decode_batch"})
    h.emplace_back(x);
  out << text::join(h, ",") << "\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::string> c;
    for (const auto& [k, v] : points[i].values) c.push_back(csv(label_of(v)));
    const auto& s = runs[i].result;
    for (double x : {s.request_throughput, s.output_throughput, s.tpot.mean > 0 ? 1.0 / s.tpot.mean : 0.0,
                     s.ttft.median, s.ttft.p99, s.itl.median, s.itl.p99, s.e2el.median, s.goodput, s.mean_decode_batch})
      c.push_back(text::printf("%.9g", x));
    out << text::join(c, ",") << "\n";
  }
}

}  // namespace moesim::reports
