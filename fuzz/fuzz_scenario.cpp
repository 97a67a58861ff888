// Fuzz target: the scenario files users write: a `simulate` scenario, a `serve` scenario (with its
// workload), and a `sweep`/`report` grid, which is also expanded into its points. The first byte picks the
// kind; the rest is the file.
#include "fuzz_support.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/simulate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto sel = moesim::fuzz::select(data, size, 3);
  const unsigned which = sel.which;
  const std::string_view rest = sel.rest;
  const auto path = moesim::fuzz::write_file("scenario.json", rest).string();
  moesim::fuzz::expect_user_errors_only([&] {
    switch (which) {
      case 0:
        (void)moesim::scenario::load_simulate_scenario(path);
        break;
      case 1:
        (void)moesim::scenario::load_serve_scenario(path);
        break;
      default: {
        const auto grid = moesim::reports::load_grid(path);
        (void)moesim::reports::expand_grid(grid);
        break;
      }
    }
  });
  return 0;
}
