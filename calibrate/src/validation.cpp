// moesim against the public validation table (reports/validation.hpp).

#include "moesim/calibrate/validation.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/csv.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/calibrate/bench_import.hpp"
#include "moesim/calibrate/lsq.hpp"
#include "moesim/reports/estimate.hpp"
#include "moesim/reports/json_out.hpp"
#include "moesim/reports/plot.hpp"
#include "moesim/reports/serve.hpp"
#include "moesim/reports/table.hpp"
#include "moesim/sim/serving.hpp"

namespace moesim::calibrate {

using reports::csv_field;
using reports::fixed;
using reports::metric;
using reports::run_serve;
using reports::ServeRun;
using reports::ServeScenario;
using reports::Table;


namespace {

/// The table's words for hardware and formats, as moesim inputs (DIR/mapping.json).
struct Mapping {
  struct Hw {
    std::string hardware;
    std::int64_t devices = 1;
    std::string hw;
  };
  std::vector<Hw> hardware;
  std::map<std::string, std::string> formats;
  std::map<std::string, std::string> models;  ///< a checkpoint's repo id -> the zoo entry of the same shapes
  /// runtime -> the low-precision tensor-core types its matmuls use (model::RuntimeProfile::native_dtypes)
  std::map<std::string, model::Sourced<std::vector<std::string>>> native_dtypes;
  /// runtime -> how it stores a checkpoint's format (model::RuntimeProfile::checkpoint_formats)
  std::map<std::string, model::Sourced<std::map<std::string, std::string>>> checkpoint_formats;
  /// runtime -> the tokens it prefills per step (llama.cpp's n_ubatch); absent: the serving simulator's 2048
  std::map<std::string, model::Sourced<std::int64_t>> prompt_chunk;
  /// runtime -> how its max-load benchmark ran: the scheduler (a serve scenario's "scheduler" object) and
  /// the requests of each (prompt, output) dataset. A runtime without one has no max-load rows expressed.
  struct MaxLoad {
    model::Sourced<nlohmann::json> scheduler;
    model::Sourced<std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t>> requests;
  };
  std::map<std::string, MaxLoad> max_load;
  /// runtime -> the name of a hand-written runtime profile laid over the node before the fit, on the nodes
  /// that have one (hwprofiles/runtimes/<name>@<hw>.json): the rows' figure before the fit, and the
  /// figures the class's rows do not fit (a max-load class's kernel overhead) come from it.
  std::map<std::string, model::Sourced<std::string>> base_runtime;
};

/// A runtime's "scheduler" item: {"value": a serve scenario's "scheduler" object, "source"}, checked as
/// `moesim serve` reads it (reports::read_scheduler).
model::Sourced<nlohmann::json> parse_runtime_scheduler(const json::Node& item) {
  item.expect_only({"value", "source"});
  const json::Node v = item.child("value");
  (void)reports::read_scheduler(v);
  return {v.raw(), item.string("source")};
}

/// A runtime's "max_load_requests" item: {"value": [{"prompt", "output", "requests"}, ...], "source"}, one
/// entry per (prompt, output).
model::Sourced<std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t>> parse_max_load_requests(
    const json::Node& item) {
  item.expect_only({"value", "source"});
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> out;
  for (const auto& e : item.elements("value")) {
    e.expect_only({"prompt", "output", "requests"});
    const std::pair<std::int64_t, std::int64_t> key{e.integer("prompt", 1), e.integer("output", 1)};
    if (!out.emplace(key, e.integer("requests", 1)).second)
      throw e.error("prompt " + std::to_string(key.first) + " / output " + std::to_string(key.second) +
                    " is listed twice; keep one entry per dataset");
  }
  if (out.empty()) throw item.error("value", "lists no datasets; give [{\"prompt\", \"output\", \"requests\"}, ...]");
  return {out, item.string("source")};
}

Mapping read_mapping(const std::filesystem::path& path) {
  const nlohmann::json doc = json::load_file(path);
  const json::Node root(doc, path.string());
  root.expect_only({"description", "hardware", "formats", "models", "model_notes", "format_notes", "runtimes"});
  Mapping m;
  if (root.has("hardware")) {
    for (const auto& h : root.elements("hardware")) {
      h.expect_only({"hardware", "devices", "hw", "note"});
      const std::string id = h.string("hw");
      h.resolving("hw", [&] { return model::load_node(id); });
      m.hardware.push_back({h.string("hardware"), h.integer("devices", 1), id});
    }
  }
  if (auto f = root.optional_child("formats")) {
    if (!f->raw().is_object()) throw f->error("is not an object of {\"table's format\": \"precision\"}");
    for (const auto& [k, v] : f->raw().items()) {
      if (!v.is_string()) throw f->error(k, "is not a precision name (see `moesim estimate --help`)");
      const std::string name = v.get<std::string>();
      f->resolving(k, [&] { return &model::precision(name); });
      m.formats[k] = name;
    }
  }
  if (auto f = root.optional_child("runtimes")) {
    if (!f->raw().is_object()) throw f->error("is not an object of {\"runtime\": {\"native_dtypes\": ...}}");
    for (const auto& item : f->raw().items()) {
      const std::string& k = item.key();
      const json::Node rt = f->child(k);
      rt.expect_only(
          {"native_dtypes", "prompt_chunk", "checkpoint_formats", "scheduler", "max_load_requests", "base_runtime"});
      if (rt.has("scheduler") != rt.has("max_load_requests"))
        throw rt.error("gives one of scheduler and max_load_requests; a max-load benchmark needs both");
      if (rt.has("scheduler"))
        m.max_load[k] = {parse_runtime_scheduler(rt.child("scheduler")),
                         parse_max_load_requests(rt.child("max_load_requests"))};
      if (rt.has("checkpoint_formats"))
        m.checkpoint_formats[k] = model::parse_checkpoint_formats(rt.child("checkpoint_formats"));
      if (rt.has("native_dtypes")) m.native_dtypes[k] = model::parse_native_dtypes(rt.child("native_dtypes"));
      if (auto c = rt.optional_child("prompt_chunk")) {
        c->expect_only({"value", "source"});
        m.prompt_chunk[k] = {c->integer("value", 1), c->string("source")};
      }
      if (auto b = rt.optional_child("base_runtime")) {
        b->expect_only({"value", "source"});
        const std::string name = b->string("value");
        std::vector<std::string> names;
        for (const auto& r : model::builtin_runtimes())
          if (std::find(names.begin(), names.end(), r.runtime) == names.end()) names.push_back(r.runtime);
        if (std::find(names.begin(), names.end(), name) == names.end())
          throw b->error("value", "'" + name + "' is no built-in runtime" + text::did_you_mean(name, names) +
                                      "; name one of " + text::join(names) + " (`moesim hw` lists them)");
        m.base_runtime[k] = {name, b->string("source")};
      }
    }
  }
  if (auto f = root.optional_child("models")) {
    if (!f->raw().is_object()) throw f->error("is not an object of {\"repo id\": \"zoo id\"}");
    for (const auto& [k, v] : f->raw().items()) {
      if (!v.is_string()) throw f->error(k, "is not a zoo id (see `moesim models`)");
      const std::string id = v.get<std::string>();
      f->resolving(k, [&] { return model::load_model(id); });
      m.models[k] = id;
    }
  }
  return m;
}

std::optional<std::int64_t> optional_count(const std::string& text, const std::string& where) {
  if (text.empty()) return std::nullopt;
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0 || v > (std::int64_t{1} << 40))
    throw UserError(where + ": '" + text + "' is not a whole number >= 0");
  return v;
}

std::vector<ValidationRow> read_rows(const std::filesystem::path& path) {
  const csv::Table t = csv::read_table(path);
  const auto col = [&](const char* name) { return t.column(name); };
  const std::size_t id = col("id"), role = col("role"), model = col("model"), format = col("format"),
                    hardware = col("hardware"), family = col("hw_family"), devices = col("devices"),
                    runtime = col("runtime"), batch = col("batch"), prompt = col("prompt_tokens"),
                    output = col("output_tokens"), depth = col("context_depth"), metric = col("metric"),
                    value = col("value"), unit = col("unit"), url = col("source_url");
  const auto locator_at = std::find(t.header.begin(), t.header.end(), "locator");
  const auto step_at = std::find(t.header.begin(), t.header.end(), "step_tokens");
  std::vector<ValidationRow> out;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const auto& c = t.rows[i];
    const std::string where = path.string() + ": line " + std::to_string(t.line_of[i]);
    ValidationRow r;
    r.id = c[id];
    r.role = c[role];
    if (r.role != "calibration" && r.role != "prediction")
      throw UserError(where + ": role '" + r.role + "' is not calibration or prediction");
    r.model = c[model];
    r.format = c[format];
    r.hardware = c[hardware];
    r.hw_family = c[family];
    r.runtime = c[runtime];
    r.metric = c[metric];
    r.unit = c[unit];
    r.source_url = c[url];
    if (locator_at != t.header.end()) r.locator = c[static_cast<std::size_t>(locator_at - t.header.begin())];
    r.devices = optional_count(c[devices], where + ", devices").value_or(1);
    r.batch = optional_count(c[batch], where + ", batch");
    r.prompt = optional_count(c[prompt], where + ", prompt_tokens");
    r.output = optional_count(c[output], where + ", output_tokens");
    r.depth = optional_count(c[depth], where + ", context_depth");
    if (step_at != t.header.end()) {
      r.step_tokens = optional_count(c[static_cast<std::size_t>(step_at - t.header.begin())], where + ", step_tokens");
      if (r.step_tokens && *r.step_tokens < 1)
        throw UserError(where + ", step_tokens: must be >= 1 (the tokens per forward pass, e.g. llama.cpp's n_ubatch), "
                                "or empty for the runtime's default");
    }
    double v = 0;
    const std::string& vt = c[value];
    const auto [p, ec] = std::from_chars(vt.data(), vt.data() + vt.size(), v);
    if (ec != std::errc() || p != vt.data() + vt.size() || !(v > 0) || !std::isfinite(v))
      throw UserError(where + ", value: '" + vt + "' is not a number > 0");
    r.measured = v;
    r.line = t.line_of[i];
    if (r.source_url.empty()) throw UserError(where + ", source_url: empty; every measurement names its source");
    out.push_back(std::move(r));
  }
  return out;
}

/// The scheduler of a burst run: `kind`, at most `seqs` sequences and `step_tokens` tokens per step
/// (a prompt is prefilled in chunks of that many), the serving simulator's other defaults.
nlohmann::json burst_scheduler(const std::string& kind, std::int64_t seqs, std::int64_t step_tokens) {
  return {{"kind", kind},
          {"max_num_seqs", std::max<std::int64_t>(seqs, 1)},
          {"max_num_batched_tokens", std::max<std::int64_t>(step_tokens, 1)}};
}

/// The serve scenario of `requests` requests all sent at time 0 (a closed loop of as many users, no gap
/// between them), each `prompt` tokens in and `output` out, under `scheduler`, on `devices` devices of
/// hw's node as tp × pp (the rest of the node idle).
ServeScenario burst_scenario(const std::string& model, const std::string& hw, std::int64_t devices, std::int64_t pp,
                             const std::string& prec, std::int64_t requests, std::int64_t prompt,
                             std::int64_t output, const nlohmann::json& scheduler) {
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
  sc.source = "validation";
  return sc;
}

/// Runs `sc` on `node` when given (hw's profile with a runtime's figures), else on hw's profile as shipped.
ServeRun run_burst(const ServeScenario& sc, const model::NodeProfile* node) {
  if (!node) return run_serve(sc);
  // A fit runs each row's configuration at every trial of the runtime's figures: each model's routing
  // trace is generated once per thread.
  thread_local reports::TraceCache traces;
  // The prepared configuration points at its own copy of the node profile: the runtime's figures go there.
  const std::unique_ptr<reports::PreparedServe> prepared = reports::prepare_serve(sc, true, &traces);
  prepared->node = *node;
  prepared->run.result = sim::run_serving(prepared->config);
  return std::move(prepared->run);
}

/// One serve run of `users` requests arriving at once, each `prompt` tokens in and `output` out, the engine
/// stepping at most `step_tokens` tokens, with the `scheduler` kind.
ServeRun serve_burst(const std::string& model, const std::string& hw, std::int64_t devices, const std::string& prec,
                     std::int64_t users, std::int64_t prompt, std::int64_t output, std::int64_t step_tokens,
                     const std::string& scheduler, const model::NodeProfile* node = nullptr) {
  return run_burst(burst_scenario(model, hw, devices, 1, prec, users, prompt, output,
                                  burst_scheduler(scheduler, users, step_tokens)),
                   node);
}

/// Simulated requests of a max-load run, per sequence the KV cache holds at once: trtllm-bench reports
/// the steady state of thousands of requests (perf-overview: "a larger number of messages were used to
/// guarantee that the system hit a steady state"); with every request alike, each wave of a full cache
/// repeats the one before, so the run is cut at this many waves to keep `validate --fit` near a minute on
/// two cores. Measured on the shipped table: 2 waves instead of 4 moved the 160 max-load predictions by
/// 0.6% on average, 11% at most (a 4-GPU Mixtral row).
constexpr std::int64_t kMaxLoadWaves = 2;

/// A max-load row's output tokens/s: `p.requests` requests (at most kMaxLoadWaves × the concurrency the KV
/// cache and max_num_seqs admit) of the row's prompt and output queued at once under the runtime's
/// scheduler; total output tokens / the time from the first arrival to the last completion.
std::optional<double> max_load_throughput(const ValidationPrediction& p, const model::NodeProfile& node) {
  const std::int64_t prompt = p.row.prompt.value_or(1), output = std::max<std::int64_t>(p.row.output.value_or(1), 1);
  ServeScenario sc = burst_scenario(p.model, p.hw, p.row.devices, p.pp, p.precision, 1, prompt, output, p.scheduler);
  const sim::MemoryPlan memory = reports::serve_memory_plan(sc);
  const sim::SchedulerConfig scheduler = reports::read_scheduler(json::Node(p.scheduler, "scheduler"));
  const std::int64_t per_request = (prompt + output + scheduler.block_size - 1) / scheduler.block_size;
  const std::int64_t concurrency = std::min(scheduler.max_num_seqs, memory.kv_blocks / per_request);
  if (concurrency < 1) return std::nullopt;
  const std::int64_t requests = std::min(p.requests, kMaxLoadWaves * concurrency);
  sc.doc["workload"]["users"] = requests;
  sc.doc["workload"]["requests"] = requests;
  const ServeRun run = run_burst(sc, &node);
  if (run.result.output_throughput > 0) return run.result.output_throughput;
  return std::nullopt;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Linear interpolation between order statistics (the "type 7" rule of R and NumPy's default).
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

/// Batch-1 decode tokens/s of `p`'s configuration on `node`: the analytic model as `moesim estimate` runs
/// it on one node (every expert local, so E[active] = top-k), at the generated tokens' mean context with
/// the LM head (a runtime samples every token).
double decode_b1(const ValidationPrediction& p, const model::NodeProfile& node,
                 std::optional<std::int64_t> context = std::nullopt) {
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
/// (TTFT of one request) and batched decode (a closed loop of `batch` users) by the serving simulator.
std::optional<double> figure(const ValidationPrediction& p, const model::NodeProfile& node) {
  const ValidationRow& r = p.row;
  const std::int64_t prompt = r.prompt.value_or(0), output = r.output.value_or(0), depth = r.depth.value_or(0);
  if (p.kind == "decode b1") return decode_b1(p, node);
  if (p.kind == "max-load") return max_load_throughput(p, node);
  if (p.kind == "prefill b1") {
    // The runtime's prompt chunk: every chunk reads the weights (all of a MoE layer's touched experts) again.
    const ServeRun run = serve_burst(p.model, p.hw, r.devices, p.precision, 1, std::max<std::int64_t>(depth + prompt, 1),
                                     1, p.step_tokens, "chunked", &node);
    double seconds = run.result.ttft.median;
    if (depth > 0) {
      // llama-bench's pp at n_depth times the prompt's chunks after `depth` tokens are in the cache: the
      // chunks are computed in order, so that is the prefill of depth + prompt less the prefill of depth
      // (for chunk-aligned depths, as llama-bench's are: exact).
      const ServeRun before =
          serve_burst(p.model, p.hw, r.devices, p.precision, 1, depth, 1, p.step_tokens, "chunked", &node);
      seconds -= before.result.ttft.median;
    }
    if (seconds > 0) return static_cast<double>(prompt) / seconds;
    return std::nullopt;
  }
  // llama-batched-bench's S_TG (and a decode throughput in general) times the decode steps alone, all
  // `batch` sequences in each: the median gap between tokens is one such step. (TPOT would also count the
  // steps that prefill the other sequences' prompts.)
  // Every prompt prefilled first (vLLM's continuous batching gives prefills the step; the step holds all
  // of them), then decode steps of all `batch` sequences, as llama-batched-bench times them apart.
  const std::int64_t context = std::max<std::int64_t>(depth + prompt, 1);
  const ServeRun run = serve_burst(p.model, p.hw, r.devices, p.precision, *r.batch, context,
                                   std::max<std::int64_t>(output, 2), context * *r.batch, "continuous", &node);
  if (run.result.itl.median > 0) return static_cast<double>(*r.batch) / run.result.itl.median;
  return std::nullopt;
}

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
  return true;
}

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
/// with the mapping's base runtime, where it has one; else the node alone.
model::NodeProfile base_node(const Mapping& m, const std::string& runtime, const std::string& hw) {
  model::NodeProfile node = model::load_node(hw);
  if (const auto b = base_runtime(m, runtime, hw)) node = model::apply_runtime(node, *b);
  return node;
}

void predict(ValidationPrediction& p, const Mapping& m) {
  const ValidationRow& r = p.row;
  const bool b1 = r.batch && *r.batch == 1;
  if (r.metric == "decode_tokens_per_s" && b1) {
    p.kind = "decode b1";
  } else if (r.metric == "prefill_tokens_per_s" && b1) {
    p.kind = "prefill b1";
  } else if (r.metric == "decode_tokens_per_s" && r.batch && *r.batch > 1) {
    p.kind = "decode batched";
  } else if (r.metric == "output_throughput_tokens_per_s" && !r.batch && m.max_load.count(r.runtime)) {
    p.kind = "max-load";
  } else {
    p.skipped = "max-load serving and latency rows need the runtime's scheduler limits (not expressed yet)";
    return;
  }
  const auto hw = std::find_if(m.hardware.begin(), m.hardware.end(),
                               [&](const Mapping::Hw& h) { return h.hardware == r.hardware && h.devices == r.devices; });
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
  if (p.kind == "max-load" && !max_load_setup(p, m.max_load.at(r.runtime))) {
    p.kind.clear();
    return;
  }
  if (r.step_tokens)
    p.step_tokens = *r.step_tokens;  // the run's own setting, as its source printed it
  else if (auto c = m.prompt_chunk.find(r.runtime); c != m.prompt_chunk.end())
    p.step_tokens = c->second.value;
  try {
    p.instrument = p.kind == "decode b1" ? "analytic" : "serving-sim";
    p.predicted = figure(p, base_node(m, r.runtime, p.hw));
    if (!p.predicted) p.skipped = "the instrument gave no figure";
  } catch (const UserError& e) {
    // A configuration moesim refuses (the model does not fit, a missing figure) is a finding, not a crash.
    p.skipped = std::string("refused: ") + e.what();
  }
}

/// A node profile whose memory-bound kernels run at `efficiency` of its bandwidth and whose kernels each
/// cost `kernel_overhead` on top, with no other overhead: the two figures a runtime adds to the hardware
/// at batch-1 decode (a runtime profile's, issue 20; here fitted per hardware and runtime).
model::NodeProfile with_runtime(model::NodeProfile node, double efficiency, double kernel_overhead,
                                const std::string& source) {
  model::EfficiencyTable t;
  t.source = source;
  t.memory.push_back({units::bytes(0), units::bytes(1e18), efficiency, 0});
  node.devices.efficiency = t;
  node.devices.kernel_overhead = model::Sourced<units::Duration>{units::seconds(kernel_overhead), source};
  node.devices.layer_overhead.reset();
  return node;
}

/// One decode-b1 row's time split by the shared cost model into the three costs a runtime scales: the
/// weights' roofline (at an empty context), the KV cache and attention over the context (the roofline's
/// growth from context 0 to the row's), and the kernels launched per token (their count).
struct DecodeTerms {
  double weights = 0, context = 0, kernels = 0;
};

DecodeTerms decode_terms(const ValidationPrediction& p, const model::NodeProfile& base) {
  const model::NodeProfile roof = with_runtime(base, 1.0, 0.0, "roofline");
  const model::NodeProfile unit = with_runtime(base, 1.0, 1e-6, "one microsecond per kernel");
  DecodeTerms t;
  const double at_context = 1.0 / decode_b1(p, roof);
  t.weights = 1.0 / decode_b1(p, roof, 0);
  t.context = std::max(0.0, at_context - t.weights);
  t.kernels = (1.0 / decode_b1(p, unit) - at_context) / 1e-6;
  return t;
}

/// The fitted runtime's time for `t`: weights / efficiency + context × its factor + kernels × overhead.
double fitted_seconds(const ValidationFit& f, const DecodeTerms& t) {
  return t.weights / f.efficiency + t.context * f.context_factor + t.kernels * f.kernel_overhead;
}

/// x >= 0 minimising Σ ((x·terms_i − time_i) / time_i)²: relative errors, so that a 70B model's seconds do
/// not outweigh an 8B model's milliseconds (nonnegative_least_squares over the three costs).
ValidationFit solve(const std::vector<DecodeTerms>& terms, const std::vector<double>& time) {
  Matrix a(terms.size(), 3);
  std::vector<double> ones(terms.size(), 1.0);
  for (std::size_t i = 0; i < terms.size(); ++i) {
    a(i, 0) = terms[i].weights / time[i];
    a(i, 1) = terms[i].context / time[i];
    a(i, 2) = terms[i].kernels / time[i];
  }
  const std::vector<double> x = nonnegative_least_squares(a, ones);
  ValidationFit f;
  f.efficiency = x[0] > 0 ? 1.0 / x[0] : 1.0;
  f.context_factor = x[1];
  f.kernel_overhead = x[2];
  return f;
}

/// Configurations (model, format) a class needs for leave-one-out errors of its own: with fewer, a fit
/// without one has too little left to say how far it carries (2 leaves one configuration per fit).
constexpr std::size_t kMinConfigurations = 3;

/// The configuration a row measures (model and weight format): leave-one-out holds out a configuration
/// with all its rows, so that each is predicted by a fit that never saw that model in that format (rows of
/// one configuration at several context depths or lengths share its errors).
std::string configuration(const ValidationPrediction& p) { return p.model + " " + p.precision; }

/// Leave-one-configuration-out: for each configuration of `cal`, `predict_held_out(held)` gives the
/// predicted / measured − 1 of its rows from a fit without them. Fewer than `min_configs`: none (the class
/// alone cannot say how far a fit carries to a configuration it has not seen).
template <class Predict>
std::vector<double> loo_by_configuration(const std::vector<ValidationPrediction*>& cal, std::size_t min_configs,
                                         Predict predict_held_out) {
  std::set<std::string> configs;
  for (const auto* p : cal) configs.insert(configuration(*p));
  std::vector<double> errors;
  if (configs.size() < min_configs) return errors;
  for (const auto& c : configs) {
    std::vector<bool> held(cal.size());
    for (std::size_t i = 0; i < cal.size(); ++i) held[i] = configuration(*cal[i]) == c;
    for (double e : predict_held_out(held)) errors.push_back(e);
  }
  return errors;
}

/// Prefill's time split by one compute efficiency e: T(e) = rest + compute / e, from two runs of the
/// serving simulator (e = 1 and e = 1/2: their difference is the compute-bound part). Exact where a
/// kernel group stays compute-bound at both, the case of a prompt of hundreds of tokens.
struct PrefillTerms {
  double rest = 0, compute = 0;
};

model::NodeProfile with_compute_efficiency(model::NodeProfile node, double e, const std::string& source) {
  model::EfficiencyTable t = node.devices.efficiency.value_or(model::EfficiencyTable{});
  t.compute.assign(1, {units::bytes(0), units::bytes(1e18), e, 0});
  if (t.source.empty()) t.source = source;
  node.devices.efficiency = t;
  return node;
}

/// x >= 0 minimising Σ ((rest_i + x·compute_i − time_i) / time_i)²: the inverse compute efficiency.
double solve_compute(const std::vector<PrefillTerms>& terms, const std::vector<double>& time,
                     const std::vector<bool>& skip) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (!skip.empty() && skip[i]) continue;
    const double c = terms[i].compute / time[i];
    num += c * (1.0 - terms[i].rest / time[i]);
    den += c * c;
  }
  return den > 0 ? std::max(num / den, 1e-3) : 1.0;
}

/// A max-load row's time per output token split by the two efficiencies a runtime profile carries:
/// T(b, c) = bandwidth / b + compute / c + rest, from three serving-simulator runs at (b, c) = (1, 1),
/// (1/2, 1) and (1, 1/2): halving one efficiency doubles its part, so each difference from T(1, 1) is that
/// part. Exact where every kernel group stays memory- or compute-bound across the three runs; where one
/// changes sides the split is the local linearisation the fit needs.
struct MaxLoadTerms {
  double bandwidth = 0, compute = 0, rest = 0;
};

/// `base` with the runtime `rp` applied at bandwidth efficiency `b` and compute efficiency `c`.
model::NodeProfile with_efficiencies(const model::NodeProfile& base, model::RuntimeProfile rp, double b, double c) {
  rp.bandwidth_efficiency = model::Sourced<double>{b, "max-load split"};
  rp.compute_efficiency = model::Sourced<double>{c, "max-load split"};
  return model::apply_runtime(base, rp);
}

/// x = (1/b, 1/c) >= 0 minimising Σ ((bandwidth_i x0 + compute_i x1 + rest_i − time_i) / time_i)² over
/// the rows not `skip`ped (nonnegative_least_squares on relative errors, as solve() for batch-1 decode).
std::vector<double> solve_max_load(const std::vector<MaxLoadTerms>& terms, const std::vector<double>& time,
                                   const std::vector<bool>& skip) {
  std::vector<std::size_t> use;
  for (std::size_t i = 0; i < terms.size(); ++i)
    if (skip.empty() || !skip[i]) use.push_back(i);
  Matrix a(use.size(), 2);
  std::vector<double> b(use.size());
  for (std::size_t k = 0; k < use.size(); ++k) {
    const std::size_t i = use[k];
    a(k, 0) = terms[i].bandwidth / time[i];
    a(k, 1) = terms[i].compute / time[i];
    b[k] = 1.0 - terms[i].rest / time[i];
  }
  return nonnegative_least_squares(a, b);
}

double max_load_seconds(const std::vector<double>& x, const MaxLoadTerms& t) {
  return t.bandwidth * x[0] + t.compute * x[1] + t.rest;
}

/// The efficiency a fitted inverse gives: 1 / x, or `fallback` where the fit put no weight on the part
/// (x = 0: the rows do not depend on it, so nothing says what it is).
double efficiency_of(double x, double fallback) { return x > 0 ? 1.0 / x : fallback; }

/// The identity of the runtime profile a class's fit makes: "<runtime>@<hw>", fitted to `what`.
model::RuntimeProfile& name_profile(ValidationFit& fit, const std::string& what) {
  model::RuntimeProfile& rp = fit.profile;
  rp.runtime = fit.runtime;
  rp.hw = fit.hw;
  rp.id = fit.runtime + "@" + fit.hw;
  rp.name = fit.runtime + " on " + fit.hw + ", fitted to " + what;
  rp.origin = "moesim validate --fit";
  return rp;
}

/// Fits a (node profile, runtime) class with no batch-1 decode rows to its dense max-load rows: the
/// runtime's bandwidth and compute efficiency (RuntimeProfile; the rest of the node profile as shipped),
/// with leave-one-configuration-out errors for the intervals of its MoE max-load rows.
void fit_max_load(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const model::NodeProfile& base,
                  const std::optional<model::RuntimeProfile>& base_rt) {
  model::RuntimeProfile& rp = name_profile(fit, "dense max-load measurements");
  // The figures max-load rows do not fit: the base runtime's where it gives them (with their source), else
  // the node profile's own (0 per kernel and per layer, attention at its roofline, when it has none).
  const std::string kept = "not fitted (the class has no batch-1 decode rows): ";
  const auto keep = [&](const auto& from_base, const auto& from_node, auto none) {
    using S = std::decay_t<decltype(none)>;
    if (base_rt && from_base)
      return S{from_base->value, kept + "runtime profile " + base_rt->id + "'s (" + from_base->source + ")"};
    return S{from_node ? from_node->value : none.value, kept + "the node profile's own"};
  };
  const model::NodeProfile node = model::load_node(fit.hw);
  rp.kernel_overhead = keep(base_rt ? base_rt->kernel_overhead : std::nullopt, node.devices.kernel_overhead,
                            model::Sourced<units::Duration>{units::seconds(0), ""});
  rp.layer_overhead = keep(base_rt ? base_rt->layer_overhead : std::nullopt, node.devices.layer_overhead,
                           model::Sourced<units::Duration>{units::seconds(0), ""});
  rp.attention_factor = keep(base_rt ? base_rt->attention_factor : std::nullopt, node.devices.attention_factor,
                             model::Sourced<double>{1.0, ""});
  const model::NodeProfile unit = with_efficiencies(base, rp, 1.0, 1.0);
  const model::NodeProfile slow_memory = with_efficiencies(base, rp, 0.5, 1.0);
  const model::NodeProfile slow_compute = with_efficiencies(base, rp, 1.0, 0.5);
  std::vector<ValidationPrediction*> cal;
  std::vector<MaxLoadTerms> terms;
  std::vector<double> time;
  for (auto* p : rows) {
    if (p->row.role != "calibration" || p->kind != "max-load" || !p->predicted) continue;
    std::optional<double> t11, tb, tc;
    try {
      t11 = figure(*p, unit);
      tb = figure(*p, slow_memory);
      tc = figure(*p, slow_compute);
    } catch (const UserError&) {
      continue;
    }
    if (!t11 || !tb || !tc) continue;
    MaxLoadTerms t;
    t.bandwidth = std::max(0.0, 1.0 / *tb - 1.0 / *t11);
    t.compute = std::max(0.0, 1.0 / *tc - 1.0 / *t11);
    t.rest = std::max(0.0, 1.0 / *t11 - t.bandwidth - t.compute);
    cal.push_back(p);
    terms.push_back(t);
    time.push_back(1.0 / p->row.measured);
  }
  fit.max_load_rows = static_cast<std::int64_t>(cal.size());
  if (cal.empty()) return;
  const std::vector<double> x = solve_max_load(terms, time, {});
  fit.efficiency = efficiency_of(x[0], 1.0);
  fit.compute_efficiency = efficiency_of(x[1], 1.0);
  if (x[0] == 0 || x[1] == 0)
    fit.note = "the max-load rows leave an efficiency undetermined (the fit gives its part no weight): kept at 1";
  std::set<std::string> configs;
  for (const auto* p : cal) configs.insert(configuration(*p));
  fit.max_load_configurations = static_cast<std::int64_t>(configs.size());
  if (fit.efficiency > 1.0)
    fit.note += std::string(fit.note.empty() ? "" : "; ") + "bandwidth efficiency above 1: the simulated max-load rows spend more time than measured outside the "
               "memory-bound part (collectives, compute), and the fit takes it out of the part it may scale";
  // From two configurations each one's rows are out of sample for the fit of the other: enough for the
  // pooled range of the classes too small for their own (apply_fit), as the MoE rows are for every fit.
  fit.max_load_loo_errors = loo_by_configuration(cal, 2, [&](const std::vector<bool>& held) {
    const std::vector<double> xi = solve_max_load(terms, time, held);
    std::vector<double> e;
    for (std::size_t j = 0; j < cal.size(); ++j)
      if (held[j]) e.push_back(time[j] / max_load_seconds(xi, terms[j]) - 1.0);
    return e;
  });
  std::string ids;
  for (const auto* p : cal) ids += (ids.empty() ? "" : ", ") + p->row.id;
  const std::string source = "fitted by `moesim validate --table validation --fit` to " + std::to_string(cal.size()) +
                             " dense max-load output-throughput rows of validation/measurements.csv (" + ids +
                             "), time per output token = bandwidth part / efficiency + compute part / compute "
                             "efficiency + the rest, each part from the serving simulator";
  // A runtime profile's efficiencies are at most 1.5 (model::load_runtime refuses more, as a figure no
  // runtime reaches): beyond it the fit is saying the simulator's other costs are high, and the profile
  // (which prices every fitted row) keeps the bound.
  constexpr double kMaxEfficiency = 1.5;
  if (fit.efficiency > kMaxEfficiency || fit.compute_efficiency > kMaxEfficiency)
    fit.note += std::string(fit.note.empty() ? "" : "; ") + "the runtime profile holds its efficiencies at 1.5";
  rp.bandwidth_efficiency = model::Sourced<double>{std::min(fit.efficiency, kMaxEfficiency), source};
  rp.compute_efficiency = model::Sourced<double>{std::min(fit.compute_efficiency, kMaxEfficiency), source};
  rp.calibration_rows = fit.max_load_rows;
}

/// Fits the runtime on one (node profile, runtime) class from its calibration rows (dense models only).
/// Batch-1 decode fits the three costs of DecodeTerms (formats and sizes vary the bytes at a given kernel
/// count, context depths vary the attention alone); batch-1 prefill then fits the compute efficiency with
/// those fixed. Every row of the class (prefill and batched decode too) is then priced with the fitted
/// runtime. Intervals come from leave-one-configuration-out errors; `pooled` stands in for a class with too
/// few configurations to have its own.
void fit_class(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m) {
  model::NodeProfile base = base_node(m, fit.runtime, fit.hw);
  if (auto nd = m.native_dtypes.find(fit.runtime); nd != m.native_dtypes.end()) {
    fit.profile.native_dtypes = nd->second;
    base.devices.native_dtypes = nd->second;
  }
  if (auto cf = m.checkpoint_formats.find(fit.runtime); cf != m.checkpoint_formats.end())
    fit.profile.checkpoint_formats = cf->second;
  std::vector<ValidationPrediction*> cal;
  std::vector<DecodeTerms> terms;
  std::vector<double> time;
  for (auto* p : rows) {
    if (p->row.role != "calibration" || p->kind != "decode b1" || !p->predicted) continue;
    cal.push_back(p);
    terms.push_back(decode_terms(*p, base));
    time.push_back(1.0 / p->row.measured);
  }
  fit.calibration_rows = static_cast<std::int64_t>(cal.size());
  if (cal.empty()) {
    // A runtime measured only at max load (TensorRT-LLM's perf-overview): its two efficiencies from those.
    fit_max_load(rows, fit, base, base_runtime(m, fit.runtime, fit.hw));
    return;
  }
  {
    const ValidationFit all = solve(terms, time);
    fit.efficiency = all.efficiency;
    fit.context_factor = all.context_factor;
    fit.kernel_overhead = all.kernel_overhead;
  }
  if (fit.efficiency > 1.0)
    fit.note = "the runtime reads faster than the profile's bandwidth: the profile's figure is low";
  fit.loo_errors = loo_by_configuration(cal, kMinConfigurations, [&](const std::vector<bool>& held) {
    std::vector<DecodeTerms> ti;
    std::vector<double> yi;
    for (std::size_t j = 0; j < cal.size(); ++j)
      if (!held[j]) {
        ti.push_back(terms[j]);
        yi.push_back(time[j]);
      }
    const ValidationFit f = solve(ti, yi);
    std::vector<double> e;
    for (std::size_t j = 0; j < cal.size(); ++j)
      if (held[j]) {
        e.push_back(time[j] / fitted_seconds(f, terms[j]) - 1.0);
        fit.loo_ids.push_back(cal[j]->row.id);  // in loo_by_configuration's order, the same as the errors
      }
    return e;
  });
  // The runtime profile the fit makes, and the class's rows predicted through it (the path `moesim
  // estimate --runtime` takes).
  model::RuntimeProfile& rp = name_profile(fit, "dense measurements");
  std::string ids;
  for (const auto* p : cal) ids += (ids.empty() ? "" : ", ") + p->row.id;
  const std::string source = "fitted by `moesim validate --table validation --fit` to " +
                             std::to_string(cal.size()) + " dense batch-1 decode rows of validation/measurements.csv (" +
                             ids + ")";
  rp.bandwidth_efficiency = model::Sourced<double>{fit.efficiency, source};
  rp.attention_factor = model::Sourced<double>{fit.context_factor > 0 ? fit.context_factor : 1e-6, source};
  rp.kernel_overhead = model::Sourced<units::Duration>{units::seconds(fit.kernel_overhead), source};
  // The split has no per-layer term: the fitted cost per kernel takes every per-layer host cost too.
  rp.layer_overhead =
      model::Sourced<units::Duration>{units::seconds(0),
                                      "none: the fit splits a token into weights, context and kernels only, so its "
                                      "kernel_overhead takes every per-layer host cost too"};
  rp.calibration_rows = fit.calibration_rows;
  const model::NodeProfile decode_node = model::apply_runtime(base, rp);

  // Prefill: the compute efficiency, with the decode figures in place.
  std::vector<ValidationPrediction*> pcal;
  std::vector<PrefillTerms> pterms;
  std::vector<double> ptime;
  const model::NodeProfile half = with_compute_efficiency(decode_node, 0.5, "two-point split");
  const model::NodeProfile full = with_compute_efficiency(decode_node, 1.0, "two-point split");
  for (auto* p : rows) {
    if (p->row.role != "calibration" || p->kind != "prefill b1" || !p->predicted) continue;
    const auto t1 = figure(*p, full), t2 = figure(*p, half);
    if (!t1 || !t2) continue;
    const double prompt = static_cast<double>(p->row.prompt.value_or(1));
    PrefillTerms t;
    t.compute = std::max(0.0, prompt / *t2 - prompt / *t1);
    t.rest = std::max(0.0, prompt / *t1 - t.compute);
    pcal.push_back(p);
    pterms.push_back(t);
    ptime.push_back(prompt / p->row.measured);
  }
  if (!pcal.empty()) {
    fit.compute_efficiency = 1.0 / solve_compute(pterms, ptime, {});
    fit.prefill_rows = static_cast<std::int64_t>(pcal.size());
    fit.prefill_loo_errors = loo_by_configuration(pcal, kMinConfigurations, [&](const std::vector<bool>& held) {
      const double x = solve_compute(pterms, ptime, held);
      std::vector<double> e;
      for (std::size_t j = 0; j < pcal.size(); ++j)
        if (held[j]) e.push_back(ptime[j] / (pterms[j].rest + x * pterms[j].compute) - 1.0);
      return e;
    });
    std::string pids;
    for (const auto* p : pcal) pids += (pids.empty() ? "" : ", ") + p->row.id;
    rp.compute_efficiency = model::Sourced<double>{
        std::min(fit.compute_efficiency, 1.5),
        "fitted by `moesim validate --table validation --fit` to " + std::to_string(pcal.size()) +
            " dense batch-1 prefill rows of validation/measurements.csv (" + pids + "), the decode figures fixed"};
  }
}

/// The interval of a relative-error sample: its min and max, over `errors`.
std::optional<std::pair<double, double>> error_range(const std::vector<double>& errors) {
  if (errors.empty()) return std::nullopt;
  return std::make_pair(*std::min_element(errors.begin(), errors.end()),
                        *std::max_element(errors.begin(), errors.end()));
}

/// Prices every row of the class with its fitted runtime. Decode rows (batch 1 and batched) take the
/// decode interval, prefill rows the prefill one: the class's own leave-one-configuration-out range, or
/// the range pooled over every class when it has too few configurations (`pooled_*`).
void apply_fit(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m,
               const std::vector<double>& pooled_decode, const std::vector<double>& pooled_prefill,
               const std::vector<double>& pooled_max_load) {
  model::RuntimeProfile& rp = fit.profile;
  const bool own_decode = !fit.loo_errors.empty();
  const auto decode_range = error_range(own_decode ? fit.loo_errors : pooled_decode);
  const bool own_max_load =
      fit.max_load_configurations >= static_cast<std::int64_t>(kMinConfigurations) && !fit.max_load_loo_errors.empty();
  const auto max_load_range = error_range(own_max_load ? fit.max_load_loo_errors : pooled_max_load);
  if (fit.max_load_rows > 0) {
    // A max-load class: its profile's interval is that of its max-load rows.
    fit.max_load_range = max_load_range;
    if (max_load_range) {
      rp.error_low = max_load_range->first;
      rp.error_high = max_load_range->second;
      rp.interval_source =
          own_max_load ? "leave-one-configuration-out errors (predicted / measured - 1) of the " +
                             std::to_string(fit.max_load_rows) +
                             " max-load rows above, each configuration (model, format) predicted by the fit of the others"
                       : "the class has fewer than " + std::to_string(kMinConfigurations) +
                             " dense configurations: leave-one-configuration-out errors of max-load rows pooled over "
                             "every runtime and machine of validation/measurements.csv";
    }
  } else if (decode_range) {
    rp.error_low = decode_range->first;
    rp.error_high = decode_range->second;
    rp.interval_source = own_decode
                             ? "leave-one-configuration-out errors (predicted / measured - 1) of the " +
                                   std::to_string(fit.calibration_rows) +
                                   " rows above, each configuration (model, format) predicted by the fit of the others"
                             : "the class has fewer than " + std::to_string(kMinConfigurations) +
                                   " dense configurations: leave-one-configuration-out errors pooled over every "
                                   "runtime and machine of validation/measurements.csv";
  }
  const auto prefill_range = error_range(!fit.prefill_loo_errors.empty() ? fit.prefill_loo_errors : pooled_prefill);
  if (rp.compute_efficiency && fit.max_load_rows == 0) fit.prefill_range = prefill_range;
  const model::NodeProfile fitted = model::apply_runtime(base_node(m, fit.runtime, fit.hw), rp);
  for (auto* p : rows) {
    if (!p->predicted) continue;
    if (p->kind == "prefill b1" && !rp.compute_efficiency) continue;
    // A max-load row is priced by a fit that saw max-load rows (a decode fit says nothing of its scheduler).
    if ((p->kind == "max-load") != (fit.max_load_rows > 0)) continue;
    try {
      p->fitted = figure(*p, fitted);
    } catch (const UserError&) {
      continue;
    }
    if (!p->fitted || p->kind == "decode batched") continue;  // batched_intervals, once every class is priced
    const auto& range = p->kind == "prefill b1" ? prefill_range : p->kind == "max-load" ? max_load_range : decode_range;
    if (range) p->interval = model::prediction_interval(*p->fitted, range->first, range->second);
  }
}

/// Batched decode is fitted to nothing: the runtime's figures come from batch-1 decode and prefill. The
/// errors of the dense batched rows are then honest out-of-sample errors of the extrapolation from batch 1
/// to batch B: the class's own when its dense batched rows span enough configurations, else pooled over
/// every class. They measure how far that extrapolation goes wrong, not which way it goes for an MoE model:
/// a batch of B dense sequences reads the weights once, a batch of B MoE sequences reads the distinct
/// experts they route to (from moesim's routing, which the dense rows cannot test), so the two can err in
/// opposite directions (at this commit dense +12..+38%, MoE mostly below). The interval is therefore
/// symmetric in the ratio predicted / measured: within the largest factor f = max(1 + e, 1 / (1 + e)) of
/// the dense batched rows either way (errors from 1 / f - 1 to f - 1).
void batched_intervals(std::vector<std::vector<ValidationPrediction*>*>& classes) {
  auto dense_batched = [](const ValidationPrediction* p) {
    return p->row.role == "calibration" && p->kind == "decode batched" && p->fitted;
  };
  std::vector<double> pooled;
  for (const auto* members : classes)
    for (const auto* p : *members)
      if (dense_batched(p)) pooled.push_back(p->fitted_error());
  for (auto* members : classes) {
    std::vector<double> own;
    std::set<std::string> configs;
    for (const auto* p : *members)
      if (dense_batched(p)) {
        own.push_back(p->fitted_error());
        configs.insert(configuration(*p));
      }
    const auto range = error_range(configs.size() >= kMinConfigurations ? own : pooled);
    if (!range) continue;
    const double factor = std::max({1.0 + range->second, 1.0 / (1.0 + range->first), 1.0});
    for (auto* p : *members)
      if (p->kind == "decode batched" && p->fitted)
        p->interval = model::prediction_interval(*p->fitted, 1.0 / factor - 1.0, factor - 1.0);
  }
}

}  // namespace

ErrorSummary summarise(const std::vector<const ValidationPrediction*>& preds, bool fitted) {
  ErrorSummary s;
  s.basis = fitted ? "fitted" : "datasheet";
  std::vector<double> abs, signed_err;
  std::int64_t covered = 0;
  for (const auto* p : preds) {
    if (!(fitted ? p->fitted : p->predicted)) continue;
    const double e = fitted ? p->fitted_error() : p->error();
    if (fitted && p->interval) {
      ++s.with_interval;
      covered += p->row.measured >= p->interval->first && p->row.measured <= p->interval->second ? 1 : 0;
    }
    abs.push_back(std::fabs(e));
    signed_err.push_back(e);
    s.worst_ratio = std::max(s.worst_ratio, std::max(e + 1.0, 1.0 / (e + 1.0)));
  }
  s.n = static_cast<std::int64_t>(abs.size());
  if (abs.empty()) return s;
  s.median_abs = quantile(abs, 0.5);
  s.p90_abs = quantile(abs, 0.9);
  s.median_signed = quantile(signed_err, 0.5);
  const auto share = [&](double bound) {
    return static_cast<double>(std::count_if(abs.begin(), abs.end(), [&](double x) { return x <= bound; })) /
           static_cast<double>(abs.size());
  };
  s.within_10 = share(0.10);
  s.within_25 = share(0.25);
  if (s.with_interval > 0) s.coverage = static_cast<double>(covered) / static_cast<double>(s.with_interval);
  return s;
}

namespace {

/// The weight format of a llama-bench model_type ("llama 8B Q4_K - Medium", "gpt-oss 120B MXFP4 MoE",
/// "qwen2 7B Q8_0": llama.cpp's llama_model_ftype_name after the architecture and size) as a precision:
/// its first word, lower case, with F16 as fp16. A mixed file type (Q4_K - Medium) is priced as its main
/// block type.
std::string llama_bench_precision(const std::string& model_type, const std::string& where) {
  const std::vector<std::string> words = text::split(model_type, ' ');
  if (words.size() < 3)
    throw UserError(where + ": model_type \"" + model_type +
                    "\" is not llama-bench's \"<arch> <size> <file type>\"; was the file written by `llama-bench -o json`?");
  std::string f = words[2];
  std::transform(f.begin(), f.end(), f.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (f == "f16") f = "fp16";
  if (f == "f32") f = "fp32";
  // llama_model_ftype_name writes the K-quant medium file types as "Q4_K - Medium": their per-tensor mix.
  if (words.size() >= 5 && words[3] == "-" && words[4] == "Medium" && (f == "q4_k" || f == "q5_k")) f += "_m";
  // A GGUF's "MXFP4 MoE" file type (gpt-oss) keeps MXFP4 for the routed experts only and Q8_0 elsewhere
  // (the size llama-bench prints: gpt-oss-20b 11.27 GiB, validation/mapping.json's format_notes).
  if (f == "mxfp4") f = "mxfp4/q8_0";
  try {
    return model::precision(f).name;
  } catch (const UserError&) {
    throw UserError(where + ": model_type \"" + model_type + "\": file type " + words[2] +
                    " is not a precision moesim prices (see `moesim estimate --help`)");
  }
}

void run_rows(ValidationResult& r, const std::vector<ValidationRow>& rows, const Mapping& m,
              const ValidationOptions& o);

std::vector<ValidationRow> llama_bench_rows(const std::filesystem::path& path, const LlamaBenchImport& in,
                                            std::map<std::string, std::string>& formats) {
  const nlohmann::json doc = read_llama_bench(path);  // -o json, or the default markdown table
  const json::Node root(doc, path.string());
  if (!doc.is_array())
    throw root.error("is not llama-bench's JSON output (an array of tests; write it with `llama-bench -o json`)");
  const model::Architecture arch = model::load_model(in.model);
  std::vector<ValidationRow> out;
  std::size_t i = 0;
  for (const auto& t : doc) {
    const json::Node n(t, path.string() + ": $[" + std::to_string(i) + "]");
    const std::string where = path.string() + ": test " + std::to_string(i);
    ++i;
    // The fields of llama.cpp's llama-bench JSON printer (the same names as its SQL output:
    // scripts/compare-llama-bench.py LLAMA_BENCH_DB_FIELDS); the rest are kept out of the fit.
    const std::string model_type = n.string("model_type");
    const std::int64_t prompt = n.integer("n_prompt"), gen = n.integer("n_gen");
    const std::int64_t depth = n.has("n_depth") ? n.integer("n_depth") : 0;
    const double ts = n.number("avg_ts");
    if (!(ts > 0) || !std::isfinite(ts)) throw n.error("avg_ts", "must be a positive tokens/s figure");
    if ((prompt > 0) == (gen > 0))
      throw UserError(where + ": n_prompt " + std::to_string(prompt) + " and n_gen " + std::to_string(gen) +
                      ": a pp test has only n_prompt, a tg test only n_gen (pg tests mix both and are not read)");
    ValidationRow r;
    r.format = model_type.substr(model_type.find(' ', model_type.find(' ') + 1) + 1);
    formats[r.format] = llama_bench_precision(model_type, where);
    r.id = (gen > 0 ? "tg" + std::to_string(gen) : "pp" + std::to_string(prompt)) +
           (depth > 0 ? "@d" + std::to_string(depth) : std::string()) + "-" + formats[r.format];
    r.role = arch.is_moe() ? "prediction" : "calibration";
    r.model = in.model;
    r.hardware = in.hw;
    r.hw_family = "user";
    r.runtime = in.runtime;
    r.devices = 1;
    r.batch = 1;
    r.prompt = prompt;
    r.output = gen;
    r.depth = depth;
    // llama-bench prints the micro-batch it ran with (n_ubatch, default 512); a prompt is computed that
    // many tokens at a time.
    if (n.has("n_ubatch")) {
      r.step_tokens = n.integer("n_ubatch");
      if (*r.step_tokens < 1 || *r.step_tokens > (std::int64_t{1} << 24))
        throw n.error("n_ubatch", "must be a micro-batch size from 1 to 16777216 tokens");
    }
    r.metric = gen > 0 ? "decode_tokens_per_s" : "prefill_tokens_per_s";
    r.unit = "tokens/s";
    r.measured = ts;
    r.source_url = in.source.empty() ? path.string() : in.source;
    r.line = static_cast<std::int64_t>(i);
    out.push_back(std::move(r));
  }
  if (out.empty()) throw root.error("holds no tests");
  return out;
}

}  // namespace

ValidationResult run_llama_bench(const std::vector<std::filesystem::path>& files,
                                 const std::vector<LlamaBenchImport>& imports, const ValidationOptions& o) {
  MOESIM_CHECK(files.size() == imports.size(), "one import description per llama-bench file");
  Mapping m;
  std::vector<ValidationRow> rows;
  for (std::size_t f = 0; f < files.size(); ++f) {
    // llama-bench is llama.cpp: its GGUF matmuls use no FP8 or FP4 tensor cores (validation/mapping.json's
    // "runtimes" says why), whatever name the user gives the runtime.
    m.native_dtypes[imports[f].runtime] = {{}, "llama.cpp ggml/src/ggml-cuda/mmq.cuh and ggml-metal: GGUF weights are "
                                               "dequantised into int8 (CUDA MMQ) or half (Metal) tiles"};
    m.prompt_chunk[imports[f].runtime] = {512, "llama-bench's default n_ubatch (llama.cpp tools/llama-bench)"};
    m.checkpoint_formats[imports[f].runtime] = {
        {{"mxfp4/bf16", "mxfp4/q8_0"}},
        "llama.cpp runs gpt-oss from a GGUF whose non-expert tensors are Q8_0 (ggml-org/gpt-oss-*-GGUF, 11.27 / 59.02 GiB)"};
    const model::NodeProfile node = model::load_node(imports[f].hw);
    if (std::none_of(m.hardware.begin(), m.hardware.end(), [&](const Mapping::Hw& h) { return h.hw == node.id; }))
      m.hardware.push_back({imports[f].hw, 1, node.id});
    for (auto& r : llama_bench_rows(files[f], imports[f], m.formats)) rows.push_back(std::move(r));
  }
  ValidationResult r;
  r.table = files.front();
  run_rows(r, rows, m, o);
  return r;
}

ValidationResult run_validation(const std::filesystem::path& dir, const ValidationOptions& o) {
  ValidationResult r;
  r.table = dir / "measurements.csv";
  const Mapping m = read_mapping(dir / "mapping.json");
  run_rows(r, read_rows(r.table), m, o);
  return r;
}

namespace {

void run_rows(ValidationResult& r, const std::vector<ValidationRow>& rows, const Mapping& m,
              const ValidationOptions& o) {
  if (!o.role.empty() && o.role != "calibration" && o.role != "prediction")
    throw UserError("--role " + o.role + ": give calibration or prediction");
  for (const auto& row : rows) {
    if (!o.role.empty() && row.role != o.role) continue;
    ValidationPrediction p;
    p.row = row;
    r.rows.push_back(std::move(p));
  }
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    predict(r.rows[i], m);
    if (!r.rows[i].predicted) ++r.skipped[r.rows[i].skipped.starts_with("refused") ? "refused by moesim" : r.rows[i].skipped];
    if (o.progress) o.progress(i + 1, r.rows.size());
  }
  if (o.fit) {
    // One fit per (node profile, runtime): a runtime's efficiency is its own on each machine.
    std::map<std::pair<std::string, std::string>, std::vector<ValidationPrediction*>> classes;
    for (auto& p : r.rows)
      if (p.predicted) classes[{p.hw, p.row.runtime}].push_back(&p);
    std::vector<std::vector<ValidationPrediction*>*> fitted_members;
    std::vector<double> pooled_decode, pooled_prefill, pooled_max_load;
    for (auto& [key, members] : classes) {
      ValidationFit f;
      f.hw = key.first;
      f.runtime = key.second;
      fit_class(members, f, m);
      if (f.calibration_rows == 0 && f.max_load_rows == 0) continue;
      pooled_decode.insert(pooled_decode.end(), f.loo_errors.begin(), f.loo_errors.end());
      pooled_max_load.insert(pooled_max_load.end(), f.max_load_loo_errors.begin(), f.max_load_loo_errors.end());
      pooled_prefill.insert(pooled_prefill.end(), f.prefill_loo_errors.begin(), f.prefill_loo_errors.end());
      r.fits.push_back(f);
      fitted_members.push_back(&members);
    }
    for (std::size_t i = 0; i < r.fits.size(); ++i)
      apply_fit(*fitted_members[i], r.fits[i], m, pooled_decode, pooled_prefill, pooled_max_load);
    batched_intervals(fitted_members);
  }
  // Per role × kind, then per role × kind × hardware family × runtime; datasheet, then fitted.
  for (const bool fitted : {false, true}) {
    std::set<std::tuple<std::string, std::string, std::string, std::string>> groups;
    for (const auto& p : r.rows)
      if (fitted ? p.fitted.has_value() : p.predicted.has_value()) {
        groups.insert({p.row.role, p.kind, "all", "all"});
        groups.insert({p.row.role, p.kind, p.row.hw_family, p.row.runtime});
      }
    for (const auto& [role, kind, family, runtime] : groups) {
      std::vector<const ValidationPrediction*> in;
      for (const auto& p : r.rows)
        if (p.row.role == role && p.kind == kind && (family == "all" || p.row.hw_family == family) &&
            (runtime == "all" || p.row.runtime == runtime))
          in.push_back(&p);
      ErrorSummary s = summarise(in, fitted);
      s.role = role;
      s.kind = kind;
      s.hw_family = family;
      s.runtime = runtime;
      r.summaries.push_back(s);
    }
  }
}

}  // namespace

namespace {
std::string pct(double f) { return text::printf("%+.0f%%", 100.0 * f); }
std::string pct_abs(double f) { return text::printf("%.0f%%", 100.0 * f); }
}  // namespace

void print_validation_text(const ValidationResult& r, std::ostream& out, bool every_row) {
  std::int64_t predicted = 0;
  for (const auto& p : r.rows) predicted += p.predicted ? 1 : 0;
  out << "moesim validate: " << r.table.string() << ", " << r.rows.size() << " rows, " << predicted
      << " predicted with the shipped (datasheet) profiles"
      << (r.fits.empty() ? std::string(" (nothing fitted; --fit fits each runtime to its calibration rows)")
                         : ", then with each runtime fitted to its class's calibration rows (dense only)")
      << "\n";
  out << "error = predicted / measured - 1 (> 0: moesim too fast); calibration rows are dense models, prediction "
         "rows MoE\n\n";
  if (every_row) {
    Table t({"id", "role", "kind", "hw", "precision", "instrument", "measured", "datasheet", "error", "fitted",
             "interval", "error"});
    for (const auto& p : r.rows) {
      if (!p.predicted) continue;
      t.add_row({p.row.id, p.row.role, p.kind, p.hw, p.precision, p.instrument, text::printf("%.4g", p.row.measured),
                 text::printf("%.4g", *p.predicted), pct(p.error()),
                 p.fitted ? text::printf("%.4g", *p.fitted) : std::string("-"),
                 p.interval ? text::printf("%.4g-%.4g", p.interval->first, p.interval->second) : std::string("-"),
                 p.fitted ? pct(p.fitted_error()) : std::string("-")});
    }
    t.print_text(out);
    out << "\n";
  }
  if (!r.fits.empty()) {
    out << "runtimes fitted to the calibration rows (batch-1 decode: time = weights' roofline / efficiency + "
           "context roofline x factor + kernels x overhead; then batch-1 prefill: compute-bound time / compute "
           "efficiency; a class measured only at max load: time per output token = memory-bound part / bandwidth "
           "efficiency + compute-bound part / compute efficiency + the rest). Error ranges: leave-one-configuration-out (model, format); a class of fewer than "
        << kMinConfigurations << " configurations takes the range pooled over all classes:\n";
    Table f({"hw", "runtime", "rows", "bandwidth efficiency", "context x", "per kernel us", "decode error range",
             "prefill rows", "compute efficiency", "prefill error range", "max-load rows", "max-load error range"});
    auto range = [](const std::vector<double>& own, double lo, double hi) {
      if (!own.empty()) {
        const auto [a, b] = std::minmax_element(own.begin(), own.end());
        return pct(*a) + " .. " + pct(*b);
      }
      return hi >= lo ? pct(lo) + " .. " + pct(hi) + " (pooled)" : std::string("-");
    };
    for (const auto& x : r.fits) {
      const auto& rp = x.profile;
      const bool max_load = x.max_load_rows > 0;
      f.add_row({x.hw, x.runtime, std::to_string(x.calibration_rows), text::printf("%.3f", x.efficiency),
                 max_load ? std::string("-") : text::printf("%.2f", x.context_factor),
                 max_load ? std::string("-") : text::printf("%.2f", x.kernel_overhead * 1e6),
                 max_load ? std::string("-")
                          : range(x.loo_errors, rp.error_low, rp.interval_source.empty() ? -1.0 : rp.error_high),
                 std::to_string(x.prefill_rows),
                 x.prefill_rows > 0 || max_load ? text::printf("%.3f", x.compute_efficiency) : std::string("-"),
                 x.prefill_range ? range(x.prefill_loo_errors, x.prefill_range->first, x.prefill_range->second)
                                 : std::string("-"),
                 std::to_string(x.max_load_rows),
                 x.max_load_range ? range(x.max_load_configurations >= static_cast<std::int64_t>(kMinConfigurations)
                                             ? x.max_load_loo_errors
                                             : std::vector<double>{},
                                         x.max_load_range->first, x.max_load_range->second)
                                  : std::string("-")});
    }
    f.print_text(out);
    for (const auto& x : r.fits)
      if (!x.note.empty()) out << "note: " << x.hw << " / " << x.runtime << ": " << x.note << "\n";
    out << "\n";
  }
  Table s({"basis", "role", "kind", "hw family", "runtime", "rows", "median |err|", "p90 |err|", "within 10%",
           "within 25%", "median err", "worst x", "in interval"});
  for (const auto& e : r.summaries)
    s.add_row({e.basis, e.role, e.kind, e.hw_family, e.runtime, std::to_string(e.n), pct_abs(e.median_abs),
               pct_abs(e.p90_abs), pct_abs(e.within_10), pct_abs(e.within_25), pct(e.median_signed),
               text::printf("%.2f", e.worst_ratio),
               e.with_interval > 0 ? pct_abs(e.coverage) + " of " + std::to_string(e.with_interval) : std::string("-")});
  s.print_text(out);
  if (!r.skipped.empty()) {
    out << "\nnot predicted:\n";
    for (const auto& [why, n] : r.skipped) out << "  " << n << " rows: " << why << "\n";
  }
}

nlohmann::json validation_to_json(const ValidationResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : r.rows) {
    nlohmann::json j = {{"id", p.row.id},           {"role", p.row.role},     {"metric", p.row.metric},
                        {"measured", metric("measured", p.row.measured, p.row.unit)},
                        {"source_url", p.row.source_url}};
    if (p.predicted) {
      j["kind"] = p.kind;
      j["hw"] = p.hw;
      j["precision"] = p.precision;
      j["instrument"] = p.instrument;
      j["predicted"] = metric("predicted", *p.predicted, p.row.unit);
      j["error"] = metric("error", p.error(), "fraction");
      if (p.fitted) {
        j["fitted"] = metric("fitted", *p.fitted, p.row.unit);
        j["fitted_error"] = metric("fitted_error", p.fitted_error(), "fraction");
      }
      if (p.interval)
        j["interval"] = {{"low", p.interval->first}, {"high", p.interval->second}, {"unit", p.row.unit}};
    } else {
      j["not_predicted"] = p.skipped;
    }
    rows.push_back(j);
  }
  nlohmann::json sums = nlohmann::json::array();
  for (const auto& e : r.summaries)
    sums.push_back({{"basis", e.basis},
                    {"role", e.role},
                    {"kind", e.kind},
                    {"hw_family", e.hw_family},
                    {"runtime", e.runtime},
                    {"rows", e.n},
                    {"median_abs_error", metric("median_abs_error", e.median_abs, "fraction")},
                    {"p90_abs_error", metric("p90_abs_error", e.p90_abs, "fraction")},
                    {"within_10", metric("within_10", e.within_10, "fraction of rows")},
                    {"within_25", metric("within_25", e.within_25, "fraction of rows")},
                    {"median_error", metric("median_error", e.median_signed, "fraction")},
                    {"worst_ratio", metric("worst_ratio", e.worst_ratio, "x")},
                    {"rows_with_interval", e.with_interval},
                    {"interval_coverage", metric("interval_coverage", e.coverage, "fraction of rows")}});
  nlohmann::json fits = nlohmann::json::array();
  for (const auto& f : r.fits)
    fits.push_back({{"hw", f.hw},
                    {"runtime", f.runtime},
                    {"calibration_rows", f.calibration_rows},
                    {"efficiency", metric("bandwidth_efficiency", f.efficiency, "fraction of memory_bandwidth")},
                    {"context_factor", metric("context_factor", f.context_factor, "x the KV and attention roofline")},
                    {"kernel_overhead", metric("kernel_overhead", f.kernel_overhead, "s")},
                    {"loo_errors", f.loo_errors},
                    {"compute_efficiency", metric("compute_efficiency", f.compute_efficiency, "fraction of peak FLOP/s")},
                    {"max_load_rows", f.max_load_rows},
                    {"max_load_loo_errors", f.max_load_loo_errors},
                    {"note", f.note}});
  return {{"table", r.table.string()}, {"rows", rows}, {"summaries", sums}, {"fits", fits}};
}

nlohmann::json runtime_profile_json(const model::RuntimeProfile& r) {
  nlohmann::json j = {{"id", r.id}, {"kind", "runtime"}, {"name", r.name}, {"runtime", r.runtime}, {"hw", r.hw}};
  // Each figure the profile gives; one it does not give leaves the node's own (model::apply_runtime).
  const auto duration = [](const model::Sourced<units::Duration>& d) {
    return nlohmann::json{{"value", text::printf("%.10gus", d.value.base() * 1e6)}, {"source", d.source}};
  };
  if (r.bandwidth_efficiency)
    j["bandwidth_efficiency"] = {{"value", r.bandwidth_efficiency->value}, {"source", r.bandwidth_efficiency->source}};
  if (r.attention_factor)
    j["attention_factor"] = {{"value", r.attention_factor->value}, {"source", r.attention_factor->source}};
  if (r.kernel_overhead) j["kernel_overhead"] = duration(*r.kernel_overhead);
  if (r.layer_overhead) j["layer_overhead"] = duration(*r.layer_overhead);
  // The serving host costs, when fitted (`calibrate fit --vllm-serving`); absent, they read as 0.
  if (!r.step_overhead.source.empty()) j["step_overhead"] = duration(r.step_overhead);
  if (!r.request_overhead.source.empty()) j["request_overhead"] = duration(r.request_overhead);
  if (r.native_dtypes) j["native_dtypes"] = {{"value", r.native_dtypes->value}, {"source", r.native_dtypes->source}};
  if (r.checkpoint_formats)
    j["checkpoint_formats"] = {{"value", r.checkpoint_formats->value}, {"source", r.checkpoint_formats->source}};
  if (r.compute_efficiency)
    j["compute_efficiency"] = {{"value", r.compute_efficiency->value}, {"source", r.compute_efficiency->source}};
  if (!r.interval_source.empty())
    j["prediction_interval"] = {
        {"low", r.error_low}, {"high", r.error_high}, {"rows", r.calibration_rows}, {"source", r.interval_source}};
  return j;
}

void write_validation_csv(const ValidationResult& r, std::ostream& out) {
  out << "id,role,kind,model,format,hardware,devices,runtime,hw,precision,instrument,measured,predicted,unit,error,"
         "fitted,fitted_error,interval_low,interval_high,not_predicted,source_url\n";
  for (const auto& p : r.rows) {
    out << csv_field(p.row.id) << "," << p.row.role << "," << csv_field(p.kind) << "," << csv_field(p.row.model) << ","
        << csv_field(p.row.format) << "," << csv_field(p.row.hardware) << "," << p.row.devices << ","
        << csv_field(p.row.runtime) << "," << csv_field(p.hw) << "," << csv_field(p.precision) << ","
        << csv_field(p.instrument) << "," << text::printf("%.6g", p.row.measured) << ","
        << (p.predicted ? text::printf("%.6g", *p.predicted) : std::string()) << "," << csv_field(p.row.unit) << ","
        << (p.predicted ? text::printf("%.6f", p.error()) : std::string()) << ","
        << (p.fitted ? text::printf("%.6g", *p.fitted) : std::string()) << ","
        << (p.fitted ? text::printf("%.6f", p.fitted_error()) : std::string()) << ","
        << (p.interval ? text::printf("%.6g", p.interval->first) : std::string()) << ","
        << (p.interval ? text::printf("%.6g", p.interval->second) : std::string()) << "," << csv_field(p.skipped) << ","
        << csv_field(p.row.source_url) << "\n";
  }
}

}  // namespace moesim::calibrate
