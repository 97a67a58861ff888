// The keys of a serve scenario, each declared once (scenario/params.hpp): the scenario file's reader, the
// flags of `moesim serve` and the "scenario keys" section of its --help come from serve_params() and
// scheduler_params() below.
#include <algorithm>
#include <cctype>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/common_keys.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/sim/request_traces.hpp"
#include "moesim/sim/workload.hpp"

namespace moesim::scenario {
namespace {

using R = ServeRequest;
using P = Param<R>;

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

/// vLLM's goodput keys (benchmark_serving --goodput ttft:MS tpot:MS e2el:MS). moesim's "itl" used to
/// bound a request's TPOT under the wrong name: refused with the right one.
sim::Slo read_slo(const json::Node& sl) {
  if (sl.has("itl"))
    throw sl.error("itl",
                   "bounded a request's TPOT (its mean time per output token), not its inter-token "
                   "latency: write \"tpot\" (vLLM's goodput key)");
  sl.expect_only({"ttft", "tpot", "e2el"});
  sim::Slo slo;
  if (auto v = sl.optional_quantity<units::Dimension::Time>("ttft")) slo.ttft_s = v->base();
  if (auto v = sl.optional_quantity<units::Dimension::Time>("tpot")) slo.tpot_s = v->base();
  if (auto v = sl.optional_quantity<units::Dimension::Time>("e2el")) slo.e2el_s = v->base();
  if (!slo.given()) throw sl.error("is empty; give ttft, tpot or e2el with a unit, e.g. {\"ttft\": \"1s\"}");
  return slo;
}

/// --goodput ttft:1000 tpot:50 e2el:20000, vLLM's form in milliseconds (benchmark_serving.py
/// parse_goodput), as the "slo" object it sets.
nlohmann::json goodput_to_slo(const std::vector<std::string>& items) {
  nlohmann::json slo = nlohmann::json::object();
  for (const auto& item : items) {
    const auto colon = item.find(':');
    const std::string key = item.substr(0, colon);
    if (colon == std::string::npos || (key != "ttft" && key != "tpot" && key != "e2el"))
      throw UserError("--goodput " + item + ": write KEY:MS with KEY ttft, tpot or e2el, e.g. ttft:1000 tpot:50");
    const std::vector<double> v = parse_numbers(item.substr(colon + 1), "--goodput " + key, key + ":50 (milliseconds)");
    if (v.size() != 1 || !(v[0] > 0))
      throw UserError("--goodput " + item + ": the bound is a positive number of milliseconds, e.g. " + key + ":50");
    slo[key] = text::printf("%.17gms", v[0]);
  }
  return slo;
}

/// The workload's flags: each sets one key of the "workload" object (sim::parse_workload reads it).
void add_workload_flags(po::options_description& d) {
  // clang-format off
  d.add_options()
    ("arrival", po::value<std::string>(), (choices_in(sim::arrival_kinds()) + " (workload.arrival)").c_str())
    ("rate", po::value<std::string>(), "arrival rate with its unit, e.g. 2/s (workload.rate)")
    ("burstiness", po::value<double>(), "gamma arrivals of this shape, vLLM's --burstiness: 1 is Poisson, 0.5 "
     "burstier, 2 more even (workload.burstiness; sets workload.arrival gamma unless --arrival is given)")
    ("max-concurrency", po::value<std::int64_t>(), "at most N requests in flight, vLLM's --max-concurrency: a "
     "request is sent at its arrival time or when a slot frees, whichever is later (workload.max_concurrency)")
    ("requests", po::value<std::int64_t>(), "requests in all (workload.requests)")
    ("users", po::value<std::int64_t>(), "closed loop: users (workload.users)")
    ("prompt", po::value<std::int64_t>(), "prompt tokens, fixed (workload.prompt)")
    ("output", po::value<std::int64_t>(), "output tokens, fixed (workload.output)")
    ("request-trace", po::value<std::string>(), "request trace to replay: moesim CSV, Azure LLM inference 2023/2024, "
     "BurstGPT or Mooncake JSONL, detected from its first line (workload.trace, arrival trace)")
    ("request-trace-format", po::value<std::string>(), ("read the request trace as " +
     choices_in(sim::request_trace_formats()) + " (workload.trace_format; default auto)").c_str())
    ("time-scale", po::value<double>(), "multiply every request-trace arrival time by X: 0.5 replays twice as fast, "
     "2 half as fast (workload.time_scale; default 1)")
    ("seed", po::value<std::string>(), "workload seed (workload.seed)");
  // clang-format on
}

constexpr const char* kWorkloadFlags[] = {
    "arrival", "rate",   "burstiness",    "max-concurrency",      "requests",   "users",
    "prompt",  "output", "request-trace", "request-trace-format", "time-scale", "seed"};

/// The workload keys the flags given set.
nlohmann::json workload_flags_to_json(const po::variables_map& vm) {
  nlohmann::json w = nlohmann::json::object();
  for (const char* f : {"arrival", "rate", "request-trace-format"})
    if (vm.count(f)) w[f == std::string("request-trace-format") ? "trace_format" : f] = vm[f].as<std::string>();
  for (const char* f : {"requests", "users", "prompt", "output"})
    if (vm.count(f)) w[f] = vm[f].as<std::int64_t>();
  if (vm.count("max-concurrency")) w["max_concurrency"] = vm["max-concurrency"].as<std::int64_t>();
  if (vm.count("request-trace")) {
    w["arrival"] = "trace";
    w["trace"] = vm["request-trace"].as<std::string>();
  }
  if (vm.count("time-scale")) w["time_scale"] = vm["time-scale"].as<double>();
  if (vm.count("burstiness")) {
    w["burstiness"] = vm["burstiness"].as<double>();
    // vLLM's --burstiness shapes the gaps of its one arrival process; here that process is "gamma".
    if (!vm.count("arrival")) w["arrival"] = "gamma";
  }
  if (vm.count("seed")) w["seed"] = parse_seed(vm["seed"].as<std::string>(), "--seed");
  return w;
}

/// Another engine's name for one of the plan's keys (TensorRT-LLM's moe_tp_size for moe_tp): read into the
/// same member, refused beside the key it names. File only; the resolved scenario writes moesim's key.
template <class M>
void engine_name(ParamTable<PlanKeys>& t, const std::string& key, const std::string& ours, M PlanKeys::*member,
                 const std::string& engine) {
  t.custom(key, std::is_same_v<M, bool> ? "boolean" : "integer >= 1")
      .no_flag()
      .unit(std::is_same_v<M, bool> ? "" : "devices")
      .describe(engine + "'s name for plan." + ours)
      .reader([ours, member, engine](const Param<PlanKeys>& p, const json::Node& n, PlanKeys& k) {
        if (n.has(ours))
          throw n.error(p.key(), "is " + engine + "'s name for " + ours + ", which is given too; keep one");
        if constexpr (std::is_same_v<M, bool>)
          k.*member = n.boolean(p.key());
        else
          k.*member = n.integer(p.key(), 1);
      });
}

ParamTable<PlanKeys> plan_params() {
  using K = PlanKeys;
  ParamTable<K> t;
  t.field("tp", &K::tp)
      .min(1)
      .unit("devices")
      .describe("tensor-parallel devices per stage (default: every device used, over the pipeline stages)");
  t.field("pp", &K::pp).min(1).unit("stages").describe("pipeline stages");
  t.field("moe_tp", &K::moe_tp)
      .min(1)
      .unit("devices")
      .describe(
          "MoE tensor parallelism (moe_tp × moe_ep = tp; "
          "default tp)");
  t.field("moe_ep", &K::moe_ep).min(1).unit("devices").describe("MoE expert parallelism (default tp / moe_tp)");
  t.field("attention_dp", &K::attention_dp)
      .switch_flag("attention-dp", true,
                   "attention data-parallel, MoE expert-parallel with all-to-all (plan.attention_dp)")
      .describe("attention data-parallel inside the tp group, MoE expert-parallel with all-to-all");
  t.field("attention_replicated", &K::attention_replicated)
      .switch_flag("attention-replicated", true,
                   "attention on every device for every sequence, MoE expert-parallel, expert outputs exchanged "
                   "(seed 000's decentralised design; plan.attention_replicated)")
      .describe(
          "attention on every device for every sequence, MoE expert-parallel, expert outputs exchanged (seed "
          "000's decentralised design)");
  t.field("devices_per_node", &K::devices_per_node)
      .min(1)
      .unit("devices")
      .describe("use this many of each node's devices, the rest idle, e.g. 2 GPUs of an 8-GPU server (default: all)");
  t.field("nics_per_node", &K::nics_per_node)
      .min(1)
      .unit("NICs")
      .describe("NICs each node drives at once (default: the node profile's nics_per_node, else 1)");
  // TensorRT-LLM's names (tensorrt_llm/mapping.py Mapping: moe_tp_size, moe_ep_size; llm_args.py
  // enable_attention_dp) mean what moesim's do.
  engine_name(t, "moe_tp_size", "moe_tp", &K::moe_tp, "TensorRT-LLM");
  engine_name(t, "moe_ep_size", "moe_ep", &K::moe_ep, "TensorRT-LLM");
  engine_name(t, "enable_attention_dp", "attention_dp", &K::attention_dp, "TensorRT-LLM");
  // vLLM's (vllm/config/parallel.py ParallelConfig; `vllm serve --data-parallel-size N --enable-expert-parallel`).
  t.field("data_parallel_size", &K::data_parallel_size)
      .min(1)
      .unit("replicas")
      .describe(
          "vLLM's data_parallel_size: attention replicas, each over plan.tp devices (vLLM's "
          "tensor_parallel_size, default 1); above 1 it needs enable_expert_parallel and tp 1, as moesim runs "
          "attention data-parallel on single devices");
  t.field("enable_expert_parallel", &K::enable_expert_parallel)
      .switch_flag("enable-expert-parallel", true,
                   "vLLM's --enable-expert-parallel: the experts spread over the data_parallel_size × tp devices "
                   "instead of split tensor-parallel (plan.enable_expert_parallel)")
      .describe("vLLM's enable_expert_parallel: experts expert-parallel over data_parallel_size × tp devices");
  return t;
}

}  // namespace

const sim::ServingConfig& serving_defaults() {
  static const sim::ServingConfig defaults;
  return defaults;
}

sim::SchedulerConfig vllm_batch_defaults(const model::DeviceSpec& device, sim::SchedulerConfig base) {
  constexpr double kGiB = 1073741824.0;  // vLLM's GiB_bytes (vllm/utils/mem_constants.py)
  std::string name = device.name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const bool large =
      device.memory && device.memory->value.base() >= 70 * kGiB && name.find("a100") == std::string::npos;
  base.max_num_batched_tokens = large ? 8192 : 2048;
  base.max_num_seqs = large ? 1024 : 256;
  base.kind = sim::SchedulerKind::Chunked;
  return base;
}

double kv_cache_bytes(const std::string& name, double model_bytes) {
  // vllm/config/cache.py CacheDType: the KV cache's element type; "auto" is the model's.
  static const std::vector<std::pair<std::string, double>> kTypes = {
      {"bfloat16", 2}, {"float16", 2}, {"fp8", 1}, {"fp8_e4m3", 1}, {"fp8_e5m2", 1}, {"fp8_inc", 1}, {"int8", 1}};
  if (name == "auto") return model_bytes;
  std::vector<std::string> names{"auto"};
  for (const auto& [n, bytes] : kTypes) {
    if (n == name) return bytes;
    names.push_back(n);
  }
  if (name == "fp8_ds_mla")
    throw UserError(
        "fp8_ds_mla is DeepSeek's sparse-MLA cache layout (656 bytes per token), which moesim does not model; "
        "give fp8 for an 8-bit cache");
  throw UserError("\"" + name + "\" is not a KV-cache type" + text::did_you_mean(name, names) + " (one of " +
                  text::join(names) + ")");
}

const ParamTable<sim::SchedulerConfig>& scheduler_params() {
  using C = sim::SchedulerConfig;
  static const auto table = [] {
    ParamTable<C> t;
    t.choice("kind", &C::kind, sim::scheduler_by_name, [](sim::SchedulerKind k) { return sim::name_of(k); })
        .flag("scheduler")
        .describe(choices_in(sim::scheduler_kinds()));
    t.choice("capacity", &C::capacity, sim::capacity_policy_by_name,
             [](sim::CapacityPolicy k) { return sim::name_of(k); })
        .describe(
            "max-utilization (vLLM: preempt when the KV cache runs out) or guaranteed-no-evict "
            "(TensorRT-LLM: a request starts only with blocks for its whole prompt + output)");
    t.field("max_num_seqs", &C::max_num_seqs)
        .min(1)
        .describe(
            "sequences running at once, so per step (vLLM's max_num_seqs); with pipeline stages, those of every "
            "micro-batch in flight");
    t.field("max_batch_size", &C::max_batch_size)
        .min(1)
        .describe(
            "sequences per engine step, with pipeline stages one micro-batch (TensorRT-LLM's max_batch_size, whose "
            "engine keeps pp x max_batch_size requests active: give max_num_seqs that); none: max_num_seqs");
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
    t.custom("enable_chunked_prefill", "boolean")
        .describe(
            "vLLM's enable_chunked_prefill: true is kind chunked, false continuous (a whole prompt in one step); "
            "refused beside a kind it contradicts")
        .flag("enable-chunked-prefill")
        .reader([](const Param<C>& p, const json::Node& n, C& c) {
          const bool on = n.boolean(p.key());
          if (n.has("kind")) {
            if (registered(sim::scheduler_kinds(), c.kind, "scheduler").chunked_prefill != on)
              throw n.error(p.key(), std::string("is ") + (on ? "true" : "false") + " but kind " +
                                         std::string(sim::name_of(c.kind)) + (on ? " does not chunk" : " chunks") +
                                         " prompts; keep one of the two keys");
            return;
          }
          c.kind = on ? sim::SchedulerKind::Chunked : sim::SchedulerKind::Continuous;
        })
        // As flags --enable-chunked-prefill / --no-enable-chunked-prefill (vLLM's pair), written as the kind.
        .writer([](const Param<C>&, const C& c, nlohmann::json& out) { out["kind"] = sim::name_of(c.kind); })
        .written_if([](const C&) { return false; })
        .flag_adder([](const Param<C>&, po::options_description& d, const std::string&) {
          d.add_options()("enable-chunked-prefill",
                          "vLLM's --enable-chunked-prefill: the chunked scheduler (scheduler.kind chunked)")(
              "no-enable-chunked-prefill",
              "vLLM's --no-enable-chunked-prefill: whole prompts, one per step (scheduler.kind continuous)");
        })
        .flag_given_if([](const po::variables_map& vm) {
          return vm.count("enable-chunked-prefill") + vm.count("no-enable-chunked-prefill") > 0;
        })
        .flag_applier([](const Param<C>&, const po::variables_map& vm, C& c) {
          if (vm.count("enable-chunked-prefill") && vm.count("no-enable-chunked-prefill"))
            throw UserError("--enable-chunked-prefill and --no-enable-chunked-prefill are both given; keep one");
          c.kind = vm.count("enable-chunked-prefill") ? sim::SchedulerKind::Chunked : sim::SchedulerKind::Continuous;
        });
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

const ParamTable<ServeRequest>& serve_params() {
  static const auto table = [] {
    ParamTable<R> t;
    t.ignored("description", "free text, printed with the results");
    t.field("model", &R::model).describe("zoo id or config.json path");
    t.custom("model_overrides", "object")
        .no_flag()
        .describe("config.json keys laid over the model's before it is read, e.g. {\"num_experts_per_tok\": 4}")
        .reader([](const P& p, const json::Node& n, R& r) {
          const json::Node o = n.child(p.key());
          if (!o.raw().is_object())
            throw o.error("must be an object of config.json keys, e.g. {\"num_local_experts\": 4}");
          r.model_overrides = o.raw();
        });
    t.field("hw", &R::hw).describe("node profile");
    t.field("nic", &R::nic).describe("NIC profile between nodes (needed from 2 nodes)");
    t.field("nodes", &R::nodes).min(1).unit("nodes").describe("nodes");
    t.group("plan", &R::plan, plan_params(), "the parallel plan");
    t.field("precision", &R::precision)
        .describe(
            "weight precision; checkpoint: the format the model's config.json declares in quantization_config, "
            "else bf16");
    t.field("experts", &R::experts).default_text("fused").describe("expert execution");
    t.group("scheduler", &R::scheduler, scheduler_params(), "the engine's scheduler");
    t.field("scheduler_defaults", &R::scheduler_defaults)
        .describe(
            "where the scheduler keys not given come from: moesim (the defaults above) or vllm (vLLM's for `vllm "
            "serve` on the node's GPU: 8192 tokens per step and 1024 sequences from 70 GiB, A100s excepted, else "
            "2048 and 256; chunked)");
    t.custom("workload", "object")
        .describe("how requests arrive and how long they are (the workload section above)")
        .reader([](const P& p, const json::Node& n, R& r) { r.workload = n.child(p.key()).raw(); })
        .flag("arrival")
        .flag_adder([](const P&, po::options_description& d, const std::string&) { add_workload_flags(d); })
        .flag_given_if([](const po::variables_map& vm) {
          for (const char* f : kWorkloadFlags)
            if (vm.count(f)) return true;
          return false;
        })
        .flag_json(workload_flags_to_json);
    t.custom("slo", "object")
        .describe(
            "{\"ttft\": \"1s\", \"tpot\": \"50ms\", \"e2el\": \"20s\"}: goodput counts the requests meeting "
            "every bound given; none: no goodput")
        .flag("goodput")
        .reader([](const P& p, const json::Node& n, R& r) { r.slo = read_slo(n.child(p.key())); })
        .flag_adder([](const P&, po::options_description& d, const std::string&) {
          d.add_options()("goodput", po::value<std::vector<std::string>>()->multitoken(),
                          "SLO for goodput as vLLM's benchmark_serving takes it, in ms: e.g. --goodput ttft:1000 "
                          "tpot:50 e2el:20000 (slo.ttft, slo.tpot, slo.e2el); goodput is reported only with one");
        })
        .flag_json(
            [](const po::variables_map& vm) { return goodput_to_slo(vm["goodput"].as<std::vector<std::string>>()); });
    t.custom("percentiles", "list of numbers in (0, 100]")
        .default_text("90,99")
        .describe(
            "latency percentiles to report besides mean, median and std, e.g. [50, 90, 99] (vLLM's "
            "--metric-percentiles)")
        .reader([](const P& p, const json::Node& n, R& r) { r.percentiles = read_percentiles(n, p.key()); })
        .flag_value<std::string>()
        .flag_json([](const po::variables_map& vm) {
          return parse_numbers(vm["percentiles"].as<std::string>(), "--percentiles", "50,90,99");
        });
    t.field("trace", &R::trace)
        .no_flag()
        .describe("a routing trace (moesim trace --help) whose experts the batch's tokens choose");
    t.group("generate", &R::generate, generate_params(),
            "without a trace: routing drawn as `moesim trace gen` draws it, e.g. {\"zipf_s\": 1.1}", {},
            GroupFlags::None);
    streaming_key(t, &R::streaming).no_flag();
    t.field("activation_bytes", &R::activation_bytes)
        .no_flag()
        .unit("bytes")
        .describe("bytes per activation sent between devices (2: bf16)");
    t.field("kv_bytes", &R::kv_bytes)
        .no_flag()
        .unit("bytes")
        .describe("bytes per KV-cache element (2: bf16; 1 for an fp8 cache); kv_cache_dtype sets it by name");
    t.field("kv_cache_dtype", &R::kv_cache_dtype)
        .describe(
            "vLLM's kv_cache_dtype: auto (the model's type: kv_bytes), bfloat16, float16, fp8, fp8_e4m3, "
            "fp8_e5m2, fp8_inc or int8; refused beside a kv_bytes it contradicts");
    t.field("runtime", &R::runtime)
        .flag_help(runtime_help() + "; a fitted one gives every figure a range")
        .describe("the runtime profile on hw");
    t.custom("costs", "object")
        .no_flag()
        .describe(
            "the cost line's assumptions: {\"energy_price\": \"0.15USD/kWh\", \"amortisation\": \"3years\", "
            "\"utilisation\": \"50%\", \"source\": \"...\"}")
        .reader([](const P& p, const json::Node& n, R& r) {
          std::string source;
          r.costs = read_costs(n.child(p.key()), source);
        });
    return t;
  }();
  return table;
}

}  // namespace moesim::scenario
