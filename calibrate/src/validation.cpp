// moesim against the public validation table (calibrate/validation.hpp): the rows of a table predicted,
// fitted and summarised. The steps are validation_mapping.cpp, validation_predict.cpp and validation_fit.cpp.

#include "moesim/calibrate/validation.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "moesim/model/error.hpp"
#include "moesim/model/parallel.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

namespace validation_detail {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Linear interpolation between order statistics (the "type 7" rule of R and NumPy's default).
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace validation_detail

using validation_detail::quantile;

ErrorSummary summarise(const std::vector<const ValidationPrediction*>& preds, const std::string& basis) {
  ErrorSummary s;
  s.basis = basis;
  const bool fitted = basis == "fitted", measured = basis == "measured device", transferred = basis == "transferred";
  MOESIM_CHECK(fitted || measured || transferred || basis == "datasheet", "an unknown basis '" + basis + "'");
  std::vector<double> abs, signed_err;
  std::int64_t covered = 0;
  for (const auto* p : preds) {
    if (!(fitted ? p->fitted : measured ? p->measured_predicted : transferred ? p->transferred : p->predicted))
      continue;
    const double e = fitted        ? p->fitted_error()
                     : measured    ? p->measured_error()
                     : transferred ? p->transferred_error()
                                   : p->error();
    const auto& interval = transferred ? p->transferred_interval : p->interval;
    if ((fitted || transferred) && interval) {
      ++s.with_interval;
      covered += p->row.measured >= interval->first && p->row.measured <= interval->second ? 1 : 0;
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

ValidationResult run_validation(const std::filesystem::path& dir, const ValidationOptions& o) {
  ValidationResult r;
  r.table = dir / "measurements.csv";
  const validation_detail::Mapping m = validation_detail::read_mapping(dir / "mapping.json");
  validation_detail::run_rows(r, validation_detail::read_rows(r.table), m, o);
  return r;
}

namespace validation_detail {

namespace {

/// The checks a profile carries (RuntimeProfile::prediction_checks): for each kind of row
/// (kPredictionCheckKinds), its MoE prediction rows' summary on `basis`; none for a kind it priced none of
/// with an interval.
std::vector<model::RuntimeProfile::PredictionCheck> checks_of(const std::vector<const ValidationPrediction*>& rows,
                                                              const std::string& basis, const std::string& where) {
  std::vector<model::RuntimeProfile::PredictionCheck> out;
  for (const auto& [kind, words] : model::kPredictionCheckKinds) {
    std::vector<const ValidationPrediction*> of_kind;
    for (const ValidationPrediction* p : rows)
      if (p->row.role == "prediction" && p->kind == kind) of_kind.push_back(p);
    const ErrorSummary s = summarise(of_kind, basis);
    if (s.n == 0 || s.with_interval == 0) continue;
    out.push_back({std::string(kind), s.n, s.median_abs, s.coverage,
                   "`moesim validate --table validation --fit`: its figures for the " + std::to_string(s.n) + " MoE " +
                       std::string(words) + (s.n == 1 ? " prediction row" : " prediction rows") +
                       " of validation/measurements.csv " + where +
                       ", none of them fitted to, against their measurements"});
  }
  return out;
}

}  // namespace

void check_predictions(ValidationResult& r, const std::vector<std::vector<ValidationPrediction*>*>& members,
                       const Mapping& m) {
  MOESIM_CHECK(members.size() == r.fits.size(), "check_predictions needs each fit's rows");
  for (std::size_t i = 0; i < r.fits.size(); ++i) {
    const std::vector<const ValidationPrediction*> rows(members[i]->begin(), members[i]->end());
    r.fits[i].profile.prediction_checks = checks_of(rows, "fitted", "on " + r.fits[i].hw);
  }
  // A transferred profile: the rows of its runtime priced by it with their own machine's fit left out, on
  // the machines of its GPUs' maker.
  for (TransferredRuntime& t : r.transfers) {
    std::vector<const ValidationPrediction*> rows;
    for (const ValidationPrediction& p : r.rows)
      if (p.transferred && p.row.runtime == t.profile.runtime &&
          base_node(m, p.row.runtime, p.hw).devices.gpu_vendor == t.profile.gpu_vendor)
        rows.push_back(&p);
    t.profile.prediction_checks = checks_of(
        rows, "transferred", "of the machines it was fitted on, each priced with its own machine's fit left out");
  }
}

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
  // Each row alone (its own simulations, its own fields): on every worker thread.
  model::parallel_for(
      r.rows.size(), o.threads, [&](std::size_t i) { predict(r.rows[i], m); },
      [&](std::size_t done) {
        if (o.progress) o.progress(done, r.rows.size());
      });
  for (const auto& p : r.rows)
    if (!p.predicted) ++r.skipped[p.skipped.starts_with("refused") ? "refused by moesim" : p.skipped];
  if (o.floors) {
    model::parallel_for(r.rows.size(), o.threads, [&](std::size_t i) {
      ValidationPrediction& p = r.rows[i];
      // One device: on more, the floor would serialise the collectives, which runtimes overlap with the reads.
      if (p.predicted && p.row.devices == 1) p.floor = figure(p, floor_node(base_node(m, p.row.runtime, p.hw)));
    });
    std::map<std::pair<std::string, std::string>, ValidationResult::FloorCount> counts;
    for (const auto& p : r.rows) {
      if (!p.floor) continue;
      ValidationResult::FloorCount& c = counts[{p.row.role, p.kind}];
      c.role = p.row.role;
      c.kind = p.kind;
      ++c.rows;
      if (p.row.measured > *p.floor) ++c.above;
    }
    for (const auto& [key, c] : counts) r.floors.push_back(c);
  }
  if (o.fit) {
    // One fit per (node profile, runtime): a runtime's efficiency is its own on each machine.
    std::map<std::pair<std::string, std::string>, std::vector<ValidationPrediction*>> classes;
    for (auto& p : r.rows)
      if (p.predicted) classes[{p.hw, p.row.runtime}].push_back(&p);
    // Each class alone (its rows, its fit), on every worker thread; then kept in the classes' order.
    std::vector<std::pair<const std::pair<std::string, std::string>, std::vector<ValidationPrediction*>>*> all;
    all.reserve(classes.size());
    for (auto& c : classes) all.push_back(&c);
    std::vector<ValidationFit> class_fits(all.size());
    std::vector<MaxLoadClass> class_max_load(all.size());
    model::parallel_for(all.size(), o.threads, [&](std::size_t k) {
      class_fits[k].hw = all[k]->first.first;
      class_fits[k].runtime = all[k]->first.second;
      fit_class(all[k]->second, class_fits[k], m, &class_max_load[k]);
    });
    // The classes of one configuration again, each with its runtime's cost per kernel from the fits that split it.
    const std::vector<std::optional<BorrowedKernelCost>> borrowed = borrowed_kernel_costs(class_fits, m);
    model::parallel_for(all.size(), o.threads, [&](std::size_t k) {
      if (!borrowed[k]) return;
      class_fits[k] = ValidationFit{};
      class_fits[k].hw = all[k]->first.first;
      class_fits[k].runtime = all[k]->first.second;
      class_max_load[k] = MaxLoadClass{};
      fit_class(all[k]->second, class_fits[k], m, &class_max_load[k], &*borrowed[k]);
    });
    std::vector<std::vector<ValidationPrediction*>*> fitted_members;
    std::vector<MaxLoadClass> max_load;
    for (std::size_t k = 0; k < all.size(); ++k) {
      const ValidationFit& f = class_fits[k];
      if (f.calibration_rows == 0 && f.max_load_rows == 0) continue;
      class_max_load[k].fit = r.fits.size();
      if (!class_max_load[k].cal.empty()) max_load.push_back(std::move(class_max_load[k]));
      r.fits.push_back(f);
      fitted_members.push_back(&all[k]->second);
    }
    // A runtime's host time per sequence and step is one figure over all its machines: fitted jointly.
    fit_max_load_jointly(max_load, r.fits);
    std::vector<double> pooled_decode, pooled_prefill, pooled_max_load;
    for (const ValidationFit& f : r.fits) {
      pooled_decode.insert(pooled_decode.end(), f.loo_errors.begin(), f.loo_errors.end());
      pooled_max_load.insert(pooled_max_load.end(), f.max_load_loo_errors.begin(), f.max_load_loo_errors.end());
      pooled_prefill.insert(pooled_prefill.end(), f.prefill_loo_errors.begin(), f.prefill_loo_errors.end());
    }
    model::parallel_for(r.fits.size(), o.threads, [&](std::size_t i) {
      apply_fit(*fitted_members[i], r.fits[i], m, pooled_decode, pooled_prefill, pooled_max_load);
    });
    batched_intervals(fitted_members);
    transfer_runtimes(r, fitted_members, m, o.threads);
    check_predictions(r, fitted_members, m);
    if (!o.explain.empty()) explain_row(r, m, o.explain);
  }
  // Per role × kind, then per role × kind × hardware family × runtime; datasheet, fitted, transferred.
  for (const std::string basis : {"datasheet", "fitted", "transferred"}) {
    const auto has = [&](const ValidationPrediction& p) {
      return basis == "fitted"        ? p.fitted.has_value()
             : basis == "transferred" ? p.transferred.has_value()
                                      : p.predicted.has_value();
    };
    std::set<std::tuple<std::string, std::string, std::string, std::string>> groups;
    for (const auto& p : r.rows)
      if (has(p)) {
        groups.insert({p.row.role, p.kind, "all", "all"});
        groups.insert({p.row.role, p.kind, p.row.hw_family, p.row.runtime});
      }
    for (const auto& [role, kind, family, runtime] : groups) {
      std::vector<const ValidationPrediction*> in;
      for (const auto& p : r.rows)
        if (p.row.role == role && p.kind == kind && (family == "all" || p.row.hw_family == family) &&
            (runtime == "all" || p.row.runtime == runtime))
          in.push_back(&p);
      ErrorSummary s = summarise(in, basis);
      s.role = role;
      s.kind = kind;
      s.hw_family = family;
      s.runtime = runtime;
      r.summaries.push_back(s);
    }
  }
  // The rows a measured device predicts: the same rows on each basis.
  std::set<std::tuple<std::string, std::string, std::string>> measured;
  for (const auto& p : r.rows)
    if (p.measured_predicted) measured.insert({p.measured_device, p.row.role, p.kind});
  for (const auto& [profile, role, kind] : measured) {
    std::vector<const ValidationPrediction*> in;
    for (const auto& p : r.rows)
      if (p.measured_predicted && p.measured_device == profile && p.row.role == role && p.kind == kind)
        in.push_back(&p);
    MeasuredDeviceSummary sum{
        profile, role, kind, summarise(in, "datasheet"), summarise(in, "measured device"), summarise(in, "fitted")};
    for (ErrorSummary* e : {&sum.datasheet, &sum.measured, &sum.fitted}) {
      e->role = role;
      e->kind = kind;
      e->hw_family = "all";
      e->runtime = "all";
    }
    r.measured_devices.push_back(sum);
  }
}

}  // namespace validation_detail

}  // namespace moesim::calibrate
