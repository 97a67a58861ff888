// Comma-separated tables (moesim/model/csv.hpp).

#include "moesim/model/csv.hpp"

#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/text.hpp"

namespace moesim::csv {

std::vector<std::string> split_record(std::string_view line, const std::string& where) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // a file written on Windows
  std::vector<std::string> out;
  std::string field;
  std::size_t i = 0;
  for (;;) {
    field.clear();
    if (i < line.size() && line[i] == '"') {
      // RFC 4180 §2.5-2.7: a quoted field; "" inside it is one quote.
      ++i;
      for (;;) {
        if (i >= line.size())
          throw UserError(where +
                          ": a quoted field is not closed on its line; close it with \" (a field may not "
                          "span lines here)");
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != ',')
        throw UserError(where + ": text after a closing quote at column " + std::to_string(i + 1) +
                        "; quote the whole field, writing a quote inside it as \"\"");
    } else {
      while (i < line.size() && line[i] != ',') field += line[i++];
    }
    out.push_back(field);
    if (i >= line.size()) break;
    ++i;  // the comma
  }
  return out;
}

std::size_t Table::column(std::string_view name) const {
  for (std::size_t c = 0; c < header.size(); ++c)
    if (header[c] == name) return c;
  throw UserError(origin + ": no column '" + std::string(name) + "'; its columns are " + text::join(header));
}

Table parse_table(std::string_view text, const std::string& origin) {
  Table t;
  t.origin = origin;
  std::int64_t lineno = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (line.empty() || line == "\r") continue;
    const std::string where = origin + ": line " + std::to_string(lineno);
    std::vector<std::string> fields = split_record(line, where);
    if (t.header.empty()) {
      t.header = std::move(fields);
      continue;
    }
    if (fields.size() != t.header.size())
      throw UserError(where + ": " + std::to_string(fields.size()) + " fields, but the header has " +
                      std::to_string(t.header.size()) + "; quote a field that holds a comma");
    t.rows.push_back(std::move(fields));
    t.line_of.push_back(lineno);
  }
  if (t.header.empty()) throw UserError(origin + ": empty; a table needs a header line");
  return t;
}

Table read_table(const std::filesystem::path& path) {
  // A parsed cell costs its characters plus a std::string (32 B) per field of a few characters: ~8 B per
  // byte of text is a generous bound.
  return parse_table(read_input_file(path, 8.0, "reading it as a CSV table"), path.string());
}

}  // namespace moesim::csv
