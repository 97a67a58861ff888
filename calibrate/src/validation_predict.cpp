// `moesim validate --table`: each row mapped onto moesim's inputs and predicted by its kind's instrument
// (the analytic model for batch-1 decode, the serving simulator for the rest).

#include <algorithm>
#include <charconv>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/scenario/estimate.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/sim/serving.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

using scenario::run_serve;
using scenario::ServeRun;
using scenario::ServeScenario;

namespace validation_detail {

namespace {

/// The scheduler of a burst run: `kind`, at most `seqs` sequences and `step_tokens` tokens per step
/// (a prompt is prefilled in chunks of that many), the serving simulator's other defaults.
nlohmann::json burst_scheduler(const std::string& kind, std::int64_t seqs, std::int64_t step_tokens) {
  return {{"kind", kind},
          {"max_num_seqs", std::max<std::int64_t>(seqs, 1)},
          {"max_num_batched_tokens", std::max<std::int64_t>(step_tokens, 1)}};
}

/// The serve scenario of `requests` requests all sent at time 0 (a closed loop of as many users, no gap
/// between them), each `prompt` tokens in and `output` out, under `scheduler`: `p`'s model, precision and
/// KV-cache type on its row's devices of its node as tp × pp (the rest of the node idle).
ServeScenario burst_scenario(const ValidationPrediction& p, std::int64_t requests, std::int64_t prompt,
                             std::int64_t output, const nlohmann::json& scheduler) {
  const std::string& model = p.model;
  const std::string& hw = p.hw;
  const std::string& prec = p.precision;
  const std::int64_t devices = p.row.devices, pp = p.pp;
  ServeScenario sc;
  sc.doc = {{"description", "validation row"},
            {"model", model},
            {"hw", hw},
            {"plan", {{"tp", devices / pp}, {"pp", pp}, {"devices_per_node", devices}}},
            {"precision", prec},
            {"scheduler", scheduler},
            {"workload",
             {{"arrival", "closed-loop"},
              {"users", requests},
              {"requests", requests},
              {"user_interval", "0s"},
              {"prompt", prompt},
              {"output", output}}},
            {"generate", {{"tokens", 8192}, {"seed", 1}}}};
  if (!p.kv_cache_dtype.empty()) sc.doc["kv_cache_dtype"] = p.kv_cache_dtype;
  if (p.moe_ep > 1) sc.doc["plan"]["moe_ep"] = p.moe_ep;
  if (!p.routing_trace.empty()) {
    // The benchmark's recorded routing (mapping.json's routing_traces) in place of the generated one.
    sc.doc.erase("generate");
    sc.doc["trace"] = p.routing_trace;
  }
  sc.source = "validation";
  return sc;
}

/// Runs `sc` on `node` when given (hw's profile with a runtime's figures), else on hw's profile as shipped;
/// without `itl`, the inter-token gaps' distribution is not kept (sim::ServingConfig::itl_distribution).
ServeRun run_burst(const ServeScenario& sc, const model::NodeProfile* node, bool itl = true) {
  if (!node) return run_serve(sc);
  // A fit runs each row's configuration at every trial of the runtime's figures: each model's routing
  // trace is generated once per thread.
  thread_local scenario::TraceCache traces;
  // The prepared configuration points at its own copy of the node profile: the runtime's figures go there.
  const std::unique_ptr<scenario::PreparedServe> prepared = scenario::prepare_serve(sc, true, &traces);
  prepared->node = *node;
  prepared->config.itl_distribution = itl;
  prepared->run.result = sim::run_serving(prepared->config);
  return std::move(prepared->run);
}

/// One serve run of `users` requests arriving at once, each `prompt` tokens in and `output` out, the engine
/// stepping at most `step_tokens` tokens, with the `scheduler` kind.
ServeRun serve_burst(const ValidationPrediction& p, std::int64_t users, std::int64_t prompt, std::int64_t output,
                     std::int64_t step_tokens, const std::string& scheduler, const model::NodeProfile* node) {
  return run_burst(burst_scenario(p, users, prompt, output, burst_scheduler(scheduler, users, step_tokens)), node);
}

/// Simulated requests of a max-load run, per sequence the KV cache holds at once: trtllm-bench reports
/// the steady state of thousands of requests (perf-overview: "a larger number of messages were used to
/// guarantee that the system hit a steady state"); with every request alike, each wave of a full cache
/// repeats the one before, so the run is cut at this many waves to keep `validate --fit` near a minute on
/// two cores. Measured on the shipped table: 2 waves instead of 4 moved the 160 max-load predictions by
/// 0.6% on average, 11% at most (a 4-GPU Mixtral row).
constexpr std::int64_t kMaxLoadWaves = 2;

}  // namespace

/// A max-load row's output tokens/s: `p.requests` requests (at most kMaxLoadWaves × the concurrency the KV
/// cache and max_num_seqs admit) of the row's prompt and output queued at once under the runtime's
/// scheduler; total output tokens / the time from the first arrival to the last completion. With
/// `sequence_steps`, also the run's sequences summed over its engine steps per output token: the growth of
/// the time per output token with the runtime's sequence_overhead (s per sequence and step); with
/// `engine_steps`, its engine steps per output token: the growth with the runtime's step_overhead (s per step).
std::optional<double> max_load_throughput(const ValidationPrediction& p, const model::NodeProfile& node,
                                          double* sequence_steps, double* engine_steps) {
  const std::int64_t prompt = p.row.prompt.value_or(1), output = std::max<std::int64_t>(p.row.output.value_or(1), 1);
  ServeScenario sc = burst_scenario(p, 1, prompt, output, p.scheduler);
  const sim::MemoryPlan memory = scenario::serve_memory_plan(sc);
  const sim::SchedulerConfig scheduler = scenario::read_scheduler(json::Node(p.scheduler, "scheduler"));
  const std::int64_t per_request = (prompt + output + scheduler.block_size - 1) / scheduler.block_size;
  const std::int64_t concurrency = std::min(scheduler.max_num_seqs, memory.kv_blocks / per_request);
  if (concurrency < 1) return std::nullopt;
  const std::int64_t requests = std::min(p.requests, kMaxLoadWaves * concurrency);
  sc.doc["workload"]["users"] = requests;
  sc.doc["workload"]["requests"] = requests;
  const ServeRun run = run_burst(sc, &node, false);  // throughput alone: no inter-token gaps kept
  if (!(run.result.output_throughput > 0) || !(run.result.duration > 0)) return std::nullopt;
  if (sequence_steps) {
    double sum = 0;
    for (const sim::StepRecord& s : run.result.steps) sum += s.sequences;
    *sequence_steps = sum / (run.result.output_throughput * run.result.duration);
  }
  if (engine_steps)
    *engine_steps = static_cast<double>(run.result.steps.size()) / (run.result.output_throughput * run.result.duration);
  return run.result.output_throughput;
}

/// Batch-1 decode tokens/s of `p`'s configuration on `node`: the analytic model as `moesim estimate` runs
/// it on one node (every expert local, so E[active] = top-k), at the generated tokens' mean context with
/// the LM head (a runtime samples every token).
double decode_b1(const ValidationPrediction& p, const model::NodeProfile& node, std::optional<std::int64_t> context) {
  const model::Architecture arch = model::load_model(p.model);
  const model::Precision& prec = model::precision(p.precision);
  std::optional<model::NicProfile> intra;
  if (node.intra_node_link) intra = model::load_nic(*node.intra_node_link);
  model::DecodeScenario s;
  s.arch = &arch;
  s.node = &node;
  s.intra_link = intra ? &*intra : nullptr;
  s.weights = &prec;
  s.context = context.value_or(p.row.depth.value_or(0) + p.row.prompt.value_or(0) + p.row.output.value_or(0) / 2);
  s.include_lm_head = true;
  s.expected_active_experts = arch.is_moe() ? static_cast<double>(arch.top_k) : 0.0;
  s.max_experts_per_node = arch.routed_experts;
  return model::estimate_decode(s).tokens_per_second;
}

/// The row's figure on `node` by its kind's instrument: batch-1 decode by the analytic model, prefill
/// (TTFT of one request), batched prefill (the last of `batch` prompts sent at once) and batched decode (a
/// closed loop of `batch` users) by the serving simulator. A row whose runtime version predates the runtime's
/// matrix-vector expert kernel is priced without it.
std::optional<double> figure(const ValidationPrediction& p, const model::NodeProfile& node) {
  if (p.predates_expert_matvec && node.devices.expert_matvec_tokens) {
    model::NodeProfile before = node;
    before.devices.expert_matvec_tokens.reset();
    return figure(p, before);
  }
  const ValidationRow& r = p.row;
  const std::int64_t prompt = r.prompt.value_or(0), output = r.output.value_or(0), depth = r.depth.value_or(0);
  if (p.kind == "decode b1") return decode_b1(p, node);
  if (p.kind == "max-load") return max_load_throughput(p, node);
  if (p.kind == "prefill b1") {
    // The runtime's prompt chunk: every chunk reads the weights (all of a MoE layer's touched experts) again.
    const ServeRun run =
        serve_burst(p, 1, std::max<std::int64_t>(depth + prompt, 1), 1, p.step_tokens, "chunked", &node);
    double seconds = run.result.ttft.median;
    if (depth > 0) {
      // llama-bench's pp at n_depth times the prompt's chunks after `depth` tokens are in the cache: the
      // chunks are computed in order, so that is the prefill of depth + prompt less the prefill of depth
      // (for chunk-aligned depths, as llama-bench's are: exact).
      const ServeRun before = serve_burst(p, 1, depth, 1, p.step_tokens, "chunked", &node);
      seconds -= before.result.ttft.median;
    }
    if (seconds > 0) return static_cast<double>(prompt) / seconds;
    return std::nullopt;
  }
  if (p.kind == "prefill batched") {
    // llama-batched-bench's S_PP: the B prompts (every sequence its own, is_pp_shared off) go in as one
    // batch, decoded in micro-batches of n_ubatch tokens that pack several sequences' prompts
    // (tools/batched-bench/batched-bench.cpp: decode_helper over n_batch views, each split by
    // llama_decode into n_ubatch micro-batches), and S_PP is B·PP over the time until the last prompt is
    // in. The chunked scheduler with a token budget of n_ubatch packs the prompts alike; all arrive at
    // once, so that time is the last request's TTFT.
    const ServeRun run =
        serve_burst(p, *r.batch, std::max<std::int64_t>(prompt, 1), 1, p.step_tokens, "chunked", &node);
    if (run.result.ttft.max > 0) return static_cast<double>(*r.batch * prompt) / run.result.ttft.max;
    return std::nullopt;
  }
  // llama-batched-bench's S_TG (and a decode throughput in general) times the decode steps alone, all
  // `batch` sequences in each: the median gap between tokens is one such step. (TPOT would also count the
  // steps that prefill the other sequences' prompts.)
  // Every prompt prefilled first (vLLM's continuous batching gives prefills the step; the step holds all
  // of them), then decode steps of all `batch` sequences, as llama-batched-bench times them apart.
  const std::int64_t context = std::max<std::int64_t>(depth + prompt, 1);
  const ServeRun run =
      serve_burst(p, *r.batch, context, std::max<std::int64_t>(output, 2), context * *r.batch, "continuous", &node);
  if (run.result.itl.median > 0) return static_cast<double>(*r.batch) / run.result.itl.median;
  return std::nullopt;
}

namespace {

/// The number after `tag` in `text` ("(6918)" -> 6918 after "(", "#20586" after "#"), if digits follow it.
std::optional<std::int64_t> number_after(const std::string& text, std::string_view tag) {
  const auto at = text.find(tag);
  if (at == std::string::npos) return std::nullopt;
  const char* first = text.data() + at + tag.size();
  std::int64_t v = 0;
  const auto [q, ec] = std::from_chars(first, text.data() + text.size(), v);
  if (ec != std::errc() || q == first) return std::nullopt;
  return v;
}

}  // namespace

bool predates(const Mapping::MatvecPredates& d, const std::string& version) {
  // llama.cpp prints its build as "<commit> (<build number>)"; a PR's branch is named "PR #<n> branch".
  if (const auto pr = number_after(version, "PR #")) return *pr < d.prs_before;
  if (const auto build = number_after(version, "(")) return *build <= d.builds_up_to;
  if (version.size() > 1 && version[0] == 'b')
    if (const auto build = number_after(version, "b")) return *build <= d.builds_up_to;
  return false;
}

namespace {

/// The tp × pp of a max-load row's locator ("TP2,PP2", "TP4, PP2"): nullopt where it names no PP, and
/// {0, 0} where it names PP in a way not read here.
std::optional<std::pair<std::int64_t, std::int64_t>> locator_tp_pp(const std::string& locator) {
  const auto at = locator.find("PP");
  if (at == std::string::npos) return std::nullopt;
  const auto number_after = [&](std::size_t from) -> std::int64_t {
    std::size_t i = from;
    while (i < locator.size() && locator[i] == ' ') ++i;
    std::int64_t v = 0;
    const auto [q, ec] = std::from_chars(locator.data() + i, locator.data() + locator.size(), v);
    return ec == std::errc() && q != locator.data() + i ? v : 0;
  };
  const auto tp_at = locator.rfind("TP", at);
  if (tp_at == std::string::npos) return std::make_pair(std::int64_t{0}, std::int64_t{0});
  return std::make_pair(number_after(tp_at + 2), number_after(at + 2));
}

/// A max-load row's benchmark setup from its runtime's mapping: the scheduler, the dataset's request count,
/// the pipeline stages. False (with p.skipped) where the mapping or the locator cannot say.
bool max_load_setup(ValidationPrediction& p, const Mapping::MaxLoad& ml) {
  const auto n = ml.requests.value.find({p.row.prompt.value_or(0), p.row.output.value_or(0)});
  if (n == ml.requests.value.end()) {
    p.skipped = "max-load: no request count for this prompt/output in mapping.json's runtimes." + p.row.runtime +
                ".max_load_requests";
    return false;
  }
  p.requests = n->second;
  p.scheduler = ml.scheduler.value;
  if (const auto tp_pp = locator_tp_pp(p.row.locator)) {
    if (tp_pp->first < 1 || tp_pp->second < 1 || tp_pp->first * tp_pp->second != p.row.devices) {
      p.skipped = "max-load: the locator names pipeline stages but no TPn,PPm whose product is the row's devices";
      return false;
    }
    p.pp = tp_pp->second;
  }
  if (ml.batch_limits) {
    // The benchmark's own limits for this row's model, GPUs and dataset (trtllm_bench_limits): per pipeline
    // micro-batch (the scheduler's max_batch_size), and max_num_seqs counts the sequences of all of them.
    const model::Architecture a = model::load_model(p.model);
    const model::NodeProfile node = model::load_node(p.hw);
    if (!node.devices.memory) {
      p.skipped = "max-load: " + p.hw + " gives no devices.memory, which trtllm-bench's batch limits need";
      return false;
    }
    TrtllmBenchInputs in;
    in.arch = &a;
    in.weights = &model::precision(p.precision);
    if (!p.kv_cache_dtype.empty()) in.kv_element_bytes = model::precision(p.kv_cache_dtype).bits_per_weight / 8.0;
    in.device_memory_gib = node.devices.memory->value.base() / (1024.0 * 1024.0 * 1024.0);
    in.pp = p.pp;
    in.tp = std::max<std::int64_t>(p.row.devices / p.pp, 1);
    in.isl = std::max<std::int64_t>(p.row.prompt.value_or(1), 1);
    in.osl = std::max<std::int64_t>(p.row.output.value_or(1), 1);
    if (p.scheduler.contains("gpu_memory_utilization"))
      in.kv_cache_free_gpu_mem_fraction = p.scheduler["gpu_memory_utilization"].get<double>();
    const TrtllmBenchLimits l = trtllm_bench_limits(in);
    if (l.max_batch_size < 1) {
      p.skipped = "max-load: trtllm-bench would refuse this run (its estimate of the KV cache holds no request)";
      return false;
    }
    p.scheduler["max_num_seqs"] = l.max_batch_size * p.pp;
    p.scheduler["max_batch_size"] = l.max_batch_size;
    p.scheduler["max_num_batched_tokens"] = l.max_num_tokens;
  }
  return true;
}

}  // namespace

/// The hand-written runtime profile the mapping lays under `runtime` on `hw` (Mapping::base_runtime), if
/// that node has one.
std::optional<model::RuntimeProfile> base_runtime(const Mapping& m, const std::string& runtime, const std::string& hw) {
  const auto it = m.base_runtime.find(runtime);
  if (it == m.base_runtime.end()) return std::nullopt;
  for (const auto& r : model::builtin_runtimes())
    if (r.runtime == it->second.value && r.hw == hw) return r;
  return std::nullopt;
}

/// The node profile `runtime`'s rows on `hw` are predicted on before any fit, and fitted over: the node
/// with the mapping's base runtime, where it has one; else the node alone. With `measured_device`, the
/// node's device figures come from that measured profile first (model::with_measured_device).
model::NodeProfile base_node(const Mapping& m, const std::string& runtime, const std::string& hw,
                             const std::string* measured_device) {
  model::NodeProfile node = model::load_node(hw);
  if (measured_device) node = model::with_measured_device(node, model::load_node(*measured_device));
  if (const auto b = base_runtime(m, runtime, hw)) node = model::apply_runtime(node, *b);
  return node;
}

void predict(ValidationPrediction& p, const Mapping& m) {
  const ValidationRow& r = p.row;
  if (!r.excluded.empty()) {
    p.skipped = "excluded by the table (column excluded): " + r.excluded;
    return;
  }
  const bool b1 = r.batch && *r.batch == 1;
  if (r.metric == "decode_tokens_per_s" && b1) {
    p.kind = "decode b1";
  } else if (r.metric == "prefill_tokens_per_s" && b1) {
    p.kind = "prefill b1";
  } else if (r.metric == "decode_tokens_per_s" && r.batch && *r.batch > 1) {
    p.kind = "decode batched";
  } else if (r.metric == "prefill_tokens_per_s" && r.batch && *r.batch > 1 && !r.depth.value_or(0)) {
    p.kind = "prefill batched";
  } else if (r.metric == "output_throughput_tokens_per_s" && !r.batch && m.max_load.count(r.runtime)) {
    p.kind = "max-load";
  } else {
    p.skipped = "max-load serving and latency rows need the runtime's scheduler limits (not expressed yet)";
    return;
  }
  const auto hw = std::find_if(m.hardware.begin(), m.hardware.end(), [&](const Mapping::Hw& h) {
    return h.hardware == r.hardware && h.devices == r.devices;
  });
  if (hw == m.hardware.end()) {
    p.kind.clear();
    p.skipped = "no node profile for this hardware and device count in mapping.json";
    return;
  }
  // "FORMAT @ RUNTIME" first: one format name stores differently per runtime (gpt-oss "MXFP4" is
  // mxfp4/bf16 as released for vLLM and SGLang, mxfp4/q8_0 in ggml-org's GGUF for llama.cpp).
  auto fmt = m.formats.find(r.format + " @ " + r.runtime);
  if (fmt == m.formats.end()) fmt = m.formats.find(r.format);
  if (fmt == m.formats.end()) {
    p.kind.clear();
    p.skipped = "no precision for this format in mapping.json";
    return;
  }
  static const std::vector<std::string> zoo = model::zoo_ids();
  const auto alias = m.models.find(r.model);
  p.model = alias != m.models.end() ? alias->second : r.model;
  if (std::find(zoo.begin(), zoo.end(), p.model) == zoo.end()) {
    p.kind.clear();
    p.model.clear();
    p.skipped = "model not in the zoo (nor mapped onto one of the same shapes in mapping.json)";
    return;
  }
  p.hw = hw->hw;
  p.precision = fmt->second;
  if (auto rules = m.kv_cache_dtype.find(r.runtime); rules != m.kv_cache_dtype.end()) {
    const auto matches = [&](const Mapping::KvRule& k) {
      return (!k.hf_repo || *k.hf_repo == r.hf_repo) &&
             (!k.runtime_version || *k.runtime_version == r.runtime_version) && (!k.format || *k.format == r.format);
    };
    const auto rule = std::find_if(rules->second.begin(), rules->second.end(), matches);
    if (rule != rules->second.end()) p.kv_cache_dtype = rule->dtype;
  }
  for (const auto& t : m.routing_traces) {
    const auto same = [](const std::optional<std::string>& rule, const std::string& row) {
      return !rule || *rule == row;
    };
    if (t.model == p.model && same(t.runtime, r.runtime) && same(t.runtime_version, r.runtime_version) &&
        same(t.hf_repo, r.hf_repo) && same(t.format, r.format)) {
      p.routing_trace = t.trace;
      p.routing_trace_source = t.source;
      break;
    }
  }
  if (auto d = m.expert_matvec_predates.find(r.runtime); d != m.expert_matvec_predates.end())
    p.predates_expert_matvec = predates(d->second, r.runtime_version);
  if (p.kind == "max-load" && !max_load_setup(p, m.max_load.at(r.runtime))) {
    p.kind.clear();
    return;
  }
  if (r.step_tokens)
    p.step_tokens = *r.step_tokens;  // the run's own setting, as its source printed it
  else if (auto c = m.prompt_chunk.find(r.runtime); c != m.prompt_chunk.end())
    p.step_tokens = c->second.value;
  try {
    if (p.kind != "decode b1") {
      // Prefill, batched decode and max load spend part of their time computing: on a profile without the
      // compute path's peak the cost model leaves that time out (compute_path), and the figure would be the
      // memory-bound one, up to tens of times too fast. Such a row is not expressed, with the fix.
      const cost::ComputePath path = cost::compute_path(base_node(m, r.runtime, p.hw), model::precision(p.precision));
      if (!path.has_peak) {
        p.kind.clear();
        p.skipped = p.hw + " gives no devices.peak_flops." + path.dtype +
                    ": a prefill or batched figure needs its compute time (add a cited or measured peak to the node "
                    "profile)";
        return;
      }
    }
    p.instrument = p.kind == "decode b1" ? "analytic" : "serving-sim";
    p.predicted = figure(p, base_node(m, r.runtime, p.hw));
    if (!p.predicted) p.skipped = "the instrument gave no figure";
    if (auto md = m.measured_device.find(p.hw); p.predicted && md != m.measured_device.end()) {
      p.measured_device = md->second.value;
      p.measured_predicted = figure(p, base_node(m, r.runtime, p.hw, &md->second.value));
    }
  } catch (const UserError& e) {
    // A configuration moesim refuses (the model does not fit, a missing figure) is a finding, not a crash.
    p.skipped = std::string("refused: ") + e.what();
  }
}

}  // namespace validation_detail

}  // namespace moesim::calibrate
