#pragma once
// Internals of the request-trace readers shared by request_traces.cpp (format detection, entry points),
// request_trace_readers.cpp (one reader per format) and request_trace_time.cpp (timestamps).

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fields.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/request_traces.hpp"

namespace moesim::sim::request_trace_detail {

using fields::trim;

/// A number for messages, 6 significant digits.
using text::short_number;

// ------------------------------------------------------------------------------------------------------
// Wall-clock timestamps (Azure): request_trace_time.cpp.

/// A time as whole seconds (since the epoch for a wall-clock time, UTC when an offset is given; since
/// the trace's own zero otherwise) plus picoseconds. Ordered as (seconds, ps).
struct WallTime {
  std::int64_t seconds = 0;
  std::int64_t ps = 0;  ///< [0, 10^12)
  // clang-tidy 14 reports the literal 0 that a defaulted <=> compares its result with; there is no pointer.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  auto operator<=>(const WallTime&) const = default;
};

/// "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" (see request_trace_time.cpp), or nullopt.
std::optional<WallTime> parse_timestamp(std::string_view s);
/// A non-negative number of seconds as whole seconds plus picoseconds.
WallTime split_seconds(double s);

// ------------------------------------------------------------------------------------------------------
// Reading.

/// The non-blank lines of a trace file, with their line numbers.
class TraceLines {
 public:
  explicit TraceLines(const std::filesystem::path& path) : name_(path.string()), file_(path) {}

  /// The next non-blank line (without a UTF-8 byte-order mark on line 1), or false at the end.
  bool next(std::string_view& out) {
    while (read_line(file_.stream(), line_, bound_, name_, lineno_ + 1)) {
      ++lineno_;
      std::string_view l = line_;
      if (lineno_ == 1 && l.starts_with("\xEF\xBB\xBF")) l.remove_prefix(3);
      if (trim(l).empty()) continue;
      out = l;
      return true;
    }
    if (file_.stream().bad()) {
      throw UserError(name_ + ": a read error after line " + std::to_string(lineno_) + "; check the file");
    }
    return false;
  }
  /// Lines held from now on take `memory_per_byte` times their size once parsed (model/fd_io.hpp).
  void set_memory_per_byte(double m) { bound_ = line_bound(m); }
  [[nodiscard]] std::int64_t lineno() const { return lineno_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] std::string at(std::int64_t line) const { return name_ + ": line " + std::to_string(line); }

 private:
  std::string name_;
  InputFile file_;  // a regular file, or a one-line refusal (no FIFO, device or directory)
  // A JSON line takes about 17 times its size once parsed (json_reader.cpp); the first line is read with
  // that bound, before the format is known, and a CSV reader relaxes it to 2 (the text and its views).
  LineBound bound_ = line_bound(17.0);
  std::string line_;
  std::int64_t lineno_ = 0;
};

/// A CSV header: its names as written (for messages) and their lower-case forms (for matching).
struct Header {
  std::vector<std::string> names;
  std::vector<std::string> keys;
  std::int64_t line = 0;

  /// The column whose name is one of `candidates` (lower case), or -1.
  [[nodiscard]] std::int64_t find(std::initializer_list<std::string_view> candidates) const {
    for (std::string_view n : candidates)
      for (std::size_t c = 0; c < keys.size(); ++c)
        if (keys[c] == n) return static_cast<std::int64_t>(c);
    return -1;
  }
  [[nodiscard]] bool has(std::string_view key) const { return find({key}) >= 0; }
};

// The readers, one per format (request_trace_readers.cpp); `in` has read the header line.
std::vector<Request> read_moesim_or_azure(TraceLines& in, const Header& h, RequestTraceFormat format,
                                          const RequestTraceOptions& o);
std::vector<Request> read_burstgpt(TraceLines& in, const Header& h, const RequestTraceOptions& o, std::int64_t& failed);
std::vector<Request> read_mooncake(TraceLines& in, std::string_view first, const RequestTraceOptions& o);

}  // namespace moesim::sim::request_trace_detail
