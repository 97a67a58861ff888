// The text outputs of mlx-lm's and llama.cpp's own benchmarks read as llama-bench tests
// (calibrate/bench_import.hpp), so one import path (calibrate::run_llama_bench) predicts and fits them.
//
// mlx_lm.generate --verbose (the default of `mlx_lm.generate` and `python -m mlx_lm generate`): after the
// generated text and a "==========" line, mlx_lm/generate.py generate() prints (ml-explore/mlx-lm commit
// d78bf58e217c904ec282ed8da9b947491f78c022)
//   Prompt: {prompt_tokens} tokens, {prompt_tps:.3f} tokens-per-sec
//   Generation: {generation_tokens} tokens, {generation_tps:.3f} tokens-per-sec
//   Peak memory: {peak_memory:.3f} GB
// where stream_generate() times the prompt (prefill_step_size 2048 tokens a step, up to the first token)
// and the generated tokens apart. batch_generate() prints the same lines prefixed "[batch_generate] ",
// totals over a batch of prompts: refused.
//
// mlx_lm.benchmark (mlx_lm/benchmark.py at a4c64703906f709a493341508ac31af4085d2638, the command of mlx-lm's
// own mlx_lm/BENCHMARKS.md; PR #396 printed the same lines without the batch size) times the same
// stream_generate() runs of random prompt tokens and prints
//   Timing with prompt_tokens={P}, generation_tokens={G}, batch_size={B}.
//   Trial {i}:  prompt_tps={x:.3f}, generation_tps={y:.3f}, peak_memory={m:.3f}     (one line per trial)
//   Averages: prompt_tps={x:.3f}, generation_tps={y:.3f}, peak_memory={m:.3f}
// The Averages line is the run's figures; at batch_size > 1 they are batch_generate()'s totals: refused.
//
// llama-batched-bench (ggml-org/llama.cpp tools/batched-bench/batched-bench.cpp, commit
// 0a1f01792b770ef0f41729956665880e109b2660) prints
//   main: n_kv_max = %d, n_batch = %d, n_ubatch = %d, flash_attn = %d, is_pp_shared = %d, n_gpu_layers = %d,
//         n_threads = %u, n_threads_batch = %u                                    (one line)
//   |%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |   PP, TG, B, N_KV, T_PP s, S_PP t/s, T_TG s,
//                                                                     S_TG t/s, T s, S t/s
//   |%6s-|-%6s-|-...                                                  (dashes)
//   |%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |   one row per (PP, TG, B)
// S_PP = B * PP / T_PP (PP / T_PP with is_pp_shared), S_TG = B * TG / T_TG: each of the TG steps decodes
// one token of all B sequences at position PP + i. With --output-format jsonl (common/arg.cpp) it prints
// neither the main: line nor the table but one JSON object per row, the settings and the row together
// (batched_bench_json_row below).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_import_detail.hpp"
#include "moesim/calibrate/bench_import.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/text.hpp"

namespace moesim::calibrate {
namespace {

using bench_import_detail::trim;

/// The whole of `s` as a number of type T, or nullopt.
template <typename T>
std::optional<T> number(std::string_view s) {
  T v{};
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

/// "<N> tokens, <X> tokens-per-sec" (after "Prompt: " or "Generation: "): {N, X}, or nullopt.
std::optional<std::pair<std::int64_t, double>> tokens_at_rate(std::string_view s) {
  const auto comma = s.find(" tokens, ");
  const std::string_view suffix = " tokens-per-sec";
  if (comma == std::string_view::npos || !s.ends_with(suffix)) return std::nullopt;
  const auto n = number<std::int64_t>(s.substr(0, comma));
  const auto rate = number<double>(s.substr(comma + 9, s.size() - suffix.size() - comma - 9));
  if (!n || !rate || *n < 1 || !(*rate > 0) || !std::isfinite(*rate)) return std::nullopt;
  return std::make_pair(*n, *rate);
}

/// The "name=value" pairs of an mlx_lm.benchmark line's `rest` ("prompt_tokens=2048, generation_tokens=128,
/// batch_size=1" or "prompt_tokens=2048 and generation_tokens=128"; "prompt_tps=..., generation_tps=...,
/// peak_memory=..."), each value a finite number >= 0; nullopt where a part is not one.
std::optional<std::map<std::string, double>> benchmark_fields(std::string rest) {
  if (rest.ends_with(".")) rest.pop_back();
  for (std::size_t at = rest.find(" and "); at != std::string::npos; at = rest.find(" and ")) rest.replace(at, 5, ",");
  std::map<std::string, double> out;
  for (const auto& part : text::split(rest, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const auto v = number<double>(trim(part.substr(eq + 1)));
    if (!v || !std::isfinite(*v) || *v < 0) return std::nullopt;
    out[trim(part.substr(0, eq))] = *v;
  }
  return out;
}

/// One mlx-lm run as two llama-bench tests: the prompt at depth 0 (its rate: the prompt's tokens over the
/// time to the first token) and the generated tokens after it, as llama-bench's tg at n_depth = the prompt
/// (the validation rows' mean context: depth + generated / 2); each with the line its figure stands on.
void push_run(nlohmann::json& out, std::size_t run, std::int64_t prompt, double prompt_rate, std::size_t prompt_line,
              std::int64_t gen, double gen_rate, std::size_t gen_line) {
  const std::string id = "run" + std::to_string(run) + "-";
  out.push_back({{"id", id + "pp" + std::to_string(prompt)},
                 {"n_prompt", prompt},
                 {"n_gen", 0},
                 {"n_depth", 0},
                 {"avg_ts", prompt_rate},
                 {"line", prompt_line}});
  out.push_back({{"id", id + "tg" + std::to_string(gen) + "@d" + std::to_string(prompt)},
                 {"n_prompt", 0},
                 {"n_gen", gen},
                 {"n_depth", prompt},
                 {"avg_ts", gen_rate},
                 {"line", gen_line}});
}

}  // namespace

nlohmann::json read_mlx_lm(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = read_input_file(path, 4.0, "reading it as mlx_lm.generate output");
  const std::vector<std::string> lines = text::split(text, '\n');
  const std::string fix =
      "; give the lines `mlx_lm.generate --verbose True` prints after the text, as it printed them "
      "(\"Prompt: N tokens, X tokens-per-sec\", then \"Generation: N tokens, X tokens-per-sec\"), or "
      "`mlx_lm.benchmark`'s output (\"Timing with prompt_tokens=P, generation_tokens=G, batch_size=1.\", then "
      "\"Averages: prompt_tps=X, generation_tps=Y, peak_memory=M\")";
  nlohmann::json out = nlohmann::json::array();
  // The run's Prompt line (tokens, tokens/s, line), until its Generation line; plain values, as GCC 12
  // sees an optional pair as maybe uninitialised here.
  bool have_prompt = false;
  std::int64_t prompt_tokens = 0;
  double prompt_rate = 0;
  std::size_t prompt_line = 0, runs = 0;
  // mlx_lm.benchmark: its Timing line's counts, until its Averages line.
  bool have_timing = false;
  std::int64_t timing_prompt = 0, timing_gen = 0;
  std::size_t timing_line = 0;
  std::string previous;        // the last non-empty line
  std::size_t separators = 0;  // "==========" lines so far: generate() prints one before and one after the text
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string l = trim(lines[i]);
    const std::string before = previous;
    if (!l.empty()) previous = l;
    if (l == "==========") ++separators;
    const std::string where = file + ": line " + std::to_string(i + 1);
    if (l.starts_with("[batch_generate]"))
      throw UserError(where + ": \"" + text::one_line(l) +
                      "\" is batch_generate's total over a batch of prompts, not one request's figures" + fix);
    if (l.starts_with("Timing with ") || l.starts_with("Averages:")) {
      const bool timing = l.starts_with("Timing with ");
      const auto f = benchmark_fields(l.substr(timing ? 12 : 9));
      const char* need[2][2] = {{"prompt_tps", "generation_tps"}, {"prompt_tokens", "generation_tokens"}};
      if (!f || !f->count(need[timing][0]) || !f->count(need[timing][1]))
        throw UserError(where + ": \"" + text::one_line(l) + "\" is not mlx_lm.benchmark's \"" +
                        (timing ? "Timing with prompt_tokens=P, generation_tokens=G, batch_size=B."
                                : "Averages: prompt_tps=X, generation_tps=Y, peak_memory=M") +
                        "\"" + fix);
      if (timing) {
        if (have_timing)
          throw UserError(file + ": line " + std::to_string(timing_line) +
                          ": a Timing line with no Averages line after it (a run cut short?)" + fix);
        const double b = f->count("batch_size") ? f->at("batch_size") : 1.0;
        if (b != 1.0)
          throw UserError(where + ": batch_size " + text::printf("%g", b) +
                          ": mlx_lm.benchmark's figures at a batch size above 1 are batch_generate()'s totals over "
                          "the batch, not one request's" +
                          fix);
        const double p = f->at("prompt_tokens"), g = f->at("generation_tokens");
        if (p < 1 || g < 1 || p != std::floor(p) || g != std::floor(g) || p > (1 << 30) || g > (1 << 30))
          throw UserError(where + ": prompt_tokens and generation_tokens must be whole counts from 1" + fix);
        have_timing = true;
        timing_prompt = static_cast<std::int64_t>(p);
        timing_gen = static_cast<std::int64_t>(g);
        timing_line = i + 1;
        continue;
      }
      if (!have_timing) throw UserError(where + ": an Averages line with no Timing line before it" + fix);
      if (!(f->at("prompt_tps") > 0) || !(f->at("generation_tps") > 0))
        throw UserError(where + ": prompt_tps and generation_tps must be positive tokens/s" + fix);
      // As a generate() run (prompt_tps is P over the time to the first token there too).
      push_run(out, ++runs, timing_prompt, f->at("prompt_tps"), i + 1, timing_gen, f->at("generation_tps"), i + 1);
      have_timing = false;
      continue;
    }
    const bool is_prompt = l.starts_with("Prompt:"), is_gen = l.starts_with("Generation:");
    if (!is_prompt && !is_gen) continue;  // the generated text, "==========", "Peak memory: ...", "Trial k: ..."
    const auto figures = tokens_at_rate(trim(std::string_view(l).substr(is_prompt ? 7 : 11)));
    // Where mlx-lm prints its figures (the Prompt line after the "==========" that closes the text, or at
    // the top of a file of figures alone; the Generation line after a Prompt line) a line that does not
    // parse is an error; elsewhere it is generated text that happens to start so.
    const bool in_place = is_prompt ? before.empty() || (before == "==========" && separators % 2 == 0) : have_prompt;
    if (!figures && !in_place) continue;
    if (!figures)
      throw UserError(where + ": \"" + text::one_line(l) + "\" is not mlx-lm's \"" +
                      (is_prompt ? "Prompt" : "Generation") + ": <tokens> tokens, <rate> tokens-per-sec\"" + fix);
    if (is_prompt) {
      if (have_prompt)
        throw UserError(file + ": line " + std::to_string(prompt_line) +
                        ": a Prompt line with no Generation line after it (a run cut short?)" + fix);
      have_prompt = true;
      prompt_tokens = figures->first;
      prompt_rate = figures->second;
      prompt_line = i + 1;
      continue;
    }
    if (!have_prompt) throw UserError(where + ": a Generation line with no Prompt line before it" + fix);
    push_run(out, ++runs, prompt_tokens, prompt_rate, prompt_line, figures->first, figures->second, i + 1);
    have_prompt = false;
  }
  if (have_prompt)
    throw UserError(file + ": line " + std::to_string(prompt_line) +
                    ": a Prompt line with no Generation line after it (a run cut short?)" + fix);
  if (have_timing)
    throw UserError(file + ": line " + std::to_string(timing_line) +
                    ": a Timing line with no Averages line after it (a run cut short?)" + fix);
  if (out.empty())
    throw UserError(file + ": no \"Prompt: N tokens, X tokens-per-sec\" or \"Averages: prompt_tps=...\" line" + fix);
  return out;
}

namespace {

constexpr std::int64_t kMaxBatchedBenchCount = std::int64_t{1} << 30;  ///< PP, TG, B: at most 2^30
constexpr std::int64_t kMaxUbatch = std::int64_t{1} << 24;             ///< n_ubatch: at most 2^24

/// The "main: n_kv_max = ..., n_ubatch = ..., is_pp_shared = ..." line's settings by name.
std::map<std::string, std::int64_t> batched_bench_settings(const std::string& line, const std::string& where) {
  std::map<std::string, std::int64_t> out;
  for (const auto& part : text::split(line.substr(line.find("n_kv_max")), ',')) {
    const auto eq = part.find('=');
    const auto v = eq == std::string::npos ? std::nullopt : number<std::int64_t>(trim(part.substr(eq + 1)));
    if (!v)
      throw UserError(
          where + ": \"" + text::one_line(trim(part)) +
          "\" is not llama-batched-bench's \"<setting> = <integer>\"; give its main: line as it printed it");
    out[trim(part.substr(0, eq))] = *v;
  }
  if (!out.count("n_ubatch") || out.at("n_ubatch") < 1 || out.at("n_ubatch") > kMaxUbatch)
    throw UserError(where + ": the main: line gives no n_ubatch from 1 to 16777216 (the prompt's micro-batch)");
  return out;
}

/// One row of llama-batched-bench's output, from its table or its --output-format jsonl line.
struct BatchedBenchRow {
  std::int64_t pp = 0, tg = 0, b = 1;
  std::int64_t ubatch = 0;    ///< the prompt's micro-batch (n_ubatch)
  bool pp_shared = false;     ///< is_pp_shared: one prompt prefilled, then copied to the other sequences
  double s_pp = 0, s_tg = 0;  ///< tokens/s (read where pp > 0, tg > 0)
};

/// One row as llama-bench tests (bench_import.hpp read_llama_batched_bench).
void batched_bench_tests(const BatchedBenchRow& r, std::size_t line, nlohmann::json& out) {
  const std::string id = "pp" + std::to_string(r.pp) + "-tg" + std::to_string(r.tg) + "-b" + std::to_string(r.b);
  if (r.b > 1 && r.pp > 0 && r.pp_shared) {
    out.push_back({{"skip",
                    "llama-batched-bench S_PP at B > 1 with is_pp_shared (one prompt prefilled, then copied to "
                    "the other sequences): not used, the batch-1 prefill of the same PP measures it"}});
  } else if (r.pp > 0) {
    // Batch 1: PP tokens from an empty cache, n_ubatch at a time; B > 1: B prompts of PP tokens sent
    // together, packed n_ubatch at a time (batched prefill).
    nlohmann::json t = {{"id", id + ":prefill"}, {"n_prompt", r.pp},     {"n_gen", 0},  {"n_depth", 0},
                        {"avg_ts", r.s_pp},      {"n_ubatch", r.ubatch}, {"line", line}};
    if (r.b > 1) t["n_seqs"] = r.b;
    out.push_back(std::move(t));
  }
  if (r.tg > 0)  // decode: TG steps after the prompt, B sequences each (batch 1: llama-bench's tg at n_depth PP)
    out.push_back({{"id", id + ":decode"},
                   {"n_prompt", r.b > 1 ? r.pp : 0},
                   {"n_gen", r.tg},
                   {"n_depth", r.b > 1 ? 0 : r.pp},
                   {"n_seqs", r.b},
                   {"avg_ts", r.s_tg},
                   {"n_ubatch", r.ubatch},
                   {"line", line}});
}

/// A row of llama-batched-bench's table (its header's columns `header`, cells `c`).
BatchedBenchRow batched_bench_table_row(const std::vector<std::string>& header, const std::vector<std::string>& c,
                                        const std::map<std::string, std::int64_t>& settings, const std::string& where) {
  const auto cell = [&](const char* name) -> const std::string& {
    return c[static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin())];
  };
  const auto whole = [&](const char* name, std::int64_t min) {
    const auto v = number<std::int64_t>(cell(name));
    if (!v || *v < min || *v > kMaxBatchedBenchCount)
      throw UserError(where + ", column " + name + ": \"" + text::one_line(cell(name)) + "\" is not a count from " +
                      std::to_string(min) + "; was the table edited?");
    return *v;
  };
  const auto rate = [&](const char* name) {
    const auto v = number<double>(cell(name));
    if (!v || !(*v > 0) || !std::isfinite(*v))
      throw UserError(where + ", column " + name + ": \"" + text::one_line(cell(name)) +
                      "\" is not a positive tokens/s figure; was the table edited?");
    return *v;
  };
  BatchedBenchRow r;
  r.pp = whole("PP", 0);
  r.tg = whole("TG", 0);
  r.b = whole("B", 1);
  r.ubatch = settings.at("n_ubatch");
  const auto shared = settings.find("is_pp_shared");
  r.pp_shared = shared != settings.end() && shared->second != 0;
  if (r.pp > 0) r.s_pp = rate("S_PP t/s");
  if (r.tg > 0) r.s_tg = rate("S_TG t/s");
  return r;
}

/// A line of `llama-batched-bench --output-format jsonl` (batched-bench.cpp prints one per (PP, TG, B):
/// {"n_kv_max": .., "n_batch": .., "n_ubatch": .., "flash_attn": .., "is_pp_shared": .., "n_gpu_layers": ..,
/// "n_threads": .., "n_threads_batch": .., "pp": .., "tg": .., "pl": .., "n_kv": .., "t_pp": .., "speed_pp": ..,
/// "t_tg": .., "speed_tg": .., "t": .., "speed": ..}; pl is the table's B, speed_pp and speed_tg its S_PP and
/// S_TG). Keys it does not use (a later build's extra settings) are left alone.
BatchedBenchRow batched_bench_json_row(const std::string& line, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  const std::string fix = "; give llama-batched-bench --output-format jsonl's lines as it printed them";
  if (!j.is_object()) throw UserError(where + ": not a JSON object" + fix);
  const auto whole = [&](const char* key, std::int64_t min, std::int64_t max) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<std::int64_t>() < min || it->get<std::int64_t>() > max)
      throw UserError(where + ", key \"" + key + "\": " + (it == j.end() ? "missing" : "not a count") +
                      " (a count from " + std::to_string(min) + " to " + std::to_string(max) + ")" + fix);
    return it->get<std::int64_t>();
  };
  const auto rate = [&](const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
      throw UserError(where + ", key \"" + key +
                      "\": " + (it == j.end() ? "missing" : "not a positive tokens/s figure") + fix);
    return it->get<double>();
  };
  BatchedBenchRow r;
  r.pp = whole("pp", 0, kMaxBatchedBenchCount);
  r.tg = whole("tg", 0, kMaxBatchedBenchCount);
  r.b = whole("pl", 1, kMaxBatchedBenchCount);
  r.ubatch = whole("n_ubatch", 1, kMaxUbatch);
  r.pp_shared = j.contains("is_pp_shared") && whole("is_pp_shared", 0, 1) != 0;
  if (r.pp > 0) r.s_pp = rate("speed_pp");
  if (r.tg > 0) r.s_tg = rate("speed_tg");
  return r;
}

}  // namespace

nlohmann::json read_llama_batched_bench(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = read_input_file(path, 4.0, "reading it as llama-batched-bench output");
  const std::vector<std::string> lines = text::split(text, '\n');
  std::optional<std::map<std::string, std::int64_t>> settings;  // the last main: line's
  std::vector<std::string> header;                              // the current table's
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string l = trim(lines[i]);
    const std::string where = file + ": line " + std::to_string(i + 1);
    if (l.find("n_kv_max =") != std::string::npos && l.find("n_ubatch") != std::string::npos) {
      settings = batched_bench_settings(l, where);
      continue;
    }
    if (!l.empty() && l.front() == '{') {  // --output-format jsonl: one object per row, no main: line
      header.clear();
      batched_bench_tests(batched_bench_json_row(l, where), i + 1, out);
      continue;
    }
    if (l.empty() || l.front() != '|') {
      header.clear();  // a table ends (llama_perf_context_print's lines follow it)
      continue;
    }
    const std::vector<std::string> c = bench_import_detail::cells(l);
    if (header.empty()) {
      for (const char* name : {"PP", "TG", "B", "S_PP t/s", "S_TG t/s"})
        if (std::find(c.begin(), c.end(), name) == c.end())
          throw UserError(where + ": the table has no \"" + name +
                          "\" column; give llama-batched-bench's own table (| PP | TG | B | N_KV | T_PP s | S_PP t/s "
                          "| T_TG s | S_TG t/s | T s | S t/s |)");
      if (!settings)
        throw UserError(
            where +
            ": no \"main: n_kv_max = ..., n_ubatch = ...\" line above the table; give llama-batched-bench's "
            "output from that line down (its n_ubatch is the prompt's micro-batch)");
      header = c;
      continue;
    }
    if (bench_import_detail::separator_row(c)) continue;
    if (c.size() != header.size())
      throw UserError(where + ": " + std::to_string(c.size()) + " columns where the header has " +
                      std::to_string(header.size()) + "; was the table cut or edited?");
    batched_bench_tests(batched_bench_table_row(header, c, *settings, where), i + 1, out);
  }
  if (std::none_of(out.begin(), out.end(), [](const nlohmann::json& t) { return t.contains("id"); }))
    throw UserError(file +
                    ": no llama-batched-bench table (| PP | TG | B | ... | S_TG t/s | T s | S t/s |) nor "
                    "--output-format jsonl line ({\"pp\": ..., \"speed_tg\": ...}); give its output as it printed it");
  return out;
}

}  // namespace moesim::calibrate
