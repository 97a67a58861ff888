#pragma once
// A table of results rendered as aligned text for the terminal or as Markdown for reports.
// Column headers carry their units ("load s", "mem/node GB"): a number never appears without one.

#include <ostream>
#include <string>
#include <vector>

namespace moesim::scenario {

class Table {
 public:
  /// `headers` name each column with its unit.
  explicit Table(std::vector<std::string> headers);
  /// Adds a row; it must have one cell per column.
  void add_row(std::vector<std::string> cells);
  [[nodiscard]] std::size_t rows() const { return rows_.size(); }
  /// Aligned columns (first column left, the rest right), two spaces apart.
  void print_text(std::ostream& out) const;
  /// GitHub-flavoured Markdown.
  void print_markdown(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

/// Fixed decimals ("0.061"); values that would round to zero but are positive print as "<0.001",
/// as seed 000's Table 6 does.
std::string fixed(double value, int decimals);

}  // namespace moesim::scenario
