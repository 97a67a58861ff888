#include "moesim/model/analytic.hpp"

#include <algorithm>
#include <cmath>

#include "moesim/model/collective.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::model {

const std::vector<ExchangeInfo>& exchanges() {
  static const std::vector<ExchangeInfo> all = {
      {Exchange::ExpertOutputs, "expert-outputs",
       "decentralised attention and router on every node (seed 000 §4.3, Fig. 7): one exchange per MoE layer; "
       "each chosen expert's output (d_model activations) crosses the network once (Table 1 note a)"},
      {Exchange::Centralised, "centralised",
       "one driver node runs attention and router (seed 000 §3.2, Fig. 3): two exchanges per MoE layer, "
       "expert inputs out and outputs back"},
      {Exchange::RingAllReduce, "ring-allreduce",
       "ring all-reduce of per-node partial sums: 2(N-1) latency steps and 2(N-1)/N × d_model activations "
       "per node (Thakur, Rabenseifner & Gropp 2005)"},
      {Exchange::RecursiveDoubling, "recursive-doubling",
       "recursive-doubling all-reduce of per-node partial sums: log2 N steps of d_model activations, +2 when N is "
       "not a power of two (Thakur, Rabenseifner & Gropp 2005; the simulator overlaps that extra step and can be a "
       "step "
       "faster)"},
  };
  return all;
}

Exchange exchange_by_name(std::string_view name) { return by_name(exchanges(), name, "exchange"); }

std::string_view exchange_name(Exchange e) { return name_in(exchanges(), e); }

ModelCosts model_costs(const Architecture& a, const Precision& weights) {
  ModelCosts c;
  c.arch = &a;
  c.weights = &weights;
  const ComponentParams params = parameter_counts(a);
  const std::int64_t non_expert = non_expert_layer_params(a);
  // The LM head reads its whole matrix each token; tied embeddings read the embedding matrix.
  const std::int64_t head = params.lm_head > 0 ? params.lm_head : params.embedding;
  c.moe_layers = moe_layer_count(a);
  c.non_expert_params = static_cast<double>(non_expert);
  c.expert_params = a.is_moe() ? static_cast<double>(params_per_routed_expert(a)) : 0.0;
  c.head_params = static_cast<double>(head);
  c.non_expert_bytes = param_bytes(non_expert, others_precision(weights));
  c.expert_bytes = a.is_moe() ? routed_expert_bytes(a, weights) : units::bytes(0);
  c.head_bytes = param_bytes(head, others_precision(weights));
  c.recurrent_state = recurrent_state_bytes(a);
  c.parts = cost::layer_parts(a, weights);
  c.params = params;
  return c;
}

DecodeEstimate estimate_decode(const DecodeScenario& s) {
  MOESIM_CHECK(s.arch && s.node && s.weights, "estimate_decode needs an architecture, a node and a precision");
  MOESIM_CHECK(s.nodes >= 1, "nodes must be >= 1 (the command line checks this)");
  MOESIM_CHECK(!s.costs || (s.costs->arch == s.arch && s.costs->weights == s.weights),
               "DecodeScenario::costs were computed for another model or precision");
  const Architecture& a = *s.arch;
  const NodeProfile& node = *s.node;
  const ModelCosts local = s.costs ? ModelCosts{} : model_costs(a, *s.weights);
  const ModelCosts& c = s.costs ? *s.costs : local;
  const auto devices = static_cast<double>(node.devices.count);
  if (s.nodes > 1 && !s.nic) {
    throw UserError("a cluster of " + std::to_string(s.nodes) +
                    " nodes needs a NIC profile; give --nic (see `moesim hw`)");
  }
  if (node.devices.count > 1 && !s.intra_link) {
    throw UserError(node.origin + ": $.intra_node_link is missing; a node of " + std::to_string(node.devices.count) +
                    " devices needs the link between them, e.g. {\"nic\": \"nvlink4\", \"source\": \"...\"}");
  }

  DecodeEstimate r;
  const double e_active = a.is_moe() ? s.expected_active_experts : 0.0;
  const auto moe_layers = static_cast<double>(c.moe_layers);

  // (1a) bytes read per token on the busiest node: every node holds and reads the non-expert layer
  // weights (attention, router, norms, shared experts, dense FFN layers), plus its share of experts.
  units::Bytes weight_bytes = c.non_expert_bytes + c.expert_bytes * (e_active * moe_layers);
  if (s.include_lm_head) weight_bytes += c.head_bytes;
  // The new token attends to the cached context and to itself (cost::LayerCosts::sequence).
  const units::Bytes kv = kv_bytes_at_context(a, s.context + 1, s.activation_bytes);
  // Gated DeltaNet layers read and write their fixed recurrent state every token.
  r.bytes_per_token = weight_bytes + kv + c.recurrent_state * 2.0;

  // FLOPs: 2 per matmul weight (multiply + add) for the weights read above, plus attention over the
  // context (models_and_routing.md §A.4).
  double matmul_params = c.non_expert_params + e_active * moe_layers * c.expert_params;
  if (s.include_lm_head) matmul_params += c.head_params;
  r.flops_per_token = units::flops(2.0 * matmul_params) + attention_context_flops(a, s.context + 1);

  // The time: one decode step at batch 1 priced by the shared cost model (moesim/model/step_cost.hpp), the
  // node's devices splitting every weight matrix (tensor parallel; one device: the whole node).
  const cost::DeviceSplit split{node.devices.count, node.devices.count, false};
  const cost::LayerCosts lc(a, c.parts, *s.weights, node, split, s.activation_bytes, &r.notes);
  r.compute_type = lc.path().dtype;
  const cost::SeqWork w = lc.sequence(s.context, 1);
  const bool tp = node.devices.count > 1;
  const double ko = lc.kernel_overhead();
  // The experts the busiest node runs per MoE layer, one token each: E[active], or every local one when
  // they run in turn chosen or not (seed 001's FlexFlow).
  const double executed =
      s.experts == cost::ExpertExecution::Sequential ? static_cast<double>(s.max_experts_per_node) : e_active;
  double experts = 0;
  if (a.is_moe() && executed > 0) {
    experts = s.experts == cost::ExpertExecution::Fused || s.experts == cost::ExpertExecution::Parallel
                  ? lc.expert_group(s.experts, executed, executed, e_active)
                  : executed * lc.expert(1, 1) + lc.expert_kernels_time(s.experts, executed);
  }
  // Every decoder layer's attention and (averaged) dense part, the MoE layers' router and experts.
  const double layers = static_cast<double>(a.layers);
  double roofs = layers * (lc.attention(1, w) + lc.dense(1)) + moe_layers * (lc.router(1) + experts);
  const double kernels = moe_layers * lc.layer_kernels(true, tp) + (layers - moe_layers) * lc.layer_kernels(false, tp);
  if (s.include_lm_head) roofs += lc.head(1);
  // One engine step per token at batch 1: the runtime's host time per step (scheduling, sampling, host
  // sync; the serving simulator pays it per step too). The MoE layers' expert kernels and the LM head's
  // are launched inside `roofs` (expert_group, expert_kernels_time, head): reported with the other
  // launches, counted once.
  double launches_in_roofs =
      a.is_moe() && executed > 0 ? moe_layers * lc.expert_kernels_time(s.experts, executed) : 0.0;
  if (s.include_lm_head) launches_in_roofs += cost::kKernels.head * ko;
  const double overhead = kernels * ko + lc.layer_overhead() * static_cast<double>(a.layers) + lc.step_overhead();
  r.overhead = units::seconds(overhead + launches_in_roofs);
  r.gpu = units::seconds(roofs + overhead);
  // The two terms of (1a), reported beside the time: every byte at the full bandwidth, every FLOP at the
  // full peak of the node's devices.
  r.load = r.bytes_per_token / (node.bandwidth().value * devices);
  r.compute = lc.path().has_peak ? r.flops_per_token / (node.peak(r.compute_type).value * devices) : units::seconds(0);
  r.bound = r.load >= r.compute ? "memory" : "compute";

  // (1b) communication between nodes, per MoE layer.
  const double act = static_cast<double>(a.hidden) * s.activation_bytes;  // one d_model vector, bytes
  if (s.nodes > 1 && a.is_moe()) {
    // One collective per MoE layer (moesim/model/collective.hpp).
    cost::CollectiveShape per_layer;
    switch (s.exchange) {
      case Exchange::ExpertOutputs:
        per_layer = cost::expert_outputs(act, a.top_k);  // seed 000 Table 1 note (a): D_embed × 4 (top-k) × precision
        break;
      case Exchange::Centralised:
        per_layer = cost::scatter_gather(act, a.top_k);
        break;
      case Exchange::RingAllReduce:
        per_layer = cost::ring_allreduce(act, s.nodes);
        break;
      case Exchange::RecursiveDoubling:
        per_layer = cost::recursive_doubling(act, s.nodes);
        break;
    }
    r.messages = per_layer.steps * c.moe_layers;
    r.latency = s.nic->latency.value * static_cast<double>(r.messages);
    r.wire_bytes = units::bytes(per_layer.bytes * moe_layers);
    r.transfer = r.wire_bytes / s.nic->bandwidth.value;
  }
  if (node.devices.count > 1) r.intra_node = tensor_parallel_allreduce_time(a, node, *s.intra_link, s.activation_bytes);

  // Routed experts streamed from storage (moesim/model/expert_streaming.hpp): serial, so each MoE layer
  // waits for its reads; the busiest node reads the experts it runs, a fraction of them from the page cache.
  if (s.streaming && a.is_moe() && executed > 0) {
    if (s.streaming->overlapped)
      throw UserError(
          "the analytic model charges serial streaming only (flash-moe's default); overlapped reads "
          "share memory bandwidth with the GPU, which `moesim serve` models: use mode serial here");
    r.cache_hit_rate = cost::expected_hit_rate(*s.streaming, c.moe_layers, a.routed_experts);
    const double hits = r.cache_hit_rate * executed;
    r.io = units::seconds(moe_layers * cost::read_seconds(*s.streaming, hits, executed - hits));
    r.notes.push_back("streaming: page-cache hit rate " + std::to_string(std::lround(100 * r.cache_hit_rate)) +
                      "% assumed (an LRU under uniform routing); skewed real routing hits more often: `moesim "
                      "serve` or `simulate` replays a routing trace through the page cache");
  }

  r.time = r.gpu + r.latency + r.transfer + r.intra_node + r.io;
  r.tokens_per_second = 1.0 / r.time.base();

  // Memory on the fullest node: its devices' weights (cost::device_weight_bytes, the devices tensor-parallel
  // as above, each holding 1/devices of the node's max_experts_per_node experts of every MoE layer), one
  // sequence's KV cache at the context and its recurrent state.
  // Streamed experts live in the OS page cache, not in the model's memory.
  const double expert_fraction = a.is_moe() && !s.streaming ? static_cast<double>(s.max_experts_per_node) /
                                                                  static_cast<double>(a.routed_experts) / devices
                                                            : 0.0;
  r.memory_needed = units::bytes(devices * cost::device_weight_bytes(a, c.params, c.moe_layers, *s.weights, split,
                                                                     expert_fraction, cost::whole_model(a))) +
                    kv + c.recurrent_state;
  r.memory_available = node.memory_total();
  r.fits = r.memory_needed <= r.memory_available;
  return r;
}

units::Duration tensor_parallel_allreduce_time(const Architecture& a, const NodeProfile& node, const NicProfile& link,
                                               double activation_bytes) {
  if (node.devices.count <= 1) return units::seconds(0);
  const double act = static_cast<double>(a.hidden) * activation_bytes;
  const double allreduces = 2.0 * static_cast<double>(a.layers);
  return cost::ring_allreduce(act, node.devices.count).time(link.latency.value, link.bandwidth.value, allreduces);
}

}  // namespace moesim::model
