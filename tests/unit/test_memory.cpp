// STREAM (calibrate/memory.hpp): bytes counted as stream.c counts them, a tiny real run (arrays of 1 MiB,
// one pass: well under a second), and the node profile it writes loads with model::load_node. No timed
// assertions: only that times are positive and the figures are consistent with each other.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/memory.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"

namespace moesim::calibrate {
namespace {

// stream.c: bytes[] = {2, 2, 3, 3} × sizeof(double) × STREAM_ARRAY_SIZE.
TEST(CalibrateMemory, BytesCountedAsStreamCountsThem) {
  EXPECT_EQ(stream_bytes(StreamKernel::Copy, 1000), 16000.0);
  EXPECT_EQ(stream_bytes(StreamKernel::Scale, 1000), 16000.0);
  EXPECT_EQ(stream_bytes(StreamKernel::Add, 1000), 24000.0);
  EXPECT_EQ(stream_bytes(StreamKernel::Triad, 1000), 24000.0);
  EXPECT_STREQ(stream_kernel_name(StreamKernel::Triad), "triad");
}

TEST(CalibrateMemory, MachineFacts) {
  const CacheInfo llc = last_level_cache();
  EXPECT_GT(llc.bytes, 0u);
  EXPECT_FALSE(llc.source.empty());
  EXPECT_GE(online_cpus(), 1);
  EXPECT_GT(physical_memory_bytes(), 0u);
}

MemoryResult tiny_run() {
  MemoryOptions o;
  o.threads = {1};
  o.array_bytes = 1 << 20;
  o.repeats = 1;
  o.max_seconds = 5;
  auto progress = Progress::quiet();
  return run_memory(o, progress);
}

// One thread, 3 arrays of 1 MiB (131,072 doubles), one timed pass: four samples; the triad figure is the
// triad sample's bytes / its best time; the arrays are smaller than 4 × any last-level cache, so a note
// says the figures may exceed the DRAM bandwidth.
TEST(CalibrateMemory, TinyRunGivesAllFourKernels) {
  const MemoryResult r = tiny_run();
  EXPECT_EQ(r.elements, (1u << 20) / 8);
  ASSERT_EQ(r.samples.size(), 4u);
  for (const auto& s : r.samples) {
    EXPECT_EQ(s.threads, 1);
    ASSERT_EQ(s.seconds.size(), 1u);
    EXPECT_GT(s.seconds[0], 0.0);
    EXPECT_EQ(s.bytes, stream_bytes(s.kernel, r.elements));
  }
  const StreamSample* triad = r.find(StreamKernel::Triad, 1);
  ASSERT_NE(triad, nullptr);
  EXPECT_EQ(r.triad_threads, 1);
  EXPECT_DOUBLE_EQ(r.triad_bandwidth, triad->bandwidth());
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("last-level cache"), std::string::npos);
}

// The node profile: devices.memory_bandwidth is the best triad, devices.memory the installed RAM.
TEST(CalibrateMemory, ProfileLoads) {
  const MemoryResult r = tiny_run();
  const Provenance p = current_provenance("moesim calibrate memory (test)");
  const auto profile = memory_profile_json(r, p, "mem-test");
  const moesim::test::TestDir dir("moesim_mem");
  const auto node = model::load_node(dir.write("mem-test.json", profile_text(profile)).string());
  EXPECT_EQ(node.id, "mem-test");
  EXPECT_NEAR(node.bandwidth().value.base(), r.triad_bandwidth, 1e-5 * r.triad_bandwidth);
  EXPECT_NE(node.bandwidth().source.find("STREAM triad"), std::string::npos);
  EXPECT_NE(node.bandwidth().source.find("moesim calibrate memory (test)"), std::string::npos);
  EXPECT_GT(node.memory_total().base(), 0.0);
  EXPECT_EQ(profile["calibration"]["memory"]["samples"].size(), 4u);
}

TEST(CalibrateMemory, RejectsThreadCountsAboveTheCpus) {
  MemoryOptions o;
  o.threads = {online_cpus() + 1};
  o.array_bytes = 1 << 20;
  auto progress = Progress::quiet();
  EXPECT_THROW(run_memory(o, progress), UserError);
}

TEST(CalibrateMemory, RejectsArraysLargerThanTheMemory) {
  MemoryOptions o;
  o.threads = {1};
  o.array_bytes = 1ull << 50;  // 1 PiB per array
  auto progress = Progress::quiet();
  EXPECT_THROW(run_memory(o, progress), UserError);
}

}  // namespace
}  // namespace moesim::calibrate
