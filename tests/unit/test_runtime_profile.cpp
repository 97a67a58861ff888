// Runtime profiles laid over a node profile (model::apply_runtime, issue 20): a runtime sets the figures it
// gives and leaves the node's own for the rest, so a runtime written from a seed's published figures may
// give only its overheads and keep the node's measured efficiency bands.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "moesim/model/hardware.hpp"

namespace moesim::model {
namespace {

namespace fs = std::filesystem;

/// A runtime profile written to a scratch file (removed at the end) and loaded from it, as `--runtime PATH`.
class RuntimeFile {
 public:
  explicit RuntimeFile(const std::string& figures)
      : path_(fs::temp_directory_path() / ("moesim_runtime_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                                           ".json")) {
    std::ofstream(path_) << R"({"id": "test@h100-sxm", "kind": "runtime", "runtime": "test", "hw": "h100-sxm", )"
                         << figures << "}";
  }
  ~RuntimeFile() { fs::remove(path_); }
  RuntimeFile(const RuntimeFile&) = delete;
  RuntimeFile& operator=(const RuntimeFile&) = delete;
  [[nodiscard]] RuntimeProfile load() const { return load_runtime(path_.string()); }

 private:
  fs::path path_;
};

/// h100-sxm with measured-looking figures of its own: memory bands 0.70 below 1 MiB and 0.90 above,
/// compute 0.60, 3 us per kernel, 1 ms per layer.
NodeProfile measured_h100() {
  NodeProfile n = load_node("h100-sxm");
  EfficiencyTable t;
  t.source = "test bands";
  t.memory = {{units::bytes(0), units::bytes(1 << 20), 0.70, 4}, {units::bytes(1 << 20), units::bytes(1e12), 0.90, 4}};
  t.compute = {{units::bytes(0), units::bytes(1e12), 0.60, 4}};
  n.devices.efficiency = t;
  n.devices.kernel_overhead = Sourced<units::Duration>{units::seconds(3e-6), "test"};
  n.devices.layer_overhead = Sourced<units::Duration>{units::seconds(1e-3), "test"};
  return n;
}

// A runtime of overheads only (10 us per kernel, 0.2 ms per layer) replaces those two and nothing else:
// the node's two memory bands and its compute band stay, and no attention factor appears.
TEST(RuntimeProfile, OverheadsOnlyLeaveTheNodesEfficiencyBands) {
  const RuntimeFile f(R"("kernel_overhead": {"value": "10us", "source": "t"},
                         "layer_overhead": {"value": "0.2ms", "source": "t"})");
  const RuntimeProfile rt = f.load();
  EXPECT_FALSE(rt.bandwidth_efficiency.has_value());
  EXPECT_FALSE(rt.attention_factor.has_value());
  const NodeProfile n = apply_runtime(measured_h100(), rt);
  ASSERT_TRUE(n.devices.kernel_overhead && n.devices.layer_overhead);
  EXPECT_DOUBLE_EQ(n.devices.kernel_overhead->value.base(), 10e-6);
  EXPECT_DOUBLE_EQ(n.devices.layer_overhead->value.base(), 0.2e-3);
  ASSERT_TRUE(n.devices.efficiency);
  ASSERT_EQ(n.devices.efficiency->memory.size(), 2u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory[0].value, 0.70);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory[1].value, 0.90);
  ASSERT_EQ(n.devices.efficiency->compute.size(), 1u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->compute[0].value, 0.60);
  EXPECT_EQ(n.devices.efficiency->source, "test bands");
  EXPECT_FALSE(n.devices.attention_factor.has_value());
}

// A bandwidth efficiency alone (0.8) becomes one memory band over every size; the node's compute band
// (0.60) and its overheads (3 us, 1 ms) stay.
TEST(RuntimeProfile, BandwidthEfficiencyAloneKeepsComputeAndOverheads) {
  const RuntimeFile f(R"("bandwidth_efficiency": {"value": 0.8, "source": "t"})");
  const NodeProfile n = apply_runtime(measured_h100(), f.load());
  ASSERT_TRUE(n.devices.efficiency);
  ASSERT_EQ(n.devices.efficiency->memory.size(), 1u);
  EXPECT_DOUBLE_EQ(efficiency_at(n.devices.efficiency->memory, units::bytes(1000)).value, 0.8);
  EXPECT_DOUBLE_EQ(efficiency_at(n.devices.efficiency->memory, units::bytes(1e10)).value, 0.8);
  ASSERT_EQ(n.devices.efficiency->compute.size(), 1u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->compute[0].value, 0.60);
  EXPECT_DOUBLE_EQ(n.devices.kernel_overhead->value.base(), 3e-6);
  EXPECT_DOUBLE_EQ(n.devices.layer_overhead->value.base(), 1e-3);
}

// A compute efficiency alone (0.5) replaces the compute band and keeps the node's two memory bands.
TEST(RuntimeProfile, ComputeEfficiencyAloneKeepsTheMemoryBands) {
  const RuntimeFile f(R"("compute_efficiency": {"value": 0.5, "source": "t"})");
  const NodeProfile n = apply_runtime(measured_h100(), f.load());
  ASSERT_TRUE(n.devices.efficiency);
  ASSERT_EQ(n.devices.efficiency->memory.size(), 2u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory[0].value, 0.70);
  ASSERT_EQ(n.devices.efficiency->compute.size(), 1u);
  EXPECT_DOUBLE_EQ(n.devices.efficiency->compute[0].value, 0.5);
}

// A fitted runtime of every figure replaces them all, its explicit 0 per layer included (the fit has no
// per-layer term, so the node's 1 ms must not be added to its fitted per-kernel cost).
TEST(RuntimeProfile, EveryFigureGivenReplacesEveryFigure) {
  const RuntimeFile f(R"("bandwidth_efficiency": {"value": 0.8, "source": "t"},
                         "attention_factor": {"value": 2.5, "source": "t"},
                         "kernel_overhead": {"value": "7us", "source": "t"},
                         "layer_overhead": {"value": "0us", "source": "t"})");
  const NodeProfile n = apply_runtime(measured_h100(), f.load());
  EXPECT_DOUBLE_EQ(n.devices.efficiency->memory.at(0).value, 0.8);
  EXPECT_DOUBLE_EQ(n.devices.attention_factor->value, 2.5);
  EXPECT_DOUBLE_EQ(n.devices.kernel_overhead->value.base(), 7e-6);
  EXPECT_DOUBLE_EQ(n.devices.layer_overhead->value.base(), 0.0);
}

}  // namespace
}  // namespace moesim::model
