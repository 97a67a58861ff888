// The routing-trace generator: option names, validation and description, popularity vectors and
// generate_trace itself. Portable exp/log are in trace_gen_random.cpp, target solving in trace_gen_calibrate.cpp.
#include "moesim/sim/trace_gen.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "det_random.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_io.hpp"
#include "trace_gen_detail.hpp"

namespace moesim::sim {
namespace trace_gen_detail {

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
  s.reserve(v.size());
  for (const auto x : v) s.push_back(fmt(x));
  return "[" + text::join(s, ",") + "]";
}

namespace {

// ------------------------------------------------------------------------------------------------------
// Popularity vectors and sampling without replacement.

struct Popularity {
  bool uniform = true;
  std::vector<double> w;    ///< weights (unnormalised)
  std::vector<double> cdf;  ///< running sums of w
};

/// Zipf's weight of each rank, 1 / rank^s (the same for every layer and redraw: only the ranks' order is
/// drawn), or empty for another popularity.
std::vector<double> zipf_by_rank(const TraceGenOptions& o) {
  std::vector<double> w;
  if (o.popularity != PopularityKind::Zipf) return w;
  w.resize(static_cast<std::size_t>(o.experts));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = det_exp(-o.zipf_s * det_log(static_cast<double>(i + 1)));
  return w;
}

/// A layer's popularity vector; `by_rank` is zipf_by_rank(o).
Popularity make_popularity(const TraceGenOptions& o, const std::vector<double>& by_rank, Rng& r) {
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
    for (std::size_t i = 0; i < E; ++i) p.w[perm[i]] = by_rank[i];
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

}  // namespace
}  // namespace trace_gen_detail

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
    if (!(r >= 0 && r <= 1)) throw UserError("--rho " + trace_gen_detail::fmt(r) + " is not a probability in [0, 1]");
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
  if (o.popularity == PopularityKind::Zipf) s += " zipf_s=" + trace_gen_detail::fmt(o.zipf_s);
  if (o.popularity == PopularityKind::Dirichlet) s += " dirichlet_alpha=" + trace_gen_detail::fmt(o.dirichlet_alpha);
  s += " drift=" + drift_name(o.drift);
  if (o.drift == DriftKind::Mixture) s += " domains=" + std::to_string(o.domains);
  s += " rho=" + (o.rho.empty() ? std::string("0") : trace_gen_detail::list_text(o.rho));
  s += o.weights ? " weights=softmax(N(0," + trace_gen_detail::fmt(o.logit_std) + ") logits)" : " weights=none";
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
  const double vectors = (o.drift == DriftKind::Mixture ? static_cast<double>(o.domains) : 1.0) * L;
  const double per_vector = static_cast<double>(sizeof(trace_gen_detail::Popularity)) +
                            (o.popularity == PopularityKind::Uniform ? 0.0 : 16.0 * E);
  return 8.0 * T + ids * (2.0 + (o.weights ? 4.0 : 0.0)) + vectors * per_vector + 8.0 * L * k + E + k;
}

RoutingTrace generate_trace(const TraceGenOptions& o, const std::function<void(double)>& progress) {
  using trace_gen_detail::derive_seed;
  using trace_gen_detail::det_exp_n;
  using trace_gen_detail::draw_expert;
  using trace_gen_detail::make_popularity;
  using trace_gen_detail::Popularity;
  using trace_gen_detail::rho_per_layer;
  using trace_gen_detail::Rng;
  using trace_gen_detail::zipf_by_rank;
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

  const std::vector<double> by_rank = zipf_by_rank(o);
  std::vector<std::vector<Popularity>> domains;  // [domain][layer]
  const std::size_t n_domains = o.drift == DriftKind::Mixture ? static_cast<std::size_t>(o.domains) : 1;
  if (o.drift != DriftKind::Redraw) {
    domains.resize(n_domains);
    for (auto& d : domains) {
      for (std::size_t l = 0; l < L; ++l) d.push_back(make_popularity(o, by_rank, pop_rng));
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
      for (std::size_t l = 0; l < L; ++l) redrawn.push_back(make_popularity(o, by_rank, pop_rng));
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
