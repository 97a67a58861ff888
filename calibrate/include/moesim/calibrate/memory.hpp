#pragma once
// `moesim calibrate memory`: the sustained memory bandwidth of this machine, measured the way STREAM
// measures it (J. D. McCalpin, "Memory Bandwidth and Machine Balance in Current High Performance
// Computers", IEEE TCCA Newsletter, Dec. 1995; stream.c v5.10, https://www.cs.virginia.edu/stream/).
//
// Four kernels over three arrays of doubles, each array much larger than the last-level cache:
//   copy  c[i] = a[i]            2 arrays touched: 16 B per element
//   scale b[i] = q·c[i]          2 arrays: 16 B
//   add   c[i] = a[i] + b[i]     3 arrays: 24 B
//   triad a[i] = b[i] + q·c[i]   3 arrays: 24 B
// Bytes are counted as STREAM counts them (each array read or written once per pass; write-allocate
// traffic is not counted), the bandwidth of a kernel is its bytes / its best time over the repetitions
// (STREAM's rule: the first pass is a warm-up and not counted). Each thread count runs its own team of
// std::threads; each thread first-touches its own contiguous part of every array, so on a NUMA machine
// the pages lie on the node of the thread that uses them (as stream.c's OpenMP initialisation does).
// The best triad is the node profile's devices.memory_bandwidth: the physical limit every memory-bound
// prediction for this machine is measured against. See calibrate/BENCH.md.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"

namespace moesim::calibrate {

// ---- this machine ------------------------------------------------------------------------------------

/// The largest CPU cache (the last level), from /sys/devices/system/cpu/cpu0/cache/index*/size; 32 MiB
/// when sysfs does not say (`source` tells which).
struct CacheInfo {
  std::uint64_t bytes = 0;
  int level = 0;  ///< 0 when unknown
  std::string source;
};
CacheInfo last_level_cache();

/// Online logical CPUs (sysconf(_SC_NPROCESSORS_ONLN)), at least 1.
int online_cpus();
/// The thread counts to measure: `requested` sorted and without repeats, or 1 .. online_cpus() when it is
/// empty. UserError (naming --threads) for a count outside 1 .. online_cpus().
std::vector<int> resolve_thread_counts(const std::vector<int>& requested);
/// Installed memory: sysconf(_SC_PHYS_PAGES) × page size.
std::uint64_t physical_memory_bytes();
/// Memory available to a new allocation now: /proc/meminfo MemAvailable, else sysconf(_SC_AVPHYS_PAGES).
std::uint64_t available_memory_bytes();

// ---- STREAM ------------------------------------------------------------------------------------------

enum class StreamKernel { Copy, Scale, Add, Triad };
inline constexpr StreamKernel kStreamKernels[] = {StreamKernel::Copy, StreamKernel::Scale, StreamKernel::Add,
                                                  StreamKernel::Triad};
const char* stream_kernel_name(StreamKernel k);  ///< "copy", "scale", "add", "triad"
/// Arrays a kernel touches per pass, as STREAM counts them: 2 for copy and scale, 3 for add and triad.
int stream_arrays(StreamKernel k);
/// Bytes one pass over arrays of `elements` doubles moves: stream_arrays(k) × 8 × elements.
double stream_bytes(StreamKernel k, std::uint64_t elements);

struct MemoryOptions {
  std::vector<int> threads;       ///< thread counts to run; empty: 1 .. online_cpus()
  std::uint64_t array_bytes = 0;  ///< bytes of EACH array; 0: max(4 × last-level cache, 64 MiB)
  int repeats = 5;                ///< timed passes per thread count (the best counts), after 1 warm-up
  double max_seconds = 30;        ///< repeats are trimmed (to at least 1) to stay near this budget
  bool validate = true;           ///< check the arrays' final values as stream.c does
};

/// One kernel at one thread count: the time of every timed pass.
struct StreamSample {
  StreamKernel kernel = StreamKernel::Triad;
  int threads = 1;
  double bytes = 0;  ///< per pass, stream_bytes()
  std::vector<double> seconds;
  [[nodiscard]] double best_seconds() const;
  [[nodiscard]] double mean_seconds() const;
  [[nodiscard]] double bandwidth() const { return bytes / best_seconds(); }  ///< bytes/s of the best pass
};

struct MemoryResult {
  std::uint64_t array_bytes = 0;  ///< per array
  std::uint64_t elements = 0;     ///< doubles per array
  CacheInfo llc;
  std::uint64_t physical_memory = 0;
  int repeats = 0;  ///< timed passes requested per thread count (a thread count may have fewer: see notes)
  std::vector<StreamSample> samples;  ///< by thread count, then kernel
  double triad_bandwidth = 0;         ///< best triad over all thread counts, bytes/s
  int triad_threads = 0;              ///< the thread count that reached it
  std::vector<std::string> notes;     ///< trimmed repeats, shrunk arrays
  double seconds = 0;                 ///< wall time of the whole run

  [[nodiscard]] const StreamSample* find(StreamKernel k, int threads) const;
};

/// Runs STREAM for every thread count. UserError when an explicit array_bytes does not fit in the
/// available memory (3 arrays), or a thread count is < 1 or > online_cpus(). Progress is reported with
/// `progress.update()` (fractions 0..1 of this run; the caller may set a phase).
MemoryResult run_memory(const MemoryOptions& options, Progress& progress);

/// devices.memory (installed RAM) and devices.memory_bandwidth (best triad) as profile figures.
nlohmann::json memory_devices_json(const MemoryResult& r, const Provenance& p);
/// The raw data: arrays, cache, every pass's time and bandwidth per kernel and thread count, notes.
nlohmann::json memory_calibration_json(const MemoryResult& r);
/// A node profile of this machine with the memory figures and {"provenance", "memory": calibration}.
nlohmann::json memory_profile_json(const MemoryResult& r, const Provenance& p, const std::string& id);
/// The text report: a table of GB/s per kernel and thread count, and the sustained bandwidth.
void print_memory_report(const MemoryResult& r, std::ostream& out);

}  // namespace moesim::calibrate
