// The serving simulator's step cost model (serving_cost.hpp): the time of one engine step on each
// pipeline stage.

#include "serving_cost.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <span>

#include "moesim/model/collective.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::sim::serving_detail {

CostModel::CostModel(const ServingConfig& c, const ParallelPlan& p, std::vector<std::string>& assumptions)
    : c_(c),
      p_(p),
      a_(*c.arch),
      lc_(*c.arch, *c.weights, *c.node, cost::DeviceSplit{p.tp, p.moe_tp, p.attention_dp || p.attention_replicated},
          c.kv_bytes, &assumptions) {
  tp_ = static_cast<double>(p.tp);
  cost::profile_notes(*c.node, *c.weights, assumptions);
  // Stage s holds layers [stage_starts_[s], stage_starts_[s + 1]).
  stage_starts_ = stage_layer_starts(a_.layers, p.pp);
  expert_bytes_ = lc_.expert_bytes();
  kernel_overhead_ = lc_.kernel_overhead();
  layer_overhead_ = lc_.layer_overhead();
  if (a_.is_moe() && c.node->devices.expert_matvec_tokens &&
      (c.experts == ExpertExecution::Fused || c.experts == ExpertExecution::Parallel))
    assumptions.push_back("an engine step of at most " +
                          text::printf("%.0f", c.node->devices.expert_matvec_tokens->value) +
                          " tokens reads each MoE expert once per token that chose it, not once per step (the "
                          "runtime's matrix-vector expert kernel: expert_matvec_tokens, whose source `moesim hw "
                          "--json` gives)");
  if (const auto& d = c.node->devices.dense_small_batch)
    assumptions.push_back("an engine step's non-expert weights are " + model::dense_small_batch_text(*d) +
                          " (the runtime's small-batch matmul kernels: dense_small_batch, whose source `moesim hw "
                          "--json` gives)");

  // Links: the TP group inside a node uses the intra-node link; a group spanning nodes is a ring that
  // crosses them over the NICs, each device's share of the node's NIC ports.
  const bool spans_nodes = p.tp > p.devices_per_node;
  const double nic_share = c.nic ? c.nic->bandwidth.value.base() * static_cast<double>(p.nics_per_node) /
                                       static_cast<double>(p.devices_per_node)
                                 : 0.0;
  if (p.tp > 1) {
    if (spans_nodes) {
      MOESIM_CHECK(c.nic != nullptr, "a TP group across nodes needs the NIC (checked by the caller)");
      tp_latency_ = c.nic->latency.value.base();
      tp_bw_ = std::min(nic_share, c.intra_link ? c.intra_link->bandwidth.value.base() : nic_share);
    } else {
      MOESIM_CHECK(c.intra_link != nullptr, "a TP group inside a node needs its link (checked by the caller)");
      tp_latency_ = c.intra_link->latency.value.base();
      tp_bw_ = c.intra_link->bandwidth.value.base();
    }
  }
  // Stage boundaries: activations of the batch, across nodes as tp slices (seed 003's scatter) then an
  // all-gather inside the receiving node.
  for (std::int64_t s = 0; s + 1 < p.pp; ++s) {
    const std::int64_t last = (s + 1) * p.tp - 1;
    const bool cross = last / p.devices_per_node != (last + 1) / p.devices_per_node;
    Boundary b;
    if (cross) {
      MOESIM_CHECK(c.nic != nullptr, "a stage boundary across nodes needs the NIC (checked by the caller)");
      b.latency = c.nic->latency.value.base();
      b.bw = nic_share;
      b.split = p.tp;  // tp devices each send 1/tp of the activations in parallel
      if (p.tp > 1 && c.intra_link) {
        b.gather_latency = c.intra_link->latency.value.base();
        b.gather_bw = c.intra_link->bandwidth.value.base();
      }
    } else if (c.intra_link) {
      b.latency = c.intra_link->latency.value.base();
      b.bw = c.intra_link->bandwidth.value.base();
    } else {
      b.latency = 0;
      b.bw = std::numeric_limits<double>::infinity();
    }
    boundaries_.push_back(b);
  }
  if (c.streaming) streamer_.emplace(*c.streaming, moe_layers(), a_.routed_experts);
  // Per-expert token counts: for EP's busiest device, sequential experts, streaming, and a runtime whose
  // expert GEMM pads each expert's tokens to a tile.
  need_counts_ = p.moe_ep > 1 || c.experts == ExpertExecution::Sequential ||
                 c.experts == ExpertExecution::SequentialRouted || c.streaming.has_value() || lc_.pads_expert_tokens();
  if (a_.is_moe()) {
    counts_.assign(static_cast<std::size_t>(a_.routed_experts), 0);
    seen_.reserve(static_cast<std::size_t>(a_.routed_experts));
  }
}

void CostModel::walk_tokens(const RoutingTrace& trace, std::int64_t from, std::int64_t n, std::uint32_t times,
                            bool track_seen) {
  const std::int64_t T = trace.tokens();
  const auto L = static_cast<std::size_t>(trace.header.layers);
  const auto k = static_cast<std::size_t>(trace.header.top_k);
  const auto E = static_cast<std::size_t>(a_.routed_experts);
  std::int64_t t = from;
  for (std::int64_t i = 0; i < n; ++i, ++t) {
    if (t >= T) t -= T;
    // The token's choices, layer after layer (RoutingTrace::chosen's layout).
    const std::uint16_t* ids = trace.chosen(t, 0).data();
    std::uint32_t* counts = layer_counts_.data();
    if (!track_seen) {
      for (std::size_t l = 0; l < L; ++l, ids += k, counts += E)
        for (std::size_t j = 0; j < k; ++j) counts[ids[j]] += times;
      continue;
    }
    for (std::size_t l = 0; l < L; ++l, ids += k, counts += E) {
      for (std::size_t j = 0; j < k; ++j) {
        if (counts[ids[j]] == 0) layer_seen_[l * E + layer_distinct_[l]++] = ids[j];
        counts[ids[j]] += times;
      }
    }
  }
}

void CostModel::count_experts(const std::vector<Entry>& batch, const RoutingTrace& trace) {
  const std::int64_t T = trace.tokens();
  const std::int64_t L = trace.header.layers;
  const auto E = static_cast<std::size_t>(a_.routed_experts);
  const auto cells = static_cast<std::size_t>(L) * E;
  layer_counts_.assign(cells, 0);
  // The streamer loads a layer's experts in the order the batch first chose them; without it only the
  // counts matter, and a long entry (a prefill chunk) takes its counts from the trace's running sums.
  const bool track_seen = c_.streaming.has_value();
  if (track_seen) {
    layer_seen_.resize(cells);
    layer_distinct_.assign(static_cast<std::size_t>(L), 0);
  }
  if (!track_seen && blocks_ == 0) {
    // Running sums of the trace's choices per layer and expert at every kBlock-th token, built once and
    // bounded like the masks (ServingConfig::routing_mask_bytes; past it every entry is walked).
    const std::int64_t blocks = (T + kBlock - 1) / kBlock;
    if ((blocks + 1) * static_cast<std::int64_t>(cells * sizeof(std::uint32_t)) > c_.routing_mask_bytes) {
      blocks_ = -1;
    } else {
      blocks_ = blocks;
      block_counts_.assign(static_cast<std::size_t>(blocks + 1) * cells, 0);
      for (std::int64_t k = 0; k < blocks; ++k) {
        // Row k + 1 = row k + the choices of tokens [k kBlock, min((k + 1) kBlock, T)).
        std::copy_n(block_counts_.data() + static_cast<std::size_t>(k) * cells, cells, layer_counts_.data());
        walk_tokens(trace, k * kBlock, std::min(kBlock, T - k * kBlock), 1, false);
        std::copy_n(layer_counts_.data(), cells, block_counts_.data() + static_cast<std::size_t>(k + 1) * cells);
      }
      std::fill(layer_counts_.begin(), layer_counts_.end(), 0);
    }
  }
  // Tokens [a, b) of the trace (0 <= a <= b <= T), each counted `times`: the running sums between the
  // first and last whole blocks inside, the tokens either side walked.
  auto range = [&](std::int64_t a, std::int64_t b, std::uint32_t times) {
    if (b - a < 2 * kBlock) {
      walk_tokens(trace, a, b - a, times, false);
      return;
    }
    const std::int64_t ka = (a + kBlock - 1) / kBlock, kb = b / kBlock;
    walk_tokens(trace, a, ka * kBlock - a, times, false);
    walk_tokens(trace, kb * kBlock, b - kb * kBlock, times, false);
    const std::uint32_t* lo = block_counts_.data() + static_cast<std::size_t>(ka) * cells;
    const std::uint32_t* hi = block_counts_.data() + static_cast<std::size_t>(kb) * cells;
    for (std::size_t i = 0; i < cells; ++i) layer_counts_[i] += times * (hi[i] - lo[i]);
  };
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const std::int64_t n = batch[b].tokens;
    if (track_seen || blocks_ <= 0 || n < kLongEntry) {
      walk_tokens(trace, starts_[b], n, 1, track_seen);
      continue;
    }
    // The entry's tokens wrap around the trace: whole passes, then the rest from its start.
    if (n >= T) range(0, T, static_cast<std::uint32_t>(n / T));
    const std::int64_t from = starts_[b], to = from + n % T;
    range(from, std::min(to, T), 1);
    if (to > T) range(0, to - T, 1);
  }
  counts_ready_ = true;
}

void CostModel::prepare_routing(const std::vector<Entry>& batch, const RoutingTrace* trace) {
  masks_ready_ = false;
  counts_ready_ = false;
  if (!a_.is_moe()) return;
  routed_ = 0;
  for (const Entry& e : batch) routed_ += static_cast<double>(e.tokens * a_.top_k);
  const std::int64_t E = a_.routed_experts;
  // The fast path's expert time depends on the step only through the distinct experts: memoised.
  by_distinct_.assign(static_cast<std::size_t>(E + 1), -1.0);
  const std::int64_t T = trace->tokens();
  starts_.resize(batch.size());
  for (std::size_t b = 0; b < batch.size(); ++b) starts_[b] = batch[b].trace_at;  // already in [0, T)
  const std::int64_t L = trace->header.layers;
  if (need_counts_) {
    count_experts(batch, *trace);
    return;
  }
  if (token_masks_.empty() && words_ == 0) {
    // Each trace token's chosen experts per layer as a bit mask of ceil(E / 64) words, built once: the walk
    // below is then one OR per word, layer and token, and vectorises. Bounded: a trace whose masks would
    // pass ServingConfig::routing_mask_bytes keeps the per-token walk of moe_cost (the same figures).
    const std::int64_t words = (E + 63) / 64;
    if (T * L * words * static_cast<std::int64_t>(sizeof(std::uint64_t)) > c_.routing_mask_bytes) {
      words_ = -1;
      return;
    }
    words_ = words;
    token_masks_.assign(static_cast<std::size_t>(T * L * words), 0);
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t l = 0; l < L; ++l) {
        std::uint64_t* m = token_masks_.data() + static_cast<std::size_t>((t * L + l) * words);
        for (const std::uint16_t x : trace->chosen(t, l)) m[x / 64] |= std::uint64_t{1} << (x % 64);
      }
    }
  }
  if (words_ <= 0) return;
  const std::int64_t mask_words = L * words_;
  if (full_.empty()) {
    // Every word of a layer full but its last, which holds E mod 64 experts (all 64 when 64 divides E).
    full_.assign(static_cast<std::size_t>(mask_words), ~std::uint64_t{0});
    if (E % 64 != 0)
      for (std::int64_t l = 0; l < L; ++l)
        full_[static_cast<std::size_t>((l + 1) * words_ - 1)] = (std::uint64_t{1} << (E % 64)) - 1;
  }
  masks_.assign(static_cast<std::size_t>(mask_words), 0);
  bool full = false;
  for (std::size_t b = 0; b < batch.size() && !full; ++b) {
    std::int64_t t = starts_[b];
    for (std::int64_t i = 0; i < batch[b].tokens && !full; ++i, ++t) {
      if (t >= T) t -= T;
      const std::uint64_t* tm = token_masks_.data() + static_cast<std::size_t>(t * mask_words);
      std::uint64_t* acc = masks_.data();
      const std::uint64_t* all = full_.data();
      std::uint64_t missing = 0;
      for (std::int64_t j = 0; j < mask_words; ++j) {
        acc[j] |= tm[j];
        missing |= all[j] & ~acc[j];
      }
      full = missing == 0;
    }
  }
  masks_ready_ = true;
}

const StepCost& CostModel::cost(const std::vector<Entry>& batch, const RoutingTrace* trace) {
  StepCost& out = step_;
  out.transfer.clear();
  prepare_routing(batch, trace);
  const double h = static_cast<double>(a_.hidden);
  double T = 0, samples = 0;
  // Attention work per device: one group under TP; under attention data parallelism each of the tp
  // devices holds and attends its own sequences (vLLM's DP attention balances requests over the ranks:
  // here the step's sequences in turn), and the busiest device sets the layer's pace.
  const std::size_t groups = p_.attention_dp ? static_cast<std::size_t>(p_.tp) : 1;
  work_.assign(groups, cost::SeqWork{});
  group_tokens_.assign(groups, 0.0);
  std::size_t next = 0;
  for (const Entry& e : batch) {
    const auto n = static_cast<double>(e.tokens);
    T += n;
    samples += e.samples ? 1.0 : 0.0;
    const cost::SeqWork w = lc_.sequence(e.context, e.tokens);
    work_[next].kv_bytes += w.kv_bytes;
    work_[next].flops += w.flops;
    group_tokens_[next] += n;
    next = next + 1 == groups ? 0 : next + 1;
  }
  // Per layer (averaged), on the busiest device.
  double attn = 0, tokens_dev = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    attn = std::max(attn, lc_.attention(group_tokens_[g], work_[g]));
    tokens_dev = std::max(tokens_dev, group_tokens_[g]);
  }
  const double dense = lc_.dense(tokens_dev);
  const double ko = kernel_overhead_;
  // A step small enough for the runtime's matrix-vector expert kernel (devices.expert_matvec_tokens) reads
  // an expert once per (token, expert) pair, not once per distinct expert: its expert time is that of as
  // many experts as the step routes pairs to the device, whoever chose them.
  const bool matvec = a_.is_moe() && lc_.expert_matvec(T) &&
                      (c_.experts == ExpertExecution::Fused || c_.experts == ExpertExecution::Parallel);
  const double pairs = routed_ / static_cast<double>(p_.moe_ep);
  const double matvec_time = matvec ? lc_.expert_group(c_.experts, pairs, pairs, pairs) : 0.0;
  const bool tp_collectives = p_.tp > 1 && !p_.attention_dp && !p_.attention_replicated;
  // Replicated attention: every device sends the step's top-k output buffers to every other, each
  // message in parallel (the decode simulator's expert-outputs exchange with contention off).
  const double outputs_exchange =
      p_.attention_replicated ? cost::expert_outputs(T * h * c_.activation_bytes, a_.top_k).seconds(tp_latency_, tp_bw_)
                              : 0;
  const double allreduce = tp_collectives
                               ? cost::ring_allreduce(T * h * c_.activation_bytes, static_cast<std::int64_t>(tp_))
                                     .seconds(tp_latency_, tp_bw_)
                               : 0;

  // Per stage: sum over its layers. MoE layers are walked one by one (the routing differs per layer).
  out.stage.assign(static_cast<std::size_t>(p_.pp), SimTime{});
  double io_total = 0, gpu_total = 0, cpu_total = 0;
  std::int64_t moe_j = 0;
  for (std::int64_t s = 0; s < p_.pp; ++s) {
    double t = 0;
    const auto stage = static_cast<std::size_t>(s);
    for (std::int64_t l = stage_starts_[stage]; l < stage_starts_[stage + 1]; ++l) {
      const auto& spec = a_.layer_specs[static_cast<std::size_t>(l)];
      double gpu = attn + dense;
      const double kernels = lc_.layer_kernels(spec, tp_collectives);
      double io = 0;
      double comm = 2.0 * allreduce;
      if (spec.moe && a_.is_moe()) {
        gpu += lc_.router(tokens_dev);
        MoeCost m;
        if (masks_ready_) {
          // Fast path: the expert time depends only on the layer's distinct experts (memoised).
          std::size_t d = 0;
          const std::uint64_t* layer_mask = masks_.data() + static_cast<std::size_t>(moe_j++ * words_);
          for (std::int64_t w = 0; w < words_; ++w) d += static_cast<std::size_t>(std::popcount(layer_mask[w]));
          if (by_distinct_[d] < 0) by_distinct_[d] = fused_expert_time(static_cast<double>(d));
          m.gpu = by_distinct_[d];
        } else {
          m = moe_cost(batch, trace, moe_j++);
        }
        if (matvec) m.gpu = matvec_time;
        gpu += m.gpu;
        io = m.io;
        if (p_.attention_dp && p_.tp > 1) comm = 2.0 * m.all_to_all;
        if (p_.attention_replicated && p_.tp > 1) comm = outputs_exchange;
      }
      const double layer_gpu = gpu + kernels * ko;
      double layer = layer_gpu + comm + layer_overhead_ + io;
      if (c_.streaming && c_.streaming->overlapped && io > 0) {
        layer = to_seconds(overlapped_time(to_sim_time(units::seconds(layer_gpu)), last_gpu_bytes_, last_io_,
                                           lc_.memory_rate().bw)) +
                comm + layer_overhead_;
      }
      t += layer;
      io_total += io;
      gpu_total += layer_gpu + comm;
      cpu_total += layer_overhead_;
    }
    if (s + 1 == p_.pp && samples > 0) {
      t += lc_.head(samples);
    }
    out.stage[static_cast<std::size_t>(s)] = to_sim_time(units::seconds(t));
  }
  for (const Boundary& b : boundaries_) {
    const double bytes = T * h * c_.activation_bytes;
    double t = cost::point_to_point(bytes / static_cast<double>(b.split)).seconds(b.latency, b.bw);
    if (b.gather_bw > 0) t += cost::ring_allgather(bytes, b.split).seconds(b.gather_latency, b.gather_bw);
    out.transfer.push_back(to_sim_time(units::seconds(t)));
  }
  out.io = io_total;
  out.gpu = gpu_total;
  out.cpu = cpu_total;
  return out;
}

CostModel::MoeCost CostModel::moe_cost(const std::vector<Entry>& batch, const RoutingTrace* trace, std::int64_t layer) {
  MOESIM_CHECK(trace != nullptr && trace->tokens() > 0, "an MoE model needs a routing trace");
  const std::int64_t E = a_.routed_experts;
  const std::int64_t T = trace->tokens();
  const std::int64_t ep = p_.moe_ep;
  const std::int64_t local = E / ep;
  const bool need_counts = need_counts_;
  // The step's tokens per expert and its distinct experts in the order first chosen: counted for every
  // layer by prepare_routing() when the counts are needed; otherwise (cost() takes the bit-mask fast path
  // itself, so this is a trace too large for the masks) walked here, stopping once every expert has been
  // chosen.
  const std::uint32_t* counts = counts_.data();
  std::span<const std::uint16_t> seen;
  if (counts_ready_) {
    const auto row = static_cast<std::size_t>(layer) * static_cast<std::size_t>(E);
    counts = layer_counts_.data() + row;
    if (c_.streaming) seen = {layer_seen_.data() + row, layer_distinct_[static_cast<std::size_t>(layer)]};
  } else {
    seen_.clear();
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const Entry& e = batch[b];
      std::int64_t t = starts_[b];
      for (std::int64_t i = 0; i < e.tokens; ++i, ++t) {
        if (t >= T) t -= T;
        const auto ids = trace->chosen(t, layer);
        for (const std::uint16_t x : ids) {
          if (counts_[x]++ == 0) seen_.push_back(x);
        }
        if (!need_counts && static_cast<std::int64_t>(seen_.size()) == E) break;
      }
      if (!need_counts && static_cast<std::int64_t>(seen_.size()) == E) break;
    }
    seen = seen_;
  }
  MoeCost m;
  if (c_.streaming) {
    const LayerIo io = streamer_->load(layer, seen);
    m.io = to_seconds(io.time);
    last_io_ = io;
    last_gpu_bytes_ = lc_.weight_bytes_per_layer() + static_cast<double>(seen.size()) * expert_bytes_;
  }
  if (!need_counts) {
    m.gpu = fused_expert_time(static_cast<double>(seen.size()));
  } else {
    double worst = 0;
    double worst_tokens = 0;
    const double step_tokens = routed_ / static_cast<double>(a_.top_k);
    for (std::int64_t g = 0; g < ep; ++g) {
      double t = 0, d = 0, tokens = 0, computed = 0;
      for (std::int64_t x = g * local; x < (g + 1) * local; ++x) {
        const double n = counts[static_cast<std::size_t>(x)];
        tokens += n;
        computed += lc_.expert_compute_tokens(n, step_tokens);
        if (n == 0 && c_.experts != ExpertExecution::Sequential) continue;
        d += 1;
        if (c_.experts == ExpertExecution::Sequential || c_.experts == ExpertExecution::SequentialRouted) {
          t += lc_.expert(lc_.expert_compute_tokens(n, step_tokens), n) + lc_.expert_kernels_time(c_.experts, 1);
        }
      }
      if (c_.experts == ExpertExecution::Fused || c_.experts == ExpertExecution::Parallel)
        t = lc_.expert_group(c_.experts, d, computed, tokens);
      worst = std::max(worst, t);
      worst_tokens = std::max(worst_tokens, tokens);
    }
    m.gpu = worst;
    if (p_.attention_dp && ep > 1) {
      // Dispatch (and, symmetrically, combine): each device sends its tokens' copies to the devices
      // holding their experts, (ep − 1)/ep of them leaving the device, all pairs at once.
      // The busiest device's side: the copies it sends, or those its experts receive.
      const double vector = static_cast<double>(a_.hidden) * c_.activation_bytes;
      m.all_to_all = cost::all_to_all(std::max(routed_ / tp_, worst_tokens) * vector, ep).seconds(tp_latency_, tp_bw_);
    }
  }
  if (!counts_ready_)
    for (const std::uint16_t x : seen_) counts_[x] = 0;
  return m;
}

}  // namespace moesim::sim::serving_detail
