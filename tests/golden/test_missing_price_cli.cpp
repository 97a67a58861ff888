// A profile without a price (issue 19): an answer that does not need the price is still given, and its
// cost lines say which price is missing and how to add it; an answer that IS a cost (`moesim cost`, a
// sweep ranked by tokens/s per USD) refuses with one line naming the file, the field and the fix.
//
// The priceless profiles are the built-in Mac Studio and 10 GbE (gRPC) profiles with "price" removed, so
// every other figure, and so the tokens/s, must equal the built-in profiles' to the last digit.

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;

/// Writes the built-in profile `kind/id.json` without its "price" into `s` as `name`; returns its path.
std::string without_price(const Scratch& s, const std::string& kind, const std::string& id, const std::string& name) {
  auto doc = nlohmann::json::parse(slurp(fs::path(MOESIM_SOURCE_DIR) / "hwprofiles" / kind / (id + ".json")));
  EXPECT_TRUE(doc.contains("price")) << id;
  doc.erase("price");
  doc["id"] = name;
  s.write(name + ".json", doc.dump(2));
  return s.path(name + ".json");
}

std::map<std::string, nlohmann::json> metrics_of(const nlohmann::json& row) {
  std::map<std::string, nlohmann::json> m;
  for (const auto& x : row["metrics"]) m[x["name"].get<std::string>()] = x;
  return m;
}

const char* const kCostMetrics[] = {"cost_nodes", "cost_nics", "cost_switches", "cost", "tokens_per_second_per_usd"};

// DBRX on two and three Mac Studios over 10 GbE: the same tokens/s with or without the node's price (9.7
// and 10.4 tokens/s, Table 6's configuration); without it the cost columns read "no price" and a note
// names the file, $.price and the key to add, in text and in JSON (value null with that note, not 0).
TEST(GoldenMissingPrice, EstimateAnswersTokensPerSecondWithoutTheNodePrice) {
  Scratch s("moesim_price");
  const std::string node = without_price(s, "nodes", "mac-studio-m2-ultra-192", "priceless-studio");
  const std::string args = "estimate --model dbrx-instruct --nic 10gbe-grpc --nodes 2,3 --json --hw ";
  const auto priced = s.moesim(args + "mac-studio-m2-ultra-192");
  ASSERT_EQ(priced.code, 0) << priced.err;
  const auto bare = s.moesim(args + node);
  ASSERT_EQ(bare.code, 0) << bare.err;
  const auto want = nlohmann::json::parse(priced.out);
  const auto got = nlohmann::json::parse(bare.out);
  ASSERT_EQ(got["rows"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    auto g = metrics_of(got["rows"][i]);
    auto w = metrics_of(want["rows"][i]);
    EXPECT_EQ(g["tokens_per_second"]["value"], w["tokens_per_second"]["value"]);
    EXPECT_EQ(g["time_per_token"]["value"], w["time_per_token"]["value"]);
    EXPECT_GT(w["cost"]["value"].get<double>(), 0);  // the priced run has a cost
    for (const char* name : kCostMetrics) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(g[name]["value"].is_null()) << g[name].dump();
      const std::string note = g[name]["note"].get<std::string>();
      EXPECT_NE(note.find(node + ": $.price is missing"), std::string::npos) << note;
      EXPECT_NE(note.find("add \"price\""), std::string::npos) << note;
    }
  }
  EXPECT_TRUE(got["inputs"]["hw"]["price"]["value"].is_null());
  EXPECT_NE(got["inputs"]["hw"]["price"]["note"].get<std::string>().find("$.price"), std::string::npos);

  const auto text = s.moesim("estimate --model dbrx-instruct --nic 10gbe-grpc --nodes 2,3 --hw " + node);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("no price"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("note: cost USD and tok/s/USD are not computed: " + node + ": $.price is missing"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("9.7"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("10.4"), std::string::npos) << text.out;
}

// A NIC without a price: one node needs no NIC, so its row is priced (6,599 USD); the two-node row is not,
// and says it is the NIC's price that is missing.
TEST(GoldenMissingPrice, NicPriceCountsFromTwoNodes) {
  Scratch s("moesim_price");
  const std::string nic = without_price(s, "nics", "10gbe-grpc", "priceless-nic");
  const auto r =
      s.moesim("estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nodes 1,2 --json --nic " + nic);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["rows"].size(), 2u);
  auto one = metrics_of(doc["rows"][0]);
  auto two = metrics_of(doc["rows"][1]);
  EXPECT_DOUBLE_EQ(one["cost"]["value"].get<double>(), 6599.0);
  EXPECT_GT(two["tokens_per_second"]["value"].get<double>(), 0);
  EXPECT_TRUE(two["cost"]["value"].is_null());
  EXPECT_NE(two["cost"]["note"].get<std::string>().find(nic + ": $.price is missing"), std::string::npos);
  EXPECT_TRUE(doc["inputs"]["nics"][0]["price"]["value"].is_null());
}

// Where the answer is the cost, a missing price is an error: exit 2, one line naming the file, $.price and
// the key to add; a sweep (ranked by tokens/s per USD) also names the grid file and the axis entry.
TEST(GoldenMissingPrice, CostAnswersRefuse) {
  Scratch s("moesim_price");
  const std::string node = without_price(s, "nodes", "mac-studio-m2-ultra-192", "priceless-studio");
  const std::string nic = without_price(s, "nics", "10gbe-grpc", "priceless-nic");
  s.write("grid.json", R"({"models": ["dbrx-instruct"], "hw": [")" + node + R"("], "nodes": [2],
                           "nics": ["10gbe-grpc"]})");
  const std::vector<BadInput> cases = {
      {"cost of a priceless node",
       "cost --hw " + node + " --nodes 1 --tokens-per-s 10",
       {node + ": $.price is missing", "add \"price\": {\"value\": \"6599USD\""}},
      {"cost of two nodes over a priceless NIC",
       "cost --hw mac-studio-m2-ultra-192 --nodes 2 --nic " + nic,
       {nic + ": $.price is missing", "add \"price\""}},
      {"sweep over a priceless node",
       "sweep -q --simulate 0 --grid " + s.path("grid.json"),
       {s.path("grid.json") + ": $.hw[0]", node + ": $.price is missing", "add \"price\""}},
  };
  for (const auto& c : cases) expect_bad_input(c);
}

}  // namespace
