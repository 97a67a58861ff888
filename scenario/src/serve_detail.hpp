#pragma once
// Private to scenario/: the helpers serve's files share (scenario resolution, sweeps and the max-rate search,
// outputs). One implementation each; see scenario/include/moesim/scenario/serve.hpp.

#include <string>

namespace moesim::scenario::serve_detail {

/// Seconds as milliseconds with one decimal, for tables (serve_outputs.cpp).
std::string ms(double s);

}  // namespace moesim::scenario::serve_detail
