// Storage read benchmark: what is measured is described in storage.hpp and calibrate/BENCH.md.
// This file plans and runs it; the I/O is storage_io.cpp, the reports storage_output.cpp.

#include "moesim/calibrate/storage.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/memory.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "storage_detail.hpp"

namespace moesim::calibrate {

namespace {

using units::kMiB;
constexpr std::uint64_t kHeadroom = 64 * kMiB;  // left free on the file system beyond the test file

/// The headline figures of `r`'s passes: the best cold sequential bandwidth (and the readers that reached
/// it), the median cold latency, and a note when a pass stopped at its share of --max-seconds.
void summarise_passes(StorageResult& r, const StorageOptions& o) {
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
}

/// How cold reads avoid the page cache: O_DIRECT through `cold_fd` if the file system accepts an aligned read
/// through it (else `cold_fd` becomes -1; `direct_errno` says why it could not be opened, when it was not).
/// True when they use O_DIRECT; a note, or UserError under --cold direct, when they cannot.
bool cold_reads_direct(int& cold_fd, int direct_errno, const StorageOptions& o, StorageResult& r) {
  const std::string& flag = o.flag;
  if (cold_fd >= 0) {
    AlignedBuffer probe = storage_detail::read_buffer(storage_detail::kAlign);
    if (!storage_detail::read_fully(cold_fd, probe.get(), storage_detail::kAlign, 0)) {
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
  return cold_fd >= 0;
}

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
  std::uint64_t b = (static_cast<std::uint64_t>(expert) + storage_detail::kAlign - 1) / storage_detail::kAlign *
                    storage_detail::kAlign;
  if (b > kCap) {
    if (note) {
      *note = "one " + a.id + " expert at bf16 is " + storage_detail::binary(expert) + "; blocks are capped at " +
              storage_detail::binary(static_cast<double>(kCap)) +
              " (a larger read is a sequential stream, which the sequential "
              "pattern measures)";
    }
    b = kCap;
  } else if (note) {
    *note = "blocks of one " + a.id + " expert at bf16 (" + storage_detail::binary(expert) + ", rounded to 4 KiB)";
  }
  return b;
}

StoragePlan plan_storage(const StorageOptions& o) {
  StoragePlan plan;
  const std::string& flag = o.flag;
  if (o.dir.empty()) throw UserError(flag + " is missing; give the directory to measure, e.g. " + flag + " /tmp");
  plan.block = o.block ? o.block : 16 * kMiB;
  if (plan.block % storage_detail::kAlign != 0) {
    throw UserError("--block " + storage_detail::binary(static_cast<double>(plan.block)) +
                    " is not a multiple of 4 KiB (O_DIRECT needs aligned reads); give e.g. 4MiB");
  }
  if (o.latency_block == 0 || o.latency_block % storage_detail::kAlign != 0) {
    throw UserError("the latency probe's block must be a multiple of 4 KiB");
  }
  plan.size = o.size / plan.block * plan.block;
  if (plan.size < 2 * plan.block) {
    throw UserError(o.size_flag + " " + storage_detail::binary(static_cast<double>(o.size)) +
                    " holds fewer than 2 blocks of --block " + storage_detail::binary(static_cast<double>(plan.block)) +
                    "; give a larger " + o.size_flag + " or a smaller --block");
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
    throw UserError(flag + " " + o.dir + ": only " + storage_detail::binary(static_cast<double>(plan.free_before)) +
                    " free, and the test file needs " + storage_detail::binary(static_cast<double>(plan.size)) + " (" +
                    o.size_flag + ") + " + storage_detail::binary(static_cast<double>(kHeadroom)) +
                    " headroom; free some space, give a smaller " + o.size_flag + ", or another " + flag);
  }
  return plan;
}

StorageResult run_storage(const StorageOptions& o, Progress& progress) {
  const auto t_start = storage_detail::Clock::now();
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
  storage_detail::TestFile file(path);
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

  storage_detail::write_test_file(wfd, o, r, progress);

  const bool direct = cold_reads_direct(cold_fd, direct_errno, o, r);
  r.cold_method = direct ? "O_DIRECT" : "posix_fadvise(POSIX_FADV_DONTNEED)";
  const int cfd = direct ? cold_fd : buf_fd;
  const auto prepare_cold = [&](bool random) {
    if (direct) return;
    storage_detail::drop_cache(buf_fd);
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
  storage_detail::PassSpec probe{"latency-probe", "cold",      r.cold_method, 1,    probe_block,
                                 r.size,          probe_limit, o.seed + 1,    true, std::max(1, o.latency_reads)};
  tick("latency probe, cold " + storage_detail::binary(static_cast<double>(probe_block)) + " reads");
  prepare_cold(true);
  r.latency_cold = storage_detail::run_pass(cfd, probe, flag, o.dir);
  r.latency_cold.pattern = "latency-probe";

  std::uint64_t seed = o.seed + 100;
  for (const int n : readers) {
    for (const char* pattern : {"sequential", "random"}) {
      tick(std::string("cold ") + pattern + " reads, " + storage_detail::readers_text(n));
      prepare_cold(std::string(pattern) == "random");
      r.passes.push_back(storage_detail::run_pass(
          cfd, {pattern, "cold", r.cold_method, n, r.block, r.size, cold_limit, seed++, false, 0}, flag, o.dir));
    }
  }

  if (o.warm) {
    // Fill the page cache with a buffered sequential read (readahead on), as far as its budget allows; the
    // warm passes read that region.
    ::posix_fadvise(buf_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    tick("reading the test file into the page cache");
    ReadPass fill = storage_detail::run_pass(
        buf_fd, {"sequential", "cold", "buffered", 1, r.block, r.size, 0.20 * budget, seed++, false, 0}, flag, o.dir);
    fill.pattern = "page-cache fill";
    const std::uint64_t region = std::max<std::uint64_t>(fill.bytes / r.block * r.block, r.block);
    if (region < r.size) {
      r.notes.push_back("warm passes read the first " + storage_detail::binary(static_cast<double>(region)) +
                        " of the file (what the "
                        "page-cache fill read within its share of --max-seconds)");
    }
    r.passes.push_back(std::move(fill));
    r.warm_resident = storage_detail::resident_fraction(buf_fd, region);
    if (r.warm_resident >= 0 && r.warm_resident < 0.99) {
      r.notes.push_back("only " + text::printf("%.0f", 100 * r.warm_resident) +
                        "% of the warm region was in the page cache before the warm passes (memory pressure?)");
    }
    ::posix_fadvise(buf_fd, 0, 0, POSIX_FADV_NORMAL);
    const double warm_limit = 0.15 * budget / (n_pass + 1);
    for (const int n : readers) {
      for (const char* pattern : {"sequential", "random"}) {
        tick(std::string("warm ") + pattern + " reads, " + storage_detail::readers_text(n));
        r.passes.push_back(storage_detail::run_pass(
            buf_fd, {pattern, "warm", "buffered", n, r.block, region, warm_limit, seed++, false, 0}, flag, o.dir));
      }
    }
    tick("latency probe, warm");
    storage_detail::PassSpec wp = probe;
    wp.cache = "warm";
    wp.method = "buffered";
    wp.region = region;
    wp.time_limit = warm_limit;
    r.latency_warm = storage_detail::run_pass(buf_fd, wp, flag, o.dir);
    r.latency_warm.pattern = "latency-probe";
  }
  file.close_all();

  summarise_passes(r, o);
  r.seconds = secs(t_start, storage_detail::Clock::now());
  progress.update(1.0, "storage done");
  return r;
}

}  // namespace moesim::calibrate
