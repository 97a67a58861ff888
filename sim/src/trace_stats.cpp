#include "moesim/sim/trace_stats.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "moesim/model/error.hpp"
#include "moesim/sim/trace_io.hpp"

namespace moesim::sim {

namespace {

/// A least-recently-used set of expert ids over a fixed universe: an intrusive doubly-linked list in arrays,
/// O(1) per access, no allocation after construction.
class LruSet {
 public:
  LruSet(std::size_t universe, std::size_t capacity)
      : capacity_(capacity), prev_(universe + 1), next_(universe + 1), in_(universe, 0), head_(universe) {
    prev_[head_] = next_[head_] = head_;
  }
  [[nodiscard]] bool contains(std::size_t e) const { return in_[e] != 0; }
  /// Moves a cached expert to the most-recent end.
  void touch(std::size_t e) {
    unlink(e);
    push_front(e);
  }
  /// Inserts an uncached expert, evicting the least recent one when full.
  void insert(std::size_t e) {
    if (size_ == capacity_) {
      const std::size_t victim = prev_[head_];
      unlink(victim);
      in_[victim] = 0;
      --size_;
    }
    push_front(e);
    in_[e] = 1;
    ++size_;
  }

 private:
  void unlink(std::size_t e) {
    next_[prev_[e]] = next_[e];
    prev_[next_[e]] = prev_[e];
  }
  void push_front(std::size_t e) {
    next_[e] = next_[head_];
    prev_[e] = head_;
    prev_[next_[head_]] = e;
    next_[head_] = e;
  }
  std::size_t capacity_;
  std::size_t size_ = 0;
  std::vector<std::size_t> prev_, next_;
  std::vector<char> in_;
  std::size_t head_;
};

double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

/// The sizes every statistic of one layer loops over.
struct StatsDims {
  std::size_t T = 0, L = 0, k = 0, E = 0;
  std::size_t W = 0, B = 0;              ///< window and batch, in tokens
  std::size_t windows = 0, batches = 0;  ///< whole windows and batches in the trace
  double kd = 0, Ed = 0;
};

/// Buffers reused from layer to layer, sized once.
struct StatsScratch {
  std::vector<std::uint16_t> ids;  ///< the layer's chosen experts, token-major
  std::vector<std::int32_t> counts;
  std::vector<char> mark;
  std::vector<std::int64_t> stamp;
  std::vector<std::int32_t> node_of;  ///< ids' node under the placement
  std::vector<std::int64_t> per_node;
  std::vector<char> missed;
};

/// What the placement's statistics accumulate over the layers.
struct NodeTotals {
  std::optional<Dispatcher> fast;
  std::size_t N = 0;
  std::vector<double> node_sum;
  std::vector<std::int64_t> node_max;
};

void check_stats_options(const RoutingTrace& trace, const TraceStatsOptions& o) {
  const auto& h = trace.header;
  MOESIM_CHECK(trace.tokens() > 0 && h.layers > 0 && h.top_k > 0, "compute_trace_stats needs a validated trace");
  if (o.window < 1) throw UserError("--window must be at least 1 token");
  if (o.batch < 1) throw UserError("--batch must be at least 1 token");
  for (const auto c : o.cache_sizes) {
    if (c < h.top_k || c > h.experts) {
      throw UserError("--cache-sizes: " + std::to_string(c) + " is outside [top_k, experts] = [" +
                      std::to_string(h.top_k) + ", " + std::to_string(h.experts) +
                      "]; a token needs its top_k experts resident at once, and more than all experts is pointless");
    }
  }
  if (o.placement && o.placement->experts != h.experts) {
    throw UserError("placement is for " + std::to_string(o.placement->experts) + " experts but the trace has " +
                    std::to_string(h.experts) + "; make the placement for the trace's model");
  }
}

/// The previous token of the same request (-1 for a request's first), found once for all layers: traces may
/// interleave requests.
std::vector<std::int64_t> previous_token_of_request(const RoutingTrace& trace, std::size_t T) {
  std::vector<std::int64_t> prev(T, -1);
  std::unordered_map<std::uint32_t, std::int64_t> last;
  last.reserve(1024);
  for (std::size_t t = 0; t < T; ++t) {
    auto [it, fresh] = last.try_emplace(trace.request[t], static_cast<std::int64_t>(t));
    if (!fresh) {
      prev[t] = it->second;
      it->second = static_cast<std::int64_t>(t);
    }
  }
  return prev;
}

/// Load max/mean per window, and over the whole trace; the most chosen expert.
void layer_load_stats(const StatsDims& d, double window_mean_load, StatsScratch& x, TraceLayerStats& ls) {
  const auto& ids = x.ids;
  auto& counts = x.counts;
  std::vector<std::int64_t> total(d.E, 0);
  double sum_ratio = 0;
  for (std::size_t w = 0; w < d.windows; ++w) {
    std::fill(counts.begin(), counts.end(), 0);
    for (std::size_t i = w * d.W * d.k; i < (w + 1) * d.W * d.k; ++i) ++counts[ids[i]];
    const double r = static_cast<double>(*std::max_element(counts.begin(), counts.end())) / window_mean_load;
    sum_ratio += r;
    ls.load_max_mean_worst = std::max(ls.load_max_mean_worst, r);
  }
  ls.load_max_mean = sum_ratio / static_cast<double>(d.windows);
  for (std::size_t i = 0; i < d.T * d.k; ++i) ++total[ids[i]];
  const auto top = std::max_element(total.begin(), total.end());
  ls.load_max_mean_all = static_cast<double>(*top) / (static_cast<double>(d.T) * d.kd / d.Ed);
  // An expert appears at most once per token-layer, so a count of T means every token chose it.
  ls.top_expert = top - total.begin();
  ls.top_expert_share = static_cast<double>(*top) / static_cast<double>(d.T);
  ls.degenerate = d.T >= 2 && static_cast<std::size_t>(*top) == d.T;
}

/// Reuse against the request's previous token: mark its experts, count, unmark. O(k) per token.
void layer_reuse_stats(const StatsDims& d, const std::vector<std::int64_t>& prev, std::int64_t pairs_count,
                       StatsScratch& x, TraceLayerStats& ls) {
  const std::size_t k = d.k;
  std::int64_t shared = 0, first = 0, any = 0;
  for (std::size_t t = 0; t < d.T; ++t) {
    if (prev[t] < 0) continue;
    const std::uint16_t* p = x.ids.data() + static_cast<std::size_t>(prev[t]) * k;
    const std::uint16_t* c = x.ids.data() + t * k;
    for (std::size_t s = 0; s < k; ++s) x.mark[p[s]] = 1;
    std::int64_t n = 0;
    for (std::size_t s = 0; s < k; ++s) n += x.mark[c[s]];
    for (std::size_t s = 0; s < k; ++s) x.mark[p[s]] = 0;
    shared += n;
    any += n > 0 ? 1 : 0;
    first += p[0] == c[0] ? 1 : 0;
  }
  const double pairs = static_cast<double>(pairs_count);
  ls.reuse = ratio(static_cast<double>(shared), pairs * d.kd);
  ls.first_choice_repeat = ratio(static_cast<double>(first), pairs);
  ls.any_overlap = ratio(static_cast<double>(any), pairs);
}

/// LRU hit rate for a cache of `capacity` experts: per token, hits first (they become most recent), then the
/// misses are loaded, so a token never evicts one of its own experts (capacity >= top_k is checked).
double layer_lru_hit(const StatsDims& d, std::int64_t capacity, StatsScratch& x) {
  LruSet lru(d.E, static_cast<std::size_t>(capacity));
  std::int64_t hits = 0;
  for (std::size_t t = 0; t < d.T; ++t) {
    const std::uint16_t* cur = x.ids.data() + t * d.k;
    for (std::size_t s = 0; s < d.k; ++s) {
      x.missed[s] = static_cast<char>(!lru.contains(cur[s]));
      if (!x.missed[s]) {
        ++hits;
        lru.touch(cur[s]);
      }
    }
    for (std::size_t s = 0; s < d.k; ++s) {
      if (x.missed[s]) lru.insert(cur[s]);
    }
  }
  return static_cast<double>(hits) / (static_cast<double>(d.T) * d.kd);
}

/// Distinct experts per batch of B consecutive tokens (a stamp per expert avoids clearing a set).
double layer_distinct_per_batch(const StatsDims& d, StatsScratch& x) {
  std::int64_t distinct = 0;
  std::fill(x.stamp.begin(), x.stamp.end(), -1);
  for (std::size_t b = 0; b < d.batches; ++b) {
    for (std::size_t i = b * d.B * d.k; i < (b + 1) * d.B * d.k; ++i) {
      if (x.stamp[x.ids[i]] != static_cast<std::int64_t>(b)) {
        x.stamp[x.ids[i]] = static_cast<std::int64_t>(b);
        ++distinct;
      }
    }
  }
  return static_cast<double>(distinct) / static_cast<double>(d.batches);
}

/// The layer under the placement: experts on the busiest node per token and per batch, node load over
/// windows; accumulates each node's executions and maximum into `nt`.
void layer_node_stats(const StatsDims& d, NodeTotals& nt, StatsScratch& x, TraceLayerStats& ls) {
  const std::size_t T = d.T, k = d.k, E = d.E;
  auto& node_of = x.node_of;
  auto& per_node = x.per_node;
  auto& stamp = x.stamp;
  for (std::size_t t = 0; t < T; ++t)
    nt.fast->nodes_for(std::span<const std::uint16_t>(x.ids.data() + t * k, k), node_of.data() + t * k);
  // Per token: max over nodes of experts executed (Equation 1's busiest node).
  std::int64_t sum_max = 0;
  for (std::size_t t = 0; t < T; ++t) {
    const std::int32_t* nd = node_of.data() + t * k;
    for (std::size_t s = 0; s < k; ++s) per_node[static_cast<std::size_t>(nd[s])] = 0;
    std::int64_t mx = 0;
    for (std::size_t s = 0; s < k; ++s) mx = std::max(mx, ++per_node[static_cast<std::size_t>(nd[s])]);
    sum_max += mx;
    for (std::size_t s = 0; s < k; ++s) {
      const auto n = static_cast<std::size_t>(nd[s]);
      nt.node_max[n] = std::max(nt.node_max[n], per_node[n]);
    }
  }
  for (std::size_t i = 0; i < T * k; ++i) nt.node_sum[static_cast<std::size_t>(node_of[i])] += 1.0;
  ls.max_active = static_cast<double>(sum_max) / static_cast<double>(T);

  // Per batch: distinct experts each node must run (a node loads an expert once for the whole batch).
  std::fill(stamp.begin(), stamp.end(), -1);
  std::int64_t sum_batch_max = 0;
  for (std::size_t b = 0; b < d.batches; ++b) {
    std::fill(per_node.begin(), per_node.end(), 0);
    for (std::size_t i = b * d.B * k; i < (b + 1) * d.B * k; ++i) {
      const auto n = static_cast<std::size_t>(node_of[i]);
      auto& s = stamp[n * E + x.ids[i]];
      if (s != static_cast<std::int64_t>(b)) {
        s = static_cast<std::int64_t>(b);
        ++per_node[n];
      }
    }
    sum_batch_max += *std::max_element(per_node.begin(), per_node.end());
  }
  ls.max_active_batch = static_cast<double>(sum_batch_max) / static_cast<double>(d.batches);

  // Node load over windows, max/mean (mean = window * k / nodes).
  double sum_ratio = 0;
  for (std::size_t w = 0; w < d.windows; ++w) {
    std::fill(per_node.begin(), per_node.end(), 0);
    for (std::size_t i = w * d.W * k; i < (w + 1) * d.W * k; ++i) ++per_node[static_cast<std::size_t>(node_of[i])];
    const double mean = static_cast<double>(d.W) * d.kd / static_cast<double>(nt.N);
    sum_ratio += static_cast<double>(*std::max_element(per_node.begin(), per_node.end())) / mean;
  }
  ls.node_load_max_mean = sum_ratio / static_cast<double>(d.windows);
}

/// Overall: plain means over layers (every layer carries the same number of tokens).
void average_over_layers(TraceStats& st, std::size_t cache_sizes, std::size_t L) {
  TraceLayerStats& ov = st.overall;
  ov.lru_hit.assign(cache_sizes, 0.0);
  for (const auto& ls : st.layers) {
    ov.load_max_mean += ls.load_max_mean;
    ov.load_max_mean_worst = std::max(ov.load_max_mean_worst, ls.load_max_mean_worst);
    ov.load_max_mean_all += ls.load_max_mean_all;
    ov.reuse += ls.reuse;
    ov.first_choice_repeat += ls.first_choice_repeat;
    ov.any_overlap += ls.any_overlap;
    for (std::size_t i = 0; i < ls.lru_hit.size(); ++i) ov.lru_hit[i] += ls.lru_hit[i];
    ov.distinct_per_batch += ls.distinct_per_batch;
    ov.max_active += ls.max_active;
    ov.max_active_batch += ls.max_active_batch;
    ov.node_load_max_mean += ls.node_load_max_mean;
    ov.top_expert_share = std::max(ov.top_expert_share, ls.top_expert_share);
    ov.degenerate = ov.degenerate || ls.degenerate;
  }
  const double Ld = static_cast<double>(L);
  ov.load_max_mean /= Ld;
  ov.load_max_mean_all /= Ld;
  ov.reuse /= Ld;
  ov.first_choice_repeat /= Ld;
  ov.any_overlap /= Ld;
  for (auto& x : ov.lru_hit) x /= Ld;
  ov.distinct_per_batch /= Ld;
  ov.max_active /= Ld;
  ov.max_active_batch /= Ld;
  ov.node_load_max_mean /= Ld;
}

/// Per node: experts held, mean and maximum active, share of the executions; and the uniform-routing
/// expectation to compare with.
TracePlacementStats placement_stats(const Placement& placement, const StatsDims& d, const NodeTotals& nt,
                                    const TraceLayerStats& ov, std::int64_t top_k) {
  TracePlacementStats ps;
  ps.description = placement.describe();
  const double Ld = static_cast<double>(d.L);
  const double executions = static_cast<double>(d.T) * Ld * d.kd;
  for (std::size_t n = 0; n < nt.N; ++n) {
    TraceNodeStats ns;
    ns.experts_held = static_cast<std::int64_t>(placement.group_of_node(static_cast<std::int64_t>(n)).experts.size());
    ns.mean_active = nt.node_sum[n] / (static_cast<double>(d.T) * Ld);
    ns.max_active = nt.node_max[n];
    ns.share = nt.node_sum[n] / executions;
    ps.nodes.push_back(ns);
  }
  ps.max_active = ov.max_active;
  ps.max_active_batch = ov.max_active_batch;
  const ExpectedActive active = expected_active_experts(placement, top_k);
  ps.max_active_uniform = active.value;
  ps.max_active_uniform_note = active.note;
  return ps;
}

}  // namespace

TraceStats compute_trace_stats(const RoutingTrace& trace, const TraceStatsOptions& o) {
  check_stats_options(trace, o);
  const auto& h = trace.header;
  StatsDims d;
  d.T = static_cast<std::size_t>(trace.tokens());
  d.L = static_cast<std::size_t>(h.layers);
  d.k = static_cast<std::size_t>(h.top_k);
  d.E = static_cast<std::size_t>(h.experts);
  d.kd = static_cast<double>(d.k);
  d.Ed = static_cast<double>(d.E);

  TraceStats st;
  st.tokens = trace.tokens();
  st.requests = count_requests(trace);
  st.cache_sizes = o.cache_sizes;
  st.window = std::min<std::int64_t>(o.window, st.tokens);
  st.batch = std::min<std::int64_t>(o.batch, st.tokens);
  d.W = static_cast<std::size_t>(st.window);
  d.B = static_cast<std::size_t>(st.batch);
  d.windows = d.T / d.W;  // >= 1 since W <= T
  d.batches = d.T / d.B;
  st.windows = static_cast<std::int64_t>(d.windows);
  st.batches = static_cast<std::int64_t>(d.batches);
  st.window_mean_load = static_cast<double>(d.W) * d.kd / d.Ed;
  // §B.4: under independent uniform routing each expert is missed by one token with probability 1 - k/E.
  st.independent_distinct = d.Ed * (1.0 - std::pow(1.0 - d.kd / d.Ed, static_cast<double>(d.B)));
  st.uniform_first_choice = 1.0 / d.Ed;
  st.uniform_reuse = d.kd / d.Ed;

  const std::vector<std::int64_t> prev = previous_token_of_request(trace, d.T);
  for (const auto p : prev) st.pairs += p >= 0 ? 1 : 0;

  NodeTotals nt;
  if (o.placement) {
    nt.fast.emplace(*o.placement);
    nt.N = static_cast<std::size_t>(o.placement->nodes);
    nt.node_sum.assign(nt.N, 0.0);
    nt.node_max.assign(nt.N, 0);
  }
  StatsScratch x;
  x.ids.resize(d.T * d.k);
  x.counts.resize(d.E);
  x.mark.assign(d.E, 0);
  x.stamp.assign(std::max(d.E, d.E * nt.N), -1);
  x.node_of.resize(d.T * d.k);
  x.per_node.resize(std::max<std::size_t>(nt.N, 1));
  x.missed.resize(d.k);

  for (std::size_t l = 0; l < d.L; ++l) {
    // Gather the layer into a contiguous buffer: every statistic then streams through memory.
    for (std::size_t t = 0; t < d.T; ++t) {
      const std::uint16_t* src = trace.experts.data() + (t * d.L + l) * d.k;
      std::copy(src, src + d.k, x.ids.data() + t * d.k);
    }
    TraceLayerStats ls;
    layer_load_stats(d, st.window_mean_load, x, ls);
    if (ls.degenerate) st.degenerate_layers.push_back(static_cast<std::int64_t>(l));
    layer_reuse_stats(d, prev, st.pairs, x, ls);
    for (const auto c : o.cache_sizes) ls.lru_hit.push_back(layer_lru_hit(d, c, x));
    ls.distinct_per_batch = layer_distinct_per_batch(d, x);
    if (nt.fast) layer_node_stats(d, nt, x, ls);
    st.layers.push_back(std::move(ls));
  }

  average_over_layers(st, o.cache_sizes.size(), d.L);
  if (o.placement) st.placement = placement_stats(*o.placement, d, nt, st.overall, h.top_k);
  return st;
}

}  // namespace moesim::sim
