// STREAM (McCalpin 1995; stream.c v5.10) with std::threads: see memory.hpp for what is measured and how
// bytes are counted, calibrate/BENCH.md for the method.

#include "moesim/calibrate/memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>

#include "moesim/calibrate/efficiency.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::calibrate {

namespace {

using Clock = std::chrono::steady_clock;

using units::kMiB;

/// "266240K" -> bytes (sysfs cache sizes are written with a K, M or G suffix meaning KiB, MiB, GiB).
std::uint64_t parse_sysfs_size(const std::string& s) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string suffix = s.substr(used);
  if (suffix.empty()) return v;
  switch (suffix[0]) {
    case 'K':
      return v * 1024ull;
    case 'M':
      return v * kMiB;
    case 'G':
      return v * 1024ull * kMiB;
    default:
      return 0;
  }
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// A team of `n` threads that run one job together, started and joined by two barriers per job: the
/// parallel region of stream.c's OpenMP loops.
class Team {
 public:
  explicit Team(int n) : start_(n + 1), end_(n + 1) {
    workers_.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;
  ~Team() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : workers_) t.join();
  }

  /// Runs job(i) on every thread i; returns the seconds from the release of the team to the last finish.
  double run(const std::function<void(int)>& job) {
    job_ = &job;
    const auto t0 = Clock::now();
    start_.arrive_and_wait();
    end_.arrive_and_wait();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  void loop(int i) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      (*job_)(i);
      end_.arrive_and_wait();
    }
  }

  std::barrier<> start_;
  std::barrier<> end_;
  const std::function<void(int)>* job_ = nullptr;
  bool stop_ = false;  // written before the start barrier, read after it: the barrier orders them
  std::vector<std::thread> workers_;
};

}  // namespace

// ---- this machine ------------------------------------------------------------------------------------

CacheInfo last_level_cache() {
  CacheInfo best;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string size = read_line(dir + "size");
    if (size.empty()) continue;
    const std::string type = read_line(dir + "type");
    if (type == "Instruction") continue;
    const std::uint64_t bytes = parse_sysfs_size(size);
    int level = 0;
    try {
      level = std::stoi(read_line(dir + "level"));
    } catch (const std::exception&) {
      level = 0;
    }
    if (bytes > 0 && (level > best.level || (level == best.level && bytes > best.bytes))) {
      best.bytes = bytes;
      best.level = level;
      best.source = dir + "size (" + size + ")";
    }
  }
  if (best.bytes == 0) {
    best.bytes = 32 * kMiB;
    best.level = 0;
    best.source = "not found in /sys/devices/system/cpu/cpu0/cache; assumed 32 MiB";
  }
  return best;
}

int online_cpus() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : static_cast<int>(n);
}

std::vector<int> resolve_thread_counts(const std::vector<int>& requested) {
  const int cpus = online_cpus();
  std::vector<int> threads = requested;
  if (threads.empty()) {
    for (int t = 1; t <= cpus; ++t) threads.push_back(t);
  }
  for (const int t : threads) {
    if (t < 1 || t > cpus) {
      throw UserError("--threads: " + std::to_string(t) + " is outside 1.." + std::to_string(cpus) +
                      " (this machine's online CPUs); give thread counts between 1 and " + std::to_string(cpus));
    }
  }
  std::sort(threads.begin(), threads.end());
  threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
  return threads;
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

std::uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  unsigned long long kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024ull;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

// ---- STREAM ------------------------------------------------------------------------------------------

const char* stream_kernel_name(StreamKernel k) {
  switch (k) {
    case StreamKernel::Copy:
      return "copy";
    case StreamKernel::Scale:
      return "scale";
    case StreamKernel::Add:
      return "add";
    case StreamKernel::Triad:
      return "triad";
  }
  return "?";
}

int stream_arrays(StreamKernel k) {
  // stream.c's bytes[] = {2, 2, 3, 3} * sizeof(STREAM_TYPE) * STREAM_ARRAY_SIZE.
  return k == StreamKernel::Copy || k == StreamKernel::Scale ? 2 : 3;
}

double stream_bytes(StreamKernel k, std::uint64_t elements) {
  return static_cast<double>(stream_arrays(k)) * static_cast<double>(sizeof(double)) * static_cast<double>(elements);
}

double StreamSample::best_seconds() const {
  MOESIM_CHECK(!seconds.empty(), "a STREAM sample without timed passes");
  return *std::min_element(seconds.begin(), seconds.end());
}

double StreamSample::mean_seconds() const {
  MOESIM_CHECK(!seconds.empty(), "a STREAM sample without timed passes");
  return std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
}

const StreamSample* MemoryResult::find(StreamKernel k, int threads) const {
  for (const auto& s : samples) {
    if (s.kernel == k && s.threads == threads) return &s;
  }
  return nullptr;
}

MemoryResult run_memory(const MemoryOptions& options, Progress& progress) {
  const auto t_start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t_start).count(); };
  MemoryResult r;
  r.llc = last_level_cache();
  r.physical_memory = physical_memory_bytes();
  r.repeats = std::max(1, options.repeats);

  const std::vector<int> threads = resolve_thread_counts(options.threads);

  // Array size: STREAM's rule is each array >= 4 × the last-level cache (stream.c, "STREAM_ARRAY_SIZE").
  std::uint64_t array_bytes = options.array_bytes;
  const std::uint64_t avail = available_memory_bytes();
  const std::uint64_t fits = avail > 0 ? static_cast<std::uint64_t>(0.6 * static_cast<double>(avail)) / 3 : 0;
  if (array_bytes == 0) {
    array_bytes = std::max<std::uint64_t>(4 * r.llc.bytes, 64 * kMiB);
    if (fits > 0 && array_bytes > fits) {
      r.notes.push_back("arrays shrunk from " + units::format_binary(units::bytes(static_cast<double>(array_bytes))) +
                        " to " + units::format_binary(units::bytes(static_cast<double>(fits))) +
                        " each to fit 60% of the available memory; STREAM asks for 4 x the last-level cache");
      array_bytes = fits;
    }
  } else if (fits > 0 && array_bytes > fits) {
    throw UserError("--array-size " + units::format_binary(units::bytes(static_cast<double>(array_bytes))) +
                    " per array (3 arrays) does not fit in 60% of the " +
                    units::format_binary(units::bytes(static_cast<double>(avail))) +
                    " of available memory; give at most " +
                    units::format_binary(units::bytes(static_cast<double>(fits))));
  }
  r.elements = std::max<std::uint64_t>(array_bytes / sizeof(double), static_cast<std::uint64_t>(threads.back()));
  r.array_bytes = r.elements * sizeof(double);
  if (r.array_bytes < 4 * r.llc.bytes) {
    r.notes.push_back("each array (" + units::format_binary(units::bytes(static_cast<double>(r.array_bytes))) +
                      ") is smaller than 4 x the last-level cache (" +
                      units::format_binary(units::bytes(static_cast<double>(r.llc.bytes))) +
                      "): part of the traffic may be served by the cache, so the figures can exceed the DRAM "
                      "bandwidth");
  }

  const double q = 3.0;  // stream.c's scalar
  const std::size_t n = static_cast<std::size_t>(r.elements);
  for (std::size_t ti = 0; ti < threads.size(); ++ti) {
    const int nt = threads[ti];
    const double base = static_cast<double>(ti) / static_cast<double>(threads.size());
    const double width = 1.0 / static_cast<double>(threads.size());
    progress.update(base, "STREAM: first touch of 3 arrays of " +
                              units::format_binary(units::bytes(static_cast<double>(r.array_bytes))) + ", " +
                              std::to_string(nt) + (nt == 1 ? " thread" : " threads"));
    // Uninitialised allocations: no page is touched until the owning thread writes it.
    std::unique_ptr<double[]> a(new double[n]);
    std::unique_ptr<double[]> b(new double[n]);
    std::unique_ptr<double[]> c(new double[n]);
    double* pa = a.get();
    double* pb = b.get();
    double* pc = c.get();
    Team team(nt);
    const auto lo = [&](int i) { return n * static_cast<std::size_t>(i) / static_cast<std::size_t>(nt); };
    const auto hi = [&](int i) { return n * static_cast<std::size_t>(i + 1) / static_cast<std::size_t>(nt); };
    // stream.c initialises a = 1, b = 2, c = 0 in a parallel loop with the same static schedule.
    team.run([&](int i) {
      for (std::size_t j = lo(i); j < hi(i); ++j) {
        pa[j] = 1.0;
        pb[j] = 2.0;
        pc[j] = 0.0;
      }
    });
    const std::function<void(int)> jobs[4] = {
        [&](int i) {
          for (std::size_t j = lo(i); j < hi(i); ++j) pc[j] = pa[j];
        },
        [&](int i) {
          for (std::size_t j = lo(i); j < hi(i); ++j) pb[j] = q * pc[j];
        },
        [&](int i) {
          for (std::size_t j = lo(i); j < hi(i); ++j) pc[j] = pa[j] + pb[j];
        },
        [&](int i) {
          for (std::size_t j = lo(i); j < hi(i); ++j) pa[j] = pb[j] + q * pc[j];
        },
    };
    std::vector<StreamSample> local;
    for (const auto k : kStreamKernels) {
      StreamSample s;
      s.kernel = k;
      s.threads = nt;
      s.bytes = stream_bytes(k, r.elements);
      local.push_back(s);
    }
    int passes = 0;
    const auto one_pass = [&](bool timed) {
      double total = 0;
      for (std::size_t k = 0; k < 4; ++k) {
        const double t = team.run(jobs[k]);
        total += t;
        if (timed) local[k].seconds.push_back(t);
      }
      ++passes;
      return total;
    };
    // Warm-up (STREAM drops its first iteration), which also tells how long a pass takes.
    progress.update(base + 0.1 * width, "STREAM warm-up, " + std::to_string(nt) + (nt == 1 ? " thread" : " threads"));
    const double pass_seconds = one_pass(false);
    const double budget = (options.max_seconds - elapsed()) / static_cast<double>(threads.size() - ti);
    int reps = r.repeats;
    if (pass_seconds * reps > budget) {
      reps = std::max(1, static_cast<int>(budget / pass_seconds));
      if (reps < r.repeats) {
        r.notes.push_back(std::to_string(nt) + (nt == 1 ? " thread" : " threads") + ": " + std::to_string(reps) +
                          " timed passes instead of " + std::to_string(r.repeats) + " to stay within " +
                          text::printf("%.0f", options.max_seconds) + " s (one pass of the 4 kernels takes " +
                          text::printf("%.2f", pass_seconds) + " s)");
      }
    }
    for (int rep = 0; rep < reps; ++rep) {
      progress.update(base + width * (0.1 + 0.9 * rep / reps), "STREAM pass " + std::to_string(rep + 1) + "/" +
                                                                   std::to_string(reps) + ", " + std::to_string(nt) +
                                                                   (nt == 1 ? " thread" : " threads"));
      one_pass(true);
    }
    if (options.validate) {
      // stream.c checkSTREAMresults(): replay the kernels on scalars and compare (relative error 1e-13).
      double ea = 1.0, eb = 2.0, ec = 0.0;
      for (int p = 0; p < passes; ++p) {
        ec = ea;
        eb = q * ec;
        ec = ea + eb;
        ea = eb + q * ec;
      }
      const std::size_t step = std::max<std::size_t>(1, n / 4096);
      for (std::size_t j = 0; j < n; j += step) {
        MOESIM_CHECK(std::fabs(pa[j] - ea) <= 1e-13 * std::fabs(ea) && std::fabs(pb[j] - eb) <= 1e-13 * std::fabs(eb) &&
                         std::fabs(pc[j] - ec) <= 1e-13 * std::fabs(ec),
                     "STREAM validation failed at element " + std::to_string(j));
      }
    }
    for (auto& s : local) r.samples.push_back(std::move(s));
  }
  for (const auto& s : r.samples) {
    if (s.kernel == StreamKernel::Triad && s.bandwidth() > r.triad_bandwidth) {
      r.triad_bandwidth = s.bandwidth();
      r.triad_threads = s.threads;
    }
  }
  r.seconds = elapsed();
  progress.update(1.0, "STREAM done");
  return r;
}

nlohmann::json memory_devices_json(const MemoryResult& r, const Provenance& p) {
  using units::Dimension;
  const StreamSample* triad = r.find(StreamKernel::Triad, r.triad_threads);
  MOESIM_CHECK(triad != nullptr, "no triad sample");
  const std::string how = "STREAM triad (McCalpin), best of " + std::to_string(triad->seconds.size()) + " passes at " +
                          std::to_string(r.triad_threads) + (r.triad_threads == 1 ? " thread" : " threads") +
                          " over 3 arrays of " + units::format_binary(units::bytes(static_cast<double>(r.array_bytes)));
  return {{"memory", figure_json(static_cast<double>(r.physical_memory), Dimension::Bytes,
                                 measured_source(p, "installed memory (sysconf _SC_PHYS_PAGES x page size)"))},
          {"memory_bandwidth",
           figure_json(r.triad_bandwidth, Dimension::Bandwidth, measured_source(p, how),
                       "sustained bandwidth: 24 B per element (read b, c; write a), write-allocate traffic not "
                       "counted, as stream.c counts it")}};
}

nlohmann::json memory_calibration_json(const MemoryResult& r) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : r.samples) {
    samples.push_back({{"kernel", stream_kernel_name(s.kernel)},
                       {"threads", s.threads},
                       {"bytes_per_pass", quantity(s.bytes, "B")},
                       {"seconds", s.seconds},
                       {"best", quantity(s.best_seconds(), "s")},
                       {"mean", quantity(s.mean_seconds(), "s")},
                       {"bandwidth", quantity(s.bandwidth(), "B/s")},
                       {"mean_bandwidth", quantity(s.bytes / s.mean_seconds(), "B/s")}});
  }
  return {
      {"benchmark",
       "STREAM copy/scale/add/triad (McCalpin 1995, stream.c v5.10 rules: best of the timed passes after a "
       "warm-up; bytes = 2 or 3 arrays x 8 B x elements)"},
      {"array_bytes", quantity(static_cast<double>(r.array_bytes), "B")},
      {"elements", r.elements},
      {"last_level_cache",
       {{"bytes", quantity(static_cast<double>(r.llc.bytes), "B")}, {"level", r.llc.level}, {"source", r.llc.source}}},
      {"repeats", r.repeats},
      {"samples", samples},
      {"triad", {{"bandwidth", quantity(r.triad_bandwidth, "B/s")}, {"threads", r.triad_threads}}},
      {"notes", r.notes},
      {"wall_time", quantity(r.seconds, "s")}};
}

nlohmann::json memory_profile_json(const MemoryResult& r, const Provenance& p, const std::string& id) {
  nlohmann::json devices = memory_devices_json(r, p);
  devices["name"] = p.cpu_model + " (" + std::to_string(p.cores) + " CPUs)";
  nlohmann::json calibration = {{"provenance", to_json(p)}, {"memory", memory_calibration_json(r)}};
  return node_profile_json(id, "This machine (" + p.host + "), measured by moesim calibrate memory", devices,
                           calibration,
                           "The CPU is the one device. memory_bandwidth is the best STREAM triad. peak_flops and "
                           "efficiency are not measured by `calibrate memory`: run `moesim calibrate kernels` (or "
                           "`calibrate all`) for them.");
}

void print_memory_report(const MemoryResult& r, std::ostream& out) {
  out << "STREAM (McCalpin): 3 arrays of " << units::format_binary(units::bytes(static_cast<double>(r.array_bytes)))
      << " doubles (last-level cache " << units::format_binary(units::bytes(static_cast<double>(r.llc.bytes)))
      << "), best of " << r.repeats << " timed passes after a warm-up\n";
  scenario::Table t({"threads", "copy GB/s", "scale GB/s", "add GB/s", "triad GB/s", "triad mean GB/s"});
  std::vector<int> threads;
  for (const auto& s : r.samples) {
    if (std::find(threads.begin(), threads.end(), s.threads) == threads.end()) threads.push_back(s.threads);
  }
  for (const int nt : threads) {
    std::vector<std::string> row{std::to_string(nt)};
    for (const auto k : kStreamKernels) {
      const auto* s = r.find(k, nt);
      row.push_back(s ? text::printf("%.2f", s->bandwidth() / 1e9) : "-");
    }
    const auto* tr = r.find(StreamKernel::Triad, nt);
    row.push_back(tr ? text::printf("%.2f", tr->bytes / tr->mean_seconds() / 1e9) : "-");
    t.add_row(row);
  }
  t.print_text(out);
  out << "sustained memory bandwidth (best triad): " << units::format(r.triad_bandwidth, units::Dimension::Bandwidth, 4)
      << " at " << r.triad_threads << (r.triad_threads == 1 ? " thread" : " threads")
      << "; bytes counted as STREAM counts them (copy, scale 16 B per element; add, triad 24 B)\n";
  for (const auto& note : r.notes) out << "note: " << note << "\n";
}

}  // namespace moesim::calibrate
