#pragma once
// Progress of a long run on stderr, the one progress display of every command (calibrate, ref, serve,
// sweep, report, validate): "[ 42%] kernels: sgemv 6144x10752 batch 4, 2 threads (ETA 38 s)".
// On a terminal each line overwrites the last (at most 10 times a second); otherwise (CI logs, pipes) a
// line is printed at most every `min_interval` seconds, and the last one (100%) always, never with a
// carriage return, so logs stay short and readable. Quiet progress prints nothing (tests, --json pipelines).

#include <chrono>
#include <cstddef>
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

  /// Reports that `fraction` (0..1) of the whole run is done, now doing `what`. A negative fraction is
  /// work of unknown length: no percentage, no ETA.
  void update(double fraction, const std::string& what);
  /// Work counted in items, in stages each timed from its own start: "[ 40%] sweep: simulate: 40/100
  /// points (ETA 3 s)". A `stage` other than the last one's starts a new line and a new clock.
  void count(const std::string& stage, std::size_t done, std::size_t total, const std::string& unit = "points");
  /// The same for a stage measured as a fraction in [0, 1] ("serve: point 1/3: requests done").
  void fraction(const std::string& stage, double fraction, const std::string& what);
  /// Ends the progress line (a newline on a terminal) with `what` and the time taken.
  void done(const std::string& what);
  /// Ends the progress line without a message (a newline on a terminal, where a line is open).
  void finish();

  /// A sub-range of the whole [from, from + width) for one phase of `calibrate all`.
  void set_phase(double from, double width, std::string name);
  /// A new stage: the line ends, the clock restarts, `name` prefixes the lines, the whole range is its own.
  void restart(std::string name);

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
