#pragma once
// Reading, writing and checking routing traces (sim/trace.hpp) in moesim's two file formats.
//
//   auto t = sim::read_trace("run.mtrace");           // format from the magic bytes, else JSON lines
//   sim::check_trace_matches(t, arch, "--trace");     // layers / experts / top-k agree with the model
//   sim::write_trace(t, "run.jsonl");                 // format from the extension, written atomically
//
// Both formats are documented byte by byte and key by key in sim/TRACES.md:
//  - JSON lines (`.jsonl`): line 1 the header object, then one object per token.
//  - binary (`.mtrace`): "MOESIMTR", u32 version, u32 header length, header JSON, u64 tokens, u8 has-weights,
//    then fixed-size little-endian records (u32 request, u32 position, u16 ids[layers*k], f32 weights[layers*k]).
// They carry the same information; converting one into the other and back gives the same bytes.
//
// Every reader error is a UserError of one line naming the file, the line (JSON lines, counted from 1 with the
// header as line 1) or the record (binary, counted from 0 like tokens), the field, what is wrong and the fix.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::sim {

/// The largest routed-expert count a trace can hold: ids are stored as uint16.
inline constexpr std::int64_t kMaxTraceExperts = 65535;
/// Version written into both formats; readers refuse newer ones.
inline constexpr std::int64_t kTraceFormatVersion = 1;

enum class TraceFormat {
  JsonLines,  ///< `.jsonl`: human-readable, diffable
  Binary,     ///< `.mtrace`: compact fixed-size records, ~8 + 2·layers·k (+4·layers·k with weights) bytes per token
};

/// A trace file format as the registry holds it: its names, extension and writer. (Reading tells the format
/// from the file's first bytes: read_trace.)
struct TraceFormatInfo {
  TraceFormat value;
  std::string name;       ///< what --format takes and messages print: "jsonl"
  std::string alias;      ///< also accepted by --format: "json-lines"
  std::string extension;  ///< the file name's, with its dot: ".jsonl"
  std::string label;      ///< in messages: "JSON lines"
  std::string description;
  bool binary = false;  ///< written in binary mode
  void (*write)(const RoutingTrace& trace, std::ostream& out) = nullptr;
};
/// The registered trace formats, in registration order (--help lists them); the built-in ones first.
const std::vector<TraceFormatInfo>& trace_formats();
/// Adds a trace format that --format and --out's extension then select for writing. UserError for a name or
/// value taken. Not thread-safe: register before running.
void register_trace_format(TraceFormatInfo info);

/// "jsonl" or "binary" (the registered name).
std::string trace_format_name(TraceFormat f);
/// Parses "jsonl" / "binary" (also "json-lines", "mtrace"); UserError naming `flag` and the valid names
/// otherwise.
TraceFormat parse_trace_format(std::string_view name, const std::string& flag);
/// The format a file name asks for: `.mtrace` -> Binary, `.jsonl` -> JsonLines; UserError naming `flag` for
/// any other extension (say which ones are valid, or that the format can be given explicitly).
TraceFormat trace_format_for_path(const std::string& path, const std::string& flag);

/// Reads a trace, detecting the format from the first 8 bytes (the binary magic, else JSON lines), and
/// validates it (see validate_trace). UserError for a missing, unreadable, truncated or invalid file.
RoutingTrace read_trace(const std::string& path);
/// Reads the JSON-lines form from a stream; `name` is used in error messages.
RoutingTrace read_trace_jsonl(std::istream& in, const std::string& name);
/// Reads the binary form from a stream of `size` bytes (needed to detect truncation before reading).
RoutingTrace read_trace_binary(std::istream& in, std::uint64_t size, const std::string& name);

/// Writes `trace` to `path` through an OutputFile (temporary file + rename: a failure leaves nothing behind).
/// The format is `format` when given, else chosen from the extension (trace_format_for_path). `flag` names
/// the option the path came from, for error messages ("--out").
void write_trace(const RoutingTrace& trace, const std::string& path, std::optional<TraceFormat> format = std::nullopt,
                 const std::string& flag = "");
/// Adds `path` to a run's outputs (committed with the others: moesim/model/output_file.hpp) and writes
/// `trace` to it, in the format chosen as above.
void add_trace_output(OutputSet& outputs, const RoutingTrace& trace, const std::string& path,
                      std::optional<TraceFormat> format = std::nullopt, const std::string& flag = "");
/// Writes the JSON-lines form to a stream. Gate weights are printed with 9 significant digits, which
/// round-trips every float32 exactly.
void write_trace_jsonl(const RoutingTrace& trace, std::ostream& out);
/// Writes the binary form to a stream (little-endian regardless of the host).
void write_trace_binary(const RoutingTrace& trace, std::ostream& out);

/// Checks a trace built in memory (by an importer or a generator): header ranges (experts <= 65,535,
/// 1 <= top_k <= experts), array sizes consistent with tokens x layers x top_k, every id < experts, no
/// expert twice in one token-layer, gate weights finite and >= 0. UserError prefixed with `where`, naming
/// the token, layer and slot.
void validate_trace(const RoutingTrace& trace, const std::string& where);

/// UserError unless the trace was recorded for a model of this shape: layers == moe_layer_count(arch),
/// experts == arch.routed_experts, top_k == arch.top_k. The message names both values and suggests
/// `--model` or `moesim trace gen --model`. `where` names the trace (its path or flag).
void check_trace_matches(const RoutingTrace& trace, const model::Architecture& arch, const std::string& where);

/// Number of distinct requests in the trace (a request id counts once however its tokens are ordered).
std::int64_t count_requests(const RoutingTrace& trace);

}  // namespace moesim::sim
