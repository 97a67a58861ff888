#include "moesim/sim/network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "moesim/model/error.hpp"

namespace moesim::sim {
namespace {
// A flow is done when less than this many bytes remain: rounding completion times up to whole
// picoseconds leaves at most rate × 1 ps too much, and floating-point error far less than a byte.
constexpr double kDoneBytes = 1e-3;
constexpr std::uint32_t kWake = 0;
}  // namespace

Network::Network(Simulation& sim, NetworkConfig config, MessageSink* sink) : sim_(sim), config_(config), sink_(sink) {
  MOESIM_CHECK(config_.nodes >= 1, "a network needs at least one node");
  MOESIM_CHECK(config_.bandwidth > units::Bandwidth{}, "network bandwidth must be positive (profiles check this)");
  MOESIM_CHECK(config_.overhead <= config_.latency, "overhead is part of latency");
  MOESIM_CHECK(sink_ != nullptr, "a network needs a message sink");
  handler_ = sim_.add_handler(this);
  rate_per_ps_ = config_.bandwidth.base() / static_cast<double>(kPicosecondsPerSecond);
  const auto n = static_cast<std::size_t>(config_.nodes);
  cpu_free_.assign(n, SimTime{});
  bytes_sent_.assign(n, 0);
  up_busy_.assign(n, SimTime{});
  up_busy_until_.assign(n, SimTime{});
  up_flows_.assign(n, 0);
  down_flows_.assign(n, 0);
  waiting_.assign(n, Waiting{});
}

std::uint32_t Network::allocate() {
  if (!free_.empty()) {
    const std::uint32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  messages_store_.emplace_back();
  return static_cast<std::uint32_t>(messages_store_.size() - 1);
}

void Network::send(SimTime ready, std::int32_t from, std::int32_t to, double bytes, std::uint64_t tag) {
  MOESIM_CHECK(ready >= sim_.now(), "a message cannot be ready in the past");
  MOESIM_CHECK(from >= 0 && from < config_.nodes && to >= 0 && to < config_.nodes && from != to,
               "message between invalid nodes");
  MOESIM_CHECK(bytes >= 0, "negative message size");
  enqueue(ready, from, to, bytes, tag);
  wake_at(starts_.top().time);
}

void Network::send_to_all(SimTime ready, std::int32_t from, double bytes, std::uint64_t tag) {
  MOESIM_CHECK(ready >= sim_.now(), "a message cannot be ready in the past");
  MOESIM_CHECK(from >= 0 && from < config_.nodes, "message from an invalid node");
  MOESIM_CHECK(bytes >= 0, "negative message size");
  if (config_.nodes == 1) return;
  for (std::int32_t i = 1, to = from + 1; i < config_.nodes; ++i, ++to) {
    if (to == config_.nodes) to = 0;
    enqueue(ready, from, to, bytes, tag);
  }
  // One wake-up call is the same as one per message: only the first message of the burst can change
  // the queue's earliest start (the others wait behind it, or, without contention, are due no
  // earlier), and wake_at() of an unchanged time does nothing.
  wake_at(starts_.top().time);
}

// Inline (network.hpp) into send() and send_to_all()'s loop: a call per message cost as much as the work.
void Network::enqueue(SimTime ready, std::int32_t from, std::int32_t to, double bytes, std::uint64_t tag) {
  ++messages_;
  bytes_sent_[static_cast<std::size_t>(from)] += bytes;
  SimTime start{};
  if (config_.contention) {
    // The sender's CPU handles its messages one at a time (LogP o).
    auto& cpu = cpu_free_[static_cast<std::size_t>(from)];
    start = std::max(ready, cpu) + config_.overhead;
    cpu = start;
  } else {
    start = ready + config_.overhead;
  }
  const std::uint32_t id = allocate();
  Message& msg = messages_store_[id];
  msg.from = from;
  msg.to = to;
  msg.remaining = bytes;
  msg.bytes = bytes;
  msg.rate = 0;
  msg.finish = SimTime::max();
  msg.start = start;
  msg.tag = tag;
  if (!config_.contention) [[unlikely]] {
    // Alone on the wire: serialisation at the full rate, then the rest of the latency.
    const SimTime wire{static_cast<std::int64_t>(std::ceil(bytes / rate_per_ps_))};
    const SimTime end = start + wire;
    if (observer_) observer_->on_transfer(from, to, bytes, start, end);
    // Without contention a flow's end is fixed when it is sent, and sends are not in time order: this
    // path keeps its own ordered queue (starts_, reused for deliveries).
    starts_.push(Timed{end + config_.latency - config_.overhead, seq_++, id});
    return;
  }
  // Behind the sender's other waiting messages (it starts after them); the first takes a place in
  // starts_ now, the others when the one before them starts (handle_event()).
  msg.seq = seq_++;
  msg.next = kNone;
  Waiting& w = waiting_[static_cast<std::size_t>(from)];
  if (w.head == kNone) {
    w.head = id;
    starts_.push(Timed{start, msg.seq, id});
  } else {
    messages_store_[w.tail].next = id;
  }
  w.tail = id;
}

// Inline (network.hpp): asked after every burst of sends and every wake-up.
void Network::wake_at(SimTime t) {
  // One pending wake-up is enough if it is not later than t. An earlier one supersedes it; the old
  // event still fires and finds nothing due (it is cheap and keeps the queue free of deletions).
  if (wake_ >= sim_.now() && wake_ <= t) return;
  wake_ = t;
  sim_.schedule(t, handler_, kWake, 0);
}

void Network::deliver_later(SimTime at, SimTime now, std::uint32_t id) {
  // Due now (a flow alone on its links completes at its delivery time): handle_event() delivers these
  // after deliveries_'s, which were queued earlier, so the order is still (time, seq) without a round
  // trip through the queue.
  if (at == now) {
    due_now_.push_back(id);
  } else {
    deliveries_.push(Timed{at, seq_++, id});
  }
}

// Inline (network.hpp): handle_event() delivers every message, from three places.
void Network::deliver(std::uint32_t id) {
  // The sink may send, reusing this slot: keep what it is told.
  const Message& m = messages_store_[id];
  const std::uint64_t tag = m.tag;
  const std::int32_t from = m.from, to = m.to;
  free_.push_back(id);
  sink_->on_delivered(tag, from, to);
}

void Network::set_rate(Message& m, SimTime now, double rate) {
  m.rate = rate;
  m.finish =
      now + std::max(SimTime{1}, SimTime{static_cast<std::int64_t>(std::ceil(std::max(0.0, m.remaining) / rate))});
}

void Network::enter_links(const Message& m) {
  if (++up_flows_[static_cast<std::size_t>(m.from)] == 2) ++shared_links_;
  if (++down_flows_[static_cast<std::size_t>(m.to)] == 2) ++shared_links_;
}

void Network::leave_links(const Message& m) {
  if (--up_flows_[static_cast<std::size_t>(m.from)] == 1) --shared_links_;
  if (--down_flows_[static_cast<std::size_t>(m.to)] == 1) --shared_links_;
}

void Network::handle_event(std::uint32_t kind, std::uint64_t /*arg*/) {
  MOESIM_CHECK(kind == kWake, "unknown network event");
  if (sim_.now() != wake_) return;  // superseded by an earlier wake-up that already ran
  wake_ = SimTime{-1};
  const SimTime now = sim_.now();
  const SimTime in_flight = config_.latency - config_.overhead;  // last byte off the wire -> delivered
  const bool backplane = config_.switch_bandwidth > units::Bandwidth{};
  // Deliveries can trigger new sends at `now` (with zero overhead their flows start now), so repeat
  // until nothing more is due at this instant.
  for (;;) {
    const SimTime dt = now - last_advance_;
    last_advance_ = now;
    bool changed = false;
    bool delivered = false;
    const bool was_shared = shared_links_ > 0;
    // Flows still on the wire move on by their rate; those that finished leave it (what they had left
    // to send is never read again), their last byte arriving after the in-flight latency.
    for (std::size_t i = 0; i < active_.size();) {
      const std::uint32_t id = active_[i];
      Message& m = messages_store_[id];
      if (m.finish > now) {
        if (dt > SimTime{}) m.remaining -= m.rate * static_cast<double>(dt.ps());
        ++i;
        continue;
      }
      // It left the wire at m.finish: now, or earlier when it had its links to itself and nothing
      // needed a wake-up at that instant (see the next wake-up below).
      if (observer_) [[unlikely]]
        observer_->on_transfer(m.from, m.to, m.bytes, m.start, m.finish);
      auto& busy_until = up_busy_until_[static_cast<std::size_t>(m.from)];
      up_busy_[static_cast<std::size_t>(m.from)] += std::max(SimTime{}, m.finish - std::max(m.start, busy_until));
      busy_until = std::max(busy_until, m.finish);
      leave_links(m);
      deliver_later(m.finish + in_flight, now, id);
      active_[i] = active_.back();
      active_.pop_back();
      changed = true;
    }
    while (!starts_.empty() && starts_.top().time <= now) {
      const std::uint32_t id = starts_.top().message;
      starts_.pop();
      if (!config_.contention) [[unlikely]] {  // already through the wire: this is its delivery
        deliver(id);
        delivered = true;
        continue;
      }
      Message& m = messages_store_[id];
      Waiting& w = waiting_[static_cast<std::size_t>(m.from)];
      w.head = m.next;
      if (w.head != kNone) {
        const Message& next = messages_store_[w.head];
        starts_.push(Timed{next.start, next.seq, w.head});
      }
      m.start = now;
      if (m.remaining <= kDoneBytes) [[unlikely]] {  // an empty message still pays the latency
        deliver_later(now + in_flight, now, id);
        continue;
      }
      active_.push_back(id);
      enter_links(m);
      set_rate(m, now, rate_per_ps_);  // alone on its links, unless the check below finds sharing
      changed = true;
    }
    if (changed) {
      // Progressive filling only when some link carries two flows (or the backplane is limited); when
      // every flow has its links to itself, each runs at the full port rate.
      if (shared_links_ > 0 || backplane) {
        recompute_rates(now);
      } else if (was_shared) {
        for (const std::uint32_t id : active_) set_rate(messages_store_[id], now, rate_per_ps_);
      }
    }
    while (!deliveries_.empty() && deliveries_.top().time <= now) {
      const std::uint32_t id = deliveries_.top().message;
      deliveries_.pop();
      deliver(id);
      delivered = true;
    }
    // Sinks only send: nothing joins due_now_ while it is delivered.
    if (!due_now_.empty()) {
      for (const std::uint32_t id : due_now_) deliver(id);
      due_now_.clear();
      delivered = true;
    }
    const bool more_now =
        (!starts_.empty() && starts_.top().time <= now) || (!deliveries_.empty() && deliveries_.top().time <= now);
    if (!delivered || !more_now) break;
  }
  // Next thing that will happen.
  SimTime next = SimTime::max();
  if (!starts_.empty()) next = std::min(next, starts_.top().time);
  if (!deliveries_.empty()) next = std::min(next, deliveries_.top().time);
  // A flow that shares a link must leave the wire on time: the others speed up then. A flow alone on its
  // links changes nobody's rate when it leaves, so the network sleeps until its delivery instead (any
  // earlier wake-up completes it retroactively at its own finish time).
  if (shared_links_ == 0 && !backplane) {  // every flow alone: no need to look at its links
    for (const std::uint32_t id : active_) next = std::min(next, messages_store_[id].finish + in_flight);
  } else {
    for (const std::uint32_t id : active_) {
      const Message& m = messages_store_[id];
      const bool alone = !backplane && up_flows_[static_cast<std::size_t>(m.from)] == 1 &&
                         down_flows_[static_cast<std::size_t>(m.to)] == 1;
      next = std::min(next, alone ? m.finish + in_flight : std::max(m.finish, now + SimTime{1}));
    }
  }
  if (next != SimTime::max()) wake_at(next);
}

namespace {

/// Progressive filling (see the header): rate[i] for flow i over links flows[i], capacities `cap` (used
/// as scratch). Repeatedly find the link whose remaining capacity divided by its unfrozen flows is
/// smallest, give its flows that share, freeze them and take their rate off the other links they cross.
/// `count`, `frozen`, `first` and `crossing` are scratch space.
void progressive_fill(std::vector<double>& cap, const std::vector<Network::FlowLinks>& flows, std::vector<double>& rate,
                      std::vector<std::int32_t>& count, std::vector<char>& frozen, std::vector<std::uint32_t>& first,
                      std::vector<std::uint32_t>& crossing) {
  count.assign(cap.size(), 0);
  frozen.assign(flows.size(), 0);
  rate.assign(flows.size(), 0.0);
  bool shared = false;
  for (const auto& f : flows) {
    for (std::int32_t w = 0; w < f.count; ++w) {
      shared = ++count[static_cast<std::size_t>(f.link[static_cast<std::size_t>(w)])] > 1 || shared;
    }
  }
  if (!shared) {  // no link carries two flows (a permutation, the usual case): each gets its narrowest link
    for (std::size_t i = 0; i < flows.size(); ++i) {
      double r = std::numeric_limits<double>::infinity();
      for (std::int32_t w = 0; w < flows[i].count; ++w)
        r = std::min(r, cap[static_cast<std::size_t>(flows[i].link[static_cast<std::size_t>(w)])]);
      rate[i] = r;
    }
    return;
  }
  // Each link's flows in flow order, crossing[first[l] .. first[l + 1]) (a counting sort, filled from the
  // back): a round visits only the bottleneck's flows, where a scan of every flow would pass over all
  // the others, and meets them in the same order, so every rate and capacity is the same double.
  first.resize(cap.size() + 1);
  std::uint32_t total = 0;
  for (std::size_t l = 0; l < cap.size(); ++l) first[l] = total += static_cast<std::uint32_t>(count[l]);
  first[cap.size()] = total;
  crossing.resize(total);
  for (std::size_t i = flows.size(); i-- > 0;) {
    for (std::int32_t w = 0; w < flows[i].count; ++w) {
      crossing[--first[static_cast<std::size_t>(flows[i].link[static_cast<std::size_t>(w)])]] =
          static_cast<std::uint32_t>(i);
    }
  }
  std::size_t left = flows.size();
  while (left > 0) {
    std::size_t best = cap.size();
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < cap.size(); ++l) {
      if (count[l] > 0 && cap[l] / count[l] < share) {
        share = cap[l] / count[l];
        best = l;
      }
    }
    MOESIM_CHECK(best < cap.size(), "progressive filling found no bottleneck: a flow crosses no link");
    for (std::uint32_t k = first[best]; k < first[best + 1]; ++k) {
      const std::size_t i = crossing[k];
      if (frozen[i]) continue;
      const auto& f = flows[i];
      const auto* end = f.link.data() + f.count;
      rate[i] = share;
      frozen[i] = 1;
      --left;
      for (const auto* l = f.link.data(); l != end; ++l) {
        auto& c = cap[static_cast<std::size_t>(*l)];
        c = std::max(0.0, c - share);
        --count[static_cast<std::size_t>(*l)];
      }
    }
  }
}

}  // namespace

void Network::recompute_rates(SimTime now) {
  // Links: uplinks 0..N-1, downlinks N..2N-1, the backplane 2N when it is limited.
  const auto n = static_cast<std::int32_t>(config_.nodes);
  const bool backplane = config_.switch_bandwidth > units::Bandwidth{};
  cap_.assign(2 * static_cast<std::size_t>(n) + (backplane ? 1U : 0U), rate_per_ps_);
  if (backplane) cap_.back() = config_.switch_bandwidth.base() / static_cast<double>(kPicosecondsPerSecond);
  flows_.clear();
  for (const std::uint32_t id : active_) {
    const Message& m = messages_store_[id];
    flows_.push_back(FlowLinks{{m.from, n + m.to, 2 * n}, backplane ? 3 : 2});
  }
  progressive_fill(cap_, flows_, rates_, count_, frozen_, first_, crossing_);
  for (std::size_t i = 0; i < active_.size(); ++i) set_rate(messages_store_[active_[i]], now, rates_[i]);
}

std::vector<double> Network::max_min_rates(std::vector<double> capacity, const std::vector<FlowLinks>& flows) {
  std::vector<double> rate;
  std::vector<std::int32_t> count;
  std::vector<char> frozen;
  std::vector<std::uint32_t> first, crossing;
  progressive_fill(capacity, flows, rate, count, frozen, first, crossing);
  return rate;
}

}  // namespace moesim::sim
