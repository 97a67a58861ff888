#pragma once
// Private to reports/: the helpers serve's files share (scenario resolution, sweeps and the max-rate search,
// outputs). One implementation each; see reports/include/moesim/reports/serve.hpp.

#include <string>

namespace moesim::reports::serve_detail {

/// Seconds as milliseconds with one decimal, for tables (serve_outputs.cpp).
std::string ms(double s);

}  // namespace moesim::reports::serve_detail
