#include "moesim/sim/trace_gen.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "det_random.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/splitmix64.hpp"
#include "moesim/sim/trace_io.hpp"
#include "moesim/sim/trace_stats.hpp"

namespace moesim::sim {
namespace {

// ------------------------------------------------------------------------------------------------------
// Portable random numbers. std::mt19937_64's output is fixed by the standard ([rand.predef]: the 10000th
// value is 9981545732273789042); everything built on it here is written out, because the standard library's
// distributions are implementation-defined (libstdc++ and libc++ give different values for the same engine).

/// splitmix64 (Steele, Lea, Flood 2014): derives independent seeds for the streams below from one seed.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return splitmix64_mix(seed + kSplitMixGamma * (stream + 1));
}

// exp and log from + - * / and exact scalings, so no C library difference (glibc vs macOS libm differ in
// the last bit of some results) can change a trace. Statements are kept separate so that a compiler's
// -ffp-contract=on (Clang's default) cannot fuse them into FMAs.
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2: hi has 32 significant bits
constexpr double kLn2Lo = 1.90821492927058770002e-10;

/// 1/n for n = 0..23 (index 0 unused): exact-rounded constants, so the loops below multiply instead of divide.
constexpr double kInv[24] = {0.0,      1.0 / 1,  1.0 / 2,  1.0 / 3,  1.0 / 4,  1.0 / 5,  1.0 / 6,  1.0 / 7,
                             1.0 / 8,  1.0 / 9,  1.0 / 10, 1.0 / 11, 1.0 / 12, 1.0 / 13, 1.0 / 14, 1.0 / 15,
                             1.0 / 16, 1.0 / 17, 1.0 / 18, 1.0 / 19, 1.0 / 20, 1.0 / 21, 1.0 / 22, 1.0 / 23};

/// Natural log for x > 0, for n values at once: x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m =
/// 2 atanh(f), f = (m-1)/(m+1), |f| < 0.172, summed to f^23 (truncation < 1e-19). The lanes run side by side
/// (the Horner chains are independent, so they overlap in the pipeline); each lane does exactly the scalar
/// sequence of operations, so the result does not depend on n.
void det_log_n(const double* x, double* out, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  for (std::size_t base = 0; base < n; base += kLanes) {
    const std::size_t w = std::min(kLanes, n - base);
    double f[kLanes], f2[kLanes], sum[kLanes], ex[kLanes];
    for (std::size_t i = 0; i < w; ++i) {
      int e = 0;
      double m = std::frexp(x[base + i], &e);  // m in [0.5, 1)
      if (m < 0.70710678118654752440) {
        m = m * 2.0;
        e = e - 1;
      }
      f[i] = (m - 1.0) / (m + 1.0);
      f2[i] = f[i] * f[i];
      sum[i] = kInv[23];
      ex[i] = static_cast<double>(e);
    }
    for (int k = 21; k >= 1; k -= 2) {
      for (std::size_t i = 0; i < w; ++i) {
        const double t = sum[i] * f2[i];
        sum[i] = t + kInv[k];
      }
    }
    for (std::size_t i = 0; i < w; ++i) {
      const double log_m = 2.0 * f[i] * sum[i];
      const double hi = ex[i] * kLn2Hi;
      const double lo = ex[i] * kLn2Lo;
      const double r = lo + log_m;
      out[base + i] = hi + r;
    }
  }
}

double det_log(double x) {
  double y = 0;
  det_log_n(&x, &y, 1);
  return y;
}

/// e^x for n values at once: x = n ln2 + r, |r| <= ln2/2, e^r by its Taylor series to r^18 (truncation
/// < 1e-19), times 2^n (exact). Lanes as in det_log_n.
void det_exp_n(const double* x, double* out, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  for (std::size_t base = 0; base < n; base += kLanes) {
    const std::size_t w = std::min(kLanes, n - base);
    double r[kLanes], sum[kLanes], q[kLanes];
    for (std::size_t i = 0; i < w; ++i) {
      const double xi = std::clamp(x[base + i], -745.0, 709.0);
      q[i] = std::floor(xi / 0.69314718055994530942 + 0.5);
      const double a = q[i] * kLn2Hi;
      const double b = q[i] * kLn2Lo;
      const double r1 = xi - a;
      r[i] = r1 - b;
      sum[i] = 1.0;
    }
    for (int k = 18; k >= 1; --k) {
      for (std::size_t i = 0; i < w; ++i) {
        const double t = sum[i] * r[i];
        const double u = t * kInv[k];
        sum[i] = 1.0 + u;
      }
    }
    for (std::size_t i = 0; i < w; ++i) {
      out[base + i] = x[base + i] < -745.0 ? 0.0 : std::ldexp(sum[i], static_cast<int>(q[i]));
    }
  }
}

double det_exp(double x) {
  double y = 0;
  det_exp_n(&x, &y, 1);
  return y;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  /// Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  /// Uniform in (0, 1).
  double uniform_open() { return (static_cast<double>(g_() >> 11) + 0.5) * 0x1.0p-53; }
  /// Uniform integer in [0, n): rejecting the lowest 2^64 mod n outputs leaves a multiple of n values.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    std::uint64_t x = g_();
    while (x < threshold) x = g_();
    return x % n;
  }
  /// Standard normal, Marsaglia's polar method (1964); the second variate of each pair is dropped.
  double normal() {
    double z = 0;
    normals(&z, 1);
    return z;
  }
  /// n standard normals (the same values, in the same order, as n calls of normal()).
  void normals(double* z, std::size_t n) {
    constexpr std::size_t kLanes = 16;
    for (std::size_t base = 0; base < n; base += kLanes) {
      const std::size_t w = std::min(kLanes, n - base);
      double u[kLanes], s[kLanes], l[kLanes];
      for (std::size_t i = 0; i < w; ++i) {
        while (true) {
          u[i] = 2.0 * uniform01() - 1.0;
          const double v = 2.0 * uniform01() - 1.0;
          s[i] = u[i] * u[i] + v * v;
          if (s[i] < 1.0 && s[i] != 0.0) break;
        }
      }
      det_log_n(s, l, w);
      // sqrt is correctly rounded (IEEE 754), so portable.
      for (std::size_t i = 0; i < w; ++i) z[base + i] = u[i] * std::sqrt(-2.0 * l[i] / s[i]);
    }
  }

 private:
  std::mt19937_64 g_;
};

// ------------------------------------------------------------------------------------------------------
// Popularity vectors and sampling without replacement.

struct Popularity {
  bool uniform = true;
  std::vector<double> w;    ///< weights (unnormalised)
  std::vector<double> cdf;  ///< running sums of w
};

Popularity make_popularity(const TraceGenOptions& o, Rng& r) {
  Popularity p;
  const auto E = static_cast<std::size_t>(o.experts);
  if (o.popularity == PopularityKind::Uniform) return p;
  p.uniform = false;
  p.w.assign(E, 0.0);
  if (o.popularity == PopularityKind::Zipf) {
    // Rank order: a random permutation (Fisher-Yates), so each layer has its own hot experts.
    std::vector<std::size_t> perm(E);
    for (std::size_t i = 0; i < E; ++i) perm[i] = i;
    for (std::size_t i = E - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<std::size_t>(r.below(i + 1))]);
    for (std::size_t i = 0; i < E; ++i) p.w[perm[i]] = det_exp(-o.zipf_s * det_log(static_cast<double>(i + 1)));
  } else {
    // Symmetric Dirichlet: normalised Gamma(alpha) variates, scaled by the largest before leaving logs.
    std::vector<double> lg(E);
    for (auto& x : lg) x = det::log_gamma_variate(o.dirichlet_alpha, r);
    const double mx = *std::max_element(lg.begin(), lg.end());
    for (std::size_t i = 0; i < E; ++i) p.w[i] = det_exp(lg[i] - mx);
  }
  p.cdf.resize(E);
  double s = 0;
  for (std::size_t i = 0; i < E; ++i) {
    s += p.w[i];
    p.cdf[i] = s;
  }
  return p;
}

/// One expert from `p` not yet `taken`.
std::uint16_t draw_expert(const Popularity& p, const std::vector<char>& taken, Rng& r, std::size_t E) {
  if (p.uniform) {
    while (true) {
      const auto e = static_cast<std::size_t>(r.below(E));
      if (!taken[e]) return static_cast<std::uint16_t>(e);
    }
  }
  // Rejection from the full distribution is exact for sampling without replacement (it is sampling from
  // p restricted to the experts not taken) and O(log E) per try...
  const double total = p.cdf.back();
  for (int tries = 0; tries < 32; ++tries) {
    const double u = r.uniform01() * total;
    auto i = static_cast<std::size_t>(std::upper_bound(p.cdf.begin(), p.cdf.end(), u) - p.cdf.begin());
    if (i >= E) i = E - 1;
    if (!taken[i] && p.w[i] > 0) return static_cast<std::uint16_t>(i);
  }
  // ...but slow when the taken experts hold nearly all the mass (a very skewed p): then walk the rest.
  double rest = 0;
  for (std::size_t i = 0; i < E; ++i) rest += taken[i] ? 0.0 : p.w[i];
  if (rest > 0) {
    double u = r.uniform01() * rest;
    std::size_t last = E;
    for (std::size_t i = 0; i < E; ++i) {
      if (taken[i] || p.w[i] <= 0) continue;
      last = i;
      u -= p.w[i];
      if (u < 0) return static_cast<std::uint16_t>(i);
    }
    return static_cast<std::uint16_t>(last);
  }
  // Every expert left has zero weight (underflow at tiny alpha): uniform among them.
  std::size_t left = 0;
  for (std::size_t i = 0; i < E; ++i) left += taken[i] ? 0 : 1;
  std::size_t j = static_cast<std::size_t>(r.below(left));
  for (std::size_t i = 0; i < E; ++i) {
    if (taken[i]) continue;
    if (j-- == 0) return static_cast<std::uint16_t>(i);
  }
  MOESIM_CHECK(false, "draw_expert: no expert left to draw");
  return 0;
}

std::vector<double> rho_per_layer(const TraceGenOptions& o) {
  const auto L = static_cast<std::size_t>(o.layers);
  if (o.rho.empty()) return std::vector<double>(L, 0.0);
  if (o.rho.size() == 1) return std::vector<double>(L, o.rho[0]);
  return o.rho;
}

std::string fmt(double x) { return text::printf("%.4g", x); }

std::string list_text(const std::vector<double>& v) {
  bool same = true;
  for (const auto x : v) same = same && x == v.front();
  if (same && !v.empty()) return fmt(v.front());
  std::vector<std::string> s;
  for (const auto x : v) s.push_back(fmt(x));
  return "[" + text::join(s, ",") + "]";
}

/// C(n, j) p^j (1-p)^(n-j) by products only (std::pow's last bit is not portable, and rho feeds the trace).
double binomial_pmf(std::int64_t n, std::int64_t j, double p) {
  double c = 1;
  for (std::int64_t i = 1; i <= j; ++i) c = c * static_cast<double>(n - j + i) / static_cast<double>(i);
  for (std::int64_t i = 0; i < j; ++i) c *= p;
  for (std::int64_t i = 0; i < n - j; ++i) c *= 1 - p;
  return c;
}

/// Bisection for an increasing f on [lo, hi]: the x with f(x) = target.
double bisect(const std::function<double(double)>& f, double lo, double hi, double target, int steps) {
  for (int i = 0; i < steps; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (f(mid) < target) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

enum class LocalityStat { Reuse, FirstChoice };

/// Options for a short calibration run: a few layers spread over depth, no weights, the same tokens per
/// request (so drift acts as often), and a seed derived from the user's.
TraceGenOptions pilot_of(const TraceGenOptions& o, std::int64_t tokens, std::uint64_t stream) {
  TraceGenOptions p = o;
  const auto rho = rho_per_layer(o);
  const std::int64_t layers = std::min<std::int64_t>(o.layers, 4);
  p.layers = layers;
  p.rho.clear();
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::int64_t l = layers == 1 ? 0 : i * (o.layers - 1) / (layers - 1);
    p.rho.push_back(rho[static_cast<std::size_t>(l)]);
  }
  const std::int64_t per_request = (o.tokens + o.requests - 1) / o.requests;
  p.tokens = tokens;
  p.requests = std::clamp<std::int64_t>((tokens + per_request - 1) / per_request, 1, tokens);
  p.weights = false;
  p.seed = derive_seed(o.seed, 1000 + stream);
  return p;
}

TraceStats pilot_stats(const TraceGenOptions& p, std::int64_t window, std::vector<std::int64_t> caches) {
  const auto t = generate_trace(p);
  TraceStatsOptions so;
  so.window = window;
  so.batch = 1;
  so.cache_sizes = std::move(caches);
  return compute_trace_stats(t, so);
}

/// rho per layer reaching `targets` (per layer) of a locality statistic.
std::vector<double> solve_rho(const TraceGenOptions& o, LocalityStat stat, const std::vector<double>& targets,
                              const std::string& flag, std::string& note) {
  const auto E = o.experts;
  const auto k = o.top_k;
  std::function<double(double)> curve;
  std::vector<double> grid_x, grid_y;
  if (o.popularity == PopularityKind::Uniform) {
    curve = [&](double rho) {
      return stat == LocalityStat::Reuse ? uniform_reuse(E, k, rho) : uniform_first_choice_repeat(E, k, rho);
    };
    note += std::string(note.empty() ? "" : "; ") + "rho solved exactly for " + flag + " (uniform popularity)";
  } else {
    // Skewed popularity raises the chance of re-drawing the previous experts; measure the curve on pilot
    // traces at rho = 0, 0.05, ..., 0.95 (and 1 -> 1 exactly), then interpolate.
    // Reuse targets mostly need small rho, so the grid is denser there.
    grid_x = {0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0};
    for (const double rho : grid_x) {
      if (rho == 1.0) {
        grid_y.push_back(1.0);  // every expert kept: exactly 1
        continue;
      }
      auto p = pilot_of(o, 8000, 1);
      p.rho.assign(p.rho.size(), rho);
      const auto st = pilot_stats(p, 8000, {});
      grid_y.push_back(stat == LocalityStat::Reuse ? st.overall.reuse : st.overall.first_choice_repeat);
    }
    for (std::size_t i = 1; i < grid_y.size(); ++i) grid_y[i] = std::max(grid_y[i], grid_y[i - 1]);
    curve = [&](double rho) {
      std::size_t i = 0;
      while (i + 2 < grid_x.size() && rho > grid_x[i + 1]) ++i;
      const double f = (rho - grid_x[i]) / (grid_x[i + 1] - grid_x[i]);
      return grid_y[i] + f * (grid_y[i + 1] - grid_y[i]);
    };
    note += std::string(note.empty() ? "" : "; ") + "rho calibrated for " + flag + " on " +
            std::to_string(grid_x.size() - 1) + " pilot traces of 8,000 tokens (rho=0 gives " + fmt(grid_y[0]) + ")";
  }
  const double lo = curve(0.0);
  // A pilot-measured chance level carries sampling noise (about 0.002): targets that close below it mean rho 0.
  const double slack = o.popularity == PopularityKind::Uniform ? 1e-12 : 0.005;
  std::vector<double> rho;
  for (std::size_t l = 0; l < targets.size(); ++l) {
    const double t = targets[l];
    if (t < lo - slack || t > 1.0) {
      throw UserError(flag + ": " + fmt(t) + (targets.size() > 1 ? " (layer " + std::to_string(l) + ")" : "") +
                      " is out of reach: with " + std::to_string(E) + " experts, top-" + std::to_string(k) + " and " +
                      popularity_name(o.popularity) + " popularity, chance alone gives " + fmt(lo) +
                      " and keeping every expert gives 1; give a value in [" + fmt(lo) + ", 1]");
    }
    rho.push_back(t <= lo ? 0.0 : bisect(curve, 0.0, 1.0, t, 60));
  }
  return rho;
}

/// The skew knob (Zipf exponent, or log alpha for Dirichlet) that makes `measure` reach `target`.
/// `near`, when given, is a previous solution: the search starts in a narrow bracket around it.
void solve_skew(TraceGenOptions& o, const std::function<double(const TraceGenOptions&)>& measure, double target,
                const std::string& flag, const std::string& what, std::string& note,
                std::optional<double> near = std::nullopt) {
  const bool zipf = o.popularity == PopularityKind::Zipf;
  // Zipf: s in [0, 6] (s = 0 is uniform; beyond 6 the first expert takes > 98% of the mass). Dirichlet:
  // log alpha in [log 1e-3, log 1e3]; the statistic falls as alpha grows, so bisect on -log alpha.
  double lo = zipf ? 0.0 : -det_log(1e3);
  double hi = zipf ? 6.0 : -det_log(1e-3);
  const auto at = [&](double x) {
    TraceGenOptions p = o;
    if (zipf) {
      p.zipf_s = x;
    } else {
      p.dirichlet_alpha = det_exp(-x);
    }
    return measure(p);
  };
  int steps = 24;
  if (near) {
    const double x0 = zipf ? *near : -det_log(*near);
    const double a = std::max(lo, x0 - 0.15), b = std::min(hi, x0 + 0.15);
    if (at(a) <= target && target <= at(b)) {
      lo = a;
      hi = b;
      steps = 12;  // the bracket is 50x narrower: the same resolution
    }
  }
  const double f_lo = steps == 24 ? at(lo) : target, f_hi = steps == 24 ? at(hi) : target;
  if (target < f_lo || target > f_hi) {
    throw UserError(flag + ": " + fmt(target) + " is out of reach for " + what + " with " +
                    popularity_name(o.popularity) + " popularity: it ranges from " + fmt(f_lo) +
                    (zipf ? " (uniform) to " : " (alpha 1000) to ") + fmt(f_hi) +
                    (zipf ? " (s = 6)" : " (alpha 0.001)") + "; give a value in that range" +
                    (flag == "--max-mean-load" ? ", or change --window (small windows fluctuate more)" : ""));
  }
  const double x = bisect(at, lo, hi, target, steps);
  if (zipf) {
    o.zipf_s = x;
  } else {
    o.dirichlet_alpha = det_exp(-x);
  }
  note += std::string(note.empty() ? "" : "; ") +
          (zipf ? "zipf_s=" + fmt(o.zipf_s) : "dirichlet_alpha=" + fmt(o.dirichlet_alpha)) + " calibrated for " + flag +
          " " + fmt(target) + " on pilot traces";
}

}  // namespace

std::string popularity_name(PopularityKind k) {
  switch (k) {
    case PopularityKind::Uniform:
      return "uniform";
    case PopularityKind::Zipf:
      return "zipf";
    case PopularityKind::Dirichlet:
      return "dirichlet";
  }
  return "?";
}

PopularityKind parse_popularity(std::string_view name, const std::string& flag) {
  if (name == "uniform") return PopularityKind::Uniform;
  if (name == "zipf") return PopularityKind::Zipf;
  if (name == "dirichlet") return PopularityKind::Dirichlet;
  throw UserError(flag + ": unknown popularity '" + std::string(name) + "'" +
                  text::did_you_mean(name, {"uniform", "zipf", "dirichlet"}) + "; valid: uniform, zipf, dirichlet");
}

std::string drift_name(DriftKind k) {
  switch (k) {
    case DriftKind::None:
      return "none";
    case DriftKind::Redraw:
      return "redraw";
    case DriftKind::Mixture:
      return "mixture";
  }
  return "?";
}

DriftKind parse_drift(std::string_view name, const std::string& flag) {
  if (name == "none") return DriftKind::None;
  if (name == "redraw") return DriftKind::Redraw;
  if (name == "mixture") return DriftKind::Mixture;
  throw UserError(flag + ": unknown drift '" + std::string(name) + "'" +
                  text::did_you_mean(name, {"none", "redraw", "mixture"}) + "; valid: none, redraw, mixture");
}

std::vector<double> interpolate_profile(const std::vector<double>& points, std::int64_t layers) {
  MOESIM_CHECK(!points.empty() && layers >= 1, "interpolate_profile needs points and layers");
  std::vector<double> out(static_cast<std::size_t>(layers));
  if (points.size() == 1 || layers == 1) {
    std::fill(out.begin(), out.end(), points.front());
    return out;
  }
  const double segs = static_cast<double>(points.size() - 1);
  for (std::int64_t l = 0; l < layers; ++l) {
    const double pos = static_cast<double>(l) / static_cast<double>(layers - 1) * segs;
    const auto i = std::min<std::size_t>(static_cast<std::size_t>(pos), points.size() - 2);
    const double f = pos - static_cast<double>(i);
    out[static_cast<std::size_t>(l)] = points[i] + f * (points[i + 1] - points[i]);
  }
  return out;
}

double uniform_reuse(std::int64_t experts, std::int64_t top_k, double rho) {
  double fresh_hits = 0;
  for (std::int64_t K = 0; K <= top_k; ++K) {
    const double left = static_cast<double>(top_k - K);
    fresh_hits += binomial_pmf(top_k, K, rho) * left * left / static_cast<double>(experts - K);
  }
  return (static_cast<double>(top_k) * rho + fresh_hits) / static_cast<double>(top_k);
}

double uniform_first_choice_repeat(std::int64_t experts, std::int64_t top_k, double rho) {
  double redraw = 0;
  for (std::int64_t K = 0; K <= top_k - 1; ++K) {
    redraw += binomial_pmf(top_k - 1, K, rho) / static_cast<double>(experts - K);
  }
  return rho + (1 - rho) * redraw;
}

void validate_gen_options(const TraceGenOptions& o) {
  if (o.layers < 1) throw UserError("--layers must be at least 1 (MoE layers of the model)");
  if (o.experts < 1 || o.experts > kMaxTraceExperts) {
    throw UserError("--experts " + std::to_string(o.experts) + " is outside [1, 65,535]; give the routed-expert count");
  }
  if (o.top_k < 1 || o.top_k > o.experts) {
    throw UserError("--top-k " + std::to_string(o.top_k) + " is outside [1, " + std::to_string(o.experts) +
                    "] (1 to the number of experts)");
  }
  if (o.tokens < 1) throw UserError("--tokens must be at least 1");
  if (o.requests < 1 || o.requests > o.tokens) {
    throw UserError("--requests " + std::to_string(o.requests) + " is outside [1, " + std::to_string(o.tokens) +
                    "]; every request needs at least one token");
  }
  if (!std::isfinite(o.zipf_s) || o.zipf_s < 0) throw UserError("--zipf-s must be >= 0 (0 is uniform)");
  if (!std::isfinite(o.dirichlet_alpha) || o.dirichlet_alpha <= 0) {
    throw UserError("--dirichlet-alpha must be > 0 (small = a few hot experts, large = nearly uniform)");
  }
  if (o.domains < 1) throw UserError("--domains must be at least 1");
  if (!o.rho.empty() && o.rho.size() != 1 && o.rho.size() != static_cast<std::size_t>(o.layers)) {
    throw UserError("--rho has " + std::to_string(o.rho.size()) + " values; give one, or one per MoE layer (" +
                    std::to_string(o.layers) + ")");
  }
  for (const auto r : o.rho) {
    if (!(r >= 0 && r <= 1)) throw UserError("--rho " + fmt(r) + " is not a probability in [0, 1]");
  }
  if (!std::isfinite(o.logit_std) || o.logit_std < 0) throw UserError("--logit-std must be >= 0");
}

std::string describe_gen_options(const TraceGenOptions& o) {
  std::string s = "moesim trace gen: ";
  if (!o.preset.empty()) s += "preset=" + o.preset + " ";
  s += "model=" + o.model + " layers=" + std::to_string(o.layers) + " experts=" + std::to_string(o.experts) +
       " top_k=" + std::to_string(o.top_k) + " tokens=" + std::to_string(o.tokens) +
       " requests=" + std::to_string(o.requests) + " seed=" + std::to_string(o.seed) +
       " popularity=" + popularity_name(o.popularity);
  if (o.popularity == PopularityKind::Zipf) s += " zipf_s=" + fmt(o.zipf_s);
  if (o.popularity == PopularityKind::Dirichlet) s += " dirichlet_alpha=" + fmt(o.dirichlet_alpha);
  s += " drift=" + drift_name(o.drift);
  if (o.drift == DriftKind::Mixture) s += " domains=" + std::to_string(o.domains);
  s += " rho=" + (o.rho.empty() ? std::string("0") : list_text(o.rho));
  s += o.weights ? " weights=softmax(N(0," + fmt(o.logit_std) + ") logits)" : " weights=none";
  if (!o.solved_note.empty()) s += " (" + o.solved_note + ")";
  return s;
}

double generated_trace_bytes(const TraceGenOptions& o) {
  // Doubles throughout: tokens x layers x top_k may exceed 64 bits for absurd inputs, and must be refused,
  // not wrapped. What generate_trace allocates, from the data structures (sim/trace.hpp and above):
  //  - per token: request and position, 4 bytes each;
  //  - per token, layer and slot: a 16-bit expert id, and a float gate weight when weights are on;
  //  - per popularity vector (a layer of each domain; redraw drift keeps one set per request at a time):
  //    w and cdf, 8 bytes each per expert, and the struct itself;
  //  - scratch: z (8 bytes per layer and slot), taken (a byte per expert), kept (a byte per slot).
  const double T = static_cast<double>(o.tokens), L = static_cast<double>(o.layers);
  const double k = static_cast<double>(o.top_k), E = static_cast<double>(o.experts);
  const double ids = T * L * k;
  const double vectors =
      (o.drift == DriftKind::Mixture ? static_cast<double>(o.domains) : 1.0) * L;
  const double per_vector = static_cast<double>(sizeof(Popularity)) + (o.popularity == PopularityKind::Uniform ? 0.0 : 16.0 * E);
  return 8.0 * T + ids * (2.0 + (o.weights ? 4.0 : 0.0)) + vectors * per_vector + 8.0 * L * k + E + k;
}

RoutingTrace generate_trace(const TraceGenOptions& o, const std::function<void(double)>& progress) {
  validate_gen_options(o);
  model::require_memory(units::bytes(generated_trace_bytes(o)),
                        "generating a routing trace of " + std::to_string(o.tokens) + " tokens x " +
                            std::to_string(o.layers) + " MoE layers x top-" + std::to_string(o.top_k),
                        "generate fewer tokens (--tokens, generate.tokens or simulate.tokens) or layers, or use a "
                        "machine with more memory");
  const auto rho = rho_per_layer(o);
  const auto T = static_cast<std::size_t>(o.tokens);
  const auto L = static_cast<std::size_t>(o.layers);
  const auto k = static_cast<std::size_t>(o.top_k);
  const auto E = static_cast<std::size_t>(o.experts);
  const auto R = static_cast<std::size_t>(o.requests);

  RoutingTrace t;
  t.header = {o.model, o.layers, o.experts, o.top_k, describe_gen_options(o)};
  t.request.resize(T);
  t.position.resize(T);
  t.experts.resize(T * L * k);
  if (o.weights) t.weights.resize(T * L * k);

  // Separate streams: popularity, routing and gate weights. Turning weights off, or changing rho, leaves
  // the popularity vectors as they were; turning weights off leaves every expert id as it was.
  Rng pop_rng(derive_seed(o.seed, 1));
  Rng route_rng(derive_seed(o.seed, 2));
  Rng gate_rng(derive_seed(o.seed, 3));

  std::vector<std::vector<Popularity>> domains;  // [domain][layer]
  const std::size_t n_domains = o.drift == DriftKind::Mixture ? static_cast<std::size_t>(o.domains) : 1;
  if (o.drift != DriftKind::Redraw) {
    domains.resize(n_domains);
    for (auto& d : domains) {
      for (std::size_t l = 0; l < L; ++l) d.push_back(make_popularity(o, pop_rng));
    }
  }
  std::vector<Popularity> redrawn;
  std::vector<char> taken(E, 0);
  std::vector<char> kept(k, 0);
  std::vector<double> z(L * k);

  std::size_t tok = 0;
  for (std::size_t r = 0; r < R; ++r) {
    const std::size_t len = T / R + (r < T % R ? 1 : 0);
    const std::vector<Popularity>* pop = nullptr;
    if (o.drift == DriftKind::Redraw) {
      redrawn.clear();
      for (std::size_t l = 0; l < L; ++l) redrawn.push_back(make_popularity(o, pop_rng));
      pop = &redrawn;
    } else {
      pop = &domains[n_domains == 1 ? 0 : static_cast<std::size_t>(pop_rng.below(n_domains))];
    }
    for (std::size_t j = 0; j < len; ++j, ++tok) {
      t.request[tok] = static_cast<std::uint32_t>(r);
      t.position[tok] = static_cast<std::uint32_t>(j);
      for (std::size_t l = 0; l < L; ++l) {
        std::uint16_t* out = t.experts.data() + (tok * L + l) * k;
        std::fill(kept.begin(), kept.end(), 0);
        if (j > 0 && rho[l] > 0) {
          // Temporal locality: each expert of the request's previous token stays, in its slot, w.p. rho.
          const std::uint16_t* before = out - L * k;
          for (std::size_t s = 0; s < k; ++s) {
            if (route_rng.uniform01() < rho[l]) {
              kept[s] = 1;
              out[s] = before[s];
              taken[before[s]] = 1;
            }
          }
        }
        for (std::size_t s = 0; s < k; ++s) {
          if (kept[s]) continue;
          out[s] = draw_expert((*pop)[l], taken, route_rng, E);
          taken[out[s]] = 1;
        }
        for (std::size_t s = 0; s < k; ++s) taken[out[s]] = 0;
      }
      if (o.weights) {
        // Gate weights: softmax over each layer's chosen experts' random logits, largest first (router
        // order). All layers of the token at once: the same draws in the same order as layer by layer, but
        // the exp/log chains of different layers overlap in the pipeline.
        gate_rng.normals(z.data(), L * k);
        for (std::size_t l = 0; l < L; ++l) {
          double* zl = z.data() + l * k;
          double mx = -std::numeric_limits<double>::infinity();
          for (std::size_t s = 0; s < k; ++s) {
            zl[s] = o.logit_std * zl[s];
            mx = std::max(mx, zl[s]);
          }
          for (std::size_t s = 0; s < k; ++s) zl[s] = zl[s] - mx;
        }
        det_exp_n(z.data(), z.data(), L * k);
        for (std::size_t l = 0; l < L; ++l) {
          double* zl = z.data() + l * k;
          double sum = 0;
          for (std::size_t s = 0; s < k; ++s) sum += zl[s];
          std::sort(zl, zl + k, std::greater<>());
          float* w = t.weights.data() + (tok * L + l) * k;
          for (std::size_t s = 0; s < k; ++s) w[s] = static_cast<float>(zl[s] / sum);
        }
      }
      if (progress && (tok & 4095) == 0) progress(static_cast<double>(tok) / static_cast<double>(T));
    }
  }
  if (progress) progress(1.0);
  return t;
}

TraceGenOptions solve_targets(TraceGenOptions o, const TraceGenTargets& tg) {
  const bool reuse = !tg.reuse.empty();
  const bool first = !tg.first_choice_repeat.empty();
  if (reuse && first) {
    throw UserError("--reuse and --first-choice-repeat both set the temporal locality; give one of them");
  }
  if ((reuse || first) && !o.rho.empty()) {
    throw UserError(std::string(reuse ? "--reuse" : "--first-choice-repeat") +
                    " is solved for --rho; give one of them, not both");
  }
  if (tg.max_mean_load && tg.lru_hit) {
    throw UserError("--max-mean-load and --lru-hit both set the popularity skew; give one of them");
  }
  const bool skew = tg.max_mean_load || tg.lru_hit;
  if (skew && o.popularity == PopularityKind::Uniform) {
    throw UserError(std::string(tg.max_mean_load ? "--max-mean-load" : "--lru-hit") +
                    " sets the popularity skew, which uniform popularity does not have; add --popularity zipf "
                    "(or dirichlet)");
  }
  validate_gen_options(o);
  if (tg.window < 1) throw UserError("--window must be at least 1 token");
  if (tg.lru_hit && (tg.lru_cache < o.top_k || tg.lru_cache > o.experts)) {
    throw UserError("--lru-hit: the cache of " + std::to_string(tg.lru_cache) +
                    " experts is outside [top_k, experts] = [" + std::to_string(o.top_k) + ", " +
                    std::to_string(o.experts) + "]");
  }
  const std::string loc_flag = reuse ? "--reuse" : "--first-choice-repeat";
  const LocalityStat stat = reuse ? LocalityStat::Reuse : LocalityStat::FirstChoice;
  std::vector<double> loc_targets;
  if (reuse || first) {
    for (const auto x : reuse ? tg.reuse : tg.first_choice_repeat) {
      if (!(x >= 0 && x <= 1)) throw UserError(loc_flag + ": " + fmt(x) + " is not a fraction in [0, 1]");
    }
    loc_targets = interpolate_profile(reuse ? tg.reuse : tg.first_choice_repeat, o.layers);
  }
  std::string note;
  const auto measure_skew = [&](const TraceGenOptions& p0) {
    if (tg.max_mean_load) {
      const std::int64_t windows = std::clamp<std::int64_t>(32768 / tg.window, 8, 16);
      const auto p = pilot_of(p0, windows * tg.window, 2);
      return pilot_stats(p, tg.window, {}).overall.load_max_mean;
    }
    const auto p = pilot_of(p0, 8000, 3);
    return pilot_stats(p, 8000, {tg.lru_cache}).overall.lru_hit[0];
  };
  const std::string skew_flag = tg.max_mean_load ? "--max-mean-load" : "--lru-hit";
  const std::string skew_what = tg.max_mean_load ? "windows of " + std::to_string(tg.window) + " tokens"
                                                 : "a " + std::to_string(tg.lru_cache) + "-expert LRU cache";
  const double skew_target = tg.max_mean_load ? *tg.max_mean_load : tg.lru_hit.value_or(0.0);

  if (!skew) {
    if (reuse || first) o.rho = solve_rho(o, stat, loc_targets, loc_flag, note);
  } else if (!(reuse || first)) {
    solve_skew(o, measure_skew, skew_target, skew_flag, skew_what, note);
  } else {
    // The two interact (keeping experts raises the load peaks and the LRU hits; skew raises chance reuse):
    // start from the uniform solution for rho, then alternate until the skew knob settles (a few rounds;
    // each later round searches a narrow bracket around the previous solution).
    std::string scratch;
    TraceGenOptions u = o;
    u.popularity = PopularityKind::Uniform;
    o.rho = solve_rho(u, stat, loc_targets, loc_flag, scratch);
    std::optional<double> previous;
    int rounds = 0;
    while (rounds < 6) {
      ++rounds;
      scratch.clear();
      solve_skew(o, measure_skew, skew_target, skew_flag, skew_what, scratch, previous);
      o.rho.clear();
      o.rho = solve_rho(o, stat, loc_targets, loc_flag, scratch);
      const double knob = o.popularity == PopularityKind::Zipf ? o.zipf_s : o.dirichlet_alpha;
      const bool settled = previous && std::abs(knob - *previous) <= 0.005 * std::max(1.0, std::abs(knob));
      previous = knob;
      if (settled) break;
    }
    note = scratch + " (alternated " + std::to_string(rounds) + " rounds)";
  }
  o.solved_note = note;
  return o;
}

const std::vector<TracePreset>& trace_presets() {
  static const std::vector<TracePreset> all = [] {
    std::vector<TracePreset> v;
    {
      TracePreset p;
      p.name = "mixtral-reuse";
      p.model = "mixtral-8x7b";
      p.description =
          "Mixtral-8x7B consecutive-token repeats (arXiv 2401.04088 Table 5): first-choice repeat 14% at layer 0, "
          "27% mid-depth, 22% at layer 31, solved exactly on uniform popularity. Measured on 100,000 tokens: 13.8%, "
          "26.8%, 22.2%; first-or-second overlap (not a target) 48/62/57% vs the paper's 45-50/62-67/45-54%";
      p.targets.first_choice_repeat = {0.14, 0.27, 0.22};
      v.push_back(p);
    }
    {
      TracePreset p;
      p.name = "flash-moe-qwen3.5";
      p.model = "qwen3.5-397b-a17b";
      p.top_k = 4;
      p.description =
          "flash-moe's Qwen3.5-397B at K=4: Zipf popularity redrawn every 100-token request, calibrated for its 49% "
          "LRU hit rate at 16 experts per layer, reuse 22% to 34% over depth. Measured on 20,000 tokens: LRU hit "
          "49.0/59.6/68.4/74.9% at 16/32/64/128 vs 49/59/68/71%; reuse 22-34% per layer vs 8-34% (below 19% is "
          "chance at this skew)";
      p.popularity = PopularityKind::Zipf;
      p.drift = DriftKind::Redraw;
      p.tokens_per_request = 100;
      p.targets.reuse = {0.22, 0.34};
      p.targets.lru_hit = 0.49;
      p.targets.lru_cache = 16;
      v.push_back(p);
    }
    {
      TracePreset p;
      p.name = "deepseek-eplb";
      p.model = "deepseek-v3";
      p.description =
          "DeepSeek-V3 expert load max/mean 2.0 per layer (the EPLB README example) over windows of 2752 tokens "
          "(its mean load of 86 per expert), Zipf calibrated. Measured on 100,000 tokens: 2.007 (layers "
          "1.95-2.04)";
      p.popularity = PopularityKind::Zipf;
      p.targets.max_mean_load = 2.0;
      p.targets.window = 2752;
      v.push_back(p);
    }
    return v;
  }();
  return all;
}

const TracePreset& find_trace_preset(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& p : trace_presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  throw UserError("unknown preset '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid presets: " + text::join(names) + " (see `moesim trace gen --help`)");
}

TraceGenOptions gen_options_for(const model::Architecture& arch, std::int64_t tokens, std::uint64_t seed) {
  TraceGenOptions o;
  o.model = arch.id;
  o.layers = model::moe_layer_count(arch);
  o.experts = arch.routed_experts;
  o.top_k = arch.top_k;
  o.tokens = tokens;
  o.seed = seed;
  return o;
}

}  // namespace moesim::sim
