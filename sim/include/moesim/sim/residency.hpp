#pragma once
// Weight residency: the Metal driver's wiring of GPU memory (seed 000 §3.2, "driver processing").
//
// A weight buffer idle for longer than `unwire_after` is unwired; the next kernel that touches it waits
// while the driver wires it again, which costs `per_buffer` + bytes / `bandwidth` (TARGETS.md §1 has the
// measured facts; the node profile's "residency" object holds the figures with their sources). The driver
// unwires lazily, so "idle longer than the timeout when touched" is the whole rule: no events are needed.
// Packing decides what a buffer is: unstacked, one per weight matrix (3 per expert and layer);
// prestacked, one per expert holding all its layers (seed 000 §4.1), so touching an expert in any layer
// keeps all its layers wired, and re-wiring it costs all of them at once.

#include <cstdint>
#include <vector>

#include "moesim/sim/event_core.hpp"

namespace moesim::sim {

struct ResidencyParams {
  SimTime unwire_after{};
  SimTime per_buffer{};
  double bytes_per_ps = 0;  ///< re-wire bandwidth, bytes per picosecond
};

class WeightResidency {
 public:
  /// `buffers` records per node, all wired at t = 0 when `start_wired`, else all cold.
  WeightResidency(ResidencyParams params, std::int32_t nodes, std::size_t buffers, bool start_wired);

  /// A kernel on `node` starts using record `buffer` (made of `count` driver buffers totalling `bytes`)
  /// at `at`. Returns the re-wire time it waits first (0 when wired and touched recently). Inline: the
  /// decode engine asks once per expert and layer, and the answer is nearly always 0.
  SimTime acquire(std::int32_t node, std::size_t buffer, SimTime at, std::int32_t count, double bytes) {
    const SimTime last = last_use_[index(node, buffer)];
    if (last >= SimTime{} && at - last <= params_.unwire_after) return SimTime{};
    return rewire(count, bytes);
  }
  /// The kernel using `buffer` finished at `end`: the idle clock restarts.
  void release(std::int32_t node, std::size_t buffer, SimTime end) { last_use_[index(node, buffer)] = end; }

  [[nodiscard]] std::int64_t rewires() const { return rewires_; }

 private:
  [[nodiscard]] std::size_t index(std::int32_t node, std::size_t buffer) const {
    return static_cast<std::size_t>(node) * buffers_ + buffer;
  }
  SimTime rewire(std::int32_t count, double bytes);  ///< counts a re-wire and returns its time
  ResidencyParams params_;
  std::size_t buffers_;
  std::vector<SimTime> last_use_;  ///< -1: never wired
  std::int64_t rewires_ = 0;
};

}  // namespace moesim::sim
