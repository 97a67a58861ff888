#pragma once
// Fields of comma-separated lines and whole-field numbers, for the readers of request traces
// (request_traces.cpp) and of request rates (workload.cpp). Internal to the sim module.

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

namespace moesim::sim::fields {

/// `s` without surrounding spaces, tabs and a trailing CR, then without one pair of enclosing quotes.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

/// The comma-separated fields of `line`, each trimmed, into `out` (views into `line`).
inline void split_fields(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(trim(line.substr(start)));
      return;
    }
    out.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

/// Parses all of `s` as a number of type T (a leading '+' allowed); nullopt if anything is left over.
template <typename T>
std::optional<T> parse_whole(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  T v{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace moesim::sim::fields
