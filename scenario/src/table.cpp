#include "moesim/scenario/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::scenario {

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  MOESIM_CHECK(cells.size() == headers_.size(), "table row has the wrong number of cells");
  rows_.push_back(std::move(cells));
}

void Table::print_text(std::ostream& out) const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    width[c] = text::display_width(headers_[c]);
    for (const auto& r : rows_) width[c] = std::max(width[c], text::display_width(r[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - text::display_width(cells[c]), ' ');
      s += c == 0 ? cells[c] + pad : pad + cells[c];
      if (c + 1 < cells.size()) s += "  ";
    }
    out << s << '\n';
  };
  line(headers_);
  std::vector<std::string> rule;
  rule.reserve(width.size());
  for (auto w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& r : rows_) line(r);
}

void Table::print_markdown(std::ostream& out) const {
  auto line = [&](const std::vector<std::string>& cells) {
    out << '|';
    for (const auto& c : cells) out << ' ' << c << " |";
    out << '\n';
  };
  line(headers_);
  out << '|';
  for (std::size_t c = 0; c < headers_.size(); ++c) out << (c == 0 ? "---|" : "---:|");
  out << '\n';
  for (const auto& r : rows_) line(r);
}

std::string fixed(double value, int decimals) {
  const double half_unit = 0.5 * std::pow(10.0, -decimals);
  char buf[64];
  if (value > 0 && value < half_unit) {
    std::snprintf(buf, sizeof buf, "<%.*f", decimals, 2 * half_unit);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

}  // namespace moesim::scenario
