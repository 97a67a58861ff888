// mlx_lm.generate's figures and llama-batched-bench's table (or its jsonl lines) read as llama-bench tests
// (calibrate/bench_import.hpp read_mlx_lm, read_llama_batched_bench), on the fixtures under tests/data/.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/bench_import.hpp"

namespace {

using moesim::calibrate::read_llama_batched_bench;
using moesim::calibrate::read_mlx_lm;

const std::string kData = std::string(MOESIM_SOURCE_DIR) + "/tests/data/";

// Per run a prefill (the prompt at depth 0) and a decode (the generated tokens after the prompt), with the
// line each figure stands on.
TEST(CalibrateBenchText, MlxLmRunsAsLlamaBenchTests) {
  const nlohmann::json t = read_mlx_lm(kData + "mlx-lm/m2-ultra-llama-3.1-8b-4bit.txt");
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].at("id"), "run1-pp25");
  EXPECT_EQ(t[0].at("n_prompt"), 25);
  EXPECT_EQ(t[0].at("n_gen"), 0);
  EXPECT_DOUBLE_EQ(t[0].at("avg_ts").get<double>(), 180.302);
  EXPECT_EQ(t[0].at("line"), 5);
  EXPECT_EQ(t[3].at("id"), "run2-tg256@d2048");
  EXPECT_EQ(t[3].at("n_prompt"), 0);
  EXPECT_EQ(t[3].at("n_gen"), 256);
  EXPECT_EQ(t[3].at("n_depth"), 2048);
  EXPECT_DOUBLE_EQ(t[3].at("avg_ts").get<double>(), 84.112);
  EXPECT_DOUBLE_EQ(t[5].at("avg_ts").get<double>(), 71.35);
}

// mlx_lm.benchmark's output: each Averages line is a run (its Timing line's prompt at depth 0 and the
// generated tokens after it), the Trial lines are skipped, and PR #396's older Timing line ("... and
// generation_tokens=G.") reads the same.
TEST(CalibrateBenchText, MlxLmBenchmarkAveragesAreRuns) {
  const nlohmann::json t = read_mlx_lm(kData + "mlx-lm/m4-max-qwen3-4b-q4-benchmark.txt");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].at("id"), "run1-pp2048");
  EXPECT_EQ(t[0].at("n_prompt"), 2048);
  EXPECT_EQ(t[0].at("n_depth"), 0);
  EXPECT_DOUBLE_EQ(t[0].at("avg_ts").get<double>(), 1622.27);
  EXPECT_EQ(t[0].at("line"), 3);
  EXPECT_EQ(t[1].at("id"), "run1-tg128@d2048");
  EXPECT_EQ(t[1].at("n_gen"), 128);
  EXPECT_EQ(t[1].at("n_depth"), 2048);
  EXPECT_DOUBLE_EQ(t[1].at("avg_ts").get<double>(), 134.52);
  const nlohmann::json pr = read_mlx_lm(kData + "mlx-lm/pr396-benchmark-output.txt");
  ASSERT_EQ(pr.size(), 2u);
  EXPECT_EQ(pr[1].at("id"), "run1-tg128@d2048");
  EXPECT_DOUBLE_EQ(pr[1].at("avg_ts").get<double>(), 205.099);
  EXPECT_EQ(pr[1].at("line"), 8);
}

// A batch above 1 (batch_generate's totals), an Averages line before any Timing line, a Timing line left
// without its Averages and an Averages line that is not the script's are refused, each naming its line.
TEST(CalibrateBenchText, MlxLmBenchmarkBadInputNamesTheLine) {
  const moesim::test::TestDir dir("moesim_bench_text");
  const std::string batch = moesim::test::error_of([&] {
    (void)read_mlx_lm(dir.write("b.txt",
                                "Timing with prompt_tokens=128, generation_tokens=128, batch_size=32.\n"
                                "Averages: prompt_tps=2317.876, generation_tps=809.770, peak_memory=6.375\n"));
  });
  EXPECT_NE(batch.find("line 1: batch_size 32"), std::string::npos) << batch;
  const std::string orphan = moesim::test::error_of([&] {
    (void)read_mlx_lm(dir.write("o.txt", "Averages: prompt_tps=1.0, generation_tps=2.0, peak_memory=3.0\n"));
  });
  EXPECT_NE(orphan.find("line 1: an Averages line with no Timing line"), std::string::npos) << orphan;
  const std::string cut = moesim::test::error_of([&] {
    (void)read_mlx_lm(dir.write("c.txt", "Timing with prompt_tokens=128, generation_tokens=128, batch_size=1.\n"));
  });
  EXPECT_NE(cut.find("line 1: a Timing line with no Averages line"), std::string::npos) << cut;
  const std::string bad = moesim::test::error_of([&] {
    (void)read_mlx_lm(dir.write("x.txt",
                                "Timing with prompt_tokens=128, generation_tokens=128, batch_size=1.\n"
                                "Averages: prompt_tps=fast, generation_tps=2.0\n"));
  });
  EXPECT_NE(bad.find("line 2"), std::string::npos) << bad;
  EXPECT_NE(bad.find("mlx_lm.benchmark"), std::string::npos) << bad;
}

// Generated text that starts like a figure line is text, not a figure nor an error.
TEST(CalibrateBenchText, MlxLmGeneratedTextIsSkipped) {
  const moesim::test::TestDir dir("moesim_bench_text");
  const nlohmann::json t =
      read_mlx_lm(dir.write("mlx-text.txt",
                            "==========\nPrompt: write a haiku\nGeneration: of models, fast\n"
                            "==========\nPrompt: 12 tokens, 50.000 tokens-per-sec\n"
                            "Generation: 8 tokens, 20.000 tokens-per-sec\nPeak memory: 1.000 GB\n"));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].at("line"), 5);
  EXPECT_DOUBLE_EQ(t[1].at("avg_ts").get<double>(), 20.0);
}

TEST(CalibrateBenchText, MlxLmBadInputNamesTheLine) {
  const moesim::test::TestDir dir("moesim_bench_text");
  const std::string e = moesim::test::error_of(
      [&] { (void)read_mlx_lm(dir.write("mlx-gen-first.txt", "text\nGeneration: 3 tokens, 1.0 tokens-per-sec\n")); });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("no Prompt line"), std::string::npos) << e;
  const std::string b = moesim::test::error_of([&] {
    (void)read_mlx_lm(dir.write("mlx-batch.txt", "[batch_generate] Prompt: 3 tokens, 1.0 tokens-per-sec\n"));
  });
  EXPECT_NE(b.find("batch_generate"), std::string::npos) << b;
  const std::string none = moesim::test::error_of([&] { (void)read_mlx_lm(dir.write("mlx-none.txt", "hello\n")); });
  EXPECT_NE(none.find("--verbose"), std::string::npos) << none;
}

// B = 1: prefill and decode at depth PP; B > 1: batched decode and batched prefill (n_seqs B), or a note
// for the S_PP of a table with is_pp_shared; every test carries the main: line's n_ubatch.
TEST(CalibrateBenchText, BatchedBenchRowsAsLlamaBenchTests) {
  const std::string file = kData + "llama-batched-bench/qwen2.5-coder-7b-q8_0-metal.txt";
  const auto count = [](const nlohmann::json& t) {
    std::map<std::string, std::size_t> n;
    for (const auto& x : t) {
      if (x.contains("skip")) {
        ++n["skipped"];
        continue;
      }
      EXPECT_EQ(x.at("n_ubatch"), 2048);
      const bool one = !x.contains("n_seqs") || x.at("n_seqs") == 1;
      ++n[std::string(x.at("n_gen") == 0 ? "prefill" : "decode") + (one ? "" : " batched")];
    }
    return n;
  };
  const nlohmann::json t = read_llama_batched_bench(file);
  using Counts = std::map<std::string, std::size_t>;
  EXPECT_EQ(count(t), (Counts{{"prefill", 2}, {"decode", 2}, {"prefill batched", 4}, {"decode batched", 4}}));
  const nlohmann::json* b2 = nullptr;
  for (const auto& x : t)
    if (x.value("id", "") == "pp512-tg32-b2:prefill") b2 = &x;
  ASSERT_NE(b2, nullptr);
  EXPECT_EQ(b2->at("n_prompt"), 512);
  EXPECT_EQ(b2->at("n_seqs"), 2);
  EXPECT_DOUBLE_EQ(b2->at("avg_ts").get<double>(), 1603.62);
  const moesim::test::TestDir dir("moesim_bench_text");
  std::string text = moesim::test::slurp(file);
  text.replace(text.find("is_pp_shared = 0"), 16, "is_pp_shared = 1");
  EXPECT_EQ(count(read_llama_batched_bench(dir.write("shared.txt", text))),
            (Counts{{"prefill", 2}, {"decode", 2}, {"decode batched", 4}, {"skipped", 4}}));
  EXPECT_EQ(t[0].at("id"), "pp512-tg32-b1:prefill");
  EXPECT_DOUBLE_EQ(t[0].at("avg_ts").get<double>(), 1518.90);
  EXPECT_EQ(t[1].at("n_depth"), 512);
  EXPECT_DOUBLE_EQ(t[1].at("avg_ts").get<double>(), 79.04);
  EXPECT_EQ(t[1].at("line"), 6);
}

// `--output-format jsonl` prints the same rows as one JSON object each, the settings inside every line and
// no main: line: the same tests come out as from the table, each on its own line.
TEST(CalibrateBenchText, BatchedBenchJsonlReadsAsTheTable) {
  const nlohmann::json table = read_llama_batched_bench(kData + "llama-batched-bench/qwen2.5-coder-7b-q8_0-metal.txt");
  const nlohmann::json jsonl =
      read_llama_batched_bench(kData + "llama-batched-bench/qwen2.5-coder-7b-q8_0-metal.jsonl");
  ASSERT_EQ(jsonl.size(), table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    nlohmann::json a = table[i], b = jsonl[i];
    EXPECT_EQ(b.at("line").get<std::size_t>(), i / 2 + 1) << b.dump();  // two tests a row, one row a line
    a.erase("line");
    b.erase("line");
    EXPECT_EQ(a, b) << "test " << i;
  }
  const moesim::test::TestDir dir("moesim_bench_text");
  std::string text = moesim::test::slurp(kData + "llama-batched-bench/qwen2.5-coder-7b-q8_0-metal.jsonl");
  for (auto at = text.find("\"is_pp_shared\": 0"); at != std::string::npos; at = text.find("\"is_pp_shared\": 0"))
    text.replace(at, 17, "\"is_pp_shared\": 1");
  std::size_t skipped = 0;
  for (const auto& x : read_llama_batched_bench(dir.write("shared.jsonl", text))) skipped += x.contains("skip");
  EXPECT_EQ(skipped, 4u);  // B = 2 and 4 at both prompts: their prefill is one prompt copied
}

TEST(CalibrateBenchText, BatchedBenchJsonlBadInputNamesTheLineAndKey) {
  const moesim::test::TestDir dir("moesim_bench_text");
  const std::string good =
      R"({"n_ubatch": 512, "is_pp_shared": 0, "pp": 512, "tg": 32, "pl": 1, "speed_pp": 900.5, "speed_tg": 40.25})";
  const auto error_for = [&](const std::string& name, const std::string& second) {
    return moesim::test::error_of(
        [&] { (void)read_llama_batched_bench(dir.write(name, good + "\n" + second + "\n")); });
  };
  const std::string missing =
      error_for("bb-missing.jsonl", R"({"n_ubatch": 512, "pp": 512, "tg": 32, "pl": 1, "speed_pp": 9})");
  EXPECT_NE(missing.find("line 2"), std::string::npos) << missing;
  EXPECT_NE(missing.find("\"speed_tg\": missing"), std::string::npos) << missing;
  const std::string zero = error_for("bb-pl.jsonl", R"({"n_ubatch": 512, "pp": 0, "tg": 32, "pl": 0, "speed_tg": 9})");
  EXPECT_NE(zero.find("\"pl\""), std::string::npos) << zero;
  const std::string rate =
      error_for("bb-rate.jsonl", R"({"n_ubatch": 512, "pp": 512, "tg": 0, "pl": 2, "speed_pp": -1})");
  EXPECT_NE(rate.find("\"speed_pp\": not a positive tokens/s figure"), std::string::npos) << rate;
  const std::string ubatch = error_for("bb-ub.jsonl", R"({"n_ubatch": 0, "pp": 512, "tg": 0, "pl": 1, "speed_pp": 9})");
  EXPECT_NE(ubatch.find("\"n_ubatch\""), std::string::npos) << ubatch;
  const std::string cut = error_for("bb-cut.jsonl", R"({"n_ubatch": 512, "pp": 512, "tg": 32, "pl": 1, "speed_pp)");
  EXPECT_NE(cut.find("line 2: not a JSON object"), std::string::npos) << cut;
  // The first line alone reads: a prefill and a decode.
  const std::string only = good + "\n";
  EXPECT_EQ(read_llama_batched_bench(dir.write("bb-one.jsonl", only)).size(), 2u);
}

TEST(CalibrateBenchText, BatchedBenchBadInputNamesTheLine) {
  const moesim::test::TestDir dir("moesim_bench_text");
  const std::string header =
      "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n";
  const std::string e = moesim::test::error_of([&] {
    (void)read_llama_batched_bench(dir.write(
        "bb-cols.txt", "main: n_kv_max = 1, n_batch = 1, n_ubatch = 512\n" + header + "|---|---|\n| 512 | 32 | 1 |\n"));
  });
  EXPECT_NE(e.find("line 4"), std::string::npos) << e;
  EXPECT_NE(e.find("columns"), std::string::npos) << e;
  const std::string u = moesim::test::error_of([&] {
    (void)read_llama_batched_bench(dir.write("bb-ub.txt", "main: n_kv_max = 1, n_batch = 1, n_ubatch = x\n" + header));
  });
  EXPECT_NE(u.find("line 1"), std::string::npos) << u;
  EXPECT_NE(u.find("n_ubatch"), std::string::npos) << u;
}

}  // namespace
