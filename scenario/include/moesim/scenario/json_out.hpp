#pragma once
// Results are data (STYLE.md practice 8): every metric in JSON output is {name, value, unit}, every
// hardware figure {value, unit, source}.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace moesim::scenario {

inline nlohmann::json metric(const std::string& name, double value, const std::string& unit) {
  return {{"name", name}, {"value", value}, {"unit", unit}};
}

/// A metric the run could not compute for want of an input it does not need for its answer (a price):
/// value null, and a note saying what is missing and how to add it. Never a stand-in number.
inline nlohmann::json missing_metric(const std::string& name, const std::string& unit, const std::string& note) {
  return {{"name", name}, {"value", nullptr}, {"unit", unit}, {"note", note}};
}

/// A hardware figure the profile does not give: value null, and the note saying how to add it.
inline nlohmann::json missing_json(std::string_view unit, const std::string& note) {
  return {{"value", nullptr}, {"unit", unit}, {"note", note}};
}

inline nlohmann::json sourced_json(double value, std::string_view unit, const std::string& source) {
  return {{"value", value}, {"unit", unit}, {"source", source}};
}

}  // namespace moesim::scenario
