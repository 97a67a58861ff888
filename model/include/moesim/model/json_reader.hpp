#pragma once
// Reading JSON files with errors that name the file, the JSON path and the fix (STYLE.md practice 3).
//
//   auto doc = json::load_file("my-node.json");          // missing file / malformed JSON -> UserError
//   json::Node n(doc, "my-node.json");
//   n.expect_only({"id", "memory", "source"});            // unknown key -> "did you mean ..."
//   units::Bandwidth bw = n.child("memory").quantity<units::Dimension::Bandwidth>("bandwidth");
//
// Every accessor throws UserError with text like
//   my-node.json: $.memory.bandwidth: "800" has no unit; write it with its unit, e.g. "800GB/s"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/units.hpp"

namespace moesim::json {

/// "an object", "an array", "a string", "a boolean", "an integer", "a number" or "null", for messages.
std::string type_name(const nlohmann::json& j);

/// Reads and parses a JSON file. UserError if it is missing, unreadable or malformed (with line/column).
nlohmann::json load_file(const std::filesystem::path& path);

/// The one JSON parser of untrusted text. Beyond nlohmann's (whose parse_error / out_of_range it lets
/// through for the caller to word), it refuses what nlohmann accepts silently: a key given twice in one
/// object (nlohmann keeps the last; RFC 8259 section 4 leaves it undefined, so a typo'd duplicate would
/// silently win) and a NUL byte (nlohmann stops reading at it, ignoring whatever follows). UserError
/// prefixed with `where` ("file.json", "trace.jsonl: line 3").
nlohmann::json parse_strict(std::string_view text, const std::string& where);

/// Parses JSON text that came from `source_name` (a file path, or "built-in:<name>").
nlohmann::json parse_text(std::string_view text, std::string_view source_name);

/// A JSON value with its provenance: the file it came from and its JSON path ("$.a.b[2]").
class Node {
 public:
  Node(const nlohmann::json& value, std::string source, std::string path = "$");

  [[nodiscard]] const nlohmann::json& raw() const { return *value_; }
  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  /// "file.json: $.a.b" for error messages.
  [[nodiscard]] std::string where() const;
  [[nodiscard]] std::string where(std::string_view key) const;

  [[nodiscard]] bool has(std::string_view key) const;
  [[nodiscard]] bool is_null(std::string_view key) const;
  [[nodiscard]] Node child(std::string_view key) const;
  [[nodiscard]] std::optional<Node> optional_child(std::string_view key) const;
  [[nodiscard]] std::vector<Node> elements(std::string_view key) const;  ///< the items of an array

  [[nodiscard]] std::string string(std::string_view key) const;
  [[nodiscard]] std::optional<std::string> optional_string(std::string_view key) const;
  /// An integer >= min_value.
  [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t min_value = 0) const;
  [[nodiscard]] std::optional<std::int64_t> optional_integer(std::string_view key, std::int64_t min_value = 0) const;
  [[nodiscard]] double number(std::string_view key) const;
  [[nodiscard]] std::optional<double> optional_number(std::string_view key) const;
  [[nodiscard]] bool boolean(std::string_view key) const;
  [[nodiscard]] std::optional<bool> optional_boolean(std::string_view key) const;

  /// A physical quantity written as a string with its unit; must be > 0 unless allow_zero.
  template <units::Dimension D>
  [[nodiscard]] units::Quantity<D> quantity(std::string_view key, bool allow_zero = false) const {
    return units::Quantity<D>::from_base(quantity_base(key, D, allow_zero));
  }
  template <units::Dimension D>
  [[nodiscard]] std::optional<units::Quantity<D>> optional_quantity(std::string_view key,
                                                                    bool allow_zero = false) const {
    if (!has(key) || is_null(key)) return std::nullopt;
    return quantity<D>(key, allow_zero);
  }

  /// Runs `resolve` (which looks this key's value up: a model id, a profile, a placement) and puts the
  /// key's location in front of a UserError it raises: "scenario.json: $.model: unknown model 'x'; ...".
  template <class F>
  auto resolving(std::string_view key, F&& resolve) const -> decltype(resolve()) {
    try {
      return resolve();
    } catch (const UserError& e) {
      throw error(key, e.what());
    }
  }

  /// Throws UserError for the first key not in `allowed`, suggesting the nearest allowed key.
  void expect_only(std::initializer_list<std::string_view> allowed) const;
  void expect_only(const std::vector<std::string>& allowed) const;

  /// A UserError located at this node (or at `key` below it).
  [[nodiscard]] UserError error(std::string_view message) const;
  [[nodiscard]] UserError error(std::string_view key, std::string_view message) const;

 private:
  [[nodiscard]] const nlohmann::json& at(std::string_view key) const;
  [[nodiscard]] double quantity_base(std::string_view key, units::Dimension d, bool allow_zero) const;

  const nlohmann::json* value_;
  std::string source_;
  std::string path_;
};

/// Where the keys of a scenario file were given ("file.json: $.model"), kept with a request whose values
/// are looked up later, so that an unknown id is reported where it was written, as resolving() does.
using Origins = std::map<std::string, std::string, std::less<>>;
/// Records where each of `keys` present in `n` was given.
void note_origins(Origins& origins, const Node& n, std::initializer_list<std::string_view> keys);
/// Runs `resolve`, prefixing a UserError it raises with where `key` was given, if it was given in a file.
template <class F>
auto resolving(const Origins& origins, std::string_view key, F&& resolve) -> decltype(resolve()) {
  const auto it = origins.find(key);
  if (it == origins.end()) return resolve();
  try {
    return resolve();
  } catch (const UserError& e) {
    throw UserError(it->second + ": " + e.what());
  }
}

}  // namespace moesim::json
