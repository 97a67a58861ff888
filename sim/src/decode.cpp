// The expert-parallel decode engine's run: each node's layers, the experts it computes and the exchange
// of their outputs (expert outputs, ring all-reduce or recursive doubling); run_decode() drives it.
#include "moesim/sim/decode.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <span>

#include "decode_engine.hpp"
#include "moesim/model/collective.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/network.hpp"
#include "moesim/sim/residency.hpp"

namespace moesim::sim {
namespace decode_detail {

const DecodeEngine::Assignment& DecodeEngine::assignment(std::uint64_t g, std::int64_t token, std::int64_t j) {
  Assignment& as = assignments_[g % kSlots];
  if (as.g == g) return as;
  as.g = g;
  const auto chosen = trace_.chosen(token, j);
  dispatcher_.nodes_for(chosen, dispatched_.data());
  std::fill(as.count.begin(), as.count.end(), 0);
  as.max_routed = 0;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const auto n = static_cast<std::size_t>(dispatched_[i]);
    as.routed[n * static_cast<std::size_t>(top_k_) + static_cast<std::size_t>(as.count[n])] =
        static_cast<std::int32_t>(chosen[i]);
    as.max_routed = std::max(as.max_routed, ++as.count[n]);
  }
  sum_max_routed_ += as.max_routed;
  return as;
}

SimTime DecodeEngine::compute_experts(std::int32_t n, std::int64_t token, std::int64_t j, SimTime t) {
  const auto g =
      static_cast<std::uint64_t>(token) * static_cast<std::uint64_t>(moe_layers_) + static_cast<std::uint64_t>(j);
  const Assignment& as = assignment(g, token, j);
  const auto ni = static_cast<std::size_t>(n);
  Node& node = nodes_[ni];
  // What this node computes: its routed experts, then the fillers the balancing adds (scratch_). An
  // expert is taken when its picked_ stamp is this call's: O(1) membership, no clearing.
  const std::span<const std::int32_t> routed(as.routed.data() + ni * static_cast<std::size_t>(top_k_),
                                             static_cast<std::size_t>(as.count[ni]));
  scratch_.clear();
  const auto& local = local_experts_[ni];
  std::int64_t* lru = &lru_[(ni * static_cast<std::size_t>(moe_layers_) + static_cast<std::size_t>(j)) *
                            static_cast<std::size_t>(experts_)];
  const std::uint64_t stamp = ++stamp_;
  for (const auto e : routed) picked_[static_cast<std::size_t>(e)] = stamp;
  fill_({local, lru, picked_.data(), stamp, routed.size(), as.max_routed}, scratch_);
  node.stats.routed += static_cast<std::int64_t>(routed.size());
  node.stats.fillers += static_cast<std::int64_t>(scratch_.size());
  SimTime moe{};
  SimTime rewire_total{};
  const bool traced = tracing(token);
  const bool stacked = cfg_.packing == Packing::Prestacked;
  const double stacked_bytes = expert_bytes_ * static_cast<double>(moe_layers_);
  const std::size_t count = routed.size() + scratch_.size();
  if (!streamers_.empty() && count > 0) {
    // Serial streaming: the node reads the experts it is about to compute, then computes them.
    stream_ids_.clear();
    for (std::size_t i = 0; i < count; ++i)
      stream_ids_.push_back(static_cast<std::uint16_t>(i < routed.size() ? routed[i] : scratch_[i - routed.size()]));
    const SimTime io = streamers_[ni].load(j, stream_ids_).time;
    if (traced && io > SimTime{}) span(n, "io", token, j, t, t + io);
    t += io;
    moe += io;
    node.stats.io += io;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t e = i < routed.size() ? routed[i] : scratch_[i - routed.size()];
    SimTime rewire{};
    std::size_t buffer = 0;
    if (residency_) {
      buffer =
          expert_buffer_base_ + (stacked ? static_cast<std::size_t>(e) : static_cast<std::size_t>(j * experts_ + e));
      rewire = touch(n, buffer, t, stacked ? 1 : 3, stacked ? stacked_bytes : expert_bytes_);
      if (rewire > SimTime{}) {
        span(n, "rewire", token, j, t, t + rewire);
        ++node.stats.rewires;
      }
    }
    const SimTime start = t + rewire;
    t = start + expert_;
    if (residency_) residency_->release(n, buffer, t);
    if (traced) expert_span(n, e, i >= routed.size(), token, j, start, t);
    lru[e] = static_cast<std::int64_t>(g);
    moe += rewire + expert_;
    rewire_total += rewire;
  }
  if (count > 0) {
    t += expert_launch_;
    moe += expert_launch_;
  }
  node.stats.moe += moe;
  node.stats.rewire += rewire_total;
  if (n == 0) {
    current_.moe += moe;
    current_.rewire += rewire_total;
    current_.max_routed = std::max(current_.max_routed, as.max_routed);
  }
  return t;
}

void DecodeEngine::run_node(std::int32_t n, SimTime t) {
  Node& node = nodes_[static_cast<std::size_t>(n)];
  for (;;) {
    if (node.token >= tokens_) return;
    const bool driver = n == 0;
    if (centralised_ && !driver) return;  // other nodes work only when the driver's inputs arrive
    if (driver && node.layer == 0) current_ = TokenRecord{.start = t};
    const std::int32_t l = node.layer;
    // Attention, router (and intra-node all-reduces) for this layer.
    SimTime a = attention_;
    if (residency_) {
      const SimTime rewire = touch(n, static_cast<std::size_t>(l), t, 1, layer_bytes_);
      if (rewire > SimTime{}) {
        span(n, "rewire", node.token, l, t, t + rewire);
        ++node.stats.rewires;
        node.stats.rewire += rewire;
      }
      a += rewire;
      residency_->release(n, static_cast<std::size_t>(l), t + a);
    }
    span(n, "attention", node.token, l, t, t + a);
    node.stats.misc += a;
    if (driver) current_.misc += a;
    t += a;
    const std::int32_t j = moe_index_[static_cast<std::size_t>(l)];
    if (j < 0) {  // a dense layer: nothing to exchange
      t = finish_layer(n, t);
      continue;
    }
    const auto g = static_cast<std::uint64_t>(node.token) * static_cast<std::uint64_t>(moe_layers_) +
                   static_cast<std::uint64_t>(j);
    if (n_ == 1) {
      t = compute_experts(n, node.token, j, t);
      t = finish_layer(n, t);
      continue;
    }
    if (centralised_) {
      network_->send_to_all(t, 0, out_bytes_, make_tag(Msg::Scatter, 0, g));  // to 1, 2, ... N-1
    }
    Slot& slot = slot_of(n, g);
    slot.done = compute_experts(n, node.token, j, t);
    slot.started = true;
    if (!centralised_) start_exchange(n, slot);
    maybe_complete(n, slot);
    return;
  }
}

SimTime DecodeEngine::finish_layer(std::int32_t n, SimTime t) {
  Node& node = nodes_[static_cast<std::size_t>(n)];
  const std::int32_t l = node.layer;
  const bool works = !centralised_ || n == 0;
  if (works && moe_index_[static_cast<std::size_t>(l)] >= 0) {
    span(n, "combine", node.token, l, t, t + combine_);
    t += combine_;
    node.stats.misc += combine_;
    if (n == 0) current_.misc += combine_;
  }
  if (++node.layer == layers_) {
    if (works && head_ > SimTime{}) {
      span(n, "lm head", node.token, l, t, t + head_);
      t += head_;
      node.stats.misc += head_;
      if (n == 0) current_.misc += head_;
    }
    node.layer = 0;
    ++node.token;
    if (n == 0) {
      current_.end = t;
      per_token_.push_back(current_);
      if (cfg_.timeline) cfg_.timeline->on_token(node.token - 1, current_.start, t);
      makespan_ = t;
    }
  }
  return t;
}

void DecodeEngine::start_exchange(std::int32_t n, Slot& slot) {
  const std::uint64_t g = slot.g;
  switch (cfg_.collective) {
    case Collective::ExpertOutputs:
      network_->send_to_all(slot.done, n, out_bytes_, make_tag(Msg::Output, 0, g));  // in shift order
      break;
    case Collective::RingAllReduce:
      ring_advance(n, slot);
      break;
    case Collective::RecursiveDoubling:
      rd_advance(n, slot);
      break;
  }
}

void DecodeEngine::ring_advance(std::int32_t n, Slot& slot) {
  // Step s (0 .. 2(N-1)-1): every node sends one chunk to its right neighbour; it may send step s once
  // its own partial sum exists and it has received step s-1 from its left neighbour.
  if (!slot.started) return;
  const std::uint64_t g = slot.g;
  const std::int32_t steps = ring_steps_;
  const SimTime at = std::max(sim_.now(), slot.done);
  while (slot.sent < steps && slot.arrivals >= slot.sent) {
    network_->send(at, n, (n + 1) % n_, ring_bytes_, make_tag(Msg::Ring, static_cast<std::uint64_t>(slot.sent), g));
    ++slot.sent;
  }
}

void DecodeEngine::rd_advance(std::int32_t n, Slot& slot) {
  if (!slot.started) return;
  const std::uint64_t g = slot.g;
  const SimTime at = std::max(sim_.now(), slot.done);
  const std::int32_t extra = n_ - rd_pow2_;
  if (n >= rd_pow2_) {  // an extra node: fold into its partner, then wait for the result
    if (slot.sent == 0) {
      network_->send(at, n, n - rd_pow2_, vector_bytes_, make_tag(Msg::RdPre, 0, g));
      slot.sent = 1;
    }
    return;
  }
  if (n < extra && !slot.pre_received) return;
  while (slot.sent < rd_rounds_ && (slot.sent == 0 || (slot.rounds_received >> (slot.sent - 1)) & 1U)) {
    const std::int32_t partner = n ^ (1 << slot.sent);
    network_->send(at, n, partner, vector_bytes_, make_tag(Msg::RdRound, static_cast<std::uint64_t>(slot.sent), g));
    ++slot.sent;
  }
  const bool rounds_done = rd_rounds_ == 0 || ((slot.rounds_received >> (rd_rounds_ - 1)) & 1U);
  if (n < extra && slot.sent == rd_rounds_ && rounds_done) {
    network_->send(at, n, n + rd_pow2_, vector_bytes_, make_tag(Msg::RdPost, 0, g));
    ++slot.sent;
  }
}

bool DecodeEngine::exchange_complete(std::int32_t n, const Slot& s) const {
  // Centralised (the driver gathers N-1 outputs), expert outputs (N-1) and the ring (2(N-1) steps)
  // complete on a count, precomputed in setup().
  if (centralised_) return n != 0 || s.arrivals == arrivals_needed_;
  if (arrivals_needed_ >= 0) return s.arrivals == arrivals_needed_;
  if (n >= rd_pow2_) return s.post_received;
  const std::uint32_t all = rd_rounds_ == 0 ? 0U : (1U << rd_rounds_) - 1U;
  return (s.rounds_received & all) == all && (n >= n_ - rd_pow2_ || s.sent > rd_rounds_);
}

void DecodeEngine::maybe_complete(std::int32_t n, Slot& slot) {
  if (slot.started && exchange_complete(n, slot)) complete(n, slot);
}

void DecodeEngine::complete(std::int32_t n, Slot& slot) {
  const SimTime ready = std::max(sim_.now(), slot.done);
  slot.started = false;  // complete once
  slot.g = std::numeric_limits<std::uint64_t>::max();
  if (ready == sim_.now()) {
    run_node(n, finish_layer(n, ready));
  } else {
    sim_.schedule(ready, handler_, kResume, static_cast<std::uint64_t>(n));
  }
}

}  // namespace decode_detail

DecodeResult run_decode(const DecodeConfig& config, const RoutingTrace& trace) {
  MOESIM_CHECK(config.arch && config.weights && config.node && config.placement, "decode config incomplete");
  if (config.nodes < 1) throw UserError("nodes must be at least 1");
  // Message tags carry a collective step in 12 bits; a ring over N nodes has 2(N-1) steps.
  if (config.nodes > kMaxNodes) {
    throw UserError("--nodes " + std::to_string(config.nodes) + ": the simulator models up to " +
                    std::to_string(kMaxNodes) + " nodes; use `moesim estimate` for larger clusters");
  }
  if (!config.arch->is_moe()) {
    throw UserError(config.arch->id + " is a dense model; the expert-parallel simulator needs an MoE model");
  }
  decode_detail::DecodeEngine engine(config, trace);
  return engine.run();
}

}  // namespace moesim::sim
