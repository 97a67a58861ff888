// `moesim calibrate fit --trtllm-bench FILE`: trtllm-bench throughput reports replayed as max-load runs and
// the runtime's two efficiencies fitted to them (calibrate/trtllm_fit.hpp says what is read and how).

#include "moesim/calibrate/trtllm_fit.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string_view>

#include "moesim/calibrate/lsq.hpp"
#include "moesim/calibrate/validation.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {
namespace {

constexpr const char* kFix =
    "give the report `trtllm-bench throughput` printed, unedited, or the file its --report_json wrote "
    "(calibrate/FIT.md)";

/// The text report's "Key: value" lines that moesim reads, and where each goes in --report_json's shape
/// (reporting.py report_statistics() prints them from get_statistics_dict()).
struct TextKey {
  std::string_view label, section, key;
  bool number;
};
constexpr TextKey kTextKeys[] = {
    {"Model", "engine", "model", false},
    {"TensorRT LLM Version", "engine", "version", false},
    {"TensorRT-LLM Version", "engine", "version", false},  // the name before the hyphen was dropped
    {"Dtype", "engine", "dtype", false},
    {"KV Cache Dtype", "engine", "kv_cache_dtype", false},
    {"Quantization", "engine", "quantization", false},
    {"TP Size", "world_info", "tp_size", true},
    {"PP Size", "world_info", "pp_size", true},
    {"EP Size", "world_info", "ep_size", true},
    {"Max Runtime Batch Size", "world_info", "max_batch_size", true},
    {"Max Runtime Tokens", "world_info", "max_num_tokens", true},
    {"KV Memory Percentage", "world_info", "kv_cache_percentage", true},
    {"Number of requests", "request_info", "num_requests", true},
    {"Average Input Length (tokens)", "request_info", "avg_input_length", true},
    {"Average Output Length (tokens)", "request_info", "avg_output_length", true},
    {"Total Output Throughput (tokens/sec)", "performance", "system_output_throughput_tok_s", true},
    {"Total Latency (ms)", "performance", "total_latency_ms", true},
};

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

/// The text report as --report_json's JSON (the keys above; the first of each, as the report prints every
/// key once). A number that does not parse is an error on its line; "None" is null; "95.00%" is 0.95.
nlohmann::json text_as_json(const std::string& text, const std::string& path) {
  nlohmann::json doc = nlohmann::json::object();
  std::int64_t line_no = 0;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    ++line_no;
    at = end + 1;
    if (line.starts_with("= PYTORCH BACKEND")) doc["engine"]["backend"] = "Pytorch";
    if (line.starts_with("= ENGINE DETAILS")) doc["engine"]["backend"] = "TRT";
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string label = trim(line.substr(0, colon));
    for (const TextKey& k : kTextKeys) {
      if (label != k.label) continue;
      auto& slot = doc[std::string(k.section)][std::string(k.key)];
      if (!slot.is_null()) break;
      std::string value = trim(line.substr(colon + 1));
      if (!k.number) {
        slot = value;
        break;
      }
      if (value == "None") {
        slot = nullptr;
        break;
      }
      const bool percent = !value.empty() && value.back() == '%';
      if (percent) value.pop_back();
      try {
        std::size_t used = 0;
        const double v = std::stod(value, &used);
        if (used != value.size() || !std::isfinite(v)) throw std::invalid_argument(value);
        slot = percent ? v / 100.0 : v;
      } catch (const std::exception&) {
        throw UserError(path + ": line " + std::to_string(line_no) + ": " + std::string(k.label) + ": \"" +
                        text::one_line(value) + "\" is not a number; " + kFix);
      }
      break;
    }
  }
  return doc;
}

double positive_number(const json::Node& n, const char* key) {
  const double v = n.number(key);
  if (!(v > 0) || !std::isfinite(v)) throw n.error(key, "must be a positive number; " + std::string(kFix));
  return v;
}

std::int64_t size_or_one(const json::Node& n, const char* key) {
  if (!n.has(key) || n.is_null(key)) return 1;  // "None": the mapping left it unset (1)
  return n.integer(key, 1);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// The KV cache's element type of a report ("FP8", "NVFP4"; "None" / "auto" / empty: the model's 16 bits).
std::string kv_dtype(const TrtllmBenchReport& r) {
  const std::string k = lower(r.kv_cache_dtype);
  if (k == "fp8") return "fp8";
  if (k == "nvfp4") return "nvfp4";
  return {};
}

/// The run as a max-load validation row: its batch limits and dataset size are the report's own.
ValidationPrediction as_prediction(const TrtllmBenchReport& r, const TrtllmImport& in) {
  ValidationPrediction p;
  p.row.id = r.path;
  p.row.role = "calibration";
  p.row.model = in.model;
  p.row.runtime = "tensorrt-llm";
  p.row.runtime_version = r.version;
  p.row.devices = r.tp * r.pp;
  p.row.prompt = std::max<std::int64_t>(1, std::llround(r.input_length));
  p.row.output = std::max<std::int64_t>(1, std::llround(r.output_length));
  p.row.metric = "output_throughput_tokens_per_s";
  p.row.unit = "tokens/s";
  p.row.measured = r.output_throughput;
  p.row.source_url = r.path;
  p.kind = "max-load";
  p.instrument = "serving-sim";
  p.model = in.model;
  p.hw = in.hw;
  p.precision = in.precision.empty() ? trtllm_precision(r, "") : in.precision;
  p.kv_cache_dtype = kv_dtype(r);
  p.pp = r.pp;
  // The report's EP size splits each MoE layer's experts over that many of the tp devices (TensorRT-LLM's
  // Mapping: tp_size = moe_tp_size x moe_ep_size); a dense model has no experts to split.
  if (r.ep > 1 && model::load_model(in.model).is_moe()) p.moe_ep = r.ep;
  p.requests = r.num_requests;
  // In-flight batching of generation tokens and context chunks in one step up to max_num_tokens, requests
  // admitted only when the cache holds their whole length (TensorRT-LLM's GUARANTEED_NO_EVICT default,
  // tensorrt_llm/llmapi/llm_args.py SchedulerConfig); the batch limit is per pipeline micro-batch (moesim's
  // max_batch_size), max_num_seqs counts all of them; the KV fraction 0.90 is KvCacheConfig.free_gpu_memory_fraction's
  // default.
  p.scheduler = {{"kind", "chunked"},
                 {"capacity", "guaranteed-no-evict"},
                 {"max_num_seqs", r.max_batch_size * r.pp},
                 {"max_batch_size", r.max_batch_size},
                 {"max_num_batched_tokens", r.max_num_tokens},
                 {"gpu_memory_utilization", r.kv_fraction.value_or(0.90)}};
  return p;
}

/// x >= 0 (inverse bandwidth efficiency, and inverse compute efficiency when `both`) minimising the relative
/// residuals of the rows `use`, the compute part at `given.second` (an inverse efficiency) otherwise. A part
/// the least squares puts at 0 (the rows leave it no time: the rest alone is as slow as measured, or slower)
/// keeps its `given` value, and `pinned` says so.
std::pair<double, double> solve(const std::vector<validation_detail::MaxLoadTerms>& terms,
                                const std::vector<double>& time, const std::vector<std::size_t>& use, bool both,
                                std::pair<double, double> given, std::pair<bool, bool>* pinned = nullptr) {
  const double fixed_compute = given.second;
  Matrix a(use.size(), both ? 2 : 1);
  std::vector<double> b(use.size());
  for (std::size_t i = 0; i < use.size(); ++i) {
    const auto& t = terms[use[i]];
    const double w = 1.0 / time[use[i]];
    a(i, 0) = t.bandwidth * w;
    if (both) a(i, 1) = t.compute * w;
    b[i] = (time[use[i]] - t.rest - (both ? 0.0 : t.compute * fixed_compute)) * w;
  }
  const std::vector<double> x = nonnegative_least_squares(a, b);
  if (pinned) *pinned = {!(x[0] > 0), both && !(x[1] > 0)};
  return {x[0] > 0 ? x[0] : given.first, both ? (x[1] > 0 ? x[1] : fixed_compute) : fixed_compute};
}

double seconds_per_token(const validation_detail::MaxLoadTerms& t, std::pair<double, double> x) {
  return t.bandwidth * x.first + t.compute * x.second + t.rest;
}

}  // namespace

TrtllmBenchReport read_trtllm_bench(const std::filesystem::path& path) {
  const std::string text = read_input_file(path, 4.0, "reading it as a trtllm-bench report");
  const auto first = text.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && text[first] == '{';
  const nlohmann::json doc = is_json ? json::parse_text(text, path.string()) : text_as_json(text, path.string());
  const json::Node root(doc, path.string());
  for (const char* section : {"world_info", "request_info", "performance"})
    if (!root.has(section))
      throw UserError(path.string() + ": " +
                      (is_json ? std::string("$.") + section + " is missing"
                               : std::string("no \"") +
                                     (std::string(section) == "performance"  ? "Total Output Throughput (tokens/sec):"
                                      : std::string(section) == "world_info" ? "TP Size:"
                                                                             : "Number of requests:") +
                                     "\" line") +
                      "; " + kFix);
  TrtllmBenchReport r;
  r.path = path.string();
  if (const auto engine = root.optional_child("engine")) {
    r.model = engine->optional_string("model").value_or("");
    r.version = engine->optional_string("version").value_or("");
    r.backend = engine->optional_string("backend").value_or("");
    r.dtype = engine->optional_string("dtype").value_or("");
    // get_statistics_dict writes the checkpoint's quant_config fields: a string, or null for none.
    if (engine->has("kv_cache_dtype") && !engine->is_null("kv_cache_dtype"))
      r.kv_cache_dtype = engine->string("kv_cache_dtype");
    if (engine->has("quantization") && !engine->is_null("quantization"))
      r.quantization = engine->string("quantization");
  }
  const json::Node world = root.child("world_info");
  r.tp = size_or_one(world, "tp_size");
  r.pp = size_or_one(world, "pp_size");
  r.ep = size_or_one(world, "ep_size");
  r.max_batch_size = world.integer("max_batch_size", 1);
  r.max_num_tokens = world.integer("max_num_tokens", 1);
  if (world.has("kv_cache_percentage") && !world.is_null("kv_cache_percentage")) {
    const double f = world.number("kv_cache_percentage");
    if (!(f > 0 && f <= 1))
      throw world.error("kv_cache_percentage",
                        "must be a fraction in (0, 1] of the free GPU memory; " + std::string(kFix));
    r.kv_fraction = f;
  }
  const json::Node req = root.child("request_info");
  r.num_requests = req.integer("num_requests", 1);
  r.input_length = positive_number(req, "avg_input_length");
  r.output_length = positive_number(req, "avg_output_length");
  const json::Node perf = root.child("performance");
  r.output_throughput = positive_number(perf, "system_output_throughput_tok_s");
  if (r.tp > 1024 || r.pp > 1024 || r.ep > r.tp * r.pp)
    throw world.error("tp_size", "TP " + std::to_string(r.tp) + " x PP " + std::to_string(r.pp) + " with EP " +
                                     std::to_string(r.ep) + " is not a run moesim replays; " + kFix);
  // Bounds before anything is sized from them: the replay simulates up to two waves of max_batch_size
  // sequences of input + output tokens each. (trtllm-bench's own limits: at most 4096 sequences per
  // micro-batch and 32768 tokens per step from its heuristic; a user may set more, not millions.)
  const auto bound = [&](const json::Node& n, const char* key, double v, double most, const char* what) {
    if (v > most)
      throw n.error(key, text::printf("%.17g", v) + " " + what + " is more than moesim replays (at most " +
                             text::printf("%.0f", most) + "); " + kFix);
  };
  bound(world, "max_batch_size", static_cast<double>(r.max_batch_size), 65536, "sequences");
  bound(world, "max_num_tokens", static_cast<double>(r.max_num_tokens), 4194304, "tokens per step");
  bound(req, "num_requests", static_cast<double>(r.num_requests), 10000000, "requests");
  bound(req, "avg_input_length", r.input_length, 4194304, "tokens");
  bound(req, "avg_output_length", r.output_length, 4194304, "tokens");
  return r;
}

std::string trtllm_precision(const TrtllmBenchReport& r, const std::string& given) {
  if (!given.empty()) {
    try {
      return model::precision(given).name;
    } catch (const UserError& e) {
      throw UserError(std::string("--precision: ") + e.what());
    }
  }
  // TensorRT-LLM's QuantAlgo names (tensorrt_llm/quantization/mode.py) for the checkpoints people run.
  static const std::map<std::string, std::string> by_algo = {{"FP8", "fp8"},
                                                             {"FP8_BLOCK_SCALES", "fp8"},
                                                             {"NVFP4", "nvfp4"},
                                                             {"W4A16_AWQ", "int4_g128"},
                                                             {"W4A8_AWQ", "int4_g128"},
                                                             {"W4A16_GPTQ", "int4_g128"},
                                                             {"W8A16", "int8"},
                                                             {"W8A8_SQ_PER_CHANNEL", "int8"}};
  const std::string q = r.quantization;
  if (!q.empty() && q != "None") {
    const auto it = by_algo.find(q);
    if (it == by_algo.end())
      throw UserError(r.path + ": Quantization " + text::one_line(q) +
                      " is not one moesim maps; give the weights' format with --precision (e.g. fp8, nvfp4, "
                      "int4_g128)");
    return it->second;
  }
  const std::string d = lower(r.dtype);
  if (d == "bfloat16" || d == "bf16") return "bf16";
  if (d == "float16" || d == "fp16") return "fp16";
  throw UserError(r.path + ": the report names no Quantization and Dtype \"" + text::one_line(r.dtype) +
                  "\" is not bfloat16 or float16; give the weights' format with --precision");
}

TrtllmFit fit_trtllm_bench(const std::vector<TrtllmBenchReport>& runs, const TrtllmImport& in) {
  MOESIM_CHECK(!runs.empty(), "fit_trtllm_bench needs a report");
  const model::NodeProfile base = model::load_node(in.hw);
  const model::RuntimeProfile& rp = in.runtime;
  const double bandwidth0 = rp.bandwidth_efficiency ? rp.bandwidth_efficiency->value : 1.0;
  const double compute0 = rp.compute_efficiency ? rp.compute_efficiency->value : 1.0;
  std::vector<validation_detail::MaxLoadTerms> terms;
  std::vector<double> time;
  TrtllmFit fit;
  for (const TrtllmBenchReport& r : runs) {
    const ValidationPrediction p = as_prediction(r, in);
    const auto t = validation_detail::max_load_terms(p, base, rp);
    if (!t)
      throw UserError(r.path + ": the run does not replay on " + base.id + " (" + p.model + " at " + p.precision +
                      " on TP " + std::to_string(r.tp) + " x PP " + std::to_string(r.pp) +
                      (p.moe_ep > 1 ? " with EP " + std::to_string(p.moe_ep) : std::string()) +
                      " leaves no KV-cache room, or the plan does not split the model): check --model, --hw "
                      "and --precision");
    terms.push_back(*t);
    time.push_back(1.0 / r.output_throughput);
    TrtllmFileFit f;
    f.path = r.path;
    f.precision = p.precision;
    f.kv_cache_dtype = p.kv_cache_dtype.empty() ? "16-bit" : p.kv_cache_dtype;
    f.moe_ep = p.moe_ep;
    f.measured = r.output_throughput;
    f.before = 1.0 / seconds_per_token(*t, {1.0 / bandwidth0, 1.0 / compute0});
    fit.files.push_back(f);
  }
  std::vector<std::size_t> all(runs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  fit.compute_fitted = runs.size() >= 2;
  const std::pair<double, double> given{1.0 / bandwidth0, 1.0 / compute0};
  std::pair<bool, bool> pinned;
  const auto x = solve(terms, time, all, fit.compute_fitted, given, &pinned);
  fit.bandwidth_pinned = pinned.first;
  fit.compute_pinned = pinned.second;
  fit.bandwidth_efficiency = 1.0 / x.first;
  fit.compute_efficiency = 1.0 / x.second;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    fit.files[i].after = 1.0 / seconds_per_token(terms[i], x);
    if (runs.size() < 2) continue;
    std::vector<std::size_t> others;
    for (std::size_t j = 0; j < runs.size(); ++j)
      if (j != i) others.push_back(j);
    const auto xo = solve(terms, time, others, others.size() >= 2, given);
    fit.files[i].loo = 1.0 / seconds_per_token(terms[i], xo);
  }
  return fit;
}

}  // namespace moesim::calibrate
