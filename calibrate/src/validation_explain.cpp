// `moesim validate --table DIR --fit --explain ID`: where one row's fitted figure spends its time.

#include <algorithm>
#include <cmath>
#include <ostream>

#include "moesim/calibrate/validation.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/table.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

using scenario::metric;
using scenario::Table;

namespace validation_detail {

namespace {

/// Seconds per token of `p`'s metric on `node` (the row's instrument, as its fitted figure is made).
double seconds_on(const ValidationPrediction& p, const model::NodeProfile& node) {
  const std::optional<double> f = figure(p, node);
  if (!f || !(*f > 0))
    throw UserError("--explain " + p.row.id + ": the row's instrument gives no figure with one of its costs changed");
  return 1.0 / *f;
}

std::string figure_of(const std::optional<model::Sourced<double>>& v, const char* name) {
  return v ? text::printf("%s %.3g", name, v->value) : std::string(name) + " (the node's own)";
}

std::string duration_of(const std::optional<model::Sourced<units::Duration>>& v, const char* name) {
  return v ? std::string(name) + " " + units::format(v->value) : std::string(name) + " none";
}

}  // namespace

model::NodeProfile floor_node(model::NodeProfile node) {
  model::DeviceSpec& s = node.devices;
  s.efficiency.reset();
  s.kernel_overhead.reset();
  s.layer_overhead.reset();
  s.attention_factor.reset();
  s.prefill_attention_factor.reset();
  s.super_block_read_factor.reset();
  s.step_overhead.reset();
  s.request_overhead.reset();
  s.sequence_overhead.reset();
  s.expert_token_tile.reset();
  s.expert_matvec_tokens.reset();
  s.expert_gemm_efficiency.reset();
  s.dense_small_batch.reset();
  s.dequant_overhead.clear();
  // A million times the peaks: no step is bound by its FLOPs (a 1 PFLOP/s chip's FLOPs at 1 EFLOP/s).
  for (auto& [dtype, peak] : s.peak_flops) peak.value = 1e6 * peak.value;
  return node;
}

void explain_row(ValidationResult& r, const Mapping& m, const std::string& id) {
  std::size_t at = r.rows.size();
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (r.rows[i].row.id == id) at = i;
  if (at == r.rows.size())
    throw UserError("--explain " + id + ": " + r.table.string() +
                    " has no row with that id (the first column; `--rows` lists the predicted ones)");
  const ValidationPrediction& p = r.rows[at];
  if (!p.predicted)
    throw UserError("--explain " + id + ": the row is not predicted (" + p.skipped + "); explain a predicted row");
  const auto fit = std::find_if(r.fits.begin(), r.fits.end(),
                                [&](const ValidationFit& f) { return f.hw == p.hw && f.runtime == p.row.runtime; });
  if (!p.fitted || fit == r.fits.end())
    throw UserError("--explain " + id + ": the row has no fitted figure (its class, " + p.hw + " with " +
                    p.row.runtime +
                    ", has no calibration rows of its kind to fit the runtime to); explain a row "
                    "`--rows` prints with a fitted figure");
  const model::RuntimeProfile& rp = fit->profile;
  // The node the fitted figure was made on (apply_fit): the base runtime, then the fitted one.
  const model::NodeProfile node = model::apply_runtime(base_node(m, p.row.runtime, p.hw), rp);
  RowExplanation e;
  e.row = at;
  e.profile = rp.id;
  e.seconds = seconds_on(p, node);
  const model::DeviceSpec& d = node.devices;
  // Halving a rate: the part bound by it doubles, the rest stays.
  const auto halved = [&](auto&& change) {
    model::NodeProfile n = node;
    change(n.devices);
    return seconds_on(p, n) - e.seconds;
  };
  // Removing a cost: the time it took.
  const auto removed = [&](auto&& change) {
    model::NodeProfile n = node;
    change(n.devices);
    return e.seconds - seconds_on(p, n);
  };
  // The KV-cache reads stream at the whole bandwidth over attention_factor (model::LayerCosts): doubling
  // the factor doubles them alone; halving the bandwidth doubles them and every weight and activation read.
  const double kv = halved([](model::DeviceSpec& s) {
    const double a = s.attention_factor ? s.attention_factor->value : 1.0;
    s.attention_factor = model::Sourced<double>{2.0 * a, "explain"};
  });
  const double memory = halved([](model::DeviceSpec& s) {
    s.memory_bandwidth = model::Sourced<units::Bandwidth>{0.5 * s.memory_bandwidth->value, "explain"};
  });
  const double compute = halved([](model::DeviceSpec& s) {
    for (auto& [dtype, peak] : s.peak_flops) peak.value = 0.5 * peak.value;
  });
  e.parts.push_back({"memory-bound: weights and activations",
                     figure_of(rp.bandwidth_efficiency, "bandwidth_efficiency"), memory - kv});
  e.parts.push_back(
      {"compute-bound: matmuls and attention FLOPs", figure_of(rp.compute_efficiency, "compute_efficiency"), compute});
  e.parts.push_back({"KV-cache reads", figure_of(d.attention_factor, "attention_factor"), kv});
  e.parts.push_back(
      {"kernel launches and per-layer host time",
       duration_of(d.kernel_overhead, "kernel_overhead") + ", " + duration_of(d.layer_overhead, "layer_overhead"),
       removed([](model::DeviceSpec& s) {
         s.kernel_overhead.reset();
         s.layer_overhead.reset();
       })});
  e.parts.push_back({"host time per engine step", duration_of(d.step_overhead, "step_overhead"),
                     removed([](model::DeviceSpec& s) { s.step_overhead.reset(); })});
  e.parts.push_back({"host time per sequence and step", duration_of(d.sequence_overhead, "sequence_overhead"),
                     removed([](model::DeviceSpec& s) { s.sequence_overhead.reset(); })});
  e.parts.push_back({"host time per request", duration_of(d.request_overhead, "request_overhead"),
                     removed([](model::DeviceSpec& s) { s.request_overhead.reset(); })});
  e.rest = e.seconds;
  for (const RowPart& part : e.parts) e.rest -= part.seconds;
  const model::NodeProfile bare = floor_node(node);
  e.floor_seconds = seconds_on(p, bare);
  e.datasheet_bandwidth = bare.bandwidth().value.base();
  r.explanation = std::move(e);
}

}  // namespace validation_detail

namespace {

/// A figure as a reader takes it in: whole above 1000 (no exponent), else four significant digits.
std::string plain(double v) { return std::fabs(v) >= 1000 ? text::printf("%.0f", v) : text::printf("%.4g", v); }

}  // namespace

void print_explanation_text(const ValidationResult& r, std::ostream& out) {
  const RowExplanation& e = *r.explanation;
  const ValidationPrediction& p = r.rows[e.row];
  const std::string unit = p.kind == "max-load"            ? "output token"
                           : p.kind.starts_with("prefill") ? "prompt token"
                                                           : "generated token";
  out << "row        " << p.row.id << " (" << r.table.string() << " line " << p.row.line << ")\n"
      << "runs       " << p.model << " at " << p.precision << " on " << p.hw << " (" << p.row.devices
      << (p.row.devices == 1 ? " device" : " devices") << "), " << p.row.runtime << ", " << p.kind << " by "
      << (p.instrument == "analytic" ? "the analytic model" : "the serving simulator") << "\n"
      << (p.routing_trace.empty() || p.instrument == "analytic"
              ? std::string()
              : "routing    " + p.routing_trace + " (" + p.routing_trace_source + ")\n")
      << "measured   " << plain(p.row.measured) << " " << p.row.unit << " (" << p.row.source_url << ")\n"
      << "fitted     " << plain(*p.fitted) << " " << p.row.unit
      << (p.interval ? " (" + plain(p.interval->first) + "-" + plain(p.interval->second) + ")" : std::string())
      << " with " << e.profile << ", " << text::printf("%+.1f%%", 100.0 * p.fitted_error())
      << " against the measurement\n"
      << "time       " << units::format(units::seconds(e.seconds)) << " per " << unit << "\n\n";
  Table t({"part", "time per " + unit, "share", "the profile's figure"});
  for (const RowPart& part : e.parts)
    t.add_row({part.name, units::format(units::seconds(part.seconds)),
               text::printf("%.1f%%", 100.0 * part.seconds / e.seconds), part.cost});
  t.add_row({"rest: collectives, pipeline transfers, overlaps", units::format(units::seconds(e.rest)),
             text::printf("%.1f%%", 100.0 * e.rest / e.seconds), "-"});
  t.print_text(out);
  out << "\nA memory, compute or KV part is the time the figure gains when that rate is halved (the part\n"
         "bound by it); a host or kernel part is the time it loses when that cost is 0. The rest is what none\n"
         "of them claims, below 0 where kernels sit near the roofline's ridge.\n";
  const double measured_seconds = 1.0 / p.row.measured;
  out << "\nfloor      " << units::format(units::seconds(e.floor_seconds)) << " per " << unit
      << ": every byte the row's steps read, once, at the datasheet's "
      << units::format(units::bytes_per_second(e.datasheet_bandwidth))
      << ", with no compute, kernel or host time; the measurement takes "
      << text::printf("%.2f", measured_seconds / e.floor_seconds) << "x it\n";
  if (measured_seconds < e.floor_seconds)
    out << "           The measurement is faster than the floor: its run read fewer bytes than the model prices.\n"
           "           For an MoE model at several tokens a step, its steps touched fewer distinct experts than\n"
           "           the uniform routing trace gives (llama-bench and llama-batched-bench feed random token\n"
           "           ids); else the weights sat in a cache the datasheet bandwidth does not count.\n";
}

nlohmann::json explanation_to_json(const ValidationResult& r) {
  const RowExplanation& e = *r.explanation;
  const ValidationPrediction& p = r.rows[e.row];
  nlohmann::json parts = nlohmann::json::array();
  for (const RowPart& part : e.parts)
    parts.push_back({{"name", part.name}, {"cost", part.cost}, {"time", metric("time", part.seconds, "s")}});
  parts.push_back({{"name", "rest"}, {"cost", "-"}, {"time", metric("time", e.rest, "s")}});
  nlohmann::json fitted = metric("fitted", *p.fitted, p.row.unit);
  if (p.interval) {
    fitted["low"] = p.interval->first;
    fitted["high"] = p.interval->second;
  }
  return {{"explanation",
           {{"id", p.row.id},
            {"kind", p.kind},
            {"instrument", p.instrument},
            {"hw", p.hw},
            {"runtime", p.row.runtime},
            {"profile", e.profile},
            {"measured", metric("measured", p.row.measured, p.row.unit)},
            {"fitted", fitted},
            {"time_per_token", metric("time_per_token", e.seconds, "s")},
            {"parts", parts},
            {"floor",
             {{"time_per_token", metric("time_per_token", e.floor_seconds, "s")},
              {"datasheet_bandwidth", metric("datasheet_bandwidth", e.datasheet_bandwidth, "B/s")},
              {"measured_over_floor", (1.0 / p.row.measured) / e.floor_seconds}}}}}};
}

}  // namespace moesim::calibrate
