#pragma once
// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014;
// constants of Vigna's splitmix64.c, https://prng.di.unimi.it/splitmix64.c): small, fast, passes BigCrush,
// and the same bits on every platform. The one copy of its output function and of its sequential
// generator: the workload's and the trace generator's counter-based draws (sim/src/det_random.hpp) and
// the reference decoder's synthetic weights (calibrate/reference/src/checkpoint_write.cpp) use these.

#include <cstdint>

namespace moesim::sim {

/// splitmix64's increment: 2^64 / φ, odd.
inline constexpr std::uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ULL;

/// splitmix64's output function: a bijection of 64-bit words whose every output bit depends on every input bit.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// The sequential generator: next() is the mix of seed + n × gamma for n = 1, 2, ...
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) : state_(seed) {}
  constexpr std::uint64_t next() { return splitmix64_mix(state_ += kSplitMixGamma); }

 private:
  std::uint64_t state_;
};

}  // namespace moesim::sim
