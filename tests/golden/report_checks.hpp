// Checks on a written report that more than one test file runs (the default report is written once per
// test: under the sanitizers one takes minutes).
#pragma once

#include <string>

namespace moesim::test {

/// The default report's headline and tables are calibrated to the measured runs, each figure with its
/// leave-one-out interval and its datasheet upper bound (issue 20 item 6; test_report_calibrated.cpp).
void expect_calibrated_headline(const std::string& dir);

}  // namespace moesim::test
