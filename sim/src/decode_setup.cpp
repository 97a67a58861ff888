// DecodeEngine::setup(): the engine's shape, per-operation times and message sizes, computed once before
// the run (the model is the same for every token).
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

namespace moesim::sim::decode_detail {

void DecodeEngine::setup() {
  const auto& a = *cfg_.arch;
  n_ = cfg_.nodes;
  MOESIM_CHECK(cfg_.placement->nodes == n_, "placement made for another node count");
  MOESIM_CHECK(trace_.header.layers == model::moe_layer_count(a) && trace_.header.experts == a.routed_experts &&
                   trace_.header.top_k == a.top_k,
               "trace does not match the model (check_trace_matches must run first)");
  tokens_ = cfg_.max_tokens > 0 ? std::min(cfg_.max_tokens, trace_.tokens()) : trace_.tokens();
  layers_ = static_cast<std::int32_t>(a.layers);
  experts_ = a.routed_experts;
  centralised_ = cfg_.attention == AttentionMode::Centralised && n_ > 1;
  fill_ = balancing_info(cfg_.experts == cost::ExpertExecution::Sequential ? Balancing::BusyAll : cfg_.balancing).fill;
  if (n_ > 1 && !centralised_ && cfg_.collective != Collective::ExpertOutputs &&
      cfg_.collective != Collective::RingAllReduce && cfg_.collective != Collective::RecursiveDoubling) {
    throw UserError("collective '" + std::string(name_of(cfg_.collective)) +
                    "' has no message protocol in the decode engine (sim/src/decode.cpp: start_exchange); give another "
                    "--collective");
  }
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
  setup_costs();
  setup_network();
  setup_memory();
  setup_state();
}

/// The time of each part of a token, from the shared cost model.
void DecodeEngine::setup_costs() {
  const auto& a = *cfg_.arch;
  const auto& node = *cfg_.node;
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
      expert_ = to_sim_time(units::seconds(lc.expert(1, 1) + lc.expert_kernels_time(cfg_.experts, 1)));
      break;
    case cost::ExpertExecution::Fused:
      expert_ = to_sim_time(units::seconds(lc.expert(1, 1)));
      expert_launch_ = to_sim_time(units::seconds(lc.expert_kernels_time(cfg_.experts, 1)));
      break;
    case cost::ExpertExecution::Parallel:
      expert_ = to_sim_time(units::seconds(lc.expert_group(cfg_.experts, 1, 1, 1)));
      break;
  }
  combine_ = to_sim_time(units::seconds(cost::kKernels.combine * ko));
  if (cfg_.lm_head) head_ = to_sim_time(units::seconds(lc.head(1)));
}

/// The messages of the collectives, and the network between the nodes.
void DecodeEngine::setup_network() {
  const auto& a = *cfg_.arch;
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
    nc.bandwidth = cfg_.nic->bandwidth.value;
    nc.latency = to_sim_time(cfg_.nic->latency.value);
    nc.overhead = cfg_.nic->overhead ? to_sim_time(cfg_.nic->overhead->value) : SimTime{};
    nc.contention = cfg_.contention;
    network_ = std::make_unique<Network>(sim_, nc, this);
    if (cfg_.transfers) network_->set_observer(cfg_.transfers);
  }
}

/// Weight residency and experts streamed from storage.
void DecodeEngine::setup_memory() {
  const auto& a = *cfg_.arch;
  const auto& node = *cfg_.node;
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
      throw UserError(
          "the decode simulator charges serial streaming only (flash-moe's default); overlapped reads "
          "share memory bandwidth with the GPU, which `moesim serve` models: use mode serial here");
    if (!a.is_moe()) throw UserError(a.id + " is dense: it has no experts to stream");
    streamers_.reserve(static_cast<std::size_t>(n_));
    for (std::int32_t n = 0; n < n_; ++n) streamers_.emplace_back(*cfg_.streaming, moe_layers_, experts_);
  }
}

/// The per-node state of the run: assignments, local experts, LRU stamps.
void DecodeEngine::setup_state() {
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

}  // namespace moesim::sim::decode_detail
