// The decode engine's policies by name (attention modes, balancings with the fillers each chooses, packings,
// collectives, strategy presets) and the analytic exchange each attention mode and collective corresponds to.
#include <algorithm>
#include <limits>

#include "moesim/model/collective.hpp"
#include "moesim/model/error.hpp"
#include "moesim/sim/decode.hpp"

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

namespace {

/// Busy full loading: every local expert not routed here.
void fill_every_local(const FillerContext& node, std::vector<std::int32_t>& fillers) {
  for (const auto e : node.local)
    if (node.picked[static_cast<std::size_t>(e)] != node.stamp) fillers.push_back(e);
}

/// Router-aided dynamic loading: the spare quota (the layer's maximum routed count less this node's) goes to
/// the least recently used local experts of this layer (ties: lowest id).
void fill_least_recently_used(const FillerContext& node, std::vector<std::int32_t>& fillers) {
  if (static_cast<std::int32_t>(node.routed) >= node.max_routed) return;
  // Each local expert gets one key, its age + 1 above 16 bits of its place in `local` (sorted; the engine's
  // setup checks that both fit), so the smallest key is the oldest, ties to the lowest id, and a taken expert
  // gets the largest. Branch-free: the comparisons depend on the data, so branches would mispredict.
  const auto want = static_cast<std::size_t>(node.max_routed) - node.routed;
  constexpr std::uint64_t kTaken = std::numeric_limits<std::uint64_t>::max();
  const auto& local = node.local;
  for (std::size_t f = 0; f < want; ++f) {
    std::uint64_t least = kTaken;
    for (std::size_t i = 0; i < local.size(); ++i) {
      const auto e = static_cast<std::size_t>(local[i]);
      const std::uint64_t taken = -static_cast<std::uint64_t>(node.picked[e] == node.stamp);  // all ones, or 0
      least = std::min(least, (static_cast<std::uint64_t>(node.last_used[e] + 1) << 16 | i) | taken);
    }
    if (least == kTaken) break;  // every local expert is already busy
    const std::int32_t best = local[least & 0xFFFFU];
    fillers.push_back(best);
    node.picked[static_cast<std::size_t>(best)] = node.stamp;
  }
}

std::vector<BalancingInfo>& balancing_registry() {
  static std::vector<BalancingInfo> all = {
      {Balancing::None, "none", "a node computes only the experts the router sent it (the paper's naive method)",
       [](const FillerContext&, std::vector<std::int32_t>&) {}},
      {Balancing::BusyAll, "busy",
       "busy full loading: every node computes every local expert every layer, unused outputs zeroed "
       "(seed 000 §4.2, L_B)",
       fill_every_local},
      {Balancing::LruFill, "lru-fill",
       "router-aided dynamic loading: every node computes the layer's maximum routed count, filling with its "
       "least-recently-used local experts (seed 000 §4.2, L_R)",
       fill_least_recently_used},
  };
  return all;
}

std::vector<CollectiveInfo>& collective_registry() {
  static std::vector<CollectiveInfo> all = {
      {Collective::ExpertOutputs, "expert-outputs",
       "every node sends every other node the layer's top-k output buffer (k x d_model activations; seed 000 "
       "Table 1 note a counts D_embed x 4 per layer)",
       model::Exchange::ExpertOutputs},
      {Collective::RingAllReduce, "ring-allreduce",
       "ring all-reduce of per-node partial sums: 2(N-1) steps of d_model/N activations (Thakur et al. 2005)",
       model::Exchange::RingAllReduce},
      {Collective::RecursiveDoubling, "recursive-doubling",
       "recursive-doubling all-reduce of partial sums: log2 N steps of d_model activations, +2 when N is not a "
       "power of two (Thakur et al. 2005)",
       model::Exchange::RecursiveDoubling},
  };
  return all;
}

}  // namespace

const std::vector<BalancingInfo>& balancings() { return balancing_registry(); }
const BalancingInfo& balancing_info(Balancing v) { return registered(balancings(), v, "balancing"); }
void register_balancing(BalancingInfo info) { add_entry(balancing_registry(), std::move(info), "balancing"); }

const std::vector<CollectiveInfo>& collectives() { return collective_registry(); }
void register_collective(CollectiveInfo info) { add_entry(collective_registry(), std::move(info), "collective"); }

const std::vector<NamedOption<Packing>>& packings() {
  static const std::vector<NamedOption<Packing>> all = {
      {Packing::Unstacked, "unstacked", "one weight buffer per matrix: 3 per expert and layer (seed 000 §3.2)"},
      {Packing::Prestacked, "prestacked",
       "one buffer per expert holding all its layers, so using it in any layer keeps it wired (seed 000 §4.1, P)"},
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
Balancing balancing_by_name(std::string_view n) { return entry_by_name(balancings(), n, "balancing").value; }
Packing packing_by_name(std::string_view n) { return by_name(packings(), n, "packing"); }
Collective collective_by_name(std::string_view n) { return entry_by_name(collectives(), n, "collective").value; }
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
  const auto* info = entry_of(collectives(), c);
  return info ? info->exchange : model::Exchange::ExpertOutputs;
}

}  // namespace moesim::sim
