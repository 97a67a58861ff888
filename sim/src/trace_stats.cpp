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

}  // namespace

TraceStats compute_trace_stats(const RoutingTrace& trace, const TraceStatsOptions& o) {
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

  const auto T = static_cast<std::size_t>(trace.tokens());
  const auto L = static_cast<std::size_t>(h.layers);
  const auto k = static_cast<std::size_t>(h.top_k);
  const auto E = static_cast<std::size_t>(h.experts);
  const double kd = static_cast<double>(k);
  const double Ed = static_cast<double>(E);

  TraceStats st;
  st.tokens = trace.tokens();
  st.requests = count_requests(trace);
  st.cache_sizes = o.cache_sizes;
  st.window = std::min<std::int64_t>(o.window, st.tokens);
  st.batch = std::min<std::int64_t>(o.batch, st.tokens);
  const auto W = static_cast<std::size_t>(st.window);
  const auto B = static_cast<std::size_t>(st.batch);
  const std::size_t windows = T / W;  // >= 1 since W <= T
  const std::size_t batches = T / B;
  st.windows = static_cast<std::int64_t>(windows);
  st.batches = static_cast<std::int64_t>(batches);
  st.window_mean_load = static_cast<double>(W) * kd / Ed;
  // §B.4: under independent uniform routing each expert is missed by one token with probability 1 - k/E.
  st.independent_distinct = Ed * (1.0 - std::pow(1.0 - kd / Ed, static_cast<double>(B)));
  st.uniform_first_choice = 1.0 / Ed;
  st.uniform_reuse = kd / Ed;

  // The previous token of the same request, found once for all layers: traces may interleave requests.
  std::vector<std::int64_t> prev(T, -1);
  {
    std::unordered_map<std::uint32_t, std::int64_t> last;
    last.reserve(1024);
    for (std::size_t t = 0; t < T; ++t) {
      auto [it, fresh] = last.try_emplace(trace.request[t], static_cast<std::int64_t>(t));
      if (!fresh) {
        prev[t] = it->second;
        it->second = static_cast<std::int64_t>(t);
      }
    }
  }
  for (const auto p : prev) st.pairs += p >= 0 ? 1 : 0;

  std::optional<Dispatcher> fast;
  std::size_t N = 0;
  std::vector<double> node_sum;
  std::vector<std::int64_t> node_max;
  if (o.placement) {
    fast.emplace(*o.placement);
    N = static_cast<std::size_t>(o.placement->nodes);
    node_sum.assign(N, 0.0);
    node_max.assign(N, 0);
  }

  std::vector<std::uint16_t> ids(T * k);
  std::vector<std::int32_t> counts(E);
  std::vector<char> mark(E, 0);
  std::vector<std::int64_t> stamp(std::max(E, E * N), -1);
  std::vector<std::int32_t> node_of(T * k);
  std::vector<std::int64_t> per_node(std::max<std::size_t>(N, 1));
  std::vector<char> missed(k);

  for (std::size_t l = 0; l < L; ++l) {
    // Gather the layer into a contiguous buffer: every statistic below then streams through memory.
    for (std::size_t t = 0; t < T; ++t) {
      const std::uint16_t* src = trace.experts.data() + (t * L + l) * k;
      std::copy(src, src + k, ids.data() + t * k);
    }
    TraceLayerStats ls;

    // Load max/mean per window, and over the whole trace.
    {
      std::vector<std::int64_t> total(E, 0);
      double sum_ratio = 0;
      for (std::size_t w = 0; w < windows; ++w) {
        std::fill(counts.begin(), counts.end(), 0);
        for (std::size_t i = w * W * k; i < (w + 1) * W * k; ++i) ++counts[ids[i]];
        const double r = static_cast<double>(*std::max_element(counts.begin(), counts.end())) / st.window_mean_load;
        sum_ratio += r;
        ls.load_max_mean_worst = std::max(ls.load_max_mean_worst, r);
      }
      ls.load_max_mean = sum_ratio / static_cast<double>(windows);
      for (std::size_t i = 0; i < T * k; ++i) ++total[ids[i]];
      const auto top = std::max_element(total.begin(), total.end());
      ls.load_max_mean_all = static_cast<double>(*top) / (static_cast<double>(T) * kd / Ed);
      // An expert appears at most once per token-layer, so a count of T means every token chose it.
      ls.top_expert = top - total.begin();
      ls.top_expert_share = static_cast<double>(*top) / static_cast<double>(T);
      ls.degenerate = T >= 2 && static_cast<std::size_t>(*top) == T;
      if (ls.degenerate) st.degenerate_layers.push_back(static_cast<std::int64_t>(l));
    }

    // Reuse against the request's previous token: mark its experts, count, unmark. O(k) per token.
    {
      std::int64_t shared = 0, first = 0, any = 0;
      for (std::size_t t = 0; t < T; ++t) {
        if (prev[t] < 0) continue;
        const std::uint16_t* p = ids.data() + static_cast<std::size_t>(prev[t]) * k;
        const std::uint16_t* c = ids.data() + t * k;
        for (std::size_t s = 0; s < k; ++s) mark[p[s]] = 1;
        std::int64_t n = 0;
        for (std::size_t s = 0; s < k; ++s) n += mark[c[s]];
        for (std::size_t s = 0; s < k; ++s) mark[p[s]] = 0;
        shared += n;
        any += n > 0 ? 1 : 0;
        first += p[0] == c[0] ? 1 : 0;
      }
      const double pairs = static_cast<double>(st.pairs);
      ls.reuse = ratio(static_cast<double>(shared), pairs * kd);
      ls.first_choice_repeat = ratio(static_cast<double>(first), pairs);
      ls.any_overlap = ratio(static_cast<double>(any), pairs);
    }

    // LRU per cache size: per token, hits first (they become most recent), then the misses are loaded, so a
    // token never evicts one of its own experts (capacity >= top_k is checked above).
    for (const auto c : o.cache_sizes) {
      LruSet lru(E, static_cast<std::size_t>(c));
      std::int64_t hits = 0;
      for (std::size_t t = 0; t < T; ++t) {
        const std::uint16_t* cur = ids.data() + t * k;
        for (std::size_t s = 0; s < k; ++s) {
          missed[s] = !lru.contains(cur[s]);
          if (!missed[s]) {
            ++hits;
            lru.touch(cur[s]);
          }
        }
        for (std::size_t s = 0; s < k; ++s) {
          if (missed[s]) lru.insert(cur[s]);
        }
      }
      ls.lru_hit.push_back(static_cast<double>(hits) / (static_cast<double>(T) * kd));
    }

    // Distinct experts per batch of B consecutive tokens (a stamp per expert avoids clearing a set).
    {
      std::int64_t distinct = 0;
      std::fill(stamp.begin(), stamp.end(), -1);
      for (std::size_t b = 0; b < batches; ++b) {
        for (std::size_t i = b * B * k; i < (b + 1) * B * k; ++i) {
          if (stamp[ids[i]] != static_cast<std::int64_t>(b)) {
            stamp[ids[i]] = static_cast<std::int64_t>(b);
            ++distinct;
          }
        }
      }
      ls.distinct_per_batch = static_cast<double>(distinct) / static_cast<double>(batches);
    }

    if (fast) {
      for (std::size_t t = 0; t < T; ++t)
        fast->nodes_for(std::span<const std::uint16_t>(ids.data() + t * k, k), node_of.data() + t * k);
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
          node_max[n] = std::max(node_max[n], per_node[n]);
        }
      }
      for (std::size_t i = 0; i < T * k; ++i) node_sum[static_cast<std::size_t>(node_of[i])] += 1.0;
      ls.max_active = static_cast<double>(sum_max) / static_cast<double>(T);

      // Per batch: distinct experts each node must run (a node loads an expert once for the whole batch).
      std::fill(stamp.begin(), stamp.end(), -1);
      std::int64_t sum_batch_max = 0;
      for (std::size_t b = 0; b < batches; ++b) {
        std::fill(per_node.begin(), per_node.end(), 0);
        for (std::size_t i = b * B * k; i < (b + 1) * B * k; ++i) {
          const auto n = static_cast<std::size_t>(node_of[i]);
          auto& s = stamp[n * E + ids[i]];
          if (s != static_cast<std::int64_t>(b)) {
            s = static_cast<std::int64_t>(b);
            ++per_node[n];
          }
        }
        sum_batch_max += *std::max_element(per_node.begin(), per_node.end());
      }
      ls.max_active_batch = static_cast<double>(sum_batch_max) / static_cast<double>(batches);

      // Node load over windows, max/mean (mean = window * k / nodes).
      double sum_ratio = 0;
      for (std::size_t w = 0; w < windows; ++w) {
        std::fill(per_node.begin(), per_node.end(), 0);
        for (std::size_t i = w * W * k; i < (w + 1) * W * k; ++i) ++per_node[static_cast<std::size_t>(node_of[i])];
        const double mean = static_cast<double>(W) * kd / static_cast<double>(N);
        sum_ratio += static_cast<double>(*std::max_element(per_node.begin(), per_node.end())) / mean;
      }
      ls.node_load_max_mean = sum_ratio / static_cast<double>(windows);
    }
    st.layers.push_back(std::move(ls));
  }

  // Overall: plain means over layers (every layer carries the same number of tokens).
  TraceLayerStats& ov = st.overall;
  ov.lru_hit.assign(o.cache_sizes.size(), 0.0);
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

  if (o.placement) {
    TracePlacementStats ps;
    ps.description = o.placement->describe();
    const double executions = static_cast<double>(T) * Ld * kd;
    for (std::size_t n = 0; n < N; ++n) {
      TraceNodeStats ns;
      ns.experts_held =
          static_cast<std::int64_t>(o.placement->group_of_node(static_cast<std::int64_t>(n)).experts.size());
      ns.mean_active = node_sum[n] / (static_cast<double>(T) * Ld);
      ns.max_active = node_max[n];
      ns.share = node_sum[n] / executions;
      ps.nodes.push_back(ns);
    }
    ps.max_active = ov.max_active;
    ps.max_active_batch = ov.max_active_batch;
    const ExpectedActive active = expected_active_experts(*o.placement, h.top_k);
    ps.max_active_uniform = active.value;
    ps.max_active_uniform_note = active.note;
    st.placement = std::move(ps);
  }
  return st;
}

}  // namespace moesim::sim
