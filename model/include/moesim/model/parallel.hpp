#pragma once
// One worker pool for the commands that run many independent simulations (sweep's points, validate's rows).

#include <cstddef>
#include <functional>

namespace moesim::model {

/// Runs work(k) for every k in [0, n) on `threads` threads (0: every core; never more than n), each thread
/// taking the next k as it finishes one. `done(d)`, when given, runs after each item with the count finished
/// so far, one call at a time. The first exception a work item throws stops the threads taking more and is
/// rethrown here once all have joined; `stop()`, when given and true after an item, stops them too (the
/// caller sees from its own state what was left undone). Items must not share mutable state unguarded.
void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& work,
                  const std::function<void(std::size_t)>& done = {}, const std::function<bool()>& stop = {});

}  // namespace moesim::model
