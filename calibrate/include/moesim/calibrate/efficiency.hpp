#pragma once
// Size-banded efficiency tables (a roofline times measured efficiency) fitted to kernel measurements, and
// the JSON pieces every profile `moesim calibrate` writes: figures {"value": "<number><unit>", "source"},
// and a whole node profile (kind "node") around a "devices" object.
//
// The roofline (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
// multicore architectures", CACM 52(4), 2009) bounds a kernel by min(peak FLOP/s, bytes/s × intensity).
// Real kernels reach a fraction of either roof that depends on their size (caches, threading thresholds,
// blocking): the table holds that fraction per band of weight-matrix size, as model::EfficiencyTable
// (model/hardware.hpp) reads it from a node profile's devices.efficiency.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/model/hardware.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate {

/// One measured efficiency: a kernel whose weight matrix holds `bytes` reached `value` × the roof (the
/// memory bandwidth or the peak FLOP rate). `label` names the measurement for reports.
struct EfficiencySample {
  double bytes = 0;
  double value = 0;
  std::string label;
};

/// The fitted bands and, per input sample (same order), its residual: sample value − its band's value.
struct BandFit {
  std::vector<model::EfficiencyBand> bands;
  std::vector<double> residuals;
};

/// Groups samples by weight-matrix size into contiguous bands [from, to):
///  - sizes within 1% of each other are one size (e.g. 6144×10752 and 10752×6144);
///  - the boundary between two neighbouring sizes is their geometric mean, the first band starts at the
///    smallest size / √2 and the last ends at the largest × √2 (sizes span decades, so the midpoints are
///    taken on a log scale);
///  - each band's value is the mean of its samples (the least-squares piecewise-constant fit), `samples`
///    counts them.
/// Boundaries are rounded to 4 significant digits in the unit they are written with (see band_size_text),
/// so the table a profile holds equals the returned one. Empty input: no bands. Samples need bytes > 0 and
/// value > 0 (MOESIM_CHECK).
BandFit fit_efficiency_bands(const std::vector<EfficiencySample>& samples);

/// A band edge as written in profiles: 4 significant digits with an IEC prefix ("1.5MiB", "252.4MiB").
std::string band_size_text(double bytes);

/// [{"from": "...", "to": "...", "value": 0.81, "samples": 3}, ...] as model::load_node parses it.
nlohmann::json bands_json(const std::vector<model::EfficiencyBand>& bands);

/// The fitted bands as a text table ("<name> efficiency bands (<relative>)"), and what lies outside them.
void print_efficiency_bands(std::ostream& out, const char* name, const BandFit& fit, const std::string& relative);

/// {"value": v, "unit": unit}: a number in a calibration record (raw samples keep full precision).
nlohmann::json quantity(double v, const char* unit);

/// A fit for the calibration record: {"points": [{label, weight_bytes, value, residual}], "bands": [...]}.
nlohmann::json band_fit_json(const std::vector<EfficiencySample>& points, const BandFit& fit);

/// A figure's value string that units::parse reads back: 6 significant digits and an SI prefix with no
/// space ("12.3457GB/s", "1.23457TFLOP/s", "84.2us"); sizes with an IEC prefix ("23.4712GiB").
std::string figure_value(double base_value, units::Dimension d);

/// {"value": figure_value(...), "source": source} (+ "note" when not empty).
nlohmann::json figure_json(double base_value, units::Dimension d, const std::string& source,
                           const std::string& note = "");

/// A complete node profile (kind "node") of one device: {"id", "kind", "name", "devices" (count 1 and
/// `devices`), "calibration", "notes"}. model::load_node reads it when `devices` holds valid figures.
nlohmann::json node_profile_json(const std::string& id, const std::string& name, nlohmann::json devices,
                                 nlohmann::json calibration, const std::string& notes);

/// The text of a profile file: 2-space indented JSON with the top-level keys in reading order (id, kind,
/// name, the figures, notes, and the bulky "calibration" last) and a final newline.
std::string profile_text(const nlohmann::json& profile);

/// A profile id from free text: lower case, [a-z0-9-] ("Intel(R) Xeon" -> "intel-r-xeon").
std::string profile_id(const std::string& text);

/// The id of a profile written to `out_path` (its file name without .json), else `fallback`.
std::string id_for_output(const std::string& out_path, const std::string& fallback);

}  // namespace moesim::calibrate
