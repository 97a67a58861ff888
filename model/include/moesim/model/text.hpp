#pragma once
// Small text helpers shared by error messages and tables.

#include <string>
#include <string_view>
#include <vector>

namespace moesim::text {

/// Levenshtein edit distance.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// " (did you mean 'x'?)" when a candidate is close to `word`, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

/// "a, b, c"
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

/// Splits "2,3,4" on a separator; empty items are kept (so callers can reject them).
std::vector<std::string> split(std::string_view s, char separator);

/// `s` made safe to print as one line of a terminal: newlines, carriage returns, tabs, ESC and every other
/// control character (C0, DEL) become visible escapes ("\\n", "\\x1b"). Error messages quote user input
/// (a model name, a CSV field), which must not break the one-line format or drive the terminal.
std::string one_line(std::string_view s);

/// `s` with each parenthesised aside longer than `max_aside` bytes replaced by "(...)", for a long source
/// quoted in a one-line note: a fitted runtime's source lists the rows it was fitted to in parentheses,
/// while what it says of the figure (how it was fitted, what no row tests) stays. `s` itself when no aside
/// is that long; an unclosed "(" is kept as it is.
std::string brief(std::string_view s, std::size_t max_aside);

/// Display width of UTF-8 text in a terminal: code points, not bytes ("µs" and "×" are 1 wide each), so
/// columns holding units line up. Every character moesim prints is one column wide (no CJK or emoji).
std::size_t display_width(std::string_view s);

/// printf-style formatting to std::string.
std::string printf(const char* format, ...) __attribute__((format(printf, 1, 2)));

/// A number for messages, 6 significant digits ("%.6g": "2", "0.5", "1e+06").
std::string short_number(double v);

}  // namespace moesim::text
