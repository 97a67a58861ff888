#include "moesim/sim/request_traces.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <optional>
#include <utility>

#include "fields.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"

namespace moesim::sim {
namespace {

using fields::parse_whole;
using fields::split_fields;
using fields::trim;

std::string short_number(double v) { return text::printf("%.6g", v); }

// ------------------------------------------------------------------------------------------------------
// Wall-clock timestamps (Azure).

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible Low-Level Date
/// Algorithms", days_from_civil).
std::int64_t days_from_civil(std::int64_t y, std::int64_t m, std::int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;                                    // [0, 399]
  const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;  // [0, 365]
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;            // [0, 146096]
  return era * 146097 + doe - 719468;
}

/// A time as whole seconds (since the epoch for a wall-clock time, UTC when an offset is given; since
/// the trace's own zero otherwise) plus picoseconds. Ordered as (seconds, ps).
struct WallTime {
  std::int64_t seconds = 0;
  std::int64_t ps = 0;  ///< [0, 10^12)
  auto operator<=>(const WallTime&) const = default;
};

/// "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" ('T' also separates date and time), as the Azure
/// traces write it: 2023 "2023-11-16 18:15:46.6805900", 2024 "2024-05-10 00:00:00.009930+00:00".
/// Fraction digits past the 12th (below a picosecond) are dropped.
std::optional<WallTime> parse_timestamp(std::string_view s) {
  std::size_t i = 0;
  auto digits = [&](std::size_t n) -> std::optional<std::int64_t> {
    if (i + n > s.size()) return std::nullopt;
    std::int64_t v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const char c = s[i + k];
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    i += n;
    return v;
  };
  auto expect = [&](std::string_view chars) {
    if (i < s.size() && chars.find(s[i]) != std::string_view::npos) {
      ++i;
      return true;
    }
    return false;
  };
  const auto y = digits(4);
  if (!y || !expect("-")) return std::nullopt;
  const auto mo = digits(2);
  if (!mo || !expect("-")) return std::nullopt;
  const auto d = digits(2);
  if (!d || !expect(" T")) return std::nullopt;
  const auto h = digits(2);
  if (!h || !expect(":")) return std::nullopt;
  const auto mi = digits(2);
  if (!mi || !expect(":")) return std::nullopt;
  const auto se = digits(2);
  if (!se) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *se > 60) return std::nullopt;
  WallTime t;
  if (expect(".")) {
    std::int64_t scale = 100'000'000'000;  // the first fraction digit is tenths: 10^11 ps
    std::size_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      t.ps += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
      ++n;
    }
    if (n == 0) return std::nullopt;
  }
  std::int64_t offset = 0;  // seconds east of UTC
  if (!expect("Z") && i < s.size() && (s[i] == '+' || s[i] == '-')) {
    const std::int64_t sign = s[i] == '-' ? -1 : 1;
    ++i;
    const auto oh = digits(2);
    if (!oh || !expect(":")) return std::nullopt;
    const auto om = digits(2);
    if (!om) return std::nullopt;
    offset = sign * (*oh * 3600 + *om * 60);
  }
  if (i != s.size()) return std::nullopt;
  t.seconds = days_from_civil(*y, *mo, *d) * 86400 + *h * 3600 + *mi * 60 + *se - offset;
  return t;
}

/// A non-negative number of seconds as whole seconds plus picoseconds, without going through a picosecond
/// count that could overflow (BurstGPT's later files start 5e6 s in; 10^19 ps is past int64).
WallTime split_seconds(double s) {
  WallTime t;
  const double whole = std::floor(s);
  t.seconds = static_cast<std::int64_t>(whole);
  t.ps = std::llround((s - whole) * static_cast<double>(kPicosecondsPerSecond));
  if (t.ps >= kPicosecondsPerSecond) {
    t.seconds += 1;
    t.ps -= kPicosecondsPerSecond;
  }
  return t;
}

// ------------------------------------------------------------------------------------------------------
// Reading.

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

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

Header read_header(std::string_view line, std::int64_t lineno) {
  Header h;
  h.line = lineno;
  std::vector<std::string_view> f;
  split_fields(line, f);
  for (auto x : f) {
    h.names.emplace_back(x);
    h.keys.push_back(lower(x));
  }
  return h;
}

/// Collects the requests as rows are read: checks that times do not decrease, makes them relative to
/// the first request kept (every format but moesim's own), applies the time scale and the run's range.
class Collector {
 public:
  Collector(const TraceLines& in, const RequestTraceOptions& o, bool relative) : in_(in), o_(o), relative_(relative) {}

  [[nodiscard]] bool full() const {
    return o_.max_requests > 0 && static_cast<std::int64_t>(out_.size()) >= o_.max_requests;
  }

  /// Every row's time, in file order, kept or not: a time earlier than the previous row's is refused.
  void check_order(const WallTime& t, std::string_view text, const std::function<UserError(const std::string&)>& fail) {
    if (have_previous_ && t < previous_) {
      throw fail("\"" + std::string(text) + "\" is earlier than line " + std::to_string(previous_line_) +
                 "'s time; times must not decrease; sort the file by time");
    }
    previous_ = t;
    previous_line_ = in_.lineno();
    have_previous_ = true;
  }

  void keep(const WallTime& t, std::int64_t prompt, std::int64_t output, std::string_view text,
            const std::function<UserError(const std::string&)>& fail) {
    if (out_.empty() && relative_) first_ = t;
    const std::int64_t ds = t.seconds - first_.seconds;
    if (static_cast<double>(ds) > kMaxRunSeconds) {
      throw fail("\"" + std::string(text) + "\" is more than " + short_number(kMaxRunSeconds) +
                 " s after the first request's time, more than a run can hold; trim the trace");
    }
    SimTime arrival = ds * kPicosecondsPerSecond + (t.ps - first_.ps);
    if (o_.time_scale != 1.0) {
      const double scaled = static_cast<double>(arrival) * o_.time_scale;
      if (scaled > kMaxRunSeconds * static_cast<double>(kPicosecondsPerSecond)) {
        throw fail("\"" + std::string(text) + "\" is " + short_number(to_seconds(arrival)) + " s into the trace, " +
                   short_number(scaled / static_cast<double>(kPicosecondsPerSecond)) + " s once scaled by time_scale " +
                   short_number(o_.time_scale) + ", past the " + short_number(kMaxRunSeconds) +
                   " s a run can hold; lower the time scale or trim the trace");
      }
      arrival = std::llround(scaled);
    }
    if (out_.size() == out_.capacity()) {
      // The list grows by doubling: each step is asked of the memory budget before it is allocated.
      const std::size_t next = std::max<std::size_t>(1024, 2 * out_.capacity());
      model::require_memory(units::bytes(static_cast<double>(next) * static_cast<double>(sizeof(Request))),
                            "the request trace's first " + std::to_string(next) + " requests",
                            "read fewer of them (--requests, workload.requests), or use a machine with more memory");
      out_.reserve(next);
    }
    Request r;
    r.id = static_cast<std::int64_t>(out_.size());
    r.arrival = arrival;
    r.prompt_tokens = prompt;
    r.output_tokens = output;
    out_.push_back(r);
  }

  std::vector<Request> take() { return std::move(out_); }
  [[nodiscard]] bool empty() const { return out_.empty(); }

 private:
  const TraceLines& in_;
  const RequestTraceOptions& o_;
  bool relative_;
  std::vector<Request> out_;
  WallTime first_;  // {0, 0} for an absolute format
  WallTime previous_;
  std::int64_t previous_line_ = 0;
  bool have_previous_ = false;
};

/// Refuses a header that names one column twice (which value is read would depend on column order).
void check_duplicates(const Header& h, const TraceLines& in) {
  for (std::size_t i = 0; i < h.keys.size(); ++i)
    for (std::size_t j = i + 1; j < h.keys.size(); ++j)
      if (!h.keys[i].empty() && h.keys[i] == h.keys[j])
        throw UserError(in.at(h.line) + ": the header names the column " + h.names[j] + " twice (columns " +
                        std::to_string(i + 1) + " and " + std::to_string(j + 1) + "); keep one");
}

/// The row's fields, or UserError naming the first needed column it lacks.
void need_fields(const std::vector<std::string_view>& f, const Header& h, std::initializer_list<std::int64_t> cols,
                 const TraceLines& in) {
  for (std::int64_t c : cols) {
    if (c >= static_cast<std::int64_t>(f.size())) {
      throw UserError(in.at(in.lineno()) + ", column " + h.names[static_cast<std::size_t>(c)] +
                      ": is missing: the row has " + std::to_string(f.size()) + " fields, the header " +
                      std::to_string(h.names.size()) + "; give every row a value in each column");
    }
  }
}

/// A token count: an integer >= `min`.
std::int64_t token_count(std::string_view t, std::int64_t min, const std::function<UserError(const std::string&)>& fail,
                         const std::string& fix) {
  const auto n = parse_whole<std::int64_t>(t);
  if (!n) throw fail("\"" + std::string(t) + "\" is not a whole number; token counts are integers >= 1");
  if (*n < min) throw fail(std::string(t) + " is not a token count >= " + std::to_string(min) + "; " + fix);
  return *n;
}

/// A time in seconds written as a decimal (moesim's arrival_s, BurstGPT's Timestamp), >= 0 and finite.
double seconds_field(std::string_view t, const std::function<UserError(const std::string&)>& fail) {
  const auto s = parse_whole<double>(t);
  if (!s || !std::isfinite(*s)) {
    throw fail("\"" + std::string(t) + "\" is not a number; write seconds as a decimal, e.g. 12.5");
  }
  if (*s < 0) throw fail(std::string(t) + " is negative; times are seconds from the start, >= 0");
  // Beyond 10^15 s (30 million years) no trace's time is meant; bounding it keeps the whole seconds an int64.
  if (*s > 1e15) throw fail(std::string(t) + " s is no time a trace holds; check the column's unit (seconds)");
  return *s;
}

/// The awk command that keeps the header and the rows whose column `col` (0-based) is above 0.
std::string awk_filter(std::int64_t col, const std::string& name) {
  return "awk -F, 'NR==1 || $" + std::to_string(col + 1) + " > 0' " + name + " > filtered.csv";
}

// moesim's own CSV and the Azure traces: one reader, since both name the token columns either way.
std::vector<Request> read_moesim_or_azure(TraceLines& in, const Header& h, RequestTraceFormat format,
                                          const RequestTraceOptions& o) {
  const std::int64_t col_arrival_s = h.find({"arrival_s"});
  const std::int64_t col_timestamp = h.find({"timestamp"});
  const std::int64_t col_prompt = h.find({"prompt_tokens", "contexttokens"});
  const std::int64_t col_output = h.find({"output_tokens", "generatedtokens"});
  const bool seconds_column = format == RequestTraceFormat::Moesim;
  auto missing = [&](const std::string& what) {
    return UserError(
        in.at(h.line) + ": the header has no " + what + " column; its columns are: " + text::join(h.names) + "; " +
        (seconds_column ? "a moesim request trace needs arrival_s" : "an Azure LLM inference trace needs TIMESTAMP") +
        ", prompt_tokens (or ContextTokens) and output_tokens (or GeneratedTokens)");
  };
  if (seconds_column && col_arrival_s < 0) throw missing("arrival-time (arrival_s)");
  if (!seconds_column && col_timestamp < 0) throw missing("arrival-time (TIMESTAMP)");
  if (col_prompt < 0) throw missing("prompt-length (prompt_tokens or ContextTokens)");
  if (col_output < 0) throw missing("output-length (output_tokens or GeneratedTokens)");
  // One quantity under two of its names would make which value is read depend on column order: refused.
  for (const auto& names : std::vector<std::vector<std::string>>{
           {"arrival_s", "timestamp"}, {"prompt_tokens", "contexttokens"}, {"output_tokens", "generatedtokens"}}) {
    std::vector<std::string> given;
    for (std::size_t c = 0; c < h.keys.size(); ++c)
      if (std::find(names.begin(), names.end(), h.keys[c]) != names.end()) given.push_back(h.names[c]);
    if (given.size() > 1) {
      throw UserError(in.at(h.line) + ": the header gives the " + given.front() + " column " +
                      std::to_string(given.size()) + " times (" + text::join(given) + "); keep one");
    }
  }
  const std::int64_t col_time = seconds_column ? col_arrival_s : col_timestamp;

  Collector keep(in, o, /*relative=*/!seconds_column);
  std::vector<std::string_view> f;
  std::string_view line;
  while (!keep.full() && in.next(line)) {
    split_fields(line, f);
    need_fields(f, h, {col_time, col_prompt, col_output}, in);
    auto fail_at = [&](std::int64_t col) {
      return [&, col](const std::string& what) {
        return UserError(in.at(in.lineno()) + ", column " + h.names[static_cast<std::size_t>(col)] + ": " + what);
      };
    };
    const std::string_view time_text = f[static_cast<std::size_t>(col_time)];
    WallTime t;
    if (seconds_column) {
      const double s = seconds_field(time_text, fail_at(col_time));
      if (s > kMaxRunSeconds) {
        throw fail_at(col_time)(std::string(time_text) + " s is past the " + short_number(kMaxRunSeconds) +
                                " s a run can hold; check the unit (seconds) or trim the trace");
      }
      // As picoseconds first, as moesim has always read arrival_s, then split.
      const auto ps = static_cast<SimTime>(std::llround(s * static_cast<double>(kPicosecondsPerSecond)));
      t = {ps / kPicosecondsPerSecond, ps % kPicosecondsPerSecond};
    } else {
      const auto wall = parse_timestamp(time_text);
      if (!wall) {
        throw fail_at(col_time)("\"" + std::string(time_text) +
                                "\" is not a timestamp like 2023-11-16 18:15:46.6805900 (optionally with a UTC "
                                "offset, +00:00)");
      }
      t = *wall;
    }
    keep.check_order(t, time_text, fail_at(col_time));
    const std::int64_t prompt =
        token_count(f[static_cast<std::size_t>(col_prompt)], 1, fail_at(col_prompt), "token counts are >= 1");
    // Azure's traces have rows with 0 generated tokens; say how to drop them.
    const std::int64_t output =
        token_count(f[static_cast<std::size_t>(col_output)], 1, fail_at(col_output),
                    "a request generates at least 1 token; drop such rows, e.g. " + awk_filter(col_output, in.name()));
    keep.keep(t, prompt, output, time_text, fail_at(col_time));
  }
  if (keep.empty()) {
    throw UserError(in.name() + ": has a header but no requests; add rows below the header (line " +
                    std::to_string(h.line) + ")");
  }
  return keep.take();
}

std::vector<Request> read_burstgpt(TraceLines& in, const Header& h, const RequestTraceOptions& o,
                                   std::int64_t& failed) {
  const std::int64_t col_time = h.find({"timestamp"});
  const std::int64_t col_request = h.find({"request tokens"});
  const std::int64_t col_response = h.find({"response tokens"});
  for (auto [col, name] : {std::pair{col_time, "Timestamp"}, std::pair{col_request, "Request tokens"},
                           std::pair{col_response, "Response tokens"}}) {
    if (col < 0) {
      throw UserError(in.at(h.line) + ": the header has no " + name +
                      " column; its columns are: " + text::join(h.names) +
                      "; a BurstGPT trace has Timestamp, Model, Request tokens, Response tokens, Total tokens and "
                      "Log Type (moesim reads Timestamp, Request tokens and Response tokens)");
    }
  }
  Collector keep(in, o, /*relative=*/true);
  std::vector<std::string_view> f;
  std::string_view line;
  while (!keep.full() && in.next(line)) {
    split_fields(line, f);
    need_fields(f, h, {col_time, col_request, col_response}, in);
    auto fail_at = [&](std::int64_t col) {
      return [&, col](const std::string& what) {
        return UserError(in.at(in.lineno()) + ", column " + h.names[static_cast<std::size_t>(col)] + ": " + what);
      };
    };
    const std::string_view time_text = f[static_cast<std::size_t>(col_time)];
    const WallTime t = split_seconds(seconds_field(time_text, fail_at(col_time)));
    keep.check_order(t, time_text, fail_at(col_time));
    const std::int64_t response = token_count(f[static_cast<std::size_t>(col_response)], 0, fail_at(col_response),
                                              "token counts are >= 0 (0: a failed request)");
    if (response == 0) {
      // A failed request (BurstGPT's README): left out, counted.
      ++failed;
      continue;
    }
    const std::int64_t request =
        token_count(f[static_cast<std::size_t>(col_request)], 1, fail_at(col_request),
                    "a request with a response has a prompt of at least 1 token; drop such rows, e.g. " +
                        awk_filter(col_request, in.name()));
    keep.keep(t, request, response, time_text, fail_at(col_time));
  }
  if (keep.empty()) {
    throw UserError(in.name() + ": has no requests" +
                    (failed > 0
                         ? " but " + std::to_string(failed) + " failed ones (Response tokens 0), which are left out"
                         : std::string()) +
                    "; give rows with Response tokens >= 1 below the header (line " + std::to_string(h.line) + ")");
  }
  return keep.take();
}

/// One JSON line, or UserError naming the line and column.
nlohmann::json parse_json_line(std::string_view line, const TraceLines& in) {
  const std::string at = in.at(in.lineno());
  try {
    return json::parse_strict(line, at);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string what = e.what();
    const auto colon = what.find(": ", what.find("parse error"));
    const std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    throw UserError(at + ", column " + std::to_string(e.byte == 0 ? 1 : e.byte) + ": malformed JSON: " + detail +
                    "; a Mooncake trace has one JSON object per line, e.g. {\"timestamp\": 0, \"input_length\": "
                    "6758, \"output_length\": 500, \"hash_ids\": [0, 1]}");
  } catch (const nlohmann::json::out_of_range& e) {
    throw UserError(at + ": " + json::number_overflow(e) + "; write numbers within a double's range");
  }
}

std::vector<Request> read_mooncake(TraceLines& in, std::string_view first, const RequestTraceOptions& o) {
  Collector keep(in, o, /*relative=*/true);
  std::string_view line = first;
  do {
    const nlohmann::json j = parse_json_line(line, in);
    const std::string at = in.at(in.lineno());
    if (!j.is_object()) {
      throw UserError(at + ": is " + json::type_name(j) +
                      ", expected a JSON object {\"timestamp\": ms, \"input_length\": n, \"output_length\": n}");
    }
    const json::Node n(j, at);
    auto fail_at = [&](std::string_view key) {
      return [&n, key](const std::string& what) { return n.error(key, what); };
    };
    // timestamp: milliseconds (FAST25-release/README.md), an integer in the published files.
    const auto& ts = j.contains("timestamp") ? j.at("timestamp") : nlohmann::json();
    WallTime t;
    std::string time_text;
    if (ts.is_number_integer()) {
      const std::int64_t ms = n.integer("timestamp", 0);  // UserError for a negative one
      t = {ms / 1000, (ms % 1000) * 1'000'000'000};
      time_text = std::to_string(ms);
    } else {
      const double ms = n.number("timestamp");  // UserError for a missing or non-numeric one
      if (!std::isfinite(ms) || ms < 0) throw n.error("timestamp", "is " + short_number(ms) + "; times are >= 0 ms");
      // As for an integer timestamp, it must fit an int64 of milliseconds.
      if (ms >= 9e18) throw n.error("timestamp", "is " + short_number(ms) + " ms, no time a trace holds; check its unit");
      const double whole_ms = std::floor(ms);
      const WallTime frac = split_seconds((ms - whole_ms) / 1000.0);
      const auto w = static_cast<std::int64_t>(whole_ms);
      t = {w / 1000, (w % 1000) * 1'000'000'000 + frac.ps};
      if (t.ps >= kPicosecondsPerSecond) {  // a fraction that rounded up to the next second
        t.seconds += 1;
        t.ps -= kPicosecondsPerSecond;
      }
      time_text = ts.dump();
    }
    keep.check_order(t, time_text + " ms", fail_at("timestamp"));
    const std::int64_t input = n.integer("input_length", 1);
    const std::int64_t output = n.integer("output_length", 0);
    if (output < 1) {
      throw n.error("output_length", "is " + std::to_string(output) +
                                         "; a request generates at least 1 token; drop such lines, e.g. grep -v "
                                         "'\"output_length\": 0,' " +
                                         in.name() + " > filtered.jsonl");
    }
    keep.keep(t, input, output, time_text + " ms", fail_at("timestamp"));
  } while (!keep.full() && in.next(line));
  return keep.take();  // the first line is a request or a refusal: never empty
}

/// The formats, for the message about a header that matches none.
std::string formats_list() {
  return "moesim (arrival_s,prompt_tokens,output_tokens), azure (TIMESTAMP,ContextTokens,GeneratedTokens: the Azure "
         "LLM inference traces 2023 and 2024), burstgpt (Timestamp,Model,Request tokens,Response tokens,Total "
         "tokens,Log Type), mooncake (JSON lines {\"timestamp\": ms, \"input_length\", \"output_length\", "
         "\"hash_ids\"})";
}

}  // namespace

// ------------------------------------------------------------------------------------------------------

const std::vector<NamedOption<RequestTraceFormat>>& request_trace_formats() {
  static const std::vector<NamedOption<RequestTraceFormat>> kAll = {
      {RequestTraceFormat::Auto, "auto", "detect the format from the file's first line (the default)"},
      {RequestTraceFormat::Moesim, "moesim",
       "CSV arrival_s,prompt_tokens,output_tokens; arrival_s in seconds from the start of the run"},
      {RequestTraceFormat::Azure, "azure",
       "the Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset, AzureLLMInferenceTrace_*.csv): CSV "
       "TIMESTAMP,ContextTokens,GeneratedTokens, wall-clock times made relative to the first row"},
      {RequestTraceFormat::BurstGpt, "burstgpt",
       "BurstGPT (HPMLL/BurstGPT, BurstGPT_*.csv): CSV Timestamp (s),Model,Request tokens,Response tokens,Total "
       "tokens,Log Type; failed requests (Response tokens 0) are left out and counted"},
      {RequestTraceFormat::Mooncake, "mooncake",
       "Mooncake (kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl): JSON lines {\"timestamp\" (ms), "
       "\"input_length\", \"output_length\", \"hash_ids\"}; hash_ids are not used"},
  };
  return kAll;
}

RequestTraceFormat request_trace_format_by_name(std::string_view name) {
  return by_name(request_trace_formats(), name, "request-trace format");
}

std::string_view name_of(RequestTraceFormat f) { return name_in(request_trace_formats(), f); }

std::string RequestTrace::summary(const std::string& file, double time_scale) const {
  std::string s = "request trace " + file + " read as " + std::string(name_of(format)) +
                  (detected ? " (detected from its first line)" : " (as asked)") + ": " +
                  std::to_string(requests.size()) + " requests";
  if (failed > 0) {
    s += ", " + std::to_string(failed) +
         " failed requests (Response tokens 0) left out, as BurstGPT's *_without_fails_* files and vLLM's "
         "BurstGPTDataset leave them out";
  }
  if (time_scale != 1.0) s += ", arrival times multiplied by " + short_number(time_scale) + " (time_scale)";
  return s;
}

RequestTrace read_request_trace(const std::filesystem::path& path, const RequestTraceOptions& o) {
  const std::string name = path.string();
  MOESIM_CHECK(o.max_requests >= 0 && std::isfinite(o.time_scale) && o.time_scale > 0,
               "read_request_trace: options not validated");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !std::filesystem::is_symlink(path, ec)) {
    throw UserError(name +
                    ": no such request-trace file; check the path (relative paths are resolved against the "
                    "scenario file's directory)");
  }
  TraceLines in(path);
  std::string_view first;
  if (!in.next(first)) {
    throw UserError(name +
                    ": is empty; a request trace starts with a header row such as "
                    "arrival_s,prompt_tokens,output_tokens (or a format's own: " +
                    formats_list() + ")");
  }
  RequestTrace out;
  out.format = o.format;
  const bool json_line = trim(first).starts_with("{");
  if (o.format == RequestTraceFormat::Mooncake || (o.format == RequestTraceFormat::Auto && json_line)) {
    out.format = RequestTraceFormat::Mooncake;
    out.detected = o.format == RequestTraceFormat::Auto;
    out.requests = read_mooncake(in, first, o);
    return out;
  }
  if (json_line) {
    throw UserError(in.at(in.lineno()) + ": is a JSON line, not the CSV header the " + std::string(name_of(o.format)) +
                    " format starts with; for a Mooncake trace give the format mooncake (or auto)");
  }
  in.set_memory_per_byte(2.0);  // a line is held as text and split into views: about twice its size
  const Header h = read_header(first, in.lineno());
  if (o.format == RequestTraceFormat::Auto) {
    out.detected = true;
    if (h.has("request tokens") || h.has("response tokens")) {
      out.format = RequestTraceFormat::BurstGpt;
    } else if (h.has("arrival_s")) {
      out.format = RequestTraceFormat::Moesim;
    } else if (h.has("timestamp")) {
      out.format = RequestTraceFormat::Azure;
    } else {
      throw UserError(in.at(h.line) + ": the header matches no request-trace format (its columns are: " +
                      text::join(h.names) + "); the formats are " + formats_list() +
                      "; name the columns as one of them, or give the format (--request-trace-format, "
                      "workload.trace_format)");
    }
  }
  check_duplicates(h, in);
  if (out.format == RequestTraceFormat::BurstGpt) {
    out.requests = read_burstgpt(in, h, o, out.failed);
  } else {
    out.requests = read_moesim_or_azure(in, h, out.format, o);
  }
  return out;
}

std::vector<Request> load_request_trace(const std::filesystem::path& path, std::int64_t max_rows) {
  RequestTraceOptions o;
  o.max_requests = max_rows;
  return read_request_trace(path, o).requests;
}

}  // namespace moesim::sim
