#pragma once
// Results are data (STYLE.md practice 8): every metric in JSON output is {name, value, unit}, every
// hardware figure {value, unit, source}.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace moesim::reports {

inline nlohmann::json metric(const std::string& name, double value, const std::string& unit) {
  return {{"name", name}, {"value", value}, {"unit", unit}};
}

inline nlohmann::json sourced_json(double value, std::string_view unit, const std::string& source) {
  return {{"value", value}, {"unit", unit}, {"source", source}};
}

}  // namespace moesim::reports
