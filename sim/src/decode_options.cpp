// The decode engine's policies by name (attention modes, balancings, packings, collectives, strategy
// presets) and the analytic exchange each attention mode and collective corresponds to.
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

}  // namespace moesim::sim
