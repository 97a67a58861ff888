// Serving scenarios resolved and run: a scenario's keys (read by serve_params(), serve_keys.cpp) resolved into
// profiles, a parallel plan, a workload and a routing trace (prepare_serve), and the run itself (run_serve).
#include "moesim/scenario/serve.hpp"

#include <algorithm>
#include <chrono>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/common_keys.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/workload.hpp"

namespace moesim::scenario {

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

namespace {

/// The model (with its config.json overrides), the node with its runtime, and the precision: into
/// `p.run`, `p.arch`, `p.node` and `p.config`.
void resolve_profiles(const json::Node& root, const ServeScenario& s, const ServeRequest& q, PreparedServe& p,
                      nlohmann::json& resolved) {
  ServeRun& run = p.run;
  run.model_id = q.model;
  if (q.model_overrides.is_object()) {
    nlohmann::json config = root.resolving("model", [&] { return model::load_model_config(run.model_id); });
    for (const auto& [k, v] : q.model_overrides.items()) config[k] = v;
    p.arch = model::parse_hf_config(config, s.source + ": $.model_overrides on " + run.model_id);
    p.arch.id = run.model_id + "+overrides";
  } else {
    p.arch = root.resolving("model", [&] { return model::load_model(run.model_id); });
  }
  run.moe = p.arch.is_moe();
  run.hw_id = q.hw;
  p.node = root.resolving("hw", [&] { return model::load_node(run.hw_id); });
  std::optional<model::RuntimeProfile>& runtime = p.runtime;
  if (const auto& rt = q.runtime) {
    // The software on the hardware (model::apply_runtime): the figures it gives (efficiencies, attention
    // factor, kernel and layer costs, host costs) replace the node's own.
    runtime = root.resolving("runtime", [&] { return model::find_runtime(*rt, p.node); });
    p.node = model::apply_runtime(p.node, *runtime);
    resolved["runtime"] = runtime->id;
  }
  // Default: the format the model's config.json declares (quantization_config), as the runtime stores it,
  // else bf16.
  const auto* stored_as = runtime && runtime->checkpoint_formats ? &runtime->checkpoint_formats->value : nullptr;
  const model::Precision& prec =
      *root.resolving("precision", [&] { return &model::precision_for(q.precision, p.arch, stored_as); });
  run.precision = prec.name;
  (void)p.node.memory_total();  // UserError naming the field when the profile has no memory
  (void)p.node.bandwidth();
  p.config.arch = &p.arch;
  p.config.weights = &prec;
  p.config.node = &p.node;
}

/// vLLM's parallel keys (data_parallel_size, enable_expert_parallel) as moesim's plan: D attention replicas
/// of tensor_parallel_size T are tp = D × T devices; above one replica, attention data-parallel (which moesim
/// runs on single devices, so T must be 1) with the experts expert-parallel over all D devices, as vLLM's
/// wide-EP deployments run them (docs.vllm.ai "Data Parallel Deployment" and "Expert Parallel Deployment");
/// with one, the experts expert-parallel over the T devices when enable_expert_parallel, else
/// tensor-parallel as plan.tp alone runs them.
void vllm_parallel(const json::Node& plan, const PlanKeys& k, sim::ParallelPlan& out) {
  for (const char* ours : {"moe_tp", "moe_ep", "attention_dp", "attention_replicated"})
    if (plan.has(ours))
      throw plan.error(ours, std::string("is moesim's key, and the plan also has vLLM's ") +
                                 (k.data_parallel_size ? "data_parallel_size" : "enable_expert_parallel") +
                                 "; give the plan in one engine's terms");
  const std::int64_t dp = k.data_parallel_size.value_or(1);
  const std::int64_t tp = k.tp.value_or(k.data_parallel_size ? 1 : out.tp);
  if (dp > 1 && tp != 1)
    throw plan.error("tp", "is " + std::to_string(tp) + " with data_parallel_size " + std::to_string(dp) +
                               ": moesim runs attention data-parallel on single devices; give tp 1 and "
                               "data_parallel_size " +
                               std::to_string(dp * tp) + " (vLLM's wide expert parallelism), or tp " +
                               std::to_string(dp * tp) + " alone");
  if (dp > 1 && !k.enable_expert_parallel)
    throw plan.error("data_parallel_size",
                     "is " + std::to_string(dp) +
                         " without enable_expert_parallel: vLLM then splits every expert tensor-parallel over the " +
                         std::to_string(dp) +
                         " replicas, which moesim does not model; set enable_expert_parallel true, or give tp " +
                         std::to_string(dp) + " instead");
  out.tp = dp * tp;
  out.attention_dp = dp > 1;
  if (k.enable_expert_parallel) out.moe_tp = 1;
}

/// The plan's keys against the node: the devices used, tp over them when not given (sim::resolve_plan
/// checks the rest).
sim::ParallelPlan plan_from(const json::Node& root, const ServeRequest& q, const model::NodeProfile& node) {
  sim::ParallelPlan plan;
  plan.nodes = q.nodes;
  if (node.nics_per_node) plan.nics_per_node = node.nics_per_node->value;
  plan.pp = q.plan.pp;
  if (q.plan.devices_per_node) plan.devices_per_node = *q.plan.devices_per_node;
  // No tp: every device of a stage (the devices over the pipeline stages).
  const std::int64_t devices = (plan.devices_per_node > 0 ? plan.devices_per_node : node.devices.count) * plan.nodes;
  plan.tp = q.plan.tp.value_or(std::max<std::int64_t>(1, devices / plan.pp));
  if (q.plan.moe_tp) plan.moe_tp = *q.plan.moe_tp;
  if (q.plan.moe_ep) plan.moe_ep = *q.plan.moe_ep;
  plan.attention_dp = q.plan.attention_dp;
  plan.attention_replicated = q.plan.attention_replicated;
  if (q.plan.nics_per_node) plan.nics_per_node = *q.plan.nics_per_node;
  if (q.plan.data_parallel_size || q.plan.enable_expert_parallel) vllm_parallel(root.child("plan"), q.plan, plan);
  return plan;
}

/// The NIC between nodes (from 2 nodes) and the link inside a node (from 2 devices).
void resolve_links(const json::Node& root, const ServeRequest& q, PreparedServe& p) {
  sim::ServingConfig& c = p.config;
  if (c.plan.nodes > 1) {
    if (!q.nic)
      throw root.error("nic", "is missing; a plan over " + std::to_string(c.plan.nodes) +
                                  " nodes needs a NIC profile (`moesim hw`)");
    p.nic = root.resolving("nic", [&] { return model::load_nic(*q.nic); });
    c.nic = &*p.nic;
  }
  if (p.node.intra_node_link) {
    p.intra = model::load_nic(*p.node.intra_node_link);
    c.intra_link = &*p.intra;
  } else if (c.plan.devices_per_node > 1) {
    throw UserError(p.node.origin +
                    ": intra_node_link is missing; a node of several devices needs the link between them");
  }
}

/// The workload, and with `traffic` its open-loop requests (a request trace read, or arrivals drawn).
void resolve_workload(const json::Node& root, const ServeScenario& s, bool traffic, PreparedServe& p,
                      nlohmann::json& resolved) {
  sim::ServingConfig& c = p.config;
  if (root.has("workload")) {
    c.workload = sim::parse_workload(root.child("workload"), s.base_dir);
  } else {
    throw root.error("workload",
                     "is missing; say how requests arrive, e.g. {\"arrival\": \"poisson\", \"rate\": \"2/s\", "
                     "\"requests\": 100, \"prompt\": 512, \"output\": 128}");
  }
  sim::validate_workload(c.workload, s.source + ": $.workload");
  if (traffic && c.workload.arrival == sim::ArrivalKind::Trace) {
    // Read here rather than through open_loop_requests, for the line that says what the file gave.
    sim::RequestTrace t = sim::read_request_trace(c.workload.trace_path, sim::request_trace_options(c.workload));
    p.defaults.push_back(t.summary(c.workload.trace_path, c.workload.time_scale));
    c.requests = std::move(t.requests);
  } else if (traffic && c.workload.arrival != sim::ArrivalKind::ClosedLoop) {
    c.requests = sim::open_loop_requests(c.workload);
  }
  p.run.requests = c.workload.arrival == sim::ArrivalKind::ClosedLoop ? c.workload.requests
                                                                      : static_cast<std::int64_t>(c.requests.size());
  resolved["workload"] = sim::workload_to_json(c.workload);
}

/// An MoE model's routing trace: read from "trace", or generated ("generate"; from `cache` when given).
void resolve_routing(const json::Node& root, const ServeScenario& s, const ServeRequest& q, bool traffic,
                     TraceCache* cache, PreparedServe& p, nlohmann::json& resolved) {
  model::Architecture& arch = p.arch;
  if (!arch.is_moe()) return;
  GenerateRequest g = q.trace ? ServeRequest::serve_generate_defaults() : q.generate;
  std::string trace_path;
  if (const auto& t = q.trace) {
    if (root.has("generate")) throw root.error("generate", "and \"trace\" are both given; keep one");
    trace_path = (std::filesystem::path(*t).is_absolute() ? std::filesystem::path(*t) : s.base_dir / *t).string();
  }
  if (g.top_k && *g.top_k != arch.top_k) {
    // The measurement ran with another top-k (flash-moe uses K = 4 of Qwen3.5's 10): the model runs it too.
    arch.top_k = *g.top_k;
  }
  if (traffic && cache != nullptr) {
    // A file's trace is kept under its path (checked against the model it was first read for, the same
    // key's model each time); a generated one under all it depends on.
    const std::string key = arch.id + "|" + std::to_string(model::moe_layer_count(arch)) + "|" +
                            std::to_string(arch.routed_experts) + "|" + std::to_string(arch.top_k) + "|" +
                            (trace_path.empty() ? generate_to_json(g).dump() : "file:" + trace_path);
    p.config.trace = &cache->get(key, [&] { return make_trace(g, trace_path, arch, false); });
  } else if (traffic) {
    p.trace = make_trace(g, trace_path, arch, false);
    p.config.trace = &p.trace;
  }
  if (trace_path.empty()) resolved["generate"] = generate_to_json(g);
}

nlohmann::json plan_to_json(const sim::ParallelPlan& plan) {
  return {{"tp", plan.tp},
          {"pp", plan.pp},
          {"moe_tp", plan.moe_tp},
          {"moe_ep", plan.moe_ep},
          {"attention_dp", plan.attention_dp},
          {"attention_replicated", plan.attention_replicated},
          {"devices_per_node", plan.devices_per_node},
          {"nics_per_node", plan.nics_per_node}};
}

}  // namespace

std::unique_ptr<PreparedServe> prepare_serve(const ServeScenario& s, bool traffic, TraceCache* cache) {
  const json::Node root(s.doc, s.source);
  ServeRequest q;
  serve_params().read(root, q);
  auto prepared = std::make_unique<PreparedServe>();
  ServeRun& run = prepared->run;
  sim::ServingConfig& c = prepared->config;
  nlohmann::json resolved = s.doc;

  resolve_profiles(root, s, q, *prepared, resolved);
  c.plan = sim::resolve_plan(plan_from(root, q, prepared->node), prepared->arch, prepared->node, s.source + ": $.plan");
  resolve_links(root, q, *prepared);
  if (const auto& v = q.experts)
    c.experts = root.resolving("experts", [&] { return sim::expert_execution_by_name(*v); });

  // A default the user did not choose is said (issue 21), once, in the run's assumptions.
  std::vector<std::string>& defaults = prepared->defaults;
  defaults = s.defaults;
  c.scheduler = q.scheduler;
  if (q.scheduler_defaults != "moesim" && q.scheduler_defaults != "vllm")
    throw root.error("scheduler_defaults", "is \"" + q.scheduler_defaults + "\"; give moesim or vllm");
  const bool vllm = q.scheduler_defaults == "vllm";
  if (vllm) {
    // vLLM's values for the keys the scenario leaves out (a flag writes its key into the scenario).
    const sim::SchedulerConfig d = vllm_batch_defaults(prepared->node.devices, c.scheduler);
    const auto given = [&](const char* key) { return root.has("scheduler") && root.child("scheduler").has(key); };
    if (!given("max_num_batched_tokens")) c.scheduler.max_num_batched_tokens = d.max_num_batched_tokens;
    if (!given("max_num_seqs")) c.scheduler.max_num_seqs = d.max_num_seqs;
    if (!given("kind") && !given("enable_chunked_prefill")) c.scheduler.kind = d.kind;
  }
  if (!root.has("scheduler")) {
    defaults.push_back("no scheduler given: " + std::string(sim::name_of(c.scheduler.kind)) + ", max_num_seqs " +
                       std::to_string(c.scheduler.max_num_seqs) + ", max_num_batched_tokens " +
                       std::to_string(c.scheduler.max_num_batched_tokens) + ", gpu_memory_utilization " +
                       text::printf("%g", c.scheduler.gpu_memory_utilization) +
                       (vllm ? " (vLLM's defaults for `vllm serve` on " + prepared->node.devices.name + ")"
                             : std::string(" (moesim's defaults; set \"scheduler\" to your engine's, or "
                                           "scheduler_defaults vllm)")));
  }
  c.activation_bytes = q.activation_bytes;
  c.kv_bytes = q.kv_bytes;
  if (!(c.activation_bytes > 0) || !(c.kv_bytes > 0))
    throw root.error("activation_bytes and kv_bytes must be positive");
  if (q.kv_cache_dtype) {
    c.kv_bytes = root.resolving("kv_cache_dtype", [&] { return kv_cache_bytes(*q.kv_cache_dtype, q.kv_bytes); });
    if (root.has("kv_bytes") && c.kv_bytes != q.kv_bytes)
      throw root.error("kv_cache_dtype", "is " + *q.kv_cache_dtype + " (" + text::printf("%g", c.kv_bytes) +
                                             " bytes per element) but kv_bytes is " + text::printf("%g", q.kv_bytes) +
                                             "; keep one of the two keys");
  }

  c.slo = q.slo;
  if (!c.slo.given())
    defaults.push_back("no SLO given: no goodput (set \"slo\" or --goodput, e.g. ttft:1000 tpot:50 in ms)");
  c.percentiles = q.percentiles;
  if (q.costs) run.costs = *q.costs;
  resolved["percentiles"] = c.percentiles;

  resolve_workload(root, s, traffic, *prepared, resolved);
  resolve_routing(root, s, q, traffic, cache, *prepared, resolved);

  // Experts streamed from storage (cost::StreamingSpec, the scenario object estimate and simulate read too).
  if (q.streaming) {
    c.streaming =
        root.resolving("streaming", [&] { return cost::resolve_streaming(*q.streaming, prepared->arch, *c.weights); });
  }

  resolved["model"] = run.model_id;
  resolved["hw"] = run.hw_id;
  resolved["precision"] = run.precision;
  resolved["nodes"] = c.plan.nodes;
  resolved["plan"] = plan_to_json(c.plan);
  resolved["experts"] = std::string(sim::name_of(c.experts));
  resolved["scheduler"] = scheduler_params().to_json(c.scheduler);
  resolved["activation_bytes"] = c.activation_bytes;
  resolved["kv_bytes"] = c.kv_bytes;
  run.scenario = resolved;
  return prepared;
}

ServeRun run_serve(const ServeScenario& s, const std::function<void(double)>& progress, bool range,
                   double engine_time_scale) {
  const std::unique_ptr<PreparedServe> prepared = prepare_serve(s);
  prepared->config.engine_time_scale = engine_time_scale;
  const std::optional<model::RuntimeProfile>& runtime = prepared->runtime;
  const bool ranged = range && runtime && !runtime->interval_source.empty();
  ServeRun& run = prepared->run;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // With a range, the progress covers the three runs, a third each.
    prepared->config.progress = !progress || !ranged ? progress : [&](double f) { progress(f / 3); };
    run.result = sim::run_serving(prepared->config);
    run.result.assumptions.insert(run.result.assumptions.begin(), prepared->defaults.begin(), prepared->defaults.end());
    if (ranged) {
      ServeRange r;
      r.runtime = *runtime;
      r.moe = prepared->arch.is_moe();
      const auto again = [&](double error, double done) {
        prepared->config.engine_time_scale = engine_time_scale * (1.0 + error);
        if (progress) prepared->config.progress = [&progress, done](double f) { progress((done + f) / 3); };
        sim::ServingResult x = sim::run_serving(prepared->config);
        x.requests = {};
        x.steps = {};
        return x;
      };
      r.fast = again(runtime->error_low, 1);
      r.slow = again(runtime->error_high, 2);
      run.range = std::move(r);
    }
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

}  // namespace moesim::scenario
