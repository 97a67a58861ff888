// Fuzz target: the unit parser (model/units.hpp units::parse), in every dimension, and the request-rate
// parser of workloads ("2/s", "120/min"). Text such as "800GB/s", "1.5e3 TFLOPS", "nan W", "1e400s".
#include <cmath>
#include <string_view>

#include "fuzz_support.hpp"
#include "moesim/model/units.hpp"
#include "moesim/sim/workload.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using moesim::units::Dimension;
  for (const auto d : {Dimension::Time, Dimension::Bytes, Dimension::Bandwidth, Dimension::Flops, Dimension::FlopRate,
                       Dimension::Money, Dimension::Power}) {
    moesim::fuzz::expect_user_errors_only([&] {
      const double v = moesim::units::parse(text, d, "fuzz");
      // A parsed quantity is a finite number: "inf", "nan" and overflow are user errors, never values.
      if (!std::isfinite(v)) __builtin_trap();
      (void)moesim::units::format(v, d);
    });
  }
  moesim::fuzz::expect_user_errors_only([&] {
    const double r = moesim::sim::parse_request_rate(text, "fuzz");
    if (!std::isfinite(r)) __builtin_trap();
  });
  return 0;
}
