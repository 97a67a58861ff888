#include "moesim/calibrate/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

namespace moesim::calibrate {

Progress::Progress(std::ostream* out, double min_interval_s)
    : out_(out),
      tty_(out == &std::cerr && ::isatty(STDERR_FILENO) == 1),
      min_interval_(min_interval_s),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::set_phase(double from, double width, std::string name) {
  phase_from_ = from;
  phase_width_ = width;
  phase_ = std::move(name);
}

void Progress::update(double fraction, const std::string& what) {
  if (!out_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (!tty_ && printed_ && since_last < min_interval_) return;
  if (tty_ && printed_ && since_last < 0.1) return;
  last_ = now;
  printed_ = true;
  const double f = std::clamp(phase_from_ + phase_width_ * std::clamp(fraction, 0.0, 1.0), 0.0, 1.0);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string eta;
  if (f > 0.02 && f < 1.0)
    eta = " (ETA " + std::to_string(static_cast<long>(std::lround(elapsed * (1 - f) / f))) + " s)";
  char pct[16];
  std::snprintf(pct, sizeof pct, "[%3d%%] ", static_cast<int>(std::lround(f * 100)));
  const std::string line = pct + (phase_.empty() ? "" : phase_ + ": ") + what + eta;
  if (tty_) {
    *out_ << "\r\033[K" << line << std::flush;
  } else {
    *out_ << line << "\n" << std::flush;
  }
}

void Progress::done(const std::string& what) {
  if (!out_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, " in %.1f s", elapsed);
  if (tty_) *out_ << "\r\033[K";
  *out_ << (phase_.empty() ? "" : phase_ + ": ") << what << buf << "\n" << std::flush;
}

}  // namespace moesim::calibrate
