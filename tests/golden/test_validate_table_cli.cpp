// `moesim validate --table DIR` (issue 20): the public measurement table, predicted by the instrument each
// row needs. A small table in a scratch folder: each prediction must be what the instrument itself says
// for that configuration (a cross-check, not a stored figure), rows it cannot express are counted with
// the reason, and bad tables are refused with the file, the line and the fix.

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;

const char* const kTableHeader =
    "id,role,model,hf_repo,format,hardware,hw_family,devices,runtime,runtime_version,batch,prompt_tokens,"
    "output_tokens,context_depth,metric,value,unit,source_url,locator\n";

const char* const kMapping = R"({
  "hardware": [{"hardware": "M2 Ultra 192GB", "devices": 1, "hw": "mac-studio-m2-ultra-192"}],
  "formats": {"Q8_0": "q8_0", "F16": "fp16", "Q4_K_M": "q4_k_m"},
  "models": {"meta-llama/Meta-Llama-3-8B": "llama-3.1-8b"}
})";

void write_table(const Scratch& s, const std::string& rows, const std::string& mapping = kMapping) {
  s.write("measurements.csv", std::string(kTableHeader) + rows);
  s.write("mapping.json", mapping);
}

double metric_value(const nlohmann::json& row, const char* key) { return row.at(key).at("value").get<double>(); }

// A batch-1 decode row is the analytic model at the generated tokens' mean context with the LM head
// (estimate --context depth + prompt + output/2 --lm-head); a row on hardware without a profile and a
// max-load serving row are not predicted, each with its reason.
TEST(GoldenValidateTable, DecodeRowIsTheEstimateOfItsConfiguration) {
  const Scratch s("moesim_validate_table");
  write_table(s,
              "a,prediction,qwen3-30b-a3b,Qwen/Qwen3-30B-A3B,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,"
              "128,4096,decode_tokens_per_s,50,tokens/s,https://example.org/a,\"row a, tg128 @ d4096\"\n"
              "b,calibration,meta-llama/Meta-Llama-3-8B,,F16,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
              "decode_tokens_per_s,40,tokens/s,https://example.org/b,row b\n"
              "c,prediction,qwen3-30b-a3b,,Q8_0,RTX 9090,nvidia-desktop,1,llama.cpp-cuda,,1,0,128,0,"
              "decode_tokens_per_s,50,tokens/s,https://example.org/c,row c\n"
              "d,prediction,mixtral-8x7b,,Q8_0,M2 Ultra 192GB,apple-m,1,vllm,,,1000,1000,0,"
              "output_throughput_tokens_per_s,900,tokens/s,https://example.org/d,row d\n");
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 4u);

  const moesim::test::Run est = s.moesim(
      "estimate --model qwen3-30b-a3b --hw mac-studio-m2-ultra-192 --precision q8_0 --context 4160 --lm-head --json");
  ASSERT_EQ(est.code, 0) << est.err;
  double want = 0;
  const auto est_json = nlohmann::json::parse(est.out);
  for (const auto& m : est_json.at("rows").at(0).at("metrics"))
    if (m.at("name") == "tokens_per_second") want = m.at("value").get<double>();
  ASSERT_GT(want, 0);
  EXPECT_DOUBLE_EQ(metric_value(rows[0], "predicted"), want);
  EXPECT_DOUBLE_EQ(metric_value(rows[0], "error"), want / 50.0 - 1.0);
  EXPECT_EQ(rows[0].at("instrument"), "analytic");

  EXPECT_EQ(rows[1].at("precision"), "fp16");  // the repo id maps onto the zoo entry of the same shapes
  EXPECT_GT(metric_value(rows[1], "predicted"), 0);
  EXPECT_NE(rows[2].at("not_predicted").get<std::string>().find("no node profile"), std::string::npos);
  EXPECT_NE(rows[3].at("not_predicted").get<std::string>().find("max-load serving"), std::string::npos);

  // Summaries: one per role and kind over all hardware, and per family and runtime.
  bool found = false;
  for (const auto& sum : j.at("summaries"))
    if (sum.at("role") == "prediction" && sum.at("kind") == "decode b1" && sum.at("hw_family") == "all") {
      found = true;
      EXPECT_EQ(sum.at("rows"), 1);
      EXPECT_DOUBLE_EQ(sum.at("median_abs_error").at("value").get<double>(), std::fabs(want / 50.0 - 1.0));
    }
  EXPECT_TRUE(found);

  // The text form prints the same summary, and --csv writes every row (predicted or why not).
  const moesim::test::Run text =
      s.moesim("validate --table " + s.path() + " --quiet --rows --csv " + s.path("rows.csv"));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("median |err|"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 rows: no node profile"), std::string::npos) << text.out;
  const std::string csv = slurp(s.path("rows.csv"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
}

// A row on a node mapping.json gives a measured device for is predicted twice: with the datasheet profile,
// and with the device's figures from the GPU's own microbenchmarks (hwprofiles/measured/), nothing fitted.
// On a one-GPU node the second is the estimate on the measured profile itself.
TEST(GoldenValidateTable, MeasuredDeviceRowIsTheEstimateOnTheMeasuredProfile) {
  const Scratch s("moesim_validate_table");
  write_table(s,
              "h,prediction,mixtral-8x7b,,FP8,H100 80GB HBM3,nvidia-datacenter,1,x,,1,0,128,0,decode_tokens_per_s,"
              "100,tokens/s,https://example.org/h,row h\n",
              R"({"hardware": [{"hardware": "H100 80GB HBM3", "devices": 1, "hw": "h100-sxm"}],
                  "formats": {"FP8": "fp8"},
                  "measured_devices": {"h100-sxm": {"value": "h100-sxm-2026-11-28", "source": "s"}}})");
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& row = j.at("rows").at(0);
  ASSERT_TRUE(row.contains("measured_device")) << row.dump();
  EXPECT_EQ(row.at("measured_device").at("profile"), "h100-sxm-2026-11-28");
  const auto estimate = [&](const std::string& hw) {
    const moesim::test::Run est =
        s.moesim("estimate --model mixtral-8x7b --hw " + hw + " --precision fp8 --context 64 --lm-head --json");
    EXPECT_EQ(est.code, 0) << est.err;
    const auto doc = nlohmann::json::parse(est.out);  // kept: the loop below reads into it
    for (const auto& m : doc.at("rows").at(0).at("metrics"))
      if (m.at("name") == "tokens_per_second") return m.at("value").get<double>();
    return 0.0;
  };
  const double measured = estimate("h100-sxm-2026-11-28"), datasheet = estimate("h100-sxm");
  ASSERT_GT(measured, 0);
  EXPECT_NEAR(row.at("measured_device").at("predicted").at("value").get<double>(), measured, 1e-9 * measured);
  EXPECT_NEAR(metric_value(row, "predicted"), datasheet, 1e-9 * datasheet);
  EXPECT_LT(measured, datasheet);  // the measured GPU is slower than its datasheet roofline
  ASSERT_EQ(j.at("measured_devices").size(), 1u);
  EXPECT_EQ(j.at("measured_devices").at(0).at("measured_device").at("rows"), 1);
  const moesim::test::Run text = s.moesim("validate --table " + s.path() + " --quiet");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("measured devices"), std::string::npos) << text.out;
}

// Batch-1 prefill and batched decode come from the serving simulator: prompt / TTFT, and B / TPOT.
TEST(GoldenValidateTable, PrefillAndBatchedDecodeAreServed) {
  const Scratch s("moesim_validate_table");
  write_table(s,
              "p,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,512,0,0,"
              "prefill_tokens_per_s,1000,tokens/s,https://example.org/p,pp512\n"
              "b,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,8,512,32,0,"
              "decode_tokens_per_s,200,tokens/s,https://example.org/b,B=8\n");
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out).at("rows");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("instrument"), "serving-sim") << row.dump();
    EXPECT_GT(metric_value(row, "predicted"), 0) << row.dump();
  }
  EXPECT_EQ(rows[0].at("kind"), "prefill b1");
  EXPECT_EQ(rows[1].at("kind"), "decode batched");
  // Eight sequences decode faster together than one alone (the weights are read once per step).
  EXPECT_GT(metric_value(rows[1], "predicted"), 100.0);
}

// A prefill row on a profile with no peak FLOP rate for its compute path (the 32-core M4 Max: Apple publishes
// none, and no measurement of it was found) would come out without its compute time, tens of times fast: it
// is not expressed, with the field to add.
// The same machine's decode row needs no peak and is predicted.
TEST(GoldenValidateTable, PrefillNeedsThePeakItsComputeTimeComesFrom) {
  const Scratch s("moesim_validate_table");
  write_table(s,
              "p,calibration,meta-llama/Meta-Llama-3-8B,,F16,M4 Max 32c,apple-m,1,llama.cpp-metal,,1,512,0,0,"
              "prefill_tokens_per_s,700,tokens/s,https://example.org/p,pp512\n"
              "d,calibration,meta-llama/Meta-Llama-3-8B,,F16,M4 Max 32c,apple-m,1,llama.cpp-metal,,1,0,128,0,"
              "decode_tokens_per_s,22,tokens/s,https://example.org/d,tg128\n",
              R"({"hardware": [{"hardware": "M4 Max 32c", "devices": 1, "hw": "mac-studio-m4-max-36"}],
                  "formats": {"F16": "fp16"}, "models": {"meta-llama/Meta-Llama-3-8B": "llama-3.1-8b"}})");
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out).at("rows");
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_TRUE(rows[0].contains("not_predicted")) << rows[0].dump();
  EXPECT_NE(
      rows[0].at("not_predicted").get<std::string>().find("mac-studio-m4-max-36 gives no devices.peak_flops.fp16"),
      std::string::npos)
      << rows[0].dump();
  EXPECT_EQ(rows[1].at("kind"), "decode b1");
  EXPECT_GT(metric_value(rows[1], "predicted"), 0);
}

// A row's step_tokens (the n_ubatch its source printed) is the chunk its prompt is prefilled in: a row
// left empty takes the runtime's default (mapping.json's prompt_chunk, 128 here) and is predicted exactly
// as the row that says 128; the row that says 2048 reads each MoE layer's experts once instead of 16
// times (at 128 tokens a chunk, 8 per expert, they are bound by those reads), so it is predicted faster.
// A chunk size that is not a whole number >= 1 is refused.
TEST(GoldenValidateTable, StepTokensColumnSetsThePrefillChunk) {
  const Scratch s("moesim_validate_table");
  const std::string header =
      "id,role,model,hf_repo,format,hardware,hw_family,devices,runtime,runtime_version,batch,prompt_tokens,"
      "output_tokens,context_depth,step_tokens,metric,value,unit,source_url,locator\n";
  const std::string mapping = R"({
  "hardware": [{"hardware": "M2 Ultra 192GB", "devices": 1, "hw": "mac-studio-m2-ultra-192"}],
  "formats": {"Q8_0": "q8_0"},
  "runtimes": {"llama.cpp-metal": {"prompt_chunk": {"value": 128, "source": "test"}}}
})";
  const auto row = [](const std::string& id, const std::string& step) {
    return id + ",prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,2048,0,0," + step +
           ",prefill_tokens_per_s,1000,tokens/s,https://example.org/p,pp2048\n";
  };
  s.write("measurements.csv", header + row("default", "") + row("ub128", "128") + row("ub2048", "2048"));
  s.write("mapping.json", mapping);
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out).at("rows");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_DOUBLE_EQ(metric_value(rows[0], "predicted"), metric_value(rows[1], "predicted"));
  EXPECT_GT(metric_value(rows[2], "predicted"), metric_value(rows[1], "predicted") * 1.2);

  s.write("measurements.csv", header + row("bad", "0"));
  const moesim::test::Run bad = s.moesim("validate --table " + s.path() + " --quiet");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("line 2, step_tokens: must be >= 1"), std::string::npos) << bad.err;
}

// A row whose `excluded` cell says why (its source shows it is a cold first run, say) is listed as not
// predicted with that reason and counts in no summary; a blank reason is refused.
TEST(GoldenValidateTable, ExcludedRowsAreListedWithTheirReasonAndCountNowhere) {
  const Scratch s("moesim_validate_table");
  const std::string header =
      "id,role,model,hf_repo,format,hardware,hw_family,devices,runtime,runtime_version,batch,prompt_tokens,"
      "output_tokens,context_depth,step_tokens,metric,value,unit,source_url,locator,excluded\n";
  const auto row = [](const std::string& id, double value, const std::string& excluded) {
    return id +
           ",prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,,"
           "decode_tokens_per_s," +
           std::to_string(value) + ",tokens/s,https://example.org/p,tg128," + excluded + "\n";
  };
  const auto prediction_rows = [](const nlohmann::json& j) {
    for (const auto& sum : j.at("summaries"))
      if (sum.at("role") == "prediction" && sum.at("kind") == "decode b1" && sum.at("hw_family") == "all" &&
          sum.at("runtime") == "all" && sum.at("basis") == "datasheet")
        return sum.at("rows").get<int>();
    return -1;
  };
  s.write("mapping.json", kMapping);
  s.write("measurements.csv", header + row("kept", 50, "") + row("cold", 5, ""));
  const moesim::test::Run both = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_EQ(prediction_rows(nlohmann::json::parse(both.out)), 2);

  s.write("measurements.csv",
          header + row("kept", 50, "") + row("cold", 5, "cold first run: the next run did more in less time"));
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(prediction_rows(j), 1);
  const auto& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_GT(metric_value(rows[0], "predicted"), 0);
  EXPECT_FALSE(rows[1].contains("predicted"));
  EXPECT_EQ(rows[1].at("not_predicted").get<std::string>(),
            "excluded by the table (column excluded): cold first run: the next run did more in less time");
  const moesim::test::Run text = s.moesim("validate --table " + s.path());
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("1 rows: excluded by the table (column excluded): cold first run"), std::string::npos)
      << text.out;

  s.write("measurements.csv", header + row("blank", 5, "  "));
  const moesim::test::Run bad = s.moesim("validate --table " + s.path() + " --quiet");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("line 2, excluded: blank"), std::string::npos) << bad.err;
}

TEST(GoldenValidateTable, BadTablesAreRefusedWithFileLineAndFix) {
  const Scratch s("moesim_validate_table");
  struct Case {
    std::string rows, mapping, want;
  };
  const Case cases[] = {
      {"a,prediction,x,,Q8_0,M2 Ultra 192GB,apple-m,1,r,,1,0,1,0,decode_tokens_per_s,-3,tokens/s,https://e,l\n",
       kMapping, "measurements.csv: line 2, value: '-3' is not a number > 0"},
      {"a,guess,x,,Q8_0,M2 Ultra 192GB,apple-m,1,r,,1,0,1,0,decode_tokens_per_s,3,tokens/s,https://e,l\n", kMapping,
       "line 2: role 'guess' is not calibration or prediction"},
      {"a,prediction,x,,Q8_0,M2 Ultra 192GB,apple-m,one,r,,1,0,1,0,decode_tokens_per_s,3,tokens/s,https://e,l\n",
       kMapping, "line 2, devices: 'one' is not a whole number >= 0"},
      {"a,prediction,x,,Q8_0,M2 Ultra,apple-m,1,r,,1,0,1,0,decode_tokens_per_s,3,tokens/s,https://e\n", kMapping,
       "line 2: 18 fields, but the header has 19"},
      {"", R"({"formats": {"Q8_0": "q7"}})", "mapping.json: $.formats.Q8_0: unknown precision 'q7'"},
      {"", R"({"hardware": [{"hardware": "X", "devices": 1, "hw": "no-such-node"}]})",
       "$.hardware[0].hw: unknown hardware (node) profile 'no-such-node'"},
      {"", R"({"runtimes": {"trt": {"scheduler": {"value": {}, "source": "s"}}}})",
       "$.runtimes.trt: gives one of scheduler and max_load_requests"},
      {"", R"({"runtimes": {"trt": {"scheduler": {"value": {"kind": "chunked", "capacity": "evict", "max_num_seqs": 8,
         "max_num_batched_tokens": 64, "gpu_memory_utilization": 0.9}, "source": "s"},
         "max_load_requests": {"value": [{"prompt": 1, "output": 1, "requests": 1}], "source": "s"}}}})",
       "$.runtimes.trt.scheduler.value.capacity: unknown scheduler capacity 'evict'"},
      {"", R"({"runtimes": {"trt": {"scheduler": {"value": {"kind": "chunked", "capacity": "guaranteed-no-evict",
         "max_num_seqs": 8, "max_num_batched_tokens": 64, "gpu_memory_utilization": 0.9}, "source": "s"},
         "max_load_requests": {"value": [{"prompt": 1, "output": 1, "requests": 1},
                                         {"prompt": 1, "output": 1, "requests": 2}], "source": "s"}}}})",
       "prompt 1 / output 1 is listed twice"},
      {"", R"({"measured_devices": {"h100-sxm": {"value": "no-such-gpu", "source": "s"}}})",
       "$.measured_devices.h100-sxm.value: unknown hardware (node) profile 'no-such-gpu'"},
      {"", R"({"measured_devices": {"h100-sxm": {"value": "dgx-h100", "source": "s"}}})",
       "$.measured_devices.h100-sxm.value:"},
      {"", R"({"measured_devices": {"no-such-node": {"value": "h100-sxm-2026-11-28", "source": "s"}}})",
       "$.measured_devices.no-such-node: unknown hardware (node) profile 'no-such-node'"},
      {"", R"({"runtimes": {"trt": {"base_runtime": {"value": "no-such-runtime", "source": "s"}}}})",
       "$.runtimes.trt.base_runtime.value: 'no-such-runtime' is no built-in runtime"},
      {"", R"({"runtimes": {"trt": {"kv_cache_dtype": [{"dtype": "fp8", "source": "s"}]}}})",
       "$.runtimes.trt.kv_cache_dtype[0]: matches every row; name the hf_repo, runtime_version or format"},
      {"", R"({"runtimes": {"trt": {"kv_cache_dtype": [{"format": "FP8", "dtype": "fp7", "source": "s"}]}}})",
       "$.runtimes.trt.kv_cache_dtype[0].dtype:"},
      {"", R"({"runtimes": {"cuda": {"expert_token_tile": {"value": 0, "source": "s"}}}})",
       "$.runtimes.cuda.expert_token_tile.value:"},
      {"", R"({"runtimes": {"cuda": {"expert_token_tile": {"value": 100000, "source": "s"}}}})",
       "$.runtimes.cuda.expert_token_tile.value: is 100000 tokens; a kernel tile is at most 65536"},
      {"", R"({"runtimes": {"cuda": {"expert_token_tile": {"value": 128, "source": ""}}}})",
       "$.runtimes.cuda.expert_token_tile.source: is empty; name the kernel source"},
      {"", R"({"runtimes": {"cuda": {"expert_matvec_tokens": {"value": 0, "source": "s"}}}})",
       "$.runtimes.cuda.expert_matvec_tokens.value:"},
      {"", R"({"runtimes": {"cuda": {"expert_matvec_tokens": {"value": 100000, "source": "s"}}}})",
       "$.runtimes.cuda.expert_matvec_tokens.value: is 100000 tokens; a matrix-vector kernel's batch is at most"},
      {"", R"({"runtimes": {"cuda": {"expert_matvec_predates": {"builds_up_to": 1, "prs_before": 1, "source": "s"}}}})",
       "$.runtimes.cuda: gives expert_matvec_predates without expert_matvec_tokens"},
      {"", R"({"runtimes": {"cuda": {"expert_matvec_tokens": {"value": 8, "source": "s"},
                                 "expert_matvec_predates": {"builds_up_to": 1, "prs_before": 1, "source": ""}}}})",
       "$.runtimes.cuda.expert_matvec_predates.source: is empty; say where the versions come from"},
      {"", R"({"runtimes": {"cuda": {"expert_matvec_tokens": {"value": 8, "source": "s"},
                                 "expert_matvec_predates": {"builds_up_to": 1, "source": "s"}}}})",
       "$.runtimes.cuda.expert_matvec_predates.prs_before:"},
      {"", R"({"runtimes": {"mlx": {"expert_gemm_efficiency": {"value": 3, "source": "s"}}}})",
       "$.runtimes.mlx.expert_gemm_efficiency.value: must be > 0 and at most 2"},
      {"", R"({"runtimes": {"mlx": {"expert_gemm_efficiency": {"value": 0.69, "source": ""}}}})",
       "$.runtimes.mlx.expert_gemm_efficiency.source: is empty; name the microbenchmark"},
      {"", R"({"routing_traces": [{"model": "qwen3-30b-a3b", "trace": "none.mtrace", "source": "s"}]})",
       "$.routing_traces[0].trace: 'none.mtrace' ("},
      {"", R"({"routing_traces": [{"model": "llama-3.1-8b", "trace": "none.mtrace", "source": "s"}]})",
       "$.routing_traces[0].model: 'llama-3.1-8b' is dense: it has no routing to replay"},
      {"", R"({"routing_traces": [{"trace": "none.mtrace", "source": "s"}]})", "$.routing_traces[0].model: is missing"},
      {"", R"({"runtimes": {"trt": {"max_load_batch_limits": {"value": "trtllm-bench", "source": "s"}}}})",
       "$.runtimes.trt.max_load_batch_limits: needs the runtime's scheduler and max_load_requests beside it"},
      {"",
       R"({"runtimes": {"trt": {"scheduler": {"value": {"kind": "chunked"}, "source": "s"},
                                "max_load_requests": {"value": [{"prompt": 1, "output": 1, "requests": 1}], "source": "s"},
                                "max_load_batch_limits": {"value": "vllm", "source": "s"}}}})",
       "$.runtimes.trt.max_load_batch_limits.value: 'vllm' is no batch-limit rule moesim knows"},
  };
  for (const auto& c : cases) {
    write_table(s, c.rows, c.mapping);
    const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --quiet");
    EXPECT_EQ(r.code, 2) << c.want;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// --fit recovers a runtime from its calibration rows: rows whose "measurements" are moesim's own datasheet
// predictions are fitted with the profile's own figures (bandwidth efficiency 1, the KV and attention
// roofline x 1, no kernel overhead on the M2 Ultra profile), every fitted figure equals the datasheet
// one, and the leave-one-out errors are 0. The fit is over the three costs the shared cost model splits a
// decode token into, so this holds only if that split adds up to the estimate. The same for prefill, after
// a context depth and without: its compute efficiency and attention factor split the prefill rows exactly
// (the attention factor 1, the profile's own).
TEST(GoldenValidateTable, FitRecoversTheProfileFromItsOwnPredictions) {
  const Scratch s("moesim_validate_table");
  // First the datasheet predictions of four dense decode rows (two formats, two depths), two dense prefill
  // rows (2048 tokens, empty and after 16k) and an MoE row.
  const char* shapes[][5] = {
      {"a", "F16", "0", "calibration", "0,128"},  {"b", "F16", "8192", "calibration", "0,128"},
      {"c", "Q8_0", "0", "calibration", "0,128"}, {"d", "Q8_0", "4096", "calibration", "0,128"},
      {"p", "F16", "0", "calibration", "2048,0"}, {"q", "F16", "16384", "calibration", "2048,0"}};
  auto table = [&](const std::vector<double>& values, double moe) {
    std::string rows;
    for (std::size_t i = 0; i < 6; ++i)
      rows += std::string(shapes[i][0]) + "," + shapes[i][3] + ",meta-llama/Meta-Llama-3-8B,," + shapes[i][1] +
              ",M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1," + shapes[i][4] + "," + shapes[i][2] +
              (i < 4 ? ",decode_tokens_per_s," : ",prefill_tokens_per_s,") + std::to_string(values[i]) +
              ",tokens/s,https://example.org,l\n";
    rows +=
        "m,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
        "decode_tokens_per_s," +
        std::to_string(moe) + ",tokens/s,https://example.org,l\n";
    write_table(s, rows);
  };
  table({10, 10, 10, 10, 100, 100}, 10);
  const moesim::test::Run first = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(first.code, 0) << first.err;
  const auto j1 = nlohmann::json::parse(first.out);
  std::vector<double> own;
  for (std::size_t i = 0; i < 6; ++i) own.push_back(metric_value(j1.at("rows").at(i), "predicted"));
  table(own, 10);
  const moesim::test::Run fit = s.moesim("validate --table " + s.path() + " --json --quiet --fit");
  ASSERT_EQ(fit.code, 0) << fit.err;
  const auto j = nlohmann::json::parse(fit.out);
  ASSERT_EQ(j.at("fits").size(), 1u);
  const auto& f = j.at("fits").at(0);
  EXPECT_NEAR(f.at("efficiency").at("value").get<double>(), 1.0, 1e-4);
  EXPECT_NEAR(f.at("context_factor").at("value").get<double>(), 1.0, 1e-3);
  EXPECT_NEAR(f.at("kernel_overhead").at("value").get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(f.at("prefill_attention_factor").at("value").get<double>(), 1.0, 1e-3);
  for (const auto& e : f.at("loo_errors")) EXPECT_NEAR(e.get<double>(), 0.0, 1e-4);
  for (const auto& row : j.at("rows")) {
    ASSERT_TRUE(row.contains("fitted")) << row.dump();
    EXPECT_NEAR(metric_value(row, "fitted") / metric_value(row, "predicted"), 1.0, 1e-4) << row.dump();
  }
}

// A class of dense models with different layer counts splits a host time per token from the cost per kernel:
// rows made by `estimate --runtime` from a profile with known figures (0.8 of the bandwidth, 5 us a kernel,
// 2 ms a token) give them back. Two models of one layer count cannot split them: the cost per kernel takes the
// host time, and the fit says so.
TEST(GoldenValidateTable, FitSplitsAHostTimePerTokenWhereKernelCountsDiffer) {
  const Scratch s("moesim_validate_table");
  s.write("rt.json", R"({"id": "synthetic@mac-studio-m2-ultra-192", "kind": "runtime", "name": "synthetic",
    "runtime": "llama.cpp-metal", "hw": "mac-studio-m2-ultra-192",
    "bandwidth_efficiency": {"value": 0.8, "source": "test"}, "attention_factor": {"value": 2.0, "source": "test"},
    "kernel_overhead": {"value": "5us", "source": "test"}, "layer_overhead": {"value": "0us", "source": "test"},
    "step_overhead": {"value": "2ms", "source": "test"}, "super_block_read_factor": {"value": 1.3, "source": "test"}})");
  struct Config {
    const char* id;
    const char* model;
    const char* format;
    const char* precision;
    int depth;
  };
  const Config configs[] = {
      {"a", "llama-3.1-8b", "F16", "fp16", 0},         {"b", "llama-3.1-8b", "F16", "fp16", 8192},
      {"c", "llama-3.1-70b", "Q4_K_M", "q4_k_m", 0},   {"d", "qwen2.5-coder-7b", "Q8_0", "q8_0", 0},
      {"e", "qwen2.5-coder-7b", "Q8_0", "q8_0", 4096}, {"f", "llama-2-7b", "Q4_0", "q4_0", 0},
      {"g", "llama-3.1-8b", "Q4_K_M", "q4_k_m", 0},    {"h", "llama-3.1-8b", "Q4_K_M", "q4_k_m", 8192}};
  std::map<std::string, std::string> rows;
  for (const Config& c : configs) {
    // validate prices tg128 at depth d at the generated tokens' mean context, d + 64, with the LM head.
    const moesim::test::Run est = s.moesim(
        std::string("estimate --model ") + c.model + " --hw mac-studio-m2-ultra-192 --runtime " + s.path("rt.json") +
        " --precision " + c.precision + " --context " + std::to_string(c.depth + 64) + " --json");
    ASSERT_EQ(est.code, 0) << est.err;
    double tps = 0;
    const auto doc = nlohmann::json::parse(est.out);
    for (const auto& m : doc.at("rows").at(0).at("metrics"))
      if (m.at("name") == "tokens_per_second") tps = m.at("value").get<double>();
    ASSERT_GT(tps, 0) << c.id;
    rows[c.id] = std::string(c.id) + ",calibration," + c.model + ",," + c.format +
                 ",M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128," + std::to_string(c.depth) +
                 ",decode_tokens_per_s," + std::to_string(tps) + ",tokens/s,https://example.org,l\n";
  }
  const std::string mapping = R"({
    "hardware": [{"hardware": "M2 Ultra 192GB", "devices": 1, "hw": "mac-studio-m2-ultra-192"}],
    "formats": {"Q8_0": "q8_0", "F16": "fp16", "Q4_K_M": "q4_k_m", "Q4_0": "q4_0"}, "models": {}})";
  auto fit_of = [&](const std::vector<std::string>& ids) {
    std::string table;
    for (const auto& id : ids) table += rows.at(id);
    write_table(s, table, mapping);
    const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet --fit");
    EXPECT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("fits").size(), 1u);
    return j.at("fits").at(0);
  };
  // 32, 80 and 28 layers: the host time is split off. Three configurations in other formats (F16, Q8_0,
  // Q4_0) and one in a K-quant (Q4_K_M): its reads' factor is split off too.
  const auto split = fit_of({"a", "b", "c", "d", "e", "f"});
  EXPECT_NEAR(metric_value(split, "efficiency"), 0.8, 1e-3) << split.dump();
  EXPECT_NEAR(metric_value(split, "super_block_read_factor"), 1.3, 1e-3) << split.dump();
  EXPECT_NEAR(metric_value(split, "kernel_overhead"), 5e-6, 2e-8) << split.dump();
  EXPECT_NEAR(metric_value(split, "step_overhead"), 2e-3, 4e-6) << split.dump();
  EXPECT_NEAR(metric_value(split, "context_factor"), 2.0, 1e-2) << split.dump();
  // Three configurations of 32 layers (Llama 3 8B in two formats, Llama 2 7B): one column, the kernels', which
  // take the host time too.
  const auto one = fit_of({"a", "b", "f", "g"});
  EXPECT_EQ(metric_value(one, "step_overhead"), 0.0) << one.dump();
  EXPECT_GT(metric_value(one, "kernel_overhead"), 5e-6) << one.dump();
  EXPECT_NE(one.at("note").get<std::string>().find("differ by less than 1.25x: no host time per token"),
            std::string::npos)
      << one.dump();
  // Llama 3 8B F16 is the one configuration measured after a depth: held out, the others' rows would say
  // nothing of the context, so it is not; the 70B and the 7B each are (one held-out error apiece).
  const auto held = fit_of({"a", "b", "c", "d"});
  EXPECT_EQ(held.at("loo_errors").size(), 2u) << held.dump();
  // One configuration in a format other than a K-quant (Llama 2 7B Q4_0) beside the K-quant ones: the
  // efficiency, the cost per kernel and the read factor would trade against each other, so one efficiency
  // prices every format (the factor stays 1, and the fit says so in no column).
  const auto one_other = fit_of({"c", "f", "g"});
  EXPECT_EQ(metric_value(one_other, "super_block_read_factor"), 1.0) << one_other.dump();
  // No K-quant configuration: likewise.
  const auto none = fit_of({"a", "b", "d", "e", "f"});
  EXPECT_EQ(metric_value(none, "super_block_read_factor"), 1.0) << none.dump();
  // One model after one depth in two formats (as mlx-lm's BENCHMARKS.md measures seven): the context's share
  // of the time differs with the weights' bytes, but its time and the kernels' are the same pair of numbers in
  // both rows, so no split of them is better than another. The KV cache's factor is not fitted but kept at 1
  // (the solver had put it at 0 for such rows, pricing the context as free at any depth).
  const auto one_depth = fit_of({"b", "h"});
  EXPECT_EQ(metric_value(one_depth, "context_factor"), 1.0) << one_depth.dump();
  EXPECT_GT(metric_value(one_depth, "kernel_overhead"), 0.0) << one_depth.dump();
}

// A runtime fitted on several machines transfers to any other with GPUs of their maker: each figure the median over the
// machines whose rows split the cost per kernel from the bandwidth (two configurations or more), each fitted machine's
// rows priced with its own fit left out. Rows made by `estimate --runtime` from profiles of known figures on three
// GeForce cards (0.7, 0.8 and 0.9 of the bandwidth; 4, 5 and 6 us a kernel) and one configuration on a
// fourth: the transferred profile is 0.8 and 5 us, not the fourth's (its one configuration splits nothing);
// the RTX 4090's MoE row is the estimate with the other two's medians (0.75, 4.5 us), the RTX 3080's with
// all three's.
TEST(GoldenValidateTable, TransferredRuntimeIsTheMediansWithEachMachineLeftOut) {
  const Scratch s("moesim_validate_table");
  const auto profile = [&](const std::string& hw, double eta, double kernel_us) {
    std::string path = s.path("rt-" + hw + ".json");
    s.write("rt-" + hw + ".json", R"({"id": "t@)" + hw + R"(", "kind": "runtime", "runtime": "llama.cpp-cuda",
      "hw": ")" + hw + R"(", "bandwidth_efficiency": {"value": )" +
                                      std::to_string(eta) +
                                      R"(, "source": "test"}, "attention_factor": {"value": 1, "source": "test"},
      "kernel_overhead": {"value": ")" +
                                      std::to_string(kernel_us) + R"(us", "source": "test"},
      "layer_overhead": {"value": "0us", "source": "test"}})");
    return path;
  };
  const auto tokens_per_s = [&](const std::string& model, const std::string& hw, const std::string& runtime,
                                const char* precision, int depth) {
    const moesim::test::Run est =
        s.moesim("estimate --model " + model + " --hw " + hw + " --runtime " + runtime + " --precision " + precision +
                 " --context " + std::to_string(depth + 64) + " --json");
    EXPECT_EQ(est.code, 0) << est.err;
    const auto doc = nlohmann::json::parse(est.out);
    for (const auto& m : doc.at("rows").at(0).at("metrics"))
      if (m.at("name") == "tokens_per_second") return m.at("value").get<double>();
    ADD_FAILURE() << est.out;
    return 0.0;
  };
  struct Card {
    const char* hw;
    const char* name;
    double eta, kernel_us;
    bool two_configurations;
  };
  const Card cards[] = {{"rtx-3090", "RTX 3090", 0.7, 4, true},
                        {"rtx-4080", "RTX 4080", 0.8, 5, true},
                        {"rtx-4090", "RTX 4090", 0.9, 6, true},
                        {"rtx-3080", "RTX 3080", 0.6, 9, false}};
  std::string rows, hardware;
  int n = 0;
  const auto row = [&](const Card& c, const char* role, const char* model, const char* format, double value,
                       int depth) {
    rows += "r" + std::to_string(n++) + "," + role + "," + model + ",," + format + "," + c.name +
            ",nvidia-desktop,1,llama.cpp-cuda,,1,0,128," + std::to_string(depth) + ",decode_tokens_per_s," +
            std::to_string(value) + ",tokens/s,https://example.org,l\n";
  };
  for (const Card& c : cards) {
    const std::string rt = profile(c.hw, c.eta, c.kernel_us);
    hardware += std::string(hardware.empty() ? "" : ", ") + R"({"hardware": ")" + c.name +
                R"(", "devices": 1, "hw": ")" + c.hw + R"("})";
    row(c, "calibration", "llama-3.1-8b", "F16", tokens_per_s("llama-3.1-8b", c.hw, rt, "fp16", 0), 0);
    row(c, "calibration", "llama-3.1-8b", "F16", tokens_per_s("llama-3.1-8b", c.hw, rt, "fp16", 4096), 4096);
    if (c.two_configurations)
      row(c, "calibration", "llama-3.1-8b", "Q8_0", tokens_per_s("llama-3.1-8b", c.hw, rt, "q8_0", 0), 0);
    row(c, "prediction", "qwen3-30b-a3b", "Q8_0", 100, 0);
  }
  write_table(s, rows,
              R"({"hardware": [)" + hardware + R"(], "formats": {"Q8_0": "q8_0", "F16": "fp16"}, "models": {}})");
  const moesim::test::Run r =
      s.moesim("validate --table " + s.path() + " --json --quiet --fit --write-runtimes " + s.path("runtimes"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("transfers").size(), 1u) << r.out;
  const auto& t = j.at("transfers").at(0);
  EXPECT_EQ(t.at("profile").at("id"), "llama.cpp-cuda@any-nvidia");
  EXPECT_EQ(t.at("profile").at("gpu_vendor"), "nvidia");
  EXPECT_EQ(t.at("profile").at("transferred_from"),
            (nlohmann::json{"rtx-3090", "rtx-4080", "rtx-4090"}));  // not the one-configuration RTX 3080
  EXPECT_NEAR(t.at("profile").at("bandwidth_efficiency").at("value").get<double>(), 0.8, 2e-3);
  EXPECT_EQ(t.at("decode_errors").size(), 11u);  // every fitted machine's dense rows, the RTX 3080's too
  // Its check on the MoE rows it priced, each with its own machine left out (the four "measured" at 100).
  ASSERT_EQ(t.at("profile").at("prediction_check").size(), 1u) << t.dump();  // decode rows only in this table
  EXPECT_EQ(t.at("profile").at("prediction_check").at(0).at("kind"), "decode b1") << t.dump();
  EXPECT_EQ(t.at("profile").at("prediction_check").at(0).at("rows"), 4) << t.dump();
  EXPECT_TRUE(fs::exists(fs::path(s.path("runtimes")) / "llama.cpp-cuda@any-nvidia.json"));
  // The one-configuration RTX 3080 cannot split a cost per kernel from its bandwidth: it takes the median of
  // the three fits that can (4, 5 and 6 us, not its own 9) and fits its efficiency with that held; the
  // others keep their own.
  std::map<std::string, double> kernel_s;
  for (const auto& f : j.at("fits")) kernel_s[f.at("hw").get<std::string>()] = f.at("kernel_overhead").at("value");
  EXPECT_NEAR(kernel_s.at("rtx-3080"), 5e-6, 1e-8);
  EXPECT_NEAR(kernel_s.at("rtx-4090"), 6e-6, 1e-8);
  const auto written = nlohmann::json::parse(slurp(s.path("runtimes") + "/llama.cpp-cuda@rtx-3080.json"));
  const std::string borrowed = written.at("kernel_overhead").at("source");
  EXPECT_NE(borrowed.find("one configuration"), std::string::npos) << borrowed;
  EXPECT_NE(borrowed.find("the median over llama.cpp-cuda's fits on rtx-3090, rtx-4080, rtx-4090"), std::string::npos)
      << borrowed;
  // Each machine's MoE row: the estimate with the medians of the other machines' figures.
  const std::map<std::string, std::pair<double, double>> medians = {
      {"rtx-3090", {0.85, 5.5}}, {"rtx-4080", {0.8, 5}}, {"rtx-4090", {0.75, 4.5}}, {"rtx-3080", {0.8, 5}}};
  std::size_t priced = 0;
  for (const auto& row_json : j.at("rows")) {
    if (row_json.at("role") != "prediction") continue;
    const std::string hw = row_json.at("hw").get<std::string>();
    const auto [eta, kernel_us] = medians.at(hw);
    const double want = tokens_per_s("qwen3-30b-a3b", hw, profile(hw, eta, kernel_us), "q8_0", 0);
    ASSERT_TRUE(row_json.contains("transferred")) << row_json.dump();
    EXPECT_NEAR(metric_value(row_json, "transferred") / want, 1.0, 2e-3) << hw;
    ASSERT_TRUE(row_json.contains("transferred_interval")) << row_json.dump();
    ++priced;
  }
  EXPECT_EQ(priced, 4u);
}

// --threads only spreads the work: rows and classes are each computed alone, so one thread and three give
// the same output, byte for byte (decode, prefill and a fit over them). 0 threads is refused.
TEST(GoldenValidateTable, ThreadCountDoesNotChangeTheResult) {
  const Scratch s("moesim_validate_table");
  std::string rows;
  const char* decode[][3] = {{"a", "F16", "0"}, {"b", "F16", "8192"}, {"c", "Q8_0", "0"}, {"d", "Q4_K_M", "512"}};
  for (const auto& d : decode)
    rows += std::string(d[0]) + ",calibration,meta-llama/Meta-Llama-3-8B,," + d[1] +
            ",M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128," + d[2] +
            ",decode_tokens_per_s,40,tokens/s,https://example.org,l\n";
  rows +=
      "p,calibration,meta-llama/Meta-Llama-3-8B,,F16,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,512,0,0,"
      "prefill_tokens_per_s,900,tokens/s,https://example.org,l\n"
      "q,calibration,meta-llama/Meta-Llama-3-8B,,F16,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,512,0,8192,"
      "prefill_tokens_per_s,500,tokens/s,https://example.org,l\n"
      "m,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
      "decode_tokens_per_s,70,tokens/s,https://example.org,l\n"
      "n,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,512,0,0,"
      "prefill_tokens_per_s,1500,tokens/s,https://example.org,l\n";
  write_table(s, rows);
  const std::string cmd = "validate --table " + s.path() + " --json --quiet --fit --threads ";
  const moesim::test::Run one = s.moesim(cmd + "1");
  const moesim::test::Run three = s.moesim(cmd + "3");
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(nlohmann::json::parse(one.out).at("fits").size(), 1u);
  const moesim::test::Run none = s.moesim(cmd + "0");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("--threads 0"), std::string::npos) << none.err;
}

// Llama 3 8B in three formats at several depths on the M2 Ultra (llama.cpp-metal), and one MoE row (id m):
// enough configurations for the class's cost per kernel and an interval of its own. Fitted, its runtime
// written to rt/.
moesim::test::Run fit_m2_ultra_table(const Scratch& s) {
  write_table(s,
              "a,calibration,meta-llama/Meta-Llama-3-8B,,F16,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
              "decode_tokens_per_s,36.9,tokens/s,https://example.org,l\n"
              "b,calibration,meta-llama/Meta-Llama-3-8B,,F16,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,8192,0,"
              "decode_tokens_per_s,30.7,tokens/s,https://example.org,l\n"
              "c,calibration,meta-llama/Meta-Llama-3-8B,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
              "decode_tokens_per_s,62.0,tokens/s,https://example.org,l\n"
              "d,calibration,meta-llama/Meta-Llama-3-8B,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,4096,0,"
              "decode_tokens_per_s,55.0,tokens/s,https://example.org,l\n"
              "m,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
              "decode_tokens_per_s,76.3,tokens/s,https://example.org,l\n"
              "e,calibration,meta-llama/Meta-Llama-3-8B,,Q4_K_M,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,512,0,"
              "decode_tokens_per_s,78.8,tokens/s,https://example.org,l\n");
  return s.moesim("validate --table " + s.path() + " --json --quiet --fit --write-runtimes " + s.path("rt"));
}

// The fit becomes a runtime profile (--write-runtimes) that `estimate --runtime` applies: the estimate of
// the held-out MoE row through it is validate's fitted figure, with the same interval.
TEST(GoldenValidateTable, WrittenRuntimeGivesEstimateTheFittedFigure) {
  const Scratch s("moesim_validate_table");
  const moesim::test::Run fit = fit_m2_ultra_table(s);
  ASSERT_EQ(fit.code, 0) << fit.err;
  const auto j = nlohmann::json::parse(fit.out);
  const auto& moe = j.at("rows").at(4);
  const double fitted = metric_value(moe, "fitted");
  const std::string profile = s.path("rt") + "/llama.cpp-metal@mac-studio-m2-ultra-192.json";
  ASSERT_TRUE(fs::exists(profile));
  const moesim::test::Run est = s.moesim(
      "estimate --model qwen3-30b-a3b --hw mac-studio-m2-ultra-192 --precision "
      "q8_0 --context 64 --lm-head --json --runtime " +
      profile);
  ASSERT_EQ(est.code, 0) << est.err;
  const auto e = nlohmann::json::parse(est.out);
  for (const auto& m : e.at("rows").at(0).at("metrics"))
    if (m.at("name") == "tokens_per_second") {
      EXPECT_NEAR(m.at("value").get<double>() / fitted, 1.0, 1e-8);
      EXPECT_NEAR(m.at("low").get<double>(), moe.at("interval").at("low").get<double>(), 1e-8 * fitted);
      EXPECT_NEAR(m.at("high").get<double>(), moe.at("interval").at("high").get<double>(), 1e-8 * fitted);
    }
  // A runtime fitted on one machine is not applied to another.
  const moesim::test::Run other = s.moesim("estimate --model qwen3-30b-a3b --hw h100-sxm --runtime " + profile);
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("is for mac-studio-m2-ultra-192, not for h100-sxm"), std::string::npos) << other.err;
  const moesim::test::Run none = s.moesim("estimate --model qwen3-30b-a3b --hw h100-sxm --runtime vllm");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no runtime profile 'vllm' on h100-sxm"), std::string::npos) << none.err;
  // A machine with no fit of the runtime takes the one transferred from the machines that have one (the
  // medians of their figures, hwprofiles/runtimes/llama.cpp-cuda@any-nvidia.json), interval included; the
  // Metal transfer is not taken on NVIDIA GPUs.
  const moesim::test::Run moved =
      s.moesim("estimate --model gpt-oss-20b --hw rtx-5090 --runtime llama.cpp-cuda --json");
  ASSERT_EQ(moved.code, 0) << moved.err;
  const auto mj = nlohmann::json::parse(moved.out);
  bool ranged = false;
  for (const auto& m : mj.at("rows").at(0).at("metrics"))
    if (m.at("name") == "tokens_per_second") {
      ranged = m.contains("low") && m.at("low").get<double>() < m.at("value").get<double>() &&
               m.at("high").get<double>() > m.at("value").get<double>();
    }
  EXPECT_TRUE(ranged) << moved.out;
  const moesim::test::Run text = s.moesim("estimate --model gpt-oss-20b --hw rtx-5090 --runtime llama.cpp-cuda");
  EXPECT_NE(text.out.find("llama.cpp-cuda@any-nvidia, transferred: the medians of its fits on 3 other nvidia"),
            std::string::npos)
      << text.out;
  // Beside the interval, how the profile did on the MoE rows it was checked on.
  EXPECT_NE(text.out.find("MoE batch-1 decode rows of validation/measurements.csv it was checked on, its figures"),
            std::string::npos)
      << text.out;
  const moesim::test::Run metal = s.moesim("estimate --model gpt-oss-20b --hw rtx-5090 --runtime llama.cpp-metal");
  EXPECT_EQ(metal.code, 2);
  EXPECT_NE(metal.err.find("llama.cpp-metal@any-apple carries only to apple GPUs"), std::string::npos) << metal.err;
}

// --explain splits one row's fitted figure by the row's own instrument: its parts and the rest add up to
// the time per token of the fitted figure, and the kernels' and host's parts of a batch-1 decode row are
// the analytic model's own overhead for that configuration (`estimate --runtime` with the written profile
// prints it), a cross-check of two code paths. A row the table lacks, or asked without --fit, is refused.
TEST(GoldenValidateTable, ExplainSplitsAFittedFigureIntoItsCosts) {
  const Scratch s("moesim_validate_table");
  const moesim::test::Run fit = fit_m2_ultra_table(s);
  ASSERT_EQ(fit.code, 0) << fit.err;
  const double fitted = metric_value(nlohmann::json::parse(fit.out).at("rows").at(4), "fitted");
  const moesim::test::Run ex = s.moesim("validate --table " + s.path() + " --json --quiet --fit --explain m");
  ASSERT_EQ(ex.code, 0) << ex.err;
  const auto e = nlohmann::json::parse(ex.out).at("explanation");
  EXPECT_EQ(e.at("id"), "m");
  const double seconds = metric_value(e, "time_per_token");
  EXPECT_NEAR(seconds * fitted, 1.0, 1e-9);
  double sum = 0, host = 0, memory = 0;
  std::set<std::string> names;
  for (const auto& part : e.at("parts")) {
    const double t = metric_value(part, "time");
    const std::string name = part.at("name");
    names.insert(name);
    sum += t;
    if (name.starts_with("kernel launches") || name.starts_with("host time")) host += t;
    if (name.starts_with("memory-bound")) memory = t;
  }
  EXPECT_EQ(names.size(), 8u) << ex.out;
  EXPECT_NEAR(sum, seconds, 1e-12);
  EXPECT_GT(memory, 0.3 * seconds) << ex.out;  // a batch-1 decode reads its weights for most of its time
  const moesim::test::Run est = s.moesim(
      "estimate --model qwen3-30b-a3b --hw mac-studio-m2-ultra-192 --precision q8_0 --context 64 --lm-head --json "
      "--runtime " +
      s.path("rt") + "/llama.cpp-metal@mac-studio-m2-ultra-192.json");
  ASSERT_EQ(est.code, 0) << est.err;
  double overhead = -1;
  const auto ej = nlohmann::json::parse(est.out);
  for (const auto& m : ej.at("rows").at(0).at("metrics"))
    if (m.at("name") == "layer_overhead") overhead = m.at("value").get<double>();
  ASSERT_GT(overhead, 0) << est.out;
  EXPECT_NEAR(host / overhead, 1.0, 1e-6) << ex.out;
  // The floor of a batch-1 decode row: the analytic model's bytes per token at the datasheet bandwidth, and
  // no more than the fitted figure's time; --floors prices the same floor for every row of the table.
  double bytes = 0;
  for (const auto& m : ej.at("rows").at(0).at("metrics"))
    if (m.at("name") == "bytes_per_token") bytes = m.at("value").get<double>();
  ASSERT_GT(bytes, 0) << est.out;
  const auto& floor = e.at("floor");
  const double floor_seconds = metric_value(floor, "time_per_token");
  EXPECT_NEAR(floor_seconds * metric_value(floor, "datasheet_bandwidth") / bytes, 1.0, 1e-6) << ex.out;
  EXPECT_LT(floor_seconds, seconds) << ex.out;
  const moesim::test::Run floors = s.moesim("validate --table " + s.path() + " --json --quiet --floors");
  ASSERT_EQ(floors.code, 0) << floors.err;
  const auto fj = nlohmann::json::parse(floors.out);
  const auto& m_row = fj.at("rows").at(4);
  ASSERT_EQ(m_row.at("id"), "m");
  EXPECT_NEAR(metric_value(m_row, "floor") * floor_seconds, 1.0, 1e-9) << floors.out;
  std::int64_t counted = 0;
  for (const auto& c : fj.at("floors")) counted += c.at("rows").get<std::int64_t>();
  std::int64_t priced = 0;
  for (const auto& row : fj.at("rows")) priced += row.contains("floor") ? 1 : 0;
  EXPECT_EQ(counted, priced) << floors.out;
  const moesim::test::Run text = s.moesim("validate --table " + s.path() + " --quiet --fit --explain m");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("per generated token"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("rest: collectives"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("floor      "), std::string::npos) << text.out;
  const moesim::test::Run missing = s.moesim("validate --table " + s.path() + " --quiet --fit --explain zz");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--explain zz: "), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("has no row with that id"), std::string::npos) << missing.err;
  const moesim::test::Run unfitted = s.moesim("validate --table " + s.path() + " --quiet --explain m");
  EXPECT_EQ(unfitted.code, 2);
  EXPECT_NE(unfitted.err.find("give --table DIR and --fit too"), std::string::npos) << unfitted.err;
}

// Max-load output throughput (trtllm-bench throughput: a fixed-ISL/OSL dataset queued at once) is the
// serving simulator under the runtime's scheduler from mapping.json. Dense rows "measured" at 0.7 of the
// datasheet figure are fitted (bandwidth and compute efficiency), the fit moves every dense row's error
// toward 0, the MoE row is priced by the fitted runtime with an interval from the dense rows' held-out
// errors, and the fit is written as a runtime profile.
TEST(GoldenValidateTable, MaxLoadRowsAreServedAndFitted) {
  const Scratch s("moesim_validate_table");
  const std::string mapping = R"({
    "hardware": [{"hardware": "H100", "devices": 1, "hw": "h100-sxm"}],
    "formats": {"FP8": "fp8", "BF16": "bf16"},
    "runtimes": {"trt": {
      "scheduler": {"value": {"kind": "chunked", "capacity": "guaranteed-no-evict", "max_num_seqs": 256,
                              "max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.9}, "source": "test"},
      "max_load_requests": {"value": [{"prompt": 128, "output": 128, "requests": 300},
                                      {"prompt": 1000, "output": 200, "requests": 200},
                                      {"prompt": 2048, "output": 64, "requests": 200}], "source": "test"}}}
  })";
  const char* shapes[][4] = {{"a", "llama-3.1-8b", "FP8", "128,128"},
                             {"b", "llama-3.1-8b", "FP8", "1000,200"},
                             {"c", "llama-3.1-8b", "BF16", "2048,64"},
                             {"d", "llama-3.1-8b", "BF16", "128,128"}};
  auto table = [&](const std::vector<double>& values) {
    std::string rows;
    for (std::size_t i = 0; i < 4; ++i)
      rows += std::string(shapes[i][0]) + ",calibration," + shapes[i][1] + ",," + shapes[i][2] +
              ",H100,nvidia-datacenter,1,trt,,," + shapes[i][3] + ",0,output_throughput_tokens_per_s," +
              std::to_string(values[i]) + ",tokens/s,https://example.org,TP1\n";
    rows +=
        "m,prediction,qwen3-30b-a3b,,FP8,H100,nvidia-datacenter,1,trt,,,128,128,0,"
        "output_throughput_tokens_per_s,5000,tokens/s,https://example.org,TP1\n"
        "x,prediction,qwen3-30b-a3b,,FP8,H100,nvidia-datacenter,1,trt,,,64,64,0,"
        "output_throughput_tokens_per_s,5000,tokens/s,https://example.org,TP1\n";
    write_table(s, rows, mapping);
  };
  table({1000, 1000, 1000, 1000});
  const moesim::test::Run first = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(first.code, 0) << first.err;
  const auto j1 = nlohmann::json::parse(first.out);
  std::vector<double> slower;
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& row = j1.at("rows").at(i);
    EXPECT_EQ(row.at("kind"), "max-load") << row.dump();
    EXPECT_EQ(row.at("instrument"), "serving-sim") << row.dump();
    slower.push_back(0.7 * metric_value(row, "predicted"));
  }
  // A longer prompt per output token costs more time per output token.
  EXPECT_GT(metric_value(j1.at("rows").at(0), "predicted"), metric_value(j1.at("rows").at(1), "predicted"));
  EXPECT_NE(j1.at("rows").at(5).at("not_predicted").get<std::string>().find("max_load_requests"), std::string::npos);

  table(slower);
  const moesim::test::Run fit =
      s.moesim("validate --table " + s.path() + " --json --quiet --fit --write-runtimes " + s.path("rt"));
  ASSERT_EQ(fit.code, 0) << fit.err;
  const auto j = nlohmann::json::parse(fit.out);
  ASSERT_EQ(j.at("fits").size(), 1u);
  const auto& f = j.at("fits").at(0);
  EXPECT_EQ(f.at("max_load_rows"), 4);
  EXPECT_EQ(f.at("max_load_loo_errors").size(), 4u);  // two configurations, each held out
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& row = j.at("rows").at(i);
    EXPECT_NEAR(metric_value(row, "error"), 1.0 / 0.7 - 1.0, 1e-6) << row.dump();
    EXPECT_LT(std::fabs(metric_value(row, "fitted_error")), 0.5 * std::fabs(metric_value(row, "error"))) << row.dump();
  }
  const auto& moe = j.at("rows").at(4);
  ASSERT_TRUE(moe.contains("fitted")) << moe.dump();
  EXPECT_LT(metric_value(moe, "fitted"), metric_value(moe, "predicted"));  // the runtime is slower than the datasheet
  ASSERT_TRUE(moe.contains("interval")) << moe.dump();
  EXPECT_LE(moe.at("interval").at("low").get<double>(), metric_value(moe, "fitted"));
  EXPECT_GE(moe.at("interval").at("high").get<double>(), metric_value(moe, "fitted"));
  const auto profile = nlohmann::json::parse(slurp(s.path("rt") + "/trt@h100-sxm.json"));
  // The runtime's two host times, per engine step and per sequence of a step, are fitted with it.
  for (const char* key : {"step_overhead", "sequence_overhead"}) {
    ASSERT_TRUE(profile.contains(key)) << key << ": " << profile.dump();
    EXPECT_NE(profile.at(key).at("source").get<std::string>().find("fitted by"), std::string::npos) << key;
    EXPECT_GE(metric_value(f, key), 0.0) << key;
  }
  EXPECT_LT(profile.at("bandwidth_efficiency").at("value").get<double>() *
                profile.at("compute_efficiency").at("value").get<double>(),
            1.0);
}

// mapping.json's runtimes.<runtime>.kv_cache_dtype: the first rule whose fields (checkpoint, runtime
// version, format) all equal the row's sets the KV cache's element type of its run. Two rows alike but for
// their checkpoint: the one an fp8 rule matches holds twice the tokens in the same cache and reads half
// the bytes per token, so with long outputs it serves more (the other keeps the model's 16-bit cache).
TEST(GoldenValidateTable, KvCacheRulesSetTheRunsCacheType) {
  const Scratch s("moesim_validate_table");
  const std::string mapping = R"({
    "hardware": [{"hardware": "H100", "devices": 1, "hw": "h100-sxm"}],
    "formats": {"FP8": "fp8"},
    "runtimes": {"trt": {
      "scheduler": {"value": {"kind": "chunked", "capacity": "guaranteed-no-evict", "max_num_seqs": 2048,
                              "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9}, "source": "test"},
      "max_load_requests": {"value": [{"prompt": 128, "output": 2048, "requests": 3000}], "source": "test"},
      "kv_cache_dtype": [{"hf_repo": "org/fp8-kv", "runtime_version": "1.0", "dtype": "fp8", "source": "test"}]}}
  })";
  std::string rows;
  for (const char* repo : {"org/fp8-kv", "org/other"})
    rows += std::string("r-") + repo + ",calibration,llama-3.1-8b," + repo +
            ",FP8,H100,nvidia-datacenter,1,trt,1.0,,128,2048,0,output_throughput_tokens_per_s,1000,tokens/s,"
            "https://example.org,TP1\n";
  write_table(s, rows, mapping);
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& fp8 = j.at("rows").at(0);
  const auto& other = j.at("rows").at(1);
  EXPECT_EQ(fp8.value("kv_cache_dtype", ""), "fp8") << fp8.dump();
  EXPECT_FALSE(other.contains("kv_cache_dtype")) << other.dump();
  EXPECT_GT(metric_value(fp8, "predicted"), 1.2 * metric_value(other, "predicted"));
}

// mapping.json's routing_traces: a row whose model (and, where the rule names them, runtime and version) a
// rule matches replays that recorded trace in its serving-simulator runs. A file holding the very routing
// the simulator generates (`trace gen` at its 8,192 tokens and seed 1) gives the same figure to the last
// digit, so the file is what is replayed; a trace concentrated on few experts (Zipf popularity) makes a
// 32-sequence decode step read fewer experts and come out faster; a row the rule's runtime does not match,
// and a batch-1 decode row (the analytic model: top-k experts a token whatever the routing), keep theirs.
// A trace recorded for another model is refused with the field and both shapes.
TEST(GoldenValidateTable, RoutingTraceRulesReplayARecordedTrace) {
  const Scratch s("moesim_validate_table");
  for (const std::string& gen :
       {"--out " + s.path("uniform.mtrace"), "--popularity zipf --zipf-s 1.5 --out " + s.path("hot.mtrace")}) {
    const moesim::test::Run g = s.moesim("trace gen --model qwen3-30b-a3b --tokens 8192 --seed 1 " + gen);
    ASSERT_EQ(g.code, 0) << g.err;
  }
  const std::string rows =
      "b,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,32,512,32,0,"
      "decode_tokens_per_s,200,tokens/s,https://example.org/b,B=32\n"
      "v,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-vulkan,,32,512,32,0,"
      "decode_tokens_per_s,200,tokens/s,https://example.org/v,B=32\n"
      "d,prediction,qwen3-30b-a3b,,Q8_0,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
      "decode_tokens_per_s,50,tokens/s,https://example.org/d,tg128\n";
  const auto run = [&](const std::string& rules) {
    std::string mapping = kMapping;
    mapping.insert(mapping.rfind('}'), ", \"routing_traces\": [" + rules + "]");
    write_table(s, rows, mapping);
    const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out).at("rows");
  };
  const auto generated = run("");
  const std::string rule = R"({"model": "qwen3-30b-a3b", "runtime": "llama.cpp-metal", "source": "test", "trace": )";
  const auto uniform = run(rule + R"("uniform.mtrace"})");
  const auto hot = run(rule + R"("hot.mtrace"})");
  ASSERT_EQ(uniform.size(), 3u);
  EXPECT_EQ(uniform[0].at("routing_trace").at("file"), s.path("uniform.mtrace")) << uniform[0].dump();
  EXPECT_EQ(uniform[0].at("routing_trace").at("source"), "test");
  EXPECT_DOUBLE_EQ(metric_value(uniform[0], "predicted"), metric_value(generated[0], "predicted"));
  EXPECT_GT(metric_value(hot[0], "predicted"), 1.2 * metric_value(generated[0], "predicted"));
  for (const auto* with : {&uniform, &hot}) {
    EXPECT_FALSE((*with)[1].contains("routing_trace")) << (*with)[1].dump();
    EXPECT_DOUBLE_EQ(metric_value((*with)[1], "predicted"), metric_value(generated[1], "predicted"));
    EXPECT_FALSE((*with)[2].contains("routing_trace")) << (*with)[2].dump();
    EXPECT_DOUBLE_EQ(metric_value((*with)[2], "predicted"), metric_value(generated[2], "predicted"));
  }

  std::string mapping = kMapping;
  mapping.insert(mapping.rfind('}'),
                 R"(, "routing_traces": [{"model": "gpt-oss-20b", "trace": "hot.mtrace", "source": "test"}])");
  write_table(s, rows, mapping);
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --quiet");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("mapping.json: $.routing_traces[0].trace:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not fit model 'gpt-oss-20b'"), std::string::npos) << r.err;
}

// A runtime's matrix-vector expert kernel came with some version of it (mapping.json's expert_matvec_predates):
// a row of a build up to `builds_up_to` ("<commit> (<n>)" or "b<n>") or of a pull request's branch numbered below
// `prs_before` is priced without it and says so; a later build, a later branch and a row that names no version
// have it.
TEST(GoldenValidateTable, RowsOlderThanTheMatvecKernelArePricedWithoutIt) {
  const Scratch s("moesim_validate_table");
  const std::string mapping = R"({
    "hardware": [{"hardware": "RTX 4090", "devices": 1, "hw": "rtx-4090"}],
    "formats": {"Q8_0": "q8_0"},
    "runtimes": {"llama.cpp-cuda": {
      "expert_matvec_tokens": {"value": 8, "source": "test"},
      "expert_matvec_predates": {"builds_up_to": 6918, "prs_before": 18958, "source": "test"}}}
  })";
  const std::map<std::string, bool> versions = {
      {"abc (6918)", true},       {"abc (6919)", false},           {"b6000", true}, {"b9000", false},
      {"PR #15631 branch", true}, {"PR #20586 branch (x)", false}, {"", false}};
  std::string rows;
  int i = 0;
  for (const auto& [version, before] : versions)
    rows += "v" + std::to_string(i++) + ",prediction,qwen3-30b-a3b,,Q8_0,RTX 4090,nvidia-desktop,1,llama.cpp-cuda," +
            version + ",1,0,128,0,decode_tokens_per_s,100,tokens/s,https://example.org,tg128\n";
  write_table(s, rows, mapping);
  const moesim::test::Run r = s.moesim("validate --table " + s.path() + " --json --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out).at("rows");
  ASSERT_EQ(j.size(), versions.size());
  i = 0;
  for (const auto& [version, before] : versions) {
    const auto& row = j.at(static_cast<std::size_t>(i++));
    ASSERT_TRUE(row.contains("predicted")) << row.dump();
    EXPECT_EQ(row.value("predates_expert_matvec", false), before) << "version '" << version << "'";
  }
}

// A user's own `llama-bench -o json` runs (tests/data/llama-bench/, llama.cpp's JSON fields): tg tests are
// batch-1 decode at n_depth, the format comes from model_type ("llama 8B Q4_K - Medium" -> q4_k_m), the dense
// model's rows calibrate and the MoE model's are predicted, and --fit writes the runtime estimate uses.
TEST(GoldenValidateTable, LlamaBenchJsonFitsARuntime) {
  const Scratch s("moesim_validate_table");
  const std::string data = std::string(MOESIM_SOURCE_DIR) + "/tests/data/llama-bench/";
  const std::string args = "validate --llama-bench llama-3.1-8b=" + data +
                           "m2-ultra-llama3-8b.json --llama-bench qwen3-30b-a3b=" + data +
                           "m2-ultra-qwen3-coder-30b.json --hw mac-studio-m2-ultra-192 --runtime llama.cpp-metal "
                           "--fit --json --quiet --write-runtimes " +
                           s.path("rt");
  const moesim::test::Run r = s.moesim(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("rows").size(), 5u);
  EXPECT_EQ(j.at("rows").at(2).at("precision"), "q4_k_m");
  EXPECT_EQ(j.at("rows").at(4).at("role"), "prediction");
  EXPECT_EQ(j.at("rows").at(4).at("precision"), "q8_0");
  ASSERT_EQ(j.at("fits").size(), 1u);
  EXPECT_EQ(j.at("fits").at(0).at("calibration_rows"), 4);
  // The fit reproduces the dense rows it was fitted to far better than the datasheet profile.
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& row = j.at("rows").at(i);
    EXPECT_LT(std::fabs(metric_value(row, "fitted_error")), std::fabs(metric_value(row, "error"))) << row.dump();
  }
  EXPECT_TRUE(fs::exists(s.path("rt") + "/llama.cpp-metal@mac-studio-m2-ultra-192.json"));

  // Files llama-bench did not write, and malformed arguments, are refused with the file and the fix.
  s.write("pg.json", R"([{"model_type": "llama 8B F16", "n_prompt": 512, "n_gen": 128, "avg_ts": 10}])");
  s.write("object.json", R"({"model_type": "llama 8B F16"})");
  s.write("type.json", R"([{"model_type": "llama8B", "n_prompt": 0, "n_gen": 128, "avg_ts": 10}])");
  s.write("fmt.json", R"([{"model_type": "llama 8B TQ9_9", "n_prompt": 0, "n_gen": 128, "avg_ts": 10}])");
  s.write("ub.json", R"([{"model_type": "llama 8B F16", "n_prompt": 512, "n_gen": 0, "n_ubatch": 0, "avg_ts": 10}])");
  const std::pair<std::string, std::string> bad[] = {
      {"--llama-bench llama-3.1-8b=" + s.path("pg.json"), "a pp test has only n_prompt, a tg test only n_gen"},
      {"--llama-bench llama-3.1-8b=" + s.path("object.json"), "is not llama-bench's JSON output"},
      {"--llama-bench llama-3.1-8b=" + s.path("type.json"), "is not llama-bench's \"<arch> <size> <file type>\""},
      {"--llama-bench llama-3.1-8b=" + s.path("fmt.json"), "file type TQ9_9 is not a precision moesim prices"},
      {"--llama-bench llama-3.1-8b=" + s.path("ub.json"), "n_ubatch"},
      {"--llama-bench " + s.path("pg.json"), "write MODEL=FILE"},
  };
  for (const auto& [arg, want] : bad) {
    const moesim::test::Run b =
        s.moesim("validate " + arg + " --hw mac-studio-m2-ultra-192 --runtime llama.cpp-metal --quiet");
    EXPECT_EQ(b.code, 2) << arg;
    EXPECT_NE(b.err.find(want), std::string::npos) << b.err;
  }
  const moesim::test::Run both = s.moesim("validate --table x --llama-bench a=b --quiet");
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("one of them"), std::string::npos) << both.err;
}

}  // namespace

namespace {

// The shipped table, fitted once (each run of it is about 40 s, several minutes under the sanitizers, so
// every check on it shares this one run):
// - every kind of row it can express is predicted;
// - the shipped runtime profiles (hwprofiles/runtimes/) are the fit of the shipped table: regenerating them
//   gives the same figures;
// - issue 20's thresholds on its prediction rows (MoE models, never fitted): median |error| at most 15%,
//   p90 at most 35%, none off by more than 2x, the intervals covering at least 80% of the measurements.
//   Batch-1 decode meets them and is held to them; prefill, batched decode and max load do not yet
//   (validation/README.md gives their figures): they are reported, not asserted;
// - --plot draws predicted against measured into a new directory (CSV, script, PNG, SVG).
TEST(GoldenValidateTable, ShippedTableFitRuntimesThresholdsAndPlot) {
#if defined(MOESIM_SANITIZED)
  // About 1,200 serving simulations: minutes in the plain build, most of CI's budget under the sanitizers.
  // The plain build runs it; the sanitizers see the same code through the small tables of the tests above.
  GTEST_SKIP() << "the whole shipped table is fitted in the plain build only";
#endif
  const Scratch s("moesim_validate_table");
  const moesim::test::Run r =
      s.moesim("validate --table " + std::string(MOESIM_SOURCE_DIR) +
               "/validation --fit --json --quiet --write-runtimes " + s.path("rt") + " --plot " + s.path("plot"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::set<std::string> kinds;
  for (const auto& row : j.at("rows"))
    if (row.contains("predicted")) kinds.insert(row.at("kind").get<std::string>());
  EXPECT_EQ(kinds, (std::set<std::string>{"decode b1", "prefill b1", "decode batched", "prefill batched", "max-load"}));

  // A shipped profile the fit does not write is one written by hand from a seed's figures (flexflow@l4,
  // ...): none of its figures may claim to be this fit's.
  std::size_t compared = 0;
  for (const auto& f : fs::directory_iterator(fs::path(MOESIM_SOURCE_DIR) / "hwprofiles" / "runtimes")) {
    const auto shipped = nlohmann::json::parse(slurp(f.path()));
    const fs::path fresh = fs::path(s.path("rt")) / f.path().filename();
    if (!fs::exists(fresh)) {
      EXPECT_EQ(shipped.dump().find("fitted by `moesim validate"), std::string::npos)
          << f.path() << " is no longer fitted from validation/";
      continue;
    }
    const auto now = nlohmann::json::parse(slurp(fresh));
    expect_json_near(now, shipped, f.path().filename().string());
    ++compared;
  }
  EXPECT_GE(compared, 20u);  // llama.cpp on 13 machines and transferred, TensorRT-LLM on 14

  // The kind that meets issue 20's targets on the MoE prediction rows, fitted runtimes: batch-1 decode (115 rows
  // at this commit, median 9.1%, p90 15.0%, worst 1.42x, all inside their interval). llama-batched-bench's prompt
  // throughput of B sequences met them too until the thirty-second session added llama.cpp's February 2026
  // bench files (benches/dgx-spark at build 7941, benches/mac-m2-ultra at build 7948): gpt-oss-120b's PP 512,
  // B = 2 micro-batch of 1,024 tokens on the Spark comes out -54% there (the padded expert tile, see
  // validation/README.md), so its worst factor is 2.17x; it is held below with the other kinds.
  std::set<std::string> meeting;
  for (const auto& sm : j.at("summaries")) {
    if (sm.at("basis") != "fitted" || sm.at("role") != "prediction" || sm.at("hw_family") != "all" ||
        sm.at("kind") != "decode b1")
      continue;
    meeting.insert(sm.at("kind").get<std::string>());
    EXPECT_GE(sm.at("rows").get<int>(), 15);
    EXPECT_LE(metric_value(sm, "median_abs_error"), 0.15) << sm.dump();
    EXPECT_LE(metric_value(sm, "p90_abs_error"), 0.35) << sm.dump();
    EXPECT_LT(metric_value(sm, "worst_ratio"), 2.0) << sm.dump();
    // Issue 20 asks 80% inside the interval. The RTX 4090's Qwen3-30B-A3B rows brought it from 84% to 73%; its
    // dense Qwen3-0.6B rows (validation/README.md, fifteenth session) split the 4090's cost per kernel from its
    // bandwidth; with PR #16630's DeepSeek-V2-Lite rows and intervals of 19 held-out errors or the pooled range,
    // 88% (52 of 59 rows). Intervals from held-out models rather than configurations (seventeenth session):
    // 97% (57 of 59); 100% of 115 at this commit.
    EXPECT_GE(metric_value(sm, "interval_coverage"), 0.80) << sm.dump();
  }
  EXPECT_EQ(meeting, (std::set<std::string>{"decode b1"})) << "no fitted summary of the batch-1 decode prediction rows";

  // The other kinds do not meet the issue's targets yet (validation/README.md): their summaries are held at
  // this commit's levels with a point or two to spare, so a change that loses ground fails here. Max load's
  // p90 went from 45.4% to 46.1% when attention stopped running at an NVFP4 model's FP4 rate (nineteenth
  // session: the long-context rows, where attention is the work, came 6-10 points closer), so its bound is
  // 47%, not 46%. Batch-1 prefill's p90 meets the issue's 35% since the DGX Spark's three cold first runs
  // left its figures (column `excluded`, twenty-seventh session: 39.2% -> 32.0%, median 17.5% -> 16.5%), and
  // with the M4 Max's measured compute rate its four MLX rows joined (61 rows: 17.1%, p90 30.9%). With MLX's
  // grouped expert GEMM at its microbenchmarked 69% of the dense one's rate (twenty-eighth session) those four
  // went from +16..+22% to -3..-8%, and the median to 14.0%, inside the issue's 15%.
  // The thirty-second session's bench files moved three of them (validation/README.md): batched decode from 45
  // rows at 15.4% / 29.7% to 135 at 23.0% / 43.0% (the M2 Ultra's B = 2-16 steps +19..+52% with Metal's small-batch
  // kernels priced, the Spark's B = 8-32 at build 7941 -49..+1%), batched prefill to 10.9% / 24.3% with a worst factor
  // of 2.17x, batch-1 prefill to 12.6% / 30.6% with 81.7% inside the interval (89 of 109).
  const std::map<std::string, std::pair<double, double>> held = {{"max-load", {0.165, 0.47}},
                                                                 {"prefill b1", {0.14, 0.32}},
                                                                 {"decode batched", {0.25, 0.46}},
                                                                 {"prefill batched", {0.12, 0.26}}};
  std::size_t guarded = 0;
  for (const auto& sm : j.at("summaries")) {
    const auto it = held.find(sm.at("kind").get<std::string>());
    if (it == held.end() || sm.at("basis") != "fitted" || sm.at("role") != "prediction" ||
        sm.at("hw_family") != "all" || sm.at("runtime") != "all")
      continue;
    ++guarded;
    EXPECT_LE(metric_value(sm, "median_abs_error"), it->second.first) << sm.dump();
    EXPECT_LE(metric_value(sm, "p90_abs_error"), it->second.second) << sm.dump();
    if (it->first == "prefill batched") {
      EXPECT_LT(metric_value(sm, "worst_ratio"), 2.3) << sm.dump();
    }
    // Every kind's intervals but max load's meet the issue's coverage target on the MoE rows, and max load's
    // (90% of the pooled held-out dense errors, calibrate::error_interval) do too: 82% at this commit (88%
    // before pipeline stages held one micro-batch each, twenty-fifth session). Batched decode's, from the dense
    // batched rows' largest factor (1.74x, the M2 Ultra's dense B = 32): 95% of 135 at this commit (84% of 45
    // before the thirty-second session's rows, 78% of 18 before the Spark's batched-bench tables were in whole);
    // batched prefill's 87%; batch-1 prefill's 81.7%, which the thirty-second session's rows brought over the line
    // (79.4% of 63 before).
    EXPECT_GE(metric_value(sm, "interval_coverage"), 0.80) << sm.dump();
  }
  EXPECT_EQ(guarded, held.size());

  // A runtime transferred to machines it has no measurement of (validation_transfer.cpp): llama.cpp's CUDA and
  // Metal fits of two configurations or more give their medians, shipped as <runtime>@any-<maker>. Each MoE batch-1
  // decode row is priced with its own machine's fit left out: at this commit 94 rows, median 16.6%, p90 43%,
  // worst 2.41x, 52% inside the leave-one-machine-out interval (46 rows, 10.9% / 23% / 1.70x / 67% before the
  // thirty-second session). The M2 Ultra's 24 rows at build 7948 come out -37..-59% from the other Apple fits'
  // medians, whose cost per kernel (17 us, the M1 Max's and M3 Max's) is twice the M2 Ultra's own (8.8 us).
  // Held there with a point or two to spare.
  std::set<std::string> transferred;
  for (const auto& t : j.at("transfers")) {
    const auto& profile = t.at("profile");
    transferred.insert(profile.at("id").get<std::string>());
    EXPECT_EQ(profile.at("hw"), "any");
    EXPECT_TRUE(profile.contains("gpu_vendor")) << profile.dump();
    EXPECT_GE(profile.at("transferred_from").size(), 3u) << profile.dump();
    EXPECT_GE(t.at("decode_errors").size(), 19u) << profile.dump();
  }
  EXPECT_EQ(transferred, (std::set<std::string>{"llama.cpp-cuda@any-nvidia", "llama.cpp-metal@any-apple"}));
  // Their batch-1 decode checks (prediction_check) count the rows of the transferred summary below, one
  // runtime each.
  int checked = 0;
  for (const auto& t : j.at("transfers"))
    if (t.at("profile").contains("prediction_check"))
      for (const auto& c : t.at("profile").at("prediction_check"))
        if (c.at("kind") == "decode b1") checked += c.at("rows").get<int>();
  std::size_t transferred_decode = 0;
  for (const auto& sm : j.at("summaries")) {
    if (sm.at("basis") != "transferred" || sm.at("role") != "prediction" || sm.at("kind") != "decode b1" ||
        sm.at("hw_family") != "all")
      continue;
    ++transferred_decode;
    EXPECT_GE(sm.at("rows").get<int>(), 40) << sm.dump();
    EXPECT_EQ(sm.at("rows").get<int>(), checked) << sm.dump();
    EXPECT_LE(metric_value(sm, "median_abs_error"), 0.18) << sm.dump();
    EXPECT_LE(metric_value(sm, "p90_abs_error"), 0.45) << sm.dump();
    EXPECT_LT(metric_value(sm, "worst_ratio"), 2.5) << sm.dump();
  }
  EXPECT_EQ(transferred_decode, 1u);

  // The H100 and H200 measured on a lent GPU (hwprofiles/measured/, calibrate/BENCH.md) predict their
  // nodes' max-load MoE rows from microbenchmarks alone, nothing fitted: at this commit 26% and 28% median
  // |error| (the datasheet profiles 63% and 83%), worst 2.09x and 1.84x. Held there with a point to spare.
  std::set<std::string> measured_devices;
  for (const auto& d : j.at("measured_devices")) {
    if (d.at("role") != "prediction" || d.at("kind") != "max-load") continue;
    measured_devices.insert(d.at("profile").get<std::string>());
    const auto& m = d.at("measured_device");
    EXPECT_GE(m.at("rows").get<int>(), 60) << d.dump();
    EXPECT_LE(metric_value(m, "median_abs_error"), 0.30) << d.dump();
    EXPECT_LE(metric_value(m, "worst_ratio"), 2.2) << d.dump();
    EXPECT_LT(metric_value(m, "median_abs_error"), metric_value(d.at("datasheet"), "median_abs_error")) << d.dump();
  }
  EXPECT_EQ(measured_devices, (std::set<std::string>{"h100-sxm-2026-11-28", "h200-2026-11-28"}));

  // Batched decode is fitted to nothing: its interval is the dense batched rows' largest factor either way
  // (value / f .. value * f), which a range taken as it stands (+7 .. +37% at this commit) is not.
  std::size_t batched = 0;
  for (const auto& row : j.at("rows")) {
    if (row.value("kind", "") != "decode batched" || row.value("role", "") != "prediction" || !row.contains("interval"))
      continue;
    const double fitted = metric_value(row, "fitted");
    const double low = row.at("interval").at("low").get<double>();
    const double high = row.at("interval").at("high").get<double>();
    EXPECT_LT(low, fitted) << row.dump();
    EXPECT_NEAR(low * high, fitted * fitted, 1e-6 * fitted * fitted) << row.dump();
    ++batched;
  }
  EXPECT_GE(batched, 10u);

  for (const char* f : {"validation.csv", "validation.gp", "validation.png", "validation.svg"})
    EXPECT_TRUE(fs::exists(fs::path(s.path("plot")) / f)) << f;
  std::ifstream csv(fs::path(s.path("plot")) / "validation.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find("measured tokens/s"), std::string::npos) << header;
}

// --plot refuses a directory moesim did not make, and writes nothing.
TEST(GoldenValidateTable, PlotRefusesAUsersDirectory) {
  const Scratch s("moesim_validate_table");
  write_table(s,
              "a,calibration,meta-llama/Meta-Llama-3-8B,,F16,M2 Ultra 192GB,apple-m,1,llama.cpp-metal,,1,0,128,0,"
              "decode_tokens_per_s,36.9,tokens/s,https://example.org,l\n");
  fs::create_directories(s.path("mine"));
  s.write("mine/keep.txt", "a user's file");
  const moesim::test::Run refused = s.moesim("validate --table " + s.path() + " --quiet --plot " + s.path("mine"));
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_TRUE(fs::exists(fs::path(s.path("mine")) / "keep.txt"));
}

}  // namespace
