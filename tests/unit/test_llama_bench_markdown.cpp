// llama-bench's default markdown table read like its `-o json` output (calibrate/bench_import.hpp): the
// fixture tests/data/llama-bench/m2-ultra-llama3-8b.md holds the same tests as the .json beside it.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/bench_import.hpp"

namespace {

using moesim::calibrate::read_llama_bench;

const std::string kBenchData = std::string(MOESIM_SOURCE_DIR) + "/tests/data/llama-bench/";

std::string error_reading_markdown(const std::string& text) {
  const moesim::test::TestDir dir("moesim_llama_bench");
  const std::string path = dir.write("bad.md", text);
  return moesim::test::error_of([&] { (void)read_llama_bench(path); });
}

TEST(LlamaBenchMarkdown, SameTestsAsTheJson) {
  const nlohmann::json md = read_llama_bench(kBenchData + "m2-ultra-llama3-8b.md");
  const nlohmann::json js = read_llama_bench(kBenchData + "m2-ultra-llama3-8b.json");
  ASSERT_EQ(md.size(), js.size());
  for (std::size_t i = 0; i < md.size(); ++i) {
    for (const char* key : {"model_type", "n_prompt", "n_gen", "n_depth"})
      EXPECT_EQ(md[i].at(key), js[i].at(key)) << i << key;
    // The table prints t/s with two decimals.
    EXPECT_NEAR(md[i].at("avg_ts").get<double>(), js[i].at("avg_ts").get<double>(), 0.005) << i;
  }
}

TEST(LlamaBenchMarkdown, RefusesWhatLlamaBenchDidNotWrite) {
  const std::string header =
      "| model | size | params | backend | ngl | test | t/s |\n| --- | ---: | ---: | --- | --: | ---: | ---: |\n";
  EXPECT_NE(error_reading_markdown("| model | test |\n| --- | --- |\n| llama 8B F16 | tg32 |\n").find("\"t/s\" column"),
            std::string::npos);
  EXPECT_NE(error_reading_markdown(header + "| llama 8B F16 | 1 GiB | 8 B | Metal | 99 | xx32 | 1.0 ± 0.0 |\n")
                .find("column test"),
            std::string::npos);
  EXPECT_NE(
      error_reading_markdown(header + "| llama 8B F16 | 1 GiB | 8 B | Metal | 99 | tg32 | fast |\n").find("column t/s"),
      std::string::npos);
  EXPECT_NE(error_reading_markdown(header + "| llama 8B F16 | 1 GiB | 99 | tg32 | 1.0 ± 0.0 |\n").find("columns"),
            std::string::npos);
  EXPECT_NE(error_reading_markdown("hello\n").find("neither a JSON array nor a markdown table"), std::string::npos);
  // pp+tg and depth are parsed into their parts.
  const moesim::test::TestDir dir("moesim_llama_bench");
  const std::string path =
      dir.write("ok.md", header + "| llama 8B F16 | 1 GiB | 8 B | Metal | 99 | pp512+tg128 @ d4096 | 12.50 ± 0.10 |\n");
  const nlohmann::json j = read_llama_bench(path);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].at("n_prompt"), 512);
  EXPECT_EQ(j[0].at("n_gen"), 128);
  EXPECT_EQ(j[0].at("n_depth"), 4096);
  EXPECT_DOUBLE_EQ(j[0].at("avg_ts").get<double>(), 12.5);
  EXPECT_FALSE(j[0].contains("n_ubatch"));  // not printed: llama-bench's default, which the runtime knows

  // A non-default micro-batch is printed in its own column (llama.cpp PR #15616's tables: "n_ubatch 2048").
  const std::string ub_header =
      "| model | size | params | backend | ngl | n_ubatch | test | t/s |\n"
      "| --- | ---: | ---: | --- | --: | ---: | ---: | ---: |\n";
  std::ofstream(path) << ub_header
                      << "| qwen3moe 30B.A3B Q8_0 | 30 GiB | 30 B | Metal | 99 | 2048 | pp512 | 2045.19 ± 10.70 |\n";
  EXPECT_EQ(read_llama_bench(path).at(0).at("n_ubatch"), 2048);
  EXPECT_NE(
      error_reading_markdown(ub_header + "| llama 8B F16 | 1 GiB | 8 B | Metal | 99 | big | pp512 | 1.0 ± 0.0 |\n")
          .find("column n_ubatch"),
      std::string::npos);
}

}  // namespace
