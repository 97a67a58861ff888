#include "moesim/model/json_reader.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"

namespace moesim::json {

std::string type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    default:
      return "a value";
  }
}
namespace {

/// "line L, column C" for a byte offset into text (nlohmann reports byte positions).
std::string line_column(std::string_view text, std::size_t byte) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

}  // namespace

std::string number_overflow(const nlohmann::json::exception& e) {
  // e.what() is "[json.exception.out_of_range.406] number overflow parsing '1E400'".
  const std::string what = e.what();
  const auto at = what.find("] ");
  return "malformed JSON: " + (at == std::string::npos ? what : what.substr(at + 2));
}

nlohmann::json parse_strict(std::string_view text, const std::string& where) {
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw UserError(where + ": holds a NUL byte at byte " + std::to_string(nul) + " (" + line_column(text, nul) +
                    "); JSON text has none: the file is damaged or not JSON");
  }
  // Each open object or array: the keys seen so far (objects) and where its current child is.
  struct Frame {
    bool object = false;
    std::set<std::string> keys;
    std::string key;
    std::size_t index = 0;
  };
  std::vector<Frame> frames;
  const auto path_to_top = [&] {
    std::string p = "$";
    for (std::size_t i = 0; i + 1 < frames.size(); ++i)
      p += frames[i].object ? "." + frames[i].key : "[" + std::to_string(frames[i].index) + "]";
    return p;
  };
  const auto element_done = [&] {
    if (!frames.empty() && !frames.back().object) ++frames.back().index;
  };
  const nlohmann::json::parser_callback_t check = [&](int, nlohmann::json::parse_event_t event,
                                                      nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        frames.push_back({event == E::object_start, {}, {}, 0});
        break;
      case E::key: {
        auto& top = frames.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          throw UserError(where + ": " + path_to_top() + ": the key \"" + top.key +
                          "\" appears twice in one object; keep one (JSON readers differ on which would win)");
        }
        break;
      }
      case E::object_end:
      case E::array_end:
        frames.pop_back();
        element_done();
        break;
      case E::value:
        element_done();
        break;
    }
    return true;
  };
  return nlohmann::json::parse(text.begin(), text.end(), check);
}

nlohmann::json parse_text(std::string_view text, std::string_view source_name) {
  try {
    return parse_strict(text, std::string(source_name));
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ...";
    // keep the part after "parse error" that explains, and give the position ourselves.
    std::string what = e.what();
    const auto colon = what.find(": ", what.find("parse error"));
    const std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    throw UserError(std::string(source_name) + ": malformed JSON at " + line_column(text, e.byte ? e.byte - 1 : 0) +
                    ": " + detail + "; fix the JSON syntax (check quotes, commas and brackets)");
  } catch (const nlohmann::json::out_of_range& e) {
    // The parser's number overflow (out_of_range.406, "number overflow parsing '1E400'"): found by fuzz_hw_profile.
    throw UserError(std::string(source_name) + ": " + number_overflow(e) +
                    "; write numbers within a double's range (about 1.8e308)");
  }
}

nlohmann::json load_file(const std::filesystem::path& path) {
  // The text, and the parsed tree: nlohmann::json takes 16 bytes per value plus its containers' nodes,
  // about 16 bytes per byte of text for the arrays of small numbers traces are made of (a value per 1-2
  // characters), so a JSON file is held only when 17 times its size fits. read_input_file refuses
  // anything but a regular file (a FIFO, /dev/zero) before reading, and stops at that bound.
  return parse_text(read_input_file(path, 17.0, "parsing it as JSON"), path.string());
}

Node::Node(const nlohmann::json& value, std::string source, std::string path)
    : value_(&value), source_(std::move(source)), path_(std::move(path)) {}

std::string Node::where() const { return source_ + ": " + path_; }

std::string Node::where(std::string_view key) const { return source_ + ": " + path_ + "." + std::string(key); }

UserError Node::error(std::string_view message) const { return UserError(where() + ": " + std::string(message)); }

UserError Node::error(std::string_view key, std::string_view message) const {
  return UserError(where(key) + ": " + std::string(message));
}

bool Node::has(std::string_view key) const { return value_->is_object() && value_->contains(key); }

bool Node::is_null(std::string_view key) const { return has(key) && (*value_)[std::string(key)].is_null(); }

const nlohmann::json& Node::at(std::string_view key) const {
  if (!value_->is_object()) throw error("is " + type_name(*value_) + ", expected an object");
  auto it = value_->find(key);
  if (it == value_->end()) throw error(key, "is missing; add it");
  return *it;
}

Node Node::child(std::string_view key) const {
  const auto& v = at(key);
  if (!v.is_object()) throw error(key, "is " + type_name(v) + ", expected an object { ... }");
  return Node(v, source_, path_ + "." + std::string(key));
}

std::optional<Node> Node::optional_child(std::string_view key) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  return child(key);
}

std::vector<Node> Node::elements(std::string_view key) const {
  const auto& v = at(key);
  if (!v.is_array()) throw error(key, "is " + type_name(v) + ", expected an array [ ... ]");
  std::vector<Node> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.emplace_back(v[i], source_, path_ + "." + std::string(key) + "[" + std::to_string(i) + "]");
  }
  return out;
}

std::string Node::string(std::string_view key) const {
  const auto& v = at(key);
  if (!v.is_string()) throw error(key, "is " + type_name(v) + ", expected a string");
  return v.get<std::string>();
}

std::optional<std::string> Node::optional_string(std::string_view key) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  return string(key);
}

std::int64_t Node::integer(std::string_view key, std::int64_t min_value) const {
  const auto& v = at(key);
  if (!v.is_number_integer()) {
    // Only a float within int64's range is converted (converting one outside it is undefined behaviour):
    // 2^63 is exactly representable, and every float below it in magnitude converts exactly when integral.
    const bool in_range = v.is_number_float() && std::fabs(v.get<double>()) < 9223372036854775808.0;
    if (in_range && v.get<double>() == static_cast<double>(static_cast<std::int64_t>(v.get<double>()))) {
      // 4.0 is an integer written as a float; accept it.
      const auto n = static_cast<std::int64_t>(v.get<double>());
      if (n < min_value) throw error(key, "is " + std::to_string(n) + ", must be >= " + std::to_string(min_value));
      return n;
    }
    if (v.is_number_float() && !in_range)
      throw error(key, "is " + text::printf("%g", v.get<double>()) + ", too large for a count; give an integer >= " +
                           std::to_string(min_value) + " within the field's limits");
    throw error(key, "is " + type_name(v) + ", expected an integer");
  }
  if (v.is_number_unsigned() &&
      v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw error(key, "is " + std::to_string(v.get<std::uint64_t>()) + ", too large for a count; give an integer >= " +
                         std::to_string(min_value) + " within the field's limits");
  const std::int64_t n = v.get<std::int64_t>();
  if (n < min_value) throw error(key, "is " + std::to_string(n) + ", must be >= " + std::to_string(min_value));
  return n;
}

std::optional<std::int64_t> Node::optional_integer(std::string_view key, std::int64_t min_value) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  return integer(key, min_value);
}

double Node::number(std::string_view key) const {
  const auto& v = at(key);
  if (!v.is_number()) throw error(key, "is " + type_name(v) + ", expected a number");
  return v.get<double>();
}

std::optional<double> Node::optional_number(std::string_view key) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  return number(key);
}

bool Node::boolean(std::string_view key) const {
  const auto& v = at(key);
  if (!v.is_boolean()) throw error(key, "is " + type_name(v) + ", expected true or false");
  return v.get<bool>();
}

std::optional<bool> Node::optional_boolean(std::string_view key) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  return boolean(key);
}

double Node::quantity_base(std::string_view key, units::Dimension d, bool allow_zero) const {
  const auto& v = at(key);
  if (v.is_number()) {
    throw error(key, "is the bare number " + v.dump() + "; a physical quantity needs its unit as a string, " +
                         units::describe(d));
  }
  if (!v.is_string()) throw error(key, "is " + type_name(v) + ", expected " + units::describe(d));
  const double x = units::parse(v.get<std::string>(), d, where(key));
  if (x < 0 || (x == 0 && !allow_zero)) {
    throw error(key, "is " + v.dump() + ", must be " + (allow_zero ? "zero or positive" : "positive") + "; write " +
                         units::describe(d));
  }
  return x;
}

void Node::expect_only(std::initializer_list<std::string_view> allowed) const {
  expect_only(std::vector<std::string>(allowed.begin(), allowed.end()));
}

void Node::expect_only(const std::vector<std::string>& allowed) const {
  // A value that should hold keys but is not an object (a scenario file holding [1, 2]) is refused here,
  // where every reader of an object starts, rather than read as "no keys given" and run on defaults.
  if (!value_->is_object()) throw error("is " + type_name(*value_) + ", expected an object { ... }");
  for (const auto& [k, v] : value_->items()) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == k;
    if (!ok) {
      throw error(k,
                  "is not a known key" + text::did_you_mean(k, allowed) + "; valid keys here: " + text::join(allowed));
    }
  }
}

void note_origins(Origins& origins, const Node& n, std::initializer_list<std::string_view> keys) {
  for (const auto k : keys)
    if (n.has(k)) origins[std::string(k)] = n.where(k);
}

}  // namespace moesim::json
