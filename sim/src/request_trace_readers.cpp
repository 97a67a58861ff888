// The request-trace readers, one per format (moesim's CSV and Azure, BurstGPT, Mooncake), and the
// Collector that turns their rows into requests.
#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "request_trace_detail.hpp"

namespace moesim::sim::request_trace_detail {
namespace {

using fields::parse_whole;
using fields::split_fields;

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
    SimTime arrival{ds * kPicosecondsPerSecond + (t.ps - first_.ps)};
    if (o_.time_scale != 1.0) {
      const double scaled = static_cast<double>(arrival.ps()) * o_.time_scale;
      if (scaled > kMaxRunSeconds * static_cast<double>(kPicosecondsPerSecond)) {
        throw fail("\"" + std::string(text) + "\" is " + short_number(to_seconds(arrival)) + " s into the trace, " +
                   short_number(scaled / static_cast<double>(kPicosecondsPerSecond)) + " s once scaled by time_scale " +
                   short_number(o_.time_scale) + ", past the " + short_number(kMaxRunSeconds) +
                   " s a run can hold; lower the time scale or trim the trace");
      }
      arrival = SimTime{std::llround(scaled)};
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

}  // namespace

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
      const auto ps = static_cast<std::int64_t>(std::llround(s * static_cast<double>(kPicosecondsPerSecond)));
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
      if (ms >= 9e18)
        throw n.error("timestamp", "is " + short_number(ms) + " ms, no time a trace holds; check its unit");
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

}  // namespace moesim::sim::request_trace_detail
