// Routing-trace files: format names, validation, reading and writing by path, and the checks and
// messages shared by the JSON-lines (trace_io_jsonl.cpp) and binary (trace_io_binary.cpp) formats.
#include "moesim/sim/trace_io.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_input.hpp"
#include "trace_io_detail.hpp"

namespace moesim::sim {
namespace trace_io_detail {

std::string with_commas(std::int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

std::string shape_text(const TraceHeader& h) {
  return std::to_string(h.layers) + " MoE layers, " + std::to_string(h.experts) + " experts, top-" +
         std::to_string(h.top_k);
}

std::string duplicate_text(std::uint16_t id, std::size_t first_slot) {
  return "expert " + std::to_string(id) + " appears twice in one token's layer (also at slot " +
         std::to_string(first_slot) + "); a router picks top_k distinct experts, so fix the ids";
}

std::string out_of_range_text(std::int64_t id, std::int64_t experts) {
  return "expert id " + std::to_string(id) + " is out of range [0, " + std::to_string(experts) + ") for this trace's " +
         std::to_string(experts) +
         " experts; fix the id, or the header's \"experts\" if the model really has more (check the "
         "trace was made for this model)";
}

/// Empty when the weight is acceptable, else what is wrong with it.
std::string weight_problem(float w) {
  if (std::isnan(w)) return "gate weight is NaN";
  if (std::isinf(w)) return "gate weight is infinite";
  if (w < 0) return "gate weight " + text::printf("%.9g", static_cast<double>(w)) + " is negative";
  return "";
}

/// Validates the header object (JSON lines line 1, or the binary header) and fills `h`.
TraceHeader parse_header(const json::Node& n, std::optional<std::int64_t>& tokens) {
  n.expect_only(std::vector<std::string>(std::begin(kHeaderKeys), std::end(kHeaderKeys)));
  const auto format = n.string("format");
  if (format != "moesim-trace") {
    throw n.error("format", "is \"" + format +
                                "\", expected \"moesim-trace\"; this is not a moesim trace: import other formats "
                                "with `moesim trace convert IN --from FORMAT`");
  }
  const auto version = n.integer("version", 1);
  if (version > kTraceFormatVersion) {
    throw n.error("version", "is " + std::to_string(version) + ", newer than this moesim reads (" +
                                 std::to_string(kTraceFormatVersion) + "); upgrade moesim or re-export the trace");
  }
  TraceHeader h;
  h.model = n.string("model");
  h.layers = n.integer("layers", 1);
  h.experts = n.integer("experts", 1);
  if (h.experts > kMaxTraceExperts) {
    throw n.error("experts", "is " + std::to_string(h.experts) + ", more than the " + with_commas(kMaxTraceExperts) +
                                 " a trace can hold (expert ids are 16-bit); no model in the zoo has more than 512");
  }
  h.top_k = n.integer("top_k", 1);
  if (h.top_k > h.experts) {
    throw n.error("top_k", "is " + std::to_string(h.top_k) + ", more than the " + std::to_string(h.experts) +
                               " experts; a router picks top_k distinct experts, so fix \"top_k\" or \"experts\"");
  }
  h.source = n.optional_string("source").value_or("");
  tokens = n.optional_integer("tokens", 0);
  return h;
}

std::uint64_t record_bytes(const TraceHeader& h, bool weights) {
  const auto n = static_cast<std::uint64_t>(h.layers * h.top_k);
  return 8 + 2 * n + (weights ? 4 * n : 0);
}

std::string header_line(const TraceHeader& h, std::optional<std::int64_t> tokens) {
  nlohmann::ordered_json j;
  j["format"] = "moesim-trace";
  j["version"] = kTraceFormatVersion;
  j["model"] = h.model;
  j["layers"] = h.layers;
  j["experts"] = h.experts;
  j["top_k"] = h.top_k;
  j["source"] = h.source;
  if (tokens) j["tokens"] = *tokens;
  return j.dump();
}

void check_shape(const RoutingTrace& t) {
  const auto n = static_cast<std::size_t>(t.tokens());
  const auto per_token = static_cast<std::size_t>(t.header.layers * t.header.top_k);
  MOESIM_CHECK(t.position.size() == n, "trace: request and position arrays differ in length");
  MOESIM_CHECK(t.experts.size() == n * per_token, "trace: experts array does not match tokens x layers x top_k");
  MOESIM_CHECK(t.weights.empty() || t.weights.size() == t.experts.size(), "trace: weights do not match experts");
}

}  // namespace trace_io_detail

namespace {

std::vector<TraceFormatInfo>& trace_format_registry() {
  static std::vector<TraceFormatInfo> all = {
      {TraceFormat::JsonLines, "jsonl", "json-lines", ".jsonl", "JSON lines",
       "a header line, then one JSON line per token: human-readable, diffable", false, write_trace_jsonl},
      {TraceFormat::Binary, "binary", "mtrace", ".mtrace", "binary",
       "compact fixed-size records, ~8 + 2·layers·k (+4·layers·k with weights) bytes per token", true,
       write_trace_binary},
  };
  return all;
}

}  // namespace

const std::vector<TraceFormatInfo>& trace_formats() { return trace_format_registry(); }
void register_trace_format(TraceFormatInfo info) {
  add_entry(trace_format_registry(), std::move(info), "trace format");
}

std::string trace_format_name(TraceFormat f) { return std::string(name_in(trace_formats(), f)); }

TraceFormat parse_trace_format(std::string_view name, const std::string& flag) {
  for (const auto& f : trace_formats())
    if (name == f.name || (!f.alias.empty() && name == f.alias)) return f.value;
  const auto names = names_in(trace_formats());
  throw UserError(flag + ": unknown trace format '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid formats: " + text::join(names));
}

TraceFormat trace_format_for_path(const std::string& path, const std::string& flag) {
  const auto ext = std::filesystem::path(path).extension().string();
  for (const auto& f : trace_formats())
    if (ext == f.extension) return f.value;
  // "name the file .jsonl (JSON lines) or .mtrace (binary), or give --format jsonl|binary"
  std::string files, names;
  const auto& all = trace_formats();
  for (std::size_t i = 0; i < all.size(); ++i) {
    files += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i].extension + " (" + all[i].label + ")";
    names += (i == 0 ? "" : "|") + all[i].name;
  }
  throw UserError((flag.empty() ? path : path + " (" + flag + ")") + ": cannot tell the trace format from the " +
                  (ext.empty() ? std::string("missing extension") : "extension '" + ext + "'") + "; name the file " +
                  files + ", or give --format " + names);
}

void validate_trace(const RoutingTrace& t, const std::string& where) {
  using trace_io_detail::duplicate_text;
  using trace_io_detail::find_duplicate;
  using trace_io_detail::kWeightFix;
  using trace_io_detail::out_of_range_text;
  using trace_io_detail::shape_text;
  using trace_io_detail::weight_ok;
  using trace_io_detail::weight_problem;
  using trace_io_detail::with_commas;
  const auto& h = t.header;
  if (h.layers < 1) throw UserError(where + ": the trace has no MoE layers; a trace needs at least one");
  if (h.experts < 1 || h.experts > kMaxTraceExperts) {
    throw UserError(where + ": " + std::to_string(h.experts) + " experts is outside [1, " +
                    with_commas(kMaxTraceExperts) + "] (expert ids are 16-bit); give the model's routed-expert count");
  }
  if (h.top_k < 1 || h.top_k > h.experts) {
    throw UserError(where + ": top_k " + std::to_string(h.top_k) + " is outside [1, " + std::to_string(h.experts) +
                    "]; a router picks between 1 and all of the experts");
  }
  if (t.tokens() == 0) throw UserError(where + ": the trace has no tokens; a trace needs at least one token record");
  const auto per_token = static_cast<std::size_t>(h.layers * h.top_k);
  if (t.position.size() != t.request.size() || t.experts.size() != t.request.size() * per_token ||
      (!t.weights.empty() && t.weights.size() != t.experts.size())) {
    throw UserError(where + ": the trace's arrays disagree with " + std::to_string(t.tokens()) + " tokens x " +
                    shape_text(h) + "; every token needs layers x top_k ids (and as many weights, or none)");
  }
  const auto k = static_cast<std::size_t>(h.top_k);
  for (std::int64_t tok = 0; tok < t.tokens(); ++tok) {
    for (std::int64_t l = 0; l < h.layers; ++l) {
      const auto ids = t.chosen(tok, l);
      // Built only for a message: a string per token-layer would cost more than the checks.
      const auto here = [&] { return where + ": token " + std::to_string(tok) + ", layer " + std::to_string(l); };
      for (std::size_t s = 0; s < k; ++s) {
        if (ids[s] >= h.experts)
          throw UserError(here() + ", slot " + std::to_string(s) + ": " + out_of_range_text(ids[s], h.experts));
      }
      if (const auto dup = find_duplicate(ids.data(), k)) {
        throw UserError(here() + ", slot " + std::to_string(dup->first) + ": " +
                        duplicate_text(ids[dup->first], dup->second));
      }
      if (t.has_weights()) {
        const auto g = t.gates(tok, l);
        for (std::size_t s = 0; s < k; ++s) {
          if (!weight_ok(g[s]))
            throw UserError(here() + ", slot " + std::to_string(s) + ": " + weight_problem(g[s]) + kWeightFix);
        }
      }
    }
  }
}

RoutingTrace read_trace(const std::string& path) {
  using trace_io_detail::kMagic;
  // A regular file (or a one-line refusal: no FIFO, device or directory), decompressed when it is gzip or
  // zstd: the size is then the decompressed size, measured with a bound (sim/trace_input.hpp).
  TraceInput file(path);
  std::istream& in = file.stream();
  char magic[sizeof kMagic] = {};
  in.read(magic, sizeof magic);
  const bool binary = in.gcount() == sizeof magic && std::memcmp(magic, kMagic, sizeof kMagic) == 0;
  file.rewind();
  return binary ? read_trace_binary(file.stream(), file.size(), path) : read_trace_jsonl(file.stream(), path);
}

void add_trace_output(OutputSet& outputs, const RoutingTrace& trace, const std::string& path,
                      std::optional<TraceFormat> format, const std::string& flag) {
  const TraceFormat f = format ? *format : trace_format_for_path(path, flag);
  const TraceFormatInfo& info = registered(trace_formats(), f, "trace format");
  OutputFile& file = outputs.add(path, flag, info.binary);
  info.write(trace, file.stream());
}

void write_trace(const RoutingTrace& trace, const std::string& path, std::optional<TraceFormat> format,
                 const std::string& flag) {
  OutputSet outputs;
  add_trace_output(outputs, trace, path, format, flag);
  outputs.commit();
}

void check_trace_matches(const RoutingTrace& trace, const model::Architecture& arch, const std::string& where) {
  using trace_io_detail::shape_text;
  const auto& h = trace.header;
  const std::int64_t layers = model::moe_layer_count(arch);
  std::vector<std::string> differ;
  if (h.layers != layers) differ.push_back("MoE layers " + std::to_string(h.layers) + " vs " + std::to_string(layers));
  if (h.experts != arch.routed_experts) {
    differ.push_back("experts " + std::to_string(h.experts) + " vs " + std::to_string(arch.routed_experts));
  }
  if (h.top_k != arch.top_k) differ.push_back("top-k " + std::to_string(h.top_k) + " vs " + std::to_string(arch.top_k));
  if (differ.empty()) return;
  throw UserError(where + ": the trace (" + (h.model.empty() ? std::string("model not named") : "'" + h.model + "'") +
                  ": " + shape_text(h) + ") does not fit model '" + arch.id + "' (" + std::to_string(layers) +
                  " MoE layers, " + std::to_string(arch.routed_experts) + " experts, top-" +
                  std::to_string(arch.top_k) + "): " + text::join(differ, ", ") +
                  "; give the model the trace was made for with --model" +
                  (h.model.empty() ? std::string() : " " + h.model) + ", or make a matching trace with `moesim " +
                  "trace gen --model " + arch.id + "`");
}

std::int64_t count_requests(const RoutingTrace& trace) {
  std::vector<std::uint32_t> ids(trace.request);
  std::sort(ids.begin(), ids.end());
  return static_cast<std::int64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
}

}  // namespace moesim::sim
