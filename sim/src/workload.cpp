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

}  // namespace

/// A short number for messages ("2", "0.5").
std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

namespace {

const std::vector<std::string>& arrival_names() {
  static const std::vector<std::string> kNames = {"poisson", "gamma", "uniform", "closed-loop", "trace"};
  return kNames;
}

constexpr ArrivalKind kArrivalKinds[] = {ArrivalKind::Poisson, ArrivalKind::Gamma, ArrivalKind::Uniform,
                                         ArrivalKind::ClosedLoop, ArrivalKind::Trace};

/// The keys each arrival kind uses (besides "arrival", "requests" and "seed").
std::vector<std::string> keys_of(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Uniform:
      return {"rate", "max_concurrency", "prompt", "output"};
    case ArrivalKind::Gamma:
      return {"rate", "burstiness", "max_concurrency", "prompt", "output"};
    case ArrivalKind::ClosedLoop:
      return {"users", "user_interval", "think_time", "prompt", "output"};
    case ArrivalKind::Trace:
      return {"trace", "trace_format", "time_scale", "max_concurrency"};
  }
  return {};
}

}  // namespace
}  // namespace workload_detail

// ------------------------------------------------------------------------------------------------------

std::string_view name_of(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::Poisson:
      return "poisson";
    case ArrivalKind::Gamma:
      return "gamma";
    case ArrivalKind::Uniform:
      return "uniform";
    case ArrivalKind::ClosedLoop:
      return "closed-loop";
    case ArrivalKind::Trace:
      return "trace";
  }
  return "?";
}

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
  using workload_detail::arrival_names;
  using workload_detail::kArrivalKinds;
  using workload_detail::keys_of;
  using workload_detail::parse_length;
  using workload_detail::short_number;
  if (!node.raw().is_object()) throw node.error("is " + json::type_name(node.raw()) + ", expected an object { ... }");
  WorkloadSpec w;
  const std::string arrival = node.string("arrival");
  bool found = false;
  for (ArrivalKind k : kArrivalKinds) {
    if (arrival == name_of(k)) {
      w.arrival = k;
      found = true;
    }
  }
  if (!found) {
    throw node.error("arrival", "is \"" + arrival + "\", not a known arrival process" +
                                    text::did_you_mean(arrival, arrival_names()) +
                                    "; valid: " + text::join(arrival_names()));
  }

  // Keys of another arrival kind get a message that says so; then anything else is unknown.
  std::vector<std::string> allowed = {"arrival", "requests", "seed"};
  for (const auto& k : keys_of(w.arrival)) allowed.push_back(k);
  for (const auto& [key, value] : node.raw().items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    for (ArrivalKind other : kArrivalKinds) {
      const auto keys = keys_of(other);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
        std::string why;
        if (w.arrival == ArrivalKind::Trace) why = " (the trace file gives times and lengths)";
        if (w.arrival == ArrivalKind::ClosedLoop && key == "max_concurrency")
          why = " (closed-loop users already bound the requests in flight: one each)";
        if (w.arrival == ArrivalKind::Poisson && key == "burstiness")
          why = " (burstiness is the shape of \"gamma\" gaps; gamma with burstiness 1 is Poisson)";
        throw node.error(key, "is not used with arrival \"" + arrival + "\"" + why + "; remove it (keys for \"" +
                                  arrival + "\": " + text::join(keys_of(w.arrival)) + ")");
      }
    }
  }
  node.expect_only(allowed);

  if (w.arrival == ArrivalKind::Trace) {
    w.requests = node.optional_integer("requests", 0).value_or(0);
  } else {
    w.requests = node.optional_integer("requests", 1).value_or(100);
  }
  if (node.has("seed")) {
    const auto& s = node.raw().at("seed");
    w.seed = s.is_number_unsigned() ? s.get<std::uint64_t>() : static_cast<std::uint64_t>(node.integer("seed", 0));
  }
  // At most this many in flight; absent = no cap (vLLM's default).
  w.max_concurrency = node.optional_integer("max_concurrency", 1).value_or(0);

  switch (w.arrival) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Gamma:
    case ArrivalKind::Uniform: {
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
      break;
    }
    case ArrivalKind::ClosedLoop:
      w.users = node.optional_integer("users", 1).value_or(1);
      if (auto d = node.optional_quantity<units::Dimension::Time>("user_interval", true)) w.user_interval_s = d->base();
      if (auto d = node.optional_quantity<units::Dimension::Time>("think_time", true)) w.think_time_s = d->base();
      break;
    case ArrivalKind::Trace: {
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
      break;
    }
  }
  if (w.arrival != ArrivalKind::Trace) {
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
  using workload_detail::number_text;
  nlohmann::json j = nlohmann::json::object();
  j["arrival"] = std::string(name_of(w.arrival));
  j["requests"] = w.requests;
  j["seed"] = w.seed;
  if (w.max_concurrency > 0) j["max_concurrency"] = w.max_concurrency;
  switch (w.arrival) {
    case ArrivalKind::Poisson:
    case ArrivalKind::Uniform:
      j["rate"] = number_text(w.rate) + "/s";
      break;
    case ArrivalKind::Gamma:
      j["rate"] = number_text(w.rate) + "/s";
      j["burstiness"] = w.burstiness;
      break;
    case ArrivalKind::ClosedLoop:
      j["users"] = w.users;
      j["user_interval"] = number_text(w.user_interval_s) + "s";
      j["think_time"] = number_text(w.think_time_s) + "s";
      break;
    case ArrivalKind::Trace:
      j["trace"] = w.trace_path;
      // Written only when not the default, so that a trace run's resolved scenario reads as it always has.
      if (w.trace_format != RequestTraceFormat::Auto) j["trace_format"] = std::string(name_of(w.trace_format));
      if (w.time_scale != 1.0) j["time_scale"] = w.time_scale;
      break;
  }
  if (w.arrival != ArrivalKind::Trace) {
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
