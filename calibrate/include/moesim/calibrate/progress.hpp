#pragma once
// Progress of a long measurement on stderr: "[ 42%] kernels: sgemv 6144x10752 batch 4, 2 threads (ETA 38 s)".
// On a terminal each line overwrites the last; otherwise (CI logs, pipes) a line is printed at most every
// `min_interval` seconds so logs stay short. Quiet progress prints nothing (tests, --json pipelines).

#include <chrono>
#include <ostream>
#include <string>

namespace moesim::calibrate {

/// Seconds from `a` to `b` on the steady clock (the microbenchmarks' timings).
inline double secs(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class Progress {
 public:
  /// `out` null: quiet.
  explicit Progress(std::ostream* out, double min_interval_s = 2.0);
  static Progress quiet() { return Progress(nullptr); }

  /// Reports that `fraction` (0..1) of the whole run is done, now doing `what`.
  void update(double fraction, const std::string& what);
  /// Ends the progress line (a newline on a terminal).
  void done(const std::string& what);

  /// A sub-range of the whole [from, from + width) for one phase of `calibrate all`.
  void set_phase(double from, double width, std::string name);

 private:
  std::ostream* out_;
  bool tty_ = false;
  double min_interval_;
  double phase_from_ = 0;
  double phase_width_ = 1;
  std::string phase_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
  bool printed_ = false;
};

}  // namespace moesim::calibrate
