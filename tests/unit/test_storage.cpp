// Storage benchmark (calibrate/storage.hpp): nearest-rank percentiles, the default block, a tiny real run
// (a 4 MiB file in a scratch directory) whose profile loads with model::load_storage and which leaves no
// file behind, and the bad directories: missing, under a regular file, a virtual file system, too little
// free space (tests run as root, for whom a read-only directory is writable, so permission is checked by
// the creation of the file and not by these cases). No timed assertions.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../test_support.hpp"
#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/storage.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"

namespace moesim::calibrate {
namespace {

namespace fs = std::filesystem;

/// A scratch directory per test (test::TestDir: made new by mkdtemp), removed at the end.
class StorageScratch {
 public:
  [[nodiscard]] std::string path() const { return dir_.path().string(); }
  [[nodiscard]] std::size_t entries() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_.path())) ++n;
    return n;
  }

 private:
  test::TestDir dir_{"moesim_storage"};
};

StorageOptions tiny(const std::string& dir) {
  StorageOptions o;
  o.dir = dir;
  o.size = 4 << 20;
  o.block = 256 << 10;
  o.readers = {1, 2};
  o.max_seconds = 5;
  o.latency_reads = 16;
  return o;
}

// Nearest rank: of 1..100, p50 is 50 and p99 is 99; a single value is every percentile.
TEST(CalibrateStorage, PercentilesByNearestRank) {
  ReadPass p;
  for (int i = 100; i >= 1; --i) p.latencies.push_back(i);
  EXPECT_EQ(p.percentile(0.5), 50.0);
  EXPECT_EQ(p.percentile(0.99), 99.0);
  EXPECT_EQ(p.percentile(1.0), 100.0);
  ReadPass one;
  one.latencies = {5};
  EXPECT_EQ(one.percentile(0.5), 5.0);
  EXPECT_EQ(ReadPass{}.percentile(0.5), 0.0);
}

// One DBRX expert at bf16 is 3·6144·10752·2 = 396,361,728 B: capped at 64 MiB, and the note says so.
// One OLMoE expert (2048 × 1024) is 3·2048·1024·2 = 12 MiB: used as it is.
TEST(CalibrateStorage, DefaultBlockIsOneExpertCapped) {
  std::string note;
  EXPECT_EQ(default_storage_block(model::load_model("dbrx-instruct"), &note), 64u << 20);
  EXPECT_NE(note.find("capped"), std::string::npos) << note;
  EXPECT_EQ(default_storage_block(model::load_model("olmoe-1b-7b"), &note), 12u << 20);
}

// Sequential and random passes, cold and warm, for 1 and 2 readers; the file is gone afterwards; the
// profile's read_bandwidth is the best cold sequential pass, read_latency the cold probe's p50.
TEST(CalibrateStorage, TinyRunProfileLoadsAndNoFileIsLeft) {
  StorageScratch s;
  auto progress = Progress::quiet();
  const StorageResult r = run_storage(tiny(s.path()), progress);
  EXPECT_EQ(s.entries(), 0u);
  EXPECT_FALSE(fs::exists(r.file));
  for (const int n : {1, 2}) {
    for (const char* pattern : {"sequential", "random"}) {
      for (const char* cache : {"cold", "warm"}) {
        const ReadPass* p = r.find(pattern, cache, n);
        ASSERT_NE(p, nullptr) << pattern << " " << cache << " " << n;
        EXPECT_GT(p->reads, 0);
        EXPECT_EQ(p->bytes, static_cast<std::uint64_t>(p->reads) * r.block);
        EXPECT_EQ(p->latencies.size(), static_cast<std::size_t>(p->reads));
      }
    }
  }
  EXPECT_GT(r.latency_cold.reads, 0);
  EXPECT_EQ(r.latency_cold.block, 4096u);
  EXPECT_DOUBLE_EQ(r.read_latency, r.latency_cold.percentile(0.5));
  const ReadPass* best = r.find("sequential", "cold", r.read_bandwidth_readers);
  ASSERT_NE(best, nullptr);
  EXPECT_DOUBLE_EQ(r.read_bandwidth, best->bandwidth());

  const auto profile = storage_profile_json(r, current_provenance("moesim calibrate storage (test)"), "ssd-test");
  const test::TestDir dir("moesim_storage");
  const auto sp = model::load_storage(dir.write("ssd-test.json", profile_text(profile)).string());
  EXPECT_EQ(sp.id, "ssd-test");
  EXPECT_NEAR(sp.read_bandwidth.value.base(), r.read_bandwidth, 1e-5 * r.read_bandwidth);
  ASSERT_TRUE(sp.read_latency.has_value());
  EXPECT_NEAR(sp.read_latency->value.base(), r.read_latency, 1e-5 * r.read_latency);
  EXPECT_NE(sp.read_bandwidth.source.find(r.cold_method), std::string::npos);
}

// Cold reads through posix_fadvise(POSIX_FADV_DONTNEED) when asked, and the result says so.
TEST(CalibrateStorage, FadviseColdMode) {
  StorageScratch s;
  StorageOptions o = tiny(s.path());
  o.cold = ColdMode::Fadvise;
  o.readers = {1};
  o.warm = false;
  auto progress = Progress::quiet();
  const StorageResult r = run_storage(o, progress);
  EXPECT_EQ(r.cold_method, "posix_fadvise(POSIX_FADV_DONTNEED)");
  EXPECT_EQ(r.find("sequential", "warm", 1), nullptr);
  EXPECT_EQ(s.entries(), 0u);
}

/// The one-line message of the UserError `o` raises.
std::string error_of(const StorageOptions& o) {
  auto progress = Progress::quiet();
  const std::string m = moesim::test::error_of([&] { run_storage(o, progress); });
  return m.empty() ? "(no error)" : m;
}

TEST(CalibrateStorage, BadDirectories) {
  StorageScratch s;
  const std::string missing = s.path() + "/missing";
  EXPECT_NE(error_of(tiny(missing)).find("--dir " + missing + ": does not exist"), std::string::npos);
  std::ofstream(s.path() + "/file") << "x";
  const std::string under_file = s.path() + "/file/x";
  EXPECT_NE(error_of(tiny(under_file)).find("not a directory"), std::string::npos) << error_of(tiny(under_file));
  EXPECT_NE(error_of(tiny(s.path() + "/file")).find("is not a directory"), std::string::npos);
  EXPECT_NE(error_of(tiny("/proc")).find("no storage"), std::string::npos) << error_of(tiny("/proc"));
  StorageOptions huge = tiny(s.path());
  huge.size = 1ull << 60;  // 1 EiB
  const std::string e = error_of(huge);
  EXPECT_NE(e.find("free"), std::string::npos) << e;
  EXPECT_NE(e.find("--size"), std::string::npos) << e;
  EXPECT_EQ(s.entries(), 1u);  // only "file": nothing was created
}

TEST(CalibrateStorage, BadBlocks) {
  StorageScratch s;
  StorageOptions o = tiny(s.path());
  o.block = 1000;
  EXPECT_NE(error_of(o).find("multiple of 4 KiB"), std::string::npos);
  o = tiny(s.path());
  o.size = o.block;
  EXPECT_NE(error_of(o).find("fewer than 2 blocks"), std::string::npos);
  EXPECT_EQ(s.entries(), 0u);
}

}  // namespace
}  // namespace moesim::calibrate
