// Solving the generator's raw knobs (rho per layer, the Zipf exponent or Dirichlet alpha) for target
// statistics: exact formulas under uniform popularity, pilot traces otherwise (solve_targets).
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/trace_stats.hpp"
#include "trace_gen_detail.hpp"

namespace moesim::sim {
namespace trace_gen_detail {
namespace {

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
}  // namespace trace_gen_detail

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
    fresh_hits += trace_gen_detail::binomial_pmf(top_k, K, rho) * left * left / static_cast<double>(experts - K);
  }
  return (static_cast<double>(top_k) * rho + fresh_hits) / static_cast<double>(top_k);
}

double uniform_first_choice_repeat(std::int64_t experts, std::int64_t top_k, double rho) {
  double redraw = 0;
  for (std::int64_t K = 0; K <= top_k - 1; ++K) {
    redraw += trace_gen_detail::binomial_pmf(top_k - 1, K, rho) / static_cast<double>(experts - K);
  }
  return rho + (1 - rho) * redraw;
}

TraceGenOptions solve_targets(TraceGenOptions o, const TraceGenTargets& tg) {
  using trace_gen_detail::fmt;
  using trace_gen_detail::LocalityStat;
  using trace_gen_detail::pilot_of;
  using trace_gen_detail::pilot_stats;
  using trace_gen_detail::solve_rho;
  using trace_gen_detail::solve_skew;
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

}  // namespace moesim::sim
