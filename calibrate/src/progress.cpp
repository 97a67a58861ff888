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

void Progress::restart(std::string name) {
  finish();
  phase_from_ = 0;
  phase_width_ = 1;
  phase_ = std::move(name);
  start_ = std::chrono::steady_clock::now();
  last_ = start_;
}

void Progress::count(const std::string& stage, std::size_t done, std::size_t total, const std::string& unit) {
  if (!out_ || total == 0) return;
  if (stage != phase_) restart(stage);
  update(static_cast<double>(done) / static_cast<double>(total),
         std::to_string(done) + "/" + std::to_string(total) + " " + unit);
}

void Progress::fraction(const std::string& stage, double fraction, const std::string& what) {
  if (!out_) return;
  if (stage != phase_) restart(stage);
  update(fraction, what);
}

void Progress::finish() {
  if (out_ && tty_ && printed_) *out_ << "\n" << std::flush;
  printed_ = false;
}

void Progress::update(double fraction, const std::string& what) {
  if (!out_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  const bool last = fraction >= 1.0;  // the end of a stage is always shown
  if (!last && !tty_ && printed_ && since_last < min_interval_) return;
  if (!last && tty_ && printed_ && since_last < 0.1) return;
  last_ = now;
  printed_ = true;
  std::string line = phase_.empty() ? "" : phase_ + ": ";
  line += what;
  if (fraction >= 0) {
    const double f = std::clamp(phase_from_ + phase_width_ * std::clamp(fraction, 0.0, 1.0), 0.0, 1.0);
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    if (f > 0.02 && f < 1.0)
      line += " (ETA " + std::to_string(static_cast<long>(std::lround(elapsed * (1 - f) / f))) + " s)";
    char pct[16];
    std::snprintf(pct, sizeof pct, "[%3d%%] ", static_cast<int>(std::lround(f * 100)));
    line = pct + line;
  }
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
  printed_ = false;
}

}  // namespace moesim::calibrate
