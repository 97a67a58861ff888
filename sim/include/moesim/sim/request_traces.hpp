#pragma once
// Request traces (issue 21): the arrival time, prompt length and output length of each request of a
// recorded workload, read from the files public datasets publish, for `serve` to replay.
//
// Formats (RequestTraceFormat; detected from the first line, or forced with --request-trace-format /
// the workload's "trace_format"):
//  - moesim:   CSV, arrival_s,prompt_tokens,output_tokens; arrival_s is seconds from the start of the run.
//  - azure:    the Azure LLM inference traces, 2023 (AzureLLMInferenceTrace_code.csv / _conv.csv) and 2024
//              (AzureLLMInferenceTrace_code_1week.csv / _conv_1week.csv), github.com/Azure/AzurePublicDataset:
//              CSV, TIMESTAMP,ContextTokens,GeneratedTokens; TIMESTAMP is a wall-clock time, 2023
//              "2023-11-16 18:15:46.6805900", 2024 "2024-05-10 00:00:00.009930+00:00" (and
//              "2024-05-12 00:00:00+00:00" when the fraction is zero).
//  - burstgpt: BurstGPT (github.com/HPMLL/BurstGPT, BurstGPT_*.csv): CSV, Timestamp,Model,Request tokens,
//              Response tokens,Total tokens,Log Type (BurstGPT_3 adds Session ID and Elapsed time after
//              Timestamp); Timestamp is seconds from 0:00 of the trace's first day. A failed request is a
//              row with Response tokens 0 (the dataset's README; its *_without_fails_* files are the same
//              rows less these): such rows are left out and counted (RequestTrace::failed), as vLLM's
//              BurstGPTDataset drops them; they never reached the point of generating, so they are not
//              load this simulator can serve.
//  - mooncake: Mooncake's traces (github.com/kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl and
//              arxiv-trace/mooncake_trace.jsonl): JSON lines {"timestamp": 27482, "input_length": 6955,
//              "output_length": 52, "hash_ids": [...]}; timestamp is milliseconds from the start of the
//              trace (FAST25-release/README.md). hash_ids (512-token prefix blocks) are read past: moesim
//              has no prefix cache to reuse them in.
// Sources read for these formats: Azure/AzurePublicDataset AzureLLMInferenceDataset2024.md and
// analysis/AzureLLMInferenceDataset2024.ipynb (commit b469a113cedca53ddc3bdea71a143dc4b7d8700c); HPMLL/BurstGPT
// README.md (commit e92f533b6c85ea7f4164fb3d97d1aa2c3edacbc8); kvcache-ai/Mooncake FAST25-release/README.md and
// traces/conversation_trace.jsonl (commit 3b5a594133958449a1feaf1c9e0fc1b553e34a28); vLLM's
// vllm/benchmarks/datasets/burstgpt.py (commit 237145ea190a901f93c570f157091fe43835bc63); Vidur's
// vidur/request_generator/trace_request_interval_generator.py (commit 01f216fe8559c0eac076b157b19125a9c370d100).
// CSV headers are matched by column name, ignoring case and the spaces around a name; columns a format
// does not use are ignored. Detection: a first line starting with '{' is mooncake; a CSV header with
// "Request tokens" and "Response tokens" is burstgpt; with arrival_s, moesim; with TIMESTAMP, azure. A
// header that matches none is refused in one line that lists the formats.
//
// Times. moesim's arrival_s is kept as written; the others are made relative to the first request read,
// so the run starts with a request (a slice cut from the middle of a week-long trace starts at 0, not days
// in). Every time is then multiplied by the time scale (RequestTraceOptions::time_scale, --time-scale,
// the workload's "time_scale"): 0.5 replays the trace twice as fast, 2 half as fast, the convention of
// Vidur's trace_request_interval_generator (time_scale_factor multiplies arrival times; BurstGPT's own
// demo `scale` and Dynamo's `speed_ratio` divide by theirs). Times must not decrease from row to row; token
// counts are integers >= 1 (Azure's and Mooncake's rows with 0 output tokens are refused with the command
// that filters them, since silently changing a request would bias the results; BurstGPT's are its
// documented failures, above). LF and CRLF line endings, a UTF-8 byte-order mark and blank lines are
// accepted.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/registry.hpp"
#include "moesim/sim/request.hpp"

namespace moesim::sim {

enum class RequestTraceFormat { Auto, Moesim, Azure, BurstGpt, Mooncake };

/// Every format by name, "auto" first, each with the line --help prints.
const std::vector<NamedOption<RequestTraceFormat>>& request_trace_formats();
/// UserError listing the valid names (and the nearest) for an unknown one.
RequestTraceFormat request_trace_format_by_name(std::string_view name);
std::string_view name_of(RequestTraceFormat f);

struct RequestTraceOptions {
  RequestTraceFormat format = RequestTraceFormat::Auto;  ///< Auto: detected from the first line
  std::int64_t max_requests = 0;                         ///< keep the first N requests read; 0 = all
  double time_scale = 1.0;                               ///< every arrival time is multiplied by this (> 0)
};

/// What a trace file gave.
struct RequestTrace {
  RequestTraceFormat format = RequestTraceFormat::Auto;  ///< the format it was read as (never Auto)
  bool detected = false;                                 ///< the format came from the file, not the caller
  std::vector<Request> requests;                         ///< ids 0, 1, 2, ... in row order; user -1
  std::int64_t failed = 0;  ///< BurstGPT: failed requests (Response tokens 0) left out, within those read
  /// One line for the run's assumptions: the file, its format (and whether it was detected), the requests
  /// read, the failures left out and the time scale.
  [[nodiscard]] std::string summary(const std::string& file, double time_scale) const;
};

/// Reads a request trace (formats in the comment at the top of this file). UserError, one line naming the
/// file, the line number, the column or key and the fix, for: a missing or unreadable file, an empty file,
/// a header that matches no format (listing them) or lacks a column the format needs (listing its
/// columns), a row with too few fields, a malformed number, timestamp or JSON line, a negative time, a
/// time earlier than the previous row's, a time beyond what a run can hold once scaled, a token count that
/// is not an integer >= 1, and a trace with no requests.
RequestTrace read_request_trace(const std::filesystem::path& path, const RequestTraceOptions& options = {});

/// read_request_trace(path) with the format detected, the first max_rows requests (0 = all) and no time
/// scale: the requests alone.
std::vector<Request> load_request_trace(const std::filesystem::path& path, std::int64_t max_rows = 0);

}  // namespace moesim::sim
