// Routing traces as JSON lines: a header line, then one record per token (request, position, expert
// ids and optional gate weights); the reader names the line and field of every problem.
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
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_io.hpp"
#include "trace_io_detail.hpp"

namespace moesim::sim {
namespace trace_io_detail {
namespace {

/// "file: line N: " for a message about line N.
std::string at_line(const std::string& name, std::int64_t line) { return name + ": line " + std::to_string(line); }

nlohmann::json parse_line(const std::string& line, const std::string& name, std::int64_t lineno) {
  try {
    return json::parse_strict(line, at_line(name, lineno));
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ...";
    // keep the explanation, give the position in the file ourselves (e.byte counts from 1).
    const std::string what = e.what();
    const auto colon = what.find(": ", what.find("parse error"));
    const std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    throw UserError(at_line(name, lineno) + ", column " + std::to_string(e.byte == 0 ? 1 : e.byte) +
                    ": malformed JSON: " + detail +
                    "; every line of a trace is one complete JSON object (check brackets, commas and quotes, or "
                    "whether the file was cut short)");
  } catch (const nlohmann::json::out_of_range& e) {
    throw UserError(at_line(name, lineno) + ": " + json::number_overflow(e) +
                    "; the file is damaged: regenerate it (`moesim trace gen`)");
  }
}

std::uint32_t record_u32(const nlohmann::json& rec, const char* key, const std::string& where) {
  const auto it = rec.find(key);
  if (it == rec.end()) {
    throw UserError(where + ": $." + key + ": is missing; every token record needs \"request\", \"position\" and " +
                    "\"experts\"");
  }
  if (!it->is_number_integer()) {
    throw UserError(where + ": $." + key + ": is " + json::type_name(*it) + ", expected a whole number >= 0");
  }
  const auto v = it->get<std::int64_t>();
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    throw UserError(where + ": $." + key + ": is " + std::to_string(v) + ", must be in [0, 4294967295]");
  }
  return static_cast<std::uint32_t>(v);
}

void read_record(const nlohmann::json& rec, const TraceHeader& h, const std::string& name, std::int64_t lineno,
                 std::optional<bool>& weights_seen_first, std::int64_t& weights_decided_at, RoutingTrace& t) {
  const std::string where = at_line(name, lineno);
  if (!rec.is_object())
    throw UserError(where + ": is " + json::type_name(rec) + ", expected a token record object {...}");
  if (rec.contains("format")) {
    throw UserError(where + ": is a second trace header; a trace has one header, on line 1 (were two traces " +
                    "concatenated? convert them separately)");
  }
  json::Node(rec, where).expect_only(std::vector<std::string>(std::begin(kRecordKeys), std::end(kRecordKeys)));
  t.request.push_back(record_u32(rec, "request", where));
  t.position.push_back(record_u32(rec, "position", where));

  const auto layers = static_cast<std::size_t>(h.layers);
  const auto k = static_cast<std::size_t>(h.top_k);
  const auto ex = rec.find("experts");
  if (ex == rec.end()) throw UserError(where + ": $.experts: is missing; every token record needs its chosen experts");
  if (!ex->is_array()) {
    throw UserError(where + ": $.experts: is " + json::type_name(*ex) +
                    ", expected one list of top_k ids per MoE layer");
  }
  if (ex->size() != layers) {
    throw UserError(where + ": $.experts: has " + std::to_string(ex->size()) + " layers, the header says " +
                    std::to_string(h.layers) +
                    "; every record needs one list of expert ids per MoE layer (was the trace made for another "
                    "model?)");
  }
  for (std::size_t l = 0; l < layers; ++l) {
    const auto& row = (*ex)[l];
    // Built only for a message (a string per layer and record would dominate reading a large trace).
    const auto field = [l] { return "$.experts[" + std::to_string(l) + "]"; };
    if (!row.is_array())
      throw UserError(where + ": " + field() + ": is " + json::type_name(row) + ", expected a list of ids");
    if (row.size() != k) {
      throw UserError(where + ": " + field() + ": has " + std::to_string(row.size()) +
                      " experts, the header's top_k is " + std::to_string(h.top_k) +
                      "; every layer of every token lists exactly top_k expert ids");
    }
    const std::size_t base = t.experts.size();
    for (std::size_t s = 0; s < k; ++s) {
      const auto& v = row[s];
      if (!v.is_number_integer()) {
        throw UserError(where + ": " + field() + "[" + std::to_string(s) + "]: is " + json::type_name(v) +
                        ", expected an integer expert id");
      }
      const auto id = v.get<std::int64_t>();
      if (id < 0 || id >= h.experts) {
        throw UserError(where + ": " + field() + "[" + std::to_string(s) + "]: " + out_of_range_text(id, h.experts));
      }
      t.experts.push_back(static_cast<std::uint16_t>(id));
    }
    if (const auto dup = find_duplicate(t.experts.data() + base, k)) {
      throw UserError(where + ": " + field() + "[" + std::to_string(dup->first) +
                      "]: " + duplicate_text(t.experts[base + dup->first], dup->second));
    }
  }

  const auto w = rec.find("weights");
  const bool has = w != rec.end() && !w->is_null();
  if (!weights_seen_first) {
    weights_seen_first = has;
    weights_decided_at = lineno;
  } else if (*weights_seen_first != has) {
    throw UserError(where + ": $.weights: " + (has ? "is present" : "is missing") + " but line " +
                    std::to_string(weights_decided_at) + (has ? " has none" : " has them") +
                    "; gate weights are all-or-none: give them on every record or on none");
  }
  if (!has) return;
  if (!w->is_array() || w->size() != layers) {
    throw UserError(where + ": $.weights: " +
                    (w->is_array() ? "has " + std::to_string(w->size()) + " layers" : "is " + json::type_name(*w)) +
                    ", expected one list per MoE layer (" + std::to_string(h.layers) +
                    "), matching \"experts\" entry for entry");
  }
  for (std::size_t l = 0; l < layers; ++l) {
    const auto& row = (*w)[l];
    const auto field = [l] { return "$.weights[" + std::to_string(l) + "]"; };
    if (!row.is_array() || row.size() != k) {
      throw UserError(
          where + ": " + field() + ": " +
          (row.is_array() ? "has " + std::to_string(row.size()) + " weights" : "is " + json::type_name(row)) +
          " but \"experts\" has " + std::to_string(h.top_k) +
          " ids in this layer; give one gate weight per chosen expert");
    }
    for (std::size_t s = 0; s < k; ++s) {
      const auto& v = row[s];
      if (!v.is_number()) {
        throw UserError(where + ": " + field() + "[" + std::to_string(s) + "]: is " + json::type_name(v) +
                        ", expected a number (NaN and infinity are not JSON; a gate weight is finite)");
      }
      const auto f = static_cast<float>(v.get<double>());
      if (!weight_ok(f)) {
        throw UserError(where + ": " + field() + "[" + std::to_string(s) + "]: " + weight_problem(f) + kWeightFix);
      }
      t.weights.push_back(f);
    }
  }
}

void append_uint(std::string& s, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}

// Refuses a JSON-lines trace whose `tokens` records would not fit in memory.
void require_jsonl_memory(std::int64_t tokens, const TraceHeader& h, bool weights, const std::string& name) {
  model::require_memory(units::bytes(static_cast<double>(tokens) * static_cast<double>(record_bytes(h, weights))),
                        name + ": holding " + std::to_string(tokens) + " token records",
                        "use a shorter trace (`moesim trace gen --tokens N`), or a machine with more memory");
}

}  // namespace
}  // namespace trace_io_detail

RoutingTrace read_trace_jsonl(std::istream& in, const std::string& name) {
  using trace_io_detail::at_line;
  using trace_io_detail::parse_header;
  using trace_io_detail::parse_line;
  using trace_io_detail::read_record;
  using trace_io_detail::require_jsonl_memory;
  RoutingTrace t;
  std::string line;
  std::int64_t lineno = 0;
  bool have_header = false;
  std::optional<std::int64_t> declared_tokens;
  std::optional<bool> weights_first;
  std::int64_t weights_line = 0;
  const LineBound max_line = line_bound(17.0);  // each line is parsed as JSON (json_reader.cpp)
  while (read_line(in, line, max_line, name, lineno + 1)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // files written on Windows
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const auto j = parse_line(line, name, lineno);
    if (!have_header) {
      if (!j.is_object() || !j.contains("format")) {
        throw UserError(at_line(name, lineno) +
                        ": missing header: the first line of a trace must be "
                        "{\"format\": \"moesim-trace\", \"version\": 1, \"model\": ..., \"layers\": ..., \"experts\": "
                        "..., \"top_k\": ..., \"source\": ...}" +
                        (j.is_object() && j.contains("experts") ? " (this line is a token record)" : "") +
                        "; add it, or import another tool's format with `moesim trace convert IN --out T.mtrace` "
                        "(it tells the format; --from FORMAT chooses it)");
      }
      t.header = parse_header(json::Node(j, at_line(name, lineno)), declared_tokens);
      have_header = true;
      if (declared_tokens) {
        require_jsonl_memory(*declared_tokens, t.header, false, name);
        // Reserve up front (a 100,000-token trace of a 60-layer top-10 model is 60 M ids), but no more than
        // 64 M ids: the count is the file's claim, and a damaged header must not exhaust memory.
        const std::int64_t per_token = t.header.layers * t.header.top_k;
        const auto n = static_cast<std::size_t>(std::min<std::int64_t>(*declared_tokens, (64 << 20) / per_token));
        t.request.reserve(n);
        t.position.reserve(n);
        t.experts.reserve(n * static_cast<std::size_t>(per_token));
      }
      continue;
    }
    read_record(j, t.header, name, lineno, weights_first, weights_line, t);
    // Check before the vectors double: a trace far larger than memory is refused, not killed by the
    // kernel. (The header's count, when given, was checked when the header was read.)
    if ((t.tokens() & 0xFFFF) == 0) require_jsonl_memory(t.tokens() * 2, t.header, weights_first.value_or(false), name);
  }
  if (in.bad()) throw UserError(name + ": reading failed; check the file is readable");
  if (!have_header) throw UserError(name + ": is empty; a trace starts with a header line (see sim/TRACES.md)");
  if (t.tokens() == 0) {
    throw UserError(name + ": has a header but no token records; a trace needs at least one token line");
  }
  if (declared_tokens && *declared_tokens != t.tokens()) {
    throw UserError(at_line(name, 1) + ": $.tokens: the header says " + std::to_string(*declared_tokens) +
                    " tokens but the file has " + std::to_string(t.tokens()) +
                    " token records; the file was cut short or edited: regenerate it, or delete \"tokens\" from "
                    "the header");
  }
  return t;
}

void write_trace_jsonl(const RoutingTrace& t, std::ostream& out) {
  using trace_io_detail::append_uint;
  using trace_io_detail::check_shape;
  using trace_io_detail::header_line;
  check_shape(t);
  out << header_line(t.header, t.tokens()) << '\n';
  const auto layers = static_cast<std::size_t>(t.header.layers);
  const auto k = static_cast<std::size_t>(t.header.top_k);
  std::string s;
  char num[32];
  for (std::int64_t tok = 0; tok < t.tokens(); ++tok) {
    s.clear();
    s += "{\"request\":";
    append_uint(s, t.request[static_cast<std::size_t>(tok)]);
    s += ",\"position\":";
    append_uint(s, t.position[static_cast<std::size_t>(tok)]);
    s += ",\"experts\":[";
    for (std::size_t l = 0; l < layers; ++l) {
      s += l ? ",[" : "[";
      const auto ids = t.chosen(tok, static_cast<std::int64_t>(l));
      for (std::size_t i = 0; i < k; ++i) {
        if (i) s += ',';
        append_uint(s, ids[i]);
      }
      s += ']';
    }
    s += ']';
    if (t.has_weights()) {
      s += ",\"weights\":[";
      for (std::size_t l = 0; l < layers; ++l) {
        s += l ? ",[" : "[";
        const auto g = t.gates(tok, static_cast<std::int64_t>(l));
        for (std::size_t i = 0; i < k; ++i) {
          if (i) s += ',';
          // 9 significant digits identify every float32 uniquely (IEEE 754-2008, 5.12.2), so reading the
          // decimal back gives the same bits: JSON lines <-> binary is lossless.
          const int n = std::snprintf(num, sizeof num, "%.9g", static_cast<double>(g[i]));
          s.append(num, static_cast<std::size_t>(n));
        }
        s += ']';
      }
      s += ']';
    }
    s += "}\n";
    out << s;
  }
}

}  // namespace moesim::sim
