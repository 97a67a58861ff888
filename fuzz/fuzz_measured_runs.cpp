// Fuzz target: the measured-runs file of `moesim calibrate fit --measured` and `moesim report --measured`
// (calibrate/fit.hpp load_measured_runs). The file is written to <scratch>/measured/, with the scenarios of
// examples/ copied beside it once, so that the seed's "../simulate-*.json" references resolve and the
// fuzzer reaches the scenario checks behind them.
#include "fuzz_support.hpp"
#include "moesim/calibrate/fit.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool examples_copied = [] {
    std::filesystem::create_directories(moesim::fuzz::scratch_dir() / "measured");
    for (const auto& e : std::filesystem::directory_iterator(MOESIM_SOURCE_DIR "/examples")) {
      if (e.path().extension() == ".json") {
        std::filesystem::copy_file(e.path(), moesim::fuzz::scratch_dir() / e.path().filename(),
                                   std::filesystem::copy_options::overwrite_existing);
      }
    }
    return true;
  }();
  (void)examples_copied;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto path = moesim::fuzz::write_file("measured/runs.json", text).string();
  moesim::fuzz::expect_user_errors_only([&] { (void)moesim::calibrate::load_measured_runs(path); });
  return 0;
}
