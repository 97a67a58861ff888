#include "moesim/sim/placement.hpp"

#include <algorithm>
#include <numeric>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"

namespace moesim::sim {
namespace {

std::string range_text(const std::vector<std::int64_t>& ids) {
  // "0-7" for a run, "0,2,4" otherwise.
  if (ids.empty()) return "none";
  bool run = true;
  for (std::size_t i = 1; i < ids.size(); ++i) run = run && ids[i] == ids[i - 1] + 1;
  if (run && ids.size() > 2) return std::to_string(ids.front()) + "-" + std::to_string(ids.back());
  std::vector<std::string> s;
  s.reserve(ids.size());
  for (auto v : ids) s.push_back(std::to_string(v));
  return text::join(s, ",");
}

/// Splits [0, n) into `parts` consecutive runs whose sizes differ by at most one (larger ones last, so
/// that 3 nodes over 2 groups gives the authors' 1 + 2).
std::vector<std::int64_t> even_split(std::int64_t n, std::int64_t parts) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), n / parts);
  for (std::int64_t i = 0; i < n % parts; ++i) ++sizes[static_cast<std::size_t>(parts - 1 - i)];
  return sizes;
}

void require_positive(std::int64_t experts, std::int64_t nodes) {
  if (experts <= 0)
    throw UserError("placement: the model has no routed experts; expert placement applies to MoE models only");
  if (nodes <= 0) throw UserError("placement: --nodes must be at least 1");
}

Placement replicated_groups(std::int64_t experts, std::int64_t nodes, std::int64_t groups, std::string name) {
  Placement p{std::move(name), experts, nodes, {}};
  const std::int64_t g = std::min({groups, nodes, experts});
  const auto expert_sizes = even_split(experts, g);
  const auto member_sizes = even_split(nodes, g);
  std::int64_t e = 0, n = 0;
  for (std::int64_t i = 0; i < g; ++i) {
    ExpertGroup grp;
    for (std::int64_t j = 0; j < expert_sizes[static_cast<std::size_t>(i)]; ++j) grp.experts.push_back(e++);
    for (std::int64_t j = 0; j < member_sizes[static_cast<std::size_t>(i)]; ++j) grp.members.push_back(n++);
    p.groups.push_back(std::move(grp));
  }
  return p;
}

void validate(const Placement& p, const std::string& where) {
  std::vector<int> expert_seen(static_cast<std::size_t>(p.experts), 0), node_seen(static_cast<std::size_t>(p.nodes), 0);
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    const auto& g = p.groups[gi];
    const std::string at = where + ": $.groups[" + std::to_string(gi) + "]";
    if (g.experts.empty()) throw UserError(at + ".experts is empty; every group holds at least one expert");
    if (g.members.empty()) throw UserError(at + ".members is empty; every group needs at least one node");
    for (auto e : g.experts) {
      if (e < 0 || e >= p.experts) {
        throw UserError(at + ".experts: expert " + std::to_string(e) + " is out of range; the model has experts 0-" +
                        std::to_string(p.experts - 1));
      }
      if (expert_seen[static_cast<std::size_t>(e)]++) {
        throw UserError(at + ".experts: expert " + std::to_string(e) +
                        " is in two groups; groups must be disjoint (replicate a group by listing more members)");
      }
    }
    for (auto m : g.members) {
      if (m < 0 || m >= p.nodes) {
        throw UserError(at + ".members: node " + std::to_string(m) + " is out of range; the cluster has nodes 0-" +
                        std::to_string(p.nodes - 1));
      }
      if (node_seen[static_cast<std::size_t>(m)]++) {
        throw UserError(at + ".members: node " + std::to_string(m) + " is in two groups; each node holds one group");
      }
    }
  }
  for (std::int64_t e = 0; e < p.experts; ++e) {
    if (!expert_seen[static_cast<std::size_t>(e)]) {
      throw UserError(where + ": expert " + std::to_string(e) + " is in no group; every expert must be placed");
    }
  }
  for (std::int64_t n = 0; n < p.nodes; ++n) {
    if (!node_seen[static_cast<std::size_t>(n)]) {
      throw UserError(where + ": node " + std::to_string(n) + " is in no group; give every node a group");
    }
  }
}

}  // namespace

const ExpertGroup& Placement::group_of_node(std::int64_t node) const {
  for (const auto& g : groups) {
    if (std::find(g.members.begin(), g.members.end(), node) != g.members.end()) return g;
  }
  MOESIM_CHECK(false, "node " + std::to_string(node) + " belongs to no group");
  return groups.front();  // unreachable
}

std::int64_t Placement::max_experts_per_node() const {
  std::int64_t m = 0;
  for (const auto& g : groups) m = std::max<std::int64_t>(m, static_cast<std::int64_t>(g.experts.size()));
  return m;
}

std::string Placement::describe() const {
  std::vector<std::string> parts;
  for (const auto& g : groups) {
    parts.push_back("experts " + range_text(g.experts) + " on node" + (g.members.size() > 1 ? "s " : " ") +
                    range_text(g.members));
  }
  return name + ": " + text::join(parts, "; ");
}

namespace {

/// See placements(): LPT grouping by load, then replicas to the group with the most load per replica.
Placement load_aware(std::int64_t experts, std::int64_t nodes, const PlacementOptions& options) {
  const std::int64_t groups = std::min(options.groups, nodes);
  if (groups < 1) throw UserError("placement load-aware: --groups must be at least 1");
  if (options.groups > experts)
    throw UserError("placement load-aware: --groups " + std::to_string(options.groups) + " is more than the " +
                    std::to_string(experts) + " experts, so some group would hold none; give at most " +
                    std::to_string(experts));
  std::vector<double> load = options.expert_load;
  if (load.empty()) load.assign(static_cast<std::size_t>(experts), 1.0);
  MOESIM_CHECK(static_cast<std::int64_t>(load.size()) == experts, "one load per expert");
  const std::int64_t room = (experts + groups - 1) / groups;  // experts per group: what one node must hold
  std::vector<std::int64_t> order(static_cast<std::size_t>(experts));
  for (std::int64_t e = 0; e < experts; ++e) order[static_cast<std::size_t>(e)] = e;
  // Heaviest first; equal loads keep id order, so uniform loads give contiguous-looking groups.
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return load[static_cast<std::size_t>(a)] > load[static_cast<std::size_t>(b)];
  });
  Placement p{"load-aware", experts, nodes, std::vector<ExpertGroup>(static_cast<std::size_t>(groups))};
  std::vector<double> group_load(static_cast<std::size_t>(groups), 0.0);
  for (const auto e : order) {
    std::size_t best = 0;
    for (std::size_t g = 1; g < group_load.size(); ++g) {
      const bool room_g = static_cast<std::int64_t>(p.groups[g].experts.size()) < room;
      const bool room_best = static_cast<std::int64_t>(p.groups[best].experts.size()) < room;
      if (room_g && (!room_best || group_load[g] < group_load[best])) best = g;
    }
    p.groups[best].experts.push_back(e);
    group_load[best] += load[static_cast<std::size_t>(e)];
  }
  for (auto& g : p.groups) std::sort(g.experts.begin(), g.experts.end());
  std::vector<std::int64_t> replicas(static_cast<std::size_t>(groups), 1);
  for (std::int64_t extra = nodes - groups; extra > 0; --extra) {
    std::size_t best = 0;
    for (std::size_t g = 1; g < replicas.size(); ++g) {
      if (group_load[g] / static_cast<double>(replicas[g]) > group_load[best] / static_cast<double>(replicas[best]))
        best = g;
    }
    ++replicas[best];
  }
  std::int64_t node = 0;
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    for (std::int64_t r = 0; r < replicas[g]; ++r) p.groups[g].members.push_back(node++);
  }
  validate(p, "load-aware placement");
  return p;
}

}  // namespace

namespace {

/// The built-in placements, each with its implementation.
std::vector<PlacementInfo> builtin_placements() {
  // Names a node-per-expert placement cannot serve: more nodes than experts would leave a node empty.
  auto fits = [](std::string_view name, std::int64_t experts, std::int64_t nodes) {
    if (nodes > experts) {
      throw UserError("placement " + std::string(name) + ": " + std::to_string(nodes) + " nodes but only " +
                      std::to_string(experts) +
                      " experts, so some node would hold none; use --placement replicated-groups");
    }
  };
  return {
      {"replicated-groups",
       "the authors' scheme (seed 000): experts split into --groups consecutive groups (default 2), nodes "
       "spread over the groups (extra nodes to the later groups), a group's chosen experts dealt to its "
       "replicas in turn. 2 nodes: two halves; 3 nodes: 0-7 on one node, 8-15 on two; 4 nodes: 2 + 2",
       [](std::int64_t experts, std::int64_t nodes, const PlacementOptions& options) {
         if (options.groups < 1) throw UserError("placement replicated-groups: --groups must be at least 1");
         // More groups than nodes is clamped (the default 2 groups on one node is one group holding all); more
         // groups than experts cannot be meant: a group would hold no expert.
         if (options.groups > experts)
           throw UserError("placement replicated-groups: --groups " + std::to_string(options.groups) +
                           " is more than the " + std::to_string(experts) +
                           " experts, so some group would hold none; give at most " + std::to_string(experts));
         return replicated_groups(experts, nodes, options.groups, "replicated-groups");
       }},
      {"contiguous", "each node holds a consecutive block of experts, no replication (needs nodes <= experts)",
       [fits](std::int64_t experts, std::int64_t nodes, const PlacementOptions&) {
         fits("contiguous", experts, nodes);
         return replicated_groups(experts, nodes, nodes, "contiguous");
       }},
      {"round-robin", "expert e on node e mod N, no replication (needs nodes <= experts)",
       [fits](std::int64_t experts, std::int64_t nodes, const PlacementOptions&) {
         fits("round-robin", experts, nodes);
         Placement p{"round-robin", experts, nodes, {}};
         for (std::int64_t n = 0; n < nodes; ++n) {
           ExpertGroup g;
           for (std::int64_t e = n; e < experts; e += nodes) g.experts.push_back(e);
           g.members.push_back(n);
           p.groups.push_back(std::move(g));
         }
         return p;
       }},
      {"load-aware",
       "experts split into --groups groups whose measured loads are balanced (largest load first into the lightest "
       "group with room, LPT), and every node beyond one per group replicates the group with the most load per "
       "replica (after DeepSeek's EPLB). The load is measured on the trace being replayed; without one it is uniform",
       load_aware},
      {"custom", "groups and their member nodes from a JSON file (--placement-file)", {}},
  };
}

std::vector<PlacementInfo>& registry() {
  static std::vector<PlacementInfo> all = builtin_placements();
  return all;
}

}  // namespace

const std::vector<PlacementInfo>& placements() { return registry(); }

void register_placement(PlacementInfo info) {
  for (const auto& p : registry())
    if (p.name == info.name) throw UserError("placement '" + info.name + "' is registered already");
  registry().push_back(std::move(info));
}

Placement make_placement(std::string_view name, std::int64_t experts, std::int64_t nodes,
                         const PlacementOptions& options) {
  require_positive(experts, nodes);
  std::vector<std::string> names;
  for (const auto& p : placements()) {
    if (p.name == name && p.make) return p.make(experts, nodes, options);
    names.push_back(p.name);
  }
  if (name == "custom") throw UserError("placement custom: give the groups with --placement-file FILE.json");
  throw UserError("unknown placement '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid placements: " + text::join(names));
}

Placement load_placement(const std::string& path, std::int64_t experts, std::int64_t nodes) {
  require_positive(experts, nodes);
  const nlohmann::json doc = json::load_file(path);
  const json::Node root(doc, path);
  root.expect_only({"groups", "description"});
  Placement p{"custom", experts, nodes, {}};
  for (const auto& gn : root.elements("groups")) {
    gn.expect_only({"experts", "members"});
    ExpertGroup g;
    for (const auto& e : gn.elements("experts")) {
      if (!e.raw().is_number_integer()) throw e.error("is not an integer expert id");
      g.experts.push_back(e.raw().get<std::int64_t>());
    }
    for (const auto& m : gn.elements("members")) {
      if (!m.raw().is_number_integer()) throw m.error("is not an integer node id");
      g.members.push_back(m.raw().get<std::int64_t>());
    }
    p.groups.push_back(std::move(g));
  }
  validate(p, path);
  return p;
}

Placement resolve_placement(std::string_view name, std::int64_t experts, std::int64_t nodes,
                            const PlacementOptions& options, const std::string& placement_file) {
  return placement_file.empty() ? make_placement(name, experts, nodes, options)
                                : load_placement(placement_file, experts, nodes);
}

Dispatcher::Dispatcher(const Placement& p)
    : placement_(&p), group_of_expert_(static_cast<std::size_t>(p.experts), -1), dealt_(p.groups.size(), 0) {
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    for (const auto e : p.groups[gi].experts)
      group_of_expert_[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(gi);
  }
  for (const auto g : group_of_expert_) MOESIM_CHECK(g >= 0, "placement leaves an expert without a group");
}

std::vector<std::int64_t> dispatch(const Placement& p, const std::vector<std::int64_t>& chosen) {
  Dispatcher d(p);
  std::vector<std::vector<std::int32_t>> lists(static_cast<std::size_t>(p.nodes));
  d.assign(std::span<const std::int64_t>(chosen), lists);
  std::vector<std::int64_t> load;
  load.reserve(lists.size());
  for (const auto& l : lists) load.push_back(static_cast<std::int64_t>(l.size()));
  return load;
}

double exact_expected_active_steps(const Placement& p, std::int64_t top_k) {
  // The loops of exact_expected_active below: for each t < top_k and group, j over 0..top_k and m over
  // 0..min(group size, top_k); plus the binomials, top_k multiplications for each of a group's min(size,
  // top_k) + 1 entries. Doubles: the product may exceed 64 bits.
  const double k = static_cast<double>(top_k);
  double steps = 0;
  for (const auto& g : p.groups) {
    const double m = std::min(static_cast<double>(g.experts.size()), k) + 1;
    steps += k * (k + 1) * m + m * k;
  }
  return steps;
}

namespace {

double exact_expected_active(const Placement& p, std::int64_t top_k) {
  // binom[n][m] as long double: C(512, 10) ~ 3e20 is exact enough (64-bit mantissa) for a ratio.
  auto binom = [](std::int64_t n, std::int64_t m) {
    long double r = 1;
    for (std::int64_t i = 1; i <= m; ++i) r = r * static_cast<long double>(n - m + i) / static_cast<long double>(i);
    return r;
  };
  const long double all = binom(p.experts, top_k);
  // C(s_g, m) for m = 0..top_k, per group, computed once (not inside the t loop).
  std::vector<std::vector<long double>> group_binom;
  for (const auto& g : p.groups) {
    const auto s = static_cast<std::int64_t>(g.experts.size());
    std::vector<long double> b(static_cast<std::size_t>(top_k + 1), 0);
    for (std::int64_t m = 0; m <= std::min(s, top_k); ++m) b[static_cast<std::size_t>(m)] = binom(s, m);
    group_binom.push_back(std::move(b));
  }
  long double expectation = 0;
  std::vector<long double> ways(static_cast<std::size_t>(top_k + 1)), next(ways.size());
  for (std::int64_t t = 0; t < top_k; ++t) {
    // ways[j] = number of ways to choose j experts from the groups seen so far, each within its cap.
    std::fill(ways.begin(), ways.end(), 0.0L);
    ways[0] = 1;
    for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
      const auto& g = p.groups[gi];
      const auto s = static_cast<std::int64_t>(g.experts.size());
      const std::int64_t cap = std::min(s, t * static_cast<std::int64_t>(g.members.size()));
      std::fill(next.begin(), next.end(), 0.0L);
      for (std::int64_t j = 0; j <= top_k; ++j) {
        if (ways[static_cast<std::size_t>(j)] == 0) continue;
        for (std::int64_t m = 0; m <= cap && j + m <= top_k; ++m) {
          next[static_cast<std::size_t>(j + m)] +=
              ways[static_cast<std::size_t>(j)] * group_binom[gi][static_cast<std::size_t>(m)];
        }
      }
      std::swap(ways, next);
    }
    expectation += 1 - ways[static_cast<std::size_t>(top_k)] / all;  // P(max > t)
  }
  return static_cast<double>(expectation);
}

}  // namespace

ExpectedActive expected_active_experts(const Placement& p, std::int64_t top_k) {
  MOESIM_CHECK(top_k >= 1 && top_k <= p.experts, "top_k out of range for the placement");
  const double steps = exact_expected_active_steps(p, top_k);
  if (steps <= kExactExpectedActiveSteps) return {exact_expected_active(p, top_k), ""};
  // Sampled instead: each token costs ~experts + top_k steps (sampled_max_active_experts: the partial
  // shuffle and the dispatch), so the tokens are what 2e7 steps buy (about 0.1 s), at least 200 and at
  // most 20,000; the seed is fixed so that the figure is reproducible.
  const double per_token = static_cast<double>(p.experts + top_k);
  const auto tokens = static_cast<std::int64_t>(std::clamp(2e7 / per_token, 200.0, 20000.0));
  const double value = sampled_max_active_experts(p, top_k, tokens, kSampledExpectedActiveSeed);
  return {value, "E[active] is estimated from " + std::to_string(tokens) + " uniformly routed random tokens (seed " +
                     std::to_string(kSampledExpectedActiveSeed) + "), not computed exactly: the exact sum for " +
                     std::to_string(p.experts) + " experts, top-" + std::to_string(top_k) + " and " +
                     std::to_string(p.groups.size()) + " groups would take " + text::printf("%.2g", steps) +
                     " steps (the bound is " + text::printf("%.0g", kExactExpectedActiveSteps) + ")"};
}

double expected_max_active_experts(const Placement& p, std::int64_t top_k) {
  return expected_active_experts(p, top_k).value;
}

double sampled_max_active_experts(const Placement& p, std::int64_t top_k, std::int64_t tokens, std::uint64_t seed) {
  MOESIM_CHECK(top_k >= 1 && top_k <= p.experts && tokens > 0, "bad arguments to sampled_max_active_experts");
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(p.experts));
  std::iota(ids.begin(), ids.end(), 0);
  std::int64_t sum = 0;
  std::vector<std::int64_t> chosen(static_cast<std::size_t>(top_k));
  // One dispatcher for all tokens (it resets what a token touched), as dispatch() would give per token.
  Dispatcher d(p);
  std::vector<std::vector<std::int32_t>> lists(static_cast<std::size_t>(p.nodes));
  for (std::int64_t t = 0; t < tokens; ++t) {
    // Partial Fisher-Yates: the first top_k entries are a uniform random k-subset in random order.
    for (std::int64_t i = 0; i < top_k; ++i) {
      std::uniform_int_distribution<std::int64_t> pick(i, p.experts - 1);
      std::swap(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(pick(rng))]);
      chosen[static_cast<std::size_t>(i)] = ids[static_cast<std::size_t>(i)];
    }
    for (auto& l : lists) l.clear();
    d.assign(std::span<const std::int64_t>(chosen), lists);
    std::size_t most = 0;
    for (const auto& l : lists) most = std::max(most, l.size());
    sum += static_cast<std::int64_t>(most);
  }
  return static_cast<double>(sum) / static_cast<double>(tokens);
}

}  // namespace moesim::sim
