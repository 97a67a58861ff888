#include "moesim/reports/report_fit.hpp"

#include <algorithm>

#include "moesim/model/error.hpp"

namespace moesim::reports {

ReportCalibration report_calibration(const calibrate::MeasuredRuns& runs,
                                     const std::function<void(const std::string&)>& progress, unsigned threads) {
  calibrate::FitOptions o;  // the default parameters (default_fit_parameters), every run fitted, leave-one-out on
  o.threads = threads;
  const calibrate::FitResult fit = calibrate::fit_runs(runs, o, progress);
  ReportCalibration c;
  c.origin = runs.path;
  c.profiles.hw = fit.node.id;
  c.profiles.node = fit.node;
  if (fit.has_nic) {
    c.profiles.nic = fit.nic.id;
    c.profiles.nic_profile = fit.nic;
  }
  for (const auto& p : fit.parameters)
    c.parameters.push_back({p.name, p.unit, p.start, p.value, p.determined, calibrate::fit_parameter(p.name).nic});
  std::vector<double> errors;
  for (const auto& r : fit.runs) {
    c.runs.push_back({r.name, r.measured_time, r.predicted.time, r.loo_time});
    // tokens/s predicted / measured - 1, with tokens/s = 1 / time per token.
    if (r.loo_time) errors.push_back(r.measured_time / *r.loo_time - 1.0);
  }
  if (errors.size() < 2)
    throw UserError(runs.path + ": " + std::to_string(errors.size()) +
                    " run(s) with a leave-one-out prediction; the interval of a calibrated figure needs at least 2 "
                    "(give at least 2 measured runs)");
  c.error_low = *std::min_element(errors.begin(), errors.end());
  c.error_high = *std::max_element(errors.begin(), errors.end());
  c.profiles.interval = [lo = c.error_low, hi = c.error_high](double v) {
    return model::prediction_interval(v, lo, hi);
  };
  c.rms_relative = fit.rms_relative;
  c.converged = fit.converged;
  return c;
}

}  // namespace moesim::reports
