#pragma once
// A study: an estimate grid plus a cost comparison of measured throughputs (seed 000 Table 5).
// `moesim study` with no arguments runs the built-in examples/dbrx-mac-studio.json: the paper's Table 6,
// its NIC projections (Figure 8) and Table 5.

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/scenario/estimate.hpp"

namespace moesim::scenario {

/// A measured throughput to put a price on.
struct CostPoint {
  std::string label;
  std::string hw;
  std::string nic;  ///< may be empty for one node
  std::int64_t nodes = 1;
  double tokens_per_second = 0;
  std::string source;
};

struct Study {
  std::string description;
  std::string origin;
  EstimateRequest estimate;
  std::vector<CostPoint> cost_comparison;
};

/// A file of examples/ compiled into the binary (so the default jobs run from any directory), parsed;
/// its origin for messages is "built-in examples/<file>".
nlohmann::json builtin_example(const std::string& file);

Study study_from_json(const nlohmann::json& doc, const std::string& source);
/// A study file, or the built-in default (examples/dbrx-mac-studio.json) when path is empty.
Study load_study(const std::string& path);

struct CostRow {
  CostPoint point;
  model::CapitalCost cost;
  double tokens_per_second_per_usd = 0;
};

/// The capital cost of a measured point and its throughput per dollar.
CostRow price_point(const CostPoint& p);

void print_study_text(const Study& s, std::ostream& out);
nlohmann::json study_to_json(const Study& s);

}  // namespace moesim::scenario
