#include "moesim/model/cost.hpp"

#include "moesim/model/error.hpp"

namespace moesim::model {

CapitalCost capital_cost(const NodeProfile& node, const NicProfile* nic, std::int64_t nodes) {
  CapitalCost c;
  c.nodes = node.node_price().value * static_cast<double>(nodes);
  if (nodes > 1) {
    MOESIM_CHECK(nic != nullptr, "a multi-node cost needs a NIC");
    c.nics = nic->nic_price().value * static_cast<double>(nodes);
  }
  if (nodes > 2) {
    if (nic->switch_spec) {
      const auto& sw = *nic->switch_spec;
      c.switch_count = (nodes + sw.ports - 1) / sw.ports;
      c.switches = sw.price.value * static_cast<double>(c.switch_count);
      if (c.switch_count > 1)
        c.notes.push_back(std::to_string(nodes) + " nodes need " + std::to_string(c.switch_count) + " " + sw.name +
                          " switches (" + std::to_string(sw.ports) +
                          " ports each); the links between them are not priced");
    } else {
      c.notes.push_back(nic->id +
                        " gives no switch: costs of 3 or more nodes over it leave the switch out (add \"switch\" to "
                        "the NIC profile)");
    }
  }
  return c;
}

std::optional<std::string> missing_price(const NodeProfile& node, const NicProfile* nic, std::int64_t nodes) {
  // The prices capital_cost reads: the node's always, the NIC's from two nodes on (switch prices are
  // required wherever a switch is given).
  if (!node.price) return node.price_missing();
  if (nodes > 1) {
    MOESIM_CHECK(nic != nullptr, "a multi-node cost needs a NIC");
    if (!nic->price) return nic->price_missing();
  }
  return std::nullopt;
}

double tokens_per_second_per_usd(double tokens_per_second, units::Money cost) {
  if (cost.base() <= 0) return 0;
  return tokens_per_second / cost.base();
}

RunningCost running_cost(const NodeProfile& node, std::int64_t nodes, const CapitalCost& capital,
                         double tokens_per_second, const CostAssumptions& a) {
  constexpr double kSecondsPerYear = 365.25 * 86400.0;  // Julian year
  constexpr double kJoulesPerKwh = 3.6e6;
  RunningCost r;
  const auto n = static_cast<double>(nodes);
  if (node.power) r.power_watts = node.power->value.base() * n;
  if (node.cloud_price_per_hour) r.cloud_usd_per_hour = node.cloud_price_per_hour->value.base() * n;
  if (tokens_per_second <= 0) return r;
  const double per_million = 1e6 / tokens_per_second;  // seconds of serving per million tokens
  double usd = capital.total().base() / (a.years * kSecondsPerYear * a.utilisation) * per_million;
  if (a.usd_per_kwh) {
    if (r.power_watts) {
      r.energy_usd_per_million_tokens = *r.power_watts * per_million / kJoulesPerKwh * *a.usd_per_kwh;
      usd += *r.energy_usd_per_million_tokens;
      if (nodes > 1) r.notes.push_back("energy counts the nodes' power only, not the NICs' and switches'");
    } else {
      r.notes.push_back(node.id + " gives no power: energy is not in its cost per token (add \"power\")");
    }
  }
  r.usd_per_million_tokens = usd;
  if (r.cloud_usd_per_hour) r.cloud_usd_per_million_tokens = *r.cloud_usd_per_hour / 3600.0 * per_million;
  return r;
}

}  // namespace moesim::model
