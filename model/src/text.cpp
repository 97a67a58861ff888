#include "moesim/model/text.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <numeric>

namespace moesim::text {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Classic two-row dynamic programme (Levenshtein 1966).
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  std::iota(prev.begin(), prev.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = static_cast<std::size_t>(-1);
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    // A candidate that contains the word ("dbrx" in "dbrx-instruct") is a good guess too.
    if (!word.empty() && c.find(word) != std::string::npos) d = std::min<std::size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  if (best.empty() || best_d > limit) return "";
  return " (did you mean '" + best + "'?)";
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::vector<std::string> split(std::string_view s, char separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(separator, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(static_cast<std::size_t>(n > 0 ? n : 0), '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

std::string short_number(double v) { return printf("%.6g", v); }

std::size_t display_width(std::string_view s) {
  std::size_t n = 0;
  for (const unsigned char c : s) n += (c & 0xC0U) != 0x80U;  // count every byte but UTF-8 continuations
  return n;
}

std::string brief(std::string_view s, std::size_t max_aside) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '(') {
      out += s[i++];
      continue;
    }
    // The matching ")" of this aside, nested ones counted.
    std::size_t depth = 0, j = i;
    for (; j < s.size(); ++j) {
      if (s[j] == '(') ++depth;
      if (s[j] == ')' && --depth == 0) break;
    }
    if (j == s.size() || j - i - 1 <= max_aside) {
      out += s[i++];  // unclosed, or short enough to keep: go on inside it
      continue;
    }
    out += "(...)";
    i = j + 1;
  }
  return out;
}

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace moesim::text
