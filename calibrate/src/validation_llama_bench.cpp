// `moesim validate --llama-bench FILE`: the tests of llama-bench's output as validation rows, run as a table's.

#include <algorithm>
#include <cctype>
#include <cmath>

#include "moesim/calibrate/bench_import.hpp"
#include "moesim/calibrate/validation.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate {

namespace {

/// The weight format of a llama-bench model_type ("llama 8B Q4_K - Medium", "gpt-oss 120B MXFP4 MoE",
/// "qwen2 7B Q8_0": llama.cpp's llama_model_ftype_name after the architecture and size) as a precision:
/// its first word, lower case, with F16 as fp16. A mixed file type (Q4_K - Medium) is priced as its main
/// block type.
std::string llama_bench_precision(const std::string& model_type, const std::string& where) {
  const std::vector<std::string> words = text::split(model_type, ' ');
  if (words.size() < 3)
    throw UserError(
        where + ": model_type \"" + model_type +
        "\" is not llama-bench's \"<arch> <size> <file type>\"; was the file written by `llama-bench -o json`?");
  std::string f = words[2];
  std::transform(f.begin(), f.end(), f.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (f == "f16") f = "fp16";
  if (f == "f32") f = "fp32";
  // llama_model_ftype_name writes the K-quant medium file types as "Q4_K - Medium": their per-tensor mix.
  if (words.size() >= 5 && words[3] == "-" && words[4] == "Medium" && (f == "q4_k" || f == "q5_k")) f += "_m";
  // A GGUF's "MXFP4 MoE" file type (gpt-oss) keeps MXFP4 for the routed experts only and Q8_0 elsewhere
  // (the size llama-bench prints: gpt-oss-20b 11.27 GiB, validation/mapping.json's format_notes).
  if (f == "mxfp4") f = "mxfp4/q8_0";
  try {
    return model::precision(f).name;
  } catch (const UserError&) {
    throw UserError(where + ": model_type \"" + model_type + "\": file type " + words[2] +
                    " is not a precision moesim prices (see `moesim estimate --help`)");
  }
}

/// The file as llama-bench's tests, by the benchmark that wrote it.
nlohmann::json read_tests(const std::filesystem::path& path, const LlamaBenchImport& in) {
  if (in.format == "mlx-lm") return read_mlx_lm(path);
  if (in.format == "llama-batched-bench") return read_llama_batched_bench(path);
  MOESIM_CHECK(in.format == "llama-bench", "a benchmark format calibrate/bench_import.hpp reads");
  return read_llama_bench(path);  // -o json, or the default markdown table
}

/// The precision of the weights of test `n`: its model_type's (llama-bench), else the import's --precision.
std::string test_precision(const json::Node& n, const LlamaBenchImport& in, const std::string& where,
                           std::string& format) {
  if (n.has("model_type")) {
    const std::string model_type = n.string("model_type");
    format = model_type.substr(model_type.find(' ', model_type.find(' ') + 1) + 1);
    return llama_bench_precision(model_type, where);
  }
  if (in.precision.empty())
    throw UserError(where + ": " + in.format +
                    " output does not name the weights' format; give it with --precision (e.g. q4 for an MLX "
                    "4-bit model, q4_k_m or q8_0 for a GGUF)");
  try {
    format = model::precision(in.precision).name;
  } catch (const UserError& e) {
    throw UserError(std::string("--precision: ") + e.what());
  }
  return format;
}

std::vector<ValidationRow> llama_bench_rows(const std::filesystem::path& path, const LlamaBenchImport& in,
                                            std::map<std::string, std::string>& formats,
                                            std::map<std::string, std::int64_t>& skipped) {
  const nlohmann::json doc = read_tests(path, in);
  const json::Node root(doc, path.string());
  if (!doc.is_array())
    throw root.error("is not llama-bench's JSON output (an array of tests; write it with `llama-bench -o json`)");
  const model::Architecture arch = model::load_model(in.model);
  std::vector<ValidationRow> out;
  std::size_t i = 0;
  for (const auto& t : doc) {
    if (t.is_object() && t.contains("skip")) {  // a figure the reader says is not used, and why
      ++skipped[t["skip"].get<std::string>()];
      continue;
    }
    const json::Node n(t, path.string() + ": $[" + std::to_string(i) + "]");
    // The text formats say the line each test comes from; a JSON file its index.
    const std::string where =
        path.string() + (t.is_object() && t.contains("line") ? ": line " + std::to_string(t["line"].get<std::int64_t>())
                                                             : ": test " + std::to_string(i));
    ++i;
    // The fields of llama.cpp's llama-bench JSON printer (the same names as its SQL output:
    // scripts/compare-llama-bench.py LLAMA_BENCH_DB_FIELDS); the rest are kept out of the fit.
    const std::int64_t prompt = n.integer("n_prompt"), gen = n.integer("n_gen");
    const std::int64_t depth = n.has("n_depth") ? n.integer("n_depth") : 0;
    // llama-batched-bench's B > 1 rows: B sequences of n_prompt tokens decoded n_gen steps together (S_TG),
    // or their B prompts prefilled together (S_PP: n_gen 0).
    const std::int64_t seqs = n.has("n_seqs") ? n.integer("n_seqs") : 1;
    const double ts = n.number("avg_ts");
    if (!(ts > 0) || !std::isfinite(ts)) throw n.error("avg_ts", "must be a positive tokens/s figure");
    if (seqs < 1 || (seqs > 1 && gen < 1 && prompt < 1))
      throw n.error("n_seqs", "must be 1, or more with n_gen > 0 (decode) or n_prompt > 0 (prefill)");
    if (seqs > 1 && gen < 1 && depth > 0)
      throw n.error("n_depth", "must be 0 for a prefill of several sequences (llama-batched-bench's S_PP)");
    if (seqs == 1 && (prompt > 0) == (gen > 0))
      throw UserError(where + ": n_prompt " + std::to_string(prompt) + " and n_gen " + std::to_string(gen) +
                      ": a pp test has only n_prompt, a tg test only n_gen (pg tests mix both and are not read)");
    ValidationRow r;
    const std::string precision = test_precision(n, in, where, r.format);
    formats[r.format] = precision;
    r.id = n.has("id") ? n.string("id")
                       : (gen > 0 ? "tg" + std::to_string(gen) : "pp" + std::to_string(prompt)) +
                             (depth > 0 ? "@d" + std::to_string(depth) : std::string()) + "-" + formats[r.format];
    r.role = arch.is_moe() ? "prediction" : "calibration";
    r.model = in.model;
    r.hardware = in.hw;
    r.hw_family = "user";
    r.runtime = in.runtime;
    r.devices = 1;
    r.batch = seqs;
    r.prompt = prompt;
    r.output = gen;
    r.depth = depth;
    // llama-bench prints the micro-batch it ran with (n_ubatch, default 512); a prompt is computed that
    // many tokens at a time.
    if (n.has("n_ubatch")) {
      r.step_tokens = n.integer("n_ubatch");
      if (*r.step_tokens < 1 || *r.step_tokens > (std::int64_t{1} << 24))
        throw n.error("n_ubatch", "must be a micro-batch size from 1 to 16777216 tokens");
    }
    r.metric = gen > 0 ? "decode_tokens_per_s" : "prefill_tokens_per_s";
    r.unit = "tokens/s";
    r.measured = ts;
    r.source_url = in.source.empty() ? path.string() : in.source;
    r.line = n.has("line") ? n.integer("line") : static_cast<std::int64_t>(i);
    out.push_back(std::move(r));
  }
  if (out.empty()) throw root.error("holds no tests");
  return out;
}

}  // namespace

ValidationResult run_llama_bench(const std::vector<std::filesystem::path>& files,
                                 const std::vector<LlamaBenchImport>& imports, const ValidationOptions& o) {
  MOESIM_CHECK(files.size() == imports.size(), "one import description per llama-bench file");
  validation_detail::Mapping m;
  std::vector<ValidationRow> rows;
  std::map<std::string, std::int64_t> skipped;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string& runtime = imports[f].runtime;
    if (imports[f].format == "mlx-lm") {
      m.prompt_chunk[runtime] = {2048, "mlx-lm's prefill_step_size default (mlx_lm/generate.py generate_step)"};
    } else {
      // llama-bench is llama.cpp: its GGUF matmuls are priced on the 16-bit path (validation/mapping.json's
      // "runtimes" says why, and what that leaves out: MXFP4 on Blackwell's FP4 tensor cores from build 7532),
      // whatever name the user gives the runtime.
      m.native_dtypes[runtime] = {{},
                                  "llama.cpp ggml/src/ggml-cuda/mmq.cuh and ggml-metal: GGUF weights are "
                                  "dequantised into int8 (CUDA MMQ) or half (Metal) tiles; not priced: MXFP4 on "
                                  "Blackwell's FP4 tensor cores from build 7532 (PR #17906)"};
      m.prompt_chunk[runtime] = {512, "llama-bench's default n_ubatch (llama.cpp tools/llama-bench)"};
      m.checkpoint_formats[runtime] = {{{"mxfp4/bf16", "mxfp4/q8_0"}},
                                       "llama.cpp runs gpt-oss from a GGUF whose non-expert tensors are Q8_0 "
                                       "(ggml-org/gpt-oss-*-GGUF, 11.27 / 59.02 GiB)"};
    }
    const model::NodeProfile node = model::load_node(imports[f].hw);
    if (std::none_of(m.hardware.begin(), m.hardware.end(),
                     [&](const validation_detail::Mapping::Hw& h) { return h.hw == node.id; }))
      m.hardware.push_back({imports[f].hw, 1, node.id});
    for (auto& r : llama_bench_rows(files[f], imports[f], m.formats, skipped)) rows.push_back(std::move(r));
  }
  ValidationResult r;
  r.table = files.front();
  validation_detail::run_rows(r, rows, m, o);
  for (const auto& [why, n] : skipped) r.skipped[why] += n;
  return r;
}

}  // namespace moesim::calibrate
