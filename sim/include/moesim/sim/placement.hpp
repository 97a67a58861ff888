#pragma once
// Expert placement: which node holds which experts, and which replica serves a chosen expert.
//
// A placement is a set of disjoint expert groups that together cover all experts. Each group is held by
// one or more member nodes (replicas), and every node belongs to exactly one group. Dispatch follows the
// authors' code (seed 000; github.com/MBZUAI-Research-Office/research_muchi, dbrx/configs "dlb_groups"):
// the i-th chosen expert of a group (i = 0, 1, ... in the order the router lists them) goes to member
// i mod r, so a group's load is spread evenly over its r replicas.
//
// Placements are named and registered (STYLE.md practice 2): `placements()` lists them for --help.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::sim {

struct ExpertGroup {
  std::vector<std::int64_t> experts;  ///< expert ids held by every member
  std::vector<std::int64_t> members;  ///< node ids holding a replica
};

struct Placement {
  std::string name;          ///< registry name it was made by, or "custom"
  std::int64_t experts = 0;  ///< routed experts per layer
  std::int64_t nodes = 0;
  std::vector<ExpertGroup> groups;

  /// The group a node belongs to.
  [[nodiscard]] const ExpertGroup& group_of_node(std::int64_t node) const;
  /// Experts held by the node with the most experts (what its memory must hold per MoE layer).
  [[nodiscard]] std::int64_t max_experts_per_node() const;
  /// One line, e.g. "2 groups: experts 0-7 on node 0; experts 8-15 on nodes 1,2".
  [[nodiscard]] std::string describe() const;
};

/// Options of the named placements.
struct PlacementOptions {
  std::int64_t groups = 2;  ///< replicated-groups, load-aware: number of expert groups
  /// load-aware: measured load of each expert (any unit, e.g. times chosen); empty = uniform.
  std::vector<double> expert_load;
};

/// A placement as the registry holds it: its name, the line --help prints, and the implementation that
/// makes it (UserError for a combination it cannot serve). `make` is empty for "custom", which is read
/// from a file (load_placement).
struct PlacementInfo {
  std::string name;
  std::string description;
  std::function<Placement(std::int64_t experts, std::int64_t nodes, const PlacementOptions& options)> make;
};

/// The registered placements, in registration order, for --help, error messages and make_placement. The
/// built-in ones are registered on first use (register_builtin_placements).
const std::vector<PlacementInfo>& placements();
/// Adds a placement: every command that takes --placement (estimate, simulate, sweep) then offers it, and
/// its --help lists it. UserError for a name already taken. Not thread-safe: register before running.
void register_placement(PlacementInfo info);

/// Makes a named placement for `experts` experts on `nodes` nodes. UserError for an unknown name
/// (listing the valid ones) or a combination it cannot serve (e.g. more nodes than experts for
/// contiguous), saying which placement would.
Placement make_placement(std::string_view name, std::int64_t experts, std::int64_t nodes,
                         const PlacementOptions& options = {});

/// The placement a command asked for: a placement file means a custom placement (whatever `name` says);
/// otherwise the named one. make_placement("custom") without a file says to give one.
Placement resolve_placement(std::string_view name, std::int64_t experts, std::int64_t nodes,
                            const PlacementOptions& options, const std::string& placement_file);

/// Reads a custom placement: {"groups": [{"experts": [0,1,...], "members": [0, 2]}, ...]}; checks that
/// the groups are disjoint, cover every expert, and that every node is a member of exactly one group.
Placement load_placement(const std::string& path, std::int64_t experts, std::int64_t nodes);

/// The i-mod-r dispatch rule with the expert -> group lookup precomputed, for replaying millions of
/// token-layers: assign() is O(top_k) with no allocation.
class Dispatcher {
 public:
  explicit Dispatcher(const Placement& p);
  /// out[i] = the node that computes chosen[i], for one token-layer whose router chose `chosen` (router
  /// order). `out` must hold chosen.size() entries.
  template <class Id>
  void nodes_for(std::span<const Id> chosen, std::int32_t* out) {
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      const auto g = static_cast<std::size_t>(group_of_expert_[static_cast<std::size_t>(chosen[i])]);
      const auto& members = placement_->groups[g].members;
      // dealt_[g] counts modulo the replicas by wrapping, not by an integer division per expert.
      auto& dealt = dealt_[g];
      out[i] = static_cast<std::int32_t>(members[static_cast<std::size_t>(dealt)]);
      if (static_cast<std::size_t>(++dealt) == members.size()) dealt = 0;
    }
    // Reset only the groups touched: O(top_k), not O(groups).
    for (const auto e : chosen) dealt_[static_cast<std::size_t>(group_of_expert_[static_cast<std::size_t>(e)])] = 0;
  }
  /// Appends to out[node] the experts that node computes for one token-layer. `out` must have one
  /// (cleared) vector per node.
  template <class Id>
  void assign(std::span<const Id> chosen, std::vector<std::vector<std::int32_t>>& out) {
    nodes_.resize(chosen.size());
    nodes_for(chosen, nodes_.data());
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      out[static_cast<std::size_t>(nodes_[i])].push_back(static_cast<std::int32_t>(chosen[i]));
    }
  }
  [[nodiscard]] std::int64_t nodes() const { return placement_->nodes; }

 private:
  const Placement* placement_;
  std::vector<std::int32_t> group_of_expert_;
  std::vector<std::int64_t> dealt_;
  std::vector<std::int32_t> nodes_;
};

/// Experts each node executes for one token whose router chose `chosen` (expert ids, router order),
/// under the i-mod-r dispatch rule. Result has one entry per node.
std::vector<std::int64_t> dispatch(const Placement& p, const std::vector<std::int64_t>& chosen);

/// Exact E[max over nodes of experts executed per MoE layer] for one token whose router picks top_k
/// distinct experts uniformly at random. This is Equation 1's E[#exec. experts node/layer] (seed 000):
/// the slowest node sets the layer's time. Computed as sum_{t>=0} P(max > t), where P(max <= t) counts
/// the ways to pick m_g experts from each group g with m_g <= t * r_g (a group's load per replica is
/// ceil(m_g / r_g)), sum m_g = top_k: a product of truncated binomial series, O(groups * top_k^2).
double expected_max_active_experts(const Placement& p, std::int64_t top_k);

/// The basic steps (multiply-adds) the exact sum above takes for `p` and `top_k`.
double exact_expected_active_steps(const Placement& p, std::int64_t top_k);

/// Beyond this many steps the exact sum is replaced by the sampled estimate. Measured on the development VM
/// (AMD EPYC, 2 shared cores, Release build): 16,384 experts top-360 on 2 nodes, 9.4e7 counted steps, took
/// 0.05 s (the count is an upper bound: the inner loop stops at j + m = top_k). Beyond it the cost grows as
/// top_k^3 x groups: 65,536 experts top-32,768 on 4 nodes would count ~7e13 steps, about ten hours. Every zoo
/// model is far below it (Qwen3.5's 512 experts top-10 over 512 groups: 6e5 steps). It also keeps the
/// binomials in long double's range (C(n, k) overflows it only for k in the thousands, far beyond the bound).
inline constexpr double kExactExpectedActiveSteps = 1e8;
inline constexpr std::uint64_t kSampledExpectedActiveSeed = 1;

struct ExpectedActive {
  double value = 0;
  std::string note;  ///< empty when exact; else how it was estimated, for the notes of the output
};

/// expected_max_active_experts when exact_expected_active_steps is within kExactExpectedActiveSteps;
/// beyond it, sampled_max_active_experts with a fixed seed and a bounded number of tokens, and a note
/// saying so. expected_max_active_experts(p, k) is this function's value.
ExpectedActive expected_active_experts(const Placement& p, std::int64_t top_k);

/// The same expectation estimated by routing `tokens` random tokens through dispatch(): a check on the
/// closed form, and what the simulator does with a trace.
double sampled_max_active_experts(const Placement& p, std::int64_t top_k, std::int64_t tokens, std::uint64_t seed);

}  // namespace moesim::sim
