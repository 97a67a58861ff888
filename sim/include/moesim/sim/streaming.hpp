#pragma once
// Expert streaming from storage (issue 6 part 6; seed 004, flash-moe on a MacBook Pro M3 Max): the
// simulators' page cache. The read-time formula, its calibration and its parameters are the cost model's
// (moesim/model/expert_streaming.hpp); this header adds the OS page cache as an LRU that a routing trace
// is replayed through, and the overlapped mode's bandwidth sharing.

#include <cstdint>
#include <span>
#include <vector>

#include "moesim/model/expert_streaming.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/units.hpp"
#include "moesim/sim/event_core.hpp"

namespace moesim::sim {

using cost::read_seconds;
using cost::streaming_params;
using cost::StreamingParams;
using cost::validate_streaming_params;

/// One load() call: its read time and what the page cache did.
struct LayerIo {
  SimTime time{};           ///< read time of the call (the formula in this header's comment)
  std::int32_t hits = 0;    ///< distinct experts found in the page cache
  std::int32_t misses = 0;  ///< distinct experts read from the SSD
  double bytes_read = 0;    ///< bytes from the SSD (misses × expert bytes): DMA writes into memory
  double bytes_copied = 0;  ///< bytes copied page cache -> GPU buffer ((hits + misses) × expert bytes)
};

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
