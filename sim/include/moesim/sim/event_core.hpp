#pragma once
// The event core (STYLE.md practice 1, after SST's simulation object and ns-3's (time, uid) order).
//
// A Simulation owns its clock and its event queue; nothing is global, so a sweep runs many side by side.
// Time is an integer number of picoseconds (SimTime): 2^63 ps is 106 days of simulated time, and one
// picosecond resolves a 12 KB message at 200 Gb/s (491 ns) to 1 part in 10^5. Events are ordered by
// (time, sequence number): two events at the same time run in the order they were scheduled, so a run is
// deterministic for a given input and seed.
//
// Events are small plain records {time, seq, handler, kind, arg} dispatched to a registered handler
// through one virtual call: no std::function, no allocation per event (the simulator replays tens of
// millions of them).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "moesim/model/units.hpp"

namespace moesim::sim {

/// Simulated time in picoseconds.
using SimTime = std::int64_t;

inline constexpr SimTime kPicosecondsPerSecond = 1'000'000'000'000;

/// Seconds -> picoseconds, rounded to the nearest picosecond. Durations are never negative here.
SimTime to_sim_time(units::Duration d);
inline double to_seconds(SimTime t) { return static_cast<double>(t) / static_cast<double>(kPicosecondsPerSecond); }

/// A queue of records leaving in (time, seq) order; T has `time` and `seq` members and no two records
/// share both. The simulator's queues are nearly always short and fed nearly in order (a burst of
/// messages, the next wake-up), so a short queue is a vector sorted by (time, seq) from `head_` on: the
/// earliest leaves by moving `head_`, a new record usually goes at the end. Past kShort records it
/// turns into a binary heap, until it is short again. Records leave in the same order either way.
template <class T>
class TimeQueue {
 public:
  [[nodiscard]] bool empty() const { return head_ == v_.size(); }
  [[nodiscard]] const T& top() const { return v_[head_]; }

  void push(const T& x) {
    // The usual case, kept small enough to inline: a short queue, x the latest.
    if (!heap_ && head_ < kShort && v_.size() - head_ < kShort && (empty() || !later(v_.back(), x))) {
      v_.push_back(x);
      return;
    }
    push_slow(x);
  }

  void pop() {
    if (heap_) {
      pop_heap();
    } else {
      ++head_;
    }
  }

 private:
  [[gnu::noinline]] void push_slow(const T& x) {
    if (!heap_ && v_.size() - head_ >= kShort) {
      v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
      std::make_heap(v_.begin(), v_.end(), later);
      heap_ = true;
    }
    if (heap_) {
      v_.push_back(x);
      std::push_heap(v_.begin(), v_.end(), later);
      return;
    }
    // Drop what has left (all of it when the queue is empty), then insert from the end: records later
    // than x move up one place.
    v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
    std::size_t at = v_.size();
    v_.push_back(x);
    for (; at > 0 && later(v_[at - 1], x); --at) v_[at] = v_[at - 1];
    v_[at] = x;
  }

  [[gnu::noinline]] void pop_heap() {
    std::pop_heap(v_.begin(), v_.end(), later);
    v_.pop_back();
    if (v_.size() <= kShort / 4) {  // short again: back to the sorted vector
      std::sort(v_.begin(), v_.end(), [](const T& a, const T& b) { return later(b, a); });
      heap_ = false;
    }
  }

  static constexpr std::size_t kShort = 32;
  static bool later(const T& a, const T& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  std::vector<T> v_;
  std::size_t head_ = 0;  ///< sorted mode: records before it have left
  bool heap_ = false;
};

/// Something that receives events. `kind` and `arg` mean whatever the handler defines.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void handle_event(std::uint32_t kind, std::uint64_t arg) = 0;
};

class Simulation {
 public:
  /// Registers a handler (not owned; it must outlive run()). Returns its id for schedule().
  std::uint32_t add_handler(EventHandler* h);

  /// Schedules an event at absolute time `at` (>= now(); an earlier time is a bug in the caller).
  void schedule(SimTime at, std::uint32_t handler, std::uint32_t kind, std::uint64_t arg = 0);

  /// Runs until no events remain, or until stop() is called. Returns the number of events run.
  std::uint64_t run();
  void stop() { stopped_ = true; }

  [[nodiscard]] SimTime now() const { return now_; }
  [[nodiscard]] std::uint64_t events_run() const { return events_; }
  [[nodiscard]] bool idle() const { return queue_.empty(); }

 private:
  struct Event {
    SimTime time;
    std::uint64_t seq;
    std::uint64_t arg;
    std::uint32_t handler;
    std::uint32_t kind;
  };
  TimeQueue<Event> queue_;
  std::vector<EventHandler*> handlers_;
  SimTime now_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t events_ = 0;
  bool stopped_ = false;
};

}  // namespace moesim::sim
