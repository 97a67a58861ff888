#include "moesim/sim/streaming.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "moesim/model/error.hpp"

namespace moesim::sim {

namespace {

SimTime seconds_to_sim(double s) {
  MOESIM_CHECK(s >= 0 && std::isfinite(s), "a streaming time is negative or not finite: " + std::to_string(s));
  return to_sim_time(units::seconds(s));
}

}  // namespace

ExpertStreamer::ExpertStreamer(StreamingParams p, std::int64_t layers, std::int64_t experts)
    : p_(p), layers_(layers), experts_(experts) {
  validate_streaming_params(p_);
  MOESIM_CHECK(layers_ >= 1 && experts_ >= 1 && layers_ * experts_ < (std::int64_t{1} << 31),
               "expert streaming over " + std::to_string(layers_) + " layers x " + std::to_string(experts_) +
                   " experts: out of range");
  // All experts have the same size, so a byte capacity is a count: the page cache cannot hold part of an
  // expert usefully (a partly cached file is still a read from the SSD in this model).
  const double fit = std::floor(p_.cache_capacity_bytes / p_.expert_bytes);
  capacity_ = static_cast<std::int64_t>(std::min(fit, static_cast<double>(layers_ * experts_)));
  const auto keys = static_cast<std::size_t>(layers_ * experts_);
  prev_.assign(keys, kNone);
  next_.assign(keys, kNone);
  in_cache_.assign(keys, 0);
}

std::int32_t ExpertStreamer::key(std::int64_t layer, std::int64_t expert) const {
  MOESIM_CHECK(layer >= 0 && layer < layers_, "MoE layer " + std::to_string(layer) + " outside 0.." +
                                                  std::to_string(layers_ - 1) + " of the expert streamer");
  MOESIM_CHECK(expert >= 0 && expert < experts_, "expert " + std::to_string(expert) + " outside 0.." +
                                                     std::to_string(experts_ - 1) + " of the expert streamer");
  return static_cast<std::int32_t>(layer * experts_ + expert);
}

bool ExpertStreamer::contains(std::int64_t layer, std::int64_t expert) const {
  return in_cache_[static_cast<std::size_t>(key(layer, expert))] != 0;
}

void ExpertStreamer::unlink(std::int32_t k) {
  const auto i = static_cast<std::size_t>(k);
  if (prev_[i] != kNone)
    next_[static_cast<std::size_t>(prev_[i])] = next_[i];
  else
    head_ = next_[i];
  if (next_[i] != kNone)
    prev_[static_cast<std::size_t>(next_[i])] = prev_[i];
  else
    tail_ = prev_[i];
  prev_[i] = next_[i] = kNone;
}

void ExpertStreamer::push_front(std::int32_t k) {
  const auto i = static_cast<std::size_t>(k);
  prev_[i] = kNone;
  next_[i] = head_;
  if (head_ != kNone) prev_[static_cast<std::size_t>(head_)] = k;
  head_ = k;
  if (tail_ == kNone) tail_ = k;
}

LayerIo ExpertStreamer::load(std::int64_t layer, std::span<const std::uint16_t> experts) {
  // Distinct keys in the order given: a batch that chose an expert twice reads it once (K is small, so a
  // linear scan beats a set).
  call_.clear();
  for (const std::uint16_t e : experts) {
    const std::int32_t k = key(layer, e);
    if (std::find(call_.begin(), call_.end(), k) == call_.end()) call_.push_back(k);
  }
  LayerIo io;
  // Hits first: the page cache serves them and they become the most recent, so this call's misses cannot
  // evict them unless the cache holds fewer experts than one call reads (then a hit may be evicted by a
  // later miss of the same call; it stays a hit, its bytes were already copied out).
  misses_now_.clear();
  for (const std::int32_t k : call_) {
    if (in_cache_[static_cast<std::size_t>(k)] == 0) {
      misses_now_.push_back(k);
      continue;
    }
    ++io.hits;
    unlink(k);
    push_front(k);
  }
  // Then the misses, in the order given, each evicting the least recently used expert when full.
  for (const std::int32_t k : misses_now_) {
    ++io.misses;
    if (capacity_ == 0) continue;  // nothing is kept: the next read of it misses again
    if (size_ == capacity_) {
      const std::int32_t victim = tail_;
      MOESIM_CHECK(victim != kNone, "a full page cache with no least recently used expert");
      unlink(victim);
      in_cache_[static_cast<std::size_t>(victim)] = 0;
      --size_;
    }
    push_front(k);
    in_cache_[static_cast<std::size_t>(k)] = 1;
    ++size_;
  }
  hits_ += io.hits;
  misses_ += io.misses;
  io.bytes_read = static_cast<double>(io.misses) * p_.expert_bytes;
  io.bytes_copied = static_cast<double>(call_.size()) * p_.expert_bytes;
  io.time = seconds_to_sim(read_seconds(p_, io.hits, io.misses));
  return io;
}

double ExpertStreamer::hit_rate() const {
  const std::int64_t n = hits_ + misses_;
  return n == 0 ? 0.0 : static_cast<double>(hits_) / static_cast<double>(n);
}

SimTime overlapped_time(SimTime gpu, double gpu_bytes, const LayerIo& io, double memory_bytes_per_s) {
  MOESIM_CHECK(gpu >= SimTime{} && io.time >= SimTime{} && gpu_bytes >= 0, "negative time or bytes in overlapped_time");
  MOESIM_CHECK(memory_bytes_per_s > 0, "overlapped_time needs a positive memory bandwidth");
  const double io_s = to_seconds(io.time);
  // The reads' memory traffic: the SSD's DMA writes into the page cache, and the copy out of it, which
  // reads and writes every expert (seed 004: "SSD DMA + GPU share memory controller").
  const double io_bytes = io.bytes_read + 2.0 * io.bytes_copied;
  const double bw = memory_bytes_per_s;
  double t_mem = gpu_bytes / bw;  // no reads: the GPU has the controller to itself
  if (io_bytes > 0 && io_s > 0) {
    // Fluid sharing: while the reads run (0..io_s) they take io_bytes / io_s of the controller and the GPU
    // moves (bw - rate) per second; afterwards it has all of bw. Bytes the GPU can move by t:
    //   t <= io_s: (bw - rate) t;   t > io_s: bw t - io_bytes.   t_mem is where that reaches gpu_bytes.
    const double rate = std::min(io_bytes / io_s, bw);
    const double during = (bw - rate) * io_s;  // GPU bytes possible before the reads finish
    t_mem = gpu_bytes <= during && rate < bw ? gpu_bytes / (bw - rate) : (gpu_bytes + rate * io_s) / bw;
  }
  const double gpu_s = std::max(to_seconds(gpu), t_mem);
  // The phase ends when both the GPU work and the reads are done.
  return std::max(seconds_to_sim(gpu_s), io.time);
}

}  // namespace moesim::sim
