// moesim against the public validation table (reports/validation.hpp).

#include "moesim/reports/validation.hpp"

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
#include "moesim/reports/estimate.hpp"
#include "moesim/reports/json_out.hpp"
#include "moesim/reports/plot.hpp"
#include "moesim/reports/serve.hpp"
#include "moesim/reports/table.hpp"

namespace moesim::reports {

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
};

Mapping read_mapping(const std::filesystem::path& path) {
  const nlohmann::json doc = json::load_file(path);
  const json::Node root(doc, path.string());
  root.expect_only({"description", "hardware", "formats", "models", "model_notes", "format_notes"});
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
    r.devices = optional_count(c[devices], where + ", devices").value_or(1);
    r.batch = optional_count(c[batch], where + ", batch");
    r.prompt = optional_count(c[prompt], where + ", prompt_tokens");
    r.output = optional_count(c[output], where + ", output_tokens");
    r.depth = optional_count(c[depth], where + ", context_depth");
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

/// One serve run of `users` requests arriving at once, each `prompt` tokens in and `output` out.
ServeRun serve_burst(const std::string& model, const std::string& hw, std::int64_t devices, const std::string& prec,
                     std::int64_t users, std::int64_t prompt, std::int64_t output) {
  nlohmann::json doc = {
      {"description", "validation row"},
      {"model", model},
      {"hw", hw},
      {"plan", {{"tp", devices}}},
      {"precision", prec},
      {"scheduler",
       {{"kind", "chunked"},
        {"max_num_seqs", std::max<std::int64_t>(users, 1)},
        {"max_num_batched_tokens", std::max<std::int64_t>(2048, prompt * std::min<std::int64_t>(users, 8))}}},
      {"workload",
       {{"arrival", "closed-loop"}, {"users", users}, {"requests", users}, {"prompt", prompt}, {"output", output}}},
      {"generate", {{"tokens", 8192}, {"seed", 1}}}};
  ServeScenario sc;
  sc.doc = doc;
  sc.source = "validation";
  return run_serve(sc);
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

void predict(ValidationPrediction& p, const Mapping& m) {
  const ValidationRow& r = p.row;
  const bool b1 = r.batch && *r.batch == 1;
  if (r.metric == "decode_tokens_per_s" && b1) {
    p.kind = "decode b1";
  } else if (r.metric == "prefill_tokens_per_s" && b1) {
    p.kind = "prefill b1";
  } else if (r.metric == "decode_tokens_per_s" && r.batch && *r.batch > 1) {
    p.kind = "decode batched";
  } else {
    p.skipped = "max-load serving and latency rows need the runtime's scheduler limits (not expressed yet)";
    return;
  }
  if (p.kind == "prefill b1" && r.depth.value_or(0) > 0) {
    p.kind.clear();
    p.skipped = "prefill after a context depth (not expressed yet)";
    return;
  }
  const auto hw = std::find_if(m.hardware.begin(), m.hardware.end(),
                               [&](const Mapping::Hw& h) { return h.hardware == r.hardware && h.devices == r.devices; });
  if (hw == m.hardware.end()) {
    p.kind.clear();
    p.skipped = "no node profile for this hardware and device count in mapping.json";
    return;
  }
  const auto fmt = m.formats.find(r.format);
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
  const std::int64_t prompt = r.prompt.value_or(0), output = r.output.value_or(0), depth = r.depth.value_or(0);
  try {
    if (p.kind == "decode b1") {
      EstimateRequest q;
      q.model = p.model;
      q.hw = p.hw;
      q.nodes = {1};
      q.precision = p.precision;
      q.context = depth + prompt + output / 2;
      q.lm_head = true;
      const EstimateResult e = run_estimate(q);
      p.instrument = "analytic";
      p.predicted = e.rows.front().estimate.tokens_per_second;
    } else if (p.kind == "prefill b1") {
      const ServeRun run = serve_burst(p.model, p.hw, r.devices, p.precision, 1, std::max<std::int64_t>(prompt, 1), 1);
      p.instrument = "serving-sim";
      if (run.result.ttft.median > 0) p.predicted = static_cast<double>(prompt) / run.result.ttft.median;
    } else {
      const ServeRun run = serve_burst(p.model, p.hw, r.devices, p.precision, *r.batch,
                                       std::max<std::int64_t>(depth + prompt, 1), std::max<std::int64_t>(output, 2));
      p.instrument = "serving-sim";
      if (run.result.tpot.mean > 0) p.predicted = static_cast<double>(*r.batch) / run.result.tpot.mean;
    }
    if (!p.predicted) p.skipped = "the instrument gave no figure";
  } catch (const UserError& e) {
    // A configuration moesim refuses (the model does not fit, a missing figure) is a finding, not a crash.
    p.skipped = std::string("refused: ") + e.what();
  }
}

}  // namespace

ErrorSummary summarise(const std::vector<const ValidationPrediction*>& preds) {
  ErrorSummary s;
  std::vector<double> abs, signed_err;
  for (const auto* p : preds) {
    if (!p->predicted) continue;
    const double e = p->error();
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
  return s;
}

ValidationResult run_validation(const std::filesystem::path& dir, const ValidationOptions& o) {
  ValidationResult r;
  r.table = dir / "measurements.csv";
  const Mapping m = read_mapping(dir / "mapping.json");
  const std::vector<ValidationRow> rows = read_rows(r.table);
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
  // Per role × kind, then per role × kind × hardware family × runtime.
  std::set<std::tuple<std::string, std::string, std::string, std::string>> groups;
  for (const auto& p : r.rows)
    if (p.predicted) {
      groups.insert({p.row.role, p.kind, "all", "all"});
      groups.insert({p.row.role, p.kind, p.row.hw_family, p.row.runtime});
    }
  for (const auto& [role, kind, family, runtime] : groups) {
    std::vector<const ValidationPrediction*> in;
    for (const auto& p : r.rows)
      if (p.predicted && p.row.role == role && p.kind == kind && (family == "all" || p.row.hw_family == family) &&
          (runtime == "all" || p.row.runtime == runtime))
        in.push_back(&p);
    ErrorSummary s = summarise(in);
    s.role = role;
    s.kind = kind;
    s.hw_family = family;
    s.runtime = runtime;
    r.summaries.push_back(s);
  }
  return r;
}

namespace {
std::string pct(double f) { return text::printf("%+.0f%%", 100.0 * f); }
std::string pct_abs(double f) { return text::printf("%.0f%%", 100.0 * f); }
}  // namespace

void print_validation_text(const ValidationResult& r, std::ostream& out, bool every_row) {
  std::int64_t predicted = 0;
  for (const auto& p : r.rows) predicted += p.predicted ? 1 : 0;
  out << "moesim validate: " << r.table.string() << ", " << r.rows.size() << " rows, " << predicted
      << " predicted with the shipped (datasheet) profiles; nothing fitted\n";
  out << "error = predicted / measured - 1 (> 0: moesim too fast); calibration rows are dense models, prediction "
         "rows MoE\n\n";
  if (every_row) {
    Table t({"id", "role", "kind", "hw", "precision", "instrument", "measured", "predicted", "error"});
    for (const auto& p : r.rows) {
      if (!p.predicted) continue;
      t.add_row({p.row.id, p.row.role, p.kind, p.hw, p.precision, p.instrument, text::printf("%.4g", p.row.measured),
                 text::printf("%.4g", *p.predicted), pct(p.error())});
    }
    t.print_text(out);
    out << "\n";
  }
  Table s({"role", "kind", "hw family", "runtime", "rows", "median |err|", "p90 |err|", "within 10%", "within 25%",
           "median err", "worst x"});
  for (const auto& e : r.summaries)
    s.add_row({e.role, e.kind, e.hw_family, e.runtime, std::to_string(e.n), pct_abs(e.median_abs), pct_abs(e.p90_abs),
               pct_abs(e.within_10), pct_abs(e.within_25), pct(e.median_signed), text::printf("%.2f", e.worst_ratio)});
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
    } else {
      j["not_predicted"] = p.skipped;
    }
    rows.push_back(j);
  }
  nlohmann::json sums = nlohmann::json::array();
  for (const auto& e : r.summaries)
    sums.push_back({{"role", e.role},
                    {"kind", e.kind},
                    {"hw_family", e.hw_family},
                    {"runtime", e.runtime},
                    {"rows", e.n},
                    {"median_abs_error", metric("median_abs_error", e.median_abs, "fraction")},
                    {"p90_abs_error", metric("p90_abs_error", e.p90_abs, "fraction")},
                    {"within_10", metric("within_10", e.within_10, "fraction of rows")},
                    {"within_25", metric("within_25", e.within_25, "fraction of rows")},
                    {"median_error", metric("median_error", e.median_signed, "fraction")},
                    {"worst_ratio", metric("worst_ratio", e.worst_ratio, "x")}});
  return {{"table", r.table.string()}, {"rows", rows}, {"summaries", sums}};
}

void write_validation_csv(const ValidationResult& r, std::ostream& out) {
  out << "id,role,kind,model,format,hardware,devices,runtime,hw,precision,instrument,measured,predicted,unit,error,"
         "not_predicted,source_url\n";
  for (const auto& p : r.rows) {
    out << csv_field(p.row.id) << "," << p.row.role << "," << csv_field(p.kind) << "," << csv_field(p.row.model) << ","
        << csv_field(p.row.format) << "," << csv_field(p.row.hardware) << "," << p.row.devices << ","
        << csv_field(p.row.runtime) << "," << csv_field(p.hw) << "," << csv_field(p.precision) << ","
        << csv_field(p.instrument) << "," << text::printf("%.6g", p.row.measured) << ","
        << (p.predicted ? text::printf("%.6g", *p.predicted) : std::string()) << "," << csv_field(p.row.unit) << ","
        << (p.predicted ? text::printf("%.6f", p.error()) : std::string()) << "," << csv_field(p.skipped) << ","
        << csv_field(p.row.source_url) << "\n";
  }
}

}  // namespace moesim::reports
