// The flow-level network: max-min fair sharing, per-message latency and sender overhead. Each test states
// the scenario and its hand-derived expectation.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/sim/event_core.hpp"
#include "moesim/sim/network.hpp"

namespace {

using moesim::sim::MessageSink;
using moesim::sim::Network;
using moesim::sim::NetworkConfig;
using moesim::sim::SimTime;
using moesim::sim::Simulation;

constexpr SimTime kMicrosecond{moesim::sim::kPicosecondsPerMicrosecond};

/// Records when each message (by tag) arrives.
class Arrivals final : public MessageSink {
 public:
  explicit Arrivals(Simulation& s) : sim_(s) {}
  void on_delivered(std::uint64_t tag, std::int32_t, std::int32_t) override { at[tag] = sim_.now(); }
  std::map<std::uint64_t, SimTime> at;

 private:
  Simulation& sim_;
};

/// A sender of messages at chosen times (the network only accepts sends at or after now).
class Sender final : public moesim::sim::EventHandler {
 public:
  struct Send {
    SimTime at;
    std::int32_t from, to;
    double bytes;
    std::uint64_t tag;
  };
  Sender(Simulation& s, Network& n, std::vector<Send> sends) : sim_(s), net_(n), sends_(std::move(sends)) {
    id_ = s.add_handler(this);
    for (std::size_t i = 0; i < sends_.size(); ++i) s.schedule(sends_[i].at, id_, 0, i);
  }
  void handle_event(std::uint32_t, std::uint64_t i) override {
    const auto& x = sends_[i];
    net_.send(sim_.now(), x.from, x.to, x.bytes, x.tag);
  }

 private:
  Simulation& sim_;
  Network& net_;
  std::vector<Send> sends_;
  std::uint32_t id_ = 0;
};

NetworkConfig gigabit(bool contention = true) {
  NetworkConfig c;
  c.nodes = 3;
  c.bandwidth = moesim::units::bytes_per_second(1e9);  // 1 GB/s per port and direction
  c.latency = 10 * kMicrosecond;                       // one way
  c.overhead = SimTime{};
  c.contention = contention;
  return c;
}

// One 1 MB message alone: 1 ms on the wire + 10 us latency.
TEST(Network, OneMessageIsLatencyPlusSerialisation) {
  Simulation sim;
  Arrivals sink(sim);
  Network net(sim, gigabit(), &sink);
  Sender s(sim, net, {{SimTime{}, 0, 2, 1e6, 7}});
  sim.run();
  EXPECT_EQ(sink.at.at(7), 1000 * kMicrosecond + 10 * kMicrosecond);
}

// Two flows into node 2's downlink at once share it: 0.5 GB/s each, so both 1 MB flows take 2 ms.
// Without contention each gets the full 1 GB/s (the analytic model's assumption): 1 ms.
TEST(Network, TwoFlowsShareADownlink) {
  for (bool contention : {true, false}) {
    Simulation sim;
    Arrivals sink(sim);
    Network net(sim, gigabit(contention), &sink);
    Sender s(sim, net, {{SimTime{}, 0, 2, 1e6, 1}, {SimTime{}, 1, 2, 1e6, 2}});
    sim.run();
    const SimTime wire = contention ? 2000 * kMicrosecond : 1000 * kMicrosecond;
    EXPECT_EQ(sink.at.at(1), wire + 10 * kMicrosecond) << contention;
    EXPECT_EQ(sink.at.at(2), wire + 10 * kMicrosecond) << contention;
  }
}

// Flow A (0->2, 1 MB) starts at 0 and runs alone at 1 GB/s until B (1->2, 1 MB) joins at 0.5 ms; they share
// at 0.5 GB/s, so A's last 0.5 MB takes 1 ms (A leaves the wire at 1.5 ms); B has 0.5 MB left and finishes
// alone in 0.5 ms (2.0 ms). Arrivals are 10 us later.
TEST(Network, ALateFlowSlowsAnEarlyOneOnlyWhileTheyOverlap) {
  Simulation sim;
  Arrivals sink(sim);
  Network net(sim, gigabit(), &sink);
  Sender s(sim, net, {{SimTime{}, 0, 2, 1e6, 1}, {500 * kMicrosecond, 1, 2, 1e6, 2}});
  sim.run();
  EXPECT_NEAR(static_cast<double>(sink.at.at(1).ps()), static_cast<double>((1510 * kMicrosecond).ps()), 2.0);
  EXPECT_NEAR(static_cast<double>(sink.at.at(2).ps()), static_cast<double>((2010 * kMicrosecond).ps()), 2.0);
}

// Sender overhead (LogP o = 100 us, latency 200 us in total): three empty messages ready at 0 leave the
// CPU at 100, 200 and 300 us and arrive 100 us later. With contention off the overheads overlap: all at 200.
TEST(Network, SenderOverheadSerialisesABurst) {
  for (bool contention : {true, false}) {
    Simulation sim;
    Arrivals sink(sim);
    NetworkConfig c = gigabit(contention);
    c.latency = 200 * kMicrosecond;
    c.overhead = 100 * kMicrosecond;
    Network net(sim, c, &sink);
    Sender s(sim, net, {{SimTime{}, 0, 1, 0, 1}, {SimTime{}, 0, 2, 0, 2}, {SimTime{}, 0, 1, 0, 3}});
    sim.run();
    if (contention) {
      EXPECT_EQ(sink.at.at(1), 200 * kMicrosecond);
      EXPECT_EQ(sink.at.at(2), 300 * kMicrosecond);
      EXPECT_EQ(sink.at.at(3), 400 * kMicrosecond);
    } else {
      for (std::uint64_t t : {1, 2, 3}) EXPECT_EQ(sink.at.at(t), 200 * kMicrosecond) << t;
    }
  }
}

// Progressive filling by hand: links of capacity 1, 1 and 10; f0 and f1 cross links 0 and 2, f2 crosses
// 1 and 2, f3 only 2. Link 0 is the first bottleneck (1/2 each for f0, f1); then link 1 (f2 gets 1);
// f3 gets what link 2 has left: 10 - 0.5 - 0.5 - 1 = 8.
TEST(Network, MaxMinFairRatesByHand) {
  const auto r = Network::max_min_rates({1, 1, 10}, {{{0, 2, 0}, 2}, {{0, 2, 0}, 2}, {{1, 2, 0}, 2}, {{2, 0, 0}, 1}});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[1], 0.5);
  EXPECT_DOUBLE_EQ(r[2], 1.0);
  EXPECT_DOUBLE_EQ(r[3], 8.0);
}

// The event core runs events in (time, sequence) order and refuses to go back in time.
class Log final : public moesim::sim::EventHandler {
 public:
  void handle_event(std::uint32_t kind, std::uint64_t) override { order.push_back(kind); }
  std::vector<std::uint32_t> order;
};
TEST(EventCore, OrdersByTimeThenBySchedulingOrder) {
  Simulation sim;
  Log log;
  const auto h = sim.add_handler(&log);
  sim.schedule(SimTime{20}, h, 3);
  sim.schedule(SimTime{10}, h, 1);
  sim.schedule(SimTime{20}, h, 4);
  sim.schedule(SimTime{10}, h, 2);
  EXPECT_EQ(sim.run(), 4u);
  EXPECT_EQ(log.order, (std::vector<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(sim.now(), SimTime{20});
  EXPECT_THROW(sim.schedule(SimTime{5}, h, 9), moesim::InternalError);
}

// The time queues keep most records in a sorted vector and the others in a heap (TimeQueue: the whole
// queue while it is long; RunQueue: the latecomers beside it): either way records leave in (time, seq)
// order. Each round pushes 100 records (times drawn from a few values, so that ties are common), then
// pushes and pops at random, then pops down to 3: a TimeQueue turns into a heap and back every round.
// A std::set is the reference.
struct Rec {
  SimTime time;
  std::uint64_t seq;
};
template <class Queue>
void check_time_queue() {
  Queue q;
  std::set<std::pair<SimTime, std::uint64_t>> ref;
  std::mt19937_64 rng(7);
  std::uint64_t seq = 0;
  SimTime now{};
  auto push = [&] {
    const SimTime t = now + SimTime{static_cast<std::int64_t>(rng() % 8)};
    q.push({t, seq});
    ref.insert({t, seq++});
  };
  auto pop = [&] {
    ASSERT_FALSE(q.empty());
    ASSERT_EQ(q.top().time, ref.begin()->first);
    ASSERT_EQ(q.top().seq, ref.begin()->second);
    now = q.top().time;
    q.pop();
    ref.erase(ref.begin());
  };
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 100; ++i) push();
    for (int i = 0; i < 100; ++i) rng() % 3 == 0 ? push() : pop();
    while (ref.size() > 3) pop();
  }
  while (!ref.empty()) pop();
  EXPECT_TRUE(q.empty());
}
TEST(EventCore, TimeQueueLeavesInTimeThenSequenceOrder) { check_time_queue<moesim::sim::TimeQueue<Rec>>(); }
TEST(EventCore, RunQueueLeavesInTimeThenSequenceOrder) { check_time_queue<moesim::sim::RunQueue<Rec>>(); }

}  // namespace
