#pragma once
// Text helpers shared by the benchmark-output readers (llama_bench_markdown.cpp, bench_import_text.cpp).

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/text.hpp"

namespace moesim::calibrate::bench_import_detail {

inline std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

/// The cells of a markdown row "| a | b |" (without the outer pipes), trimmed.
inline std::vector<std::string> cells(const std::string& line) {
  std::string body = trim(line);
  if (body.size() >= 2 && body.front() == '|' && body.back() == '|') body = body.substr(1, body.size() - 2);
  std::vector<std::string> out;
  for (const auto& c : text::split(body, '|')) out.push_back(trim(c));
  return out;
}

/// A separator row of a markdown table: every cell dashes and colons.
inline bool separator_row(const std::vector<std::string>& c) {
  for (const auto& x : c)
    if (x.empty() || x.find_first_not_of("-:") != std::string::npos) return false;
  return !c.empty();
}

}  // namespace moesim::calibrate::bench_import_detail
