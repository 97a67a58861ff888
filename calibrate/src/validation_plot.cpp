// The validation table as a picture: predicted against measured, per kind of figure, with the fitted
// predictions' intervals as error bars (`moesim validate --plot DIR`).

#include <cmath>
#include <string>

#include "moesim/calibrate/validation.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/plot.hpp"

namespace moesim::calibrate {

scenario::PlotSpec validation_plot(const ValidationResult& r) {
  scenario::PlotSpec spec;
  spec.name = "validation";
  spec.title = "moesim validate: predicted against measured, " + r.table.string();
  // One row per predicted row: the kind decides the series (column 1), then measured, the datasheet
  // figure, the fitted one and its interval (NaN where absent).
  std::string csv =
      "kind,role,measured tokens/s,datasheet tokens/s,fitted tokens/s,interval low tokens/s,"
      "interval high tokens/s,id\n";
  auto num = [](const std::optional<double>& v) { return v ? text::short_number(*v) : std::string("NaN"); };
  const char* kinds[] = {"decode b1", "prefill b1", "decode batched", "max-load", "prefill batched"};
  constexpr int kKinds = sizeof(kinds) / sizeof(kinds[0]);
  bool fitted_of[2][kKinds] = {};  // [calibration, prediction][kind]: series with points (gnuplot warns on empty ones)
  for (const auto& p : r.rows) {
    if (!p.predicted) continue;
    int k = -1;
    for (int i = 0; i < kKinds; ++i)
      if (p.kind == kinds[i]) k = i;
    if (k < 0) continue;
    if (p.fitted) fitted_of[p.row.role == "prediction" ? 1 : 0][k] = true;
    csv += std::to_string(k) + "," + p.row.role + "," + text::short_number(p.row.measured) + "," + num(p.predicted) +
           "," + num(p.fitted) + "," + num(p.interval ? std::optional<double>(p.interval->first) : std::nullopt) + "," +
           num(p.interval ? std::optional<double>(p.interval->second) : std::nullopt) + "," +
           scenario::csv_field(p.row.id) + "\n";
  }
  spec.csv = csv;
  std::string body =
      "set datafile separator ','\n"
      "set logscale xy\n"
      "set key top left\n"
      "set grid\n"
      "set xlabel 'measured (tokens/s)'\n"
      "set ylabel 'predicted (tokens/s)'\n"
      "set title \"Predicted against measured: datasheet profiles (grey), runtimes fitted to dense rows (open),\\n"
      "MoE predictions with the fitted runtimes and their leave-one-configuration-out intervals (filled)\"\n"
      "f(x) = x\n"
      "plot f(x) with lines dashtype 2 lc rgb 'black' title 'predicted = measured', "
      "1.25 * x with lines dashtype 3 lc rgb 'gray50' title 'x1.25 either way', 0.8 * x with lines dashtype 3 lc rgb "
      "'gray50' notitle, "
      "'validation.csv' skip 1 using 3:4 with points pt 6 ps 0.6 lc rgb 'gray70' title 'datasheet'";
  const char* colours[kKinds] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  for (int k = 0; k < kKinds; ++k) {
    // Prediction rows (MoE) filled with their intervals, calibration rows (dense) open.
    if (fitted_of[1][k])
      body += text::printf(
          ", 'validation.csv' skip 1 using 3:($1 == %d && strcol(2) eq 'prediction' ? $5 : NaN):6:7 "
          "with yerrorbars pt 7 ps 0.7 lc rgb '%s' title '%s (MoE, fitted)'",
          k, colours[k], kinds[k]);
    if (fitted_of[0][k])
      body += text::printf(
          ", 'validation.csv' skip 1 using 3:($1 == %d && strcol(2) eq 'calibration' ? $5 : NaN) "
          "with points pt 6 ps 0.7 lc rgb '%s' title '%s (dense, fitted)'",
          k, colours[k], kinds[k]);
  }
  spec.body = body + "\n";
  spec.width = 1000;
  spec.height = 760;
  return spec;
}

}  // namespace moesim::calibrate
