#pragma once
// The fit `moesim report` calibrates its figures with: calibrate::fit_runs with the default parameters and
// the leave-one-out refits, as ReportCalibration (the fitted profiles and the interval).

#include <functional>
#include <string>

#include "moesim/calibrate/fit.hpp"
#include "moesim/reports/report.hpp"

namespace moesim::reports {

/// Fits the runs' node profile (and their NIC, when a run has two or more nodes). UserError from the fit
/// (runs on different hardware, ...), and when fewer than two runs have a leave-one-out prediction (no
/// interval can be measured then).
/// `threads`: the leave-one-out refits' worker threads (0: every core; calibrate::FitOptions::threads).
ReportCalibration report_calibration(const calibrate::MeasuredRuns& runs,
                                     const std::function<void(const std::string&)>& progress = {},
                                     unsigned threads = 0);

}  // namespace moesim::reports
