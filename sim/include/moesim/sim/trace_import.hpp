#pragma once
// Importers for the public routing-trace formats of models_and_routing.md §B.1 (`moesim trace convert`).
// None of these files states the number of routed experts, so the caller gives it (from --model or
// --experts); the number of MoE layers and the top-k are read from the data and checked against the model
// when one is given. sim/TRACES.md describes each source format and where its description comes from.
//
//  - moe-selection: the per-query JSON of the Hugging Face dataset core12345/MoE_expert_selection_trace
//    ("Orders in Chaos", arXiv 2510.05497): a JSON array of forward steps; step 0 is the prefill, each later
//    step one decode step. A step is an object keyed by decoder-layer index ("0", "1", ...): null for a
//    dense layer, else one list of top-k expert ids per token of the step.
//  - speculative-moe: the JSON lines of github.com/Mario928/speculative-moe, one record per token and
//    layer: {"problem_id", "layer", "experts", "gating_probs", "token_idx"} (+ "dataset") as its
//    collect_data.py publishes them, or with "token_pos" as its profiler writes them. Tokens that lack a
//    record at some layer are dropped and counted (ImportOptions::note, and the header's source); identical
//    repeated records are dropped, conflicting ones refused with both line numbers.
//  - vllm: what vLLM returns with --enable-return-routed-experts, saved as JSON: a /v1/completions response
//    body (top-level prompt_routed_experts [prompt_len][num_moe_layers][top_k], choices[i].routed_experts
//    [gen_len][num_moe_layers][top_k], or, in later vLLM, choices[i].routed_experts as a base64 .npy string),
//    a bare routed_experts array, an object with those two keys, or an array of such objects.
// Every input may be gzip- or zstd-compressed (sim/trace_input.hpp).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/sim/trace.hpp"

namespace moesim::sim {

enum class ImportFormat { MoeSelection, SpeculativeMoe, Vllm };

struct ImportOptions;

/// An imported format as the registry holds it: `import` reads its files (each format says how many).
struct ImportFormatInfo {
  ImportFormat value;
  std::string name;  ///< what --from takes
  std::string description;
  RoutingTrace (*import)(const std::vector<std::string>& paths, const ImportOptions& options) = nullptr;
};
/// The registered importers, in registration order (--help lists them); the built-in ones first.
const std::vector<ImportFormatInfo>& import_formats();
/// Adds an importer that `--from NAME` then selects. UserError for a name or value taken (also a name of
/// moesim's own formats). Not thread-safe: register before running.
void register_import_format(ImportFormatInfo info);

/// "moe-selection", "speculative-moe", "vllm" (the registered name).
std::string import_format_name(ImportFormat f);
/// The importer for a --from name, or nullopt for moesim's own formats ("jsonl", "binary"); UserError
/// listing the valid names otherwise.
std::optional<ImportFormat> parse_import_format(std::string_view name, const std::string& flag);

struct ImportOptions {
  std::int64_t experts = 0;            ///< routed experts per layer (required: the files do not say)
  std::optional<std::int64_t> layers;  ///< MoE layers the model has (checked against the data when set)
  std::optional<std::int64_t> top_k;   ///< the model's top-k (checked when set)
  std::string model;                   ///< recorded in the header ("" = "unknown")
  bool include_prefill = true;         ///< keep the prompt's (prefill) tokens, where the format has them
  /// Receives a line for the user (the command prints it on stderr): what was dropped while importing.
  std::function<void(const std::string&)> note;
};

/// What `moesim trace convert` without --from found a file to be.
struct DetectedFormat {
  std::optional<ImportFormat> format;  ///< nullopt: moesim's own format (JSON lines or binary)
  std::string name;                    ///< the --from name: "jsonl", "binary", "moe-selection", ...
  std::string evidence;                ///< what gave it away ("its first line is a record with problem_id, ...")
};

/// Tells the format of `path` from the start of its (decompressed) content: the binary magic, moesim's
/// header line, a speculative-moe record, a vLLM response or routed_experts array, a moe-selection array of
/// steps. UserError naming the file, what it starts with and the formats that exist when none fits.
DetectedFormat detect_trace_format(const std::string& path);

/// Imports one or more files (moe-selection and vllm: each file is one request, in the order given;
/// speculative-moe: one file, requests are its problem ids). UserError naming the file, the JSON path or
/// line, and the fix, for anything malformed or inconsistent.
RoutingTrace import_trace(ImportFormat format, const std::vector<std::string>& paths, const ImportOptions& options);

RoutingTrace import_moe_selection(const std::vector<std::string>& paths, const ImportOptions& options);
RoutingTrace import_speculative_moe(const std::string& path, const ImportOptions& options);
RoutingTrace import_vllm(const std::vector<std::string>& paths, const ImportOptions& options);

}  // namespace moesim::sim
