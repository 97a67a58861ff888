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
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "moesim/model/units.hpp"

namespace moesim::sim {

/// Picoseconds in a second, a millisecond, a microsecond: plain counts, for conversions.
inline constexpr std::int64_t kPicosecondsPerSecond = 1'000'000'000'000;
inline constexpr std::int64_t kPicosecondsPerMillisecond = kPicosecondsPerSecond / 1'000;
inline constexpr std::int64_t kPicosecondsPerMicrosecond = kPicosecondsPerSecond / 1'000'000;

/// Simulated time, or a span of it, in whole picoseconds (after ns-3's Time).
///
/// An integer, so that sums are exact and two events at the same instant compare equal however their
/// times were reached; a double would order them by rounding. An int64 spans 2^63 ps, about 106 days.
/// A class rather than a bare int64, so that a picosecond count cannot be mixed with seconds, bytes or a
/// count by accident: it is made from picoseconds explicitly (SimTime{n}), from seconds by to_sim_time(),
/// and read back by ps() or to_seconds(). Only what the simulators use is defined: sums and differences,
/// scaling by an integer count, comparison. Trivially copyable and the size of an int64, so the event
/// queue moves it as it moved the integer.
class SimTime {
 public:
  constexpr SimTime() = default;  ///< zero
  constexpr explicit SimTime(std::int64_t ps) : ps_(ps) {}
  /// Not from a floating-point number: say how it rounds (to_sim_time(), or a cast after std::ceil).
  template <std::floating_point F>
  SimTime(F) = delete;
  /// The latest time there is: "never" for a search for the earliest event.
  static constexpr SimTime max() { return SimTime{std::numeric_limits<std::int64_t>::max()}; }

  [[nodiscard]] constexpr std::int64_t ps() const { return ps_; }

  constexpr SimTime operator+(SimTime o) const { return SimTime{ps_ + o.ps_}; }
  constexpr SimTime operator-(SimTime o) const { return SimTime{ps_ - o.ps_}; }
  constexpr SimTime& operator+=(SimTime o) {
    ps_ += o.ps_;
    return *this;
  }
  constexpr SimTime& operator-=(SimTime o) {
    ps_ -= o.ps_;
    return *this;
  }
  constexpr SimTime operator*(std::int64_t n) const { return SimTime{ps_ * n}; }
  constexpr SimTime operator/(std::int64_t n) const { return SimTime{ps_ / n}; }  ///< truncated, as int64
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 takes the defaulted <=>'s comparison with 0 for a pointer
  constexpr auto operator<=>(const SimTime&) const = default;

 private:
  std::int64_t ps_ = 0;
};

constexpr SimTime operator*(std::int64_t n, SimTime t) { return t * n; }

/// Seconds -> picoseconds, rounded to the nearest picosecond. Durations are never negative here.
SimTime to_sim_time(units::Duration d);
inline double to_seconds(SimTime t) { return static_cast<double>(t.ps()) / static_cast<double>(kPicosecondsPerSecond); }

/// A queue of records leaving in (time, seq) order; T has `time` and `seq` members and no two records
/// share both. The network's queues are nearly always short and fed nearly in order (a burst of
/// messages, the next delivery), so the queue is kept sorted by (time, seq) in v_[head_, end_): the
/// earliest leaves by moving `head_`, a new record usually goes at the end. A record that must be
/// inserted instead, while kShort or more are queued, turns it into a binary heap in v_[0, end_),
/// until it is short again. Records leave in the same order either way. The common push and pop are
/// small enough to inline; the rest is out of line.
template <class T>
class TimeQueue {
 public:
  [[nodiscard]] bool empty() const { return head_ == end_; }
  [[nodiscard]] const T& top() const { return v_[head_]; }

  void push(const T& x) {
    // However long the sorted form is, an append keeps it sorted.
    if (!heap_ && end_ != cap_ && (head_ == end_ || !later(v_[end_ - 1], x))) {
      v_[end_++] = x;
      return;
    }
    push_slow(x);
  }

  void pop() {
    if (heap_) {
      pop_heap();
    } else if (++head_ == end_) {
      head_ = end_ = 0;
    }
  }

 private:
  static constexpr std::size_t kShort = 32;
  static bool later(const T& a, const T& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  /// later() as a function object, so that the heap algorithms inline it (a function pointer they call).
  struct Later {
    bool operator()(const T& a, const T& b) const { return later(a, b); }
  };
  [[nodiscard]] auto at(std::size_t i) { return v_.begin() + static_cast<std::ptrdiff_t>(i); }

  [[gnu::noinline]] void push_slow(T x) {  // by value, so that push() keeps x in registers
    // Live records to the front, room for one more.
    if (head_ > 0) {
      std::move(at(head_), at(end_), v_.begin());
      end_ -= head_;
      head_ = 0;
    }
    if (end_ == cap_) {
      cap_ = std::max<std::size_t>(16, 2 * cap_);
      v_.resize(cap_);
    }
    if (!heap_ && end_ >= kShort) {
      std::make_heap(v_.begin(), at(end_), Later{});
      heap_ = true;
    }
    if (heap_) {
      v_[end_++] = x;
      std::push_heap(v_.begin(), at(end_), Later{});
      return;
    }
    // Insertion from the end: records later than x move up one place.
    std::size_t i = end_++;
    for (; i > 0 && later(v_[i - 1], x); --i) v_[i] = v_[i - 1];
    v_[i] = x;
  }

  [[gnu::noinline]] void pop_heap() {
    std::pop_heap(v_.begin(), at(end_), Later{});
    --end_;
    if (end_ <= kShort / 4) {  // short again: back to the sorted vector
      std::sort(v_.begin(), at(end_), [](const T& a, const T& b) { return later(b, a); });
      heap_ = false;
    }
  }

  std::vector<T> v_;      ///< storage; records live in [head_, end_)
  std::size_t head_ = 0;  ///< sorted form: records before it have left (0 in the heap form)
  std::size_t end_ = 0;
  std::size_t cap_ = 0;  ///< v_.size()
  bool heap_ = false;
};

/// TimeQueue's interface for a queue that may be long, fed in order with a few latecomers: the
/// simulation's events (the serving simulator schedules every arrival up front, then each batch's end
/// before them). Records in order go to a vector kept sorted by (time, seq) in v_[head_, end_), where
/// the earliest leaves by moving `head_`; a record earlier than the latest goes to a binary heap beside
/// it (side_, usually empty or short), and the earlier of the two fronts leaves first. Checking for
/// side_ costs a little on every top() and pop(), which is why the network's queues, short and busy,
/// are TimeQueues.
template <class T>
class RunQueue {
 public:
  [[nodiscard]] bool empty() const { return head_ == end_ && !side_used_; }
  [[nodiscard]] const T& top() const {
    if (side_used_ && side_first()) [[unlikely]] {
      return side_.front();
    }
    return v_[head_];
  }

  void push(const T& x) {
    if (end_ != cap_ && (head_ == end_ || !later(v_[end_ - 1], x))) {
      v_[end_++] = x;
      return;
    }
    push_slow(x);
  }

  void pop() {
    if (side_used_ && side_first()) [[unlikely]] {
      pop_side();
    } else if (++head_ == end_) {
      head_ = end_ = 0;
    }
  }

 private:
  static bool later(const T& a, const T& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  /// later() as a function object, so that the heap algorithms inline it (a function pointer they call).
  struct Later {
    bool operator()(const T& a, const T& b) const { return later(a, b); }
  };
  [[nodiscard]] auto at(std::size_t i) { return v_.begin() + static_cast<std::ptrdiff_t>(i); }
  /// side_ holds the earliest record (side_used_ is true).
  [[nodiscard]] bool side_first() const { return head_ == end_ || later(v_[head_], side_.front()); }

  [[gnu::noinline]] void push_slow(T x) {  // by value, so that push() keeps x in registers
    // No room at the end: drop what has left, or grow.
    if (end_ == cap_) {
      if (head_ > 0) {
        std::move(at(head_), at(end_), v_.begin());
        end_ -= head_;
        head_ = 0;
      } else {
        cap_ = std::max<std::size_t>(16, 2 * cap_);
        v_.resize(cap_);
      }
      if (head_ == end_ || !later(v_[end_ - 1], x)) {
        v_[end_++] = x;
        return;
      }
    }
    side_.push_back(x);
    std::push_heap(side_.begin(), side_.end(), Later{});
    side_used_ = true;
  }

  [[gnu::noinline]] void pop_side() {
    std::pop_heap(side_.begin(), side_.end(), Later{});
    side_.pop_back();
    side_used_ = !side_.empty();
  }

  std::vector<T> v_;      ///< storage of the sorted records, which live in [head_, end_)
  std::size_t head_ = 0;  ///< records before it have left
  std::size_t end_ = 0;
  std::size_t cap_ = 0;  ///< v_.size()
  std::vector<T> side_;  ///< a binary heap (Later) of records that came earlier than the latest
  bool side_used_ = false;
};

/// Something that receives events. `kind` and `arg` mean whatever the handler defines.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void handle_event(std::uint32_t kind, std::uint64_t arg) = 0;
};

static_assert(std::is_trivially_copyable_v<SimTime> && sizeof(SimTime) == sizeof(std::int64_t));

class Simulation {
 public:
  /// Registers a handler (not owned; it must outlive run()). Returns its id for schedule().
  std::uint32_t add_handler(EventHandler* h);

  /// Schedules an event at absolute time `at` (>= now(); an earlier time is a bug in the caller).
  /// Inline, as the network asks for a wake-up every few messages; the checks' messages are built out
  /// of line.
  void schedule(SimTime at, std::uint32_t handler, std::uint32_t kind, std::uint64_t arg = 0) {
    if (at < now_ || handler >= handlers_.size()) refuse(at, handler);
    queue_.push(Event{at, seq_++, arg, handler, kind});
  }

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
  void refuse(SimTime at, std::uint32_t handler) const;  ///< fails the check that schedule() failed
  RunQueue<Event> queue_;
  std::vector<EventHandler*> handlers_;
  SimTime now_{};
  std::uint64_t seq_ = 0;
  std::uint64_t events_ = 0;
  bool stopped_ = false;
};

}  // namespace moesim::sim
