#pragma once
// Comma-separated tables as people publish them (RFC 4180: fields in double quotes may hold commas and
// doubled quotes). One record per line: a quoted field that runs past the end of its line is refused, as
// is a line with a different number of fields than the header. Used for the validation table
// (validation/measurements.csv) and for measurement files written by other tools.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::csv {

/// The fields of one record. UserError "<where>: ..." for an unterminated quote or text after a closing one.
std::vector<std::string> split_record(std::string_view line, const std::string& where);

struct Table {
  std::string origin;               ///< the file, for messages
  std::vector<std::string> header;  ///< the first line's fields
  std::vector<std::vector<std::string>> rows;
  std::vector<std::int64_t> line_of;  ///< per row: its line number in the file (messages)

  /// The column named `name`, or UserError naming the file and the columns it has.
  [[nodiscard]] std::size_t column(std::string_view name) const;
};

/// Reads a whole table (bounded by the memory budget before it is read: model/fd_io.hpp). Empty lines are
/// skipped; every record must have as many fields as the header. UserError naming the file and line.
Table read_table(const std::filesystem::path& path);
/// The same from text already in memory; `origin` names it in messages.
Table parse_table(std::string_view text, const std::string& origin);

}  // namespace moesim::csv
