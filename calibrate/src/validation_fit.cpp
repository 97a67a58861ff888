// `moesim validate --table --fit`: each (node profile, runtime) class's runtime fitted to its calibration
// rows (batch-1 decode and prefill, or max load), its rows priced with it, and their intervals.

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "moesim/calibrate/lsq.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/text.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

namespace validation_detail {

namespace {

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
  node.devices.step_overhead.reset();
  return node;
}

/// One decode-b1 row's time split by the shared cost model into the costs a runtime scales: the weights'
/// roofline (at an empty context), the KV cache and attention over the context (the roofline's growth from
/// context 0 to the row's), the kernels launched per token (their count), and the host's time per token
/// (one engine step a token at batch 1: the runtime's step_overhead, whatever the model).
struct DecodeTerms {
  double weights = 0, context = 0, kernels = 0;
  /// the part of `weights` spent on tensors stored in GGUF super-blocks (model::super_block_format)
  double super_block = 0;
  std::string configuration;  ///< the row's model and format (configuration(), below)
};

DecodeTerms decode_terms(const ValidationPrediction& p, const model::NodeProfile& base) {
  const model::NodeProfile roof = with_runtime(base, 1.0, 0.0, "roofline");
  const model::NodeProfile unit = with_runtime(base, 1.0, 1e-6, "one microsecond per kernel");
  model::NodeProfile slow_super_blocks = roof;
  slow_super_blocks.devices.super_block_read_factor = model::Sourced<double>{2.0, "two-point split"};
  DecodeTerms t;
  const double at_context = 1.0 / decode_b1(p, roof);
  t.weights = 1.0 / decode_b1(p, roof, 0);
  t.context = std::max(0.0, at_context - t.weights);
  t.kernels = (1.0 / decode_b1(p, unit) - at_context) / 1e-6;
  t.super_block = std::clamp(1.0 / decode_b1(p, slow_super_blocks, 0) - t.weights, 0.0, t.weights);
  return t;
}

/// The fitted runtime's time for `t`: weights / efficiency (the super-block ones × their read factor) +
/// context × its factor + kernels × overhead + the host's time per token.
double fitted_seconds(const ValidationFit& f, const DecodeTerms& t) {
  return (t.weights + t.super_block * (f.super_block_read_factor - 1.0)) / f.efficiency + t.context * f.context_factor +
         t.kernels * f.kernel_overhead + f.step_overhead;
}

/// Whether a class's decode rows can split super-block weights' reads from the others' (DeviceSpec::
/// super_block_read_factor): configurations that read mostly super-block weights (K-quants), and at least
/// two that read mostly others (F16, Q4_0, Q8_0, ...), which fix the bandwidth efficiency and the cost per
/// kernel between them; the super-block ones then say how much slower their reads are. With one other
/// configuration the efficiency, the cost per kernel and the factor trade against each other (two Llama 3
/// 8B formats on the RTX 3090 gave an efficiency of 1.3), so one efficiency prices every format, as before.
bool formats_separable(const std::vector<DecodeTerms>& terms) {
  std::set<std::string> super, other;
  for (const auto& t : terms) {
    if (!(t.weights > 0)) continue;
    (t.super_block > 0.5 * t.weights ? super : other).insert(t.configuration);
  }
  return !super.empty() && other.size() >= 2;
}

/// The kernels per token of a class's configurations must differ by this factor (largest over smallest)
/// for its rows to split a host time per token from the cost per kernel: rows of models with the same
/// layers and kernels (Llama 3 8B in two formats) pay both the same number of times per token.
constexpr double kMinKernelSpread = 1.25;

/// The context's share of a class's decode rows (of their time at the roofline and 1 us a kernel) must vary
/// this much (max − min) for the rows to fix the KV cache's factor; a leave-one-out fit whose remaining rows
/// do not is not asked for the held-out rows after a depth. Two points: Llama 3 8B F16 after 8k tokens
/// spends 6.5% of its roofline on the context, rows at a 64-token context 0.1%.
constexpr double kMinContextSpread = 0.02;

/// Whether the rows fix the KV cache's factor: its share of their time must spread (kMinContextSpread)
/// against the weights' and the kernels' together, and against the kernels' alone. Rows of one model after
/// one depth in several formats pass the first (the weights' bytes change with the format) but not the
/// second: their context and kernel columns are the same pair of numbers in every row, so any split of that
/// time between the two fits them equally well.
bool context_separable(const std::vector<DecodeTerms>& terms) {
  double lo = 1, hi = 0, lo_k = 1, hi_k = 0;
  for (const auto& t : terms) {
    const double all = t.weights + t.context + t.kernels * 1e-6;
    const double share = all > 0 ? t.context / all : 0.0;
    lo = std::min(lo, share);
    hi = std::max(hi, share);
    const double beside_kernels = t.context + t.kernels * 1e-6;
    const double share_k = beside_kernels > 0 ? t.context / beside_kernels : 0.0;
    lo_k = std::min(lo_k, share_k);
    hi_k = std::max(hi_k, share_k);
  }
  return hi - lo >= kMinContextSpread && hi_k - lo_k >= kMinContextSpread;
}

/// Whether the rows' kernels per token spread enough (kMinKernelSpread) to fit a host time per token.
bool host_separable(const std::vector<DecodeTerms>& terms) {
  if (terms.empty()) return false;
  double lo = terms.front().kernels, hi = lo;
  for (const auto& t : terms) {
    lo = std::min(lo, t.kernels);
    hi = std::max(hi, t.kernels);
  }
  return lo > 0 && hi / lo >= kMinKernelSpread;
}

/// x >= 0 minimising Σ ((x·terms_i − time_i) / time_i)²: relative errors, so that a 70B model's seconds do
/// not outweigh an 8B model's milliseconds (nonnegative_least_squares over the three costs).
/// With `kernels` false the cost per kernel is left at 0: rows of one configuration (a model in a format at
/// several context depths) read the same bytes with the same kernels, so the two columns are one and the
/// rows cannot split them. With `host` (host_separable) the host's time per token is a fourth column;
/// without it, it stays 0 and the cost per kernel takes it. The KV cache's factor is a column only where the
/// rows' context share varies (context_separable); rows all after one depth (mlx-lm's BENCHMARKS.md: every
/// format after the same 2048-token prompt) cannot tell the KV reads from the weights' and the kernels', so
/// the factor stays 1 (the KV cache read at the full bandwidth, the cost model's own roofline) and its time
/// is taken off the rows before the fit, rather than left to the solver, which put it at 0 for those rows and
/// so priced the context as free at any depth.
/// With `kernels` false and `fixed_kernel_overhead` above 0, the kernels cost that much each (a cost the class
/// borrows from its runtime's other fits) and their time is taken off the rows before the fit.
ValidationFit solve(const std::vector<DecodeTerms>& terms, const std::vector<double>& time, bool kernels = true,
                    bool host = false, double fixed_kernel_overhead = 0) {
  host = host && kernels;
  // With rows of both kinds of format, the super-block weights' reads are a column of their own: its
  // coefficient over the others' is their read factor.
  const bool formats = formats_separable(terms);
  const bool fit_context = context_separable(terms);
  const std::size_t context = formats ? 2 : 1;
  const std::size_t kernel = context + (fit_context ? 1 : 0), host_col = kernel + (kernels ? 1 : 0);
  Matrix a(terms.size(), host_col + (host ? 1 : 0));
  std::vector<double> rhs(terms.size(), 1.0);
  for (std::size_t i = 0; i < terms.size(); ++i) {
    a(i, 0) = (terms[i].weights - (formats ? terms[i].super_block : 0.0)) / time[i];
    if (formats) a(i, 1) = terms[i].super_block / time[i];
    if (fit_context)
      a(i, context) = terms[i].context / time[i];
    else
      rhs[i] -= terms[i].context / time[i];
    if (kernels)
      a(i, kernel) = terms[i].kernels / time[i];
    else
      rhs[i] -= terms[i].kernels * fixed_kernel_overhead / time[i];
    if (host) a(i, host_col) = 1.0 / time[i];
  }
  const std::vector<double> x = nonnegative_least_squares(a, rhs);
  ValidationFit f;
  f.efficiency = x[0] > 0 ? 1.0 / x[0] : 1.0;
  if (formats && x[0] > 0 && x[1] > 0) f.super_block_read_factor = x[1] / x[0];
  f.context_factor = fit_context ? x[context] : 1.0;
  f.context_fitted = fit_context;
  f.kernel_overhead = kernels ? x[kernel] : fixed_kernel_overhead;
  f.step_overhead = host ? x[host_col] : 0.0;
  if (x[0] == 0)
    f.note =
        "the fit gives the weights' reads no weight (the other costs explain the rows better): their "
        "efficiency is undetermined and kept at 1";
  return f;
}

/// The configuration a row measures (model and weight format): leave-one-out holds out a configuration
/// with all its rows, so that each is predicted by a fit that never saw that model in that format (rows of
/// one configuration at several context depths or lengths share its errors).
std::string configuration(const ValidationPrediction& p) { return p.model + " " + p.precision; }

/// Leave-one-out: for each held-out unit of `cal`, `predict_held_out(held)` gives the predicted / measured − 1
/// of its rows from a fit without them. Fewer than `min_configs` configurations: none (the class alone cannot
/// say how far a fit carries to a configuration it has not seen). With `by_model` and two models or more the
/// unit is a model, in every format it was measured in: a MoE row asks the fit for a model it has never seen,
/// and a held-out configuration's sibling formats would have told the fit most of what it is asked (with the
/// K-quants' read factor, the RTX 4090's and the M2 Ultra's held-out configurations came within -8% .. +11%
/// while their MoE rows spread over -10% .. +15%). A class of one model holds out a configuration.
template <class Predict>
std::vector<double> loo_by_configuration(const std::vector<ValidationPrediction*>& cal, std::size_t min_configs,
                                         Predict predict_held_out, bool by_model = false) {
  std::set<std::string> configs, models;
  for (const auto* p : cal) {
    configs.insert(configuration(*p));
    models.insert(p->model);
  }
  by_model = by_model && models.size() >= 2;
  const auto unit = [&](const ValidationPrediction& p) { return by_model ? p.model : configuration(p); };
  std::vector<double> errors;
  if (configs.size() < min_configs) return errors;
  const std::set<std::string>& units = by_model ? models : configs;
  for (const auto& c : units) {
    std::vector<bool> held(cal.size());
    for (std::size_t i = 0; i < cal.size(); ++i) held[i] = unit(*cal[i]) == c;
    for (double e : predict_held_out(held)) errors.push_back(e);
  }
  return errors;
}

/// Prefill's time split by a compute efficiency e and an attention factor f: T(e, f) = rest + gemm / e +
/// attention · f / e, from three runs of the serving simulator ((e, f) = (1, 1), (1/2, 1) and (1, 2): their
/// differences are the compute-bound parts). Exact where a kernel group stays compute-bound in all three,
/// the case of a prompt of hundreds of tokens.
struct PrefillTerms {
  double rest = 0, gemm = 0, attention = 0;
};

model::NodeProfile with_compute_efficiency(model::NodeProfile node, double e, double attention_factor,
                                           const std::string& source) {
  model::EfficiencyTable t = node.devices.efficiency.value_or(model::EfficiencyTable{});
  t.compute.assign(1, {units::bytes(0), units::bytes(1e18), e, 0});
  if (t.source.empty()) t.source = source;
  node.devices.efficiency = t;
  node.devices.prefill_attention_factor = model::Sourced<double>{attention_factor, source};
  return node;
}

/// The attention's share of a class's prefill rows (of their compute-bound time at the peak) must vary this
/// much (max − min) for the rows to split the attention FLOPs from the GEMMs; below it the factor stays 1.
constexpr double kMinAttentionSpread = 0.10;

bool attention_separable(const std::vector<PrefillTerms>& terms) {
  double lo = 1, hi = 0;
  for (const auto& t : terms) {
    const double share = t.gemm + t.attention > 0 ? t.attention / (t.gemm + t.attention) : 0.0;
    lo = std::min(lo, share);
    hi = std::max(hi, share);
  }
  return hi - lo >= kMinAttentionSpread;
}

/// (x, z) >= 0 minimising Σ ((rest_i + x·gemm_i + z·attention_i − time_i) / time_i)²: x = 1 / e, z = f / e.
/// With `attention` false, z = x (f = 1): one column, the whole compute-bound time.
std::pair<double, double> solve_prefill(const std::vector<PrefillTerms>& terms, const std::vector<double>& time,
                                        const std::vector<bool>& skip, bool attention) {
  std::vector<std::size_t> used;
  for (std::size_t i = 0; i < terms.size(); ++i)
    if (skip.empty() || !skip[i]) used.push_back(i);
  Matrix a(used.size(), attention ? 2 : 1);
  std::vector<double> b(used.size());
  for (std::size_t r = 0; r < used.size(); ++r) {
    const std::size_t i = used[r];
    a(r, 0) = (terms[i].gemm + (attention ? 0.0 : terms[i].attention)) / time[i];
    if (attention) a(r, 1) = terms[i].attention / time[i];
    b[r] = 1.0 - terms[i].rest / time[i];
  }
  const std::vector<double> x = used.empty() ? std::vector<double>(2, 1.0) : nonnegative_least_squares(a, b);
  const double inverse_e = std::max(x[0], 1e-3);
  // f below 0.1 (attention FLOPs ten times faster than the GEMMs) is no kernel: the fit's noise.
  return {inverse_e, attention ? std::max(x[1], 0.1 * inverse_e) : inverse_e};
}

/// `base` with the runtime `rp` applied at bandwidth efficiency `b` and compute efficiency `c`.
model::NodeProfile with_efficiencies(const model::NodeProfile& base, model::RuntimeProfile rp, double b, double c) {
  rp.bandwidth_efficiency = model::Sourced<double>{b, "max-load split"};
  rp.compute_efficiency = model::Sourced<double>{c, "max-load split"};
  return model::apply_runtime(base, rp);
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

/// Splits the dense max-load rows of a (node profile, runtime) class with no batch-1 decode rows into `out`
/// for fit_max_load_jointly (the runtime's bandwidth and compute efficiency on this node and its host times
/// per engine step and per sequence and step; the rest of the node profile as shipped).
void fit_max_load(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const model::NodeProfile& base,
                  const std::optional<model::RuntimeProfile>& base_rt, MaxLoadClass* out) {
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
  std::vector<ValidationPrediction*> cal;
  std::vector<MaxLoadTerms> terms;
  std::vector<double> time;
  for (auto* p : rows) {
    if (p->row.role != "calibration" || p->kind != "max-load" || !p->predicted) continue;
    const std::optional<MaxLoadTerms> t = max_load_terms(*p, base, rp);
    if (!t) continue;
    cal.push_back(p);
    terms.push_back(*t);
    time.push_back(1.0 / p->row.measured);
  }
  fit.max_load_rows = static_cast<std::int64_t>(cal.size());
  std::set<std::string> configs;
  for (const auto* p : cal) configs.insert(configuration(*p));
  fit.max_load_configurations = static_cast<std::int64_t>(configs.size());
  if (out) {
    out->cal = std::move(cal);
    out->terms = std::move(terms);
    out->time = std::move(time);
  }
}

/// The fitted max-load figures of one class: inverse bandwidth and compute efficiency, and the runtime's
/// step_overhead and sequence_overhead (s), shared by its classes.
struct JointFit {
  std::vector<std::array<double, 2>> inverse;  ///< per class of the group
  double sequence_overhead = 0;
  double step_overhead = 0;
};

/// x >= 0 minimising Σ ((bandwidth_i / b_k + compute_i / c_k + sequences_i · s + steps_i · h + rest_i −
/// time_i) / time_i)² over every row of the group's classes k (nonnegative_least_squares on relative errors,
/// as solve() for batch-1 decode) but those `held` (of class `held_class`): each class its own efficiencies,
/// one s and one h for the runtime. The columns separate on the perf-overview's datasets: the bandwidth part
/// per output token falls with the batch and grows with the context, the compute part grows with the prompt
/// per output token (2048/128 against 128/2048), the sequences part is about one step per output token, the
/// steps part one over the batch; the host times are the runtime's own, so the classes of small models
/// (where they are a large share) fix them for those of large ones (where they are not): the weights a
/// class reads per step also fall with the batch, but differ from class to class, where h is shared.
JointFit solve_joint(const std::vector<MaxLoadClass*>& group, std::size_t held_class, const std::vector<bool>& held) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < group.size(); ++k)
    for (std::size_t i = 0; i < group[k]->cal.size(); ++i)
      if (k != held_class || held.empty() || !held[i]) ++n;
  const std::size_t shared = 2 * group.size();
  Matrix a(n, shared + 2);
  std::vector<double> b(n);
  std::size_t row = 0;
  for (std::size_t k = 0; k < group.size(); ++k) {
    const MaxLoadClass& c = *group[k];
    for (std::size_t i = 0; i < c.cal.size(); ++i) {
      if (k == held_class && !held.empty() && held[i]) continue;
      a(row, 2 * k) = c.terms[i].bandwidth / c.time[i];
      a(row, 2 * k + 1) = c.terms[i].compute / c.time[i];
      a(row, shared) = c.terms[i].sequences / c.time[i];
      a(row, shared + 1) = c.terms[i].steps / c.time[i];
      b[row] = 1.0 - c.terms[i].rest / c.time[i];
      ++row;
    }
  }
  const std::vector<double> x = nonnegative_least_squares(a, b);
  JointFit f;
  for (std::size_t k = 0; k < group.size(); ++k) f.inverse.push_back({x[2 * k], x[2 * k + 1]});
  f.sequence_overhead = x[shared];
  f.step_overhead = x[shared + 1];
  return f;
}

double max_load_seconds(const JointFit& f, std::size_t k, const MaxLoadTerms& t) {
  return t.bandwidth * f.inverse[k][0] + t.compute * f.inverse[k][1] + t.sequences * f.sequence_overhead +
         t.steps * f.step_overhead + t.rest;
}

/// Writes class `k`'s share of the group's joint fit into its ValidationFit and runtime profile, with the
/// leave-one-configuration-out errors of its rows (each configuration's rows predicted by the joint fit
/// without them).
void finish_max_load(const std::vector<MaxLoadClass*>& group, std::size_t k, const JointFit& all, ValidationFit& fit,
                     std::size_t group_rows) {
  const MaxLoadClass& c = *group[k];
  model::RuntimeProfile& rp = fit.profile;
  fit.efficiency = efficiency_of(all.inverse[k][0], 1.0);
  fit.compute_efficiency = efficiency_of(all.inverse[k][1], 1.0);
  fit.sequence_overhead = all.sequence_overhead;
  fit.step_overhead = all.step_overhead;
  if (all.inverse[k][0] == 0 || all.inverse[k][1] == 0)
    fit.note = "the max-load rows leave an efficiency undetermined (the fit gives its part no weight): kept at 1";
  if (fit.efficiency > 1.0)
    fit.note += std::string(fit.note.empty() ? "" : "; ") +
                "bandwidth efficiency above 1: the simulated max-load rows spend more time than measured outside the "
                "memory-bound part (collectives, compute), and the fit takes it out of the part it may scale";
  // From two configurations each one's rows are out of sample for the fit of the other: enough for the
  // pooled range of the classes too small for their own (apply_fit), as the MoE rows are for every fit.
  fit.max_load_loo_errors = loo_by_configuration(c.cal, 2, [&](const std::vector<bool>& held) {
    const JointFit xi = solve_joint(group, k, held);
    std::vector<double> e;
    for (std::size_t j = 0; j < c.cal.size(); ++j)
      if (held[j]) e.push_back(c.time[j] / max_load_seconds(xi, k, c.terms[j]) - 1.0);
    return e;
  });
  std::string ids;
  for (const auto* p : c.cal) ids += (ids.empty() ? "" : ", ") + p->row.id;
  const std::string source =
      "fitted by `moesim validate --table validation --fit` to " + std::to_string(c.cal.size()) +
      " dense max-load output-throughput rows of validation/measurements.csv (" + ids +
      "), time per output token = bandwidth part / efficiency + compute part / compute "
      "efficiency + sequence-steps per output token x sequence_overhead + engine steps per output "
      "token x step_overhead + the rest, each part from the serving simulator";
  // A runtime profile's efficiencies are at most 1.5 (model::load_runtime refuses more, as a figure no
  // runtime reaches): beyond it the fit is saying the simulator's other costs are high, and the profile
  // (which prices every fitted row) keeps the bound.
  constexpr double kMaxEfficiency = 1.5;
  if (fit.efficiency > kMaxEfficiency || fit.compute_efficiency > kMaxEfficiency)
    fit.note += std::string(fit.note.empty() ? "" : "; ") + "the runtime profile holds its efficiencies at 1.5";
  rp.bandwidth_efficiency = model::Sourced<double>{std::min(fit.efficiency, kMaxEfficiency), source};
  rp.compute_efficiency = model::Sourced<double>{std::min(fit.compute_efficiency, kMaxEfficiency), source};
  const auto host_source = [&](const std::string& what) {
    return "fitted by `moesim validate --table validation --fit` jointly to the " + std::to_string(group_rows) +
           " dense max-load rows of " + std::to_string(group.size()) + " (node profile, " + fit.runtime +
           ") classes of validation/measurements.csv, each class with its own two efficiencies and the runtime's "
           "two host times, per engine step and per sequence and engine step (the runtime's, whatever the GPU), "
           "this one " +
           what + " (the class's own share: " + ids + ")";
  };
  rp.sequence_overhead = model::Sourced<units::Duration>{units::seconds(all.sequence_overhead),
                                                         host_source("per sequence and engine step")};
  // The engine loop's own time each step, whatever its batch: the executor schedules the batch, prepares
  // its inputs, launches the step and reads back its tokens (v1.0's PyTorch backend: class PyExecutor in
  // tensorrt_llm/_torch/pyexecutor/py_executor.py), as vLLM's engine core does (ServingEngine in
  // sim/src/serving.cpp).
  rp.step_overhead = model::Sourced<units::Duration>{
      units::seconds(all.step_overhead),
      host_source("per engine step") +
          "; from max-load rows alone, whose engine steps take tens to hundreds of ms: no batch-1 or "
          "low-concurrency row of this runtime in the table tests it where it would be a large share of a step"};
  rp.calibration_rows = fit.max_load_rows;
}

}  // namespace

/// Fits the runtime on one (node profile, runtime) class from its calibration rows (dense models only).
/// Batch-1 decode fits the three costs of DecodeTerms (formats and sizes vary the bytes at a given kernel
/// count, context depths vary the attention alone); batch-1 prefill then fits the compute efficiency with
/// those fixed. Every row of the class (prefill and batched decode too) is then priced with the fitted
/// runtime. Intervals come from leave-one-configuration-out errors; `pooled` stands in for a class with too
/// few configurations to have its own.
std::optional<MaxLoadTerms> max_load_terms(const ValidationPrediction& p, const model::NodeProfile& base,
                                           const model::RuntimeProfile& rp) {
  std::optional<double> t11, tb, tc;
  double sequences = 0, steps = 0;
  try {
    t11 = max_load_throughput(p, with_efficiencies(base, rp, 1.0, 1.0), &sequences, &steps);
    tb = max_load_throughput(p, with_efficiencies(base, rp, 0.5, 1.0));
    tc = max_load_throughput(p, with_efficiencies(base, rp, 1.0, 0.5));
  } catch (const UserError&) {
    return std::nullopt;
  }
  if (!t11 || !tb || !tc) return std::nullopt;
  MaxLoadTerms t;
  t.bandwidth = std::max(0.0, 1.0 / *tb - 1.0 / *t11);
  t.compute = std::max(0.0, 1.0 / *tc - 1.0 / *t11);
  t.sequences = sequences;
  t.steps = steps;
  t.rest = std::max(0.0, 1.0 / *t11 - t.bandwidth - t.compute);
  return t;
}

void fit_class(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m, MaxLoadClass* max_load,
               const BorrowedKernelCost* borrowed) {
  model::NodeProfile base = base_node(m, fit.runtime, fit.hw);
  if (auto nd = m.native_dtypes.find(fit.runtime); nd != m.native_dtypes.end()) {
    fit.profile.native_dtypes = nd->second;
    base.devices.native_dtypes = nd->second;
  }
  if (auto tile = m.expert_token_tile.find(fit.runtime); tile != m.expert_token_tile.end()) {
    fit.profile.expert_token_tile = tile->second;
    base.devices.expert_token_tile = tile->second;
  }
  if (auto mv = m.expert_matvec_tokens.find(fit.runtime); mv != m.expert_matvec_tokens.end()) {
    fit.profile.expert_matvec_tokens = mv->second;
    base.devices.expert_matvec_tokens = mv->second;
  }
  if (auto g = m.expert_gemm_efficiency.find(fit.runtime); g != m.expert_gemm_efficiency.end()) {
    fit.profile.expert_gemm_efficiency = g->second;
    base.devices.expert_gemm_efficiency = g->second;
  }
  if (auto d = m.dense_small_batch.find(fit.runtime); d != m.dense_small_batch.end()) {
    fit.profile.dense_small_batch = d->second;
    base.devices.dense_small_batch = d->second;
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
    terms.back().configuration = configuration(*p);
    time.push_back(1.0 / p->row.measured);
  }
  fit.calibration_rows = static_cast<std::int64_t>(cal.size());
  if (cal.empty()) {
    // A runtime measured only at max load (TensorRT-LLM's perf-overview): its two efficiencies from those.
    fit_max_load(rows, fit, base, base_runtime(m, fit.runtime, fit.hw), max_load);
    return;
  }
  std::set<std::string> configs;
  for (const auto* p : cal) configs.insert(configuration(*p));
  fit.configurations = static_cast<std::int64_t>(configs.size());
  const bool kernels = configs.size() > 1;
  // A host time per token is a fourth figure: only from as many configurations as an interval needs, whose
  // kernel counts spread (two configurations would fix four figures exactly).
  const bool host = configs.size() >= kMinConfigurations && host_separable(terms);
  {
    const ValidationFit all = solve(terms, time, kernels, host, !kernels && borrowed ? borrowed->seconds : 0.0);
    fit.efficiency = all.efficiency;
    fit.super_block_read_factor = all.super_block_read_factor;
    fit.context_factor = all.context_factor;
    fit.context_fitted = all.context_fitted;
    fit.kernel_overhead = all.kernel_overhead;
    fit.step_overhead = all.step_overhead;
    fit.note = all.note;
  }
  if (!kernels)
    fit.note +=
        std::string(fit.note.empty() ? "" : "; ") + "one configuration (" + *configs.begin() +
        "): its rows read the same bytes with the same kernels, so the fit cannot split them" +
        (borrowed ? text::printf(" and takes its runtime's cost per kernel, %.2f us, from ", borrowed->seconds * 1e6) +
                        borrowed->source + ", and the weights' efficiency for the rest"
                  : std::string(" and takes the weights' efficiency alone, no cost per kernel"));
  if (fit.efficiency > 1.0)
    fit.note += std::string(fit.note.empty() ? "" : "; ") +
                "the runtime reads faster than the profile's bandwidth: the profile's figure is low";
  fit.loo_errors = loo_by_configuration(
      cal, kMinConfigurations,
      [&](const std::vector<bool>& held) {
        std::vector<DecodeTerms> ti;
        std::vector<double> yi;
        for (std::size_t j = 0; j < cal.size(); ++j)
          if (!held[j]) {
            ti.push_back(terms[j]);
            yi.push_back(time[j]);
          }
        // A configuration whose rows alone vary the context cannot be predicted by the others: they say nothing
        // of the KV cache's factor (the class's one model measured after a depth, held out).
        if (context_separable(terms) && !context_separable(ti)) return std::vector<double>{};
        const ValidationFit f = solve(ti, yi, true, host && host_separable(ti));
        std::vector<double> e;
        for (std::size_t j = 0; j < cal.size(); ++j)
          if (held[j]) {
            e.push_back(time[j] / fitted_seconds(f, terms[j]) - 1.0);
            fit.loo_ids.push_back(cal[j]->row.id);  // in loo_by_configuration's order, the same as the errors
          }
        return e;
      },
      true);
  // The runtime profile the fit makes, and the class's rows predicted through it (the path `moesim
  // estimate --runtime` takes).
  model::RuntimeProfile& rp = name_profile(fit, "dense measurements");
  std::string ids;
  for (const auto* p : cal) ids += (ids.empty() ? "" : ", ") + p->row.id;
  const std::string source = "fitted by `moesim validate --table validation --fit` to " + std::to_string(cal.size()) +
                             " dense batch-1 decode rows of validation/measurements.csv (" + ids + ")";
  rp.bandwidth_efficiency = model::Sourced<double>{fit.efficiency, source};
  if (formats_separable(terms))
    rp.super_block_read_factor = model::Sourced<double>{
        std::clamp(fit.super_block_read_factor, 0.1, 10.0),
        source + ", the super-block formats' (K-quants') reads as a column of their own beside the other formats'"};
  rp.attention_factor =
      fit.context_fitted
          ? model::Sourced<double>{fit.context_factor > 0 ? fit.context_factor : 1e-6, source}
          : model::Sourced<double>{1.0, "not fitted: the class's " + std::to_string(cal.size()) +
                                            " dense batch-1 decode rows all spend the same share of their time on "
                                            "the context, which cannot split the KV cache's reads from the "
                                            "weights' and the kernels': the KV cache at the full bandwidth (the "
                                            "cost model's roofline)"};
  // One configuration reads the same bytes with the same kernels in every row: no cost per kernel is split
  // from the bandwidth (solve() leaves its column out), and the profile says so rather than "fitted".
  rp.kernel_overhead =
      kernels    ? model::Sourced<units::Duration>{units::seconds(fit.kernel_overhead), source}
      : borrowed ? model::Sourced<units::Duration>{units::seconds(borrowed->seconds),
                                                   "not fitted: the class's " + std::to_string(cal.size()) +
                                                       " dense batch-1 decode rows are one configuration (" +
                                                       *configs.begin() +
                                                       "), which cannot split a cost per kernel "
                                                       "from the bandwidth; its runtime's, " +
                                                       borrowed->source}
                 : model::Sourced<units::Duration>{
                       units::seconds(0), "not fitted: the class's " + std::to_string(cal.size()) +
                                              " dense batch-1 decode rows are one configuration (" + *configs.begin() +
                                              "), whose rows read the same bytes with the same kernels, so no cost "
                                              "per kernel splits from the bandwidth; its efficiency takes it"};
  // The split has no per-layer term: the fitted cost per kernel takes every per-layer host cost too.
  rp.layer_overhead = model::Sourced<units::Duration>{
      units::seconds(0),
      "none: the fit splits a token into weights, context, kernels and the host's "
      "time per token only, so its kernel_overhead takes every per-layer host cost too"};
  // The host's time per token (llama.cpp: the llama_decode call that builds or reuses the graph, sets its
  // inputs, launches it and waits for the logits), one engine step per token at batch 1; where the class's
  // models do not vary their kernel count enough to split it from the cost per kernel, that takes it.
  if (host)
    rp.step_overhead = model::Sourced<units::Duration>{units::seconds(fit.step_overhead),
                                                       source + ", the host's time per token (one engine step)"};
  else if (kernels)
    fit.note +=
        std::string(fit.note.empty() ? "" : "; ") +
        (configs.size() < kMinConfigurations ? "fewer than " + std::to_string(kMinConfigurations) + " configurations"
                                             : "the configurations' kernels per token differ by less than " +
                                                   text::printf("%.2f", kMinKernelSpread) + "x") +
        ": no host time per token is split from the cost per kernel, which takes it";
  rp.calibration_rows = fit.calibration_rows;
  const model::NodeProfile decode_node = model::apply_runtime(base, rp);

  // Prefill: the compute efficiency and the attention factor, with the decode figures in place.
  std::vector<ValidationPrediction*> pcal;
  std::vector<PrefillTerms> pterms;
  std::vector<double> ptime;
  const std::string split = "three-point split";
  const model::NodeProfile unit = with_compute_efficiency(decode_node, 1.0, 1.0, split);
  const model::NodeProfile half = with_compute_efficiency(decode_node, 0.5, 1.0, split);
  const model::NodeProfile slow_attention = with_compute_efficiency(decode_node, 1.0, 2.0, split);
  for (auto* p : rows) {
    if (p->row.role != "calibration" || p->kind != "prefill b1" || !p->predicted) continue;
    const auto t1 = figure(*p, unit), t2 = figure(*p, half), t3 = figure(*p, slow_attention);
    if (!t1 || !t2 || !t3) continue;
    const double prompt = static_cast<double>(p->row.prompt.value_or(1));
    PrefillTerms t;
    t.attention = std::max(0.0, prompt / *t3 - prompt / *t1);
    t.gemm = std::max(0.0, prompt / *t2 - prompt / *t1 - t.attention);
    t.rest = std::max(0.0, prompt / *t1 - t.gemm - t.attention);
    pcal.push_back(p);
    pterms.push_back(t);
    ptime.push_back(prompt / p->row.measured);
  }
  if (!pcal.empty()) {
    const bool attention = attention_separable(pterms);
    const auto [x, z] = solve_prefill(pterms, ptime, {}, attention);
    fit.compute_efficiency = 1.0 / x;
    fit.prefill_attention_factor = z / x;
    fit.prefill_rows = static_cast<std::int64_t>(pcal.size());
    fit.prefill_loo_errors = loo_by_configuration(
        pcal, kMinConfigurations,
        [&](const std::vector<bool>& held) {
          // Likewise the attention factor: not from rows that do not vary the attention's share.
          std::vector<PrefillTerms> rest;
          for (std::size_t j = 0; j < pcal.size(); ++j)
            if (!held[j]) rest.push_back(pterms[j]);
          if (attention && !attention_separable(rest)) return std::vector<double>{};
          const auto [xi, zi] = solve_prefill(pterms, ptime, held, attention);
          std::vector<double> e;
          for (std::size_t j = 0; j < pcal.size(); ++j)
            if (held[j])
              e.push_back(ptime[j] / (pterms[j].rest + xi * pterms[j].gemm + zi * pterms[j].attention) - 1.0);
          return e;
        },
        true);
    std::string pids;
    for (const auto* p : pcal) pids += (pids.empty() ? "" : ", ") + p->row.id;
    const std::string psource =
        "fitted by `moesim validate --table validation --fit` to " + std::to_string(pcal.size()) +
        " dense batch-1 prefill rows of validation/measurements.csv (" + pids + "), the decode figures fixed";
    rp.compute_efficiency = model::Sourced<double>{std::min(fit.compute_efficiency, 1.5), psource};
    if (attention) {
      rp.prefill_attention_factor = model::Sourced<double>{std::min(fit.prefill_attention_factor, 1000.0), psource};
    } else {
      fit.note += std::string(fit.note.empty() ? "" : "; ") +
                  "the prefill rows' attention share varies too little (under " +
                  text::printf("%.0f", 100 * kMinAttentionSpread) +
                  " points) to split the attention FLOPs from the GEMMs: prefill attention at the compute efficiency";
    }
  }
}

/// The max-load classes' fits: per runtime, every class's rows in one least-squares problem (solve_joint),
/// then each class's figures, profile and leave-one-configuration-out errors.
void fit_max_load_jointly(std::vector<MaxLoadClass>& classes, std::vector<ValidationFit>& fits) {
  std::map<std::string, std::vector<MaxLoadClass*>> by_runtime;
  for (auto& c : classes)
    if (!c.cal.empty()) by_runtime[fits[c.fit].runtime].push_back(&c);
  for (const auto& [runtime, group] : by_runtime) {
    const JointFit all = solve_joint(group, group.size(), {});
    std::size_t rows = 0;
    for (const auto* c : group) rows += c->cal.size();
    for (std::size_t k = 0; k < group.size(); ++k) finish_max_load(group, k, all, fits[group[k]->fit], rows);
  }
}

/// Prices every row of the class with its fitted runtime. Decode rows (batch 1 and batched) take the
/// decode interval, prefill rows the prefill one: the class's own leave-one-configuration-out range, or
/// the range pooled over every class when it has too few configurations (`pooled_*`).
void apply_fit(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m,
               const std::vector<double>& pooled_decode, const std::vector<double>& pooled_prefill,
               const std::vector<double>& pooled_max_load) {
  model::RuntimeProfile& rp = fit.profile;
  const bool own_decode = fit.loo_errors.size() >= kMinIntervalErrors;
  const auto decode_range = error_interval(own_decode ? fit.loo_errors : pooled_decode);
  const bool own_max_load = fit.max_load_configurations >= static_cast<std::int64_t>(kMinConfigurations) &&
                            fit.max_load_loo_errors.size() >= kMinIntervalErrors;
  const auto max_load_range = error_interval(own_max_load ? fit.max_load_loo_errors : pooled_max_load);
  if (fit.max_load_rows > 0) {
    // A max-load class: its profile's interval is that of its max-load rows.
    fit.max_load_range = max_load_range;
    if (max_load_range) {
      rp.error_low = max_load_range->first;
      rp.error_high = max_load_range->second;
      rp.interval_source =
          own_max_load
              ? "leave-one-configuration-out errors (predicted / measured - 1) of the " +
                    std::to_string(fit.max_load_rows) +
                    " max-load rows above, each configuration (model, format) predicted by the fit of the others"
              : "the class has fewer than " + std::to_string(kMinConfigurations) + " dense configurations or " +
                    std::to_string(kMinIntervalErrors) +
                    " held-out errors (the fewest whose extremes bound 90% of new ones): leave-one-configuration-out "
                    "errors of max-load rows pooled over every runtime and machine of validation/measurements.csv";
    }
  } else if (decode_range) {
    rp.error_low = decode_range->first;
    rp.error_high = decode_range->second;
    rp.interval_source = own_decode
                             ? "leave-one-configuration-out errors (predicted / measured - 1) of the " +
                                   std::to_string(fit.calibration_rows) +
                                   " rows above, each configuration (model, format) predicted by the fit of the others"
                             : "the class has fewer than " + std::to_string(kMinIntervalErrors) +
                                   " held-out errors (the fewest whose extremes bound 90% of new ones; fewer than " +
                                   std::to_string(kMinConfigurations) +
                                   " dense configurations give none): leave-one-configuration-out errors pooled over "
                                   "every runtime and machine of validation/measurements.csv";
  }
  const auto prefill_range =
      error_interval(fit.prefill_loo_errors.size() >= kMinIntervalErrors ? fit.prefill_loo_errors : pooled_prefill);
  if (rp.compute_efficiency && fit.max_load_rows == 0) fit.prefill_range = prefill_range;
  const model::NodeProfile fitted = model::apply_runtime(base_node(m, fit.runtime, fit.hw), rp);
  for (auto* p : rows) {
    if (!p->predicted) continue;
    const bool prefill = p->kind == "prefill b1" || p->kind == "prefill batched";
    if (prefill && !rp.compute_efficiency) continue;
    // A max-load row is priced by a fit that saw max-load rows (a decode fit says nothing of its scheduler).
    if ((p->kind == "max-load") != (fit.max_load_rows > 0)) continue;
    try {
      p->fitted = figure(*p, fitted);
    } catch (const UserError&) {
      continue;
    }
    if (!p->fitted || p->kind == "decode batched") continue;  // batched_intervals, once every class is priced
    // Batched prefill is fitted to nothing: it takes the class's prefill interval, the same instrument's
    // held-out errors at batch 1.
    const auto& range = prefill ? prefill_range : p->kind == "max-load" ? max_load_range : decode_range;
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
    const auto range = error_interval(configs.size() >= kMinConfigurations ? own : pooled);
    if (!range) continue;
    const double factor = std::max({1.0 + range->second, 1.0 / (1.0 + range->first), 1.0});
    for (auto* p : *members)
      if (p->kind == "decode batched" && p->fitted)
        p->interval = model::prediction_interval(*p->fitted, 1.0 / factor - 1.0, factor - 1.0);
  }
}

}  // namespace validation_detail

std::optional<std::pair<double, double>> error_interval(std::vector<double> errors) {
  if (errors.empty()) return std::nullopt;
  std::sort(errors.begin(), errors.end());
  const std::size_t n = errors.size();
  const std::size_t k =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(0.05 * static_cast<double>(n + 1))));
  return std::make_pair(errors[k - 1], errors[n - k]);
}

}  // namespace moesim::calibrate
