// Serving host costs (issue 20): the runtime's step_overhead and request_overhead in the serving simulator,
// vLLM benchmark_serving.py results read (tests/data/vllm/, the --save-result format) and the two costs
// fitted to them (calibrate/serving_fit.hpp).

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <tuple>

#include "../test_support.hpp"
#include "moesim/calibrate/serving_fit.hpp"
#include "moesim/model/hardware.hpp"

namespace {

using moesim::calibrate::fit_vllm_latency;
using moesim::calibrate::fit_vllm_serving;
using moesim::calibrate::read_vllm_latency;
using moesim::calibrate::read_vllm_serving;
using moesim::calibrate::replay_vllm_serving;
using moesim::calibrate::ServingImport;
using moesim::calibrate::VllmLatencyResult;
using moesim::calibrate::VllmServingResult;

const std::string kVllmData = std::string(MOESIM_SOURCE_DIR) + "/tests/data/vllm/";

nlohmann::json fixture(const std::string& name) {
  std::ifstream in(kVllmData + name);
  return nlohmann::json::parse(in);
}

/// `doc` written to a scratch file, read back by read_vllm_serving; the UserError's message or "".
std::string error_reading_result(const nlohmann::json& doc) {
  const moesim::test::TestDir dir("moesim_vllm");
  const std::string path = dir.write("moesim_vllm_bad.json", doc.dump());
  return moesim::test::error_of([&] { (void)read_vllm_serving(path); });
}

/// A runtime on the H100 with the hardware profile's own GPU figures and no host costs.
ServingImport h100_import() {
  ServingImport in;
  in.model = "llama-3.1-8b";
  in.hw = "h100-sxm";
  in.runtime.runtime = "test";
  in.runtime.hw = "h100-sxm";
  in.runtime.id = "test@h100-sxm";
  in.runtime.bandwidth_efficiency = moesim::model::Sourced<double>{1.0, "test"};
  in.runtime.attention_factor = moesim::model::Sourced<double>{1.0, "test"};
  in.runtime.kernel_overhead = moesim::model::Sourced<moesim::units::Duration>{moesim::units::seconds(0), "test"};
  return in;
}

/// A result file of `n` requests as the simulator itself serves them with host costs `step` and `request`:
/// the lengths vary per request, the measured means are the replay's.
VllmServingResult synthetic(const ServingImport& in, std::int64_t n, std::optional<double> rate, double step,
                            double request) {
  VllmServingResult r;
  r.path = "synthetic";
  r.num_prompts = r.completed = n;
  r.request_rate = rate;
  for (std::int64_t i = 0; i < n; ++i) {
    r.input_lens.push_back(600 + 97 * i % 500);
    r.output_lens.push_back(40 + 13 * i % 50);
  }
  r.total_input_tokens = std::accumulate(r.input_lens.begin(), r.input_lens.end(), std::int64_t{0});
  r.total_output_tokens = std::accumulate(r.output_lens.begin(), r.output_lens.end(), std::int64_t{0});
  const auto f = replay_vllm_serving(r, in, step, request);
  r.mean_ttft = f.ttft;
  r.mean_tpot = f.tpot;
  r.output_throughput = f.output_throughput;
  r.duration = static_cast<double>(r.total_output_tokens) / f.output_throughput;
  r.request_throughput = static_cast<double>(n) / r.duration;
  return r;
}

// The fixture in benchmark_serving.py's format: "inf" is no rate, the statistics (ms) become seconds and
// agree with the per-request lists the same file holds (mean of "ttfts"), the lengths are per request.
TEST(VllmServing, ReadsTheSaveResultFormat) {
  const nlohmann::json doc = fixture("llama-3.1-8b-h100-inf.json");
  const VllmServingResult r = read_vllm_serving(kVllmData + "llama-3.1-8b-h100-inf.json");
  EXPECT_FALSE(r.request_rate.has_value());
  EXPECT_FALSE(r.max_concurrency.has_value());
  EXPECT_EQ(r.num_prompts, doc.at("num_prompts").get<std::int64_t>());
  ASSERT_EQ(r.input_lens.size(), static_cast<std::size_t>(r.num_prompts));
  ASSERT_EQ(r.output_lens.size(), static_cast<std::size_t>(r.num_prompts));
  double sum = 0;
  for (const auto& t : doc.at("ttfts")) sum += t.get<double>();
  EXPECT_NEAR(r.mean_ttft, sum / static_cast<double>(r.num_prompts), 1e-12);
  EXPECT_DOUBLE_EQ(r.mean_tpot, doc.at("mean_tpot_ms").get<double>() / 1e3);
  const VllmServingResult q = read_vllm_serving(kVllmData + "llama-3.1-8b-h100-rate4.json");
  ASSERT_TRUE(q.request_rate.has_value());
  EXPECT_DOUBLE_EQ(*q.request_rate, fixture("llama-3.1-8b-h100-rate4.json").at("request_rate").get<double>());
}

// Malformed files are refused naming the file and the key.
TEST(VllmServing, RefusesMalformedFilesNamingTheKey) {
  const nlohmann::json good = fixture("llama-3.1-8b-h100-inf.json");
  auto without = good;
  without.erase("mean_ttft_ms");
  EXPECT_NE(error_reading_result(without).find("mean_ttft_ms"), std::string::npos) << error_reading_result(without);
  auto rate = good;
  rate["request_rate"] = "fast";
  EXPECT_NE(error_reading_result(rate).find("request_rate"), std::string::npos);
  auto lens = good;
  lens["input_lens"].erase(0);
  EXPECT_NE(error_reading_result(lens).find("input_lens"), std::string::npos);
  auto failed = good;
  failed["completed"] = good.at("num_prompts").get<int>() - 1;
  EXPECT_NE(error_reading_result(failed).find("completed"), std::string::npos);
  auto negative = good;
  negative["mean_tpot_ms"] = -1.0;
  EXPECT_NE(error_reading_result(negative).find("mean_tpot_ms"), std::string::npos);
  EXPECT_NE(error_reading_result(nlohmann::json::array()).find("moesim_vllm_bad.json"), std::string::npos);
}

// One request alone: every engine step after its prefill is one decode step, so step_overhead s adds s to
// each inter-token gap (TPOT + s exactly), and request_overhead r delays its prefill by r (TTFT + r).
TEST(ServingHostCosts, OneRequestPaysThemExactly) {
  const ServingImport in = h100_import();
  VllmServingResult one;
  one.path = "one";
  one.num_prompts = one.completed = 1;
  one.input_lens = {512};
  one.output_lens = {64};
  const auto base = replay_vllm_serving(one, in, 0.0, 0.0);
  const auto step = replay_vllm_serving(one, in, 0.004, 0.0);
  const auto req = replay_vllm_serving(one, in, 0.0, 0.030);
  EXPECT_NEAR(step.tpot, base.tpot + 0.004, 1e-9);
  EXPECT_NEAR(step.ttft, base.ttft + 0.004, 1e-9);  // the prefill is one step too
  EXPECT_NEAR(req.ttft, base.ttft + 0.030, 1e-9);
  EXPECT_NEAR(req.tpot, base.tpot, 1e-12);
}

// Four requests sent at once, alike: after their prefills every engine step decodes all four, so the
// runtime's sequence_overhead s (host time per sequence and step, a runtime profile's) adds 4 s to each
// inter-token gap (within 1%: the steps around the prefills hold fewer), where step_overhead adds its
// figure once per step whatever the batch.
TEST(ServingHostCosts, SequenceOverheadIsPaidPerSequenceOfAStep) {
  ServingImport in = h100_import();
  VllmServingResult four;
  four.path = "four";
  four.num_prompts = four.completed = 4;
  four.input_lens = {512, 512, 512, 512};
  four.output_lens = {64, 64, 64, 64};
  const auto base = replay_vllm_serving(four, in, 0.0, 0.0);
  const double s = 0.0007;
  in.runtime.sequence_overhead = {moesim::units::seconds(s), "test"};
  const auto per_sequence = replay_vllm_serving(four, in, 0.0, 0.0);
  EXPECT_NEAR(per_sequence.tpot, base.tpot + 4 * s, 0.01 * 4 * s);
  EXPECT_GT(per_sequence.ttft, base.ttft);
}

// Round trip: results the simulator itself produced with known host costs are fitted back to them.
TEST(ServingFit, RecoversKnownHostCosts) {
  const ServingImport in = h100_import();
  const double step = 0.0035, request = 0.025;
  const std::vector<VllmServingResult> runs = {synthetic(in, 12, std::nullopt, step, request),
                                               synthetic(in, 12, 3.0, step, request)};
  const auto fit = fit_vllm_serving(runs, in);
  EXPECT_NEAR(fit.step_overhead, step, 0.02 * step);
  EXPECT_NEAR(fit.request_overhead, request, 0.02 * request);
  for (const auto& f : fit.files) {
    EXPECT_NEAR(f.after.ttft / f.measured.ttft, 1.0, 0.01) << f.path;
    EXPECT_NEAR(f.after.tpot / f.measured.tpot, 1.0, 0.01) << f.path;
  }
}

// Held out: each file predicted by the fit to the other has a smaller TTFT error than with no host costs.
TEST(ServingFit, HeldOutFileImproves) {
  const ServingImport in = h100_import();
  const std::vector<VllmServingResult> runs = {synthetic(in, 10, std::nullopt, 0.003, 0.040),
                                               synthetic(in, 10, 2.0, 0.003, 0.040)};
  const auto fit = fit_vllm_serving(runs, in);
  ASSERT_EQ(fit.files.size(), 2u);
  for (const auto& f : fit.files) {
    ASSERT_TRUE(f.loo.has_value());
    const double before = std::fabs(f.before.ttft / f.measured.ttft - 1.0);
    const double held_out = std::fabs(f.loo->ttft / f.measured.ttft - 1.0);
    EXPECT_LT(held_out, before) << f.path << ": before " << before << ", held out " << held_out;
  }
}

// benchmark_latency.py --output-json: the lengths come from the file's own keys, else the command line,
// else the script's defaults; a file without avg_latency is refused naming the key.
TEST(VllmLatency, ReadsTheOutputJsonAndItsLengths) {
  const std::string file = kVllmData + "llama-3.1-8b-h100-latency-b8.json";
  const VllmLatencyResult d = read_vllm_latency(file);
  EXPECT_EQ(d.lengths_from, "benchmark_latency.py defaults");
  EXPECT_DOUBLE_EQ(d.avg_latency, fixture("llama-3.1-8b-h100-latency-b8.json").at("avg_latency").get<double>());
  const VllmLatencyResult c = read_vllm_latency(file, {64, 16, 4});
  EXPECT_EQ(c.input_len, 64);
  EXPECT_EQ(c.output_len, 16);
  EXPECT_EQ(c.batch_size, 4);
  const moesim::test::TestDir dir("moesim_vllm_latency");
  const std::string path = dir.write("latency.json", R"({"latencies": [1.0], "percentiles": {"50": 1.0}})");
  EXPECT_NE(moesim::test::error_of([&] { (void)read_vllm_latency(path); }).find("avg_latency"), std::string::npos);
  (void)dir.write("latency.json", R"({"avg_latency": 1.0, "batch_size": 2})");
  EXPECT_NE(moesim::test::error_of([&] {
              (void)read_vllm_latency(path, {std::nullopt, std::nullopt, 4});
            }).find("drop --input-len"),
            std::string::npos);
}

// Round trip and held out: latencies the simulator produced with a known step_overhead are fitted back to
// it, and each file predicted by the fit to the other is closer than with no host cost.
TEST(VllmLatency, RecoversAKnownStepOverhead) {
  const ServingImport in = h100_import();
  const double step = 0.0042;
  std::vector<VllmLatencyResult> runs;
  for (const auto& [b, i, o] : {std::tuple{8, 32, 128}, std::tuple{32, 512, 64}}) {
    VllmLatencyResult r;
    r.path = "synthetic b" + std::to_string(b);
    r.batch_size = b;
    r.input_len = i;
    r.output_len = o;
    VllmServingResult batch;
    batch.path = r.path;
    batch.num_prompts = batch.completed = b;
    batch.input_lens.assign(static_cast<std::size_t>(b), i);
    batch.output_lens.assign(static_cast<std::size_t>(b), o);
    r.avg_latency = replay_vllm_serving(batch, in, step, 0.0).duration;
    runs.push_back(r);
  }
  const auto fit = fit_vllm_latency(runs, in);
  EXPECT_NEAR(fit.step_overhead, step, 1e-6 * step);
  for (const auto& f : fit.files) {
    ASSERT_TRUE(f.loo.has_value());
    EXPECT_LT(std::fabs(*f.loo / f.measured - 1.0), std::fabs(f.before / f.measured - 1.0)) << f.path;
  }
}

}  // namespace
