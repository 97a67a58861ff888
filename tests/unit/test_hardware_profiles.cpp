// The built-in node profiles (hwprofiles/nodes/) as a set. Each loads (builtin_nodes parses them all), and a
// node of several devices names the NIC profile that links them, which is itself built in: a new profile
// that names a link moesim lacks (dgx-b200's nvlink5 before its profile existed) fails here, not in the
// first estimate a user runs on it.

#include <gtest/gtest.h>

#include <string>

#include "moesim/model/hardware.hpp"

namespace {

using namespace moesim::model;

TEST(HardwareProfiles, EveryBuiltInNodeNamesABuiltInLink) {
  const auto nodes = builtin_nodes();
  ASSERT_FALSE(nodes.empty());
  for (const auto& n : nodes) {
    if (n.devices.count > 1) {
      EXPECT_TRUE(n.intra_node_link.has_value()) << n.id << " has several devices and no link";
    }
    if (n.intra_node_link) {
      EXPECT_NO_THROW((void)load_nic(*n.intra_node_link)) << n.id << ": " << *n.intra_node_link;
    }
  }
}

}  // namespace
