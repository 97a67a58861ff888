// Workload length distributions (fixed, uniform, normal, lognormal): drawing a request's prompt and
// output lengths, their JSON form and validation.
#include <algorithm>
#include <cmath>
#include <limits>

#include "det_random.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/workload.hpp"
#include "workload_detail.hpp"

namespace moesim::sim {
namespace workload_detail {
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

}  // namespace

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

}  // namespace workload_detail

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

std::pair<std::int64_t, std::int64_t> lengths_for(const WorkloadSpec& w, std::int64_t index) {
  using workload_detail::draw_length;
  using workload_detail::kOutputStream;
  using workload_detail::kPromptStream;
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

}  // namespace moesim::sim
