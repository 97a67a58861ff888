// The storage read benchmark's I/O (storage_detail.hpp): aligned reads with pread(2), one timed pass of
// them over a number of reader threads, and the page cache's state of the test file.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <latch>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "storage_detail.hpp"

namespace moesim::calibrate::storage_detail {

AlignedBuffer read_buffer(std::uint64_t bytes) {
  return aligned_buffer(bytes, kAlign, "the storage benchmark's read buffer", "give a smaller --block");
}

/// pread() of exactly `n` bytes (short reads continue); false with errno on failure or end of file.
bool read_fully(int fd, std::byte* buf, std::uint64_t n, std::uint64_t offset) {
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, buf + done, static_cast<std::size_t>(n - done), static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (got == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<std::uint64_t>(got);
  }
  return true;
}

/// Runs one pass with `spec.readers` threads; UserError (naming `flag` and `dir`) if a read fails.
ReadPass run_pass(int fd, const PassSpec& spec, const std::string& flag, const std::string& dir) {
  ReadPass pass;
  pass.pattern = spec.pattern;
  pass.cache = spec.cache;
  pass.method = spec.method;
  pass.readers = spec.readers;
  pass.block = spec.block;
  const std::uint64_t nb = spec.region / spec.block;
  std::vector<std::uint64_t> order;  // block indices, for random and probe passes
  if (spec.pattern == "random" || spec.random_offsets) {
    std::mt19937_64 rng(spec.seed);
    if (spec.random_offsets) {
      std::uniform_int_distribution<std::uint64_t> pick(0, nb - 1);
      for (std::int64_t i = 0; i < spec.count; ++i) order.push_back(pick(rng));
    } else {
      order.resize(nb);
      std::iota(order.begin(), order.end(), std::uint64_t{0});
      std::shuffle(order.begin(), order.end(), rng);
    }
  }
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> limited{false};
  std::mutex mu;
  std::string error;
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(spec.readers));
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(spec.readers), 0);
  std::latch go(1);
  Clock::time_point t0;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(spec.readers));
  for (int i = 0; i < spec.readers; ++i) {
    threads.emplace_back([&, i] {
      AlignedBuffer buf;
      try {
        buf = read_buffer(spec.block);
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> lock(mu);
        error = e.what();
        go.wait();
        return;
      }
      go.wait();
      const auto ui = static_cast<std::uint64_t>(i);
      const auto nr = static_cast<std::uint64_t>(spec.readers);
      std::uint64_t seq = nb * ui / nr;
      const std::uint64_t seq_end = nb * (ui + 1) / nr;
      for (;;) {
        std::uint64_t index = 0;
        if (spec.pattern == "sequential") {
          if (seq >= seq_end) break;
          index = seq++;
        } else {
          const std::uint64_t k = next.fetch_add(1);
          if (k >= order.size()) break;
          index = order[k];
        }
        const auto ts = Clock::now();
        if (!lat[ui].empty() && secs(t0, ts) >= spec.time_limit) {
          limited = true;
          break;
        }
        if (!read_fully(fd, buf.get(), spec.block, index * spec.block)) {
          const std::lock_guard<std::mutex> lock(mu);
          error = std::strerror(errno);
          return;
        }
        lat[ui].push_back(secs(ts, Clock::now()));
        bytes[ui] += spec.block;
      }
    });
  }
  t0 = Clock::now();
  go.count_down();
  for (auto& t : threads) t.join();
  pass.seconds = secs(t0, Clock::now());
  if (!error.empty()) {
    throw UserError(flag + " " + dir + ": reading the test file failed (" + error +
                    "); check the file system, or give another " + flag);
  }
  pass.time_limited = limited;
  for (std::size_t i = 0; i < lat.size(); ++i) {
    pass.latencies.insert(pass.latencies.end(), lat[i].begin(), lat[i].end());
    pass.bytes += bytes[i];
  }
  pass.reads = static_cast<std::int64_t>(pass.latencies.size());
  return pass;
}

/// Fraction of the first `bytes` of the file that is in the page cache (mincore(2)); -1 if unknown.
double resident_fraction(int fd, std::uint64_t bytes) {
  if (bytes == 0) return -1;
  void* map = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t pages =
      static_cast<std::size_t>((bytes + static_cast<std::uint64_t>(page) - 1) / static_cast<std::uint64_t>(page));
  std::vector<unsigned char> vec(pages);
  double out = -1;
  if (::mincore(map, static_cast<std::size_t>(bytes), vec.data()) == 0) {
    std::size_t in = 0;
    for (const unsigned char v : vec) in += (v & 1u) ? 1u : 0u;
    out = static_cast<double>(in) / static_cast<double>(pages);
  }
  ::munmap(map, static_cast<std::size_t>(bytes));
  return out;
}

void drop_cache(int fd) {
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

/// Fills the test file behind `wfd` with `r.size` bytes of fresh data, fsync(2)s it and drops it from the
/// page cache; `r.write_seconds` is the time that took. UserError (naming `o.flag` and `o.dir`) on failure.
void write_test_file(int wfd, const StorageOptions& o, StorageResult& r, Progress& progress) {
  const std::string& flag = o.flag;
  progress.update(0.0, "writing the " + binary(static_cast<double>(r.size)) + " test file in " + o.dir);
  const auto t0 = Clock::now();
  const std::uint64_t chunk = std::min<std::uint64_t>(8 * kMiB, r.size);
  AlignedBuffer buf = read_buffer(chunk);
  std::uint64_t x = o.seed * 0x9E3779B97F4A7C15ull | 1u;
  for (std::uint64_t off = 0; off < r.size; off += chunk) {
    // Fresh xorshift64 data per chunk (Marsaglia 2003): nothing below the file system can compress or
    // deduplicate it.
    auto* w = reinterpret_cast<std::uint64_t*>(buf.get());
    for (std::uint64_t i = 0; i < chunk / 8; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w[i] = x;
    }
    const std::uint64_t n = std::min(chunk, r.size - off);
    std::uint64_t done = 0;
    while (done < n) {
      const ssize_t put =
          ::pwrite(wfd, buf.get() + done, static_cast<std::size_t>(n - done), static_cast<off_t>(off + done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) {
        throw UserError(flag + " " + o.dir + ": writing the " + binary(static_cast<double>(r.size)) +
                        " test file failed (" + std::strerror(errno) +
                        "); free some space, give a smaller --size, or another " + flag);
      }
      done += static_cast<std::uint64_t>(put);
    }
    progress.update(0.05 * static_cast<double>(off + n) / static_cast<double>(r.size),
                    "writing the test file in " + o.dir);
  }
  if (::fsync(wfd) != 0) {
    throw UserError(flag + " " + o.dir + ": fsync of the test file failed (" + std::strerror(errno) +
                    "); give another " + flag);
  }
  r.write_seconds = secs(t0, Clock::now());
  ::posix_fadvise(wfd, 0, 0, POSIX_FADV_DONTNEED);
}

}  // namespace moesim::calibrate::storage_detail
