#pragma once
// What a configuration costs: capital (nodes, NICs, the switch when the node count needs one), the
// cost of a million tokens once capital is amortised and energy is paid, and the cloud alternative.
//
// Prices come from the profiles, each with its source and date (hwprofiles/README.md); the rules that
// combine them are here, each stated where it is applied.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/hardware.hpp"
#include "moesim/model/units.hpp"

namespace moesim::model {

/// Capital cost: node price × nodes + NIC price × nodes (NICs only when nodes > 1) + switches.
///
/// Switch rule: two nodes are cabled back to back (seed 000's two-node runs need no switch, and its
/// Table 5 prices none); three or more plug into one switch per `ports` nodes, ceil(nodes / ports)
/// switches of the NIC profile's "switch" (one tier: inter-switch links are not priced, and the
/// notes say so). A NIC profile without a switch leaves it unpriced, and the notes say that too.
struct CapitalCost {
  units::Money nodes;
  units::Money nics;
  units::Money switches;
  std::int64_t switch_count = 0;
  std::vector<std::string> notes;  ///< what the figure leaves out, one line each
  [[nodiscard]] units::Money total() const { return nodes + nics + switches; }
};
/// UserError naming the profile and the field when a price it needs is missing (the answer is a cost).
CapitalCost capital_cost(const NodeProfile& node, const NicProfile* nic, std::int64_t nodes);
/// The first price capital_cost(node, nic, nodes) needs and the profiles lack, as the line it would throw
/// (the file, $.price, how to add it); nullopt when every needed price is there. An answer that is not a
/// cost (estimate's tokens/s) prints it where the cost would be, instead of refusing.
std::optional<std::string> missing_price(const NodeProfile& node, const NicProfile* nic, std::int64_t nodes);

/// Throughput per dollar of capital cost (seed 000 Table 5: TP./USD).
double tokens_per_second_per_usd(double tokens_per_second, units::Money cost);

/// How to turn capital and power into a cost per token.
struct CostAssumptions {
  std::optional<double> usd_per_kwh;  ///< electricity price; absent: energy not counted
  double years = 3;                   ///< straight-line amortisation of the capital cost
  double utilisation = 1.0;           ///< fraction of the time the hardware serves at its throughput
};

/// The cost of producing tokens at `tokens_per_second` (all figures absent when it is not positive):
///   capital per token = capital / (tokens/s × utilisation × years × 365.25 × 86,400 s)
///   energy per token  = power × nodes / (tokens/s) × price per kWh / 3.6e6 J/kWh
///   cloud per token   = cloud USD/h × nodes / 3,600 s/h / (tokens/s)  (rented only while serving)
/// Power is the profile's node power under load, at the wall; NICs and switches draw what they draw
/// on top, which is not counted (the notes say so).
struct RunningCost {
  std::optional<double> power_watts;             ///< all nodes under load
  std::optional<double> usd_per_million_tokens;  ///< amortised capital (+ energy when priced)
  std::optional<double> energy_usd_per_million_tokens;
  std::optional<double> cloud_usd_per_hour;  ///< all nodes
  std::optional<double> cloud_usd_per_million_tokens;
  std::vector<std::string> notes;
};
RunningCost running_cost(const NodeProfile& node, std::int64_t nodes, const CapitalCost& capital,
                         double tokens_per_second, const CostAssumptions& a);

}  // namespace moesim::model
