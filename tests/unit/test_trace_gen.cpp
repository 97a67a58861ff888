// The synthetic trace generator: deterministic for a seed, its named targets reached within tolerances
// derived below, and uniform routing reproducing the analytic E[active experts per node].

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/trace_gen.hpp"
#include "moesim/sim/trace_io.hpp"
#include "moesim/sim/trace_stats.hpp"

namespace {

using moesim::UserError;
using moesim::sim::PopularityKind;
using moesim::sim::TraceGenOptions;
using moesim::sim::TraceGenTargets;

TraceGenOptions shape(std::int64_t layers, std::int64_t experts, std::int64_t k, std::int64_t tokens) {
  TraceGenOptions o;
  o.model = "test";
  o.layers = layers;
  o.experts = experts;
  o.top_k = k;
  o.tokens = tokens;
  return o;
}

std::string bytes_of(const moesim::sim::RoutingTrace& t) {
  std::ostringstream s;
  moesim::sim::write_trace_binary(t, s);
  return s.str();
}

/// FNV-1a, 64-bit: a fingerprint of a trace's bytes.
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 14695981039346656037ULL;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

moesim::sim::TraceStats stats_of(const moesim::sim::RoutingTrace& t, std::int64_t window = 1024,
                                 std::vector<std::int64_t> caches = {}) {
  moesim::sim::TraceStatsOptions so;
  so.window = window;
  so.cache_sizes = std::move(caches);
  return moesim::sim::compute_trace_stats(t, so);
}

// Same options and seed: the same bytes; another seed: other bytes. Turning the weights off leaves the ids.
TEST(TraceGen, DeterministicForASeed) {
  auto o = shape(3, 64, 4, 2000);
  o.popularity = PopularityKind::Zipf;
  o.zipf_s = 1.1;
  o.rho = {0.2};
  o.requests = 7;
  const auto a = moesim::sim::generate_trace(o);
  const auto b = moesim::sim::generate_trace(o);
  EXPECT_EQ(bytes_of(a), bytes_of(b));
  o.seed = 2;
  EXPECT_NE(bytes_of(moesim::sim::generate_trace(o)).substr(200), bytes_of(a).substr(200));
  o.seed = 1;
  o.weights = false;
  EXPECT_EQ(moesim::sim::generate_trace(o).experts, a.experts);
}

// Byte-identical everywhere: the generator uses its own conversions of std::mt19937_64's standard-fixed output
// and its own exp/log, so these fingerprints hold on any platform and standard library. If a deliberate change
// to the generator moves them, print the new values and update them here (and say so in sim/TRACES.md).
TEST(TraceGen, PinnedFingerprints) {
  auto o = shape(2, 16, 4, 500);
  o.requests = 5;
  o.rho = {0.3};
  const std::uint64_t uniform = fnv1a(bytes_of(moesim::sim::generate_trace(o)));
  o.popularity = PopularityKind::Zipf;
  const std::uint64_t zipf = fnv1a(bytes_of(moesim::sim::generate_trace(o)));
  o.popularity = PopularityKind::Dirichlet;
  o.dirichlet_alpha = 0.3;
  o.drift = moesim::sim::DriftKind::Mixture;
  const std::uint64_t dirichlet = fnv1a(bytes_of(moesim::sim::generate_trace(o)));
  EXPECT_EQ(uniform, 184726865996244917ULL) << "uniform fingerprint";
  EXPECT_EQ(zipf, 10931830057174087982ULL) << "zipf fingerprint";
  EXPECT_EQ(dirichlet, 9161751595668331341ULL) << "dirichlet fingerprint";
}

// Hand-derived, 2 nodes holding 8 of 16 experts each, top-4 (DBRX): the busiest node's count is max(X, 4-X)
// with X hypergeometric, P(X = 0..4) = (70, 448, 784, 448, 70) / 1820, so E = (4*140 + 3*896 + 2*784) / 1820
// = 4816 / 1820 = 2.6462. On 100,000 uniform tokens the per-token max has a standard deviation of about 0.6,
// so the mean's standard error is 0.002: 0.01 is five of them.
TEST(TraceGen, UniformReproducesExpectedMaxActiveOnTwoHalves) {
  auto o = shape(1, 16, 4, 100000);
  o.weights = false;
  const auto t = moesim::sim::generate_trace(o);
  moesim::sim::TraceStatsOptions so;
  so.cache_sizes = {};
  so.placement = moesim::sim::make_placement("replicated-groups", 16, 2);
  const auto st = moesim::sim::compute_trace_stats(t, so);
  EXPECT_NEAR(st.placement->max_active, 4816.0 / 1820.0, 0.01);
  EXPECT_NEAR(st.placement->max_active_uniform, 4816.0 / 1820.0, 1e-12);
  // Uniform routing: each node carries half the work.
  EXPECT_NEAR(st.placement->nodes[0].share, 0.5, 0.005);
}

// The exact formulas at their ends: rho = 0 is chance (k/E and 1/E), rho = 1 keeps everything.
TEST(TraceGen, UniformFormulasAtTheirEnds) {
  EXPECT_NEAR(moesim::sim::uniform_reuse(8, 2, 0.0), 2.0 / 8.0, 1e-15);
  EXPECT_NEAR(moesim::sim::uniform_reuse(8, 2, 1.0), 1.0, 1e-15);
  EXPECT_NEAR(moesim::sim::uniform_first_choice_repeat(8, 2, 0.0), 1.0 / 8.0, 1e-15);
  EXPECT_NEAR(moesim::sim::uniform_first_choice_repeat(8, 2, 1.0), 1.0, 1e-15);
  // Hand-derived at rho = 0.5, E = 8, k = 2: K ~ Bin(2, 0.5); fresh hits (2-K)^2/(8-K) = 4/8, 1/7, 0 with
  // probabilities 1/4, 1/2, 1/4: R = (2*0.5 + 0.125 + 1/14) / 2 = 0.59821...
  EXPECT_NEAR(moesim::sim::uniform_reuse(8, 2, 0.5), (1.0 + 0.125 + 1.0 / 14.0) / 2.0, 1e-15);
}

// --reuse on uniform popularity is solved exactly, so the measured reuse misses only by sampling error. DBRX
// shape (16 experts, top-4), 8 layers x 20,000 tokens = 160,000 pairs x 4 experts: the per-pair shared
// fraction has a variance below 1/4, so the standard error is below 0.0013 even allowing for the Markov
// dependence between consecutive pairs (x 1.5): tolerance 0.01.
TEST(TraceGen, ReuseTargetIsReachedOnUniform) {
  auto o = shape(8, 16, 4, 20000);
  o.weights = false;
  TraceGenTargets tg;
  tg.reuse = {0.30};
  const auto solved = moesim::sim::solve_targets(o, tg);
  const auto st = stats_of(moesim::sim::generate_trace(solved));
  EXPECT_NEAR(st.overall.reuse, 0.30, 0.01);
  for (const auto& l : st.layers) EXPECT_NEAR(l.reuse, 0.30, 0.02);
}

// The Mixtral preset's first-choice repeat profile (14% at layer 0, 27% mid-depth, 22% at layer 31) is solved
// exactly for uniform popularity. 100,000 tokens: a per-layer rate of 0.2 has standard error
// sqrt(0.2 * 0.8 / 100000) = 0.0013; tolerance 0.01.
TEST(TraceGen, MixtralPresetHitsFirstChoiceRepeats) {
  const auto& p = moesim::sim::find_trace_preset("mixtral-reuse");
  auto o = shape(32, 8, 2, 100000);
  o.weights = false;
  const auto st = stats_of(moesim::sim::generate_trace(moesim::sim::solve_targets(o, p.targets)));
  EXPECT_NEAR(st.layers[0].first_choice_repeat, 0.14, 0.01);
  EXPECT_NEAR(st.layers[31].first_choice_repeat, 0.22, 0.01);
  EXPECT_NEAR(0.5 * (st.layers[15].first_choice_repeat + st.layers[16].first_choice_repeat), 0.27, 0.01);
  // Not a target, but Mixtral's other column: "first or second" overlap, 46-50% at layer 0.
  EXPECT_GT(st.layers[0].any_overlap, 0.46);
  EXPECT_LT(st.layers[0].any_overlap, 0.50);
}

// --max-mean-load on Zipf popularity is calibrated on pilot traces (8 windows x 4 layers): over repeated seeds
// the pilot's and the final trace's sampling errors (each about 0.03 for 64 experts, top-4, windows of 512
// tokens) combine to a standard deviation of about 0.04; tolerance 0.15.
TEST(TraceGen, MaxMeanLoadTargetIsReachedOnZipf) {
  auto o = shape(8, 64, 4, 16384);
  o.weights = false;
  o.popularity = PopularityKind::Zipf;
  TraceGenTargets tg;
  tg.max_mean_load = 2.5;
  tg.window = 512;
  const auto solved = moesim::sim::solve_targets(o, tg);
  EXPECT_GT(solved.zipf_s, 0.0);
  EXPECT_NE(solved.solved_note.find("max-mean-load"), std::string::npos);
  const auto st = stats_of(moesim::sim::generate_trace(solved), 512);
  EXPECT_NEAR(st.overall.load_max_mean, 2.5, 0.15);
}

// --lru-hit together with --reuse on Zipf popularity: both calibrated, alternately. Pilot noise on an LRU hit
// rate over 8,000 tokens x 4 layers x 4 experts is about 0.005; with the alternation's residual, 0.03.
TEST(TraceGen, LruHitAndReuseTogether) {
  auto o = shape(8, 128, 4, 20000);
  o.weights = false;
  o.popularity = PopularityKind::Zipf;
  o.requests = 200;
  TraceGenTargets tg;
  tg.lru_hit = 0.5;
  tg.lru_cache = 16;
  tg.reuse = {0.3};
  const auto solved = moesim::sim::solve_targets(o, tg);
  const auto st = stats_of(moesim::sim::generate_trace(solved), 1024, {16});
  EXPECT_NEAR(st.overall.lru_hit[0], 0.5, 0.03);
  EXPECT_NEAR(st.overall.reuse, 0.3, 0.03);
}

// Targets out of reach are refused with the valid range: uniform 8 experts, top-2 gives 25% reuse by chance.
TEST(TraceGen, RefusesUnreachableTargetsWithTheRange) {
  auto o = shape(4, 8, 2, 1000);
  TraceGenTargets tg;
  tg.reuse = {0.1};
  try {
    moesim::sim::solve_targets(o, tg);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--reuse"), std::string::npos) << m;
    EXPECT_NE(m.find("[0.25, 1]"), std::string::npos) << m;
  }
  tg.reuse.clear();
  tg.max_mean_load = 2.0;
  EXPECT_THROW(moesim::sim::solve_targets(o, tg), UserError);  // uniform popularity has no skew to solve
  tg.max_mean_load.reset();
  tg.reuse = {0.3};
  o.rho = {0.2};
  EXPECT_THROW(moesim::sim::solve_targets(o, tg), UserError);  // --rho and --reuse both set rho
}

// Gate weights: per token-layer non-negative, largest first, summing to 1 (float rounding aside).
TEST(TraceGen, GateWeightsAreSortedSoftmax) {
  auto o = shape(4, 32, 6, 300);
  const auto t = moesim::sim::generate_trace(o);
  ASSERT_TRUE(t.has_weights());
  for (std::int64_t tok = 0; tok < t.tokens(); ++tok) {
    for (std::int64_t l = 0; l < 4; ++l) {
      const auto g = t.gates(tok, l);
      double sum = 0;
      for (std::size_t s = 0; s < g.size(); ++s) {
        EXPECT_GE(g[s], 0.0f);
        if (s > 0) {
          EXPECT_GE(g[s - 1], g[s]);
        }
        sum += g[s];
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
  EXPECT_NO_THROW(moesim::sim::validate_trace(t, "generated"));
}

/// The most chosen expert of layer 0 in each request.
std::vector<int> top_expert_per_request(const moesim::sim::RoutingTrace& t) {
  std::vector<int> top;
  std::vector<int> counts(static_cast<std::size_t>(t.header.experts), 0);
  for (std::int64_t tok = 0; tok <= t.tokens(); ++tok) {
    if (tok == t.tokens() ||
        (tok > 0 && t.request[static_cast<std::size_t>(tok)] != t.request[static_cast<std::size_t>(tok - 1)])) {
      top.push_back(static_cast<int>(std::max_element(counts.begin(), counts.end()) - counts.begin()));
      std::fill(counts.begin(), counts.end(), 0);
      if (tok == t.tokens()) break;
    }
    for (const auto e : t.chosen(tok, 0)) ++counts[e];
  }
  return top;
}

// Drift: without it every request shares the layer's hot expert; "redraw" gives each request its own;
// "mixture" at most --domains different ones. Zipf s = 2 over 64 experts: the top expert takes 61% of the
// mass, so 200 tokens of top-2 identify it with certainty.
TEST(TraceGen, DriftChangesPopularityPerRequest) {
  auto o = shape(1, 64, 2, 4000);
  o.weights = false;
  o.popularity = PopularityKind::Zipf;
  o.zipf_s = 2.0;
  o.requests = 20;
  const auto none = top_expert_per_request(moesim::sim::generate_trace(o));
  EXPECT_EQ(std::set<int>(none.begin(), none.end()).size(), 1u);
  o.drift = moesim::sim::DriftKind::Redraw;
  const auto redraw = top_expert_per_request(moesim::sim::generate_trace(o));
  EXPECT_GE(std::set<int>(redraw.begin(), redraw.end()).size(), 10u);
  o.drift = moesim::sim::DriftKind::Mixture;
  o.domains = 3;
  const auto mixture = top_expert_per_request(moesim::sim::generate_trace(o));
  EXPECT_LE(std::set<int>(mixture.begin(), mixture.end()).size(), 3u);
  EXPECT_GE(std::set<int>(mixture.begin(), mixture.end()).size(), 2u);
}

// The header records the generator and every parameter, solved ones included; presets are found by name.
TEST(TraceGen, SourceRecordsParametersAndPresetsAreRegistered) {
  auto o = shape(2, 16, 4, 100);
  o.rho = {0.25};
  o.seed = 42;
  const auto t = moesim::sim::generate_trace(o);
  for (const char* s : {"moesim trace gen", "seed=42", "rho=0.25", "popularity=uniform", "tokens=100"}) {
    EXPECT_NE(t.header.source.find(s), std::string::npos) << s << " in " << t.header.source;
  }
  EXPECT_EQ(moesim::sim::trace_presets().size(), 3u);
  try {
    moesim::sim::find_trace_preset("mixtral");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'mixtral-reuse'"), std::string::npos) << e.what();
  }
}

TEST(TraceGen, InterpolatesProfiles) {
  EXPECT_EQ(moesim::sim::interpolate_profile({0.5}, 3), (std::vector<double>{0.5, 0.5, 0.5}));
  const auto p = moesim::sim::interpolate_profile({0.0, 1.0, 0.0}, 5);
  EXPECT_NEAR(p[0], 0.0, 1e-15);
  EXPECT_NEAR(p[1], 0.5, 1e-15);
  EXPECT_NEAR(p[2], 1.0, 1e-15);
  EXPECT_NEAR(p[4], 0.0, 1e-15);
}

}  // namespace
