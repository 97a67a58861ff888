#include "moesim/scenario/plot.hpp"

#include <gnuplot-iostream.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"

namespace moesim::scenario {

namespace fs = std::filesystem;

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string q = "\"";
  for (char ch : text) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string plot_script(const PlotSpec& s) {
  std::ostringstream gp;
  const std::string size = std::to_string(s.width) + "," + std::to_string(s.height);
  gp << "# " << s.title << "\n"
     << "# Drawn by moesim; redraw with `gnuplot " << s.name << ".gp` in this directory. Data: " << s.name << ".csv\n"
     << "set datafile separator comma\n"
     << "set datafile missing \"NaN\"\n"
     << "set key autotitle columnhead\n"
     << "set grid lc rgb '#dddddd'\n"
     << "set border lc rgb '#555555'\n"
     << "set key box opaque\n"
     << "set terminal pngcairo size " << size << " font 'sans,10' enhanced\n"
     << "set output '" << s.name << ".png'\n"
     << s.body << (s.body.empty() || s.body.back() == '\n' ? "" : "\n") << "unset output\n"
     << "set terminal svg size " << size << " font 'sans,10' enhanced\n"
     << "set output '" << s.name << ".svg'\n"
     << "replot\n"
     << "unset output\n";
  return gp.str();
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

bool gnuplot_available() { return std::system("gnuplot --version >/dev/null 2>&1") == 0; }

}  // namespace

void draw_plot(const fs::path& dir_in, const PlotSpec& spec) {
  const fs::path dir = fs::absolute(dir_in);  // the command below changes directory first
  static const bool available = gnuplot_available();
  if (!available)
    throw UserError(
        "gnuplot is not installed: the report draws its plots with it (Debian: apt install gnuplot-nox, "
        "or run scripts/setup.sh)");
  write_file_atomically((dir / (spec.name + ".csv")).string(), spec.csv);
  const std::string script = plot_script(spec);
  write_file_atomically((dir / (spec.name + ".gp")).string(), script);
  const fs::path err = dir / (spec.name + ".gnuplot-errors");
  {
    // gnuplot-iostream opens a pipe to this command; leaving the scope closes it and waits for gnuplot.
    Gnuplot gp("cd " + shell_quote(dir.string()) + " && gnuplot 2>" + shell_quote(err.string()));
    gp << "load '" << spec.name << ".gp'\n";
    gp << "exit\n";
  }
  std::string errors;
  {
    std::ifstream in(err);
    std::getline(in, errors);
  }
  std::error_code ec;
  fs::remove(err, ec);
  for (const char* ext : {".png", ".svg"}) {
    const fs::path img = dir / (spec.name + ext);
    if (!fs::exists(img) || fs::file_size(img) == 0)
      throw UserError("gnuplot did not draw " + img.string() + (errors.empty() ? std::string() : ": " + errors));
  }
  // gnuplot's warnings ("empty x range", ...) are harmless; anything else is a bug in the script moesim wrote.
  MOESIM_CHECK(errors.empty() || errors.rfind("Warning", 0) == 0 || errors.rfind("warning", 0) == 0,
               "gnuplot reported an error on " + spec.name + ".gp: " + errors);
}

}  // namespace moesim::scenario
