// Request traces (serving workloads' "trace" arrival): the formats, detecting a file's format from its
// first line, and reading it; the per-format readers are in request_trace_readers.cpp.
#include "moesim/sim/request_traces.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <optional>
#include <utility>

#include "fields.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "request_trace_detail.hpp"

namespace moesim::sim {
namespace request_trace_detail {

namespace {

using fields::split_fields;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Header read_header(std::string_view line, std::int64_t lineno) {
  Header h;
  h.line = lineno;
  std::vector<std::string_view> f;
  split_fields(line, f);
  for (auto x : f) {
    h.names.emplace_back(x);
    h.keys.push_back(lower(x));
  }
  return h;
}

/// Refuses a header that names one column twice (which value is read would depend on column order).
void check_duplicates(const Header& h, const TraceLines& in) {
  for (std::size_t i = 0; i < h.keys.size(); ++i)
    for (std::size_t j = i + 1; j < h.keys.size(); ++j)
      if (!h.keys[i].empty() && h.keys[i] == h.keys[j])
        throw UserError(in.at(h.line) + ": the header names the column " + h.names[j] + " twice (columns " +
                        std::to_string(i + 1) + " and " + std::to_string(j + 1) + "); keep one");
}

/// The formats, for the message about a header that matches none.
std::string formats_list() {
  return "moesim (arrival_s,prompt_tokens,output_tokens), azure (TIMESTAMP,ContextTokens,GeneratedTokens: the Azure "
         "LLM inference traces 2023 and 2024), burstgpt (Timestamp,Model,Request tokens,Response tokens,Total "
         "tokens,Log Type), mooncake (JSON lines {\"timestamp\": ms, \"input_length\", \"output_length\", "
         "\"hash_ids\"})";
}

}  // namespace
}  // namespace request_trace_detail

// ------------------------------------------------------------------------------------------------------

const std::vector<NamedOption<RequestTraceFormat>>& request_trace_formats() {
  static const std::vector<NamedOption<RequestTraceFormat>> kAll = {
      {RequestTraceFormat::Auto, "auto", "detect the format from the file's first line (the default)"},
      {RequestTraceFormat::Moesim, "moesim",
       "CSV arrival_s,prompt_tokens,output_tokens; arrival_s in seconds from the start of the run"},
      {RequestTraceFormat::Azure, "azure",
       "the Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset, AzureLLMInferenceTrace_*.csv): CSV "
       "TIMESTAMP,ContextTokens,GeneratedTokens, wall-clock times made relative to the first row"},
      {RequestTraceFormat::BurstGpt, "burstgpt",
       "BurstGPT (HPMLL/BurstGPT, BurstGPT_*.csv): CSV Timestamp (s),Model,Request tokens,Response tokens,Total "
       "tokens,Log Type; failed requests (Response tokens 0) are left out and counted"},
      {RequestTraceFormat::Mooncake, "mooncake",
       "Mooncake (kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl): JSON lines {\"timestamp\" (ms), "
       "\"input_length\", \"output_length\", \"hash_ids\"}; hash_ids are not used"},
  };
  return kAll;
}

RequestTraceFormat request_trace_format_by_name(std::string_view name) {
  return by_name(request_trace_formats(), name, "request-trace format");
}

std::string_view name_of(RequestTraceFormat f) { return name_in(request_trace_formats(), f); }

std::string RequestTrace::summary(const std::string& file, double time_scale) const {
  using request_trace_detail::short_number;
  std::string s = "request trace " + file + " read as " + std::string(name_of(format)) +
                  (detected ? " (detected from its first line)" : " (as asked)") + ": " +
                  std::to_string(requests.size()) + " requests";
  if (failed > 0) {
    s += ", " + std::to_string(failed) +
         " failed requests (Response tokens 0) left out, as BurstGPT's *_without_fails_* files and vLLM's "
         "BurstGPTDataset leave them out";
  }
  if (time_scale != 1.0) s += ", arrival times multiplied by " + short_number(time_scale) + " (time_scale)";
  return s;
}

RequestTrace read_request_trace(const std::filesystem::path& path, const RequestTraceOptions& o) {
  using request_trace_detail::check_duplicates;
  using request_trace_detail::formats_list;
  using request_trace_detail::Header;
  using request_trace_detail::read_burstgpt;
  using request_trace_detail::read_header;
  using request_trace_detail::read_moesim_or_azure;
  using request_trace_detail::read_mooncake;
  using request_trace_detail::TraceLines;
  using request_trace_detail::trim;
  const std::string name = path.string();
  MOESIM_CHECK(o.max_requests >= 0 && std::isfinite(o.time_scale) && o.time_scale > 0,
               "read_request_trace: options not validated");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !std::filesystem::is_symlink(path, ec)) {
    throw UserError(name +
                    ": no such request-trace file; check the path (relative paths are resolved against the "
                    "scenario file's directory)");
  }
  TraceLines in(path);
  std::string_view first;
  if (!in.next(first)) {
    throw UserError(name +
                    ": is empty; a request trace starts with a header row such as "
                    "arrival_s,prompt_tokens,output_tokens (or a format's own: " +
                    formats_list() + ")");
  }
  RequestTrace out;
  out.format = o.format;
  const bool json_line = trim(first).starts_with("{");
  if (o.format == RequestTraceFormat::Mooncake || (o.format == RequestTraceFormat::Auto && json_line)) {
    out.format = RequestTraceFormat::Mooncake;
    out.detected = o.format == RequestTraceFormat::Auto;
    out.requests = read_mooncake(in, first, o);
    return out;
  }
  if (json_line) {
    throw UserError(in.at(in.lineno()) + ": is a JSON line, not the CSV header the " + std::string(name_of(o.format)) +
                    " format starts with; for a Mooncake trace give the format mooncake (or auto)");
  }
  in.set_memory_per_byte(2.0);  // a line is held as text and split into views: about twice its size
  const Header h = read_header(first, in.lineno());
  if (o.format == RequestTraceFormat::Auto) {
    out.detected = true;
    if (h.has("request tokens") || h.has("response tokens")) {
      out.format = RequestTraceFormat::BurstGpt;
    } else if (h.has("arrival_s")) {
      out.format = RequestTraceFormat::Moesim;
    } else if (h.has("timestamp")) {
      out.format = RequestTraceFormat::Azure;
    } else {
      throw UserError(in.at(h.line) + ": the header matches no request-trace format (its columns are: " +
                      text::join(h.names) + "); the formats are " + formats_list() +
                      "; name the columns as one of them, or give the format (--request-trace-format, "
                      "workload.trace_format)");
    }
  }
  check_duplicates(h, in);
  if (out.format == RequestTraceFormat::BurstGpt) {
    out.requests = read_burstgpt(in, h, o, out.failed);
  } else {
    out.requests = read_moesim_or_azure(in, h, out.format, o);
  }
  return out;
}

std::vector<Request> load_request_trace(const std::filesystem::path& path, std::int64_t max_rows) {
  RequestTraceOptions o;
  o.max_requests = max_rows;
  return read_request_trace(path, o).requests;
}

}  // namespace moesim::sim
