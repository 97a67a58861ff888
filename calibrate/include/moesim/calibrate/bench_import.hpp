#pragma once
// The outputs people already produce with their runtimes' own benchmarks, read into moesim (issue 20):
//  - llama-bench (llama.cpp tools/llama-bench): `-o json` (an array of tests) and its default markdown
//    table (`| model | size | params | backend | ngl | test | t/s |`), both read by read_llama_bench;
//  - mlx-lm's `mlx_lm.generate --verbose` lines ("Prompt: N tokens, X tokens-per-sec", "Generation: ...") and
//    `mlx_lm.benchmark`'s ("Timing with prompt_tokens=P, ...", "Averages: prompt_tps=X, generation_tps=Y, ...")
//    and llama.cpp's llama-batched-bench table, all read as llama-bench tests (read_mlx_lm,
//    read_llama_batched_bench) so that the same import predicts and fits them;
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

/// The runs of `mlx_lm.generate --verbose` output or of `mlx_lm.benchmark` output at batch size 1 (its
/// Averages lines; one or several runs, concatenated) as llama-bench tests:
/// per run a batch-1 prefill (n_prompt = the prompt's tokens at its tokens-per-sec) and a batch-1 decode
/// (n_gen = the generated tokens at n_depth = the prompt), each with "id" ("run<k>-pp<N>", ...) and "line"
/// (where the figure stands in the file). Bounded before it is read; UserError naming the file, the line
/// and the fix for output mlx-lm did not print.
nlohmann::json read_mlx_lm(const std::filesystem::path& path);

/// The rows of llama-batched-bench's table (one or several tables, each after its "main: n_kv_max = ...,
/// n_ubatch = ..." line) as llama-bench tests with "id", "line" and the main: line's n_ubatch: B = 1 rows
/// give a prefill test (PP at S_PP) and a decode test (TG at n_depth PP, S_TG); B > 1 rows a decode test
/// with "n_seqs" B (n_prompt PP, n_gen TG, S_TG), and a {"skip": why} entry for their S_PP (B prompts
/// prefilled together, not priced). UserError naming the file, the line and the fix.
nlohmann::json read_llama_batched_bench(const std::filesystem::path& path);

}  // namespace moesim::calibrate
