// Serving scenarios resolved and run: the scheduler's parameters, a scenario's keys resolved into profiles,
// a parallel plan, a workload and a routing trace (prepare_serve), and the run itself (run_serve).
#include "moesim/reports/serve.hpp"

#include <algorithm>
#include <chrono>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/simulate.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/workload.hpp"

namespace moesim::reports {
namespace {

/// The percentiles to report: a list of 1 to 16 numbers, each in (0, 100] (vLLM --metric-percentiles).
std::vector<double> read_percentiles(const json::Node& root, std::string_view key) {
  const std::vector<json::Node> items = root.elements(key);
  if (items.empty() || items.size() > 16) throw root.error(key, "must list 1 to 16 percentiles, e.g. [90, 99]");
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
        .describe(choices_in(sim::scheduler_kinds()));
    t.choice("capacity", &C::capacity, sim::capacity_policy_by_name,
             [](sim::CapacityPolicy k) { return sim::name_of(k); })
        .describe(
            "max-utilization (vLLM: preempt when the KV cache runs out) or guaranteed-no-evict "
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
        .describe(
            "fraction of device memory the engine may use, weights and KV cache (vLLM's "
            "gpu_memory_utilization)");
    t.field("max_model_len", &C::max_model_len)
        .min(1)
        .unit("tokens")
        .describe(
            "longest request, prompt + output (vLLM's max_model_len): a longer request is refused, and a "
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
  root.expect_only({"description", "model",     "model_overrides",  "hw",       "nic",     "nodes",       "plan",
                    "precision",   "experts",   "scheduler",        "workload", "slo",     "percentiles", "trace",
                    "generate",    "streaming", "activation_bytes", "kv_bytes", "runtime", "costs"});
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
    p->expect_only(
        {"tp", "pp", "moe_tp", "moe_ep", "attention_dp", "attention_replicated", "devices_per_node", "nics_per_node"});
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
      throw sl->error("itl",
                      "bounded a request's TPOT (its mean time per output token), not its inter-token "
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
    run.result.assumptions.insert(run.result.assumptions.begin(), prepared->defaults.begin(), prepared->defaults.end());
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

}  // namespace moesim::reports
