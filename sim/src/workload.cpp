// The workload spec (serving scenarios' "workload"): parsing it from JSON, writing it back, validating it;
// the length distributions are in workload_lengths.cpp, the arrival processes in workload_arrivals.cpp.
#include "moesim/sim/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fields.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "workload_detail.hpp"

namespace moesim::sim {
namespace workload_detail {

// ------------------------------------------------------------------------------------------------------
// Limits and formatting.

// kMaxRunSeconds (request.hpp): the longest run accepted.

namespace {

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// Open-loop kinds with drawn times: the request rate (and, gamma, the gaps' shape).
void parse_rate(const json::Node& node, const std::filesystem::path& /*base_dir*/, WorkloadSpec& w) {
  const auto& r = node.raw().contains("rate") ? node.raw().at("rate") : nlohmann::json();
  if (r.is_null()) throw node.error("rate", "is missing; add the request rate with its unit, e.g. \"2/s\"");
  if (r.is_number()) {
    throw node.error("rate", "is the bare number " + r.dump() + "; write the request rate with its unit, e.g. \"" +
                                 r.dump() + "/s\" (requests per second)");
  }
  w.rate = parse_request_rate(node.string("rate"), node.where("rate"));
  if (auto b = node.optional_number("burstiness")) {
    if (!std::isfinite(*b) || *b <= 0) {
      throw node.error("burstiness", "is " + short_number(*b) +
                                         "; it is the gamma gaps' shape, > 0: 1 is Poisson, 0.5 burstier, 2 "
                                         "more even");
    }
    w.burstiness = *b;
  }
}
void write_rate(const WorkloadSpec& w, nlohmann::json& j) { j["rate"] = number_text(w.rate) + "/s"; }
void write_rate_and_shape(const WorkloadSpec& w, nlohmann::json& j) {
  write_rate(w, j);
  j["burstiness"] = w.burstiness;
}

void parse_closed_loop(const json::Node& node, const std::filesystem::path& /*base_dir*/, WorkloadSpec& w) {
  w.users = node.optional_integer("users", 1).value_or(1);
  if (auto d = node.optional_quantity<units::Dimension::Time>("user_interval", true)) w.user_interval_s = d->base();
  if (auto d = node.optional_quantity<units::Dimension::Time>("think_time", true)) w.think_time_s = d->base();
}
void write_closed_loop(const WorkloadSpec& w, nlohmann::json& j) {
  j["users"] = w.users;
  j["user_interval"] = number_text(w.user_interval_s) + "s";
  j["think_time"] = number_text(w.think_time_s) + "s";
}

void parse_trace_keys(const json::Node& node, const std::filesystem::path& base_dir, WorkloadSpec& w) {
  std::filesystem::path p = node.string("trace");
  if (p.empty()) throw node.error("trace", "is empty; give the request-trace file");
  if (p.is_relative()) p = base_dir / p;
  w.trace_path = p.lexically_normal().string();
  if (auto f = node.optional_string("trace_format"))
    w.trace_format = node.resolving("trace_format", [&] { return request_trace_format_by_name(*f); });
  if (auto x = node.optional_number("time_scale")) {
    if (!std::isfinite(*x) || *x <= 0) {
      throw node.error("time_scale", "is " + short_number(*x) +
                                         "; every arrival time is multiplied by it, so it is > 0: 0.5 replays "
                                         "the trace twice as fast, 2 half as fast");
    }
    w.time_scale = *x;
  }
}
void write_trace_keys(const WorkloadSpec& w, nlohmann::json& j) {
  j["trace"] = w.trace_path;
  // Written only when not the default, so that a trace run's resolved scenario reads as it always has.
  if (w.trace_format != RequestTraceFormat::Auto) j["trace_format"] = std::string(name_of(w.trace_format));
  if (w.time_scale != 1.0) j["time_scale"] = w.time_scale;
}

std::vector<ArrivalInfo>& arrival_registry() {
  static std::vector<ArrivalInfo> all = {
      {ArrivalKind::Poisson,
       "poisson",
       "exponential gaps with mean 1/rate (an open-loop Poisson process)",
       {"rate", "max_concurrency", "prompt", "output"},
       100,
       1,
       parse_rate,
       write_rate,
       poisson_arrival},
      {ArrivalKind::Gamma,
       "gamma",
       "gamma-distributed gaps with mean 1/rate and shape burstiness (vLLM's --burstiness): 1 is Poisson, below 1 "
       "burstier, above 1 more even",
       {"rate", "burstiness", "max_concurrency", "prompt", "output"},
       100,
       1,
       parse_rate,
       write_rate_and_shape,
       gamma_arrival},
      {ArrivalKind::Uniform,
       "uniform",
       "request i at exactly i / rate (Snowflake's Llama 3.1 405B benchmark)",
       {"rate", "max_concurrency", "prompt", "output"},
       100,
       1,
       parse_rate,
       write_rate,
       uniform_arrival},
      {ArrivalKind::ClosedLoop,
       "closed-loop",
       "user u joins at u x user_interval; each of its requests after the first is sent think_time after the "
       "previous one completed (Databricks' DBRX benchmark)",
       {"users", "user_interval", "think_time", "prompt", "output"},
       100,
       1,
       parse_closed_loop,
       write_closed_loop,
       nullptr},
      {ArrivalKind::Trace,
       "trace",
       "times and lengths from a request-trace file (trace, trace_format, time_scale)",
       {"trace", "trace_format", "time_scale", "max_concurrency"},
       0,
       0,
       parse_trace_keys,
       write_trace_keys,
       nullptr},
  };
  return all;
}

/// Whether `process` uses workload key `key`.
bool uses_key(const ArrivalInfo& process, std::string_view key) {
  return std::find(process.keys.begin(), process.keys.end(), key) != process.keys.end();
}

/// Refuses the keys `process` does not use: a key of another arrival process gets a message that says so
/// (and why, where it is a common mistake); then anything else is unknown.
void expect_keys_of(const json::Node& node, const ArrivalInfo& process) {
  const std::string& arrival = process.name;
  std::vector<std::string> allowed = {"arrival", "requests", "seed"};
  for (const auto& k : process.keys) allowed.push_back(k);
  for (const auto& [key, value] : node.raw().items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    for (const auto& other : arrival_kinds()) {
      if (uses_key(other, key)) {
        std::string why;
        if (process.value == ArrivalKind::Trace) why = " (the trace file gives times and lengths)";
        if (process.value == ArrivalKind::ClosedLoop && key == "max_concurrency")
          why = " (closed-loop users already bound the requests in flight: one each)";
        if (process.value == ArrivalKind::Poisson && key == "burstiness")
          why = " (burstiness is the shape of \"gamma\" gaps; gamma with burstiness 1 is Poisson)";
        throw node.error(key, "is not used with arrival \"" + arrival + "\"" + why + "; remove it (keys for \"" +
                                  arrival + "\": " + text::join(process.keys) + ")");
      }
    }
  }
  node.expect_only(allowed);
}

}  // namespace
}  // namespace workload_detail

// ------------------------------------------------------------------------------------------------------

const std::vector<ArrivalInfo>& arrival_kinds() { return workload_detail::arrival_registry(); }
void register_arrival(ArrivalInfo info) {
  add_entry(workload_detail::arrival_registry(), std::move(info), "arrival process");
}
std::string_view name_of(ArrivalKind k) { return name_in(arrival_kinds(), k); }

double parse_request_rate(std::string_view text, std::string_view where) {
  std::string_view s = text;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  auto fail = [&](const std::string& what) {
    return UserError(std::string(where) + ": \"" + std::string(text) + "\" " + what +
                     "; write a request rate with its unit, e.g. \"2/s\" (also \"2req/s\", \"120/min\", \"7200/h\")");
  };
  std::size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' || s[i] == '+' ||
                          ((s[i] == 'e' || s[i] == 'E') && i > 0))) {
    ++i;
  }
  const auto value = fields::parse_whole<double>(s.substr(0, i));
  if (!value) throw fail("does not start with a number");
  std::string_view unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.empty()) throw fail("has no unit");
  if (unit.starts_with("req")) unit.remove_prefix(3);
  if (unit.starts_with("uest")) unit.remove_prefix(4);  // "request/s"
  if (unit.starts_with("s/")) unit.remove_prefix(1);    // "reqs/s", "requests/s"
  double per_second = 0;
  if (unit == "/s") {
    per_second = 1.0;
  } else if (unit == "/min") {
    per_second = 1.0 / 60.0;
  } else if (unit == "/h") {
    per_second = 1.0 / 3600.0;
  } else {
    throw fail("has an unknown unit '" + std::string(s.substr(i)) + "'");
  }
  const double rate = *value * per_second;
  if (!std::isfinite(rate) || rate <= 0) throw fail("is not a positive rate");
  return rate;
}

WorkloadSpec parse_workload(const json::Node& node, const std::filesystem::path& base_dir) {
  using workload_detail::parse_length;
  if (!node.raw().is_object()) throw node.error("is " + json::type_name(node.raw()) + ", expected an object { ... }");
  WorkloadSpec w;
  const std::string arrival = node.string("arrival");
  const ArrivalInfo* process = nullptr;
  for (const auto& p : arrival_kinds())
    if (p.name == arrival) process = &p;
  if (!process) {
    const auto names = names_in(arrival_kinds());
    throw node.error("arrival", "is \"" + arrival + "\", not a known arrival process" +
                                    text::did_you_mean(arrival, names) + "; valid: " + text::join(names));
  }
  w.arrival = process->value;
  workload_detail::expect_keys_of(node, *process);

  w.requests = node.optional_integer("requests", process->min_requests).value_or(process->default_requests);
  if (node.has("seed")) {
    const auto& s = node.raw().at("seed");
    w.seed = s.is_number_unsigned() ? s.get<std::uint64_t>() : static_cast<std::uint64_t>(node.integer("seed", 0));
  }
  // At most this many in flight; absent = no cap (vLLM's default).
  w.max_concurrency = node.optional_integer("max_concurrency", 1).value_or(0);
  process->parse(node, base_dir, w);
  if (workload_detail::uses_key(*process, "prompt")) {
    for (std::string_view key : {std::string_view("prompt"), std::string_view("output")}) {
      if (!node.has(key) || node.is_null(key)) {
        throw node.error(key, "is missing; add the " + std::string(key == "prompt" ? "prompt" : "output") +
                                  " length in tokens, e.g. 2000 or {\"dist\": \"normal\", \"mean\": 2000, \"std\": "
                                  "200}");
      }
      (key == "prompt" ? w.prompt : w.output) = parse_length(node, key);
    }
  }
  validate_workload(w, node.where());
  return w;
}

nlohmann::json workload_to_json(const WorkloadSpec& w) {
  using workload_detail::length_to_json;
  nlohmann::json j = nlohmann::json::object();
  const ArrivalInfo& process = registered(arrival_kinds(), w.arrival, "arrival process");
  j["arrival"] = process.name;
  j["requests"] = w.requests;
  j["seed"] = w.seed;
  if (w.max_concurrency > 0) j["max_concurrency"] = w.max_concurrency;
  process.write(w, j);
  if (workload_detail::uses_key(process, "prompt")) {
    j["prompt"] = length_to_json(w.prompt);
    j["output"] = length_to_json(w.output);
  }
  return j;
}

void validate_workload(const WorkloadSpec& w, std::string_view where_view) {
  using workload_detail::short_number;
  using workload_detail::validate_length;
  const std::string where(where_view);
  auto fail = [&](const std::string& key, const std::string& what) {
    return UserError(where + "." + key + ": " + what);
  };
  if (w.max_concurrency < 0) {
    throw fail("max_concurrency", "is " + std::to_string(w.max_concurrency) +
                                      "; give at most N requests in flight with N >= 1, or leave it out for no cap");
  }
  if (w.arrival == ArrivalKind::ClosedLoop && w.max_concurrency > 0) {
    throw fail("max_concurrency",
               "is not used with arrival \"closed-loop\": its users already bound the requests in "
               "flight (one each); remove it, or lower users");
  }
  if (w.arrival == ArrivalKind::Trace) {
    if (w.requests < 0) throw fail("requests", "is " + std::to_string(w.requests) + "; use 0 for all rows, or N >= 1");
    if (w.trace_path.empty()) throw fail("trace", "is missing; give the request-trace file");
    if (!std::isfinite(w.time_scale) || w.time_scale <= 0) {
      throw fail("time_scale", "is " + short_number(w.time_scale) + "; it must be > 0 (0.5 replays twice as fast)");
    }
    return;
  }
  if (w.requests < 1) throw fail("requests", "is " + std::to_string(w.requests) + "; a workload has >= 1 request");
  switch (w.arrival) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Gamma:
    case ArrivalKind::Uniform: {
      if (!std::isfinite(w.rate) || w.rate <= 0) {
        throw fail("rate", "is " + short_number(w.rate) + " requests/s; it must be > 0, e.g. \"2/s\"");
      }
      if (w.arrival == ArrivalKind::Gamma && (!std::isfinite(w.burstiness) || w.burstiness <= 0)) {
        throw fail("burstiness", "is " + short_number(w.burstiness) + "; it must be > 0 (1 is Poisson)");
      }
      const double span = static_cast<double>(w.requests) / w.rate;
      if (span > kMaxRunSeconds) {
        throw fail("rate", short_number(static_cast<double>(w.requests)) + " requests at " + short_number(w.rate) +
                               "/s span " + short_number(span) + " s, more than the " + short_number(kMaxRunSeconds) +
                               " s a run can hold; raise the rate or lower requests");
      }
      break;
    }
    case ArrivalKind::ClosedLoop: {
      if (w.users < 1) throw fail("users", "is " + std::to_string(w.users) + "; a closed loop has >= 1 user");
      if (!std::isfinite(w.user_interval_s) || w.user_interval_s < 0) {
        throw fail("user_interval", "is " + short_number(w.user_interval_s) + " s; it must be >= 0, e.g. \"1s\"");
      }
      if (!std::isfinite(w.think_time_s) || w.think_time_s < 0) {
        throw fail("think_time", "is " + short_number(w.think_time_s) + " s; it must be >= 0, e.g. \"0s\"");
      }
      const double joins = static_cast<double>(std::min(w.users, w.requests) - 1) * w.user_interval_s;
      if (joins > kMaxRunSeconds || w.think_time_s > kMaxRunSeconds) {
        throw fail("user_interval", "users join over " + short_number(joins) + " s (think time " +
                                        short_number(w.think_time_s) + " s), more than the " +
                                        short_number(kMaxRunSeconds) +
                                        " s a run can hold; shorten user_interval or think_time, or lower users");
      }
      break;
    }
    case ArrivalKind::Trace:
      break;
  }
  validate_length(w.prompt, where + ".prompt");
  validate_length(w.output, where + ".output");
}

RequestTraceOptions request_trace_options(const WorkloadSpec& w) {
  MOESIM_CHECK(w.arrival == ArrivalKind::Trace, "request_trace_options: not a trace workload");
  RequestTraceOptions o;
  o.format = w.trace_format;
  o.max_requests = w.requests;
  o.time_scale = w.time_scale;
  return o;
}

}  // namespace moesim::sim
