// `moesim validate --table DIR`: reading DIR/mapping.json (the table's words as moesim inputs) and the rows
// of DIR/measurements.csv.

#include <algorithm>
#include <charconv>
#include <cmath>

#include "moesim/model/architecture.hpp"
#include "moesim/model/csv.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/sim/trace_io.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

namespace validation_detail {

namespace {

/// A runtime's "scheduler" item: {"value": a serve scenario's "scheduler" object, "source"}, checked as
/// `moesim serve` reads it (scenario::read_scheduler).
model::Sourced<nlohmann::json> parse_runtime_scheduler(const json::Node& item) {
  item.expect_only({"value", "source"});
  const json::Node v = item.child("value");
  (void)scenario::read_scheduler(v);
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

/// runtimes.<runtime>.kv_cache_dtype: [{"hf_repo"?, "runtime_version"?, "format"?, "dtype", "source"}, ...],
/// each rule naming at least one of the three row fields it matches and a KV element type a serve scenario
/// takes (scenario::kv_cache_bytes).
std::vector<Mapping::KvRule> parse_kv_cache_rules(const json::Node& rt) {
  std::vector<Mapping::KvRule> out;
  for (const auto& e : rt.elements("kv_cache_dtype")) {
    e.expect_only({"hf_repo", "runtime_version", "format", "dtype", "source"});
    Mapping::KvRule r;
    if (e.has("hf_repo")) r.hf_repo = e.string("hf_repo");
    if (e.has("runtime_version")) r.runtime_version = e.string("runtime_version");
    if (e.has("format")) r.format = e.string("format");
    if (!r.hf_repo && !r.runtime_version && !r.format)
      throw e.error("matches every row; name the hf_repo, runtime_version or format it is for");
    r.dtype = e.string("dtype");
    e.resolving("dtype", [&] { return scenario::kv_cache_bytes(r.dtype, 2.0); });
    r.source = e.string("source");
    out.push_back(std::move(r));
  }
  return out;
}

/// routing_traces: [{"model", "runtime"?, "runtime_version"?, "hf_repo"?, "format"?, "trace", "source"}, ...]:
/// each rule names the zoo model whose routing its trace file recorded (a path relative to mapping.json's
/// folder), read and checked against that model's layers, experts and top-k here, before any row is priced.
std::vector<Mapping::TraceRule> parse_routing_traces(const json::Node& root, const std::filesystem::path& dir) {
  std::vector<Mapping::TraceRule> out;
  for (const auto& e : root.elements("routing_traces")) {
    e.expect_only({"model", "runtime", "runtime_version", "hf_repo", "format", "trace", "source"});
    Mapping::TraceRule r;
    r.model = e.string("model");
    const model::Architecture arch = e.resolving("model", [&] { return model::load_model(r.model); });
    if (!arch.is_moe())
      throw e.error("model", "'" + r.model + "' is dense: it has no routing to replay; name an MoE model");
    for (auto [key, field] : {std::pair{"runtime", &r.runtime}, std::pair{"runtime_version", &r.runtime_version},
                              std::pair{"hf_repo", &r.hf_repo}, std::pair{"format", &r.format}})
      if (e.has(key)) *field = e.string(key);
    const std::string file = e.string("trace");
    if (file.empty())
      throw e.error("trace", "is empty; name the trace file (.mtrace or .jsonl, `moesim trace convert`)");
    const std::filesystem::path p =
        std::filesystem::path(file).is_absolute() ? std::filesystem::path(file) : dir / file;
    r.trace = std::filesystem::absolute(p).lexically_normal().string();
    if (std::error_code ec; !std::filesystem::is_regular_file(r.trace, ec))
      throw e.error("trace",
                    "'" + file + "' (" + r.trace + ") is no file; a relative path here is from mapping.json's folder");
    e.resolving("trace", [&] {
      const sim::RoutingTrace t = sim::read_trace(r.trace);
      sim::check_trace_matches(t, arch, r.trace);
      return t.experts.size();
    });
    r.source = e.string("source");
    if (r.source.empty()) throw e.error("source", "is empty; say which prompts and which run recorded the trace");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

Mapping read_mapping(const std::filesystem::path& path) {
  const nlohmann::json doc = json::load_file(path);
  const json::Node root(doc, path.string());
  root.expect_only({"description", "hardware", "formats", "models", "model_notes", "format_notes", "runtimes",
                    "measured_devices", "routing_traces"});
  Mapping m;
  if (root.has("routing_traces")) m.routing_traces = parse_routing_traces(root, path.parent_path());
  if (root.has("hardware")) {
    for (const auto& h : root.elements("hardware")) {
      h.expect_only({"hardware", "devices", "hw", "note"});
      const std::string id = h.string("hw");
      h.resolving("hw", [&] { return model::load_node(id); });
      m.hardware.push_back({h.string("hardware"), h.integer("devices", 1), id});
    }
  }
  if (auto f = root.optional_child("measured_devices")) {
    if (!f->raw().is_object())
      throw f->error(
          "is not an object of {\"node profile id\": {\"value\": \"measured profile id\", \"source\": ...}}");
    for (const auto& item : f->raw().items()) {
      const std::string& hw = item.key();
      f->resolving(hw, [&] { return model::load_node(hw); });
      const json::Node d = f->child(hw);
      d.expect_only({"value", "source"});
      const std::string id = d.string("value");
      d.resolving("value", [&] { return model::with_measured_device(model::load_node(hw), model::load_node(id)); });
      m.measured_device[hw] = {id, d.string("source")};
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
      rt.expect_only({"native_dtypes", "prompt_chunk", "checkpoint_formats", "scheduler", "max_load_requests",
                      "max_load_batch_limits", "base_runtime", "kv_cache_dtype", "expert_token_tile",
                      "expert_gemm_efficiency", "expert_matvec_tokens", "expert_matvec_predates", "dense_small_batch"});
      if (rt.has("dense_small_batch"))
        m.dense_small_batch[k] = model::parse_dense_small_batch(rt.child("dense_small_batch"));
      if (rt.has("expert_token_tile"))
        m.expert_token_tile[k] = model::parse_expert_token_tile(rt.child("expert_token_tile"));
      if (rt.has("expert_matvec_tokens"))
        m.expert_matvec_tokens[k] = model::parse_expert_matvec_tokens(rt.child("expert_matvec_tokens"));
      if (rt.has("expert_matvec_predates")) {
        if (!rt.has("expert_matvec_tokens"))
          throw rt.error(
              "gives expert_matvec_predates without expert_matvec_tokens; give the kernel's token limit "
              "too, or drop the versions");
        const json::Node e = rt.child("expert_matvec_predates");
        e.expect_only({"builds_up_to", "prs_before", "source"});
        Mapping::MatvecPredates x;
        x.builds_up_to = e.integer("builds_up_to", 1);
        x.prs_before = e.integer("prs_before", 1);
        x.source = e.string("source");
        if (x.source.empty()) throw e.error("source", "is empty; say where the versions come from");
        m.expert_matvec_predates[k] = std::move(x);
      }
      if (rt.has("expert_gemm_efficiency"))
        m.expert_gemm_efficiency[k] = model::parse_expert_gemm_efficiency(rt.child("expert_gemm_efficiency"));
      if (rt.has("kv_cache_dtype")) m.kv_cache_dtype[k] = parse_kv_cache_rules(rt);
      if (rt.has("scheduler") != rt.has("max_load_requests"))
        throw rt.error("gives one of scheduler and max_load_requests; a max-load benchmark needs both");
      if (rt.has("scheduler"))
        m.max_load[k] = {parse_runtime_scheduler(rt.child("scheduler")),
                         parse_max_load_requests(rt.child("max_load_requests")), std::nullopt};
      if (auto b = rt.optional_child("max_load_batch_limits")) {
        if (!rt.has("scheduler")) throw b->error("needs the runtime's scheduler and max_load_requests beside it");
        b->expect_only({"value", "source"});
        const std::string how = b->string("value");
        if (how != "trtllm-bench")
          throw b->error("value", "'" + how +
                                      "' is no batch-limit rule moesim knows; give \"trtllm-bench\" (its dataset "
                                      "heuristic) or leave the key out (the scheduler's own limits)");
        m.max_load[k].batch_limits = model::Sourced<std::string>{how, b->string("source")};
      }
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

namespace {

std::optional<std::int64_t> optional_count(const std::string& text, const std::string& where) {
  if (text.empty()) return std::nullopt;
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0 || v > (std::int64_t{1} << 40))
    throw UserError(where + ": '" + text + "' is not a whole number >= 0");
  return v;
}

}  // namespace

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
  const auto optional_column = [&](const char* name) -> std::optional<std::size_t> {
    const auto at = std::find(t.header.begin(), t.header.end(), name);
    if (at == t.header.end()) return std::nullopt;
    return static_cast<std::size_t>(at - t.header.begin());
  };
  const auto repo_at = optional_column("hf_repo"), version_at = optional_column("runtime_version"),
             excluded_at = optional_column("excluded");
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
    if (repo_at) r.hf_repo = c[*repo_at];
    if (version_at) r.runtime_version = c[*version_at];
    if (excluded_at) {
      r.excluded = c[*excluded_at];
      if (!r.excluded.empty() && r.excluded.find_first_not_of(" \t") == std::string::npos)
        throw UserError(where + ", excluded: blank; say why the row is kept out of the figures, or leave it empty");
    }
    r.devices = optional_count(c[devices], where + ", devices").value_or(1);
    r.batch = optional_count(c[batch], where + ", batch");
    r.prompt = optional_count(c[prompt], where + ", prompt_tokens");
    r.output = optional_count(c[output], where + ", output_tokens");
    r.depth = optional_count(c[depth], where + ", context_depth");
    if (step_at != t.header.end()) {
      r.step_tokens = optional_count(c[static_cast<std::size_t>(step_at - t.header.begin())], where + ", step_tokens");
      if (r.step_tokens && *r.step_tokens < 1)
        throw UserError(where +
                        ", step_tokens: must be >= 1 (the tokens per forward pass, e.g. llama.cpp's n_ubatch), "
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

}  // namespace validation_detail

}  // namespace moesim::calibrate
