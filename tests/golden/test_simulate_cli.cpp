// Golden runs of every simulate scenario in examples/ (compared field by field with tolerances against
// tests/golden/simulate/<name>.json), the simulator's outputs (per-token CSV, Chrome trace), and its
// bad inputs. Regenerate a golden file deliberately with
//   build/moesim simulate --scenario examples/<name>.json --json > tests/golden/simulate/<name>.json
// and review the diff: every changed number is a changed prediction.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;
namespace fs = std::filesystem;

TEST(GoldenSimulate, EveryExampleScenario) {
  int seen = 0;
  for (const auto& e : fs::directory_iterator(fs::path(MOESIM_SOURCE_DIR) / "examples")) {
    const std::string name = e.path().stem().string();
    if (!name.starts_with("simulate-")) continue;
    SCOPED_TRACE(name);
    ++seen;
    const auto r = run_cli("simulate --scenario " + e.path().string() + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const fs::path golden = fs::path(MOESIM_SOURCE_DIR) / "tests/golden/simulate" / (name + ".json");
    ASSERT_TRUE(fs::exists(golden)) << "no golden file; create it with the command at the top of this file";
    auto got = nlohmann::json::parse(r.out);
    auto want = nlohmann::json::parse(slurp(golden));
    // The scenario path differs between checkouts; everything else must match.
    expect_json_near(got["metrics"], want["metrics"], "$.metrics");
    expect_json_near(got["nodes"], want["nodes"], "$.nodes");
    expect_json_near(got["resolved"], want["resolved"], "$.resolved");
    for (const auto& m : got["metrics"]) EXPECT_FALSE(m["unit"].get<std::string>().empty()) << m.dump();
  }
  EXPECT_GE(seen, 5);
}

// The per-token CSV has one row per token plus a header, and its time column adds up; the Chrome trace
// is valid JSON with compute and NIC spans.
TEST(GoldenSimulate, PerTokenCsvAndChromeTrace) {
  const TestDir scratch("moesim_sim");
  const fs::path& dir = scratch.path();
  const auto csv = (dir / "tokens.csv").string();
  const auto chrome = (dir / "trace.json").string();
  const auto r =
      run_cli("simulate --nodes 3 --tokens 50 --per-token " + csv + " --chrome-trace " + chrome + " --chrome-tokens 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = slurp(csv);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 51);
  EXPECT_TRUE(text.starts_with("token,start_s,end_s,time_s,misc_s,moe_s,comm_s,rewire_s,max_routed_experts\n"));
  const auto trace = nlohmann::json::parse(slurp(chrome));
  int compute = 0, nic = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    (e["tid"] == 0 ? compute : nic) += 1;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  // 2 tokens x 40 layers x 3 nodes: an attention span and at least one expert span per node and layer.
  EXPECT_GE(compute, 2 * 40 * 3 * 2);
  EXPECT_GE(nic, 2 * 40 * 3 * 2);  // each node sends to 2 peers per layer
}

// A runtime with an interval gives simulate's tokens/s one, as estimate's: the figure over 1 + each end of
// the runtime profile's held-out errors (its prediction_interval), with the line that says what it is made of.
TEST(GoldenSimulate, RuntimeIntervalOnTokensPerSecond) {
  const std::string base = "simulate --model gpt-oss-120b --hw dgx-spark --runtime llama.cpp --nodes 1";
  const auto r = run_cli(base + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(std::string(MOESIM_SOURCE_DIR) + "/hwprofiles/runtimes/llama.cpp-cuda@dgx-spark.json");
  const nlohmann::json profile = nlohmann::json::parse(f);
  const double low = profile.at("prediction_interval").at("low").get<double>();
  const double high = profile.at("prediction_interval").at("high").get<double>();
  bool seen = false;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  for (const auto& x : doc.at("metrics")) {
    if (x.at("name").get<std::string>() != "tokens_per_second") continue;
    seen = true;
    const double v = x.at("value").get<double>();
    EXPECT_NEAR(x.at("low").get<double>(), v / (1 + high), 1e-9 * v);
    EXPECT_NEAR(x.at("high").get<double>(), v / (1 + low), 1e-9 * v);
  }
  EXPECT_TRUE(seen) << r.out;
  const auto text = run_cli(base);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("(range "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("range      llama.cpp-cuda@dgx-spark's interval from held-out dense rows"), std::string::npos)
      << text.out;
  const auto plain = run_cli("simulate --model gpt-oss-120b --hw dgx-spark --nodes 1 --json");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("\"low\""), std::string::npos);
}

TEST(BadInputs, Simulate) {
  TempFile typo("scenario.json", R"({"model": "dbrx-instruct", "strateg": "naive"})");
  TempFile wrong_type("scenario2.json", R"({"nodes": "two"})");
  const std::vector<BadInput> cases = {
      {"unknown strategy", "simulate --strategy P-LR", {"unknown strategy", "P-LR-D"}},
      {"unknown balancing", "simulate --balancing lru", {"unknown balancing", "lru-fill"}},
      {"unknown collective", "simulate --collective ring", {"unknown collective", "ring-allreduce"}},
      {"dense model", "simulate --model llama-3.1-8b", {"dense model", "moesim models"}},
      {"nodes 0", "simulate --nodes 0", {"--nodes", "at least 1"}},
      {"more nodes than the simulator models", "simulate --nodes 5000000000", {"--nodes", "up to 2048", "estimate"}},
      {"typo in scenario", "simulate --scenario " + typo.path(), {typo.path(), "strateg", "did you mean 'strategy'"}},
      {"wrong type in scenario", "simulate --scenario " + wrong_type.path(), {wrong_type.path(), "$.nodes"}},
      {"negative seed", "simulate --seed -1", {"--seed -1", "whole number"}},
      {"contention neither on nor off", "simulate --contention maybe", {"--contention", "on or off"}},
      {"missing trace", "simulate --trace /nonexistent/t.jsonl", {"/nonexistent/t.jsonl"}},
      {"per-token into a missing directory",
       "simulate --tokens 5 --per-token /nonexistent/dir/t.csv",
       {"/nonexistent/dir/t.csv", "--per-token"}},
  };
  for (const auto& c : cases) expect_bad_input(c);
}

// A trace recorded for another model is refused before anything runs, naming both shapes.
// Outputs are checked before the run and written together: an unwritable --chrome-trace leaves no CSV.
TEST(BadInputs, SimulateWritesAllOutputsOrNone) {
  const TestDir scratch("moesim_sim_out");
  const fs::path& dir = scratch.path();
  const auto csv = (dir / "t.csv").string();
  expect_bad_input({"chrome trace into a missing directory",
                    "simulate --tokens 5 --per-token " + csv + " --chrome-trace /nonexistent/dir/c.json",
                    {"/nonexistent/dir/c.json", "--chrome-trace"}});
  EXPECT_FALSE(fs::exists(csv));
  EXPECT_TRUE(fs::is_empty(dir)) << "no temporary file may be left either";
}

TEST(BadInputs, SimulateTraceForAnotherModel) {
  const TestDir scratch("moesim_sim_bad");
  const fs::path& dir = scratch.path();
  const auto trace = (dir / "mixtral.jsonl").string();
  ASSERT_EQ(run_cli("trace gen --model mixtral-8x7b --tokens 10 --out " + trace).code, 0);
  expect_bad_input({"trace of another model", "simulate --model dbrx-instruct --trace " + trace, {trace}});
  const auto csv = (dir / "t.csv").string();
  const auto r = run_cli("simulate --model dbrx-instruct --trace " + trace + " --per-token " + csv);
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(csv)) << "a refused run must not leave an output file";
}

}  // namespace
