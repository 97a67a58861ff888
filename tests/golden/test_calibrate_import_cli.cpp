// `moesim calibrate fit --llama-bench / --vllm-serving` (issue 20): a runtime profile fitted to a runtime's
// own benchmark output, written by --out, and read back by the commands' --runtime.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;

const std::string kImportData = std::string(MOESIM_SOURCE_DIR) + "/tests/data/";
const std::string kInf = kImportData + "vllm/llama-3.1-8b-h100-inf.json";
const std::string kRate = kImportData + "vllm/llama-3.1-8b-h100-rate4.json";

// Two serving results: the profile written holds both host costs, and `serve --runtime PATH` loads it and
// says it used them.
TEST(GoldenCalibrateImport, VllmServingProfileIsReadByServe) {
  const Scratch s("moesim_calibrate_import");
  const moesim::test::Run r =
      s.moesim("calibrate fit --vllm-serving " + kInf + " --vllm-serving " + kRate +
               " --model llama-3.1-8b --hw h100-sxm --runtime vllm --out " + s.path("vllm.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("leave-one-out"), std::string::npos) << r.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(s.path("vllm.json")));
  EXPECT_EQ(p.at("id"), "vllm@h100-sxm");
  ASSERT_TRUE(p.contains("step_overhead") && p.contains("request_overhead")) << p.dump(2);
  const auto& files = p.at("calibration").at("vllm_serving").at("files");
  ASSERT_EQ(files.size(), 2u);
  for (const auto& f : files) EXPECT_TRUE(f.contains("leave_one_out")) << f.dump();

  const moesim::test::Run serve = s.moesim("serve --model llama-3.1-8b --hw h100-sxm --runtime " + s.path("vllm.json") +
                                           " --rate 4/s --prompt 1000 --output 64 --requests 8");
  ASSERT_EQ(serve.code, 0) << serve.err;
  EXPECT_NE(serve.out.find("step_overhead"), std::string::npos) << serve.out;
  EXPECT_NE(serve.out.find("request_overhead"), std::string::npos) << serve.out;
}

// The markdown table and the JSON of the same llama-bench tests fit the same runtime; a serving result on
// the same machine then adds its host costs to that profile (given by path) and keeps the rest.
TEST(GoldenCalibrateImport, LlamaBenchBothFormatsThenServingMerges) {
  const Scratch s("moesim_calibrate_import");
  const std::string common = " --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime llama.cpp-metal";
  const moesim::test::Run md = s.moesim("calibrate fit --llama-bench " + kImportData +
                                        "llama-bench/m2-ultra-llama3-8b.md" + common + " --out " + s.path("md.json"));
  ASSERT_EQ(md.code, 0) << md.err;
  const moesim::test::Run js = s.moesim("calibrate fit --llama-bench " + kImportData +
                                        "llama-bench/m2-ultra-llama3-8b.json" + common + " --out " + s.path("js.json"));
  ASSERT_EQ(js.code, 0) << js.err;
  const auto a = nlohmann::json::parse(slurp(s.path("md.json")));
  const auto b = nlohmann::json::parse(slurp(s.path("js.json")));
  // The table rounds t/s to 0.01: the fits agree to that.
  EXPECT_NEAR(a.at("bandwidth_efficiency").at("value").get<double>(),
              b.at("bandwidth_efficiency").at("value").get<double>(), 1e-3);
  // Two configurations (F16, Q4_K_M) are too few for leave-one-configuration-out errors: the profile says so.
  const auto& lb = a.at("calibration").at("llama_bench");
  ASSERT_EQ(lb.at("rows").size(), 4u);
  for (const auto& row : lb.at("rows")) {
    EXPECT_TRUE(row.contains("fitted")) << row.dump();
    EXPECT_EQ(row.contains("leave_one_out_error"), !lb.contains("leave_one_out")) << row.dump();
  }

  const moesim::test::Run merged = s.moesim("calibrate fit --vllm-serving " + kInf +
                                            " --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime " +
                                            s.path("md.json") + " --out " + s.path("merged.json"));
  ASSERT_EQ(merged.code, 0) << merged.err;
  const auto m = nlohmann::json::parse(slurp(s.path("merged.json")));
  EXPECT_EQ(m.at("bandwidth_efficiency"), a.at("bandwidth_efficiency"));
  EXPECT_EQ(m.at("kernel_overhead"), a.at("kernel_overhead"));
  EXPECT_TRUE(m.contains("step_overhead"));
  const moesim::test::Run est =
      s.moesim("estimate --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime " + s.path("merged.json"));
  EXPECT_EQ(est.code, 0) << est.err;
}

// A result file with a key missing: exit 2, one line naming the file and the key, nothing written.
TEST(GoldenCalibrateImport, BadServingResultIsRefusedAndNothingWritten) {
  const Scratch s("moesim_calibrate_import");
  nlohmann::json doc = nlohmann::json::parse(slurp(kInf));
  doc.erase("mean_tpot_ms");
  s.write("bad.json", doc.dump());
  const moesim::test::Run r = s.moesim("calibrate fit --vllm-serving " + s.path("bad.json") +
                                       " --model llama-3.1-8b --hw h100-sxm --runtime vllm --out " + s.path("p.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mean_tpot_ms"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(s.path("p.json")));
  const moesim::test::Run both = s.moesim("calibrate fit --measured x.json --vllm-serving " + kInf);
  EXPECT_EQ(both.code, 2);
  const moesim::test::Run no_model = s.moesim("calibrate fit --vllm-serving " + kInf + " --hw h100-sxm --runtime vllm");
  EXPECT_EQ(no_model.code, 2);
  EXPECT_NE(no_model.err.find("--model"), std::string::npos) << no_model.err;
}

// benchmark_latency.py output: step_overhead alone is fitted and the profile is read by estimate and serve.
TEST(GoldenCalibrateImport, VllmLatencyProfile) {
  const Scratch s("moesim_calibrate_import");
  const moesim::test::Run r = s.moesim("calibrate fit --vllm-latency " + kImportData +
                                       "vllm/llama-3.1-8b-h100-latency-b8.json --batch-size 8 --input-len 32 "
                                       "--output-len 128 --model llama-3.1-8b --hw h100-sxm --runtime vllm --out " +
                                       s.path("lat.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto p = nlohmann::json::parse(slurp(s.path("lat.json")));
  EXPECT_TRUE(p.contains("step_overhead"));
  EXPECT_FALSE(p.contains("request_overhead"));
  EXPECT_EQ(p.at("calibration").at("vllm_latency").at("files").at(0).at("lengths_from"), "command line");
  const moesim::test::Run serve = s.moesim("serve --model llama-3.1-8b --hw h100-sxm --runtime " + s.path("lat.json") +
                                           " --rate 4/s --prompt 100 --output 16 --requests 4");
  EXPECT_EQ(serve.code, 0) << serve.err;
  const moesim::test::Run both = s.moesim("calibrate fit --vllm-latency " + kImportData +
                                          "vllm/llama-3.1-8b-h100-latency-b8.json --vllm-serving " + kInf +
                                          " --model llama-3.1-8b --hw h100-sxm --runtime vllm");
  EXPECT_EQ(both.code, 2);
}

// Three (model, format) configurations: every decode calibration row gets its leave-one-out error, each
// predicted by the fit to the other configurations (llama-bench's JSON fields; test figures, not measured).
TEST(GoldenCalibrateImport, LlamaBenchRowsCarryTheirLeaveOneOutErrors) {
  const Scratch s("moesim_calibrate_import");
  nlohmann::json tests = nlohmann::json::parse(slurp(kImportData + "llama-bench/m2-ultra-llama3-8b.json"));
  for (const double ts : {58.0, 51.0}) {
    nlohmann::json t = tests.at(0);
    t["model_type"] = "llama 8B Q8_0";
    t["n_depth"] = ts > 55 ? 256 : 2048;
    t["avg_ts"] = ts;
    tests.push_back(t);
  }
  s.write("three.json", tests.dump());
  const moesim::test::Run r = s.moesim("calibrate fit --llama-bench " + s.path("three.json") +
                                       " --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime llama.cpp-metal "
                                       "--json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto p = nlohmann::json::parse(r.out);
  const auto& lb = p.at("calibration").at("llama_bench");
  EXPECT_FALSE(lb.contains("leave_one_out")) << lb.dump();
  std::size_t with = 0;
  for (const auto& row : lb.at("rows"))
    if (row.at("kind") == "decode b1") {
      ASSERT_TRUE(row.contains("leave_one_out_error")) << row.dump();
      EXPECT_TRUE(std::isfinite(row.at("leave_one_out_error").at("value").get<double>()));
      ++with;
    }
  EXPECT_EQ(with, 6u);
  EXPECT_TRUE(p.contains("prediction_interval")) << p.dump(2);
}

}  // namespace

namespace {

const std::string kTrt = kImportData + "trtllm/llama-3.1-8b-fp8-h100-";

double figure_of(const nlohmann::json& file, const char* key) { return file.at(key).at("value").get<double>(); }

// Three trtllm-bench reports (two as printed, one as --report_json writes it) of Llama 3.1 8B FP8 on an H100:
// a new runtime fitted to them predicts each far closer than the datasheet does, each also when held out
// (fitted to the other two), and `estimate --runtime PATH` reads the profile written.
TEST(GoldenCalibrateImport, TrtllmBenchReportsFitAndPredictHeldOut) {
  const Scratch s("moesim_calibrate_import");
  const moesim::test::Run r = s.moesim("calibrate fit --trtllm-bench " + kTrt + "128-2048.txt --trtllm-bench " + kTrt +
                                       "2048-128.txt --trtllm-bench " + kTrt +
                                       "1000-1000.json --model llama-3.1-8b --hw h100-sxm --runtime "
                                       "trt-mine --out " +
                                       s.path("trt.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("3 trtllm-bench throughput reports"), std::string::npos) << r.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(s.path("trt.json")));
  EXPECT_EQ(p.at("id"), "trt-mine@h100-sxm");
  ASSERT_TRUE(p.contains("bandwidth_efficiency") && p.contains("compute_efficiency")) << p.dump(2);
  EXPECT_NE(p.at("bandwidth_efficiency").at("source").get<std::string>().find("--trtllm-bench"), std::string::npos);
  const double b = p.at("bandwidth_efficiency").at("value").get<double>();
  EXPECT_GT(b, 0.1);
  EXPECT_LT(b, 1.0);
  const auto& files = p.at("calibration").at("trtllm_bench").at("files");
  ASSERT_EQ(files.size(), 3u);
  for (const auto& f : files) {
    EXPECT_EQ(f.at("precision"), "fp8");
    EXPECT_EQ(f.at("kv_cache_dtype"), "fp8");
    const double m = figure_of(f, "measured");
    const double before = std::abs(figure_of(f, "before_fit") / m - 1);
    const double after = std::abs(figure_of(f, "after_fit") / m - 1);
    ASSERT_TRUE(f.contains("leave_one_out")) << f.dump();
    const double held_out = std::abs(figure_of(f, "leave_one_out") / m - 1);
    EXPECT_GT(before, 0.3) << f.dump();  // the hardware's datasheet figures: 44-78% fast
    EXPECT_LT(after, 0.1) << f.dump();
    EXPECT_LT(held_out, before / 2) << f.dump();
  }
  // The interval the profile carries is the reports' held-out errors, which `estimate` then shows.
  const auto& interval = p.at("prediction_interval");
  EXPECT_EQ(interval.at("rows"), 3);
  EXPECT_LT(interval.at("low").get<double>(), 0.0);
  EXPECT_GT(interval.at("high").get<double>(), 0.0);
  const moesim::test::Run est =
      s.moesim("estimate --model llama-3.1-8b --hw h100-sxm --runtime " + s.path("trt.json") + " --json");
  ASSERT_EQ(est.code, 0) << est.err;
  const auto ej = nlohmann::json::parse(est.out);
  for (const auto& m : ej.at("rows").at(0).at("metrics"))
    if (m.at("name") == "tokens_per_second") {
      EXPECT_LT(m.at("low").get<double>(), m.at("value").get<double>()) << m.dump();
      EXPECT_GT(m.at("high").get<double>(), m.at("value").get<double>()) << m.dump();
    }
}

// The text a run printed and the --report_json file of the same run are one report.
TEST(GoldenCalibrateImport, TrtllmBenchTextAndJsonAgree) {
  const Scratch s("moesim_calibrate_import");
  const std::string common = " --model llama-3.1-8b --hw h100-sxm --runtime trt-mine --json";
  const auto text = s.moesim("calibrate fit --trtllm-bench " + kTrt + "1000-1000.txt" + common);
  const auto json = s.moesim("calibrate fit --trtllm-bench " + kTrt + "1000-1000.json" + common);
  ASSERT_EQ(text.code, 0) << text.err;
  ASSERT_EQ(json.code, 0) << json.err;
  const auto a = nlohmann::json::parse(text.out).at("calibration").at("trtllm_bench");
  const auto b = nlohmann::json::parse(json.out).at("calibration").at("trtllm_bench");
  EXPECT_NEAR(a.at("bandwidth_efficiency").get<double>(), b.at("bandwidth_efficiency").get<double>(), 1e-6);
  EXPECT_FALSE(a.at("compute_efficiency_fitted").get<bool>());  // one report: the bandwidth efficiency alone
  EXPECT_EQ(a.at("files").at(0).at("requests"), b.at("files").at(0).at("requests"));
}

// An MoE report's EP size is replayed (the experts split over the TP devices, attention tensor-parallel):
// the same run read with EP None (the experts tensor-parallel) comes out at another figure.
TEST(GoldenCalibrateImport, TrtllmBenchReplaysExpertParallelism) {
  const Scratch s("moesim_calibrate_import");
  const std::string file = kImportData + "trtllm/qwen3-30b-a3b-fp4-rtx6000-tp2-ep2-128-2048.txt";
  const std::string common = " --model qwen3-30b-a3b --hw rtx-pro-6000-server-8 --runtime trt-mine --json";
  const auto ep = s.moesim("calibrate fit --trtllm-bench " + file + common);
  ASSERT_EQ(ep.code, 0) << ep.err;
  const auto a = nlohmann::json::parse(ep.out).at("calibration").at("trtllm_bench").at("files").at(0);
  EXPECT_EQ(a.at("moe_ep_replayed"), 2);
  EXPECT_EQ(a.at("precision"), "nvfp4");
  EXPECT_EQ(a.at("kv_cache_dtype"), "fp8");
  std::string report = slurp(file);
  const std::string line = "EP Size:                2";
  const auto at = report.find(line);
  ASSERT_NE(at, std::string::npos);
  s.write("tp.txt", report.replace(at, line.size(), "EP Size:                None"));
  const auto tp = s.moesim("calibrate fit --trtllm-bench " + s.path("tp.txt") + common);
  ASSERT_EQ(tp.code, 0) << tp.err;
  const auto b = nlohmann::json::parse(tp.out).at("calibration").at("trtllm_bench").at("files").at(0);
  EXPECT_EQ(b.at("moe_ep_replayed"), 1);
  EXPECT_GT(std::abs(figure_of(a, "before_fit") / figure_of(b, "before_fit") - 1), 1e-3);
}

// A report that is not one, a number that is not one, and an import mixed with another: exit 2, one line
// naming the file and the fix, nothing written.
TEST(GoldenCalibrateImport, TrtllmBenchBadInputs) {
  const Scratch s("moesim_calibrate_import");
  const std::string common = " --model llama-3.1-8b --hw h100-sxm --runtime trt-mine --out " + s.path("out.json");
  s.write("empty.json", R"({"performance": {}})");
  const auto missing = s.moesim("calibrate fit --trtllm-bench " + s.path("empty.json") + common);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("empty.json: $.world_info is missing"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("--report_json"), std::string::npos) << missing.err;
  // The 128/2048 report with one line's text replaced, run as --trtllm-bench.
  const auto edited = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string report = slurp(kTrt + "128-2048.txt");
    const auto at = report.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.write(name, at == std::string::npos ? report : report.replace(at, from.size(), to));
    return s.moesim("calibrate fit --trtllm-bench " + s.path(name) + common);
  };
  const auto nan = edited("bad.txt", "22714.0000", "n/a");
  EXPECT_EQ(nan.code, 2);
  EXPECT_NE(nan.err.find("Total Output Throughput (tokens/sec): \"n/a\" is not a number"), std::string::npos)
      << nan.err;
  EXPECT_NE(nan.err.find("bad.txt: line "), std::string::npos) << nan.err;
  const auto big = edited("huge.txt", "Max Runtime Batch Size: 2048", "Max Runtime Batch Size: 99999999");
  EXPECT_EQ(big.code, 2);
  EXPECT_NE(big.err.find("max_batch_size: 99999999 sequences is more than moesim replays"), std::string::npos)
      << big.err;
  s.write("prose.txt", "the run went fine\n");
  const auto prose = s.moesim("calibrate fit --trtllm-bench " + s.path("prose.txt") + common);
  EXPECT_EQ(prose.code, 2);
  EXPECT_NE(prose.err.find("no \"TP Size:\" line"), std::string::npos) << prose.err;
  const auto mixed = s.moesim("calibrate fit --trtllm-bench " + kTrt + "128-2048.txt --vllm-serving " + kInf + common);
  EXPECT_EQ(mixed.code, 2);
  EXPECT_NE(mixed.err.find("give it alone"), std::string::npos) << mixed.err;
  EXPECT_FALSE(std::filesystem::exists(s.path("out.json")));
}

}  // namespace
