// `moesim validate --table`'s output: the text report, JSON and CSV of a ValidationResult, and a fitted
// runtime profile as JSON.

#include <algorithm>

#include "moesim/calibrate/validation.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/table.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

using scenario::csv_field;
using scenario::metric;
using scenario::Table;

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
    out << "runtimes fitted to the calibration rows (batch-1 decode: time = weights' roofline / efficiency "
           "[the K-quant weights' x their factor, where the class has K-quant and two other formats' rows] + "
           "context roofline x factor + kernels x overhead [+ host time per token, where the class's kernel counts "
           "spread enough to split it]; then batch-1 prefill: GEMMs' compute-bound time / compute "
           "efficiency + attention FLOPs' compute-bound time x attention factor / compute efficiency; a class measured "
           "only at max load: time per output token = memory-bound part / bandwidth "
           "efficiency + compute-bound part / compute efficiency + sequence-steps x host time per sequence-step + "
           "engine steps x host time per step + the rest). Error ranges: "
           "leave-one-model-out (max load: one configuration out); a class of fewer than "
        << validation_detail::kMinConfigurations << " configurations takes the range pooled over all classes:\n";
    Table f({"hw", "runtime", "rows", "bandwidth efficiency", "super-block x", "context x", "per kernel us",
             "decode error range", "prefill rows", "compute efficiency", "prefill attention x", "prefill error range",
             "max-load rows", "per sequence-step us", "per step ms", "max-load error range"});
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
                 rp.super_block_read_factor ? text::printf("%.2f", x.super_block_read_factor) : std::string("-"),
                 max_load ? std::string("-") : text::printf("%.2f", x.context_factor),
                 max_load ? std::string("-") : text::printf("%.2f", x.kernel_overhead * 1e6),
                 max_load ? std::string("-")
                          : range(x.loo_errors, rp.error_low, rp.interval_source.empty() ? -1.0 : rp.error_high),
                 std::to_string(x.prefill_rows),
                 x.prefill_rows > 0 || max_load ? text::printf("%.3f", x.compute_efficiency) : std::string("-"),
                 rp.prefill_attention_factor ? text::printf("%.2f", x.prefill_attention_factor) : std::string("-"),
                 x.prefill_range ? range(x.prefill_loo_errors, x.prefill_range->first, x.prefill_range->second)
                                 : std::string("-"),
                 std::to_string(x.max_load_rows),
                 max_load ? text::printf("%.2f", x.sequence_overhead * 1e6) : std::string("-"),
                 max_load || !rp.step_overhead.source.empty() ? text::printf("%.2f", x.step_overhead * 1e3)
                                                              : std::string("-"),
                 x.max_load_range ? range(x.max_load_configurations >=
                                                  static_cast<std::int64_t>(validation_detail::kMinConfigurations)
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
  if (!r.transfers.empty()) {
    out << "transferred runtimes (for a machine with no dense rows: each figure the median of the runtime's fits "
           "above; error ranges of each fitted machine's dense rows predicted from the others' medians):\n";
    Table t({"runtime", "GPUs", "machines", "bandwidth efficiency", "per kernel us", "compute efficiency",
             "decode rows", "decode error range", "prefill rows", "prefill error range"});
    const auto range = [](const std::vector<double>& e) {
      const auto i = error_interval(e);
      return i ? pct(i->first) + " .. " + pct(i->second) : std::string("-");
    };
    for (const auto& x : r.transfers) {
      const auto& rp = x.profile;
      t.add_row({rp.runtime, rp.gpu_vendor, std::to_string(rp.transferred_from.size()),
                 rp.bandwidth_efficiency ? text::printf("%.3f", rp.bandwidth_efficiency->value) : std::string("-"),
                 rp.kernel_overhead ? text::printf("%.2f", rp.kernel_overhead->value.base() * 1e6) : std::string("-"),
                 rp.compute_efficiency ? text::printf("%.3f", rp.compute_efficiency->value) : std::string("-"),
                 std::to_string(x.decode_errors.size()), range(x.decode_errors),
                 std::to_string(x.prefill_errors.size()), range(x.prefill_errors)});
    }
    t.print_text(out);
    out << "\n";
  }
  Table s({"basis", "role", "kind", "hw family", "runtime", "rows", "median |err|", "p90 |err|", "within 10%",
           "within 25%", "median err", "worst x", "in interval"});
  for (const auto& e : r.summaries)
    s.add_row(
        {e.basis, e.role, e.kind, e.hw_family, e.runtime, std::to_string(e.n), pct_abs(e.median_abs),
         pct_abs(e.p90_abs), pct_abs(e.within_10), pct_abs(e.within_25), pct(e.median_signed),
         text::printf("%.2f", e.worst_ratio),
         e.with_interval > 0 ? pct_abs(e.coverage) + " of " + std::to_string(e.with_interval) : std::string("-")});
  s.print_text(out);
  if (!r.measured_devices.empty()) {
    out << "\nmeasured devices (mapping.json's measured_devices: the same rows with the GPU's figures from `moesim "
           "calibrate kernels --backend cuda` on it, nothing fitted; median error, median |error| and worst x):\n";
    Table m({"device profile", "role", "kind", "rows", "datasheet", "measured device", "fitted"});
    const auto cell = [](const ErrorSummary& e) {
      return e.n == 0
                 ? std::string("-")
                 : pct(e.median_signed) + ", " + pct_abs(e.median_abs) + ", " + text::printf("%.2fx", e.worst_ratio);
    };
    for (const auto& d : r.measured_devices)
      m.add_row({d.profile, d.role, d.kind, std::to_string(d.measured.n), cell(d.datasheet), cell(d.measured),
                 cell(d.fitted)});
    m.print_text(out);
  }
  if (!r.floors.empty()) {
    out << "\nfloors (--floors: each row priced with every byte its steps read once at the datasheet bandwidth and "
           "nothing else; a measurement above its floor read fewer bytes than the configuration moesim prices, "
           "such as an MoE benchmark whose routing touched fewer experts than the uniform trace):\n";
    Table f({"role", "kind", "rows", "measured above the floor"});
    for (const auto& c : r.floors) f.add_row({c.role, c.kind, std::to_string(c.rows), std::to_string(c.above)});
    f.print_text(out);
  }
  if (!r.skipped.empty()) {
    out << "\nnot predicted:\n";
    for (const auto& [why, n] : r.skipped) out << "  " << n << " rows: " << why << "\n";
  }
}

nlohmann::json validation_to_json(const ValidationResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : r.rows) {
    nlohmann::json j = {{"id", p.row.id},
                        {"role", p.row.role},
                        {"metric", p.row.metric},
                        {"measured", metric("measured", p.row.measured, p.row.unit)},
                        {"source_url", p.row.source_url}};
    if (p.predicted) {
      j["kind"] = p.kind;
      j["hw"] = p.hw;
      j["precision"] = p.precision;
      if (!p.kv_cache_dtype.empty()) j["kv_cache_dtype"] = p.kv_cache_dtype;
      // Its runtime version is older than the runtime's matrix-vector expert kernel (mapping.json).
      if (p.predates_expert_matvec) j["predates_expert_matvec"] = true;
      // Its serving-simulator runs replay a recorded routing trace (mapping.json's routing_traces).
      if (!p.routing_trace.empty() && p.instrument != "analytic")
        j["routing_trace"] = {{"file", p.routing_trace}, {"source", p.routing_trace_source}};
      j["instrument"] = p.instrument;
      j["predicted"] = metric("predicted", *p.predicted, p.row.unit);
      j["error"] = metric("error", p.error(), "fraction");
      if (p.fitted) {
        j["fitted"] = metric("fitted", *p.fitted, p.row.unit);
        j["fitted_error"] = metric("fitted_error", p.fitted_error(), "fraction");
      }
      if (p.interval) j["interval"] = {{"low", p.interval->first}, {"high", p.interval->second}, {"unit", p.row.unit}};
      if (p.floor) j["floor"] = metric("floor", *p.floor, p.row.unit);
      if (p.transferred) {
        j["transferred"] = metric("transferred", *p.transferred, p.row.unit);
        j["transferred_error"] = metric("transferred_error", p.transferred_error(), "fraction");
        if (p.transferred_interval)
          j["transferred_interval"] = {
              {"low", p.transferred_interval->first}, {"high", p.transferred_interval->second}, {"unit", p.row.unit}};
      }
      if (p.measured_predicted)
        j["measured_device"] = {{"profile", p.measured_device},
                                {"predicted", metric("predicted", *p.measured_predicted, p.row.unit)},
                                {"error", metric("error", p.measured_error(), "fraction")}};
    } else {
      j["not_predicted"] = p.skipped;
    }
    rows.push_back(j);
  }
  const auto summary = [](const ErrorSummary& e) {
    return nlohmann::json{{"basis", e.basis},
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
                          {"interval_coverage", metric("interval_coverage", e.coverage, "fraction of rows")}};
  };
  nlohmann::json sums = nlohmann::json::array();
  for (const auto& e : r.summaries) sums.push_back(summary(e));
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& d : r.measured_devices)
    measured.push_back({{"profile", d.profile},
                        {"role", d.role},
                        {"kind", d.kind},
                        {"datasheet", summary(d.datasheet)},
                        {"measured_device", summary(d.measured)},
                        {"fitted", summary(d.fitted)}});
  nlohmann::json fits = nlohmann::json::array();
  for (const auto& f : r.fits)
    fits.push_back(
        {{"hw", f.hw},
         {"runtime", f.runtime},
         {"calibration_rows", f.calibration_rows},
         {"efficiency", metric("bandwidth_efficiency", f.efficiency, "fraction of memory_bandwidth")},
         {"super_block_read_factor",
          metric("super_block_read_factor", f.super_block_read_factor, "x the time of the other formats' bytes")},
         {"context_factor", metric("context_factor", f.context_factor, "x the KV and attention roofline")},
         {"kernel_overhead", metric("kernel_overhead", f.kernel_overhead, "s")},
         {"loo_errors", f.loo_errors},
         {"compute_efficiency", metric("compute_efficiency", f.compute_efficiency, "fraction of peak FLOP/s")},
         {"prefill_attention_factor",
          metric("prefill_attention_factor", f.prefill_attention_factor, "x the attention FLOPs' compute roofline")},
         {"max_load_rows", f.max_load_rows},
         {"sequence_overhead", metric("sequence_overhead", f.sequence_overhead, "s")},
         {"step_overhead", metric("step_overhead", f.step_overhead, "s")},
         {"max_load_loo_errors", f.max_load_loo_errors},
         {"note", f.note}});
  nlohmann::json transfers = nlohmann::json::array();
  for (const auto& t : r.transfers)
    transfers.push_back({{"profile", runtime_profile_json(t.profile)},
                         {"decode_errors", t.decode_errors},
                         {"prefill_errors", t.prefill_errors}});
  nlohmann::json out = {{"table", r.table.string()},    {"rows", rows}, {"summaries", sums},
                        {"measured_devices", measured}, {"fits", fits}, {"transfers", transfers}};
  if (!r.floors.empty()) {
    nlohmann::json floors = nlohmann::json::array();
    for (const auto& c : r.floors)
      floors.push_back({{"role", c.role}, {"kind", c.kind}, {"rows", c.rows}, {"measured_above_floor", c.above}});
    out["floors"] = floors;
  }
  return out;
}

nlohmann::json runtime_profile_json(const model::RuntimeProfile& r) {
  nlohmann::json j = {{"id", r.id}, {"kind", "runtime"}, {"name", r.name}, {"runtime", r.runtime}, {"hw", r.hw}};
  // Each figure the profile gives; one it does not give leaves the node's own (model::apply_runtime).
  const auto duration = [](const model::Sourced<units::Duration>& d) {
    return nlohmann::json{{"value", text::printf("%.10gus", d.value.base() * 1e6)}, {"source", d.source}};
  };
  if (r.bandwidth_efficiency)
    j["bandwidth_efficiency"] = {{"value", r.bandwidth_efficiency->value}, {"source", r.bandwidth_efficiency->source}};
  if (r.super_block_read_factor)
    j["super_block_read_factor"] = {{"value", r.super_block_read_factor->value},
                                    {"source", r.super_block_read_factor->source}};
  if (r.attention_factor)
    j["attention_factor"] = {{"value", r.attention_factor->value}, {"source", r.attention_factor->source}};
  if (r.expert_token_tile)
    j["expert_token_tile"] = {{"value", static_cast<std::int64_t>(r.expert_token_tile->value)},
                              {"source", r.expert_token_tile->source}};
  if (r.expert_matvec_tokens)
    j["expert_matvec_tokens"] = {{"value", static_cast<std::int64_t>(r.expert_matvec_tokens->value)},
                                 {"source", r.expert_matvec_tokens->source}};
  if (r.expert_gemm_efficiency)
    j["expert_gemm_efficiency"] = {{"value", r.expert_gemm_efficiency->value},
                                   {"source", r.expert_gemm_efficiency->source}};
  if (r.dense_small_batch) {
    nlohmann::json passes = nlohmann::json::array();
    for (const double x : r.dense_small_batch->matvec_passes) passes.push_back(static_cast<std::int64_t>(x));
    j["dense_small_batch"] = {{"matvec_passes", passes}, {"source", r.dense_small_batch->source}};
    if (r.dense_small_batch->token_tile > 0)
      j["dense_small_batch"]["token_tile"] = static_cast<std::int64_t>(r.dense_small_batch->token_tile);
  }
  if (r.prefill_attention_factor)
    j["prefill_attention_factor"] = {{"value", r.prefill_attention_factor->value},
                                     {"source", r.prefill_attention_factor->source}};
  if (r.kernel_overhead) j["kernel_overhead"] = duration(*r.kernel_overhead);
  if (r.layer_overhead) j["layer_overhead"] = duration(*r.layer_overhead);
  // The serving host costs, when fitted (`calibrate fit --vllm-serving`); absent, they read as 0.
  if (!r.step_overhead.source.empty()) j["step_overhead"] = duration(r.step_overhead);
  if (!r.request_overhead.source.empty()) j["request_overhead"] = duration(r.request_overhead);
  if (!r.sequence_overhead.source.empty()) j["sequence_overhead"] = duration(r.sequence_overhead);
  if (r.native_dtypes) j["native_dtypes"] = {{"value", r.native_dtypes->value}, {"source", r.native_dtypes->source}};
  if (r.checkpoint_formats)
    j["checkpoint_formats"] = {{"value", r.checkpoint_formats->value}, {"source", r.checkpoint_formats->source}};
  if (r.compute_efficiency)
    j["compute_efficiency"] = {{"value", r.compute_efficiency->value}, {"source", r.compute_efficiency->source}};
  if (!r.transferred_from.empty()) j["transferred_from"] = r.transferred_from;
  if (!r.gpu_vendor.empty()) j["gpu_vendor"] = r.gpu_vendor;
  if (!r.interval_source.empty())
    j["prediction_interval"] = {
        {"low", r.error_low}, {"high", r.error_high}, {"rows", r.calibration_rows}, {"source", r.interval_source}};
  for (const auto& c : r.prediction_checks)
    j["prediction_check"].push_back({{"kind", c.kind},
                                     {"rows", c.rows},
                                     {"median_abs_error", c.median_abs_error},
                                     {"interval_coverage", c.interval_coverage},
                                     {"source", c.source}});
  return j;
}

void write_validation_csv(const ValidationResult& r, std::ostream& out) {
  out << "id,role,kind,model,format,hardware,devices,runtime,hw,precision,instrument,measured,predicted,unit,error,"
         "fitted,fitted_error,interval_low,interval_high,not_predicted,source_url,measured_device,"
         "measured_device_predicted,measured_device_error\n";
  for (const auto& p : r.rows) {
    out << csv_field(p.row.id) << "," << p.row.role << "," << csv_field(p.kind) << "," << csv_field(p.row.model) << ","
        << csv_field(p.row.format) << "," << csv_field(p.row.hardware) << "," << p.row.devices << ","
        << csv_field(p.row.runtime) << "," << csv_field(p.hw) << "," << csv_field(p.precision) << ","
        << csv_field(p.instrument) << "," << text::short_number(p.row.measured) << ","
        << (p.predicted ? text::short_number(*p.predicted) : std::string()) << "," << csv_field(p.row.unit) << ","
        << (p.predicted ? text::printf("%.6f", p.error()) : std::string()) << ","
        << (p.fitted ? text::short_number(*p.fitted) : std::string()) << ","
        << (p.fitted ? text::printf("%.6f", p.fitted_error()) : std::string()) << ","
        << (p.interval ? text::short_number(p.interval->first) : std::string()) << ","
        << (p.interval ? text::short_number(p.interval->second) : std::string()) << "," << csv_field(p.skipped) << ","
        << csv_field(p.row.source_url) << "," << csv_field(p.measured_device) << ","
        << (p.measured_predicted ? text::short_number(*p.measured_predicted) : std::string()) << ","
        << (p.measured_predicted ? text::printf("%.6f", p.measured_error()) : std::string()) << "\n";
  }
}

}  // namespace moesim::calibrate
