// Storage read benchmark: what is measured is described in storage.hpp and calibrate/BENCH.md.

#include "moesim/calibrate/storage.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/memory.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "aligned_buffer.hpp"
#include "moesim/reports/table.hpp"

namespace moesim::calibrate {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kAlign = 4096;  // O_DIRECT alignment used for buffers, offsets and sizes
using units::kMiB;
constexpr std::uint64_t kHeadroom = 64 * kMiB;  // left free on the file system beyond the test file

std::string binary(double bytes) { return units::format_binary(units::bytes(bytes)); }

AlignedBuffer read_buffer(std::uint64_t bytes) {
  return aligned_buffer(bytes, kAlign, "the storage benchmark's read buffer", "give a smaller --block");
}

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

std::string readers_text(int r) { return std::to_string(r) + (r == 1 ? " reader" : " readers"); }

}  // namespace

ColdMode parse_cold_mode(const std::string& text, const std::string& flag) {
  if (text == "auto") return ColdMode::Auto;
  if (text == "direct") return ColdMode::Direct;
  if (text == "fadvise") return ColdMode::Fadvise;
  throw UserError(flag + ": unknown mode '" + text + "'" + text::did_you_mean(text, {"auto", "direct", "fadvise"}) +
                  "; valid: auto (O_DIRECT, else fadvise), direct (O_DIRECT only), fadvise (drop the file's cached "
                  "pages)");
}

double ReadPass::percentile(double q) const {
  if (latencies.empty()) return 0;
  std::vector<double> v = latencies;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least q·n values at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

const ReadPass* StorageResult::find(const std::string& pattern, const std::string& cache, int readers) const {
  for (const auto& p : passes) {
    if (p.pattern == pattern && p.cache == cache && p.readers == readers) return &p;
  }
  return nullptr;
}

std::uint64_t storage_free_bytes(const std::string& dir, const std::string& flag) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int e = errno;
    throw UserError(flag + " " + dir + ": " +
                    (e == ENOENT    ? std::string("does not exist; create it, or give an existing directory")
                     : e == ENOTDIR ? std::string("a part of the path is not a directory; give a directory")
                                    : std::string(std::strerror(e)) + "; give a directory you can write to"));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw UserError(flag + " " + dir + ": is not a directory; give the directory to create the test file in");
  }
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    throw UserError(flag + " " + dir + ": cannot read its file system's free space (" + std::strerror(errno) +
                    "); give another directory");
  }
  if (vfs.f_blocks == 0) {
    throw UserError(flag + " " + dir +
                    ": its file system has no storage (a virtual file system such as proc or sysfs); give a "
                    "directory on the disk to measure");
  }
  return static_cast<std::uint64_t>(vfs.f_bavail) * static_cast<std::uint64_t>(vfs.f_frsize);
}

std::uint64_t default_storage_block(const model::Architecture& a, std::string* note) {
  constexpr std::uint64_t kCap = 64 * kMiB;
  const double expert = a.is_moe() ? model::routed_expert_bytes(a, model::precision("bf16")).base() : 0.0;
  if (expert <= 0) {
    if (note) *note = a.id + " has no routed experts; blocks of 16 MiB";
    return 16 * kMiB;
  }
  std::uint64_t b = (static_cast<std::uint64_t>(expert) + kAlign - 1) / kAlign * kAlign;
  if (b > kCap) {
    if (note) {
      *note = "one " + a.id + " expert at bf16 is " + binary(expert) + "; blocks are capped at " +
              binary(static_cast<double>(kCap)) +
              " (a larger read is a sequential stream, which the sequential "
              "pattern measures)";
    }
    b = kCap;
  } else if (note) {
    *note = "blocks of one " + a.id + " expert at bf16 (" + binary(expert) + ", rounded to 4 KiB)";
  }
  return b;
}

StoragePlan plan_storage(const StorageOptions& o) {
  StoragePlan plan;
  const std::string& flag = o.flag;
  if (o.dir.empty()) throw UserError(flag + " is missing; give the directory to measure, e.g. " + flag + " /tmp");
  plan.block = o.block ? o.block : 16 * kMiB;
  if (plan.block % kAlign != 0) {
    throw UserError("--block " + binary(static_cast<double>(plan.block)) +
                    " is not a multiple of 4 KiB (O_DIRECT needs aligned reads); give e.g. 4MiB");
  }
  if (o.latency_block == 0 || o.latency_block % kAlign != 0) {
    throw UserError("the latency probe's block must be a multiple of 4 KiB");
  }
  plan.size = o.size / plan.block * plan.block;
  if (plan.size < 2 * plan.block) {
    throw UserError(o.size_flag + " " + binary(static_cast<double>(o.size)) + " holds fewer than 2 blocks of --block " +
                    binary(static_cast<double>(plan.block)) + "; give a larger " + o.size_flag +
                    " or a smaller --block");
  }
  const int cpus = online_cpus();
  plan.readers = o.readers;
  if (plan.readers.empty()) {
    for (int n = 1; n <= 2 * cpus; n *= 2) plan.readers.push_back(n);
  }
  for (const int n : plan.readers) {
    if (n < 1 || n > 256) throw UserError("--readers: " + std::to_string(n) + " is outside 1..256");
  }
  std::sort(plan.readers.begin(), plan.readers.end());
  plan.readers.erase(std::unique(plan.readers.begin(), plan.readers.end()), plan.readers.end());

  plan.free_before = storage_free_bytes(o.dir, flag);
  if (plan.free_before < plan.size + kHeadroom) {
    throw UserError(flag + " " + o.dir + ": only " + binary(static_cast<double>(plan.free_before)) +
                    " free, and the test file needs " + binary(static_cast<double>(plan.size)) + " (" + o.size_flag +
                    ") + " + binary(static_cast<double>(kHeadroom)) + " headroom; free some space, give a smaller " +
                    o.size_flag + ", or another " + flag);
  }
  return plan;
}

StorageResult run_storage(const StorageOptions& o, Progress& progress) {
  const auto t_start = Clock::now();
  StorageResult r;
  r.dir = o.dir;
  const std::string& flag = o.flag;
  // Checks that need nothing written first.
  const StoragePlan plan = plan_storage(o);
  r.block = plan.block;
  r.size = plan.size;
  r.free_before = plan.free_before;
  const std::vector<int>& readers = plan.readers;
  struct statvfs vfs {};
  if (::statvfs(o.dir.c_str(), &vfs) == 0) {
    r.capacity = static_cast<std::uint64_t>(vfs.f_blocks) * static_cast<std::uint64_t>(vfs.f_frsize);
  }

  // The file: created exclusively, removed by TestFile on every way out of this function.
  const std::string path = (o.dir.back() == '/' ? o.dir : o.dir + "/") + ".moesim-storage-" +
                           std::to_string(::getpid()) + "-" +
                           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".bin";
  const int wfd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (wfd < 0) {
    throw UserError(flag + " " + o.dir + ": cannot create a file in it (" + std::strerror(errno) +
                    "); give a directory you can write to");
  }
  TestFile file(path);
  file.keep(wfd);
  r.file = path;
  // Every descriptor is opened now and the name removed at once: the data stays reachable through them and
  // the file disappears with the last one, even if moesim is killed (Ctrl-C, SIGKILL) before the end.
  const int buf_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (buf_fd < 0) {
    throw UserError(flag + " " + o.dir + ": cannot reopen the test file (" + std::strerror(errno) +
                    "); give a directory you can read and write");
  }
  file.keep(buf_fd);
  int cold_fd = -1;
  int direct_errno = 0;
  if (o.cold != ColdMode::Fadvise) {
    cold_fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (cold_fd >= 0) {
      file.keep(cold_fd);
    } else {
      direct_errno = errno;
    }
  }
  ::unlink(path.c_str());

  {
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

  // How cold reads avoid the page cache: O_DIRECT if the file system accepts an aligned read through it.
  if (cold_fd >= 0) {
    AlignedBuffer probe = read_buffer(kAlign);
    if (!read_fully(cold_fd, probe.get(), kAlign, 0)) {
      direct_errno = errno;
      cold_fd = -1;
    }
  }
  if (o.cold != ColdMode::Fadvise && cold_fd < 0) {
    if (o.cold == ColdMode::Direct) {
      throw UserError(flag + " " + o.dir + ": its file system refuses O_DIRECT reads (" + std::strerror(direct_errno) +
                      "); use --cold fadvise (or auto)");
    }
    r.notes.push_back("the file system refused O_DIRECT (" + std::string(std::strerror(direct_errno)) +
                      "): cold reads drop the file's cached pages with posix_fadvise(POSIX_FADV_DONTNEED) instead");
  }
  const bool direct = cold_fd >= 0;
  r.cold_method = direct ? "O_DIRECT" : "posix_fadvise(POSIX_FADV_DONTNEED)";
  const int cfd = direct ? cold_fd : buf_fd;
  const auto prepare_cold = [&](bool random) {
    if (direct) return;
    drop_cache(buf_fd);
    ::posix_fadvise(buf_fd, 0, 0, random ? POSIX_FADV_RANDOM : POSIX_FADV_SEQUENTIAL);
  };

  // Budget: 60% to the cold passes (5% of it to the probe), 20% to filling the page cache, 15% to the warm
  // passes, 5% spare; without warm passes the cold ones get 85%.
  const double budget = std::max(0.1, o.max_seconds);
  const double n_pass = static_cast<double>(2 * readers.size());
  const double cold_share = o.warm ? 0.60 : 0.85;
  const double probe_limit = 0.05 * budget;
  const double cold_limit = (cold_share * budget - probe_limit) / n_pass;
  const double total_steps = n_pass * (o.warm ? 2 : 1) + (o.warm ? 3 : 1);
  double step = 0;
  const auto tick = [&](const std::string& what) {
    progress.update(0.05 + 0.95 * step / total_steps, what);
    step += 1;
  };

  const std::uint64_t probe_block = std::min(o.latency_block, r.block);
  PassSpec probe{"latency-probe", "cold",      r.cold_method, 1,    probe_block,
                 r.size,          probe_limit, o.seed + 1,    true, std::max(1, o.latency_reads)};
  tick("latency probe, cold " + binary(static_cast<double>(probe_block)) + " reads");
  prepare_cold(true);
  r.latency_cold = run_pass(cfd, probe, flag, o.dir);
  r.latency_cold.pattern = "latency-probe";

  std::uint64_t seed = o.seed + 100;
  for (const int n : readers) {
    for (const char* pattern : {"sequential", "random"}) {
      tick(std::string("cold ") + pattern + " reads, " + readers_text(n));
      prepare_cold(std::string(pattern) == "random");
      r.passes.push_back(run_pass(
          cfd, {pattern, "cold", r.cold_method, n, r.block, r.size, cold_limit, seed++, false, 0}, flag, o.dir));
    }
  }

  if (o.warm) {
    // Fill the page cache with a buffered sequential read (readahead on), as far as its budget allows; the
    // warm passes read that region.
    ::posix_fadvise(buf_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    tick("reading the test file into the page cache");
    ReadPass fill = run_pass(
        buf_fd, {"sequential", "cold", "buffered", 1, r.block, r.size, 0.20 * budget, seed++, false, 0}, flag, o.dir);
    fill.pattern = "page-cache fill";
    const std::uint64_t region = std::max<std::uint64_t>(fill.bytes / r.block * r.block, r.block);
    if (region < r.size) {
      r.notes.push_back("warm passes read the first " + binary(static_cast<double>(region)) +
                        " of the file (what the "
                        "page-cache fill read within its share of --max-seconds)");
    }
    r.passes.push_back(std::move(fill));
    r.warm_resident = resident_fraction(buf_fd, region);
    if (r.warm_resident >= 0 && r.warm_resident < 0.99) {
      r.notes.push_back("only " + text::printf("%.0f", 100 * r.warm_resident) +
                        "% of the warm region was in the page cache before the warm passes (memory pressure?)");
    }
    ::posix_fadvise(buf_fd, 0, 0, POSIX_FADV_NORMAL);
    const double warm_limit = 0.15 * budget / (n_pass + 1);
    for (const int n : readers) {
      for (const char* pattern : {"sequential", "random"}) {
        tick(std::string("warm ") + pattern + " reads, " + readers_text(n));
        r.passes.push_back(run_pass(
            buf_fd, {pattern, "warm", "buffered", n, r.block, region, warm_limit, seed++, false, 0}, flag, o.dir));
      }
    }
    tick("latency probe, warm");
    PassSpec wp = probe;
    wp.cache = "warm";
    wp.method = "buffered";
    wp.region = region;
    wp.time_limit = warm_limit;
    r.latency_warm = run_pass(buf_fd, wp, flag, o.dir);
    r.latency_warm.pattern = "latency-probe";
  }
  file.close_all();

  for (const auto& p : r.passes) {
    if (p.pattern == "sequential" && p.cache == "cold" && p.bandwidth() > r.read_bandwidth) {
      r.read_bandwidth = p.bandwidth();
      r.read_bandwidth_readers = p.readers;
    }
  }
  r.read_latency = r.latency_cold.percentile(0.5);
  for (const auto& p : r.passes) {
    if (p.time_limited && p.pattern != "page-cache fill") {
      r.notes.push_back("some passes stopped before reading their whole region, to stay within --max-seconds " +
                        text::printf("%.0f", o.max_seconds) + " (their figures use what they read)");
      break;
    }
  }
  r.seconds = secs(t_start, Clock::now());
  progress.update(1.0, "storage done");
  return r;
}

nlohmann::json storage_calibration_json(const StorageResult& r) {
  const auto pass_json = [](const ReadPass& p) {
    return nlohmann::json{{"pattern", p.pattern},
                          {"cache", p.cache},
                          {"method", p.method},
                          {"readers", p.readers},
                          {"block", quantity(static_cast<double>(p.block), "B")},
                          {"reads", p.reads},
                          {"bytes", quantity(static_cast<double>(p.bytes), "B")},
                          {"seconds", quantity(p.seconds, "s")},
                          {"bandwidth", quantity(p.bandwidth(), "B/s")},
                          {"latency_p50", quantity(p.percentile(0.5), "s")},
                          {"latency_p99", quantity(p.percentile(0.99), "s")},
                          {"time_limited", p.time_limited},
                          {"latencies_s", p.latencies}};
  };
  nlohmann::json passes = nlohmann::json::array();
  for (const auto& p : r.passes) passes.push_back(pass_json(p));
  nlohmann::json j = {
      {"benchmark",
       "pread() of blocks from a test file of random data: sequential (each reader its own contiguous part) and "
       "random (a shuffled permutation of all blocks shared by the readers), cold then warm; bandwidth = bytes / "
       "wall time of the pass; latency per read, p50/p99 by nearest rank"},
      {"dir", r.dir},
      {"file_size", quantity(static_cast<double>(r.size), "B")},
      {"block", quantity(static_cast<double>(r.block), "B")},
      {"cold_method", r.cold_method},
      {"capacity", quantity(static_cast<double>(r.capacity), "B")},
      {"free_before", quantity(static_cast<double>(r.free_before), "B")},
      {"write",
       {{"seconds", quantity(r.write_seconds, "s")},
        {"bandwidth", quantity(r.write_seconds > 0 ? static_cast<double>(r.size) / r.write_seconds : 0, "B/s")},
        {"note", "buffered pwrite() of the whole file, then fsync()"}}},
      {"latency_probe_cold", pass_json(r.latency_cold)},
      {"passes", passes},
      {"warm_resident_fraction", r.warm_resident},
      {"notes", r.notes},
      {"wall_time", quantity(r.seconds, "s")}};
  if (r.latency_warm.reads > 0) j["latency_probe_warm"] = pass_json(r.latency_warm);
  return j;
}

nlohmann::json storage_profile_json(const StorageResult& r, const Provenance& p, const std::string& id) {
  using units::Dimension;
  const ReadPass* best = r.find("sequential", "cold", r.read_bandwidth_readers);
  MOESIM_CHECK(best != nullptr, "no cold sequential pass");
  nlohmann::json j = {
      {"id", id},
      {"kind", "storage"},
      {"name", "The file system of " + r.dir + " on " + p.host + ", measured by moesim calibrate storage"}};
  std::string warm_note;
  if (const ReadPass* w = r.find("sequential", "warm", r.read_bandwidth_readers)) {
    warm_note = "; warm (page cache) at the same readers: " + units::format(w->bandwidth(), Dimension::Bandwidth, 4);
  }
  j["read_bandwidth"] = figure_json(
      r.read_bandwidth, Dimension::Bandwidth,
      measured_source(p, "sequential cold reads (" + r.cold_method + ") of " + binary(static_cast<double>(r.block)) +
                             " blocks from a " + binary(static_cast<double>(r.size)) +
                             " file, best over the reader "
                             "counts (" +
                             readers_text(r.read_bandwidth_readers) + ")"),
      "p50 latency of one block " + units::format(best->percentile(0.5), Dimension::Time, 3) + warm_note);
  if (r.latency_cold.reads > 0 && r.read_latency > 0) {
    j["read_latency"] =
        figure_json(r.read_latency, Dimension::Time,
                    measured_source(p, "p50 of " + std::to_string(r.latency_cold.reads) + " cold " +
                                           binary(static_cast<double>(r.latency_cold.block)) +
                                           " reads at random offsets, one at a time (" + r.cold_method + ")"),
                    "p99 " + units::format(r.latency_cold.percentile(0.99), Dimension::Time, 3));
  }
  if (r.capacity > 0) {
    std::string cap = units::format(static_cast<double>(r.capacity), Dimension::Bytes, 6);
    cap.erase(std::remove(cap.begin(), cap.end(), ' '), cap.end());
    j["capacity"] = {{"value", cap},
                     {"source", measured_source(p, "statvfs(" + r.dir + "): size of the file system")},
                     {"note", "decimal units, as storage capacities are written"}};
  }
  std::string notes = "Cold reads: " + r.cold_method + ". Random cold reads of one block:";
  for (const auto& pass : r.passes) {
    if (pass.pattern == "random" && pass.cache == "cold") {
      notes += " " + readers_text(pass.readers) + " " + units::format(pass.bandwidth(), Dimension::Bandwidth, 3) + ",";
    }
  }
  notes.back() = '.';
  notes += " All passes are under calibration.storage.";
  j["notes"] = notes;
  j["calibration"] = {{"provenance", to_json(p)}, {"storage", storage_calibration_json(r)}};
  return j;
}

void print_storage_report(const StorageResult& r, std::ostream& out) {
  using units::Dimension;
  out << "storage: " << r.dir << " (file system of "
      << units::format(static_cast<double>(r.capacity), Dimension::Bytes, 3) << ", "
      << binary(static_cast<double>(r.free_before)) << " free); test file of " << binary(static_cast<double>(r.size))
      << " written in " << text::printf("%.2f", r.write_seconds) << " s, read in blocks of "
      << binary(static_cast<double>(r.block)) << "; cold = " << r.cold_method << "; removed afterwards\n";
  reports::Table t({"pattern", "cache", "readers", "block", "reads", "read MiB", "time s", "GB/s", "p50 ms", "p99 ms"});
  const auto row = [&](const ReadPass& p) {
    t.add_row({p.pattern + (p.time_limited ? "*" : ""), p.cache, std::to_string(p.readers),
               binary(static_cast<double>(p.block)), std::to_string(p.reads),
               text::printf("%.1f", static_cast<double>(p.bytes) / static_cast<double>(kMiB)),
               text::printf("%.3f", p.seconds), text::printf("%.3f", p.bandwidth() / 1e9),
               text::printf("%.3f", p.percentile(0.5) * 1e3), text::printf("%.3f", p.percentile(0.99) * 1e3)});
  };
  row(r.latency_cold);
  for (const auto& p : r.passes) row(p);
  if (r.latency_warm.reads > 0) row(r.latency_warm);
  t.print_text(out);
  if (std::any_of(r.passes.begin(), r.passes.end(), [](const ReadPass& p) { return p.time_limited; })) {
    out << "(* stopped by --max-seconds before reading its whole region)\n";
  }
  out << "read_bandwidth (cold sequential, best): " << units::format(r.read_bandwidth, Dimension::Bandwidth, 4)
      << " with " << readers_text(r.read_bandwidth_readers) << "\n";
  out << "read_latency (cold " << binary(static_cast<double>(r.latency_cold.block))
      << " random read, p50): " << units::format(r.read_latency, Dimension::Time, 3) << " (p99 "
      << units::format(r.latency_cold.percentile(0.99), Dimension::Time, 3) << ")\n";
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

}  // namespace moesim::calibrate
