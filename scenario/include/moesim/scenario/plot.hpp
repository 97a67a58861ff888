#pragma once
// Plots drawn with gnuplot through gnuplot-iostream. Every plot leaves four files side by side in its
// directory: <name>.csv (its data, a header row naming each column with its unit), <name>.gp (the
// gnuplot script that reads the CSV and draws both images: anyone can edit it and run `gnuplot
// <name>.gp` there), <name>.png and <name>.svg.

#include <filesystem>
#include <string>

namespace moesim::scenario {

struct PlotSpec {
  std::string name;   ///< file stem: letters, digits, '-' and '_'
  std::string title;  ///< the first comment line of the script
  std::string csv;    ///< the data, CSV with a header row; missing values written as NaN
  /// gnuplot commands after the terminal is set: labels, styles and one `plot` reading "<name>.csv".
  std::string body;
  int width = 900, height = 540;  ///< pixels
};

/// Writes the CSV and the script into `dir` and runs gnuplot there. UserError when gnuplot is missing
/// (how to install it) or fails (its first error line), or an image is not produced.
void draw_plot(const std::filesystem::path& dir, const PlotSpec& spec);

/// The script draw_plot writes for `spec` (for tests and for reading).
std::string plot_script(const PlotSpec& spec);

/// `text` with CSV quoting when it holds a comma, a quote or a newline.
std::string csv_field(const std::string& text);

}  // namespace moesim::scenario
