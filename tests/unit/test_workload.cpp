// Request workloads, the "workload" JSON object: round trips, rate units, relative trace paths, and the
// refusals that name the key and the fix.

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

using moesim::sim::ArrivalKind;
using moesim::sim::LengthKind;
using moesim::sim::LengthSpec;
using moesim::sim::WorkloadSpec;
using moesim::test::workload::open_spec;

namespace fs = std::filesystem;

moesim::sim::WorkloadSpec parse(const nlohmann::json& j, const fs::path& base = "/scenarios") {
  moesim::json::Node node(j, "scenario.json", "$.workload");
  return moesim::sim::parse_workload(node, base);
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
