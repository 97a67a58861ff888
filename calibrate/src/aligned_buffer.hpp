// Page-aligned scratch memory for the microbenchmarks (the kernel benchmark's weight pool, the storage
// benchmark's O_DIRECT read buffers): asked of the machine's memory budget first, freed with std::free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;

/// At least `bytes` (rounded up to whole `align` blocks, one at least), aligned to `align` (a power of
/// two). Asks require_memory() first: with overcommit, an aligned_alloc of more than the machine has may
/// succeed and the fill that follows end in the kernel's out-of-memory kill. `what` names the buffer and
/// `fix` says how to ask for less, for the error.
inline AlignedBuffer aligned_buffer(std::uint64_t bytes, std::uint64_t align, const std::string& what,
                                    const std::string& fix) {
  const std::uint64_t rounded = (std::max<std::uint64_t>(bytes, align) + align - 1) / align * align;
  const auto size = units::bytes(static_cast<double>(rounded));
  model::require_memory(size, what, fix);
  void* p = std::aligned_alloc(static_cast<std::size_t>(align), static_cast<std::size_t>(rounded));
  if (!p) throw UserError("could not allocate " + units::format_binary(size) + " for " + what + "; " + fix);
  return AlignedBuffer(static_cast<std::byte*>(p));
}

}  // namespace moesim::calibrate
