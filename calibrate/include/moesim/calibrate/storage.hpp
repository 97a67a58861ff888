#pragma once
// `moesim calibrate storage --dir D`: how fast this machine reads weights from a file system, which is what
// SSD expert streaming needs (flash-moe, github.com/danveloper/flash-moe: experts read with parallel
// pread() from an SSD, hot ones served by the page cache).
//
// A file of `size` bytes (random data, so compression or deduplication below the file system cannot fake
// the reads) is created in D, synced, and read in blocks of `block` bytes (default: one routed expert of the
// model at bf16, capped) with pread():
//  - sequential: each of R readers streams its own contiguous part of the file;
//  - random:     R readers take the blocks of a shuffled permutation of the whole file, one at a time;
//  - cold:       O_DIRECT (the page cache is bypassed; buffers, offsets and sizes aligned to 4 KiB), or,
//                where the file system refuses O_DIRECT, the file's cached pages are dropped with
//                posix_fadvise(POSIX_FADV_DONTNEED) before each pass (the result says which);
//  - warm:       the same reads once the file (the part the warm passes read) is in the page cache.
// For each pass: bandwidth = bytes read / wall time of the pass, and each read's latency (p50, p99 by the
// nearest-rank method). A latency probe reads 4 KiB blocks at random offsets one at a time (one reader,
// cold and warm): that p50 is the profile's read_latency, the cold sequential bandwidth (best over R) its
// read_bandwidth. The file's name is removed as soon as it is open, so it disappears with the run even when
// the run fails or is killed.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/model/architecture.hpp"

namespace moesim::calibrate {

/// How cold reads avoid the page cache.
enum class ColdMode {
  Auto,     ///< O_DIRECT where the file system accepts it, else posix_fadvise(POSIX_FADV_DONTNEED)
  Direct,   ///< O_DIRECT only (UserError where it is refused)
  Fadvise,  ///< buffered reads after posix_fadvise(POSIX_FADV_DONTNEED) on the file
};
/// "auto", "direct", "fadvise"; UserError naming `flag` otherwise.
ColdMode parse_cold_mode(const std::string& text, const std::string& flag);

struct StorageOptions {
  std::string dir;                  ///< where the test file is created (must exist, be writable)
  std::uint64_t size = 2ull << 30;  ///< bytes of the test file (rounded down to whole blocks)
  std::uint64_t block = 0;          ///< bytes per read; a multiple of 4 KiB; 0: 16 MiB
  std::vector<int> readers;         ///< parallel readers per pass; empty: 1, 2, 4 .. 2 × CPUs
  double max_seconds = 45;          ///< budget of the read passes (the file's creation is extra)
  ColdMode cold = ColdMode::Auto;
  bool warm = true;                    ///< also measure warm (page-cache) reads
  std::uint64_t latency_block = 4096;  ///< bytes per read of the latency probe
  int latency_reads = 256;             ///< reads of the latency probe (fewer if the budget ends)
  std::uint64_t seed = 1;              ///< of the file's contents and the random orders
  std::string flag = "--dir";          ///< how error messages name the directory
  std::string size_flag = "--size";    ///< how error messages name the file size
};

/// One pass: a pattern at one reader count, cold or warm.
struct ReadPass {
  std::string pattern;  ///< "sequential", "random", "latency-probe", "page-cache fill"
  std::string cache;    ///< "cold" or "warm"
  std::string method;   ///< "O_DIRECT", "posix_fadvise(POSIX_FADV_DONTNEED)", "buffered"
  int readers = 1;
  std::uint64_t block = 0;
  std::uint64_t bytes = 0;  ///< bytes read
  std::int64_t reads = 0;
  double seconds = 0;             ///< wall time of the pass
  bool time_limited = false;      ///< stopped by the budget before reading its whole region
  std::vector<double> latencies;  ///< seconds per read, in completion order per reader
  [[nodiscard]] double bandwidth() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0; }
  [[nodiscard]] double percentile(double q) const;  ///< nearest rank, q in (0, 1]
};

struct StorageResult {
  std::string dir;
  std::string file;  ///< the test file's path (removed)
  std::uint64_t size = 0;
  std::uint64_t block = 0;
  std::string cold_method;        ///< "O_DIRECT" or "posix_fadvise(POSIX_FADV_DONTNEED)"
  std::uint64_t capacity = 0;     ///< statvfs: size of D's file system
  std::uint64_t free_before = 0;  ///< statvfs: bytes available to the user before the file was made
  double write_seconds = 0;       ///< writing and fsync()ing the file
  std::vector<ReadPass> passes;   ///< sequential and random, cold then warm, per reader count
  ReadPass latency_cold;          ///< the 4 KiB probe, cold
  ReadPass latency_warm;          ///< and warm (reads == 0 when not measured)
  double warm_resident = 0;       ///< fraction of the warm region in the page cache before the warm passes (mincore)
  double read_bandwidth = 0;      ///< best cold sequential bandwidth over the reader counts
  int read_bandwidth_readers = 0;
  double read_latency = 0;  ///< p50 of latency_cold
  std::vector<std::string> notes;
  double seconds = 0;

  [[nodiscard]] const ReadPass* find(const std::string& pattern, const std::string& cache, int readers) const;
};

/// Bytes the user may still write in `dir` (statvfs f_bavail × f_frsize). UserError naming `flag` when
/// `dir` does not exist, is not a directory, or is on a file system without storage (proc, sysfs).
std::uint64_t storage_free_bytes(const std::string& dir, const std::string& flag = "--dir");

/// The default block: one routed expert of `a` at bf16 (all three matrices, as flash-moe reads one
/// expert per pread), rounded to 4 KiB and capped at 64 MiB; `note` says when it was capped.
std::uint64_t default_storage_block(const model::Architecture& a, std::string* note);

/// What a run will do, checked before anything is written: the block, the file size (whole blocks), the
/// reader counts, and the free space. UserError naming options.flag for every check run_storage() makes
/// before it writes (directory, free space, block alignment, size, readers).
struct StoragePlan {
  std::uint64_t block = 0;
  std::uint64_t size = 0;
  std::vector<int> readers;
  std::uint64_t free_before = 0;
};
StoragePlan plan_storage(const StorageOptions& options);

/// Creates the file, runs the passes and removes the file (also when it throws). UserError, before
/// anything is written, naming options.flag and the fix when: the directory is missing or not a directory,
/// a file cannot be created in it (permission, read-only file system), or it has less free space than
/// size + 64 MiB; also for a block that is not a multiple of 4 KiB or a file smaller than 2 blocks.
StorageResult run_storage(const StorageOptions& options, Progress& progress);

/// A storage profile (kind "storage") with read_bandwidth, read_latency, capacity and {"provenance",
/// "storage": calibration}; model::load_storage reads it.
nlohmann::json storage_profile_json(const StorageResult& r, const Provenance& p, const std::string& id);
/// The raw data: every pass's bytes, time, bandwidth, latency percentiles (and every latency), the method.
nlohmann::json storage_calibration_json(const StorageResult& r);
/// The text report: a table per pass (bandwidth, p50, p99) and the profile's figures.
void print_storage_report(const StorageResult& r, std::ostream& out);

}  // namespace moesim::calibrate
