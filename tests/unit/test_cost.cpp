// The cost model (model/cost.hpp) on figures that follow by hand, and the grid reader of `moesim sweep`
// (reports/sweep.hpp) on the inputs it must refuse with a message naming the file and field.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moesim/model/collective.hpp"
#include "moesim/model/cost.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/reports/sweep.hpp"

namespace {

using namespace moesim;

model::NodeProfile node(double price_usd, std::optional<double> watts = std::nullopt,
                        std::optional<double> cloud_usd_per_hour = std::nullopt) {
  model::NodeProfile n;
  n.id = "test-node";
  n.price = model::Sourced<units::Money>{units::usd(price_usd), "test"};
  if (watts) n.power = model::Sourced<units::Power>{units::watts(*watts), "test"};
  if (cloud_usd_per_hour)
    n.cloud_price_per_hour = model::Sourced<units::Money>{units::usd(*cloud_usd_per_hour), "test"};
  return n;
}

model::NicProfile nic(double price_usd, std::optional<std::int64_t> ports = std::nullopt, double switch_usd = 0) {
  model::NicProfile n;
  n.id = "test-nic";
  n.price = model::Sourced<units::Money>{units::usd(price_usd), "test"};
  if (ports) {
    model::NicProfile::Switch sw;
    sw.name = "test switch";
    sw.ports = *ports;
    sw.price = model::Sourced<units::Money>{units::usd(switch_usd), "test"};
    n.switch_spec = sw;
  }
  return n;
}

// ---- capital_cost ----

// One node: the node's price; no NIC, no switch (the NIC may be absent).
TEST(CapitalCost, OneNodeIsTheNodePrice) {
  const auto c = model::capital_cost(node(6599), nullptr, 1);
  EXPECT_DOUBLE_EQ(c.nodes.base(), 6599);
  EXPECT_DOUBLE_EQ(c.nics.base(), 0);
  EXPECT_DOUBLE_EQ(c.switches.base(), 0);
  EXPECT_EQ(c.switch_count, 0);
  EXPECT_DOUBLE_EQ(c.total().base(), 6599);
  EXPECT_TRUE(c.notes.empty());
}

// A profile without a price: the cost names the file, the field and the key to add. One node needs the
// node's price only; from two nodes on the NIC's too. missing_price gives the line capital_cost throws, so
// an answer that does not need the cost can print it instead of refusing.
TEST(CapitalCost, MissingPriceNamesTheFileFieldAndFix) {
  auto bare = node(6599);
  bare.price.reset();
  bare.origin = "/tmp/my-node.json";
  auto unpriced_nic = nic(339);
  unpriced_nic.price.reset();
  unpriced_nic.origin = "/tmp/my-nic.json";
  const auto line = model::missing_price(bare, nullptr, 1);
  ASSERT_TRUE(line.has_value());
  for (const char* s : {"/tmp/my-node.json: $.price is missing", "add \"price\": {\"value\": \"6599USD\""})
    EXPECT_NE(line->find(s), std::string::npos) << *line;
  try {
    (void)model::capital_cost(bare, nullptr, 1);
    ADD_FAILURE() << "priced a node without a price";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), *line);
  }
  const auto priced = node(6599);
  EXPECT_FALSE(model::missing_price(priced, &unpriced_nic, 1).has_value());  // one node: no NIC counted
  EXPECT_NO_THROW((void)model::capital_cost(priced, &unpriced_nic, 1));
  const auto nic_line = model::missing_price(priced, &unpriced_nic, 2);
  ASSERT_TRUE(nic_line.has_value());
  EXPECT_NE(nic_line->find("/tmp/my-nic.json: $.price is missing"), std::string::npos) << *nic_line;
  EXPECT_THROW((void)model::capital_cost(priced, &unpriced_nic, 2), UserError);
  const auto n = nic(339);
  EXPECT_FALSE(model::missing_price(priced, &n, 3).has_value());
}

// Two nodes are cabled back to back: 2 x (node + NIC), no switch even when the NIC profile has one.
TEST(CapitalCost, TwoNodesNeedNoSwitch) {
  const auto n = nic(339, 16, 799);
  const auto c = model::capital_cost(node(6599), &n, 2);
  EXPECT_DOUBLE_EQ(c.nodes.base(), 2 * 6599.0);
  EXPECT_DOUBLE_EQ(c.nics.base(), 2 * 339.0);
  EXPECT_DOUBLE_EQ(c.switches.base(), 0);
  EXPECT_EQ(c.switch_count, 0);
  EXPECT_DOUBLE_EQ(c.total().base(), 2 * 6599.0 + 2 * 339.0);
  EXPECT_TRUE(c.notes.empty());
}

// Three nodes over the built-in 10gbe-grpc profile: the NIC is part of the node price (0 USD) and the
// nodes plug into one 8-port MikroTik switch at 269 USD.
TEST(CapitalCost, ThreeNodesOver10GbEBuyOneSwitch) {
  const auto n = model::load_nic("10gbe-grpc");
  const auto c = model::capital_cost(node(1000), &n, 3);
  EXPECT_DOUBLE_EQ(c.nodes.base(), 3000);
  EXPECT_DOUBLE_EQ(c.nics.base(), 0);
  EXPECT_EQ(c.switch_count, 1);
  EXPECT_DOUBLE_EQ(c.switches.base(), 269);
  EXPECT_DOUBLE_EQ(c.total().base(), 3269);
  EXPECT_TRUE(c.notes.empty());
}

// 16 nodes fill one 16-port switch; 17 need ceil(17 / 16) = 2, and the note says the link between them
// is not priced.
TEST(CapitalCost, SeventeenNodesOnSixteenPortsBuyTwoSwitches) {
  const auto n = nic(339, 16, 799);
  const auto c16 = model::capital_cost(node(100), &n, 16);
  EXPECT_EQ(c16.switch_count, 1);
  EXPECT_DOUBLE_EQ(c16.switches.base(), 799);
  EXPECT_TRUE(c16.notes.empty());

  const auto c = model::capital_cost(node(100), &n, 17);
  EXPECT_EQ(c.switch_count, 2);
  EXPECT_DOUBLE_EQ(c.switches.base(), 2 * 799.0);
  EXPECT_DOUBLE_EQ(c.nodes.base(), 1700);
  EXPECT_DOUBLE_EQ(c.nics.base(), 17 * 339.0);
  EXPECT_DOUBLE_EQ(c.total().base(), 1700 + 17 * 339.0 + 2 * 799.0);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("17 nodes need 2"), std::string::npos) << c.notes[0];
  EXPECT_NE(c.notes[0].find("not priced"), std::string::npos) << c.notes[0];
}

// A NIC profile without a switch: three nodes cost nodes + NICs, and a note says the switch is left out.
TEST(CapitalCost, NicWithoutSwitchLeavesANote) {
  const auto n = nic(1267);
  const auto c = model::capital_cost(node(1000), &n, 3);
  EXPECT_EQ(c.switch_count, 0);
  EXPECT_DOUBLE_EQ(c.switches.base(), 0);
  EXPECT_DOUBLE_EQ(c.total().base(), 3000 + 3 * 1267.0);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("test-nic"), std::string::npos) << c.notes[0];
  EXPECT_NE(c.notes[0].find("switch"), std::string::npos) << c.notes[0];
  // Two nodes need no switch, so there is nothing to note.
  EXPECT_TRUE(model::capital_cost(node(1000), &n, 2).notes.empty());
}

TEST(CapitalCost, TokensPerSecondPerUsd) {
  EXPECT_DOUBLE_EQ(model::tokens_per_second_per_usd(10, units::usd(20000)), 10.0 / 20000);
  EXPECT_DOUBLE_EQ(model::tokens_per_second_per_usd(10, units::usd(0)), 0);
}

// ---- running_cost ----

// Capital only: a Julian year is 365.25 x 86,400 s = 31,557,600 s, so 36,525 USD over one year is
// 36,525 / 31,557,600 = 1/864 USD per second of serving. At 1 token/s and full use a million tokens take
// 1e6 s: 1e6 / 864 = 1157.407... USD.
TEST(RunningCost, AmortisedCapitalClosedForm) {
  model::CapitalCost cap;
  cap.nodes = units::usd(36525);
  model::CostAssumptions a;
  a.years = 1;
  a.utilisation = 1.0;
  const auto r = model::running_cost(node(36525), 1, cap, 1.0, a);
  ASSERT_TRUE(r.usd_per_million_tokens);
  EXPECT_NEAR(*r.usd_per_million_tokens, 1e6 / 864.0, 1e-9 * 1e6 / 864.0);
  EXPECT_FALSE(r.energy_usd_per_million_tokens);  // no energy price
  EXPECT_FALSE(r.power_watts);
  EXPECT_FALSE(r.cloud_usd_per_hour);
  EXPECT_FALSE(r.cloud_usd_per_million_tokens);

  // Half the time in use: each served second carries twice the capital. Ten times the throughput: a tenth.
  a.utilisation = 0.5;
  EXPECT_NEAR(*model::running_cost(node(36525), 1, cap, 1.0, a).usd_per_million_tokens, 2e6 / 864.0, 1e-6);
  a.utilisation = 1.0;
  EXPECT_NEAR(*model::running_cost(node(36525), 1, cap, 10.0, a).usd_per_million_tokens, 1e5 / 864.0, 1e-6);
  // Three years: a third.
  a.years = 3;
  EXPECT_NEAR(*model::running_cost(node(36525), 1, cap, 1.0, a).usd_per_million_tokens, 1e6 / 864.0 / 3, 1e-6);
}

// Energy: one 1,000 W node at 1 token/s spends 1,000 J per token; a million tokens are 1e9 J = 1e9 / 3.6e6
// = 277.78 kWh, at 0.10 USD/kWh 27.78 USD. Two such nodes at 4 tokens/s: 2,000 W / 4 = 500 J per token,
// half of it.
TEST(RunningCost, EnergyClosedForm) {
  model::CapitalCost cap;
  cap.nodes = units::usd(36525);
  model::CostAssumptions a;
  a.years = 1;
  a.usd_per_kwh = 0.10;
  const double energy = 1e9 / 3.6e6 * 0.10;  // 27.777... USD per million tokens
  const auto r = model::running_cost(node(36525, 1000.0), 1, cap, 1.0, a);
  ASSERT_TRUE(r.power_watts);
  EXPECT_DOUBLE_EQ(*r.power_watts, 1000);
  ASSERT_TRUE(r.energy_usd_per_million_tokens);
  EXPECT_NEAR(*r.energy_usd_per_million_tokens, energy, 1e-9 * energy);
  ASSERT_TRUE(r.usd_per_million_tokens);
  EXPECT_NEAR(*r.usd_per_million_tokens, 1e6 / 864.0 + energy, 1e-9 * (1e6 / 864.0 + energy));

  model::CapitalCost cap2;
  cap2.nodes = units::usd(2 * 36525.0);
  const auto r2 = model::running_cost(node(36525, 1000.0), 2, cap2, 4.0, a);
  ASSERT_TRUE(r2.power_watts);
  EXPECT_DOUBLE_EQ(*r2.power_watts, 2000);
  ASSERT_TRUE(r2.energy_usd_per_million_tokens);
  EXPECT_NEAR(*r2.energy_usd_per_million_tokens, energy / 2, 1e-9 * energy);
  EXPECT_NEAR(*r2.usd_per_million_tokens, 2 * 1e6 / 864.0 / 4 + energy / 2, 1e-6);
}

// An energy price on a node without power: the energy is left out and a note says so.
TEST(RunningCost, NoPowerNoEnergyButANote) {
  model::CapitalCost cap;
  cap.nodes = units::usd(36525);
  model::CostAssumptions a;
  a.years = 1;
  a.usd_per_kwh = 0.10;
  const auto r = model::running_cost(node(36525), 1, cap, 1.0, a);
  EXPECT_FALSE(r.energy_usd_per_million_tokens);
  ASSERT_TRUE(r.usd_per_million_tokens);
  EXPECT_NEAR(*r.usd_per_million_tokens, 1e6 / 864.0, 1e-6);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("test-node"), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("power"), std::string::npos) << r.notes[0];
}

// Cloud: 3.60 USD/h per node, two nodes = 7.20 USD/h = 0.002 USD/s; at 2 tokens/s a million tokens take
// 500,000 s: 1,000 USD.
TEST(RunningCost, CloudClosedForm) {
  model::CapitalCost cap;
  cap.nodes = units::usd(2000);
  const auto r = model::running_cost(node(1000, std::nullopt, 3.60), 2, cap, 2.0, {});
  ASSERT_TRUE(r.cloud_usd_per_hour);
  EXPECT_NEAR(*r.cloud_usd_per_hour, 7.20, 1e-12);
  ASSERT_TRUE(r.cloud_usd_per_million_tokens);
  EXPECT_NEAR(*r.cloud_usd_per_million_tokens, 1000.0, 1e-9);
}

// No throughput: per-token figures are absent; the per-hour and power figures remain.
TEST(RunningCost, ZeroThroughputHasNoPerTokenFigures) {
  model::CapitalCost cap;
  cap.nodes = units::usd(1000);
  model::CostAssumptions a;
  a.usd_per_kwh = 0.1;
  const auto r = model::running_cost(node(1000, 300.0, 2.0), 3, cap, 0.0, a);
  EXPECT_FALSE(r.usd_per_million_tokens);
  EXPECT_FALSE(r.energy_usd_per_million_tokens);
  EXPECT_FALSE(r.cloud_usd_per_million_tokens);
  ASSERT_TRUE(r.power_watts);
  EXPECT_DOUBLE_EQ(*r.power_watts, 900);
  ASSERT_TRUE(r.cloud_usd_per_hour);
  EXPECT_DOUBLE_EQ(*r.cloud_usd_per_hour, 6);
}

// ---- grid_from_json ----

nlohmann::json base_grid() {
  return {
      {"models", {"dbrx-instruct"}}, {"hw", {"mac-studio-m2-ultra-192"}}, {"nodes", {2, 3}}, {"nics", {"10gbe-grpc"}}};
}

/// grid_from_json(doc) throws a UserError whose one line mentions every string in `mention`.
void expect_grid_error(const nlohmann::json& doc, const std::vector<std::string>& mention) {
  SCOPED_TRACE(doc.dump());
  try {
    (void)reports::grid_from_json(doc, "g.json", ".");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("g.json"), std::string::npos) << msg;
    for (const auto& m : mention) EXPECT_NE(msg.find(m), std::string::npos) << "missing '" << m << "' in: " << msg;
  }
}

TEST(GridFromJson, ReadsAxesConstraintsCostsAndDefaults) {
  auto doc = base_grid();
  doc["constraints"] = {{"budget", "50000USD"}, {"min_tokens_per_s", "5tokens/s"}};
  doc["costs"] = {{"energy_price", "0.13USD/kWh"}, {"amortisation", "2years"}, {"utilisation", "50%"}};
  doc["simulate"] = {{"points", "all"}, {"tokens", 100}, {"seed", 7}};
  const auto g = reports::grid_from_json(doc, "g.json", ".");
  EXPECT_EQ(g.models, std::vector<std::string>{"dbrx-instruct"});
  EXPECT_EQ(g.nodes, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(g.precisions, std::vector<std::string>{"bf16"});
  EXPECT_EQ(g.strategies, std::vector<std::string>{"P-LR-D"});
  EXPECT_EQ(g.placements, std::vector<std::string>{"replicated-groups"});
  ASSERT_TRUE(g.constraints.budget_usd);
  EXPECT_DOUBLE_EQ(*g.constraints.budget_usd, 50000);
  ASSERT_TRUE(g.constraints.min_tokens_per_s);
  EXPECT_DOUBLE_EQ(*g.constraints.min_tokens_per_s, 5);
  ASSERT_TRUE(g.costs.usd_per_kwh);
  EXPECT_DOUBLE_EQ(*g.costs.usd_per_kwh, 0.13);
  EXPECT_DOUBLE_EQ(g.costs.years, 2);
  EXPECT_DOUBLE_EQ(g.costs.utilisation, 0.5);
  EXPECT_EQ(g.simulate_points, -1);
  EXPECT_EQ(g.simulate_tokens, 100);
  EXPECT_EQ(g.seed, 7u);
  EXPECT_FALSE(g.serving());
  // 2 node counts x 1 NIC: 2 points; one node collapses the NIC axis.
  EXPECT_EQ(reports::expand_grid(g).size(), 2u);
  doc["nodes"] = {1, 2};
  doc["nics"] = {"10gbe-grpc", "rocev2-25g"};
  EXPECT_EQ(reports::expand_grid(reports::grid_from_json(doc, "g.json", ".")).size(), 3u);
}

TEST(GridFromJson, Errors) {
  expect_grid_error(nlohmann::json::array(), {"JSON object"});
  {
    auto d = base_grid();
    d.erase("models");
    expect_grid_error(d, {"models", "missing"});
  }
  {
    auto d = base_grid();
    d["models"] = nlohmann::json::array();
    expect_grid_error(d, {"$.models", "empty"});
  }
  {
    auto d = base_grid();
    d["nodes"] = nlohmann::json::array();
    expect_grid_error(d, {"nodes", "empty"});
  }
  {
    auto d = base_grid();
    d["nodes"] = {0};
    expect_grid_error(d, {"nodes", ">= 1"});
  }
  {
    auto d = base_grid();
    d.erase("nics");
    expect_grid_error(d, {"nics", "missing"});
  }
  {
    auto d = base_grid();
    d["nodez"] = {2};
    expect_grid_error(d, {"nodez", "not a known key"});
  }
  {
    auto d = base_grid();
    d["constraints"] = {{"min_tokens_per_s", "5"}};
    expect_grid_error(d, {"$.constraints.min_tokens_per_s", "unit", "5tokens/s"});
  }
  {
    auto d = base_grid();
    d["constraints"] = {{"min_tokens_per_s", "-5tokens/s"}};
    expect_grid_error(d, {"min_tokens_per_s", "positive"});
  }
  {
    auto d = base_grid();
    d["constraints"] = {{"budget", "-5USD"}};
    expect_grid_error(d, {"$.constraints.budget"});
  }
  {
    auto d = base_grid();
    d["constraints"] = {{"max_ttft", "2s"}};
    expect_grid_error(d, {"max_ttft", "workloads"});
  }
  {
    auto d = base_grid();
    d["constraints"] = {{"budgett", "5USD"}};
    expect_grid_error(d, {"budgett"});
  }
  {
    auto d = base_grid();
    d["costs"] = {{"utilisation", "150%"}};
    expect_grid_error(d, {"utilisation", "100%"});
  }
  {
    auto d = base_grid();
    d["costs"] = {{"energy_price", "0.13"}};
    expect_grid_error(d, {"energy_price", "USD/kWh"});
  }
  {
    auto d = base_grid();
    d["placements"] = {"nowhere"};
    expect_grid_error(d, {"placements", "nowhere"});
  }
  {
    auto d = base_grid();
    d["simulate"] = {{"points", "some"}};
    expect_grid_error(d, {"points", "all"});
  }
  {
    auto d = base_grid();
    d["simulate"] = {{"points", -3}};
    expect_grid_error(d, {"points"});
  }
  {
    auto d = base_grid();
    d["plans"] = {{{"name", "tp8"}, {"plan", {{"tp", 8}}}}};
    expect_grid_error(d, {"plans", "workloads"});
  }
  {
    auto d = base_grid();
    d["workloads"] = {{{"name", "a"}, {"workload", {{"rate", "2/s"}}}}, {{"name", "a"}, {"workload", nullptr}}};
    expect_grid_error(d, {"name", "used twice"});
  }
  {
    auto d = base_grid();
    d["workloads"] = {{{"name", "a"}, {"model", "mixtral-8x7b"}}};
    expect_grid_error(d, {"model", "axis"});
  }
  {
    auto d = base_grid();
    d["workloads"] = {{{"name", "a"}, {"workload", {{"rate", "2/s"}}}}};
    d["strategies"] = {"naive"};
    expect_grid_error(d, {"strategies", "workloads"});
  }
  {
    auto d = base_grid();
    d["workloads"] = {{{"name", "a"}, {"workload", {{"rate", "2/s"}}}}};
    d["simulate"] = {{"points", 0}};
    expect_grid_error(d, {"simulate", "points is 0"});
  }
}

// An unknown strategy or precision names the grid file and the axis like every other grid error.
TEST(GridFromJson, UnknownIdsNameTheFileAndAxis) {
  {
    auto d = base_grid();
    d["strategies"] = {"P-LR-X"};
    expect_grid_error(d, {"strategies", "P-LR-X"});
  }
  {
    auto d = base_grid();
    d["precisions"] = {"bf17"};
    expect_grid_error(d, {"precisions", "bf17"});
  }
}

// A grid axis is any dotted key of the instrument's parameter table: each value is a point of its own, the
// value reaches the point's run and its resolved scenario, and a key the instrument lacks is refused.
TEST(GridFromJson, AxesAreDottedScenarioKeys) {
  nlohmann::json d = {
      {"models", {"mixtral-8x7b"}},
      {"hw", {"dgx-h100"}},
      {"plans", {{{"name", "tp8"}, {"plan", {{"tp", 8}}}}}},
      {"workloads",
       {{{"name", "burst"},
         {"workload", {{"arrival", "poisson"}, {"rate", "50/s"}, {"requests", 24}, {"prompt", 256}, {"output", 16}}}}}},
      {"axes", {{"scheduler.max_num_seqs", {1, 32}}, {"workload.seed", {1, 2}}}},
      {"simulate", {{"points", "all"}, {"tokens", 256}}}};
  const auto g = reports::grid_from_json(d, "g.json", ".");
  const auto points = reports::expand_grid(g);
  ASSERT_EQ(points.size(), 4u);  // the last axis fastest
  EXPECT_EQ(points[1].settings,
            (std::vector<std::pair<std::string, nlohmann::json>>{{"scheduler.max_num_seqs", 1}, {"workload.seed", 2}}));
  EXPECT_NE(reports::describe_point(points[2]).find("scheduler.max_num_seqs 32, workload.seed 1"), std::string::npos);
  EXPECT_EQ(reports::workload_label(points[2]), "burst, workload.seed 1");
  reports::SweepOptions o;
  o.threads = 1;
  const auto r = reports::run_sweep(g, o);
  const auto j = reports::sweep_to_json(r);
  EXPECT_EQ(j.at("points").at(0).at("scenario").at("scheduler").at("max_num_seqs"), 1);
  EXPECT_EQ(j.at("points").at(3).at("scenario").at("workload").at("seed"), 2);
  // 24 requests at once through one sequence slot queue behind each other: the first token waits longer.
  EXPECT_GT(r.points[0].ttft_p99, 2 * r.points[2].ttft_p99);
  EXPECT_EQ(reports::cheapest_per_workload(r).size(), 2u);  // once per workload.seed value

  auto bad = d;
  bad["axes"] = {{"scheduler.max_num_sqs", {1}}};
  expect_grid_error(bad, {"$.axes.scheduler.max_num_sqs", "serve scenario", "scheduler.max_num_seqs"});
  bad["axes"] = {{"scheduler.max_num_seqs", {0}}};
  expect_grid_error(bad, {"axes", "[0]", "must be >= 1"});
  bad["axes"] = {{"workload.rate", {"fast"}}};
  expect_grid_error(bad, {"workload.rate", "fast"});
  bad["axes"] = {{"hw", {"dgx-h100"}}};
  expect_grid_error(bad, {"$.axes.hw", "list of its own"});
  bad["axes"] = {{"plan.tp", nlohmann::json::array()}};
  expect_grid_error(bad, {"plan.tp", "at least one value"});
  // A decode grid's axes are `simulate`'s keys.
  auto decode = base_grid();
  decode["axes"] = {{"contention", {true, false}}};
  EXPECT_EQ(reports::expand_grid(reports::grid_from_json(decode, "g.json", ".")).size(), 4u);
  decode["axes"] = {{"scheduler.max_num_seqs", {1}}};
  expect_grid_error(decode, {"scheduler.max_num_seqs", "simulate scenario"});
}

}  // namespace

// Collectives as data (model/collective.hpp), by hand: a ring over 4 members takes 2(4-1) = 6 steps of 1/4
// of the vector (6/4 of it sent); recursive doubling over 6 takes log2(4) = 2 rounds plus the fold-in and
// the result back, 4 steps of the whole vector; the time is latency × steps + bytes / bandwidth.
TEST(Collective, ShapesAndTimeByHand) {
  const auto ring = moesim::cost::ring_allreduce(1000.0, 4);
  EXPECT_EQ(ring.steps, 6);
  EXPECT_DOUBLE_EQ(ring.bytes, 1500.0);
  EXPECT_EQ(moesim::cost::ring_allreduce(1000.0, 1).steps, 0);
  const auto rd = moesim::cost::recursive_doubling(1000.0, 6);
  EXPECT_EQ(rd.steps, 4);
  EXPECT_DOUBLE_EQ(rd.bytes, 4000.0);
  EXPECT_EQ(moesim::cost::recursive_doubling(1000.0, 8).steps, 3);
  EXPECT_EQ(moesim::cost::recursive_doubling_plan(6).pow2, 4);
  // 6 steps × 1 us + 1500 B / 1 GB/s = 6 us + 1.5 us; twice as many uses, twice the time.
  EXPECT_NEAR(ring.seconds(1e-6, 1e9), 7.5e-6, 1e-18);
  EXPECT_NEAR(ring.seconds(1e-6, 1e9, 2.0), 15e-6, 1e-18);
  EXPECT_NEAR(ring.time(moesim::units::seconds(1e-6), moesim::units::bytes_per_second(1e9)).base(), 7.5e-6, 1e-18);
  EXPECT_EQ(moesim::cost::expert_outputs(10.0, 4).bytes, 40.0);
  EXPECT_EQ(moesim::cost::scatter_gather(10.0, 4).steps, 2);
}
