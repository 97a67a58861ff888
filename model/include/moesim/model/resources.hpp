#pragma once
// How much memory moesim may use, so that an input too large to hold is refused with a message rather
// than ending in the kernel's out-of-memory kill (issue 8, part 6). Readers that must hold an input in
// memory (routing traces, JSON documents, the reference decoder's f32 weights) ask require_memory() before
// they allocate; checkpoints are memory-mapped and read tensor by tensor, and need no such check.
//
// The budget is the least of:
//   - MemAvailable in /proc/meminfo (Linux's estimate of what can be allocated without swapping;
//     proc(5), "MemAvailable (since Linux 3.14)");
//   - the cgroup v2 limit, memory.max minus memory.current, of the cgroup in /proc/self/cgroup
//     (a container's or a systemd slice's limit; kernel docs, cgroup-v2.rst "memory.max");
//   - RLIMIT_AS and RLIMIT_DATA (getrlimit(2); `ulimit -v` / `ulimit -d`);
// or, when set, the environment variable MOESIM_MEMORY_LIMIT, a quantity with its unit ("8GiB"), for a
// machine shared with other jobs.

#include <string>
#include <string_view>

#include "moesim/model/units.hpp"

namespace moesim::model {

struct MemoryBudget {
  units::Bytes bytes;
  std::string source;  ///< where the figure came from, for messages: "MemAvailable in /proc/meminfo", ...
};

/// The memory this process may still allocate (see the top of this file). UserError if MOESIM_MEMORY_LIMIT
/// is set but is not a size with a unit.
MemoryBudget memory_budget();

/// UserError "<what> needs N in memory, but only M is available (<source>); <fix>" if `needed` exceeds
/// the budget.
void require_memory(units::Bytes needed, std::string_view what, std::string_view fix);

}  // namespace moesim::model
