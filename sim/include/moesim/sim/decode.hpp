#pragma once
// Expert-parallel decode, replayed token by token and layer by layer through a cluster (issue 3).
//
// Per token and decoder layer, on each node (seed 000 §3–4):
//   attention + router  on every node (decentralised, Fig. 7) or on the driver, node 0 (centralised, Fig. 3);
//   dispatch            the router's chosen experts go to the nodes holding them (the placement and its
//                       dispatch rule, sim/placement.hpp); centralised: the driver sends each node the input;
//   experts             each node computes its experts, each a roofline max(bytes / bandwidth, FLOPs /
//                       peak), with the launch overheads of the expert-execution mode (cost::ExpertExecution:
//                       per expert, or once per layer when fused), plus the re-wire time of any weight
//                       buffer that went cold;
//   exchange            decentralised: every node sends its expert outputs to every other (or an
//                       all-reduce of partial sums: ring or recursive doubling); centralised: every node
//                       returns its outputs to the driver;
//   combine             the weighted sum, then the next layer.
// The layer ends on a node when it has every output it needs: the slowest node sets the pace (the
// fork-join of Fig. 2), messages queue on NICs (sim/network.hpp), and cold weights cost re-wiring
// (sim/residency.hpp). Balancing decides what else a node computes: nothing (naive), every local expert
// (P-L_B, busy full loading, §4.2), or up to the layer's maximum count with its least-recently-used
// experts (P-L_R-D, router-aided dynamic loading, §4.2).
//
// Every per-operation time comes from the shared cost model (moesim/model/step_cost.hpp), the same
// function the analytic model sums and the serving simulator prices steps with; the simulator adds only
// what is dynamic: NIC contention, residency, balancing and waiting.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/sim/event_core.hpp"
#include "moesim/sim/placement.hpp"
#include "moesim/sim/streaming.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::sim {

enum class AttentionMode { Centralised, Decentralised };
enum class Balancing { None, BusyAll, LruFill };
enum class Packing { Unstacked, Prestacked };
/// How decentralised nodes combine expert outputs each MoE layer.
enum class Collective { ExpertOutputs, RingAllReduce, RecursiveDoubling };

using moesim::NamedOption;
const std::vector<NamedOption<AttentionMode>>& attention_modes();
const std::vector<NamedOption<Packing>>& packings();

/// What a balancing sees of one node in one MoE layer of one token, to choose the experts the node computes
/// besides those routed to it ("fillers").
struct FillerContext {
  std::span<const std::int32_t> local;  ///< the experts the node holds, ascending
  /// Per expert id: the last MoE-layer step (token x MoE layers + layer) in which this node computed it in
  /// this layer; -1: never.
  const std::int64_t* last_used = nullptr;
  /// picked[e] == stamp: expert e is computed already (routed, or a filler chosen before). A balancing marks
  /// each filler it adds.
  std::uint64_t* picked = nullptr;
  std::uint64_t stamp = 0;
  std::size_t routed = 0;       ///< experts routed to this node
  std::int32_t max_routed = 0;  ///< the most experts routed to any node in this layer
};

/// A balancing as the registry holds it: `fill` appends the node's fillers (seed 000 §4.2) to `fillers`.
struct BalancingInfo {
  Balancing value;
  std::string name;
  std::string description;
  void (*fill)(const FillerContext& node, std::vector<std::int32_t>& fillers);
};
/// The registered balancings, in registration order (--help lists them); the built-in ones first.
const std::vector<BalancingInfo>& balancings();
/// The registered balancing of value `v`; InternalError if none (a Balancing not registered).
const BalancingInfo& balancing_info(Balancing v);
/// Adds a balancing: --balancing and the scenario key then accept its name, and a decode run with its value
/// calls its `fill`. UserError for a name or value taken. Not thread-safe: register before running.
void register_balancing(BalancingInfo info);

/// A collective as the registry holds it, with the analytic model's exchange that charges the same messages
/// with contention off (the oracle test's pairing). The decode engine runs the message protocol of each
/// built-in one (decode.cpp: start_exchange).
struct CollectiveInfo {
  Collective value;
  std::string name;
  std::string description;
  model::Exchange exchange;
};
const std::vector<CollectiveInfo>& collectives();
/// Adds a collective's name (as register_balancing). Only values the decode engine implements can run.
void register_collective(CollectiveInfo info);

/// The paper's named methods (seed 000 Table 3): their packing, balancing and attention placement.
struct StrategyPreset {
  std::string name;
  std::string description;
  Packing packing;
  Balancing balancing;
  AttentionMode attention;
};
const std::vector<StrategyPreset>& strategies();

/// Look-ups by name; UserError listing the valid names (and the nearest) when unknown.
AttentionMode attention_mode_by_name(std::string_view name);
Balancing balancing_by_name(std::string_view name);
Packing packing_by_name(std::string_view name);
Collective collective_by_name(std::string_view name);
const StrategyPreset& strategy_by_name(std::string_view name);
std::string_view name_of(AttentionMode v);
std::string_view name_of(Balancing v);
std::string_view name_of(Packing v);
std::string_view name_of(Collective v);

/// The analytic model's exchange that charges the same messages as this decode setting with
/// contention off: the oracle test's pairing.
model::Exchange analytic_exchange(AttentionMode a, Collective c);

/// Spans of the timeline (Chrome trace): one track per node compute device and per NIC.
class TimelineObserver {
 public:
  virtual ~TimelineObserver() = default;
  /// `what`: "attention", "expert 5", "filler 3", "rewire", "combine", "lm head"; `token` and
  /// `layer` locate it.
  virtual void on_compute(std::int32_t node, std::string_view what, std::int64_t token, std::int64_t layer,
                          SimTime start, SimTime end) = 0;
  /// Node 0 finished `token` (called for every token, traced or not).
  virtual void on_token(std::int64_t token, SimTime start, SimTime end) = 0;
};

struct DecodeConfig {
  const model::Architecture* arch = nullptr;
  const model::Precision* weights = nullptr;
  const model::NodeProfile* node = nullptr;
  const model::NicProfile* nic = nullptr;         ///< required for more than one node
  const model::NicProfile* intra_link = nullptr;  ///< required for a node of several devices
  const Placement* placement = nullptr;
  std::int32_t nodes = 1;
  AttentionMode attention = AttentionMode::Decentralised;
  Balancing balancing = Balancing::LruFill;
  Packing packing = Packing::Prestacked;
  Collective collective = Collective::ExpertOutputs;
  cost::ExpertExecution experts = cost::ExpertExecution::Fused;  ///< how a node runs its experts (kernel launches)
  bool contention = true;         ///< flows share bandwidth and sender overheads queue (sim/network.hpp)
  bool residency = true;          ///< model weight wiring when the node profile describes it
  bool start_wired = true;        ///< weights wired at t = 0 (after a warm-up), else every buffer starts cold
  double activation_bytes = 2.0;  ///< bytes per activation on the wire (bf16)
  std::int64_t context = 0;       ///< tokens in the KV cache (as `moesim estimate --context`)
  bool lm_head = false;           ///< count the LM head (Equation 1 omits it)
  /// Routed experts streamed from storage (sim/streaming.hpp), serially: before a node computes a layer's
  /// experts it reads them through its own page cache (an LRU per node). Absent: experts are resident.
  std::optional<StreamingParams> streaming;
  std::int64_t max_tokens = 0;  ///< replay at most this many tokens of the trace; 0 = all
  TimelineObserver* timeline = nullptr;
  class TransferObserver* transfers = nullptr;
  std::int64_t timeline_tokens = 0;  ///< report spans for the first tokens only (0: none)
};

/// One decode token as node 0 saw it (node 0 is the driver in centralised mode).
struct TokenRecord {
  SimTime start{};
  SimTime end{};
  SimTime misc{};    ///< attention, router, combine, LM head, intra-node all-reduces: busy on non-expert work
  SimTime moe{};     ///< computing experts, re-wiring included
  SimTime rewire{};  ///< of moe: re-wiring cold weight buffers
  std::int32_t max_routed = 0;  ///< largest routed-expert count over nodes and MoE layers of this token
  [[nodiscard]] SimTime comm() const { return end - start - misc - moe; }  ///< waiting on the network and peers
};

struct NodeStats {
  SimTime misc{};
  SimTime moe{};
  SimTime rewire{};
  SimTime io{};              ///< of moe: reading streamed experts from storage
  std::int64_t routed = 0;   ///< expert computations the router asked of this node
  std::int64_t fillers = 0;  ///< extra computations the balancing added
  std::int64_t rewires = 0;  ///< cold buffers re-wired
  double bytes_sent = 0;
  SimTime uplink_busy{};
};

struct DecodeResult {
  std::int64_t tokens = 0;
  SimTime makespan{};  ///< end of the last token on node 0
  double tokens_per_second = 0;
  /// Mean over (token, MoE layer) of the largest number of routed experts any node computes: the
  /// measured counterpart of Equation 1's E[#exec. experts node/layer].
  double mean_max_routed = 0;
  /// Mean over (token, MoE layer, node) of experts computed, fillers included.
  double mean_executed_per_node = 0;
  std::vector<TokenRecord> per_token;
  std::vector<NodeStats> nodes;
  double cache_hit_rate = -1;  ///< streaming: page-cache hits over all nodes' reads (−1 without streaming)
  std::uint64_t events = 0;
  std::uint64_t messages = 0;
  std::vector<std::string> assumptions;  ///< defaults the run relied on (absent profile figures, ...)
};

/// The largest cluster the simulator replays (message tags hold a collective step in 12 bits).
inline constexpr std::int32_t kMaxNodes = 2048;

/// Replays `trace` (which must match the architecture: check_trace_matches) through the configured
/// cluster. UserError for a configuration it cannot run (missing profile figures, a placement for another
/// node count); MOESIM_CHECK for internal invariants.
DecodeResult run_decode(const DecodeConfig& config, const RoutingTrace& trace);

}  // namespace moesim::sim
