#pragma once
// The outputs people already produce with their runtimes' own benchmarks, read into moesim (issue 20):
//  - llama-bench (llama.cpp tools/llama-bench): `-o json` (an array of tests) and its default markdown
//    table (`| model | size | params | backend | ngl | test | t/s |`), both read by read_llama_bench;
//  - vLLM's benchmark_serving.py --save-result JSON (calibrate/serving_fit.hpp reads and fits it).
// The formats and their sources: calibrate/FIT.md.

#include <filesystem>
#include <nlohmann/json.hpp>

namespace moesim::calibrate {

/// A llama-bench output file as llama-bench's JSON array of tests: a `-o json` file as it is, or the
/// default markdown table converted test by test into the JSON keys calibrate::run_llama_bench reads
/// (model_type from the model column, n_prompt / n_gen / n_depth from the test column "pp512", "tg128",
/// "pp512+tg128", "tg128 @ d4096", avg_ts from the t/s column "123.45 ± 0.67"). The file is bounded
/// before it is read (read_input_file). UserError naming the file, the line and the column for a table
/// llama-bench did not write.
nlohmann::json read_llama_bench(const std::filesystem::path& path);

}  // namespace moesim::calibrate
