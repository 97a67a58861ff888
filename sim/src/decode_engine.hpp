#pragma once
// The expert-parallel decode engine's class (DecodeEngine), shared by decode.cpp (the event loop, the
// experts and the collectives) and decode_setup.cpp (the per-operation costs, computed once).

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/sim/decode.hpp"
#include "moesim/sim/network.hpp"
#include "moesim/sim/residency.hpp"

namespace moesim::sim::decode_detail {

constexpr std::uint32_t kResume = 1;  ///< event: node `arg` finishes its current layer now
/// A node is never more than one MoE layer ahead of another (it needs everyone's outputs), so per-layer
/// communication state lives in a ring of a few slots indexed by the global MoE-layer step.
constexpr std::size_t kSlots = 4;

enum class Msg : std::uint64_t { Output = 0, Scatter = 1, Gather = 2, Ring = 3, RdRound = 4, RdPre = 5, RdPost = 6 };

inline std::uint64_t make_tag(Msg kind, std::uint64_t step, std::uint64_t g) {
  return (g << 16) | (step << 4) | static_cast<std::uint64_t>(kind);
}
inline Msg tag_kind(std::uint64_t tag) { return static_cast<Msg>(tag & 0xF); }
inline std::uint64_t tag_step(std::uint64_t tag) { return (tag >> 4) & 0xFFF; }
inline std::uint64_t tag_g(std::uint64_t tag) { return tag >> 16; }

// MessageSink first: deliveries, the most frequent virtual call, then need no this-adjusting thunk.
class DecodeEngine final : public MessageSink, public EventHandler {
 public:
  DecodeEngine(const DecodeConfig& c, const RoutingTrace& t) : cfg_(c), trace_(t), dispatcher_(*c.placement) {
    setup();
  }

  DecodeResult run() {
    for (std::int32_t n = 0; n < n_; ++n) run_node(n, SimTime{});
    sim_.run();
    for (std::int32_t n = 0; n < (centralised_ ? 1 : n_); ++n) {
      MOESIM_CHECK(nodes_[static_cast<std::size_t>(n)].token == tokens_,
                   "node " + std::to_string(n) + " stopped before the last token: a deadlock in the decode engine");
    }
    DecodeResult r;
    r.tokens = tokens_;
    r.makespan = makespan_;
    r.tokens_per_second = makespan_ > SimTime{} ? static_cast<double>(tokens_) / to_seconds(makespan_) : 0;
    const double steps = static_cast<double>(tokens_) * static_cast<double>(moe_layers_);
    r.mean_max_routed = steps > 0 ? static_cast<double>(sum_max_routed_) / steps : 0;
    std::int64_t executed = 0;
    for (std::size_t n = 0; n < nodes_.size(); ++n) {
      auto& s = nodes_[n].stats;
      executed += s.routed + s.fillers;
      if (network_) {
        s.bytes_sent = network_->bytes_sent(static_cast<std::int32_t>(n));
        s.uplink_busy = network_->uplink_busy(static_cast<std::int32_t>(n));
      }
      r.nodes.push_back(s);
    }
    r.mean_executed_per_node = steps > 0 ? static_cast<double>(executed) / (steps * n_) : 0;
    if (!streamers_.empty()) {
      std::int64_t hits = 0, reads = 0;
      for (const auto& st : streamers_) {
        hits += st.hits();
        reads += st.hits() + st.misses();
      }
      r.cache_hit_rate = reads > 0 ? static_cast<double>(hits) / static_cast<double>(reads) : 0.0;
    }
    r.per_token = std::move(per_token_);
    r.events = sim_.events_run();
    r.messages = network_ ? network_->messages() : 0;
    r.assumptions = assumptions_;
    return r;
  }

  void handle_event(std::uint32_t kind, std::uint64_t arg) override {
    MOESIM_CHECK(kind == kResume, "unknown decode event");
    const auto n = static_cast<std::int32_t>(arg);
    run_node(n, finish_layer(n, sim_.now()));
  }

  void on_delivered(std::uint64_t tag, std::int32_t /*from*/, std::int32_t to) override {
    // Most messages are expert outputs for a layer the node has started: counted on a short path that
    // calls nothing unless the layer completes. Everything else goes through on_step().
    const Msg kind = tag_kind(tag);
    const std::uint64_t g = tag_g(tag);
    Slot& slot = nodes_[static_cast<std::size_t>(to)].slots[g % kSlots];
    if ((kind != Msg::Output && kind != Msg::Gather) || slot.g != g) {
      on_step(tag, to);
      return;
    }
    ++slot.arrivals;
    if (slot.started && exchange_complete(to, slot)) complete(to, slot);
  }

 private:
  /// A delivered message other than an output for a started layer (on_delivered()).
  [[gnu::noinline]] void on_step(std::uint64_t tag, std::int32_t to) {
    const std::uint64_t g = tag_g(tag);
    Slot& slot = slot_of(to, g);
    switch (tag_kind(tag)) {
      case Msg::Output:
      case Msg::Gather:
        ++slot.arrivals;
        break;
      case Msg::Scatter: {
        // Centralised: a node other than the driver computes its experts as soon as the input arrives.
        const auto moe_layers = static_cast<std::uint64_t>(moe_layers_);
        const SimTime done = compute_experts(to, static_cast<std::int64_t>(g / moe_layers),
                                             static_cast<std::int64_t>(g % moe_layers), sim_.now());
        network_->send(done, to, 0, out_bytes_, make_tag(Msg::Gather, 0, g));
        return;
      }
      case Msg::Ring:
        ++slot.arrivals;
        ring_advance(to, slot);
        break;
      case Msg::RdRound:
        slot.rounds_received |= 1U << tag_step(tag);
        rd_advance(to, slot);
        break;
      case Msg::RdPre:
        slot.pre_received = true;
        rd_advance(to, slot);
        break;
      case Msg::RdPost:
        slot.post_received = true;
        break;
    }
    maybe_complete(to, slot);
  }

  struct Slot {
    std::uint64_t g = std::numeric_limits<std::uint64_t>::max();
    SimTime done{};  ///< this node's own expert computation ends
    std::int32_t arrivals = 0;
    std::int32_t sent = 0;  ///< collective steps sent
    std::uint32_t rounds_received = 0;
    bool pre_received = false;
    bool post_received = false;
    bool started = false;  ///< this node has reached the layer (its `done` is known)
  };
  struct Node {
    std::int64_t token = 0;
    std::int32_t layer = 0;
    std::array<Slot, kSlots> slots;
    NodeStats stats;
  };
  struct Assignment {
    std::uint64_t g = std::numeric_limits<std::uint64_t>::max();
    /// Node n computes routed[n * top_k .. + count[n]) (router order): flat, with room for top_k each,
    /// so that a layer allocates nothing.
    std::vector<std::int32_t> routed;
    std::vector<std::int32_t> count;  ///< per node
    std::int32_t max_routed = 0;
  };

  void setup();
  void setup_costs();
  void setup_network();
  void setup_memory();
  void setup_state();
  void run_node(std::int32_t n, SimTime t);
  SimTime finish_layer(std::int32_t n, SimTime t);
  // MoE layer j of `token` (g = token * moe_layers_ + j; the callers know both, so no division).
  SimTime compute_experts(std::int32_t n, std::int64_t token, std::int64_t j, SimTime t);
  const Assignment& assignment(std::uint64_t g, std::int64_t token, std::int64_t j);
  // These take the node's slot of the layer (slot_of), found once per message.
  void start_exchange(std::int32_t n, Slot& slot);
  void ring_advance(std::int32_t n, Slot& slot);
  void rd_advance(std::int32_t n, Slot& slot);
  void maybe_complete(std::int32_t n, Slot& slot);
  /// The layer's exchange is complete on node n. Out of line, so that the messages that do not complete
  /// it (most of them) take a short path.
  [[gnu::noinline]] void complete(std::int32_t n, Slot& slot);
  bool exchange_complete(std::int32_t n, const Slot& s) const;
  Slot& slot_of(std::int32_t n, std::uint64_t g) {
    Slot& s = nodes_[static_cast<std::size_t>(n)].slots[g % kSlots];
    if (s.g != g) reset(s, g);
    return s;
  }
  /// Out of line, so that slot_of()'s callers keep a short path.
  [[gnu::noinline]] static void reset(Slot& s, std::uint64_t g) {
    MOESIM_CHECK(s.g == std::numeric_limits<std::uint64_t>::max() || s.g + kSlots <= g,
                 "decode slot reused while a layer was in flight");
    std::construct_at(&s);  // in place: an assigned temporary is copied back with wide loads, a stall
    s.g = g;
  }
  bool tracing(std::int64_t token) const { return token < traced_tokens_; }
  void span(std::int32_t n, std::string_view what, std::int64_t token, std::int64_t layer, SimTime a, SimTime b) {
    if (tracing(token) && b > a) cfg_.timeline->on_compute(n, what, token, layer, a, b);
  }
  /// Out of line: only the first tokens of a Chrome trace build these names.
  [[gnu::noinline]] void expert_span(std::int32_t n, std::int32_t e, bool filler, std::int64_t token,
                                     std::int64_t layer, SimTime a, SimTime b) {
    span(n, (filler ? "filler " : "expert ") + std::to_string(e), token, layer, a, b);
  }
  SimTime touch(std::int32_t n, std::size_t buffer, SimTime at, std::int32_t count, double bytes) {
    return residency_ ? residency_->acquire(n, buffer, at, count, bytes) : SimTime{};
  }

  const DecodeConfig& cfg_;
  const RoutingTrace& trace_;
  Dispatcher dispatcher_;
  Simulation sim_;
  std::uint32_t handler_ = 0;
  std::unique_ptr<Network> network_;
  std::unique_ptr<WeightResidency> residency_;
  std::vector<std::string> assumptions_;

  std::int32_t n_ = 1;
  std::int64_t tokens_ = 0;
  std::int32_t layers_ = 0;
  std::int64_t moe_layers_ = 0;
  std::int64_t experts_ = 0;
  std::int64_t top_k_ = 0;
  std::vector<std::int32_t> moe_index_;  ///< per decoder layer: its MoE layer index, or -1
  bool centralised_ = false;

  // Per-operation times, computed once (the model is the same for every token).
  SimTime attention_{};      ///< one decoder layer's non-expert work, router and intra-node all-reduces included
  SimTime expert_{};         ///< one routed expert, one layer
  SimTime expert_launch_{};  ///< once per MoE layer a node computes experts in: the fused kernel set's launches
  SimTime combine_{};
  SimTime head_{};
  double expert_bytes_ = 0;
  double layer_bytes_ = 0;  ///< non-expert weights of one layer (for residency)
  double out_bytes_ = 0;    ///< expert-outputs / scatter / gather message
  double ring_bytes_ = 0;
  std::int32_t ring_steps_ = 0;  ///< 2(N-1) (cost::ring_allreduce)
  double vector_bytes_ = 0;
  std::size_t expert_buffer_base_ = 0;  ///< residency records: layers first, then experts
  std::int32_t rd_pow2_ = 1;            ///< largest power of two <= nodes
  std::int32_t rd_rounds_ = 0;

  std::vector<Node> nodes_;
  std::array<Assignment, kSlots> assignments_;
  std::vector<std::vector<std::int32_t>> local_experts_;  ///< per node: experts it holds
  std::vector<std::int64_t> lru_;  ///< per node × MoE layer × expert: last global step it was computed (-1 never)
  std::vector<std::int32_t> scratch_;
  /// What chooses a node's fillers: the balancing's (its registry entry), or busy full loading's when
  /// experts run in turn (cost::ExpertExecution::Sequential computes every local one anyway).
  void (*fill_)(const FillerContext&, std::vector<std::int32_t>&) = nullptr;
  std::vector<ExpertStreamer> streamers_;  ///< per node, when experts stream from storage: its page cache
  std::vector<std::uint16_t> stream_ids_;  ///< scratch: the experts one compute_experts call reads
  std::vector<std::int32_t> dispatched_;   ///< per chosen expert of a layer: the node computing it
  std::vector<std::uint64_t> picked_;      ///< per expert: the stamp_ of the last compute_experts that listed it
  std::int64_t traced_tokens_ = 0;         ///< tokens whose spans go to the timeline (0 without one)
  std::int32_t arrivals_needed_ = -1;      ///< messages that complete a node's exchange; -1: recursive doubling
  std::uint64_t stamp_ = 0;                ///< compute_experts calls so far (picked_)
  std::vector<TokenRecord> per_token_;
  TokenRecord current_;  ///< node 0's token in progress
  std::int64_t sum_max_routed_ = 0;
  SimTime makespan_{};
};

}  // namespace moesim::sim::decode_detail
