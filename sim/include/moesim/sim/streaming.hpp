#pragma once
// Expert streaming from storage (issue 6 part 6; seed 004, flash-moe on a MacBook Pro M3 Max).
//
// The non-expert weights stay resident; each decode token and MoE layer reads its chosen routed experts
// with N parallel pread() threads. flash-moe keeps no cache of its own: the OS page cache, one LRU over
// all files, serves repeats ("trust the OS": a custom Metal LRU was 38% slower, seed 004 "What NOT to
// try"). ExpertStreamer models exactly that: one LRU keyed by (layer, expert) whose capacity is the page
// cache's bytes, and a per-call read time from the storage profile's figures.
//
// Read time of one call with h page-cache hits and m misses (n = h + m distinct experts of s bytes):
//
//     t = m * L / c  +  m * s / B_ssd  +  n * s / B_cached,        c = min(N, n)
//
//  - A miss goes SSD -> page cache (DMA at the SSD's read bandwidth B_ssd) -> the GPU-visible buffer (the
//    copy pread() does out of the page cache, at B_cached); a hit is only that copy. So every expert pays
//    the copy and a miss pays the device transfer and a per-read latency L on top.
//  - The transfers share the device and the copy path, so their times add: parallel readers do not
//    multiply bandwidth. Seed 004 says so: 4 experts take 1.0 ms warm and 5.8 ms cold, and 2.4 ms at the
//    observed ~71% hit rate, which is the hit-weighted mean 0.71 * 1.0 + 0.29 * 5.8 = 2.39 ms
//    (TARGETS.md §6). A model where every call waits for its slowest read (any miss costs a full L)
//    would give ~3.8 ms there instead.
//  - What the N readers buy is overlap of the per-read latency: up to N reads are in flight at once, so
//    in throughput terms each miss holds the call for L / c. A call of one read cannot overlap anything
//    (c = 1); flash-moe's K = 4 calls with 4 readers have c = 4.
// Calibration (hwprofiles/storage/apple-ssd-m3-max.json records it): B_ssd = 17.5 GB/s, flash-moe's
// measured sequential read. Warm, 4 hits of 7,077,888 B in 1.0 ms: B_cached = 4 s / 1.0 ms = 28.3 GB/s.
// Cold, 4 misses with 4 readers in 5.8 ms: L = 5.8 ms - 4 s / B_ssd - 4 s / B_cached = 3.18 ms. That L is
// an effective per-read cost of a page-cache-filling pread() on macOS (page allocation, eviction,
// insertion), far above the NVMe device's own latency; it is not a device figure.
//
// Predictions (not fitted), over a 20,000-token trace with flash-moe's published reuse statistics
// (`moesim trace gen --model qwen3.5-397b-a17b --top-k 4 --tokens 20000 --tokens-per-request 60
// --popularity zipf --drift redraw --lru-hit 0.49 --lru-cache 16 --reuse 0.22,0.34 --seed 1`; per-layer
// LRU 48.9/59.0/66.4/71.6% at 16/32/64/128 vs the seed's 49/59/68/71%) and the 35 GB page cache:
//  - q4 (4,944 experts cached, 82 per layer): hit rate 68.2% (seed ~71%), 2.53 ms/layer (seed 2.41).
//  - q2 (8,900 cached, 148 per layer): hit rate 73.1%, 1.65 ms/layer (seed 1.37 ms, ~11.5 GB/s): +21%.
//    The fixed per-read L over-charges the smaller 2-bit reads. Had the cold overhead been charged per
//    byte instead (the same 4-bit calibration), q2 would come out at ~1.27 ms: the seed's figures hint
//    that the page-cache fill costs per byte (pages), not per read. seed 004's 2-bit mode also uses
//    F_NOCACHE, a direct path this model lacks; with capacity 0 every q2 read pays L (4.6 ms/layer).
//
// Serial vs overlapped (StreamingParams::overlapped): flash-moe runs GPU -> SSD -> GPU serially; the layer
// time is GPU + I/O. Overlapping them was a net loss there because SSD DMA and GPU share the memory
// controller (seed 004: "concurrent access: -73% GPU speed", "Parallel SSD + GPU overlap: net negative").
// overlapped_time() models the overlap as bandwidth sharing only (see there), which is an optimistic
// bound: it cannot reproduce the measured arbitration loss, which is why serial is the default.

#include <cstdint>
#include <span>
#include <vector>

#include "moesim/model/hardware.hpp"
#include "moesim/model/units.hpp"
#include "moesim/sim/event_core.hpp"

namespace moesim::sim {

struct StreamingParams {
  double ssd_bytes_per_s = 0;       ///< storage read_bandwidth, bytes/s (a miss's device transfer)
  double read_latency_s = 0;        ///< per read, seconds (storage read_latency; overlapped over `readers`)
  double cached_bytes_per_s = 0;    ///< a page-cache hit: copy from the page cache into the GPU buffer, bytes/s
  double cache_capacity_bytes = 0;  ///< page-cache capacity for experts, bytes (one LRU over all layers)
  std::int32_t readers = 4;         ///< parallel pread() threads (flash-moe: 4, one per chosen expert)
  double expert_bytes = 0;          ///< bytes of one routed expert in one layer (model::routed_expert_bytes)
  /// false: serial GPU -> SSD -> GPU (flash-moe's default); true: I/O overlaps GPU work but takes memory
  /// bandwidth from it (overlapped_time()).
  bool overlapped = false;
};

/// One load() call: its read time and what the page cache did.
struct LayerIo {
  SimTime time = 0;         ///< read time of the call (the formula in this header's comment)
  std::int32_t hits = 0;    ///< distinct experts found in the page cache
  std::int32_t misses = 0;  ///< distinct experts read from the SSD
  double bytes_read = 0;    ///< bytes from the SSD (misses × expert bytes): DMA writes into memory
  double bytes_copied = 0;  ///< bytes copied page cache -> GPU buffer ((hits + misses) × expert bytes)
};

/// UserError (one line, how to fix) for a non-positive bandwidth or expert size, a negative latency or
/// capacity, or fewer than 1 reader.
void validate_streaming_params(const StreamingParams& p);

/// The parameters from a storage profile: read_bandwidth, read_latency, cached_read_bandwidth and
/// page_cache (UserError naming the profile and the missing field if it lacks one), `expert_bytes` of one
/// routed expert, `readers` parallel pread() threads, serial or overlapped.
StreamingParams streaming_params(const model::StorageProfile& storage, units::Bytes expert_bytes,
                                 std::int32_t readers = 4, bool overlapped = false);

/// Read time, in seconds, of one call that finds `hits` distinct experts in the page cache and reads
/// `misses` from the SSD (the formula in this header's comment). 0 for an empty call.
double read_seconds(const StreamingParams& p, std::int64_t hits, std::int64_t misses);

/// The OS page cache as an LRU keyed by (layer, expert), capacity in bytes (all experts have the same
/// size, so it holds floor(capacity / expert_bytes) experts). Starts empty (cold).
class ExpertStreamer {
 public:
  /// `layers` MoE layers of `experts` routed experts each. UserError via validate_streaming_params().
  ExpertStreamer(StreamingParams p, std::int64_t layers, std::int64_t experts);

  /// Reads the DISTINCT experts in `experts` for MoE layer `layer` (duplicates are read once); returns
  /// the read time with N parallel readers and updates the LRU. As the page cache would: the hits are
  /// touched first (most recent), then the misses are inserted in the order given, each evicting the
  /// least recently used expert when the cache is full. Capacity below one expert: every read misses.
  LayerIo load(std::int64_t layer, std::span<const std::uint16_t> experts);

  /// hits / (hits + misses) over all load() calls so far (0 before any), over distinct experts per call.
  [[nodiscard]] double hit_rate() const;
  [[nodiscard]] std::int64_t hits() const { return hits_; }
  [[nodiscard]] std::int64_t misses() const { return misses_; }
  /// Experts the cache holds at most, and holds now.
  [[nodiscard]] std::int64_t capacity_experts() const { return capacity_; }
  [[nodiscard]] std::int64_t cached() const { return size_; }
  /// Whether (layer, expert) is in the page cache now (no LRU update).
  [[nodiscard]] bool contains(std::int64_t layer, std::int64_t expert) const;
  [[nodiscard]] const StreamingParams& params() const { return p_; }

 private:
  static constexpr std::int32_t kNone = -1;
  [[nodiscard]] std::int32_t key(std::int64_t layer, std::int64_t expert) const;
  void unlink(std::int32_t k);
  void push_front(std::int32_t k);

  StreamingParams p_;
  std::int64_t layers_;
  std::int64_t experts_;
  std::int64_t capacity_ = 0;
  std::int64_t size_ = 0;
  // An intrusive doubly linked list over the (layer, expert) keys, most recent at head_: O(1) per touch,
  // insert and eviction, with no allocation after construction (60 layers × 512 experts = 30,720 keys).
  std::vector<std::int32_t> prev_, next_;
  std::vector<std::uint8_t> in_cache_;
  std::int32_t head_ = kNone, tail_ = kNone;
  std::vector<std::int32_t> call_;        ///< scratch: the distinct keys of one call
  std::vector<std::int32_t> misses_now_;  ///< scratch: those not cached at the start of the call
  std::int64_t hits_ = 0, misses_ = 0;
};

/// The wall time of a phase in which GPU work and the reads of `io` run concurrently (overlapped mode),
/// sharing the memory controller of `memory_bytes_per_s`. The GPU phase alone takes `gpu` and moves
/// `gpu_bytes`; the reads put io.bytes_read (SSD DMA into the page cache) + 2 × io.bytes_copied (the copy
/// reads and writes) through the same controller, spread evenly over io.time. Fluid sharing: while the
/// reads run the GPU gets memory_bytes_per_s minus their rate, so its memory-bound time t_mem solves
/// "bytes the GPU can move by t = gpu_bytes"; the GPU phase takes max(gpu, t_mem) and the whole phase
/// max(that, io.time). This is the bandwidth share only (seed 004 measured far worse: -73% GPU speed under
/// concurrent SSD DMA, from arbitration, not bandwidth), so it is an optimistic bound on the overlap.
SimTime overlapped_time(SimTime gpu, double gpu_bytes, const LayerIo& io, double memory_bytes_per_s);

}  // namespace moesim::sim
