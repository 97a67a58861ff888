#pragma once
// The serving simulator's KV cache (internal to sim/src): a pool of blocks of block_size tokens (vLLM's
// PagedAttention blocks) that a sequence's cached tokens grow into and that it gives back when it completes
// or is preempted. Which sequence gives its blocks up when the pool runs dry is the scheduler's decision
// (serving_scheduler.cpp), as in vLLM, where the scheduler preempts and the block manager only allocates.
// Inline: the schedulers call it for every sequence of every step.

#include <cstdint>

namespace moesim::sim::serving_detail {

class KvBlocks {
 public:
  /// A pool of `total` blocks of `block_size` tokens, all free.
  KvBlocks(std::int64_t total, std::int64_t block_size) : block_size_(block_size), total_(total), free_(total) {}

  [[nodiscard]] std::int64_t blocks_for(std::int64_t tokens) const {
    const std::int64_t bs = block_size_;
    return (tokens + bs - 1) / bs;
  }

  [[nodiscard]] std::int64_t total_blocks() const { return total_; }
  [[nodiscard]] std::int64_t free_blocks() const { return free_; }

  /// The fraction of the blocks in use (0 for a pool of none).
  [[nodiscard]] double used() const {
    return total_ > 0 ? 1.0 - static_cast<double>(free_) / static_cast<double>(total_) : 0.0;
  }

  /// Grows a sequence's `held` blocks to hold `tokens` cached tokens; false (and no change) if the cache is
  /// full.
  bool grow(std::int64_t& held, std::int64_t tokens) {
    const std::int64_t need = blocks_for(tokens) - held;
    if (need <= 0) return true;
    if (need > free_) return false;
    free_ -= need;
    held += need;
    return true;
  }

  /// Returns a sequence's `held` blocks to the pool.
  void release(std::int64_t& held) {
    free_ += held;
    held = 0;
  }

 private:
  std::int64_t block_size_ = 1;
  std::int64_t total_ = 0;
  std::int64_t free_ = 0;
};

}  // namespace moesim::sim::serving_detail
