#include "moesim/calibrate/efficiency.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::calibrate {

namespace {

/// Sizes closer than this ratio are one size (the same matrix transposed, or a rounding of it).
constexpr double kSameSize = 1.01;

double parse_bytes(const std::string& text) { return units::parse(text, units::Dimension::Bytes, "band edge"); }

}  // namespace

std::string band_size_text(double bytes) {
  static constexpr const char* kSym[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double m = bytes;
  int i = 0;
  while (m >= 1024.0 && i < 5) {
    m /= 1024.0;
    ++i;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g%s", m, kSym[i]);
  return buf;
}

BandFit fit_efficiency_bands(const std::vector<EfficiencySample>& samples) {
  BandFit fit;
  fit.residuals.assign(samples.size(), 0.0);
  if (samples.empty()) return fit;
  for (const auto& s : samples) {
    MOESIM_CHECK(s.bytes > 0 && s.value > 0 && std::isfinite(s.value),
                 "efficiency sample '" + s.label + "' needs bytes > 0 and a finite value > 0");
  }
  std::vector<std::size_t> order(samples.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return samples[a].bytes < samples[b].bytes; });

  // Groups of samples of (nearly) one size; a group's size is its smallest and largest member.
  struct Group {
    double lo = 0;
    double hi = 0;
    std::vector<std::size_t> members;
  };
  std::vector<Group> groups;
  for (const std::size_t i : order) {
    const double b = samples[i].bytes;
    if (groups.empty() || b > groups.back().lo * kSameSize) {
      groups.push_back({b, b, {}});
    }
    groups.back().hi = b;
    groups.back().members.push_back(i);
  }

  // Edges: smallest / √2, geometric means of neighbours, largest × √2; rounded as they are written.
  std::vector<double> edges;
  edges.push_back(parse_bytes(band_size_text(groups.front().lo / std::sqrt(2.0))));
  for (std::size_t g = 0; g + 1 < groups.size(); ++g) {
    edges.push_back(parse_bytes(band_size_text(std::sqrt(groups[g].hi * groups[g + 1].lo))));
  }
  edges.push_back(parse_bytes(band_size_text(groups.back().hi * std::sqrt(2.0))));

  for (std::size_t g = 0; g < groups.size(); ++g) {
    double sum = 0;
    for (const std::size_t i : groups[g].members) sum += samples[i].value;
    model::EfficiencyBand band;
    band.from = units::bytes(edges[g]);
    band.to = units::bytes(edges[g + 1]);
    band.samples = static_cast<std::int64_t>(groups[g].members.size());
    band.value = sum / static_cast<double>(groups[g].members.size());
    for (const std::size_t i : groups[g].members) fit.residuals[i] = samples[i].value - band.value;
    fit.bands.push_back(band);
  }
  return fit;
}

nlohmann::json bands_json(const std::vector<model::EfficiencyBand>& bands) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& b : bands) {
    // Values to 4 decimals: measurement noise is far larger than 1e-4.
    const double v = std::round(b.value * 1e4) / 1e4;
    out.push_back({{"from", band_size_text(b.from.base())},
                   {"to", band_size_text(b.to.base())},
                   {"value", v > 0 ? v : 1e-4},
                   {"samples", b.samples}});
  }
  return out;
}

std::string figure_value(double base_value, units::Dimension d) {
  std::string s = d == units::Dimension::Bytes ? units::format_binary(units::bytes(base_value), 6)
                                               : units::format(base_value, d, 6);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

nlohmann::json figure_json(double base_value, units::Dimension d, const std::string& source, const std::string& note) {
  nlohmann::json j = {{"value", figure_value(base_value, d)}, {"source", source}};
  if (!note.empty()) j["note"] = note;
  return j;
}

nlohmann::json node_profile_json(const std::string& id, const std::string& name, nlohmann::json devices,
                                 nlohmann::json calibration, const std::string& notes) {
  devices["count"] = 1;
  nlohmann::json j = {{"id", id}, {"kind", "node"}, {"name", name}, {"devices", std::move(devices)}};
  if (!calibration.is_null()) j["calibration"] = std::move(calibration);
  if (!notes.empty()) j["notes"] = notes;
  return j;
}

std::string profile_text(const nlohmann::json& profile) {
  if (!profile.is_object()) return profile.dump(2) + "\n";
  static const char* const kFirst[] = {"id",      "kind",     "name",      "devices",  "read_bandwidth", "read_latency",
                                       "latency", "overhead", "bandwidth", "capacity", "price",          "power"};
  nlohmann::ordered_json out;
  const auto put = [&](const std::string& key) { out[key] = nlohmann::ordered_json::parse(profile.at(key).dump()); };
  for (const char* k : kFirst) {
    if (profile.contains(k)) put(k);
  }
  for (const auto& [k, v] : profile.items()) {
    if (!out.contains(k) && k != "notes" && k != "calibration") put(k);
  }
  if (profile.contains("notes")) put("notes");
  if (profile.contains("calibration")) put("calibration");
  return out.dump(2) + "\n";
}

std::string profile_id(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "this-host" : out;
}

std::string id_for_output(const std::string& out_path, const std::string& fallback) {
  if (out_path.empty()) return fallback;
  const std::string stem = std::filesystem::path(out_path).stem().string();
  return stem.empty() ? fallback : stem;
}

nlohmann::json quantity(double v, const char* unit) { return {{"value", v}, {"unit", unit}}; }

nlohmann::json band_fit_json(const std::vector<EfficiencySample>& points, const BandFit& fit) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < points.size(); ++i) {
    out.push_back({{"label", points[i].label},
                   {"weight_bytes", quantity(points[i].bytes, "B")},
                   {"value", points[i].value},
                   {"residual", fit.residuals[i]}});
  }
  return nlohmann::json{{"points", out}, {"bands", bands_json(fit.bands)}};
}

void print_efficiency_bands(std::ostream& out, const char* name, const BandFit& fit, const std::string& relative) {
  if (fit.bands.empty()) return;
  out << "\n" << name << " efficiency bands (" << relative << "):\n";
  scenario::Table b({"from", "to", "efficiency", "samples"});
  for (const auto& band : fit.bands) {
    b.add_row({band_size_text(band.from.base()), band_size_text(band.to.base()), text::printf("%.3f", band.value),
               std::to_string(band.samples)});
  }
  b.print_text(out);
  out << "outside the measured range: weight matrices below " << band_size_text(fit.bands.front().from.base())
      << " or above " << band_size_text(fit.bands.back().to.base())
      << " use the nearest band, and the simulator says so; measure such sizes with --shapes\n";
}

}  // namespace moesim::calibrate
