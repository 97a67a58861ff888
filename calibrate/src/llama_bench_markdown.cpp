// llama-bench's output read in either of its formats (calibrate/bench_import.hpp).
//
// The markdown table is llama.cpp's markdown_printer (tools/llama-bench/llama-bench.cpp, ggml-org/llama.cpp
// commit 0104b151c56d54143e2e3554aabe9e2b2b8dbdba): a header row of field names ("model", "size", "params",
// "backend", "ngl", optional parameter columns, "test", "t/s"), a separator row of dashes and colons, then
// one row per test whose model column is the test's model_type, whose test column is "pp%d", "tg%d" or
// "pp%d+tg%d" followed by " @ d%d" when n_depth > 0, and whose t/s column is "%.2f ± %.2f" (mean and
// standard deviation of the tokens/s samples); a "build: <commit> (<number>)" line follows the table.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "bench_import_detail.hpp"
#include "moesim/calibrate/bench_import.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"

namespace moesim::calibrate {
namespace {

using bench_import_detail::cells;
using bench_import_detail::trim;

std::int64_t whole(std::string_view s, const std::string& where, const std::string& test) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0)
    throw UserError(where + ", column test: \"" + text::one_line(test) +
                    "\" is not llama-bench's pp<N>, tg<N> or pp<N>+tg<N> with an optional \" @ d<N>\"");
  return v;
}

nlohmann::json markdown_tests(const std::string& text, const std::string& file) {
  const std::vector<std::string> lines = text::split(text, '\n');
  std::vector<std::string> header;
  std::size_t i = 0;
  for (; i < lines.size(); ++i) {
    const std::string l = trim(lines[i]);
    if (l.empty() || l.front() != '|') continue;
    header = cells(l);
    break;
  }
  const auto column = [&](const char* name) -> std::size_t {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end())
      throw UserError(file + ": line " + std::to_string(i + 1) + ": the table has no \"" + name +
                      "\" column; give llama-bench's own output (`llama-bench -o json`, or its default markdown "
                      "table with the model, test and t/s columns)");
    return static_cast<std::size_t>(it - header.begin());
  };
  if (header.empty())
    throw UserError(file +
                    ": neither a JSON array nor a markdown table; give llama-bench's output as it printed it "
                    "(`llama-bench -o json > out.json`, or its default table)");
  const std::size_t model = column("model"), test = column("test"), ts = column("t/s");
  // llama-bench prints a parameter's column only when it differs from its default (n_ubatch 512).
  const auto ubatch_at = std::find(header.begin(), header.end(), "n_ubatch");
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t j = i + 1; j < lines.size(); ++j) {
    const std::string l = trim(lines[j]);
    if (l.empty() || l.front() != '|') break;  // the table ends (the "build:" line follows it)
    const std::vector<std::string> c = cells(l);
    if (bench_import_detail::separator_row(c)) continue;
    const std::string where = file + ": line " + std::to_string(j + 1);
    if (c.size() != header.size())
      throw UserError(where + ": " + std::to_string(c.size()) + " columns where the header has " +
                      std::to_string(header.size()) + "; was the table cut or edited?");
    // The test column: pp<N>, tg<N> or pp<N>+tg<N>, then " @ d<N>".
    std::string t = c[test];
    std::int64_t depth = 0;
    if (const auto at = t.find(" @ d"); at != std::string::npos) {
      depth = whole(std::string_view(t).substr(at + 4), where, c[test]);
      t = t.substr(0, at);
    }
    std::int64_t prompt = 0, gen = 0;
    for (const auto& part : text::split(t, '+')) {
      if (part.starts_with("pp")) {
        prompt = whole(std::string_view(part).substr(2), where, c[test]);
      } else if (part.starts_with("tg")) {
        gen = whole(std::string_view(part).substr(2), where, c[test]);
      } else {
        whole("x", where, c[test]);  // throws the column's message
      }
    }
    // The t/s column: "<mean> ± <stddev>".
    const std::string& rate = c[ts];
    double avg = 0;
    const auto [p, ec] = std::from_chars(rate.data(), rate.data() + rate.size(), avg);
    if (ec != std::errc() || !(avg > 0) || !std::isfinite(avg))
      throw UserError(where + ", column t/s: \"" + text::one_line(rate) +
                      "\" is not llama-bench's \"<tokens/s> ± <stddev>\"");
    (void)p;
    out.push_back(
        {{"model_type", c[model]}, {"n_prompt", prompt}, {"n_gen", gen}, {"n_depth", depth}, {"avg_ts", avg}});
    if (ubatch_at != header.end()) {
      const std::string& u = c[static_cast<std::size_t>(ubatch_at - header.begin())];
      std::int64_t n = 0;
      const auto [q, e] = std::from_chars(u.data(), u.data() + u.size(), n);
      if (e != std::errc() || q != u.data() + u.size() || n < 1)
        throw UserError(where + ", column n_ubatch: \"" + text::one_line(u) + "\" is not a micro-batch size in tokens");
      out.back()["n_ubatch"] = n;
    }
  }
  if (out.empty()) throw UserError(file + ": the markdown table holds no tests");
  return out;
}

}  // namespace

nlohmann::json read_llama_bench(const std::filesystem::path& path) {
  // 17 bytes of memory per byte of text once parsed, as every JSON input (json_reader.cpp load_file).
  const std::string text = read_input_file(path, 17.0, "parsing it as llama-bench output");
  const auto first = text.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
  if (first != std::string::npos && (text[first] == '[' || text[first] == '{'))
    return json::parse_text(text, path.string());
  return markdown_tests(text, path.string());
}

}  // namespace moesim::calibrate
