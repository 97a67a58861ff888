// Telling a trace file's format from its start (sim/trace_import.hpp, detect_trace_format): what
// `moesim trace convert` does without --from, instead of failing on the first line it cannot parse.
//
// The first 64 KiB of the (decompressed) content are enough: the binary form starts with its magic, and the
// JSON forms are told apart by their shape near the start, which a SAX pass over the prefix reads without
// building the document (and stops as soon as it has seen enough, so a cut-off prefix is fine).

#include <algorithm>
#include <istream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_import.hpp"
#include "moesim/sim/trace_input.hpp"

namespace moesim::sim {
namespace {

using Json = nlohmann::json;  // not `json`: that names model::json, the located reader

enum class Kind { None, Object, Array, Number, String, Other };

const char* kind_text(Kind k) {
  switch (k) {
    case Kind::Object:
      return "an object";
    case Kind::Array:
      return "an array";
    case Kind::Number:
      return "a number";
    case Kind::String:
      return "a string";
    case Kind::Other:
      return "null or a boolean";
    case Kind::None:
      break;
  }
  return "nothing";
}

// The shape of the first JSON value: its kind, its keys (an object), or the kinds down its first elements
// (an array: [0], [0][0], [0][0][0]) and the keys of [0] when that is an object.
class Shape {
 public:
  Kind root = Kind::None;
  Kind first[3] = {Kind::None, Kind::None, Kind::None};
  std::vector<std::string> keys;  // of the root object, or of [0]
  std::string format_value;       // the root object's "format", when a string
  bool complete = false;          // the first value (or the root's first element) was read to its end

  bool null() { return value(Kind::Other); }
  bool boolean(bool) { return value(Kind::Other); }
  bool number_integer(Json::number_integer_t) { return value(Kind::Number); }
  bool number_unsigned(Json::number_unsigned_t) { return value(Kind::Number); }
  bool number_float(Json::number_float_t, const Json::string_t&) { return value(Kind::Number); }
  bool string(Json::string_t& s) {
    if (stack_.size() == 1 && root == Kind::Object && last_key_ == "format") format_value = s;
    return value(Kind::String);
  }
  bool binary(Json::binary_t&) { return value(Kind::Other); }
  bool start_object(std::size_t) {
    const bool go = value(Kind::Object);
    stack_.push_back(Kind::Object);
    return go;
  }
  bool start_array(std::size_t) {
    const bool go = value(Kind::Array);
    stack_.push_back(Kind::Array);
    return go;
  }
  bool end_object() { return end(); }
  bool end_array() { return end(); }
  bool key(Json::string_t& k) {
    last_key_ = k;
    const bool root_keys = stack_.size() == 1 && root == Kind::Object;
    const bool first_keys = stack_.size() == 2 && root == Kind::Array && first[0] == Kind::Object && in_first_;
    if (root_keys || first_keys) keys.push_back(k);
    return keys.size() < 256;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  bool value(Kind k) {
    const std::size_t d = stack_.size();
    if (d == 0) {
      root = k;
      if (k != Kind::Object && k != Kind::Array) complete = true;
      return !complete;
    }
    if (root == Kind::Array && (d == 1 ? !seen_first_ : in_first_ && d <= 3 && first[d - 1] == Kind::None)) {
      first[d - 1] = k;
      if (d == 1) {
        seen_first_ = true;
        in_first_ = k == Kind::Object || k == Kind::Array;
        if (!in_first_) complete = true;
      }
    }
    return !complete;
  }
  bool end() {
    stack_.pop_back();
    if (stack_.empty()) complete = true;                                          // the root closed
    if (stack_.size() == 1 && root == Kind::Array && in_first_) complete = true;  // [0] closed
    return !complete;
  }

  std::vector<Kind> stack_;
  std::string last_key_;
  bool seen_first_ = false;
  bool in_first_ = false;
};

bool has(const std::vector<std::string>& keys, const char* k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

bool all_digits(const std::vector<std::string>& keys) {
  return !keys.empty() && std::all_of(keys.begin(), keys.end(), [](const std::string& k) {
    return !k.empty() && k.find_first_not_of("0123456789") == std::string::npos;
  });
}

std::string keys_text(const std::vector<std::string>& keys) {
  std::vector<std::string> shown(keys.begin(),
                                 keys.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(keys.size(), 6)));
  return text::join(shown) + (keys.size() > 6 ? ", ..." : "");
}

const char* const kFormats =
    "give --from FORMAT: jsonl or binary (moesim's own), moe-selection (per-query JSON arrays of steps), "
    "speculative-moe (JSON lines {problem_id, layer, experts, token_idx or token_pos}), vllm (a /v1/completions "
    "response or routed_experts arrays)";

}  // namespace

DetectedFormat detect_trace_format(const std::string& path) {
  TraceInput in(path, 1.0, /*measure=*/false);  // only a 64 KiB prefix is read: no bomb can get past it
  std::string prefix(std::size_t{64} * 1024, '\0');
  in.stream().read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  prefix.resize(static_cast<std::size_t>(in.stream().gcount()));
  const std::string packed =
      in.compression() == Compression::None ? "" : " (" + compression_name(in.compression()) + ")";
  if (in.stream().bad()) {
    throw UserError(path + ": reading its start failed" +
                    (packed.empty() ? std::string("; check the file is readable")
                                    : ": it is not valid " + compression_name(in.compression()) +
                                          " data; the file is damaged or cut short: copy it again"));
  }
  if (prefix.rfind("MOESIMTR", 0) == 0) return {std::nullopt, "binary", "it starts with the magic MOESIMTR" + packed};
  const auto start = prefix.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) throw UserError(path + ": is empty" + packed + "; there is no trace to convert");
  Shape s;
  Json::sax_parse(prefix.begin() + static_cast<std::ptrdiff_t>(start), prefix.end(), &s,
                  nlohmann::detail::input_format_t::json, false);
  const auto& k = s.keys;
  if (s.root == Kind::Object) {
    if (s.format_value == "moesim-trace")
      return {std::nullopt, "jsonl", "its first line is a moesim-trace header" + packed};
    if (has(k, "problem_id") && has(k, "layer") && has(k, "experts")) {
      return {ImportFormat::SpeculativeMoe, "speculative-moe",
              "its first record has problem_id, layer and experts (" +
                  std::string(has(k, "token_pos") ? "token_pos: the profiler's raw output" : "token_idx") + ")" +
                  packed};
    }
    if (has(k, "choices")) return {ImportFormat::Vllm, "vllm", "it is a response body with choices" + packed};
    if (has(k, "routed_experts") || has(k, "prompt_routed_experts"))
      return {ImportFormat::Vllm, "vllm", "it is an object with routed_experts" + packed};
    if (has(k, "request") && has(k, "experts")) {
      throw UserError(path +
                      ": starts with a moesim token record but no header line; add the header "
                      "{\"format\": \"moesim-trace\", ...} (sim/TRACES.md §1.1)" +
                      packed);
    }
  } else if (s.root == Kind::Array) {
    if (s.first[0] == Kind::Object && all_digits(k))
      return {ImportFormat::MoeSelection, "moe-selection", "it is an array of steps keyed by layer index" + packed};
    if (s.first[0] == Kind::Object && (has(k, "routed_experts") || has(k, "choices")))
      return {ImportFormat::Vllm, "vllm", "it is an array of objects with routed_experts" + packed};
    if (s.first[0] == Kind::Array && s.first[1] == Kind::Array && s.first[2] == Kind::Number)
      return {ImportFormat::Vllm, "vllm", "it is a [tokens][layers][top_k] array of ids" + packed};
  }
  std::string what;
  if (s.root == Kind::None) {
    std::string head = prefix.substr(start, 24);
    std::replace_if(
        head.begin(), head.end(),
        [](char c) { return static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) >= 127; }, '.');
    what = "it is not JSON: it starts with \"" + head + "\"";
  } else if (s.root == Kind::Object) {
    what = "it starts with an object with keys " + (k.empty() ? std::string("(none)") : keys_text(k));
  } else if (s.root == Kind::Array) {
    what = std::string("it starts with an array whose first element is ") + kind_text(s.first[0]);
    if (s.first[0] == Kind::Object) what += " with keys " + (k.empty() ? std::string("(none)") : keys_text(k));
    if (s.first[0] == Kind::Array) what += std::string(" of ") + kind_text(s.first[1]);
  } else {
    what = std::string("it is ") + kind_text(s.root);
  }
  throw UserError(path + ": cannot tell the trace format" + packed + ": " + what + "; " + kFormats);
}

}  // namespace moesim::sim
