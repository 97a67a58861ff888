// `moesim calibrate kernels | memory | storage` end to end through the built binary: tiny real runs (a few
// MiB, one repetition) whose --out profiles load with model::load_node / load_storage, --json output, and
// the catalogue of bad inputs (exit 2, one line naming the flag, nothing on stdout, nothing left behind).
// No timed assertions.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.hpp"
#include "moesim/model/hardware.hpp"

namespace {

namespace fs = std::filesystem;
using moesim::test::Run;
using moesim::test::Scratch;

TEST(CalibrateBenchCli, MemoryTinyRunWritesALoadableProfile) {
  Scratch s("moesim_bench_cli");
  const auto r =
      s.moesim("calibrate memory --threads 1 --array-size 1MiB --repeats 1 --quiet --out " + s.path("host.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sustained memory bandwidth (best triad)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote "), std::string::npos);
  const auto node = moesim::model::load_node(s.path("host.json"));
  EXPECT_EQ(node.id, "host");
  EXPECT_GT(node.bandwidth().value.base(), 0.0);
  EXPECT_NE(node.bandwidth().source.find("moesim calibrate memory --threads 1"), std::string::npos);
  EXPECT_EQ(s.files(), std::vector<std::string>{"host.json"});  // no temporary left

  const auto j = s.moesim("calibrate memory --threads 1 --array-size 1MiB --repeats 1 --json");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_TRUE(j.err.empty()) << j.err;  // --json: no progress lines
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["kind"], "node");
  EXPECT_EQ(doc["calibration"]["memory"]["triad"]["bandwidth"]["unit"], "B/s");
}

TEST(CalibrateBenchCli, KernelsTinyRunWritesALoadableProfile) {
  Scratch s("moesim_bench_cli");
  const auto r = s.moesim(
      "calibrate kernels --shapes 32x64,128x256 --batches 1,4 --threads 1 --repeats 1 --memory-bandwidth 10GB/s "
      "--pool-size 1MiB --quiet --out " +
      s.path("k.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("outside the measured range"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best GEMM rate (f32)"), std::string::npos) << r.out;
  const auto node = moesim::model::load_node(s.path("k.json"));
  EXPECT_GT(node.peak("fp32").value.base(), 0.0);
  EXPECT_NEAR(node.bandwidth().value.base(), 10e9, 1.0);
  EXPECT_NE(node.bandwidth().source.find("--memory-bandwidth"), std::string::npos);
  ASSERT_TRUE(node.devices.efficiency.has_value());
  EXPECT_EQ(node.devices.efficiency->memory.size(), 2u);
  EXPECT_EQ(node.devices.efficiency->compute.size(), 2u);
  // bf16 is measured, or reported as not measured with the reason: never silently replaced.
  const auto doc = nlohmann::json::parse(moesim::test::slurp(s.path("k.json")));
  const auto& bf16 = doc["calibration"]["kernels"]["dtypes"]["bf16"];
  if (!bf16["measured"].get<bool>()) {
    EXPECT_NE(bf16["reason"].get<std::string>().find("BUILD_BFLOAT16"), std::string::npos);
    EXPECT_NE(r.out.find("bf16: not measured"), std::string::npos);
    for (const auto& smp : doc["calibration"]["kernels"]["samples"]) EXPECT_EQ(smp["dtype"], "f32");
  }
}

// Several models: each shape once, a shape two models share under both names (Mixtral-8x7B and
// Llama-3.1-8B have the same 4096x4096, 1024x4096, 14336x4096 and 4096x14336 matrices).
TEST(CalibrateBenchCli, KernelsOfSeveralModelsMeasureEachShapeOnce) {
  Scratch s("moesim_bench_cli");
  const auto r = s.moesim(
      "calibrate kernels --model mixtral-8x7b,llama-3.1-8b --dtypes f32 --batches 1 --threads 1 --repeats 1 "
      "--memory-bandwidth 10GB/s --pool-size 1MiB --quiet --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  std::map<std::string, std::string> roles;  // "RxC" -> roles
  for (const auto& smp : doc["calibration"]["kernels"]["samples"]) {
    const auto& m = smp["shape"];
    const std::string shape = std::to_string(m["rows"].get<long>()) + "x" + std::to_string(m["cols"].get<long>());
    EXPECT_EQ(roles.count(shape), 0u) << shape << " measured twice";
    roles[shape] = m["roles"].get<std::string>();
  }
  ASSERT_EQ(roles.count("14336x4096"), 1u) << r.out;
  EXPECT_NE(roles["14336x4096"].find("mixtral-8x7b"), std::string::npos) << roles["14336x4096"];
  EXPECT_NE(roles["14336x4096"].find("llama-3.1-8b"), std::string::npos) << roles["14336x4096"];
  EXPECT_EQ(roles.count("8x4096"), 1u);  // Mixtral's router, Llama's has none
}

TEST(CalibrateBenchCli, StorageTinyRunWritesALoadableProfileAndRemovesItsFile) {
  Scratch s("moesim_bench_cli");
  fs::create_directories(s.path("disk"));
  const auto r = s.moesim("calibrate storage --dir " + s.path("disk") +
                          " --size 4MiB --block 256KiB --readers 1,2 --max-seconds 5 --latency-reads 16 --quiet "
                          "--out " +
                          s.path("ssd.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("read_bandwidth (cold sequential, best)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(s.path("disk")));
  const auto sp = moesim::model::load_storage(s.path("ssd.json"));
  EXPECT_EQ(sp.id, "ssd");
  EXPECT_GT(sp.read_bandwidth.value.base(), 0.0);
  ASSERT_TRUE(sp.read_latency.has_value());
  ASSERT_TRUE(sp.capacity.has_value());
}

TEST(CalibrateBenchCli, HelpExplainsTheMethod) {
  Scratch s("moesim_bench_cli");
  for (const char* part : {"kernels", "memory", "storage"}) {
    const auto r = s.moesim(std::string("calibrate ") + part + " --help");
    EXPECT_EQ(r.code, 0) << part;
    EXPECT_NE(r.out.find("BENCH.md"), std::string::npos) << part;
    EXPECT_NE(r.out.find("--out"), std::string::npos) << part;
  }
}

TEST(CalibrateBenchCli, BadInputs) {
  Scratch s("moesim_bench_cli");
  std::ofstream(s.path("file")) << "x";
  const std::string d = s.path();
  const moesim::test::BadInput cases[] = {
      {"storage without --dir", "calibrate storage --size 4MiB", {"--dir is missing"}},
      {"storage missing dir", "calibrate storage --dir " + d + "/nope --size 4MiB", {"--dir", "does not exist"}},
      {"storage dir under a file",
       "calibrate storage --dir " + d + "/file/x --size 4MiB",
       {"--dir", "not a directory"}},
      {"storage dir is a file", "calibrate storage --dir " + d + "/file --size 4MiB", {"--dir", "is not a directory"}},
      {"storage virtual fs", "calibrate storage --dir /proc --size 4MiB", {"--dir /proc", "no storage"}},
      {"storage no space", "calibrate storage --dir " + d + " --size 1000PB", {"--dir", "free", "--size"}},
      {"storage negative size", "calibrate storage --dir " + d + " --size -1GB", {"--size -1GB", "positive"}},
      {"all negative storage size",
       "calibrate all --out " + d + "/all.json --storage-size -1GB",
       {"--storage-size -1GB", "positive"}},
      {"memory zero array", "calibrate memory --array-size 0B", {"--array-size 0B", "positive"}},
      {"storage block unaligned", "calibrate storage --dir " + d + " --size 4MiB --block 1000B", {"--block", "4 KiB"}},
      {"storage size without unit", "calibrate storage --dir " + d + " --size 12", {"--size", "no unit"}},
      {"storage cold mode", "calibrate storage --dir " + d + " --cold sometimes", {"--cold", "auto"}},
      {"storage readers", "calibrate storage --dir " + d + " --readers 0", {"--readers"}},
      {"kernels shapes", "calibrate kernels --shapes 12y3", {"--shapes", "12y3"}},
      {"kernels threads", "calibrate kernels --shapes 8x8 --threads 999", {"--threads", "999"}},
      {"kernels dtype", "calibrate kernels --shapes 8x8 --dtypes f16", {"--dtypes", "f16"}},
      {"kernels batches", "calibrate kernels --shapes 8x8 --batches 0", {"--batches"}},
      {"kernels two shape sources", "calibrate kernels --shapes 8x8 --model dbrx-instruct", {"--shapes", "--model"}},
      {"kernels unknown model", "calibrate kernels --model dbrx", {"dbrx-instruct"}},
      {"kernels empty model in a list", "calibrate kernels --model mixtral-8x7b,", {"--model", "empty"}},
      {"kernels unknown model in a list", "calibrate kernels --model mixtral-8x7b,dbrx", {"dbrx-instruct"}},
      {"kernels bandwidth unit", "calibrate kernels --shapes 8x8 --memory-bandwidth 12", {"--memory-bandwidth"}},
      {"memory threads", "calibrate memory --threads 0", {"--threads"}},
      {"memory array size", "calibrate memory --array-size 1PiB --threads 1", {"--array-size"}},
      {"memory out dir",
       "calibrate memory --threads 1 --array-size 1MiB --repeats 1 --out " + d + "/nope/x.json",
       {"--out"}},
  };
  for (const auto& c : cases) moesim::test::expect_bad_input(c);
  EXPECT_EQ(s.files(), std::vector<std::string>{"file"});  // nothing left behind
}

}  // namespace
