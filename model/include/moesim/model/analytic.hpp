#pragma once
// The analytic cost model: Equation 1 of seed 000 (Chen et al., RACS '24), generalised.
//
// Per decode token, on the busiest node (expert parallelism across nodes, attention and router
// replicated on every node — the paper's decentralised design, its Figure 7):
//
//   time = Σ over the token's kernels of max(bytes / bandwidth, FLOPs / peak) + their launch overheads  (1a)
//        + latency × messages per MoE layer × MoE layers + bytes / link bandwidth                  (1b)
// where the kernels read the non-expert layer weights, E[active] × MoE layers experts [, the LM head]
// [, the KV cache at context] [, the recurrent state], and do 2 FLOP per weight read plus attention over the
// context. (1a) is one decode step at batch 1 of the shared cost model (moesim/model/step_cost.hpp), which
// the decode and serving simulators price the same way; with a profile that gives no kernel overheads and
// no efficiency table every kernel is memory-bound at batch 1 and (1a) is seed 000's max(load, compute).
//
// E[active] = E[max over nodes of experts executed per MoE layer] comes from the placement
// (sim::expected_max_active_experts), never from a table. Everything else comes from the architecture
// and the hardware profile. With one node of several devices (a DGX), the weights are split over the
// devices (tensor parallel) and each layer pays two all-reduces over the intra-node link (Megatron-LM,
// Shoeybi et al. 2019, §3).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/cost.hpp"
#include "moesim/model/expert_streaming.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/model/units.hpp"

namespace moesim::model {

/// How nodes combine expert outputs in each MoE layer.
enum class Exchange {
  ExpertOutputs,  ///< decentralised (seed 000 §4.3): one exchange per layer; each chosen expert's output crosses once
  Centralised,    ///< seed 000 §3.2 / Figure 3: a driver sends inputs and gathers outputs, two exchanges per layer
  RingAllReduce,  ///< a ring all-reduce of the per-node partial sums: 2(N-1) steps
  RecursiveDoubling,  ///< recursive-doubling all-reduce of the partial sums: log2 N steps (+2 if N is no power of 2)
};

using ExchangeInfo = NamedOption<Exchange>;
const std::vector<ExchangeInfo>& exchanges();
/// UserError listing the valid names if unknown.
Exchange exchange_by_name(std::string_view name);
std::string_view exchange_name(Exchange e);

/// What the analytic model needs from an architecture at a precision, summed over layers once: a sweep
/// evaluates the same model at many points, and re-walking the layers each time would dominate.
struct ModelCosts {
  const Architecture* arch = nullptr;
  const Precision* weights = nullptr;
  std::int64_t moe_layers = 0;
  double non_expert_params = 0;   ///< per-layer weights other than routed experts, all layers
  double expert_params = 0;       ///< one routed expert, one layer
  double head_params = 0;         ///< LM head (the embedding matrix when tied)
  units::Bytes non_expert_bytes;  ///< non_expert_params at the weight precision
  units::Bytes expert_bytes;      ///< one routed expert, one layer, at the weight precision
  units::Bytes head_bytes;
  units::Bytes recurrent_state;  ///< Gated DeltaNet state per sequence (fp32)
  cost::LayerParts parts;        ///< per layer, for the shared cost model
  ComponentParams params;        ///< parameter_counts of the whole model (the memory fit)
};
ModelCosts model_costs(const Architecture& a, const Precision& weights);

struct DecodeScenario {
  const Architecture* arch = nullptr;
  const ModelCosts* costs = nullptr;  ///< optional: model_costs(*arch, *weights), computed if absent
  const NodeProfile* node = nullptr;
  const NicProfile* nic = nullptr;         ///< between nodes; required when nodes > 1
  const NicProfile* intra_link = nullptr;  ///< between the devices of a node; required when devices > 1
  std::int64_t nodes = 1;
  const Precision* weights = nullptr;
  double activation_bytes = 2.0;          ///< bytes per activation element on the wire and in the KV cache (bf16)
  double expected_active_experts = 0;     ///< E[max experts executed on one node per MoE layer]
  std::int64_t max_experts_per_node = 0;  ///< experts the fullest node holds per MoE layer (memory fit)
  std::int64_t context = 0;               ///< tokens already in the KV cache (0: Equation 1, no attention over context)
  bool include_lm_head = false;           ///< Equation 1 omits the LM head; set to count it
  Exchange exchange = Exchange::ExpertOutputs;
  cost::ExpertExecution experts = cost::ExpertExecution::Fused;  ///< how a node runs its experts (kernel launches)
  /// Routed experts streamed from storage (null: resident). Serial only: each MoE layer reads its experts
  /// after the attention and before computing them, at cost::expected_hit_rate's page-cache hit rate.
  const cost::StreamingParams* streaming = nullptr;
};

struct DecodeEstimate {
  units::Bytes bytes_per_token;  ///< bytes the busiest node reads per token
  units::Flops flops_per_token;  ///< FLOPs the busiest node does per token
  units::Duration load;          ///< bytes / memory bandwidth (all bytes at the full bandwidth)
  units::Duration compute;       ///< FLOPs / peak rate (0 when the profile gives no peak for compute_type)
  units::Duration overhead;      ///< kernel launches and devices.layer_overhead × decoder layers
  units::Duration gpu;           ///< Σ kernel rooflines + overhead
  std::int64_t messages = 0;     ///< latency-bound steps per token between nodes
  units::Duration latency;       ///< messages × NIC latency
  units::Bytes wire_bytes;       ///< bytes each node sends per token
  units::Duration transfer;      ///< wire bytes / NIC bandwidth
  units::Duration intra_node;    ///< tensor-parallel all-reduces inside a multi-device node
  units::Duration io;            ///< routed experts read from storage (streaming; 0 when resident)
  double cache_hit_rate = -1;    ///< streaming: the page-cache hit rate assumed (−1 without streaming)
  units::Duration time;          ///< per token
  double tokens_per_second = 0;
  /// On the fullest node: its devices × cost::device_weight_bytes + the KV cache at `context` + the recurrent state
  units::Bytes memory_needed;
  units::Bytes memory_available;  ///< the node's memory
  bool fits = false;
  std::string bound;         ///< "memory" or "compute": which term of (1a) is larger
  std::string compute_type;  ///< dtype the matmuls run in (cost::compute_path)
  /// What the estimate assumes (a missing efficiency table, kernel overhead or peak; kernel sizes outside
  /// the measured bands), one line each.
  std::vector<std::string> notes;
};

/// Equation 1, generalised (see the file comment). UserError when the profiles lack a needed figure.
DecodeEstimate estimate_decode(const DecodeScenario& s);

/// Per-token time of tensor parallelism inside one node of several devices: two ring all-reduces of one
/// d_model activation vector per decoder layer (Megatron-LM, Shoeybi et al. 2019, §3) over `link`.
units::Duration tensor_parallel_allreduce_time(const Architecture& a, const NodeProfile& node, const NicProfile& link,
                                               double activation_bytes);

}  // namespace moesim::model
