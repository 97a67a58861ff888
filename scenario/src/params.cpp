// The parameter table's parts that do not depend on the request type (params.hpp).

#include "moesim/scenario/params.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "moesim/model/text.hpp"

namespace moesim::scenario {

std::string flag_of(std::string_view key) {
  std::string f(key);
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

std::uint64_t parse_seed(const std::string& text, const std::string& what) {
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    throw UserError(what + " " + text + ": a seed is a whole number from 0 to 18446744073709551615");
  }
  return v;
}

std::vector<double> parse_numbers(const std::string& text, const std::string& flag, const std::string& example) {
  std::vector<double> v;
  for (const auto& item : text::split(text, ',')) {
    double x = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || !std::isfinite(x))
      throw UserError(flag + ": '" + item + "' is not a number; write e.g. " + example);
    v.push_back(x);
  }
  return v;
}

bool parse_on_off(const std::string& text, const std::string& flag) {
  if (text == "on" || text == "true" || text == "yes") return true;
  if (text == "off" || text == "false" || text == "no") return false;
  throw UserError(flag + " " + text + ": write on or off");
}

std::string number_text(double v) { return text::printf("%.10g", v); }

namespace {

/// `words` filled into lines of at most `width` characters, each starting with `indent`.
std::string wrapped(const std::string& words, std::size_t width, const std::string& indent) {
  std::string out;
  std::string line = indent;
  for (const auto& w : text::split(words, ' ')) {
    if (w.empty()) continue;
    if (line.size() > indent.size() && line.size() + 1 + w.size() > width) {
      out += line + "\n";
      line = indent;
    }
    if (line.size() > indent.size()) line += ' ';
    line += w;
  }
  if (line.size() > indent.size()) out += line + "\n";
  return out;
}

}  // namespace

std::string render_key_docs(const std::vector<KeyDoc>& keys, const std::string& title) {
  std::string out = "\n" + title + ":\n";
  for (const auto& k : keys) {
    std::string head = "  " + k.key + " (" + k.type;
    if (!k.unit.empty()) head += ", " + k.unit;
    if (!k.default_text.empty()) head += "; default " + k.default_text;
    head += k.flag.empty() ? "; file only)" : "; " + k.flag + ")";
    out += head + "\n" + wrapped(k.description, 100, "      ");
  }
  return out;
}

}  // namespace moesim::scenario
