// Request workloads: arrival processes (Poisson, uniform, closed loop, trace replay), length
// distributions, the request-trace CSV reader and the "workload" JSON object. Statistical checks use
// 20,000 draws and 3-sigma bounds derived in each test's comment.

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

using moesim::test::expect_user_error;

namespace {

namespace fs = std::filesystem;
using moesim::UserError;
using moesim::sim::ArrivalKind;
using moesim::sim::ClosedLoopUsers;
using moesim::sim::kPicosecondsPerSecond;
using moesim::sim::LengthKind;
using moesim::sim::LengthSpec;
using moesim::sim::Request;
using moesim::sim::WorkloadSpec;

constexpr std::int64_t kPs = kPicosecondsPerSecond;

/// A directory unique to the running test (and process), removed with everything in it at the end.
/// A folder of the test's own (test_support.hpp).

WorkloadSpec open_spec(ArrivalKind kind, double rate, std::int64_t requests, std::uint64_t seed = 1) {
  WorkloadSpec w;
  w.arrival = kind;
  w.rate = rate;
  w.requests = requests;
  w.seed = seed;
  w.prompt = {LengthKind::Fixed, 2000};
  w.output = {LengthKind::Fixed, 256};
  return w;
}

struct LengthMoments {
  double mean = 0, std = 0;
  std::int64_t min = 0, max = 0;
};

/// LengthMoments of the prompt lengths of requests 0..n-1 under `prompt`.
LengthMoments prompt_moments(const LengthSpec& prompt, std::int64_t n, std::uint64_t seed = 1) {
  WorkloadSpec w = open_spec(ArrivalKind::Poisson, 1.0, n, seed);
  w.prompt = prompt;
  moesim::sim::validate_workload(w, "test");
  LengthMoments m;
  m.min = std::numeric_limits<std::int64_t>::max();
  double sum = 0, sum2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto len = moesim::sim::lengths_for(w, i).first;
    sum += static_cast<double>(len);
    sum2 += static_cast<double>(len) * static_cast<double>(len);
    m.min = std::min(m.min, len);
    m.max = std::max(m.max, len);
  }
  m.mean = sum / static_cast<double>(n);
  m.std = std::sqrt(sum2 / static_cast<double>(n) - m.mean * m.mean);
  return m;
}

moesim::sim::WorkloadSpec parse(const nlohmann::json& j, const fs::path& base = "/scenarios") {
  moesim::json::Node node(j, "scenario.json", "$.workload");
  return moesim::sim::parse_workload(node, base);
}

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
  EXPECT_GT(reqs[0].arrival, 0);
  std::vector<double> gaps;
  std::int64_t previous = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].id, static_cast<std::int64_t>(i));
    EXPECT_EQ(reqs[i].user, -1);
    ASSERT_GE(reqs[i].arrival, previous);
    gaps.push_back(static_cast<double>(reqs[i].arrival - previous) / static_cast<double>(kPs));
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
    EXPECT_EQ(two[i].arrival, static_cast<std::int64_t>(i) * 500'000'000'000) << i;
    EXPECT_EQ(two[i].prompt_tokens, 2000);
    EXPECT_EQ(two[i].output_tokens, 256);
  }
  const auto three = moesim::sim::open_loop_requests(open_spec(ArrivalKind::Uniform, 3.0, 10));
  EXPECT_EQ(three[3].arrival, kPs);
  EXPECT_EQ(three[9].arrival, 3 * kPs);
  EXPECT_EQ(three[1].arrival, 333'333'333'333);
}

struct GapStats {
  double mean = 0, cv = 0, below_mean = 0;
};

/// Mean, coefficient of variation and fraction below the mean of the gaps between consecutive arrivals
/// (the first gap from 0), in seconds.
GapStats gap_stats(const std::vector<Request>& reqs) {
  std::vector<double> gaps;
  std::int64_t previous = 0;
  for (const Request& r : reqs) {
    gaps.push_back(static_cast<double>(r.arrival - previous) / static_cast<double>(kPs));
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
  EXPECT_GT(gamma[0].arrival, 0);
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
  EXPECT_EQ(pinned[0].arrival, 365'986'535'400);
  EXPECT_EQ(pinned[1].arrival, 843'146'741'217);
  EXPECT_EQ(pinned[2].arrival, 2'260'048'436'619);
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
  EXPECT_EQ(loop.join_time(0), 0);
  EXPECT_EQ(loop.join_time(2), 2 * kPs);
  const auto r0 = loop.send(0, 0);
  ASSERT_TRUE(r0);
  EXPECT_EQ(r0->id, 0);
  EXPECT_EQ(r0->user, 0);
  EXPECT_EQ(r0->prompt_tokens, 2000);
  EXPECT_EQ(loop.next_send_time(800'000'000'000), 1'300'000'000'000);
  const auto r1 = loop.send(1, kPs);
  const auto r2 = loop.send(0, 1'300'000'000'000);
  const auto r3 = loop.send(2, 2 * kPs);
  ASSERT_TRUE(r1 && r2 && r3);
  EXPECT_EQ(r1->id, 1);
  EXPECT_EQ(r2->id, 2);
  EXPECT_EQ(r2->user, 0);
  EXPECT_EQ(r2->arrival, 1'300'000'000'000);
  EXPECT_EQ(r3->id, 3);
  EXPECT_TRUE(loop.send(1, 3 * kPs));
  EXPECT_FALSE(loop.send(2, 4 * kPs));
  EXPECT_EQ(loop.sent(), 5);

  w.users = 10;
  w.requests = 4;
  EXPECT_EQ(ClosedLoopUsers(w).users(), 4);
}

// ------------------------------------------------------------------------------------------------------
// Lengths.

// Fixed: every request gets the value.
// Uniform [100, 200]: 101 equally likely integers, mean 150, sd sqrt((101^2 - 1)/12) = 29.15, standard
// error 29.15/sqrt(20000) = 0.206, so 150 +- 0.62; min 100 and max 200 are both hit.
TEST(WorkloadLengths, FixedAndUniform) {
  const auto fixed = prompt_moments({LengthKind::Fixed, 7}, 100);
  EXPECT_EQ(fixed.min, 7);
  EXPECT_EQ(fixed.max, 7);
  const auto u = prompt_moments({LengthKind::Uniform, 0, 100, 200}, 20000);
  EXPECT_EQ(u.min, 100);
  EXPECT_EQ(u.max, 200);
  EXPECT_NEAR(u.mean, 150.0, 3 * 29.15 / std::sqrt(20000.0));
  EXPECT_NEAR(u.std, 29.15, 29.15 * 0.03);
}

// Normal(2000, 200), bounds [1, none]: the truncation at 0.5 removes nothing measurable (10 sigma), so the
// mean is 2000 +- 3 * 200/sqrt(20000) = 4.24 and the sd 200 within 3% (its standard error is 0.5%).
// Tight bounds [1900, 2100] are symmetric about the mean: every length inside, mean still 2000 +- 4.24.
// Half a normal: Normal(100, 50) with min 100 keeps X > 99.5, i.e. Z > a = -0.01, whose mean is
// 100 + 50 phi(a)/(1 - Phi(a)) = 100 + 50 * 0.398922/0.503989 = 139.58; the half-normal's sd is
// 50 sqrt(1 - 2/pi) = 30.1, so +- 3 * 30.1/sqrt(20000) = 0.64 (+0.1 for rounding to integers).
TEST(WorkloadLengths, NormalMeanStdAndTruncation) {
  const auto wide = prompt_moments({LengthKind::Normal, 0, 1, 0, 2000, 200}, 20000);
  EXPECT_NEAR(wide.mean, 2000.0, 3 * 200 / std::sqrt(20000.0));
  EXPECT_NEAR(wide.std, 200.0, 6.0);
  EXPECT_GE(wide.min, 1);

  const auto tight = prompt_moments({LengthKind::Normal, 0, 1900, 2100, 2000, 200}, 20000);
  EXPECT_GE(tight.min, 1900);
  EXPECT_LE(tight.max, 2100);
  EXPECT_NEAR(tight.mean, 2000.0, 3 * 200 / std::sqrt(20000.0));

  const auto half = prompt_moments({LengthKind::Normal, 0, 100, 0, 100, 50}, 20000);
  EXPECT_GE(half.min, 100);
  EXPECT_NEAR(half.mean, 139.58, 3 * 30.1 / std::sqrt(20000.0) + 0.1);
}

// Lognormal with mean 256 and sd 128 of the length itself (sigma^2 = ln 1.25, mu = ln 256 - sigma^2/2):
// the sample mean is 256 +- 3 * 128/sqrt(20000) = 2.7 and the sd 128 within 10% (heavier tail than a
// normal); the lower bound at 0.5 cuts off a mass of about 1e-35. With max 300 every length is <= 300.
TEST(WorkloadLengths, LognormalMeanStdAndBounds) {
  const auto wide = prompt_moments({LengthKind::Lognormal, 0, 1, 0, 256, 128}, 20000);
  EXPECT_NEAR(wide.mean, 256.0, 3 * 128 / std::sqrt(20000.0));
  EXPECT_NEAR(wide.std, 128.0, 12.8);
  EXPECT_GE(wide.min, 1);
  const auto capped = prompt_moments({LengthKind::Lognormal, 0, 10, 300, 256, 128}, 20000);
  EXPECT_GE(capped.min, 10);
  EXPECT_LE(capped.max, 300);
  EXPECT_EQ(capped.max, 300);  // about 30% of the mass lies above 300.5; the draws reach the bound
}

// ------------------------------------------------------------------------------------------------------
// Request-trace CSV.

// moesim's own columns, with an extra column (ignored), a blank line and a trailing newline: three
// requests at 0, 0.5 and 0.5 s (equal times are fine) with their token counts; ids in row order.
// The same file with CRLF line endings and a UTF-8 byte-order mark reads the same. max_rows = 2 keeps 2.
TEST(WorkloadTrace, OwnColumnsLfAndCrlf) {
  moesim::test::TestDir dir("moesim_workload");
  const std::string text = "arrival_s,note,prompt_tokens,output_tokens\n0.0,a,2000,256\n\n0.5,b,1800,300\n0.5,c,1,1\n";
  const auto reqs = moesim::sim::load_request_trace(dir.write("lf.csv", text));
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0], (Request{0, 0, 2000, 256, -1}));
  EXPECT_EQ(reqs[1], (Request{1, 500'000'000'000, 1800, 300, -1}));
  EXPECT_EQ(reqs[2], (Request{2, 500'000'000'000, 1, 1, -1}));

  std::string crlf = "\xEF\xBB\xBF";
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(moesim::sim::load_request_trace(dir.write("crlf.csv", crlf)), reqs);
  EXPECT_EQ(moesim::sim::load_request_trace(dir.write("lf2.csv", text), 2).size(), 2u);
}

// Azure LLM inference trace 2023 (first rows of AzureLLMInferenceTrace_conv.csv's format): times relative
// to the first row, 7 fraction digits = 100 ns. 18:15:46.6805900 -> 0; 18:15:50.9951690 -> 4.314579 s;
// a row across midnight checks the date arithmetic: 23:59:59.5 on the 16th to 00:00:00.25 on the 17th is
// 0.75 s. CRLF endings. The 2024 format has 6 digits and a UTC offset: 00:00:00.009930+00:00 ->
// 0, 00:00:01.5+00:00 -> 1.49007 s; a "+01:00" row is an hour earlier in UTC.
TEST(WorkloadTrace, AzureTimestamps) {
  moesim::test::TestDir dir("moesim_workload");
  const auto y2023 = moesim::sim::load_request_trace(dir.write("azure2023.csv",
                                                               "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                                               "2023-11-16 18:15:46.6805900,374,44\r\n"
                                                               "2023-11-16 18:15:50.9951690,396,109\r\n"
                                                               "2023-11-16 23:59:59.5000000,879,42\r\n"
                                                               "2023-11-17 00:00:00.2500000,91,22\r\n"));
  ASSERT_EQ(y2023.size(), 4u);
  EXPECT_EQ(y2023[0], (Request{0, 0, 374, 44, -1}));
  EXPECT_EQ(y2023[1].arrival, 4'314'579'000'000);
  EXPECT_EQ(y2023[1].prompt_tokens, 396);
  EXPECT_EQ(y2023[1].output_tokens, 109);
  EXPECT_EQ(y2023[3].arrival - y2023[2].arrival, 750'000'000'000);

  const auto y2024 = moesim::sim::load_request_trace(dir.write("azure2024.csv",
                                                               "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                                               "2024-05-10 00:00:00.009930+00:00,2162,5\n"
                                                               "2024-05-10 00:00:01.5+00:00,1021,12\n"
                                                               "2024-05-10 01:00:02.000000+01:00,50,3\n"));
  ASSERT_EQ(y2024.size(), 3u);
  EXPECT_EQ(y2024[0].arrival, 0);
  EXPECT_EQ(y2024[1].arrival, 1'490'070'000'000);
  EXPECT_EQ(y2024[2].arrival, 1'990'070'000'000);
}

// Every bad input is one UserError line naming the file, the line and the column, with the fix.
TEST(WorkloadTrace, BadInputsNameFileLineAndFix) {
  moesim::test::TestDir dir("moesim_workload");
  const std::string h = "arrival_s,prompt_tokens,output_tokens\n";
  auto load = [&](const std::string& name, const std::string& text) {
    const auto p = dir.write(name, text);
    return [p] { (void)moesim::sim::load_request_trace(p); };
  };
  const std::string missing = (dir.path() / "nope.csv").string();
  expect_user_error([&] { (void)moesim::sim::load_request_trace(missing); }, {missing, "no such request-trace file"});
  expect_user_error(load("empty.csv", ""), {"empty.csv", "is empty", "header row"});
  expect_user_error(load("nohdr.csv", "0.0,10,10\n1.0,10,10\n"),
                    {"nohdr.csv: line 1", "matches no request-trace format", "its columns are: 0.0, 10, 10"});
  expect_user_error(load("noout.csv", "arrival_s,prompt_tokens,x\n0,1,1\n"),
                    {"noout.csv: line 1", "output-length", "arrival_s, prompt_tokens, x"});
  expect_user_error(load("neg.csv", h + "0,1,1\n-1.5,1,1\n"), {"neg.csv: line 3, column arrival_s", "negative"});
  expect_user_error(load("dec.csv", h + "0,1,1\n2.0,1,1\n1.5,1,1\n"),
                    {"dec.csv: line 4, column arrival_s", "earlier than line 3", "sort the file by time"});
  expect_user_error(load("dec_ts.csv",
                         "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,1,1\n"
                         "2023-11-16 18:15:46.4,1,1\n"),
                    {"dec_ts.csv: line 3, column TIMESTAMP", "sort the file by time"});
  expect_user_error(load("zero.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.5,100,0\r\n"),
                    {"zero.csv: line 2, column GeneratedTokens", ">= 1", "awk -F, 'NR==1 || $3 > 0'"});
  expect_user_error(load("frac.csv", h + "0,12.5,1\n"), {"frac.csv: line 2, column prompt_tokens", "whole number"});
  expect_user_error(load("zero_p.csv", h + "0,0,1\n"), {"zero_p.csv: line 2, column prompt_tokens", ">= 1"});
  expect_user_error(load("badnum.csv", h + "0,1,1\n1.2.3,1,1\n"),
                    {"badnum.csv: line 3, column arrival_s", "\"1.2.3\" is not a number"});
  expect_user_error(load("badts.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023 18:15,1,1\n"),
                    {"badts.csv: line 2, column TIMESTAMP", "not a timestamp like 2023-11-16 18:15:46.6805900"});
  expect_user_error(load("short.csv", h + "0,1\n"),
                    {"short.csv: line 2, column output_tokens", "is missing", "2 fields, the header 3"});
  expect_user_error(load("norows.csv", h), {"norows.csv", "no requests"});
  expect_user_error(load("norows_crlf.csv", "arrival_s,prompt_tokens,output_tokens\r\n\r\n"), {"no requests"});
}

// A trace workload replays the file through open_loop_requests, at most `requests` rows (0 = all).
TEST(WorkloadTrace, OpenLoopReplaysTheFile) {
  moesim::test::TestDir dir("moesim_workload");
  WorkloadSpec w;
  w.arrival = ArrivalKind::Trace;
  w.trace_path = dir.write("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,6\n1,7,8\n2,9,10\n").string();
  w.requests = 0;
  EXPECT_EQ(moesim::sim::open_loop_requests(w).size(), 3u);
  w.requests = 2;
  const auto two = moesim::sim::open_loop_requests(w);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1], (Request{1, kPs, 7, 8, -1}));
}

// ------------------------------------------------------------------------------------------------------
// JSON.

// Each arrival kind: parse -> to_json -> parse gives the same spec, and to_json is stable. Awkward numbers
// (a rate of 1/3 per second, 0.1 s) survive because they are written with 17 significant digits.
TEST(WorkloadJson, RoundTrip) {
  const std::vector<nlohmann::json> cases = {
      {{"arrival", "poisson"},
       {"rate", "2/s"},
       {"requests", 1000},
       {"seed", 7},
       {"prompt", {{"dist", "normal"}, {"mean", 2000}, {"std", 200}, {"min", 1}, {"max", 4096}}},
       {"output", 256}},
      {{"arrival", "uniform"},
       {"rate", "20/min"},
       {"prompt", {{"dist", "uniform"}, {"min", 100}, {"max", 4000}}},
       {"output", {{"dist", "lognormal"}, {"mean", 256.5}, {"std", 128}}}},
      {{"arrival", "closed-loop"},
       {"users", 32},
       {"user_interval", "100ms"},
       {"think_time", "0.1s"},
       {"requests", 500},
       {"prompt", {{"dist", "fixed"}, {"value", 2000}}},
       {"output", 256}},
      {{"arrival", "trace"}, {"trace", "/data/azure.csv"}},
  };
  for (const auto& j : cases) {
    const WorkloadSpec a = parse(j);
    const nlohmann::json out = moesim::sim::workload_to_json(a);
    const WorkloadSpec b = parse(out);
    EXPECT_EQ(a, b) << j.dump() << " -> " << out.dump();
    EXPECT_EQ(moesim::sim::workload_to_json(b), out);
  }
  const WorkloadSpec u = parse(cases[1]);
  EXPECT_EQ(u.arrival, ArrivalKind::Uniform);
  EXPECT_DOUBLE_EQ(u.rate, 1.0 / 3.0);
  EXPECT_EQ(u.requests, 100);  // the default
  EXPECT_EQ(u.output.max, 0);  // no upper bound
  const WorkloadSpec c = parse(cases[2]);
  EXPECT_EQ(c.users, 32);
  EXPECT_DOUBLE_EQ(c.user_interval_s, 0.1);
  EXPECT_EQ(c.prompt, (LengthSpec{LengthKind::Fixed, 2000}));
  EXPECT_EQ(parse(cases[3]).requests, 0);  // trace: all rows by default
}

// Rates: "2/s", "2req/s", "2 req/s", "120/min" and "7200/h" are all 2 per second; a relative trace path
// is resolved against the scenario's directory.
TEST(WorkloadJson, RateUnitsAndRelativeTracePath) {
  for (const char* text : {"2/s", "2req/s", "2 req/s", "2 requests/s", "120/min", "7200/h", "2e0/s"}) {
    EXPECT_DOUBLE_EQ(moesim::sim::parse_request_rate(text, "x"), 2.0) << text;
  }
  const auto t = parse({{"arrival", "trace"}, {"trace", "traces/a.csv"}, {"requests", 5}}, "/work/scen");
  EXPECT_EQ(t.trace_path, "/work/scen/traces/a.csv");
  EXPECT_EQ(t.requests, 5);
}

// A bare number is refused for a rate (showing "2/s") and for a duration; other mistakes name the key.
TEST(WorkloadJson, BadWorkloadsNameTheKey) {
  const nlohmann::json base = {{"arrival", "poisson"}, {"rate", "2/s"}, {"prompt", 2000}, {"output", 256}};
  auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = base;
    if (v.is_null()) {
      j.erase(key);
    } else {
      j[key] = v;
    }
    return [j] { (void)parse(j); };
  };
  expect_user_error(with("rate", 2), {"scenario.json: $.workload.rate", "bare number 2", "\"2/s\""});
  expect_user_error(with("rate", "2"), {"$.workload.rate", "has no unit", "\"2/s\""});
  expect_user_error(with("rate", "2GB/s"), {"$.workload.rate", "unknown unit", "\"2/s\""});
  expect_user_error(with("rate", "0/s"), {"$.workload.rate", "positive"});
  expect_user_error(with("rate", nullptr), {"$.workload.rate", "missing", "\"2/s\""});
  expect_user_error(with("arrival", "posson"), {"$.workload.arrival", "did you mean 'poisson'"});
  expect_user_error(with("rqeuests", 5), {"$.workload.rqeuests", "not a known key", "did you mean 'requests'"});
  expect_user_error(with("users", 5), {"$.workload.users", "not used with arrival \"poisson\""});
  expect_user_error(with("requests", 0), {"$.workload.requests", ">= 1"});
  expect_user_error(with("prompt", "2000"), {"$.workload.prompt", "expected a token count"});
  expect_user_error(with("prompt", 0), {"$.workload.prompt", ">= 1"});
  expect_user_error(with("output", nullptr), {"$.workload.output", "missing"});
  expect_user_error(with("prompt", {{"dist", "gaussian"}, {"mean", 5}, {"std", 1}}),
                    {"$.workload.prompt.dist", "not a known length distribution", "normal"});
  expect_user_error(with("prompt", {{"dist", "uniform"}, {"min", 10}, {"max", 5}}),
                    {"$.workload.prompt", "below min 10"});
  expect_user_error(with("prompt", {{"dist", "normal"}, {"mean", 50}, {"std", 1}, {"min", 100}}),
                    {"$.workload.prompt", "mean 50 is outside"});
  expect_user_error(with("prompt", {{"dist", "normal"}, {"mean", 50}, {"sd", 1}}),
                    {"$.workload.prompt.sd", "did you mean 'std'"});

  const nlohmann::json closed = {{"arrival", "closed-loop"}, {"prompt", 2000}, {"output", 256}};
  nlohmann::json bare = closed;
  bare["user_interval"] = 1;
  expect_user_error([&] { (void)parse(bare); }, {"$.workload.user_interval", "bare number 1", "\"2s\""});
  nlohmann::json rate = closed;
  rate["rate"] = "2/s";
  expect_user_error([&] { (void)parse(rate); }, {"$.workload.rate", "not used with arrival \"closed-loop\""});
  expect_user_error(
      [&] {
        (void)parse({{"arrival", "trace"}, {"trace", "a.csv"}, {"prompt", 5}});
      },
      {"$.workload.prompt", "the trace file gives"});
}

// validate_workload refuses out-of-range fields of a spec built in code, naming `where` and the field;
// a run longer than SimTime holds (100 requests at one per day: 8.6e6 s) is refused too.
TEST(WorkloadJson, ValidateRefusesOutOfRange) {
  WorkloadSpec w = open_spec(ArrivalKind::Poisson, 0.0, 10);
  expect_user_error([&] { moesim::sim::validate_workload(w, "s.json: $.workload"); },
                    {"s.json: $.workload.rate", "> 0"});
  w = open_spec(ArrivalKind::Uniform, 1.0 / 86400, 100);
  expect_user_error([&] { moesim::sim::validate_workload(w, "w"); }, {"w.rate", "raise the rate"});
  w = open_spec(ArrivalKind::ClosedLoop, 1.0, 10);
  w.users = 0;
  expect_user_error([&] { moesim::sim::validate_workload(w, "w"); }, {"w.users", ">= 1"});
  w.users = 1;
  w.output = {LengthKind::Fixed, 0};
  expect_user_error([&] { moesim::sim::validate_workload(w, "w"); }, {"w.output", "at least 1 token"});
}

// The keys of issue 21 (vLLM's benchmark_serving options and request-trace replay): gamma's burstiness
// (default 1), max_concurrency on every open-loop kind, a trace's trace_format and time_scale. They round
// trip through workload_to_json; defaults are left out of it (a trace run's resolved scenario is unchanged).
TEST(WorkloadJson, GammaConcurrencyAndTraceKeys) {
  const auto g = parse({{"arrival", "gamma"},
                        {"rate", "4/s"},
                        {"burstiness", 0.5},
                        {"max_concurrency", 8},
                        {"prompt", 100},
                        {"output", 10}});
  EXPECT_EQ(g.arrival, ArrivalKind::Gamma);
  EXPECT_DOUBLE_EQ(g.burstiness, 0.5);
  EXPECT_EQ(g.max_concurrency, 8);
  EXPECT_EQ(parse(moesim::sim::workload_to_json(g)), g);
  EXPECT_DOUBLE_EQ(parse({{"arrival", "gamma"}, {"rate", "4/s"}, {"prompt", 1}, {"output", 1}}).burstiness, 1.0);
  const auto u = parse({{"arrival", "uniform"}, {"rate", "1/s"}, {"max_concurrency", 2}, {"prompt", 1}, {"output", 1}});
  EXPECT_EQ(u.max_concurrency, 2);
  EXPECT_EQ(parse(moesim::sim::workload_to_json(u)), u);
  const auto t = parse({{"arrival", "trace"},
                        {"trace", "b.csv"},
                        {"trace_format", "burstgpt"},
                        {"time_scale", 0.25},
                        {"max_concurrency", 4}});
  EXPECT_EQ(t.trace_format, moesim::sim::RequestTraceFormat::BurstGpt);
  EXPECT_DOUBLE_EQ(t.time_scale, 0.25);
  EXPECT_EQ(t.max_concurrency, 4);
  EXPECT_EQ(parse(moesim::sim::workload_to_json(t)), t);
  const auto plain = moesim::sim::workload_to_json(parse({{"arrival", "trace"}, {"trace", "a.csv"}}));
  EXPECT_FALSE(plain.contains("trace_format") || plain.contains("time_scale") || plain.contains("max_concurrency"))
      << plain.dump();
}

// Their refusals name the key and the fix.
TEST(WorkloadJson, GammaConcurrencyAndTraceKeysRefused) {
  const nlohmann::json lengths = {{"prompt", 1}, {"output", 1}};
  auto with = [&](nlohmann::json j) {
    for (const auto& [k, v] : lengths.items()) j[k] = v;
    return j;
  };
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "poisson"}, {"rate", "1/s"}, {"burstiness", 0.5}}));
      },
      {"$.workload.burstiness", "not used with arrival \"poisson\"", "gamma"});
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "gamma"}, {"rate", "1/s"}, {"burstiness", 0}}));
      },
      {"$.workload.burstiness", "> 0"});
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "gamma"}, {"rate", "1/s"}, {"burstiness", "high"}}));
      },
      {"$.workload.burstiness"});
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "closed-loop"}, {"users", 4}, {"max_concurrency", 2}}));
      },
      {"$.workload.max_concurrency", "closed-loop", "already bound"});
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "poisson"}, {"rate", "1/s"}, {"max_concurrency", 0}}));
      },
      {"$.workload.max_concurrency", ">= 1"});
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "poisson"}, {"rate", "1/s"}, {"time_scale", 2}}));
      },
      {"$.workload.time_scale", "not used with arrival \"poisson\""});
  expect_user_error(
      [&] {
        (void)parse({{"arrival", "trace"}, {"trace", "a.csv"}, {"time_scale", -1}});
      },
      {"$.workload.time_scale", "> 0", "twice as fast"});
  expect_user_error(
      [&] {
        (void)parse({{"arrival", "trace"}, {"trace", "a.csv"}, {"trace_format", "azure2024"}});
      },
      {"$.workload.trace_format", "unknown request-trace format 'azure2024'", "burstgpt"});
  // The kinds listed for an unknown arrival include gamma.
  expect_user_error(
      [&] {
        (void)parse(with({{"arrival", "gama"}, {"rate", "1/s"}}));
      },
      {"did you mean 'gamma'", "poisson, gamma, uniform"});
}

}  // namespace
