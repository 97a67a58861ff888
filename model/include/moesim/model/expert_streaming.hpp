#pragma once
// Expert streaming from storage (issue 6 part 6; seed 004, flash-moe on a MacBook Pro M3 Max).
//
// The non-expert weights stay resident; each decode token and MoE layer reads its chosen routed experts
// with N parallel pread() threads. flash-moe keeps no cache of its own: the OS page cache, one LRU over
// all files, serves repeats ("trust the OS": a custom Metal LRU was 38% slower, seed 004 "What NOT to
// try"). sim::ExpertStreamer (sim/streaming.hpp) models exactly that: one LRU keyed by (layer, expert) whose capacity
// is the page cache's bytes, and a per-call read time from the storage profile's figures.
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
// sim::overlapped_time() models the overlap as bandwidth sharing only (see there), which is an optimistic
// bound: it cannot reproduce the measured arbitration loss, which is why serial is the default.

// This header holds the read-time formula and its parameters, which every instrument charges (the
// analytic model at an expected hit rate, the decode and serving simulators through their page-cache
// LRU), and the "streaming" scenario object that names them.

#include <cstdint>
#include <optional>
#include <string>

#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/units.hpp"

namespace moesim::cost {

struct StreamingParams {
  double ssd_bytes_per_s = 0;       ///< storage read_bandwidth, bytes/s (a miss's device transfer)
  double read_latency_s = 0;        ///< per read, seconds (storage read_latency; overlapped over `readers`)
  double cached_bytes_per_s = 0;    ///< a page-cache hit: copy from the page cache into the GPU buffer, bytes/s
  double cache_capacity_bytes = 0;  ///< page-cache capacity for experts, bytes (one LRU over all layers)
  std::int32_t readers = 4;         ///< parallel pread() threads (flash-moe: 4, one per chosen expert)
  double expert_bytes = 0;          ///< bytes of one routed expert in one layer (model::routed_expert_bytes)
  /// false: serial GPU -> SSD -> GPU (flash-moe's default); true: I/O overlaps GPU work but takes memory
  /// bandwidth from it (sim::overlapped_time()).
  bool overlapped = false;
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
/// `misses` from the SSD (the formula in this header's comment). 0 for an empty call. The counts may be
/// fractional: the analytic model charges expected counts (expected_hit_rate()), and the formula is
/// linear in them for a given call size n = hits + misses.
double read_seconds(const StreamingParams& p, double hits, double misses);

/// The page cache's hit rate the analytic model assumes: an LRU holding C of the model's `moe_layers` ×
/// `experts` routed experts, under routing that picks every expert equally often and independently, hits
/// with probability min(1, C / (moe_layers × experts)) (the independent-reference model; an LRU and a
/// random cache of C items then both hold a uniformly random C-subset). Real routing is skewed and reuses
/// experts from token to token (seed 004 measured ~71% where this gives 16% for Qwen3.5 at q4), so this is
/// a pessimistic (slow) bound; the simulators replay a routing trace through the LRU instead.
double expected_hit_rate(const StreamingParams& p, std::int64_t moe_layers, std::int64_t experts);

/// The "streaming" object of a scenario (serve, simulate, estimate):
///   {"storage": <storage profile id or path>, "readers": N (default 4), "page_cache": "35GB" (default: the
///    profile's), "mode": "serial" | "overlapped" (default serial)}
struct StreamingSpec {
  std::string storage;
  std::int32_t readers = 4;
  std::optional<units::Bytes> page_cache;  ///< overrides the profile's page_cache
  std::string mode = "serial";
};

/// Parses the object at `node` (UserError with the path for unknown keys and bad values).
StreamingSpec streaming_spec_from_json(const json::Node& node);
/// The object that streaming_spec_from_json reads back (resolved inputs of a run).
nlohmann::json streaming_spec_to_json(const StreamingSpec& s);

/// The parameters of `spec` for `arch`'s routed experts at `weights`: loads the storage profile (UserError
/// naming it when absent or missing a field streaming needs), refuses a dense model and an unknown mode.
/// Callers put the spec's origin in front of the message (json::Node::resolving, or the flag's name).
StreamingParams resolve_streaming(const StreamingSpec& spec, const model::Architecture& arch,
                                  const model::Precision& weights);

}  // namespace moesim::cost
