// Request workloads, arrival processes: Poisson, uniform and gamma gaps, determinism in the seed, and
// closed-loop users. Statistical checks use 20,000 draws and 3-sigma bounds derived in each test's comment.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/sim/workload.hpp"
#include "workload_test_support.hpp"

using moesim::test::expect_user_error;

namespace {

using moesim::UserError;
using moesim::sim::ArrivalKind;
using moesim::sim::ClosedLoopUsers;
using moesim::sim::LengthKind;
using moesim::sim::Request;
using moesim::sim::SimTime;
using moesim::sim::WorkloadSpec;
using moesim::test::workload::kSecond;
using moesim::test::workload::open_spec;

// ------------------------------------------------------------------------------------------------------
// Arrivals.

// Poisson at 4/s, 20,000 requests. Gaps are Exp(mean 0.25 s): the sample mean has standard error
// 0.25/sqrt(20000) = 1.77 ms, so it lies within 0.25 s +- 5.3 ms (3 sigma). An exponential's CV is 1; the
// sample CV's standard error is about sqrt(2/n) = 0.01 (its kurtosis is 9), so 1 +- 0.05 (5 sigma). The
// fraction of gaps above the mean is e^-1 = 0.3679, standard error sqrt(p(1-p)/n) = 0.0034: +- 0.0102.
// The first request arrives after the first gap, so strictly after 0.
TEST(WorkloadArrivals, PoissonMeanGapAndCv) {
  const auto reqs = moesim::sim::open_loop_requests(open_spec(ArrivalKind::Poisson, 4.0, 20000));
  ASSERT_EQ(reqs.size(), 20000u);
  EXPECT_GT(reqs[0].arrival, SimTime{});
  std::vector<double> gaps;
  SimTime previous{};
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].id, static_cast<std::int64_t>(i));
    EXPECT_EQ(reqs[i].user, -1);
    ASSERT_GE(reqs[i].arrival, previous);
    gaps.push_back(static_cast<double>((reqs[i].arrival - previous).ps()) / static_cast<double>(kSecond.ps()));
    previous = reqs[i].arrival;
  }
  double sum = 0, sum2 = 0, above = 0;
  for (double g : gaps) {
    sum += g;
    sum2 += g * g;
  }
  const double n = static_cast<double>(gaps.size());
  const double mean = sum / n;
  const double sd = std::sqrt(sum2 / n - mean * mean);
  for (double g : gaps) above += g > 0.25 ? 1 : 0;
  EXPECT_NEAR(mean, 0.25, 3 * 0.25 / std::sqrt(n));
  EXPECT_NEAR(sd / mean, 1.0, 0.05);
  EXPECT_NEAR(above / n, std::exp(-1.0), 3 * std::sqrt(std::exp(-1.0) * (1 - std::exp(-1.0)) / n));
}

// Uniform at 2/s: request i at exactly i * 0.5 s = i * 5e11 ps, the first at 0. At 3/s request 3 is at
// 1 s exactly (3 * 333,333,333,333.33 ps rounds to 10^12) and every request within half a picosecond of
// i/3 s.
TEST(WorkloadArrivals, UniformExactSpacing) {
  const auto two = moesim::sim::open_loop_requests(open_spec(ArrivalKind::Uniform, 2.0, 1000));
  for (std::size_t i = 0; i < two.size(); ++i) {
    EXPECT_EQ(two[i].arrival, static_cast<std::int64_t>(i) * SimTime{500'000'000'000}) << i;
    EXPECT_EQ(two[i].prompt_tokens, 2000);
    EXPECT_EQ(two[i].output_tokens, 256);
  }
  const auto three = moesim::sim::open_loop_requests(open_spec(ArrivalKind::Uniform, 3.0, 10));
  EXPECT_EQ(three[3].arrival, kSecond);
  EXPECT_EQ(three[9].arrival, 3 * kSecond);
  EXPECT_EQ(three[1].arrival, SimTime{333'333'333'333});
}

struct GapStats {
  double mean = 0, cv = 0, below_mean = 0;
};

/// Mean, coefficient of variation and fraction below the mean of the gaps between consecutive arrivals
/// (the first gap from 0), in seconds.
GapStats gap_stats(const std::vector<Request>& reqs) {
  std::vector<double> gaps;
  SimTime previous{};
  for (const Request& r : reqs) {
    gaps.push_back(static_cast<double>((r.arrival - previous).ps()) / static_cast<double>(kSecond.ps()));
    previous = r.arrival;
  }
  double sum = 0, sum2 = 0;
  for (double g : gaps) {
    sum += g;
    sum2 += g * g;
  }
  const double n = static_cast<double>(gaps.size());
  GapStats st;
  st.mean = sum / n;
  st.cv = std::sqrt(sum2 / n - st.mean * st.mean) / st.mean;
  for (double g : gaps) st.below_mean += g < st.mean ? 1.0 / n : 0.0;
  return st;
}

WorkloadSpec gamma_spec(double rate, double burstiness, std::int64_t requests, std::uint64_t seed = 1) {
  WorkloadSpec w = open_spec(ArrivalKind::Gamma, rate, requests, seed);
  w.burstiness = burstiness;
  moesim::sim::validate_workload(w, "test");
  return w;
}

// Gamma arrivals (vLLM's --burstiness) at 4/s, 20,000 requests. Burstiness 1 is an exponential gap, the
// Poisson process: its own sampler (Marsaglia-Tsang), not Poisson's inversion, so the two agree in
// statistics only, checked against the same bounds as PoissonMeanGapAndCv: mean 0.25 s +- 5.3 ms, CV
// 1 +- 0.05, fraction of gaps below the mean 1 - e^-1 = 0.632 +- 0.0102, for both. The first request
// arrives after the first gap.
TEST(WorkloadArrivals, GammaBurstinessOneMatchesPoisson) {
  const auto gamma = moesim::sim::open_loop_requests(gamma_spec(4.0, 1.0, 20000));
  const auto poisson = moesim::sim::open_loop_requests(open_spec(ArrivalKind::Poisson, 4.0, 20000));
  ASSERT_EQ(gamma.size(), 20000u);
  EXPECT_GT(gamma[0].arrival, SimTime{});
  EXPECT_NE(gamma[0].arrival, poisson[0].arrival);  // another sampler, another stream
  const double n = 20000;
  const double p = 1 - std::exp(-1.0);
  for (const auto& reqs : {gamma, poisson}) {
    const GapStats st = gap_stats(reqs);
    EXPECT_NEAR(st.mean, 0.25, 3 * 0.25 / std::sqrt(n));
    EXPECT_NEAR(st.cv, 1.0, 0.05);
    EXPECT_NEAR(st.below_mean, p, 3 * std::sqrt(p * (1 - p) / n));
  }
  for (std::size_t i = 0; i < gamma.size(); ++i) ASSERT_EQ(gamma[i].id, static_cast<std::int64_t>(i));
}

// A gamma gap of shape k and scale 1/(rate k) has mean 1/rate and CV 1/sqrt(k). Burstiness 0.25: CV 2
// (burstier than Poisson); the sample CV's standard error is about sqrt((kurtosis - 1)/(4n)) with
// kurtosis 3 + 6/k = 27, so 0.018: 2 +- 0.15 is over 8 sigma, and the mean 0.25 s has standard error
// 0.5/sqrt(n) = 3.5 ms (+- 15 ms). Burstiness 4: CV 0.5 (more even), kurtosis 4.5, standard error 0.0066:
// 0.5 +- 0.04. The CVs order 0.25 > 1 > 4.
TEST(WorkloadArrivals, GammaBurstinessSetsTheCv) {
  const GapStats bursty = gap_stats(moesim::sim::open_loop_requests(gamma_spec(4.0, 0.25, 20000)));
  const GapStats poisson = gap_stats(moesim::sim::open_loop_requests(gamma_spec(4.0, 1.0, 20000)));
  const GapStats even = gap_stats(moesim::sim::open_loop_requests(gamma_spec(4.0, 4.0, 20000)));
  EXPECT_NEAR(bursty.mean, 0.25, 0.015);
  EXPECT_NEAR(bursty.cv, 2.0, 0.15);
  EXPECT_NEAR(even.mean, 0.25, 0.005);
  EXPECT_NEAR(even.cv, 0.5, 0.04);
  EXPECT_GT(bursty.cv, poisson.cv);
  EXPECT_GT(poisson.cv, even.cv);
}

// Request i's gap depends only on (seed, i): the first 100 of 1,000 requests are the 100 requests of a
// shorter run; the same seed gives the same arrivals, another seed others. A tiny burstiness (1e-3) keeps
// gaps finite: most are 0 (simultaneous arrivals), a few are long.
TEST(WorkloadArrivals, GammaDeterministicPerRequest) {
  const auto a = moesim::sim::open_loop_requests(gamma_spec(2.0, 0.5, 1000, 9));
  const auto b = moesim::sim::open_loop_requests(gamma_spec(2.0, 0.5, 100, 9));
  ASSERT_EQ(b.size(), 100u);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  EXPECT_EQ(moesim::sim::open_loop_requests(gamma_spec(2.0, 0.5, 1000, 9)), a);
  EXPECT_NE(moesim::sim::open_loop_requests(gamma_spec(2.0, 0.5, 1000, 10))[0].arrival, a[0].arrival);
  const auto tiny = moesim::sim::open_loop_requests(gamma_spec(2.0, 1e-3, 200, 3));
  std::int64_t zero_gaps = 0;
  for (std::size_t i = 1; i < tiny.size(); ++i) {
    ASSERT_GE(tiny[i].arrival, tiny[i - 1].arrival);
    zero_gaps += tiny[i].arrival == tiny[i - 1].arrival ? 1 : 0;
  }
  EXPECT_GT(zero_gaps, 150);
}

// Same seed, same requests (arrivals and lengths); another seed gives other arrivals and lengths. Lengths
// of request i depend only on (seed, i): lengths_for(spec, i) equals the i-th generated request's. The
// pinned values guard the generator against accidental change; they hold on every platform because the
// random bits are integer arithmetic and the conversions are written out.
TEST(WorkloadArrivals, DeterministicInSeed) {
  WorkloadSpec w = open_spec(ArrivalKind::Poisson, 1.0, 500, 42);
  w.prompt = {LengthKind::Normal, 0, 1, 0, 2000, 200};
  w.output = {LengthKind::Lognormal, 0, 1, 4096, 256, 128};
  const auto a = moesim::sim::open_loop_requests(w);
  const auto b = moesim::sim::open_loop_requests(w);
  EXPECT_EQ(a, b);
  for (std::int64_t i : {0, 7, 499}) {
    const auto [p, o] = moesim::sim::lengths_for(w, i);
    EXPECT_EQ(p, a[static_cast<std::size_t>(i)].prompt_tokens);
    EXPECT_EQ(o, a[static_cast<std::size_t>(i)].output_tokens);
  }
  w.seed = 43;
  const auto c = moesim::sim::open_loop_requests(w);
  std::size_t same_arrival = 0, same_prompt = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    same_arrival += a[i].arrival == c[i].arrival ? 1 : 0;
    same_prompt += a[i].prompt_tokens == c[i].prompt_tokens ? 1 : 0;
  }
  EXPECT_EQ(same_arrival, 0u);
  // N(2000, 200) rounded: two independent draws agree with probability about 1/(2 sqrt(pi) 200) = 0.0014.
  EXPECT_LT(same_prompt, 10u);

  // Pinned values, computed independently in Python (splitmix64 as here, math.log, statistics.NormalDist
  // for the truncated normal and lognormal quantiles): Poisson at 1/s with seed 1 arrives at
  // 0.3659865354, 0.8431467412 and 2.2600484366 s; with seed 42 the N(2000, 200) prompts of requests 0-2
  // are 2129, 2152, 1804 and the lognormal(256, 128; max 4096) outputs 289, 309, 303.
  const auto pinned = moesim::sim::open_loop_requests(open_spec(ArrivalKind::Poisson, 1.0, 3, 1));
  EXPECT_EQ(pinned[0].arrival, SimTime{365'986'535'400});
  EXPECT_EQ(pinned[1].arrival, SimTime{843'146'741'217});
  EXPECT_EQ(pinned[2].arrival, SimTime{2'260'048'436'619});
  EXPECT_EQ(a[0].prompt_tokens, 2129);
  EXPECT_EQ(a[1].prompt_tokens, 2152);
  EXPECT_EQ(a[2].prompt_tokens, 1804);
  EXPECT_EQ(a[0].output_tokens, 289);
  EXPECT_EQ(a[1].output_tokens, 309);
  EXPECT_EQ(a[2].output_tokens, 303);
}

// Closed loop, 3 users joining 1 s apart, think time 0.5 s, 5 requests in all. Users join at 0, 1, 2 s.
// The engine's events: user 0 sends at 0 (id 0); its request completes at 0.8 s, so it sends again at
// 1.3 s; user 1 joins at 1 s (id 1) before that (id 2 at 1.3 s); user 2 at 2 s (id 3); one more (id 4);
// then nullopt: all 5 sent. With 10 users and 4 requests only 4 users ever send.
TEST(WorkloadClosedLoop, UsersJoinAndResend) {
  WorkloadSpec w = open_spec(ArrivalKind::ClosedLoop, 1.0, 5);
  w.users = 3;
  w.user_interval_s = 1.0;
  w.think_time_s = 0.5;
  moesim::sim::validate_workload(w, "test");
  ClosedLoopUsers loop(w);
  EXPECT_EQ(loop.users(), 3);
  EXPECT_EQ(loop.join_time(0), SimTime{});
  EXPECT_EQ(loop.join_time(2), 2 * kSecond);
  const auto r0 = loop.send(0, SimTime{});
  ASSERT_TRUE(r0);
  EXPECT_EQ(r0->id, 0);
  EXPECT_EQ(r0->user, 0);
  EXPECT_EQ(r0->prompt_tokens, 2000);
  EXPECT_EQ(loop.next_send_time(SimTime{800'000'000'000}), SimTime{1'300'000'000'000});
  const auto r1 = loop.send(1, kSecond);
  const auto r2 = loop.send(0, SimTime{1'300'000'000'000});
  const auto r3 = loop.send(2, 2 * kSecond);
  ASSERT_TRUE(r1 && r2 && r3);
  EXPECT_EQ(r1->id, 1);
  EXPECT_EQ(r2->id, 2);
  EXPECT_EQ(r2->user, 0);
  EXPECT_EQ(r2->arrival, SimTime{1'300'000'000'000});
  EXPECT_EQ(r3->id, 3);
  EXPECT_TRUE(loop.send(1, 3 * kSecond));
  EXPECT_FALSE(loop.send(2, 4 * kSecond));
  EXPECT_EQ(loop.sent(), 5);

  w.users = 10;
  w.requests = 4;
  EXPECT_EQ(ClosedLoopUsers(w).users(), 4);
}

// The arrival-process registry (STYLE.md practice 2), as PlacementRegistry: the built-in ones in order with
// their --help lines; unknown and taken names are refused. A new one, "test-every-second" (request i at i
// seconds, no rate), is parsed from a workload object by name, refuses a key it does not use, writes itself
// back, and times its requests: 0, 1 and 2 s.
TEST(ArrivalRegistry, ListsRefusesAndRunsARegisteredProcess) {
  const auto& all = moesim::sim::arrival_kinds();
  moesim::test::expect_builtins(all, {"poisson", "gamma", "uniform", "closed-loop", "trace"});
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_EQ(all[i].arrival != nullptr, i < 3) << all[i].name;  // closed loop and trace have no drawn times
  const auto parse = [](const nlohmann::json& j) {
    return moesim::sim::parse_workload(moesim::json::Node(j, "scenario.json", "$.workload"), "/scenarios");
  };
  expect_user_error(
      [&] {
        (void)parse({{"arrival", "gama"}, {"rate", "2/s"}});
      },
      {"$.workload.arrival", "did you mean 'gamma'", "valid: poisson, gamma, uniform, closed-loop, trace"});
  EXPECT_THROW(moesim::sim::register_arrival({static_cast<ArrivalKind>(90), "poisson", "again", {}}), UserError);
  const auto every_second = static_cast<ArrivalKind>(91);
  moesim::sim::register_arrival({every_second,
                                 "test-every-second",
                                 "request i at i seconds",
                                 {"prompt", "output"},
                                 100,
                                 1,
                                 [](const moesim::json::Node&, const std::filesystem::path&, WorkloadSpec&) {},
                                 [](const WorkloadSpec&, nlohmann::json&) {},
                                 [](const WorkloadSpec&, std::int64_t i, SimTime) { return i * kSecond; }});
  const WorkloadSpec w = parse({{"arrival", "test-every-second"}, {"requests", 3}, {"prompt", 10}, {"output", 5}});
  EXPECT_EQ(w.arrival, every_second);
  EXPECT_EQ(moesim::sim::name_of(w.arrival), "test-every-second");
  expect_user_error(
      [&] {
        (void)parse({{"arrival", "test-every-second"}, {"rate", "2/s"}, {"prompt", 1}});
      },
      {"$.workload.rate", "is not used with arrival \"test-every-second\""});
  EXPECT_EQ(
      moesim::sim::workload_to_json(w),
      (nlohmann::json{{"arrival", "test-every-second"}, {"requests", 3}, {"seed", 1}, {"prompt", 10}, {"output", 5}}));
  const auto reqs = moesim::sim::open_loop_requests(w);
  ASSERT_EQ(reqs.size(), 3U);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].arrival, static_cast<std::int64_t>(i) * kSecond);
    EXPECT_EQ(reqs[i].prompt_tokens, 10);
  }
}

}  // namespace
