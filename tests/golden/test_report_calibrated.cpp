// `moesim report` calibrates its headline (issue 20 item 6): the Mac Studio figures come from the profiles
// fitted to the measured runs, each with its leave-one-out interval, the datasheet figure kept beside it as
// an upper bound; a fit that fails says so and falls back to datasheet figures, labelled.

#include <cmath>

#include "cli_support.hpp"
#include "moesim/calibrate/fit.hpp"
#include "moesim/model/text.hpp"
#include "report_checks.hpp"

using namespace moesim::test;

namespace {

const nlohmann::json* metric(const nlohmann::json& point, const std::string& name) {
  for (const auto& m : point["metrics"])
    if (m["name"] == name) return &m;
  return nullptr;
}

}  // namespace

namespace moesim::test {

// Run on the default report by GoldenReport.DefaultReportIsCompleteCalibratedAndDrawn (test_report_cli.cpp),
// which writes it once for all its checks: under the sanitizers one default report takes minutes.
void expect_calibrated_headline(const std::string& dir) {
  const auto j = nlohmann::json::parse(slurp(fs::path(dir) / "sweep.json"));
  const auto measured = moesim::calibrate::builtin_measured_runs("measured/seed000-tables-3-4.json");

  // Every fitted (Mac) point: calibrated below its datasheet figure, inside a non-empty interval.
  std::size_t fitted = 0;
  bool checked_measured = false;
  for (const auto& p : j["points"]) {
    if (p.value("calibration", "") != "fitted") continue;
    ++fitted;
    EXPECT_EQ(p["hw"], "mac-studio-m2-ultra-192");
    const auto *v = metric(p, "tokens_per_second"), *lo = metric(p, "tokens_per_second_low"),
               *hi = metric(p, "tokens_per_second_high"), *ds = metric(p, "datasheet_tokens_per_second");
    ASSERT_TRUE(v && lo && hi && ds) << p.dump();
    const double value = (*v)["value"], low = (*lo)["value"], high = (*hi)["value"], datasheet = (*ds)["value"];
    EXPECT_LT(value, datasheet) << p.dump();
    EXPECT_LT(low, high) << p.dump();
    EXPECT_LE(low, value);
    EXPECT_GE(high, value);
    // The measured P-LR-D run on the same nodes and NIC lies within the calibrated point's interval.
    for (const auto& m : measured.runs) {
      if (m.scenario.nodes != p["nodes"] || m.scenario.nic != p["nic"] || m.scenario.strategy != p["strategy"] ||
          !m.tokens_per_s)
        continue;
      if (m.scenario.nodes == 2) checked_measured = true;
      EXPECT_LE(low, *m.tokens_per_s) << m.name << " " << p.dump();
      EXPECT_GE(high, *m.tokens_per_s) << m.name << " " << p.dump();
    }
  }
  EXPECT_GT(fitted, 0u);
  EXPECT_TRUE(checked_measured) << "no calibrated point matches the measured 2-node run";
  // Hardware without measured runs stays datasheet, labelled.
  for (const auto& p : j["points"])
    if (p["hw"] == "dgx-h100") {
      EXPECT_EQ(p["calibration"].get<std::string>().rfind("uncalibrated", 0), 0u);
    }

  // The leave-one-out table: one row per measured run, each with its prediction.
  const auto& cal = j["calibration"];
  ASSERT_EQ(cal["runs"].size(), measured.runs.size()) << cal.dump();
  for (const auto& x : cal["runs"]) EXPECT_TRUE(x.contains("leave_one_out_time_per_token_s")) << x.dump();
  EXPECT_LE(cal["error_low"].get<double>(), cal["error_high"].get<double>());
  const std::string md = slurp(fs::path(dir) / "report.md");
  const auto table = md.substr(md.find("| run | measured tok/s | leave-one-out tok/s (err)"));
  for (const auto& m : measured.runs) EXPECT_NE(table.find("| " + m.name + " | "), std::string::npos) << m.name;

  // The headline states the calibrated figure of the best point with its interval and datasheet bound.
  const auto& best = j["points"][j["answers"]["best_tokens_per_s_per_usd"].get<std::size_t>()];
  const auto first_section = md.substr(0, md.find("\n## "));
  const auto fig = [](const nlohmann::json* m) { return moesim::text::printf("%.1f", (*m)["value"].get<double>()); };
  EXPECT_NE(first_section.find("Fastest for the money:** " + std::to_string(best["nodes"].get<int>()) + " × " +
                               best["hw"].get<std::string>()),
            std::string::npos);
  EXPECT_NE(first_section.find(fig(metric(best, "tokens_per_second")) + " tokens/s (" +
                               fig(metric(best, "tokens_per_second_low")) + "–" +
                               fig(metric(best, "tokens_per_second_high")) + "; datasheet upper bound " +
                               fig(metric(best, "datasheet_tokens_per_second")) + ")"),
            std::string::npos)
      << first_section;
  EXPECT_NE(first_section.find("applies only to points on it"), std::string::npos) << first_section;
  // sweep.csv carries the same columns, units in their names.
  const std::string csv = slurp(fs::path(dir) / "sweep.csv");
  for (const char* col : {"calibration", "tokens_per_s_low", "tokens_per_s_high", "datasheet_tokens_per_s"})
    EXPECT_NE(csv.substr(0, csv.find('\n')).find(col), std::string::npos) << col;
  // The plot draws error bars on the calibrated curves.
  EXPECT_NE(slurp(fs::path(dir) / "fig8-tokens-vs-nodes.gp").find("yerrorlines"), std::string::npos);
}

}  // namespace moesim::test

// Runs the fitter refuses (two machines in one file): one line says the fit failed, the figures are the
// datasheet's, labelled so, and the report is still written.
TEST(GoldenReportCalibrated, FailedFitFallsBackToDatasheetLabelled) {
  Scratch s("report-cal");
  s.write("mixed.json", R"({"source": "test", "runs": [
    {"name": "a", "scenario": {"model": "dbrx-instruct", "hw": "mac-studio-m2-ultra-192", "nic": "10gbe-grpc",
      "nodes": 2, "strategy": "P-LR-D", "generate": {"tokens": 50}}, "measured": {"tokens_per_s": 6.1}},
    {"name": "b", "scenario": {"model": "dbrx-instruct", "hw": "mac-studio-m2-ultra-192", "nic": "10gbe-grpc",
      "nodes": 3, "strategy": "P-LR-D", "generate": {"tokens": 50}}, "measured": {"tokens_per_s": 6.5}},
    {"name": "c", "scenario": {"model": "dbrx-instruct", "hw": "h100-sxm", "nic": "rocev2-25g",
      "nodes": 4, "strategy": "P-LR-D", "generate": {"tokens": 50}}, "measured": {"tokens_per_s": 20}}]})");
  const std::string dir = s.path("r");
  const auto r = s.moesim("report -q --measured " + s.path("mixed.json") + " --out " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string md = slurp(fs::path(dir) / "report.md");
  const auto first_section = md.substr(0, md.find("\n## "));
  EXPECT_NE(first_section.find("**Not calibrated:** fitting the profiles to the measured runs failed"),
            std::string::npos)
      << first_section;
  EXPECT_NE(first_section.find("(datasheet, uncalibrated)"), std::string::npos) << first_section;
  const auto j = nlohmann::json::parse(slurp(fs::path(dir) / "sweep.json"));
  EXPECT_TRUE(j["calibration"].contains("failed")) << j["calibration"].dump();
}
