#pragma once
// Internals of the storage read benchmark shared by calibrate/src/storage*.cpp: the test file, one timed
// pass of reads, the page cache's state, and the words of its reports.

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aligned_buffer.hpp"
#include "moesim/calibrate/storage.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate::storage_detail {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kAlign = 4096;  // O_DIRECT alignment used for buffers, offsets and sizes
using units::kMiB;

inline std::string binary(double bytes) { return units::format_binary(units::bytes(bytes)); }
inline std::string readers_text(int r) { return std::to_string(r) + (r == 1 ? " reader" : " readers"); }

AlignedBuffer read_buffer(std::uint64_t bytes);

/// The test file: closed and removed when this goes out of scope, whatever happens.
class TestFile {
 public:
  explicit TestFile(std::string path) : path_(std::move(path)) {}
  TestFile(const TestFile&) = delete;
  TestFile& operator=(const TestFile&) = delete;
  ~TestFile() {
    for (const int fd : fds_) ::close(fd);
    ::unlink(path_.c_str());
  }
  int keep(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  void close_all() {
    for (const int fd : fds_) ::close(fd);
    fds_.clear();
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<int> fds_;
};

bool read_fully(int fd, std::byte* buf, std::uint64_t n, std::uint64_t offset);

struct PassSpec {
  std::string pattern;  // "sequential" or "random"
  std::string cache;
  std::string method;
  int readers = 1;
  std::uint64_t block = 0;
  std::uint64_t region = 0;  // the pass reads the first `region` bytes of the file
  double time_limit = 1;
  std::uint64_t seed = 1;
  bool random_offsets = false;  // the latency probe: `count` reads at random block-aligned offsets
  std::int64_t count = 0;
};

ReadPass run_pass(int fd, const PassSpec& spec, const std::string& flag, const std::string& dir);
double resident_fraction(int fd, std::uint64_t bytes);
void drop_cache(int fd);
void write_test_file(int wfd, const StorageOptions& o, StorageResult& r, Progress& progress);

}  // namespace moesim::calibrate::storage_detail
