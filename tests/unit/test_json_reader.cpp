// JSON reading: errors name the file and the JSON path, unknown keys suggest the nearest valid one.

#include <gtest/gtest.h>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"

using moesim::test::error_of;
namespace {

using moesim::UserError;
using moesim::json::Node;
using moesim::units::Dimension;

// A missing file says "no such file" and names it.
TEST(JsonReader, MissingFile) {
  const auto m = error_of([] { moesim::json::load_file("/nonexistent/profile.json"); });
  EXPECT_NE(m.find("/nonexistent/profile.json: no such file"), std::string::npos) << m;
}

// Malformed JSON reports the source and the line and column of the fault: the missing comma is on
// line 2 where "b" starts, column 3.
TEST(JsonReader, MalformedJsonHasPosition) {
  const auto m = error_of([] { moesim::json::parse_text("{\"a\": 1\n  \"b\": 2}", "f.json"); });
  EXPECT_NE(m.find("f.json: malformed JSON at line 2"), std::string::npos) << m;
}

// A nested quantity without a unit names the full JSON path.
TEST(JsonReader, QuantityPathAndBareNumber) {
  const auto doc = nlohmann::json::parse(R"({"devices": {"memory_bandwidth": 800}})");
  const Node root(doc, "node.json");
  const auto m = error_of([&] { (void)root.child("devices").quantity<Dimension::Bandwidth>("memory_bandwidth"); });
  EXPECT_NE(m.find("node.json: $.devices.memory_bandwidth"), std::string::npos) << m;
  EXPECT_NE(m.find("bare number"), std::string::npos) << m;
}

// Negative and zero quantities are refused (zero allowed only when asked, e.g. a built-in NIC's price).
TEST(JsonReader, NegativeAndZeroQuantities) {
  const auto doc = nlohmann::json::parse(R"({"bw": "-10Gb/s", "price": "0USD"})");
  const Node root(doc, "nic.json");
  const auto m = error_of([&] { (void)root.quantity<Dimension::Bandwidth>("bw"); });
  EXPECT_NE(m.find("must be positive"), std::string::npos) << m;
  EXPECT_THROW((void)root.quantity<Dimension::Money>("price"), UserError);
  EXPECT_DOUBLE_EQ(root.quantity<Dimension::Money>("price", true).base(), 0.0);
}

// An unknown key is an error with a "did you mean" and the list of valid keys.
TEST(JsonReader, UnknownKeySuggestsNearest) {
  const auto doc = nlohmann::json::parse(R"({"latncy": "1ms"})");
  const Node root(doc, "nic.json");
  const auto m = error_of([&] { root.expect_only({"latency", "bandwidth"}); });
  EXPECT_NE(m.find("$.latncy"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'latency'"), std::string::npos) << m;
}

// Type errors say what was found and what was expected.
TEST(JsonReader, TypeErrors) {
  const auto doc = nlohmann::json::parse(R"({"n": "four", "arr": {}, "neg": -3})");
  const Node root(doc, "x.json");
  EXPECT_NE(error_of([&] { (void)root.integer("n"); }).find("is a string, expected an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)root.elements("arr"); }).find("expected an array"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)root.integer("neg", 1); }).find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)root.string("missing"); }).find("$.missing: is missing"), std::string::npos);
}

}  // namespace
