#include "moesim/sim/decode.hpp"

#include "moesim/model/collective.hpp"
#include "moesim/model/step_cost.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <span>

#include "moesim/model/error.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/network.hpp"
#include "moesim/sim/residency.hpp"

namespace moesim::sim {

// ---------------------------------------------------------------------------------------------------
// Registries (STYLE.md practice 2): every policy by name, with the line --help prints.

const std::vector<NamedOption<AttentionMode>>& attention_modes() {
  static const std::vector<NamedOption<AttentionMode>> all = {
      {AttentionMode::Decentralised, "decentralised",
       "attention, router and weighted sum replicated on every node; one exchange of expert outputs per MoE "
       "layer (seed 000 §4.3, Fig. 7)"},
      {AttentionMode::Centralised, "centralised",
       "node 0 runs attention and router, sends each node the layer input and gathers the expert outputs: two "
       "exchanges per MoE layer (seed 000 §3, Figs. 2-3)"},
  };
  return all;
}

const std::vector<NamedOption<Balancing>>& balancings() {
  static const std::vector<NamedOption<Balancing>> all = {
      {Balancing::None, "none", "a node computes only the experts the router sent it (the paper's naive method)"},
      {Balancing::BusyAll, "busy",
       "busy full loading: every node computes every local expert every layer, unused outputs zeroed "
       "(seed 000 §4.2, L_B)"},
      {Balancing::LruFill, "lru-fill",
       "router-aided dynamic loading: every node computes the layer's maximum routed count, filling with its "
       "least-recently-used local experts (seed 000 §4.2, L_R)"},
  };
  return all;
}

const std::vector<NamedOption<Packing>>& packings() {
  static const std::vector<NamedOption<Packing>> all = {
      {Packing::Unstacked, "unstacked", "one weight buffer per matrix: 3 per expert and layer (seed 000 §3.2)"},
      {Packing::Prestacked, "prestacked",
       "one buffer per expert holding all its layers, so using it in any layer keeps it wired (seed 000 §4.1, P)"},
  };
  return all;
}

const std::vector<NamedOption<Collective>>& collectives() {
  static const std::vector<NamedOption<Collective>> all = {
      {Collective::ExpertOutputs, "expert-outputs",
       "every node sends every other node the layer's top-k output buffer (k x d_model activations; seed 000 "
       "Table 1 note a counts D_embed x 4 per layer)"},
      {Collective::RingAllReduce, "ring-allreduce",
       "ring all-reduce of per-node partial sums: 2(N-1) steps of d_model/N activations (Thakur et al. 2005)"},
      {Collective::RecursiveDoubling, "recursive-doubling",
       "recursive-doubling all-reduce of partial sums: log2 N steps of d_model activations, +2 when N is not a "
       "power of two (Thakur et al. 2005)"},
  };
  return all;
}

const std::vector<StrategyPreset>& strategies() {
  static const std::vector<StrategyPreset> all = {
      {"naive", "seed 000 Table 3 'Naive': unstacked weights, no balancing, centralised attention", Packing::Unstacked,
       Balancing::None, AttentionMode::Centralised},
      {"P-LB", "seed 000 Table 3 'P-L_B': prestacked weights, busy full loading, centralised attention",
       Packing::Prestacked, Balancing::BusyAll, AttentionMode::Centralised},
      {"P-LR-D",
       "seed 000 Table 3 'P-L_R-D': prestacked weights, router-aided LRU fillers, decentralised attention and "
       "router",
       Packing::Prestacked, Balancing::LruFill, AttentionMode::Decentralised},
  };
  return all;
}

AttentionMode attention_mode_by_name(std::string_view n) { return by_name(attention_modes(), n, "attention mode"); }
Balancing balancing_by_name(std::string_view n) { return by_name(balancings(), n, "balancing"); }
Packing packing_by_name(std::string_view n) { return by_name(packings(), n, "packing"); }
Collective collective_by_name(std::string_view n) { return by_name(collectives(), n, "collective"); }
std::string_view name_of(AttentionMode v) { return name_in(attention_modes(), v); }
std::string_view name_of(Balancing v) { return name_in(balancings(), v); }
std::string_view name_of(Packing v) { return name_in(packings(), v); }
std::string_view name_of(Collective v) { return name_in(collectives(), v); }

const StrategyPreset& strategy_by_name(std::string_view name) {
  std::vector<NamedOption<const StrategyPreset*>> all;
  for (const auto& s : strategies()) all.push_back({&s, s.name, s.description});
  return *by_name(all, name, "strategy");
}

model::Exchange analytic_exchange(AttentionMode a, Collective c) {
  if (a == AttentionMode::Centralised) return model::Exchange::Centralised;
  switch (c) {
    case Collective::ExpertOutputs:
      return model::Exchange::ExpertOutputs;
    case Collective::RingAllReduce:
      return model::Exchange::RingAllReduce;
    case Collective::RecursiveDoubling:
      return model::Exchange::RecursiveDoubling;
  }
  return model::Exchange::ExpertOutputs;
}

// ---------------------------------------------------------------------------------------------------
// The engine.

namespace {

constexpr std::uint32_t kResume = 1;  ///< event: node `arg` finishes its current layer now
/// A node is never more than one MoE layer ahead of another (it needs everyone's outputs), so per-layer
/// communication state lives in a ring of a few slots indexed by the global MoE-layer step.
constexpr std::size_t kSlots = 4;

enum class Msg : std::uint64_t { Output = 0, Scatter = 1, Gather = 2, Ring = 3, RdRound = 4, RdPre = 5, RdPost = 6 };

std::uint64_t make_tag(Msg kind, std::uint64_t step, std::uint64_t g) {
  return (g << 16) | (step << 4) | static_cast<std::uint64_t>(kind);
}
Msg tag_kind(std::uint64_t tag) { return static_cast<Msg>(tag & 0xF); }
std::uint64_t tag_step(std::uint64_t tag) { return (tag >> 4) & 0xFFF; }
std::uint64_t tag_g(std::uint64_t tag) { return tag >> 16; }

// MessageSink first: deliveries, the most frequent virtual call, then need no this-adjusting thunk.
class DecodeEngine final : public MessageSink, public EventHandler {
 public:
  DecodeEngine(const DecodeConfig& c, const RoutingTrace& t) : cfg_(c), trace_(t), dispatcher_(*c.placement) { setup(); }

  DecodeResult run() {
    for (std::int32_t n = 0; n < n_; ++n) run_node(n, 0);
    sim_.run();
    for (std::int32_t n = 0; n < (centralised_ ? 1 : n_); ++n) {
      MOESIM_CHECK(nodes_[static_cast<std::size_t>(n)].token == tokens_,
                   "node " + std::to_string(n) + " stopped before the last token: a deadlock in the decode engine");
    }
    DecodeResult r;
    r.tokens = tokens_;
    r.makespan = makespan_;
    r.tokens_per_second = makespan_ > 0 ? static_cast<double>(tokens_) / to_seconds(makespan_) : 0;
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
    SimTime done = 0;  ///< this node's own expert computation ends
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
  [[gnu::noinline]] void expert_span(std::int32_t n, std::int32_t e, bool filler, std::int64_t token, std::int64_t layer,
                                     SimTime a, SimTime b) {
    span(n, (filler ? "filler " : "expert ") + std::to_string(e), token, layer, a, b);
  }
  SimTime touch(std::int32_t n, std::size_t buffer, SimTime at, std::int32_t count, double bytes) {
    return residency_ ? residency_->acquire(n, buffer, at, count, bytes) : 0;
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
  SimTime attention_ = 0;  ///< one decoder layer's non-expert work, router and intra-node all-reduces included
  SimTime expert_ = 0;     ///< one routed expert, one layer
  SimTime expert_launch_ = 0;  ///< once per MoE layer a node computes experts in: the fused kernel set's launches
  SimTime combine_ = 0;
  SimTime head_ = 0;
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
  std::vector<ExpertStreamer> streamers_;  ///< per node, when experts stream from storage: its page cache
  std::vector<std::uint16_t> stream_ids_;  ///< scratch: the experts one compute_experts call reads
  std::vector<std::int32_t> dispatched_;  ///< per chosen expert of a layer: the node computing it
  std::vector<std::uint64_t> picked_;  ///< per expert: the stamp_ of the last compute_experts that listed it
  std::int64_t traced_tokens_ = 0;     ///< tokens whose spans go to the timeline (0 without one)
  std::int32_t arrivals_needed_ = -1;  ///< messages that complete a node's exchange; -1: recursive doubling
  std::uint64_t stamp_ = 0;  ///< compute_experts calls so far (picked_)
  std::vector<TokenRecord> per_token_;
  TokenRecord current_;  ///< node 0's token in progress
  std::int64_t sum_max_routed_ = 0;
  SimTime makespan_ = 0;
};

void DecodeEngine::setup() {
  const auto& a = *cfg_.arch;
  const auto& node = *cfg_.node;
  n_ = cfg_.nodes;
  MOESIM_CHECK(cfg_.placement->nodes == n_, "placement made for another node count");
  MOESIM_CHECK(trace_.header.layers == model::moe_layer_count(a) && trace_.header.experts == a.routed_experts &&
                   trace_.header.top_k == a.top_k,
               "trace does not match the model (check_trace_matches must run first)");
  tokens_ = cfg_.max_tokens > 0 ? std::min(cfg_.max_tokens, trace_.tokens()) : trace_.tokens();
  layers_ = static_cast<std::int32_t>(a.layers);
  experts_ = a.routed_experts;
  centralised_ = cfg_.attention == AttentionMode::Centralised && n_ > 1;
  std::int32_t j = 0;
  for (const auto& spec : a.layer_specs) moe_index_.push_back(spec.moe && a.is_moe() ? j++ : -1);
  moe_layers_ = j;
  {
    // What this run holds beside the trace, from the members below: a TokenRecord per replayed token, the
    // LRU stamps (an int64 per node, MoE layer and expert), the residency records (an int64 per node and
    // weight buffer: layers + experts x MoE layers at most) and each node's local expert list (an int32
    // per node and expert at most). Doubles, so absurd counts are refused rather than wrapped.
    const double n = static_cast<double>(n_), e = static_cast<double>(experts_);
    const double buffers = static_cast<double>(layers_) + e * static_cast<double>(moe_layers_);
    // Streaming adds a page-cache LRU per node: two int32 links and a flag per (MoE layer, expert).
    const double streamer = cfg_.streaming ? 9.0 * e * static_cast<double>(moe_layers_) : 0.0;
    const double bytes = static_cast<double>(tokens_) * static_cast<double>(sizeof(TokenRecord)) +
                         n * (8.0 * e * static_cast<double>(moe_layers_) + 8.0 * buffers + 4.0 * e + streamer);
    model::require_memory(units::bytes(bytes),
                          "replaying " + std::to_string(tokens_) + " tokens on " + std::to_string(n_) + " nodes (" +
                              std::to_string(moe_layers_) + " MoE layers x " + std::to_string(experts_) + " experts)",
                          "replay fewer tokens (--tokens) or nodes, or use a machine with more memory");
  }

  // The cost of each part from the shared cost model (moesim/model/step_cost.hpp), the node's devices
  // splitting every weight matrix as the analytic model counts them. Non-expert work, KV-cache reads and
  // attention are spread evenly over the decoder layers: the per-token total is exact (the analytic
  // model's), the split between layers approximate.
  const model::ModelCosts costs = model::model_costs(a, *cfg_.weights);
  const cost::LayerCosts lc(a, costs.parts, *cfg_.weights, node,
                            cost::DeviceSplit{node.devices.count, node.devices.count, false}, cfg_.activation_bytes,
                            &assumptions_);
  cost::profile_notes(node, *cfg_.weights, assumptions_);
  const double ko = lc.kernel_overhead();
  const bool tp = node.devices.count > 1;
  const cost::SeqWork w = lc.sequence(cfg_.context, 1);
  double misc = 0;  // one token's non-expert work on a node, seconds
  for (const auto& spec : a.layer_specs) {
    const bool moe = spec.moe && a.is_moe();
    misc += lc.attention(1, w) + lc.dense(1) + (moe ? lc.router(1) : 0.0) + lc.layer_overhead() +
            (lc.layer_kernels(spec, tp) - (moe ? cost::kKernels.combine : 0)) * ko;
  }
  // One engine step per token: the runtime's host time per step, spread over the layers like the rest.
  misc += lc.step_overhead();
  if (tp) {
    MOESIM_CHECK(cfg_.intra_link != nullptr, "a multi-device node needs its intra-node link");
    misc += model::tensor_parallel_allreduce_time(a, node, *cfg_.intra_link, cfg_.activation_bytes).base();
  }
  attention_ = to_sim_time(units::seconds(misc / static_cast<double>(layers_)));
  layer_bytes_ = costs.non_expert_bytes.base() / static_cast<double>(layers_);
  expert_bytes_ = costs.expert_bytes.base();
  // Each computed expert, and once per MoE layer the grouped launches of the fused mode (cost::ExpertExecution).
  switch (cfg_.experts) {
    case cost::ExpertExecution::Sequential:
    case cost::ExpertExecution::SequentialRouted:
      expert_ = to_sim_time(units::seconds(lc.expert(1) + lc.expert_kernels_time(cfg_.experts, 1)));
      break;
    case cost::ExpertExecution::Fused:
      expert_ = to_sim_time(units::seconds(lc.expert(1)));
      expert_launch_ = to_sim_time(units::seconds(lc.expert_kernels_time(cfg_.experts, 1)));
      break;
    case cost::ExpertExecution::Parallel:
      expert_ = to_sim_time(units::seconds(lc.expert_group(cfg_.experts, 1, 1)));
      break;
  }
  combine_ = to_sim_time(units::seconds(cost::kKernels.combine * ko));
  if (cfg_.lm_head) head_ = to_sim_time(units::seconds(lc.head(1)));

  // Messages.
  const double act = static_cast<double>(a.hidden) * cfg_.activation_bytes;
  out_bytes_ = static_cast<double>(a.top_k) * act;
  vector_bytes_ = act;
  ring_bytes_ = act / n_;  // each of the ring's steps sends 1/N of the vector (cost::ring_allreduce)
  ring_steps_ = static_cast<std::int32_t>(cost::ring_allreduce(act, n_).steps);
  const auto rd = cost::recursive_doubling_plan(n_);
  rd_pow2_ = static_cast<std::int32_t>(rd.pow2);
  rd_rounds_ = static_cast<std::int32_t>(rd.rounds);
  if (n_ > 1) {
    if (!cfg_.nic) throw UserError("a cluster of " + std::to_string(n_) + " nodes needs a NIC profile; give --nic");
    NetworkConfig nc;
    nc.nodes = n_;
    nc.bandwidth = cfg_.nic->bandwidth.value.base();
    nc.latency = to_sim_time(cfg_.nic->latency.value);
    nc.overhead = cfg_.nic->overhead ? to_sim_time(cfg_.nic->overhead->value) : 0;
    nc.contention = cfg_.contention;
    network_ = std::make_unique<Network>(sim_, nc, this);
    if (cfg_.transfers) network_->set_observer(cfg_.transfers);
  }

  // Residency records: one per decoder layer's non-expert weights, then the experts (per layer and
  // expert when unstacked, per expert when prestacked).
  if (cfg_.residency && node.residency) {
    const auto& r = *node.residency;
    ResidencyParams p{to_sim_time(r.unwire_after.value), to_sim_time(r.rewire_per_buffer.value),
                      r.rewire_bandwidth.value.base() / static_cast<double>(kPicosecondsPerSecond)};
    expert_buffer_base_ = static_cast<std::size_t>(layers_);
    const std::size_t expert_records = cfg_.packing == Packing::Prestacked
                                           ? static_cast<std::size_t>(experts_)
                                           : static_cast<std::size_t>(experts_ * moe_layers_);
    residency_ = std::make_unique<WeightResidency>(p, n_, expert_buffer_base_ + expert_records, cfg_.start_wired);
  } else if (cfg_.residency) {
    assumptions_.push_back(node.origin + " has no residency figures: weights stay wired (no re-wire cost)");
  }

  // Experts streamed from storage: each node reads through its own page cache (sim/streaming.hpp).
  if (cfg_.streaming) {
    if (cfg_.streaming->overlapped)
      throw UserError("the decode simulator charges serial streaming only (flash-moe's default); overlapped reads "
                      "share memory bandwidth with the GPU, which `moesim serve` models: use mode serial here");
    if (!a.is_moe()) throw UserError(a.id + " is dense: it has no experts to stream");
    streamers_.reserve(static_cast<std::size_t>(n_));
    for (std::int32_t n = 0; n < n_; ++n) streamers_.emplace_back(*cfg_.streaming, moe_layers_, experts_);
  }

  handler_ = sim_.add_handler(this);
  nodes_.resize(static_cast<std::size_t>(n_));
  top_k_ = trace_.header.top_k;
  for (auto& as : assignments_) {
    as.routed.resize(static_cast<std::size_t>(n_ * top_k_));
    as.count.resize(static_cast<std::size_t>(n_));
  }
  dispatched_.resize(static_cast<std::size_t>(top_k_));
  local_experts_.resize(static_cast<std::size_t>(n_));
  for (const auto& grp : cfg_.placement->groups) {
    for (const auto m : grp.members) {
      for (const auto e : grp.experts)
        local_experts_[static_cast<std::size_t>(m)].push_back(static_cast<std::int32_t>(e));
    }
  }
  for (auto& l : local_experts_) std::sort(l.begin(), l.end());
  lru_.assign(static_cast<std::size_t>(n_ * moe_layers_ * experts_), -1);
  picked_.assign(static_cast<std::size_t>(experts_), 0);
  // compute_experts' LRU keys: an age (a global MoE-layer step + 1) in 48 bits, a place among a node's
  // experts in 16.
  MOESIM_CHECK(tokens_ * moe_layers_ < (std::int64_t{1} << 47) && experts_ <= 65536, "too many steps or experts");
  traced_tokens_ = cfg_.timeline ? cfg_.timeline_tokens : 0;
  if (centralised_ || cfg_.collective == Collective::ExpertOutputs) arrivals_needed_ = n_ - 1;
  if (!centralised_ && cfg_.collective == Collective::RingAllReduce) arrivals_needed_ = ring_steps_;
  per_token_.reserve(static_cast<std::size_t>(tokens_));
}

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
  const auto g = static_cast<std::uint64_t>(token) * static_cast<std::uint64_t>(moe_layers_) +
                 static_cast<std::uint64_t>(j);
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
  // Experts run in turn chosen or not (cost::ExpertExecution::Sequential) compute every local one, as busy
  // full loading does.
  const bool all_local = cfg_.balancing == Balancing::BusyAll || cfg_.experts == cost::ExpertExecution::Sequential;
  if (cfg_.balancing != Balancing::None || all_local) {
    for (const auto e : routed) picked_[static_cast<std::size_t>(e)] = stamp;
  }
  if (all_local) {
    for (const auto e : local)
      if (picked_[static_cast<std::size_t>(e)] != stamp) scratch_.push_back(e);
  } else if (cfg_.balancing == Balancing::LruFill && static_cast<std::int32_t>(routed.size()) < as.max_routed) {
    // The spare quota goes to the least recently used local experts of this layer (ties: lowest id).
    // Each local expert gets one key, its age + 1 above 16 bits of its place in `local` (sorted; setup()
    // checks that both fit), so the smallest key is the oldest, ties to the lowest id, and a taken expert
    // gets the largest. Branch-free: the comparisons depend on the data, so branches would mispredict.
    const auto want = static_cast<std::size_t>(as.max_routed) - routed.size();
    constexpr std::uint64_t kTaken = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t f = 0; f < want; ++f) {
      std::uint64_t least = kTaken;
      for (std::size_t i = 0; i < local.size(); ++i) {
        const auto e = static_cast<std::size_t>(local[i]);
        const std::uint64_t taken = -static_cast<std::uint64_t>(picked_[e] == stamp);  // all ones, or 0
        least = std::min(least, (static_cast<std::uint64_t>(lru[e] + 1) << 16 | i) | taken);
      }
      if (least == kTaken) break;  // every local expert is already busy
      const std::int32_t best = local[least & 0xFFFFU];
      scratch_.push_back(best);
      picked_[static_cast<std::size_t>(best)] = stamp;
    }
  }
  node.stats.routed += static_cast<std::int64_t>(routed.size());
  node.stats.fillers += static_cast<std::int64_t>(scratch_.size());
  SimTime moe = 0;
  SimTime rewire_total = 0;
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
    if (traced && io > 0) span(n, "io", token, j, t, t + io);
    t += io;
    moe += io;
    node.stats.io += io;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t e = i < routed.size() ? routed[i] : scratch_[i - routed.size()];
    SimTime rewire = 0;
    std::size_t buffer = 0;
    if (residency_) {
      buffer =
          expert_buffer_base_ + (stacked ? static_cast<std::size_t>(e) : static_cast<std::size_t>(j * experts_ + e));
      rewire = touch(n, buffer, t, stacked ? 1 : 3, stacked ? stacked_bytes : expert_bytes_);
      if (rewire > 0) {
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
    if (driver && node.layer == 0) current_ = TokenRecord{t, 0, 0, 0, 0, 0};
    const std::int32_t l = node.layer;
    // Attention, router (and intra-node all-reduces) for this layer.
    SimTime a = attention_;
    if (residency_) {
      const SimTime rewire = touch(n, static_cast<std::size_t>(l), t, 1, layer_bytes_);
      if (rewire > 0) {
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
    if (works && head_ > 0) {
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

}  // namespace

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
  DecodeEngine engine(config, trace);
  return engine.run();
}

}  // namespace moesim::sim
