#pragma once
// The network between nodes: one NIC per node (full duplex: an uplink and a downlink of the NIC's
// bandwidth each) on a switch, optionally with a backplane limit.
//
// A message from `from` to `to` of B bytes that is ready at time r:
//   1. the sender's CPU spends `overhead` on it (LogP's o; Culler et al., "LogP", PPoPP 1993). Messages of
//      one sender pay it one after another: the k-th of a burst starts on the wire at r + k·o;
//   2. it is serialised onto the wire as a flow sharing bandwidth with the other flows in progress,
//      max-min fairly over the links it crosses (the sender's uplink, the receiver's downlink, the
//      backplane): progressive filling (Bertsekas & Gallager, "Data Networks", 2nd ed., §6.5.2), the
//      flow-level model SimGrid validates for TCP (Velho et al., ACM TOMACS 23(4), 2013);
//   3. it arrives `latency − overhead` after its last byte left (propagation, switching, receive stack).
// With one message alone on an idle network this is latency + B / bandwidth: the analytic model's
// per-message cost (model/analytic.hpp), so the two agree when nothing is shared.
//
// `contention = false` switches the sharing off: every flow gets the whole bandwidth and sender
// overheads overlap. That is the analytic model's assumption, used by the oracle tests.
//
// The network is passive between events: it keeps one wake-up event in the simulation for the earliest
// of (next flow start, next flow completion, next delivery), and handles everything due at that time in
// one go, so a burst of equal messages costs a few events rather than one per message.

#include <array>
#include <cstdint>
#include <vector>

#include "moesim/model/units.hpp"
#include "moesim/sim/event_core.hpp"

namespace moesim::sim {

struct NetworkConfig {
  std::int32_t nodes = 0;
  units::Bandwidth bandwidth;         ///< per NIC port and direction
  SimTime latency{};                  ///< one-way per-message latency, overhead included
  SimTime overhead{};                 ///< sender CPU time per message (part of latency)
  units::Bandwidth switch_bandwidth;  ///< through the switch backplane; 0: non-blocking
  bool contention = true;             ///< false: flows never share bandwidth and overheads overlap
};

/// Receives delivered messages (called at the delivery time, from inside the network's event).
class MessageSink {
 public:
  virtual ~MessageSink() = default;
  virtual void on_delivered(std::uint64_t tag, std::int32_t from, std::int32_t to) = 0;
};

/// Sees every transfer when it completes (for Chrome traces and NIC statistics).
class TransferObserver {
 public:
  virtual ~TransferObserver() = default;
  /// The flow of `bytes` from `from` to `to` occupied the wire from `start` to `end`.
  virtual void on_transfer(std::int32_t from, std::int32_t to, double bytes, SimTime start, SimTime end) = 0;
};

class Network final : public EventHandler {
 public:
  Network(Simulation& sim, NetworkConfig config, MessageSink* sink);

  /// Queues a message ready to leave `from` at `ready` (>= now). `tag` comes back in on_delivered.
  void send(SimTime ready, std::int32_t from, std::int32_t to, double bytes, std::uint64_t tag);
  /// send() to every other node, in shift order (from+1, from+2, ... mod N) as pairwise all-to-all
  /// implementations do: when every node sends such a burst at once, the i-th messages of all senders
  /// go to distinct receivers, so no downlink gets a burst.
  void send_to_all(SimTime ready, std::int32_t from, double bytes, std::uint64_t tag);

  void set_observer(TransferObserver* o) { observer_ = o; }

  [[nodiscard]] const NetworkConfig& config() const { return config_; }
  [[nodiscard]] std::uint64_t messages() const { return messages_; }
  [[nodiscard]] double bytes_sent(std::int32_t node) const { return bytes_sent_[static_cast<std::size_t>(node)]; }
  /// Time each node's uplink carried at least one flow.
  [[nodiscard]] SimTime uplink_busy(std::int32_t node) const { return up_busy_[static_cast<std::size_t>(node)]; }

  void handle_event(std::uint32_t kind, std::uint64_t arg) override;

  /// The links one flow crosses (indices into a capacity vector), at most three.
  struct FlowLinks {
    std::array<std::int32_t, 3> link;
    std::int32_t count;
  };
  /// Max-min fair rates for flows over links of the given capacities (any unit; rates come out in the
  /// same unit). Exposed for unit tests; the network uses the same routine.
  static std::vector<double> max_min_rates(std::vector<double> capacity, const std::vector<FlowLinks>& flows);

 private:
  struct Message {
    std::int32_t from = 0;
    std::int32_t to = 0;
    double remaining = 0;  ///< bytes not yet on the wire
    double bytes = 0;
    double rate = 0;  ///< bytes per picosecond while active
    SimTime start{};
    SimTime finish{};  ///< when its last byte leaves the wire at the current rate
    std::uint64_t tag = 0;
    std::uint64_t seq = 0;       ///< its place in starts_ among equal start times
    std::uint32_t next = kNone;  ///< the sender's next message waiting to start (contention)
  };
  static constexpr std::uint32_t kNone = 0xFFFFFFFFU;
  /// A sender's messages waiting to start, oldest first: with contention their start times never
  /// decrease (one CPU sends them in turn), so only the oldest needs a place in starts_.
  struct Waiting {
    std::uint32_t head = kNone;
    std::uint32_t tail = kNone;
  };
  struct Timed {
    SimTime time;
    std::uint64_t seq;
    std::uint32_t message;
  };
  using Queue = TimeQueue<Timed>;

  std::uint32_t allocate();  ///< a free message slot (reused; the caller fills it)
  // enqueue(), deliver() and wake_at() are inline (defined in network.cpp, their only user): GCC then
  // inlines them into the per-message loops.
  /// send() without the wake-up.
  inline void enqueue(SimTime ready, std::int32_t from, std::int32_t to, double bytes, std::uint64_t tag);
  void deliver_later(SimTime at, SimTime now, std::uint32_t id);  ///< delivers message `id` at `at`
  void enter_links(const Message& m);
  void leave_links(const Message& m);
  inline void deliver(std::uint32_t id);
  void recompute_rates(SimTime now);
  void set_rate(Message& m, SimTime now, double rate);
  inline void wake_at(SimTime t);

  Simulation& sim_;
  NetworkConfig config_;
  MessageSink* sink_;
  TransferObserver* observer_ = nullptr;
  std::uint32_t handler_ = 0;
  double rate_per_ps_ = 0;  ///< full link rate, bytes per picosecond

  std::vector<Message> messages_store_;
  std::vector<std::uint32_t> free_;
  /// With contention, each sender's oldest waiting message (Waiting); without, the deliveries.
  Queue starts_;
  std::vector<Waiting> waiting_;  ///< per node
  Queue deliveries_;
  std::vector<std::uint32_t> due_now_;  ///< delivered at this instant, after deliveries_'s (deliver_later())
  std::vector<std::uint32_t> active_;   ///< messages whose flow is on the wire
  bool rates_dirty_ = false;
  SimTime last_advance_{};
  SimTime wake_{-1};  ///< time of the pending wake-up event, -1: none
  std::uint64_t seq_ = 0;
  std::vector<SimTime> cpu_free_;  ///< per node: when its CPU is free to send the next message
  std::vector<double> bytes_sent_;
  std::vector<SimTime> up_busy_;
  std::vector<SimTime> up_busy_until_;
  std::vector<std::int32_t> up_flows_;    ///< per node: flows on its uplink now
  std::vector<std::int32_t> down_flows_;  ///< per node: flows on its downlink now
  std::int32_t shared_links_ = 0;         ///< links carrying two flows or more
  std::uint64_t messages_ = 0;

  // Scratch space for recompute_rates(), kept to avoid allocation per event.
  std::vector<double> cap_;
  std::vector<FlowLinks> flows_;
  std::vector<double> rates_;
  std::vector<std::int32_t> count_;
  std::vector<char> frozen_;
  std::vector<std::uint32_t> first_;
  std::vector<std::uint32_t> crossing_;
};

}  // namespace moesim::sim
