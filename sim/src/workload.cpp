#include "moesim/sim/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>

#include "det_random.hpp"
#include "fields.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"

namespace moesim::sim {
namespace {

// ------------------------------------------------------------------------------------------------------
// Random draws: the counter-based generator and the conversions of det_random.hpp (shared with the
// routing-trace generator). Every draw is a pure function of (seed, stream, index, k), so request i's
// lengths and gaps do not depend on how many requests came before it or in what order a closed loop asks
// for them.

using det::below;
using det::bits;
using det::det_exp;
using det::det_log;
using det::std_normal_cdf;
using det::std_normal_quantile;
using det::uniform_open;

/// The streams of one workload's draws: request i's gap (Poisson), prompt and output length, and the
/// uniforms of its gamma gap (a variable number: the rejection sampler draws k = 0, 1, ...).
enum Stream : std::uint64_t { kArrivalStream = 0, kPromptStream = 1, kOutputStream = 2, kGammaStream = 3 };

/// A standard normal truncated to [a, b] (a < b, either may be infinite) by inversion: the quantile of a
/// uniform point between Phi(a) and Phi(b). When the interval lies above 0 it is mirrored to below 0,
/// where Phi(a) is small and keeps its relative precision (1 - Phi near 1 would lose it).
double truncated_std_normal(double a, double b, double u) {
  if (a > 0) return -truncated_std_normal(-b, -a, u);
  const double pa = std::isinf(a) ? 0.0 : std_normal_cdf(a);
  const double pb = std::isinf(b) ? 1.0 : std_normal_cdf(b);
  const double span = pb - pa;
  const double step = u * span;
  double p = pa + step;
  // Keep p strictly inside (0, 1) for the quantile; the result is clamped to [a, b] by the caller.
  p = std::clamp(p, 0x1.0p-1000, 1.0 - 0x1.0p-53);
  return std::clamp(std_normal_quantile(p), a, b);
}

/// Rounds x to the nearest integer in [lo, hi] (hi = 0: no upper bound; a cap of 2^53 keeps the
/// conversion exact).
std::int64_t round_into(double x, std::int64_t lo, std::int64_t hi) {
  const double top = hi > 0 ? static_cast<double>(hi) : 0x1.0p53;
  const double r = std::floor(std::clamp(x, static_cast<double>(lo), top) + 0.5);
  return std::clamp(static_cast<std::int64_t>(r), lo, hi > 0 ? hi : std::numeric_limits<std::int64_t>::max());
}

/// The length of item `index` under `spec`, from one uniform draw in `stream`.
std::int64_t draw_length(const LengthSpec& spec, std::uint64_t seed, std::uint64_t stream, std::int64_t index) {
  const std::uint64_t b = bits(seed, stream, static_cast<std::uint64_t>(index));
  switch (spec.kind) {
    case LengthKind::Fixed:
      return spec.value;
    case LengthKind::Uniform:
      return spec.min + static_cast<std::int64_t>(below(b, static_cast<std::uint64_t>(spec.max - spec.min + 1)));
    case LengthKind::Normal: {
      if (spec.std == 0) return round_into(spec.mean, spec.min, spec.max);
      // Truncating the continuous value to [min - 1/2, max + 1/2) and rounding gives exactly the normal
      // rounded to integers and conditioned on [min, max].
      const double lo = (static_cast<double>(spec.min) - 0.5 - spec.mean) / spec.std;
      const double hi = spec.max > 0 ? (static_cast<double>(spec.max) + 0.5 - spec.mean) / spec.std
                                     : std::numeric_limits<double>::infinity();
      const double z = truncated_std_normal(lo, hi, uniform_open(b));
      const double x = spec.mean + spec.std * z;
      return round_into(x, spec.min, spec.max);
    }
    case LengthKind::Lognormal: {
      if (spec.std == 0) return round_into(spec.mean, spec.min, spec.max);
      // A lognormal with mean m and standard deviation s has log-space parameters
      //   sigma^2 = ln(1 + s^2/m^2),  mu = ln m - sigma^2 / 2
      // (Johnson, Kotz, Balakrishnan, Continuous Univariate Distributions vol. 1, 2nd ed., ch. 14, eq. 14.8).
      const double cv = spec.std / spec.mean;
      const double sigma2 = det_log(1.0 + cv * cv);
      const double sigma = std::sqrt(sigma2);
      const double mu = det_log(spec.mean) - 0.5 * sigma2;
      const double lo = (det_log(static_cast<double>(spec.min) - 0.5) - mu) / sigma;
      const double hi = spec.max > 0 ? (det_log(static_cast<double>(spec.max) + 0.5) - mu) / sigma
                                     : std::numeric_limits<double>::infinity();
      const double z = truncated_std_normal(lo, hi, uniform_open(b));
      const double sz = sigma * z;
      return round_into(det_exp(mu + sz), spec.min, spec.max);
    }
  }
  MOESIM_CHECK(false, "unknown LengthKind");
  return 0;
}

// ------------------------------------------------------------------------------------------------------
// Limits and formatting.

// kMaxRunSeconds (request.hpp): the longest run accepted.

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// A short number for messages ("2", "0.5").
std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

SimTime seconds_to_ps(double s) {
  return static_cast<SimTime>(std::llround(s * static_cast<double>(kPicosecondsPerSecond)));
}

const std::vector<std::string>& arrival_names() {
  static const std::vector<std::string> kNames = {"poisson", "gamma", "uniform", "closed-loop", "trace"};
  return kNames;
}
const std::vector<std::string>& length_names() {
  static const std::vector<std::string> kNames = {"fixed", "uniform", "normal", "lognormal"};
  return kNames;
}

void validate_length(const LengthSpec& l, const std::string& where) {
  auto fail = [&](const std::string& what) { return UserError(where + ": " + what); };
  switch (l.kind) {
    case LengthKind::Fixed:
      if (l.value < 1) {
        throw fail("is " + std::to_string(l.value) + " tokens; a length is at least 1 token");
      }
      return;
    case LengthKind::Uniform:
      if (l.min < 1) throw fail("min is " + std::to_string(l.min) + "; lengths are at least 1 token, set min >= 1");
      if (l.max < l.min) {
        throw fail("max " + std::to_string(l.max) + " is below min " + std::to_string(l.min) +
                   "; a uniform length needs min <= max");
      }
      return;
    case LengthKind::Normal:
    case LengthKind::Lognormal: {
      if (l.min < 1) throw fail("min is " + std::to_string(l.min) + "; lengths are at least 1 token, set min >= 1");
      if (l.max != 0 && l.max < l.min) {
        throw fail("max " + std::to_string(l.max) + " is below min " + std::to_string(l.min) +
                   "; set min <= max, or leave max out for no upper bound");
      }
      if (!std::isfinite(l.mean) || !std::isfinite(l.std) || l.std < 0) {
        throw fail("mean " + short_number(l.mean) + " and std " + short_number(l.std) +
                   " must be finite numbers with std >= 0");
      }
      const double hi = l.max > 0 ? static_cast<double>(l.max) : std::numeric_limits<double>::infinity();
      if (l.mean < static_cast<double>(l.min) || l.mean > hi) {
        // Outside the bounds almost nothing of the distribution is left to sample.
        throw fail("mean " + short_number(l.mean) + " is outside [min, max] = [" + std::to_string(l.min) + ", " +
                   (l.max > 0 ? std::to_string(l.max) : std::string("no limit")) +
                   "]; move the mean inside the bounds or widen them");
      }
      return;
    }
  }
}

// ------------------------------------------------------------------------------------------------------
// JSON.

LengthSpec parse_length(const json::Node& node, std::string_view key) {
  const nlohmann::json& v = node.raw().at(std::string(key));
  LengthSpec l;
  if (v.is_number()) {
    l.kind = LengthKind::Fixed;
    l.value = node.integer(key, 1);
    return l;
  }
  if (!v.is_object()) {
    throw node.error(key, "is " + json::type_name(v) +
                              ", expected a token count such as 2000 or a distribution such as "
                              "{\"dist\": \"normal\", \"mean\": 2000, \"std\": 200}");
  }
  const json::Node d = node.child(key);
  const std::string dist = d.string("dist");
  if (dist == "fixed") {
    d.expect_only({"dist", "value"});
    l.kind = LengthKind::Fixed;
    l.value = d.integer("value", 1);
  } else if (dist == "uniform") {
    d.expect_only({"dist", "min", "max"});
    l.kind = LengthKind::Uniform;
    l.min = d.integer("min", 1);
    l.max = d.integer("max", 1);
  } else if (dist == "normal" || dist == "lognormal") {
    d.expect_only({"dist", "mean", "std", "min", "max"});
    l.kind = dist == "normal" ? LengthKind::Normal : LengthKind::Lognormal;
    l.mean = d.number("mean");
    l.std = d.number("std");
    l.min = d.optional_integer("min", 1).value_or(1);
    l.max = d.optional_integer("max", 1).value_or(0);
    if (!(l.mean > 0)) throw d.error("mean", "is " + short_number(l.mean) + "; a mean length is > 0 tokens");
    if (l.std < 0) throw d.error("std", "is " + short_number(l.std) + "; a standard deviation is >= 0");
  } else {
    throw d.error("dist", "is \"" + dist + "\", not a known length distribution" +
                              text::did_you_mean(dist, length_names()) + "; valid: " + text::join(length_names()));
  }
  validate_length(l, d.where());
  return l;
}

nlohmann::json length_to_json(const LengthSpec& l) {
  switch (l.kind) {
    case LengthKind::Fixed:
      return l.value;
    case LengthKind::Uniform:
      return {{"dist", "uniform"}, {"min", l.min}, {"max", l.max}};
    case LengthKind::Normal:
    case LengthKind::Lognormal: {
      nlohmann::json j = {{"dist", std::string(name_of(l.kind))}, {"mean", l.mean}, {"std", l.std}, {"min", l.min}};
      if (l.max > 0) j["max"] = l.max;
      return j;
    }
  }
  MOESIM_CHECK(false, "unknown LengthKind");
  return {};
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

std::string_view name_of(LengthKind k) {
  switch (k) {
    case LengthKind::Fixed:
      return "fixed";
    case LengthKind::Uniform:
      return "uniform";
    case LengthKind::Normal:
      return "normal";
    case LengthKind::Lognormal:
      return "lognormal";
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

std::pair<std::int64_t, std::int64_t> lengths_for(const WorkloadSpec& w, std::int64_t index) {
  MOESIM_CHECK(w.arrival != ArrivalKind::Trace, "lengths_for: a trace's lengths come from its file");
  MOESIM_CHECK(index >= 0, "lengths_for: negative request index " + std::to_string(index));
  return {draw_length(w.prompt, w.seed, kPromptStream, index), draw_length(w.output, w.seed, kOutputStream, index)};
}

double mean_length(const LengthSpec& spec) {
  switch (spec.kind) {
    case LengthKind::Fixed:
      return static_cast<double>(spec.value);
    case LengthKind::Uniform:
      return 0.5 * (static_cast<double>(spec.min) + static_cast<double>(spec.max));
    case LengthKind::Normal:
    case LengthKind::Lognormal:
      // The untruncated mean (validate_workload keeps it inside [min, max]); truncation shifts it a little.
      return spec.mean;
  }
  return 0;
}

std::vector<Request> open_loop_requests(const WorkloadSpec& w) {
  MOESIM_CHECK(w.arrival != ArrivalKind::ClosedLoop,
               "open_loop_requests called for a closed-loop workload; use ClosedLoopUsers");
  if (w.arrival == ArrivalKind::Trace) return read_request_trace(w.trace_path, request_trace_options(w)).requests;
  MOESIM_CHECK(w.requests >= 1 && w.rate > 0 && w.burstiness > 0, "open_loop_requests: workload not validated");
  // The list itself: a Request per request.
  model::require_memory(units::bytes(static_cast<double>(w.requests) * static_cast<double>(sizeof(Request))),
                        "the workload's " + std::to_string(w.requests) + " requests",
                        "give fewer requests (--requests, workload.requests), or use a machine with more memory");
  std::vector<Request> out(static_cast<std::size_t>(w.requests));
  // Mean gap in picoseconds; each gap is rounded to a whole picosecond and the times are summed as
  // integers, so the arrival times are exact sums and cannot drift with floating-point accumulation.
  const double mean_gap_ps = static_cast<double>(kPicosecondsPerSecond) / w.rate;
  // Gamma(shape k, scale theta) has mean k theta: theta = 1 / (rate k) keeps the mean gap at 1/rate.
  const double gamma_scale_ps = mean_gap_ps / w.burstiness;
  SimTime t = 0;
  for (std::int64_t i = 0; i < w.requests; ++i) {
    Request& r = out[static_cast<std::size_t>(i)];
    r.id = i;
    if (w.arrival == ArrivalKind::Uniform) {
      // Request i at i / rate (validate_workload keeps (requests - 1) / rate within range).
      r.arrival = static_cast<SimTime>(std::llround(static_cast<double>(i) * mean_gap_ps));
    } else {
      double gap = 0;
      if (w.arrival == ArrivalKind::Poisson) {
        // A Poisson process's gaps are i.i.d. exponential with mean 1/rate; inversion gives -ln(U)/rate for
        // U uniform in (0, 1) (Devroye, Non-Uniform Random Variate Generation, 1986, §II.2.1).
        const double u = uniform_open(bits(w.seed, kArrivalStream, static_cast<std::uint64_t>(i)));
        gap = -det_log(u) * mean_gap_ps;
      } else {
        // vLLM's get_request (vllm/benchmarks/serve.py): np.random.gamma(shape=burstiness,
        // scale=1/(rate*burstiness)). The variate is drawn in logs (det_random.hpp), from request i's own
        // counter-based draws, so it does not depend on any other request's.
        det::CounterRng rng(w.seed, kGammaStream, static_cast<std::uint64_t>(i));
        const double lg = det::log_gamma_variate(w.burstiness, rng);
        gap = det_exp(lg) * gamma_scale_ps;
      }
      // The first request arrives after the first gap: the process starts at 0 with no arrival there.
      if (!(gap <= static_cast<double>(std::numeric_limits<SimTime>::max() - t) - 1e6)) {
        throw UserError("workload: the " + std::string(name_of(w.arrival)) + " arrivals of " +
                        std::to_string(w.requests) + " requests at " + short_number(w.rate) +
                        "/s run past the simulator's time range; raise the rate or lower requests" +
                        (w.arrival == ArrivalKind::Gamma ? " (or raise the burstiness: below 1 a gap can be "
                                                           "many times the mean)"
                                                         : ""));
      }
      t += static_cast<SimTime>(std::llround(gap));
      r.arrival = t;
    }
    std::tie(r.prompt_tokens, r.output_tokens) = lengths_for(w, i);
  }
  return out;
}

// ------------------------------------------------------------------------------------------------------

ClosedLoopUsers::ClosedLoopUsers(const WorkloadSpec& spec)
    : spec_(spec), interval_(seconds_to_ps(spec.user_interval_s)), think_(seconds_to_ps(spec.think_time_s)) {
  MOESIM_CHECK(spec.arrival == ArrivalKind::ClosedLoop, "ClosedLoopUsers needs a closed-loop workload");
  MOESIM_CHECK(spec.users >= 1 && spec.requests >= 1 && interval_ >= 0 && think_ >= 0,
               "ClosedLoopUsers: workload not validated");
}

std::int64_t ClosedLoopUsers::users() const { return std::min(spec_.users, spec_.requests); }

SimTime ClosedLoopUsers::join_time(std::int64_t user) const {
  MOESIM_CHECK(user >= 0 && user < users(), "ClosedLoopUsers::join_time: no user " + std::to_string(user));
  return user * interval_;
}

SimTime ClosedLoopUsers::next_send_time(SimTime completed) const { return completed + think_; }

std::optional<Request> ClosedLoopUsers::send(std::int64_t user, SimTime now) {
  MOESIM_CHECK(user >= 0 && user < users(), "ClosedLoopUsers::send: no user " + std::to_string(user));
  MOESIM_CHECK(now >= last_send_, "ClosedLoopUsers::send: requests must be sent in time order (ids follow arrivals)");
  if (sent_ >= spec_.requests) return std::nullopt;
  last_send_ = now;
  Request r;
  r.id = sent_++;
  r.arrival = now;
  r.user = user;
  std::tie(r.prompt_tokens, r.output_tokens) = lengths_for(spec_, r.id);
  return r;
}

}  // namespace moesim::sim
