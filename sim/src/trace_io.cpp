#include "moesim/model/fd_io.hpp"
#include "moesim/sim/trace_io.hpp"
#include "moesim/sim/trace_input.hpp"

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
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"

namespace moesim::sim {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'S', 'I', 'M', 'T', 'R'};
/// magic + u32 version + u32 header length: the part before the header JSON.
constexpr std::uint64_t kFixedPrefix = 16;
constexpr const char* kHeaderKeys[] = {"format", "version", "model", "layers", "experts", "top_k", "source", "tokens"};
constexpr const char* kRecordKeys[] = {"request", "position", "experts", "weights"};

std::string with_commas(std::int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

std::string shape_text(const TraceHeader& h) {
  return std::to_string(h.layers) + " MoE layers, " + std::to_string(h.experts) + " experts, top-" +
         std::to_string(h.top_k);
}

/// The first duplicate in one token-layer's ids: (slot of the second occurrence, slot of the first). O(k^2),
/// which for k <= 64 beats any set.
std::optional<std::pair<std::size_t, std::size_t>> find_duplicate(const std::uint16_t* ids, std::size_t k) {
  for (std::size_t i = 1; i < k; ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (ids[i] == ids[j]) return std::make_pair(i, j);
    }
  }
  return std::nullopt;
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

/// Fast test first: building an empty string per weight would cost more than reading it.
bool weight_ok(float w) { return w >= 0 && w <= std::numeric_limits<float>::max(); }

/// Empty when the weight is acceptable, else what is wrong with it.
std::string weight_problem(float w) {
  if (std::isnan(w)) return "gate weight is NaN";
  if (std::isinf(w)) return "gate weight is infinite";
  if (w < 0) return "gate weight " + text::printf("%.9g", static_cast<double>(w)) + " is negative";
  return "";
}
constexpr const char* kWeightFix =
    "; gate weights are the router's probabilities for the chosen experts (finite, >= 0): fix the value, or drop "
    "\"weights\" from every record";

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

// ------------------------------------------------------------------------------------------------------
// JSON lines

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

// ------------------------------------------------------------------------------------------------------
// Binary: every field little-endian, written and read byte by byte, so the host's byte order does not matter.

void put_u16(char* p, std::uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}
void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint16_t get_u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t get_u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint64_t record_bytes(const TraceHeader& h, bool weights) {
  const auto n = static_cast<std::uint64_t>(h.layers * h.top_k);
  return 8 + 2 * n + (weights ? 4 * n : 0);
}

// Refuses a JSON-lines trace whose `tokens` records would not fit in memory.
void require_jsonl_memory(std::int64_t tokens, const TraceHeader& h, bool weights, const std::string& name) {
  model::require_memory(units::bytes(static_cast<double>(tokens) * static_cast<double>(record_bytes(h, weights))),
                        name + ": holding " + std::to_string(tokens) + " token records",
                        "use a shorter trace (`moesim trace gen --tokens N`), or a machine with more memory");
}

}  // namespace

std::string trace_format_name(TraceFormat f) { return f == TraceFormat::Binary ? "binary" : "jsonl"; }

TraceFormat parse_trace_format(std::string_view name, const std::string& flag) {
  if (name == "jsonl" || name == "json-lines") return TraceFormat::JsonLines;
  if (name == "binary" || name == "mtrace") return TraceFormat::Binary;
  throw UserError(flag + ": unknown trace format '" + std::string(name) + "'" +
                  text::did_you_mean(name, {"jsonl", "binary"}) + "; valid formats: jsonl, binary");
}

TraceFormat trace_format_for_path(const std::string& path, const std::string& flag) {
  const auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".mtrace") return TraceFormat::Binary;
  if (ext == ".jsonl") return TraceFormat::JsonLines;
  throw UserError((flag.empty() ? path : path + " (" + flag + ")") + ": cannot tell the trace format from the " +
                  (ext.empty() ? std::string("missing extension") : "extension '" + ext + "'") +
                  "; name the file .jsonl (JSON lines) or .mtrace (binary), or give --format jsonl|binary");
}

namespace {
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
}  // namespace

void validate_trace(const RoutingTrace& t, const std::string& where) {
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

RoutingTrace read_trace_jsonl(std::istream& in, const std::string& name) {
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

RoutingTrace read_trace_binary(std::istream& in, std::uint64_t size, const std::string& name) {
  const auto truncated_prefix = [&](const std::string& part) {
    return UserError(name + ": truncated: the file (" + with_commas(static_cast<std::int64_t>(size)) +
                     " bytes) ends inside the " + part +
                     ", before record 0; the file was cut short: copy or "
                     "regenerate it");
  };
  if (size < kFixedPrefix) throw truncated_prefix("fixed header (magic, version, header length)");
  unsigned char prefix[kFixedPrefix];
  in.read(reinterpret_cast<char*>(prefix), kFixedPrefix);
  if (!in) throw UserError(name + ": reading failed; check the file is readable");
  if (std::memcmp(prefix, kMagic, sizeof kMagic) != 0) {
    throw UserError(name + ": does not start with \"MOESIMTR\"; not a binary moesim trace");
  }
  const std::uint32_t version = get_u32(prefix + 8);
  if (version < 1 || version > kTraceFormatVersion) {
    throw UserError(name + ": binary trace version " + std::to_string(version) + " is not one this moesim reads (" +
                    std::to_string(kTraceFormatVersion) + "); upgrade moesim or re-export the trace");
  }
  const std::uint64_t header_len = get_u32(prefix + 12);
  if (size < kFixedPrefix + header_len + 9) throw truncated_prefix("header JSON or the token count");
  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json hj;
  try {
    hj = json::parse_strict(header_text, name + ": header JSON");
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(name + ": header JSON (bytes 16-" + std::to_string(kFixedPrefix + header_len) +
                    ") is malformed at byte " + std::to_string(e.byte) + " of it; the file is damaged: regenerate it");
  } catch (const nlohmann::json::out_of_range& e) {
    throw UserError(name + ": header JSON: " + json::number_overflow(e) + "; the file is damaged: regenerate it");
  }
  std::optional<std::int64_t> declared;
  RoutingTrace t;
  t.header = parse_header(json::Node(hj, name + ": header"), declared);
  unsigned char count_flag[9];
  in.read(reinterpret_cast<char*>(count_flag), 9);
  const std::uint64_t n = get_u64(count_flag);
  const unsigned flag = count_flag[8];
  const std::uint64_t offset = kFixedPrefix + header_len + 9;
  if (flag > 1) {
    throw UserError(name + ": byte " + std::to_string(offset - 1) + " (has-weights) is " + std::to_string(flag) +
                    ", must be 0 or 1; the file is damaged: regenerate it");
  }
  const bool weights = flag == 1;
  const std::uint64_t rec = record_bytes(t.header, weights);
  const std::uint64_t data = size - offset;
  const std::uint64_t fits = data / rec;
  if (n == 0) throw UserError(name + ": the token count is 0; a trace needs at least one token record");
  if (n > fits) {
    const std::uint64_t partial = data % rec;
    throw UserError(name + ": truncated at record " + std::to_string(fits) + ": " +
                    (partial ? "the file ends " + std::to_string(partial) + " bytes into it"
                             : std::string("the file ends just before it")) +
                    " (the header announces " + std::to_string(n) + " records of " + std::to_string(rec) +
                    " bytes); the file was cut short: copy or regenerate it");
  }
  if (data != n * rec) {
    throw UserError(name + ": the token count " + std::to_string(n) +
                    " disagrees with the file size: " + std::to_string(n) + " records of " + std::to_string(rec) +
                    " bytes end at byte " + std::to_string(offset + n * rec) + " but the file has " +
                    std::to_string(size) + " bytes (room for " + std::to_string(fits) + " records" +
                    (data % rec ? " and " + std::to_string(data % rec) + " bytes more" : std::string()) +
                    "); the file is damaged or was appended to: regenerate it");
  }
  model::require_memory(units::bytes(static_cast<double>(n) * static_cast<double>(rec)),
                        name + ": holding its " + std::to_string(n) + " token records",
                        "use a shorter trace (`moesim trace gen --tokens N`), or a machine with more memory");

  if (declared && static_cast<std::uint64_t>(*declared) != n) {
    throw UserError(name + ": header: $.tokens: says " + std::to_string(*declared) + " but the token count is " +
                    std::to_string(n) + "; the file is damaged: regenerate it");
  }

  const auto nn = static_cast<std::size_t>(n);
  const auto per_token = static_cast<std::size_t>(t.header.layers * t.header.top_k);
  const auto k = static_cast<std::size_t>(t.header.top_k);
  t.request.resize(nn);
  t.position.resize(nn);
  t.experts.resize(nn * per_token);
  if (weights) t.weights.resize(nn * per_token);
  // Records are decoded from a buffer of whole records, so memory stays bounded for any trace size.
  const std::size_t batch = std::max<std::size_t>(1, (4u << 20) / static_cast<std::size_t>(rec));
  std::vector<unsigned char> buf(batch * static_cast<std::size_t>(rec));
  for (std::size_t first = 0; first < nn; first += batch) {
    const std::size_t count = std::min(batch, nn - first);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(count * rec));
    if (!in) throw UserError(name + ": reading failed at record " + std::to_string(first) + "; check the file");
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t tok = first + r;
      const unsigned char* p = buf.data() + r * rec;
      t.request[tok] = get_u32(p);
      t.position[tok] = get_u32(p + 4);
      std::uint16_t* ids = t.experts.data() + tok * per_token;
      const unsigned char* q = p + 8;
      for (std::size_t i = 0; i < per_token; ++i) ids[i] = get_u16(q + 2 * i);
      for (std::size_t i = 0; i < per_token; ++i) {
        if (ids[i] >= t.header.experts) {
          throw UserError(name + ": record " + std::to_string(tok) + ", layer " + std::to_string(i / k) + ", slot " +
                          std::to_string(i % k) + ": " + out_of_range_text(ids[i], t.header.experts));
        }
      }
      for (std::size_t l = 0; l < per_token; l += k) {
        if (const auto dup = find_duplicate(ids + l, k)) {
          throw UserError(name + ": record " + std::to_string(tok) + ", layer " + std::to_string(l / k) + ", slot " +
                          std::to_string(dup->first) + ": " + duplicate_text(ids[l + dup->first], dup->second));
        }
      }
      if (weights) {
        float* w = t.weights.data() + tok * per_token;
        const unsigned char* f = q + 2 * per_token;
        for (std::size_t i = 0; i < per_token; ++i) {
          w[i] = std::bit_cast<float>(get_u32(f + 4 * i));
          if (!weight_ok(w[i])) {
            throw UserError(name + ": record " + std::to_string(tok) + ", layer " + std::to_string(i / k) + ", slot " +
                            std::to_string(i % k) + ": " + weight_problem(w[i]) + kWeightFix);
          }
        }
      }
    }
  }
  return t;
}

RoutingTrace read_trace(const std::string& path) {
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

void write_trace_jsonl(const RoutingTrace& t, std::ostream& out) {
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

void write_trace_binary(const RoutingTrace& t, std::ostream& out) {
  check_shape(t);
  const std::string header = header_line(t.header, std::nullopt);
  char prefix[kFixedPrefix];
  std::memcpy(prefix, kMagic, sizeof kMagic);
  put_u32(prefix + 8, static_cast<std::uint32_t>(kTraceFormatVersion));
  put_u32(prefix + 12, static_cast<std::uint32_t>(header.size()));
  out.write(prefix, sizeof prefix);
  out << header;
  char count_flag[9];
  put_u64(count_flag, static_cast<std::uint64_t>(t.tokens()));
  count_flag[8] = t.has_weights() ? 1 : 0;
  out.write(count_flag, sizeof count_flag);

  const auto per_token = static_cast<std::size_t>(t.header.layers * t.header.top_k);
  const auto rec = static_cast<std::size_t>(record_bytes(t.header, t.has_weights()));
  const std::size_t batch = std::max<std::size_t>(1, (4u << 20) / rec);
  std::vector<char> buf(batch * rec);
  const auto n = static_cast<std::size_t>(t.tokens());
  for (std::size_t first = 0; first < n; first += batch) {
    const std::size_t count = std::min(batch, n - first);
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t tok = first + r;
      char* p = buf.data() + r * rec;
      put_u32(p, t.request[tok]);
      put_u32(p + 4, t.position[tok]);
      const std::uint16_t* ids = t.experts.data() + tok * per_token;
      for (std::size_t i = 0; i < per_token; ++i) put_u16(p + 8 + 2 * i, ids[i]);
      if (t.has_weights()) {
        const float* w = t.weights.data() + tok * per_token;
        for (std::size_t i = 0; i < per_token; ++i) {
          put_u32(p + 8 + 2 * per_token + 4 * i, std::bit_cast<std::uint32_t>(w[i]));
        }
      }
    }
    out.write(buf.data(), static_cast<std::streamsize>(count * rec));
  }
}

void add_trace_output(OutputSet& outputs, const RoutingTrace& trace, const std::string& path,
                      std::optional<TraceFormat> format, const std::string& flag) {
  const TraceFormat f = format ? *format : trace_format_for_path(path, flag);
  OutputFile& file = outputs.add(path, flag, f == TraceFormat::Binary);
  if (f == TraceFormat::Binary) {
    write_trace_binary(trace, file.stream());
  } else {
    write_trace_jsonl(trace, file.stream());
  }
}

void write_trace(const RoutingTrace& trace, const std::string& path, std::optional<TraceFormat> format,
                 const std::string& flag) {
  OutputSet outputs;
  add_trace_output(outputs, trace, path, format, flag);
  outputs.commit();
}

void check_trace_matches(const RoutingTrace& trace, const model::Architecture& arch, const std::string& where) {
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
