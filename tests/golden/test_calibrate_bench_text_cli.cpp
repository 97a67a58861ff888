// `moesim calibrate fit --mlx-lm / --llama-batched-bench` (issue 20): mlx_lm.generate's figures and
// llama-batched-bench's table fitted through the llama-bench import. Each test changes one figure of the
// fixture and checks the fitted profile (or the row's prediction) moves: a value that never reached the
// fit would leave it where it was.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;

const std::string kData = std::string(MOESIM_SOURCE_DIR) + "/tests/data/";
const std::string kMlx = kData + "mlx-lm/m2-ultra-llama-3.1-8b-4bit.txt";
const std::string kBatched = kData + "llama-batched-bench/qwen2.5-coder-7b-q8_0-metal.txt";

/// `text` with its first `from` replaced by `to` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

/// The profile `calibrate fit ARGS --json` prints.
nlohmann::json fit(const Scratch& s, const std::string& args) {
  const moesim::test::Run r = s.moesim("calibrate fit " + args + " --json");
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

double value(const nlohmann::json& p, const char* key) { return p.at(key).at("value").get<double>(); }

/// The three figures the decode fit gives, without their sources (which name the files).
std::string decode_figures(const nlohmann::json& p) {
  return p.at("bandwidth_efficiency").at("value").dump() + " " + p.at("attention_factor").at("value").dump() + " " +
         p.at("kernel_overhead").at("value").dump();
}

const char* const kMlxCommon = " --precision q4 --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime mlx";

// Three runs: three prefill and three decode rows, the decode ones at the prompt's depth; the profile
// names the runtime mlx and its origin the option.
TEST(GoldenCalibrateImport, MlxLmRunsAreFitted) {
  const Scratch s("moesim_calibrate_mlx");
  const moesim::test::Run text = s.moesim("calibrate fit --mlx-lm " + kMlx + kMlxCommon + " --out " + s.path("p.json"));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("run2-tg256@d2048"), std::string::npos) << text.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(s.path("p.json")));
  EXPECT_EQ(p.at("runtime"), "mlx");
  EXPECT_EQ(p.at("id"), "mlx@mac-studio-m2-ultra-192");
  EXPECT_NE(p.at("bandwidth_efficiency").at("source").get<std::string>().find("--mlx-lm"), std::string::npos);
  const auto& rows = p.at("calibration").at("mlx_lm").at("rows");
  ASSERT_EQ(rows.size(), 6u) << rows.dump(2);
  std::size_t decode = 0, prefill = 0;
  for (const auto& r : rows) {
    decode += r.at("kind") == "decode b1";
    prefill += r.at("kind") == "prefill b1";
    EXPECT_TRUE(r.contains("fitted")) << r.dump();
  }
  EXPECT_EQ(decode, 3u);
  EXPECT_EQ(prefill, 3u);
}

// mlx_lm.benchmark's output fits the same way: its Averages line's generation rate is the decode row, at
// the Timing line's prompt as its depth (the M4 Max has no cited FLOP rate, so the prompt row is listed, not
// predicted).
TEST(GoldenCalibrateImport, MlxLmBenchmarkOutputIsFitted) {
  const Scratch s("moesim_calibrate_mlx");
  const moesim::test::Run r =
      s.moesim("calibrate fit --mlx-lm " + kData + "mlx-lm/m4-max-qwen3-4b-q4-benchmark.txt" +
               " --precision q4 --model qwen3-4b --hw macbook-pro-m4-max-64 --runtime mlx --out " + s.path("p.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("run1-tg128@d2048"), std::string::npos) << r.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(s.path("p.json")));
  EXPECT_EQ(p.at("id"), "mlx@macbook-pro-m4-max-64");
  bool decode = false;
  for (const auto& row : p.at("calibration").at("mlx_lm").at("rows"))
    if (row.at("kind") == "decode b1") {
      decode = true;
      EXPECT_DOUBLE_EQ(row.at("measured").at("value").get<double>(), 134.52) << row.dump();
    }
  EXPECT_TRUE(decode) << p.dump(2);
}

// A Generation rate reaches the decode fit; a Prompt rate the prefill fit.
TEST(GoldenCalibrateImport, MlxLmFiguresReachTheFit) {
  const Scratch s("moesim_calibrate_mlx");
  const std::string text = slurp(kMlx);
  const nlohmann::json base = fit(s, "--mlx-lm " + kMlx + kMlxCommon);
  s.write("slow-gen.txt", replaced(text, "Generation: 256 tokens, 92.418", "Generation: 256 tokens, 60.000"));
  const nlohmann::json gen = fit(s, "--mlx-lm " + s.path("slow-gen.txt") + kMlxCommon);
  ASSERT_TRUE(base.contains("bandwidth_efficiency") && gen.contains("bandwidth_efficiency")) << base.dump(2);
  EXPECT_NE(decode_figures(base), decode_figures(gen));
  s.write("slow-prompt.txt", replaced(text, "Prompt: 2048 tokens, 1005.617", "Prompt: 2048 tokens, 500.000"));
  const nlohmann::json pre = fit(s, "--mlx-lm " + s.path("slow-prompt.txt") + kMlxCommon);
  ASSERT_TRUE(base.contains("compute_efficiency") && pre.contains("compute_efficiency")) << base.dump(2);
  EXPECT_LT(value(pre, "compute_efficiency"), value(base, "compute_efficiency"));
}

const char* const kBatchedCommon =
    " --precision q8_0 --model qwen2.5-coder-7b --hw mac-studio-m2-ultra-192 --runtime llama.cpp-metal";

/// The calibration row of `p` whose test id is `id`.
nlohmann::json row(const nlohmann::json& p, const std::string& id) {
  for (const auto& r : p.at("calibration").at("llama_batched_bench").at("rows"))
    if (r.at("test") == id) return r;
  ADD_FAILURE() << "no row " << id << " in " << p.dump(2);
  return nlohmann::json::object();
}

// B = 1 rows are fitted (prefill and decode), B > 1 rows predicted as batched decode (S_TG) and batched
// prefill (S_PP); a B = 1 figure reaches the fit, a B > 1 one only its own row. With is_pp_shared the B > 1
// S_PP is one prompt's prefill copied to the other sequences: listed as not used.
TEST(GoldenCalibrateImport, LlamaBatchedBenchRowsAreFittedAndPredicted) {
  const Scratch s("moesim_calibrate_batched");
  const moesim::test::Run text = s.moesim("calibrate fit --llama-batched-bench " + kBatched + kBatchedCommon);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("decode batched"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("prefill batched"), std::string::npos) << text.out;

  const nlohmann::json base = fit(s, "--llama-batched-bench " + kBatched + kBatchedCommon);
  const auto& bb = base.at("calibration").at("llama_batched_bench");
  // 2 prefill and 2 decode at B = 1, 4 decode batched, 4 prefill batched
  EXPECT_EQ(bb.at("rows").size(), 12u) << bb.dump(2);
  EXPECT_TRUE(!bb.contains("not_used") || bb.at("not_used").empty()) << bb.dump(2);
  const nlohmann::json p4 = row(base, "pp512-tg32-b4:prefill");
  EXPECT_EQ(p4.at("kind"), "prefill batched");
  EXPECT_EQ(p4.at("measured").at("value").get<double>(), 1640.90);
  EXPECT_TRUE(p4.contains("datasheet") && p4.contains("fitted")) << p4.dump();
  s.write("p4.txt", replaced(slurp(kBatched), "|    1.248 |  1640.90 |", "|    1.248 |   800.00 |"));
  const nlohmann::json p4x = fit(s, "--llama-batched-bench " + s.path("p4.txt") + kBatchedCommon);
  EXPECT_EQ(decode_figures(base), decode_figures(p4x));
  EXPECT_EQ(row(p4x, "pp512-tg32-b4:prefill").at("measured").at("value").get<double>(), 800.0);
  s.write("shared.txt", replaced(slurp(kBatched), "is_pp_shared = 0", "is_pp_shared = 1"));
  const nlohmann::json shared = fit(s, "--llama-batched-bench " + s.path("shared.txt") + kBatchedCommon);
  const auto& sb = shared.at("calibration").at("llama_batched_bench");
  EXPECT_EQ(sb.at("rows").size(), 8u) << sb.dump(2);
  EXPECT_EQ(sb.at("not_used").begin().value(), 4) << sb.dump(2);
  const nlohmann::json b4 = row(base, "pp512-tg32-b4:decode");
  EXPECT_EQ(b4.at("kind"), "decode batched");
  EXPECT_EQ(b4.at("measured").at("value").get<double>(), 224.52);
  EXPECT_TRUE(b4.contains("datasheet") && b4.contains("fitted")) << b4.dump();

  const std::string table = slurp(kBatched);
  s.write("b1.txt", replaced(table, "|    0.405 |    79.04 |", "|    0.405 |    50.00 |"));
  const nlohmann::json b1 = fit(s, "--llama-batched-bench " + s.path("b1.txt") + kBatchedCommon);
  EXPECT_NE(decode_figures(base), decode_figures(b1));
  s.write("b4.txt", replaced(table, "|    0.570 |   224.52 |", "|    0.570 |   100.00 |"));
  const nlohmann::json b4x = fit(s, "--llama-batched-bench " + s.path("b4.txt") + kBatchedCommon);
  EXPECT_EQ(decode_figures(base), decode_figures(b4x));
  EXPECT_EQ(row(b4x, "pp512-tg32-b4:decode").at("measured").at("value").get<double>(), 100.0);
}

// `llama-batched-bench --output-format jsonl` of the same run fits to the same profile and predicts the
// same rows (the fixture is the table's figures in that format).
TEST(GoldenCalibrateImport, LlamaBatchedBenchJsonlFitsAsTheTable) {
  const Scratch s("moesim_calibrate_batched");
  const nlohmann::json table = fit(s, "--llama-batched-bench " + kBatched + kBatchedCommon);
  const std::string jsonl = kData + "llama-batched-bench/qwen2.5-coder-7b-q8_0-metal.jsonl";
  const nlohmann::json lines = fit(s, "--llama-batched-bench " + jsonl + kBatchedCommon);
  EXPECT_EQ(decode_figures(table), decode_figures(lines));
  for (const char* id : {"pp512-tg32-b4:prefill", "pp4096-tg32-b2:decode", "pp4096-tg32-b1:prefill"}) {
    EXPECT_EQ(row(table, id).at("measured"), row(lines, id).at("measured")) << id;
    EXPECT_EQ(row(table, id).at("fitted"), row(lines, id).at("fitted")) << id;
  }
}

// The main: line's n_ubatch is the prompt's micro-batch: a smaller one reads the weights more often, so
// the datasheet prefill prediction of the same row changes.
TEST(GoldenCalibrateImport, LlamaBatchedBenchHonoursNUbatch) {
  const Scratch s("moesim_calibrate_batched");
  const nlohmann::json base = fit(s, "--llama-batched-bench " + kBatched + kBatchedCommon);
  s.write("ub.txt", replaced(slurp(kBatched), "n_ubatch = 2048", "n_ubatch = 4"));
  const nlohmann::json small = fit(s, "--llama-batched-bench " + s.path("ub.txt") + kBatchedCommon);
  const double a = row(base, "pp4096-tg32-b1:prefill").at("datasheet").at("value").get<double>();
  const double b = row(small, "pp4096-tg32-b1:prefill").at("datasheet").at("value").get<double>();
  EXPECT_LT(b, a);
}

}  // namespace
