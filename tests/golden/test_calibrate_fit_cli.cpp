// `moesim calibrate fit` end to end on seed 000's Tables 3-4 (examples/measured/), and its bad inputs.

#include <gtest/gtest.h>

#include "cli_support.hpp"

using namespace moesim::test;

namespace {
const std::string kRuns = std::string(MOESIM_SOURCE_DIR) + "/examples/measured/seed000-tables-3-4.json";

double run_field(const nlohmann::json& j, const std::string& run, const std::string& key) {
  for (const auto& r : j["runs"])
    if (r["name"] == run) return r["predicted"][key].get<double>();
  ADD_FAILURE() << "no run " << run;
  return 0;
}
}  // namespace

// The issue's criterion: fitted to the 2-node P-L_R-D row of Table 4 alone, the simulator predicts the
// 3- and 4-node rows' tokens/s (6.5, 7.0) within 10%.
TEST(GoldenCalibrateFit, TwoNodeRowPredictsThreeAndFourNodesWithinTenPercent) {
  const TestDir scratch("moesim_fitcli");
  const fs::path& dir = scratch.path();
  const auto out = (dir / "fitted.json").string();
  const auto r = run_cli("calibrate fit --measured " + kRuns + " --runs p-lr-d-2-nodes --no-loo --json --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(1.0 / run_field(j, "p-lr-d-3-nodes", "time_per_token") / 6.5, 1.0, 0.10);
  EXPECT_NEAR(1.0 / run_field(j, "p-lr-d-4-nodes", "time_per_token") / 7.0, 1.0, 0.10);
  // The fitted profiles exist and simulate.
  ASSERT_TRUE(fs::exists(out));
  ASSERT_TRUE(fs::exists(dir / "fitted.nic.json"));
  const auto s = run_cli("simulate --nodes 3 --hw " + out + " --nic " + (dir / "fitted.nic.json").string() +
                         " --tokens 100 --json");
  EXPECT_EQ(s.code, 0) << s.err;
}

TEST(GoldenCalibrateFit, BadInputs) {
  TempFile unknown_model("unknown_model.json", R"({"source": "x", "runs": [{"name": "a",
      "scenario": {"model": "dbrx-instruckt", "nodes": 2}, "measured": {"tokens_per_s": 6.1}}]})");
  expect_bad_input(
      {"case 1", "calibrate fit --measured " + unknown_model.path(), {"$.runs[0].scenario.model", "dbrx-instruct"}});
  TempFile no_metric("no_metric.json", R"({"source": "x", "runs": [{"name": "a",
      "scenario": {"nodes": 2}, "measured": {"split": {"moe": "0.08s"}}}]})");
  expect_bad_input({"case 2", "calibrate fit --measured " + no_metric.path(), {"$.runs[0].measured", "tokens_per_s"}});
  TempFile bare("bare.json", R"({"source": "x", "runs": [{"name": "a",
      "scenario": {"nodes": 2}, "measured": {"time_per_token": "0.166"}}]})");
  expect_bad_input({"case 3", "calibrate fit --measured " + bare.path(), {"time_per_token", "unit"}});
  TempFile good("good.json", R"({"source": "x", "runs": [{"name": "a",
      "scenario": {"nodes": 2, "generate": {"tokens": 50}}, "measured": {"tokens_per_s": 6.1}}]})");
  expect_bad_input({"case 4",
                    "calibrate fit --measured " + good.path() + " --fit memory_efficiency,latency",
                    {"--fit", "message_latency"}});
  expect_bad_input({"case 5", "calibrate fit --measured " + good.path() + " --runs b", {"--runs", "no run named 'b'"}});
  expect_bad_input({"case 6", "calibrate fit --measured /nonexistent/runs.json", {"/nonexistent/runs.json"}});
  expect_bad_input({"case 7",
                    "calibrate fit --measured " + good.path() + " --out /nonexistent/dir/fitted.json",
                    {"/nonexistent/dir/fitted.json"}});
}
