// The serving simulator: step cost model, schedulers, pipeline and metrics (sim/serving.hpp).

#include "moesim/model/collective.hpp"
#include "moesim/sim/serving.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <numeric>

#include "moesim/model/analytic.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/decode.hpp"

namespace moesim::sim {

namespace {
template <class T>
Percentiles percentiles_of(std::vector<T>& v, const std::vector<double>& percents) {
  Percentiles p;
  if (v.empty()) {
    for (double q : percents) p.requested.emplace_back(q, 0.0);
    return p;
  }
  p.mean = std::accumulate(v.begin(), v.end(), 0.0, [](double acc, T x) { return acc + static_cast<double>(x); }) /
           static_cast<double>(v.size());
  // np.std: the population standard deviation (ddof 0), two passes for accuracy.
  const double ss = std::accumulate(v.begin(), v.end(), 0.0, [&](double acc, T x) {
    const double d = static_cast<double>(x) - p.mean;
    return acc + d * d;
  });
  p.std = std::sqrt(ss / static_cast<double>(v.size()));
  // Linear interpolation between closest ranks (numpy's default percentile, which vLLM's benchmark uses),
  // by selection (O(n)), each search confined to the part above the previous one: an ITL vector holds one
  // value per generated token, millions of them.
  auto from = v.begin();
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto it = v.begin() + static_cast<std::ptrdiff_t>(lo);
    std::nth_element(from, it, v.end());
    from = it;
    const auto a = static_cast<double>(*it);
    const double b = lo + 1 < v.size() ? static_cast<double>(*std::min_element(it + 1, v.end())) : a;
    return a + (b - a) * (pos - static_cast<double>(lo));
  };
  // Ascending, so that each selection searches above the one before.
  std::vector<double> qs = {0.5, 0.9, 0.99};
  for (double q : percents) qs.push_back(q / 100.0);
  std::vector<std::size_t> order(qs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return qs[a] < qs[b]; });
  std::vector<double> value(qs.size());
  for (std::size_t i : order) value[i] = at(qs[i]);
  p.median = value[0];
  p.p90 = value[1];
  p.p99 = value[2];
  for (std::size_t i = 0; i < percents.size(); ++i) p.requested.emplace_back(percents[i], value[3 + i]);
  p.max = static_cast<double>(*std::max_element(v.begin(), v.end()));
  return p;
}

}  // namespace

Percentiles percentiles(std::vector<double> v, const std::vector<double>& percents) {
  return percentiles_of(v, percents);
}
Percentiles percentiles(std::vector<float> v, const std::vector<double>& percents) {
  return percentiles_of(v, percents);
}

namespace {

/// One scheduled piece of work: `tokens` new tokens of sequence `seq` after `context` cached ones.
struct Entry {
  std::int64_t seq = 0;
  std::int64_t tokens = 0;
  std::int64_t context = 0;
  std::int64_t trace_at = 0;  ///< trace token of the first new token
  bool samples = false;       ///< this step ends with a sampled token for the sequence
  bool decode = false;        ///< one token of an already prefilled sequence
};

/// The cost of one step on each stage, and the decode split.
struct StepCost {
  std::vector<SimTime> stage;       ///< compute + collectives of each stage
  std::vector<SimTime> transfer;    ///< stage s → s + 1
  double io = 0, gpu = 0, cpu = 0;  ///< seconds over the whole step (all layers), for the split
};

class CostModel {
 public:
  CostModel(const ServingConfig& c, const ParallelPlan& p, std::vector<std::string>& assumptions)
      : c_(c),
        p_(p),
        a_(*c.arch),
        lc_(*c.arch, *c.weights, *c.node, cost::DeviceSplit{p.tp, p.moe_tp, p.attention_dp || p.attention_replicated}, c.kv_bytes, &assumptions) {
    tp_ = static_cast<double>(p.tp);
    cost::profile_notes(*c.node, *c.weights, assumptions);
    // Stage s holds layers [stage_starts_[s], stage_starts_[s + 1]).
    stage_starts_ = stage_layer_starts(a_.layers, p.pp);
    expert_bytes_ = lc_.expert_bytes();
    kernel_overhead_ = lc_.kernel_overhead();
    layer_overhead_ = lc_.layer_overhead();

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
    need_counts_ = p.moe_ep > 1 || c.experts == ExpertExecution::Sequential ||
                   c.experts == ExpertExecution::SequentialRouted || c.streaming.has_value();
    if (a_.is_moe()) {
      counts_.assign(static_cast<std::size_t>(a_.routed_experts), 0);
      seen_.reserve(static_cast<std::size_t>(a_.routed_experts));
    }
  }

  [[nodiscard]] std::int64_t moe_layers() const { return model::moe_layer_count(a_); }
  [[nodiscard]] const ExpertStreamer* streamer() const { return streamer_ ? &*streamer_ : nullptr; }

  /// Where each entry's first new token lies in the trace, and, on the fast path, the distinct experts
  /// of every MoE layer in one token-major walk (a token's layers are contiguous in the trace) that stops
  /// once every layer has seen every expert: a decode batch of 64 on Mixtral touches all 8 after a few
  /// tokens.
  void prepare_routing(const std::vector<Entry>& batch, const RoutingTrace* trace) {
    masks_ready_ = false;
    if (!a_.is_moe()) return;
    routed_ = 0;
    for (const Entry& e : batch) routed_ += static_cast<double>(e.tokens * a_.top_k);
    // The fast path's expert time depends on the step only through the distinct experts: memoised.
    by_distinct_.assign(static_cast<std::size_t>(std::min<std::int64_t>(a_.routed_experts, 64) + 1), -1.0);
    const std::int64_t T = trace->tokens();
    starts_.resize(batch.size());
    for (std::size_t b = 0; b < batch.size(); ++b) starts_[b] = batch[b].trace_at;  // already in [0, T)
    const std::int64_t E = a_.routed_experts;
    if (need_counts_ || E > 64) return;
    const std::int64_t L = trace->header.layers;
    const std::uint64_t all = E == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << E) - 1;
    if (token_masks_.empty()) {
      // Each trace token's chosen experts per layer as a bit mask, built once: the walk below is then one
      // OR per layer and token, and vectorises.
      token_masks_.resize(static_cast<std::size_t>(T * L));
      for (std::int64_t t = 0; t < T; ++t) {
        for (std::int64_t l = 0; l < L; ++l) {
          std::uint64_t m = 0;
          for (const std::uint16_t x : trace->chosen(t, l)) m |= std::uint64_t{1} << x;
          token_masks_[static_cast<std::size_t>(t * L + l)] = m;
        }
      }
    }
    masks_.assign(static_cast<std::size_t>(L), 0);
    bool full = false;
    for (std::size_t b = 0; b < batch.size() && !full; ++b) {
      std::int64_t t = starts_[b];
      for (std::int64_t i = 0; i < batch[b].tokens && !full; ++i, ++t) {
        if (t >= T) t -= T;
        const std::uint64_t* tm = token_masks_.data() + static_cast<std::size_t>(t * L);
        std::uint64_t acc = all;
        for (std::int64_t l = 0; l < L; ++l) {
          masks_[static_cast<std::size_t>(l)] |= tm[l];
          acc &= masks_[static_cast<std::size_t>(l)];
        }
        full = acc == all;
      }
    }
    masks_ready_ = true;
  }

  const StepCost& cost(const std::vector<Entry>& batch, const RoutingTrace* trace) {
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
    const bool tp_collectives = p_.tp > 1 && !p_.attention_dp && !p_.attention_replicated;
    // Replicated attention: every device sends the step's top-k output buffers to every other, each
    // message in parallel (the decode simulator's expert-outputs exchange with contention off).
    const double outputs_exchange =
        p_.attention_replicated ? cost::expert_outputs(T * h * c_.activation_bytes, a_.top_k).seconds(tp_latency_, tp_bw_)
                                : 0;
    const double allreduce =
        tp_collectives ? cost::ring_allreduce(T * h * c_.activation_bytes, static_cast<std::int64_t>(tp_))
                             .seconds(tp_latency_, tp_bw_)
                       : 0;

    // Per stage: sum over its layers. MoE layers are walked one by one (the routing differs per layer).
    out.stage.assign(static_cast<std::size_t>(p_.pp), 0);
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
            const auto d = static_cast<std::size_t>(std::popcount(masks_[static_cast<std::size_t>(moe_j++)]));
            if (by_distinct_[d] < 0) by_distinct_[d] = fused_expert_time(static_cast<double>(d));
            m.gpu = by_distinct_[d];
          } else {
            m = moe_cost(batch, trace, moe_j++);
          }
          gpu += m.gpu;
          io = m.io;
          if (p_.attention_dp && p_.tp > 1) comm = 2.0 * m.all_to_all;
          if (p_.attention_replicated && p_.tp > 1) comm = outputs_exchange;
        }
        const double layer_gpu = gpu + kernels * ko;
        double layer = layer_gpu + comm + layer_overhead_ + io;
        if (c_.streaming && c_.streaming->overlapped && io > 0) {
          layer = to_seconds(
                      overlapped_time(to_sim_time(units::seconds(layer_gpu)), last_gpu_bytes_, last_io_, lc_.memory_rate().bw)) +
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

 private:
  struct Boundary {
    double latency = 0, bw = 0;                ///< the send: 1/split of the activations from each device
    double gather_latency = 0, gather_bw = 0;  ///< the receiving node's all-gather (0: none)
    std::int64_t split = 1;
  };
  struct MoeCost {
    double gpu = 0, io = 0, all_to_all = 0;
  };

  /// One EP group running `d` distinct experts over all the step's routed tokens, fused or parallel.
  double fused_expert_time(double d) const {
    return lc_.expert_group(c_.experts, d, routed_);
  }

  MoeCost moe_cost(const std::vector<Entry>& batch, const RoutingTrace* trace, std::int64_t layer) {
    MOESIM_CHECK(trace != nullptr && trace->tokens() > 0, "an MoE model needs a routing trace");
    const std::int64_t E = a_.routed_experts;
    const std::int64_t T = trace->tokens();
    const std::int64_t ep = p_.moe_ep;
    const std::int64_t local = E / ep;
    const bool need_counts = need_counts_;
    // The distinct experts the step's tokens chose (cost() takes the bit-mask fast path itself, so this
    // runs only with per-expert counts or more than 64 experts); without counts the walk stops once
    // every expert has been chosen.
    seen_.clear();
    {
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
    }
    MoeCost m;
    if (c_.streaming) {
      const LayerIo io = streamer_->load(layer, std::span<const std::uint16_t>(seen_.data(), seen_.size()));
      m.io = to_seconds(io.time);
      last_io_ = io;
      last_gpu_bytes_ = lc_.weight_bytes_per_layer() + static_cast<double>(seen_.size()) * expert_bytes_;
    }
    if (!need_counts) {
      m.gpu = fused_expert_time(static_cast<double>(seen_.size()));
    } else {
      double worst = 0;
      double worst_tokens = 0;
      for (std::int64_t g = 0; g < ep; ++g) {
        double t = 0, d = 0, tokens = 0;
        for (std::int64_t x = g * local; x < (g + 1) * local; ++x) {
          const double n = counts_[static_cast<std::size_t>(x)];
          tokens += n;
          if (n == 0 && c_.experts != ExpertExecution::Sequential) continue;
          d += 1;
          if (c_.experts == ExpertExecution::Sequential || c_.experts == ExpertExecution::SequentialRouted) {
            t += lc_.expert(n) + lc_.expert_kernels_time(c_.experts, 1);
          }
        }
        if (c_.experts == ExpertExecution::Fused || c_.experts == ExpertExecution::Parallel)
          t = lc_.expert_group(c_.experts, d, tokens);
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
    for (const std::uint16_t x : seen_) counts_[x] = 0;
    return m;
  }

  const ServingConfig& c_;
  const ParallelPlan& p_;
  const model::Architecture& a_;
  cost::LayerCosts lc_;
  double tp_ = 1;
  std::vector<std::int64_t> stage_starts_;  ///< pp + 1 entries (stage_layer_starts)
  double expert_bytes_ = 0;  ///< one expert, one layer, on one device
  double kernel_overhead_ = 0, layer_overhead_ = 0;
  std::vector<cost::SeqWork> work_;    ///< per attention group, this step
  std::vector<double> group_tokens_;  ///< per attention group, this step
  double tp_latency_ = 0, tp_bw_ = 1;
  std::vector<Boundary> boundaries_;
  std::optional<ExpertStreamer> streamer_;
  LayerIo last_io_;  ///< the last MoE layer's reads, for the overlapped mode's bandwidth sharing
  double last_gpu_bytes_ = 0;
  std::vector<std::uint32_t> counts_;
  StepCost step_;
  std::vector<std::int64_t> starts_;
  std::vector<std::uint64_t> masks_;
  std::vector<std::uint64_t> token_masks_;
  bool masks_ready_ = false;
  bool need_counts_ = false;
  double routed_ = 0;
  std::vector<double> by_distinct_;
  std::vector<std::uint16_t> seen_;
};

// ---------------------------------------------------------------------------------------------------------
// The engine.

enum EventKind : std::uint32_t { kArrival, kStageFree, kBatchDone, kUserSend, kOffer };

struct Seq {
  std::int64_t id = 0;
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  SimTime arrival = 0;
  std::int64_t user = -1;
  std::int64_t computed = 0;   ///< tokens whose K and V are in the cache
  std::int64_t generated = 0;  ///< output tokens sampled so far
  std::int64_t blocks = 0;
  std::int64_t trace_offset = 0;
  std::int64_t trace_pos = 0;  ///< trace token of the next token to compute: (trace_offset + computed) mod T
  bool prefilled = false;
  bool in_flight = false;
  bool running = false;
  bool done = false;
  SimTime first_token = -1;
  SimTime last_token = 0;
  double max_itl = 0;
  std::int32_t preemptions = 0;
  [[nodiscard]] std::int64_t prefill_target() const { return prompt + generated; }
};

class ServingEngine final : public EventHandler {
 public:
  ServingEngine(const ServingConfig& c, ServingResult& r) : c_(c), r_(r), cost_(c, r.plan, r.assumptions) {
    handler_ = sim_.add_handler(this);
    // The runtime's host costs (model::DeviceSpec::step_overhead, request_overhead; a runtime profile sets
    // them). vLLM's engine loop is synchronous on the host: each step the scheduler forms the batch, the
    // model runner prepares its inputs, the GPU runs, then the sampler's host side and the detokeniser
    // process the outputs before the next step is scheduled (vllm/v1/engine/core.py EngineCore.step:
    // schedule -> execute_model -> update_from_output). That host time is paid once per engine step,
    // whatever the batch. Before any of it, the API server tokenises each request and hands it to the
    // engine (vllm/entrypoints/openai/serving_completion.py, vllm/v1/engine/async_llm.py add_request):
    // paid once per request, between its arrival and its entry into the scheduler's queue, so it lands
    // in the request's TTFT. Both 0 when the profile has none: then nothing below changes.
    if (c_.node->devices.step_overhead) step_overhead_ = to_sim_time(c_.node->devices.step_overhead->value);
    if (c_.node->devices.request_overhead)
      request_overhead_ = to_sim_time(c_.node->devices.request_overhead->value);
    if (step_overhead_ > 0)
      r_.assumptions.push_back("every engine step adds the runtime's host time step_overhead " +
                               units::format(c_.node->devices.step_overhead->value) + " (" +
                               c_.node->devices.step_overhead->source + ")");
    if (request_overhead_ > 0)
      r_.assumptions.push_back("every request waits the runtime's request_overhead " +
                               units::format(c_.node->devices.request_overhead->value) +
                               " before the scheduler sees it (" + c_.node->devices.request_overhead->source + ")");
    blocks_free_ = r_.memory.kv_blocks;
    batches_.resize(static_cast<std::size_t>(r_.plan.pp) + 1);
    stage_free_.assign(static_cast<std::size_t>(r_.plan.pp), 0);
  }

  void run() {
    const auto& w = c_.workload;
    if (w.arrival == ArrivalKind::ClosedLoop) {
      total_ = w.requests;
      users_.emplace(w);
      for (std::int64_t u = 0; u < users_->users(); ++u) {
        sim_.schedule(users_->join_time(u), handler_, kUserSend, static_cast<std::uint64_t>(u));
      }
    } else {
      total_ = static_cast<std::int64_t>(c_.requests.size());
      std::int64_t gaps = 0;
      for (const Request& q : c_.requests) gaps += q.output_tokens - 1;
      itl_.reserve(static_cast<std::size_t>(gaps));
      seqs_.reserve(c_.requests.size());
      cap_ = w.max_concurrency;
      for (const Request& q : c_.requests) {
        check_fits(q.prompt_tokens, q.output_tokens, q.id);
        const auto id = static_cast<std::uint64_t>(add_seq(q));
        if (cap_ > 0) {
          // The client offers it at its arrival time and sends it when a slot is free (kOffer).
          sim_.schedule(q.arrival, handler_, kOffer, id);
        } else {
          // Tokenisation and admission (request_overhead) before the scheduler sees it; TTFT still counts
          // from q.arrival.
          sim_.schedule(q.arrival + request_overhead_, handler_, kArrival, id);
        }
      }
    }
    r_.events = sim_.run();
    if (cap_ > 0) {
      r_.assumptions.push_back(
          "at most " + std::to_string(cap_) + " requests in flight (max_concurrency, vLLM's --max-concurrency): " +
          std::to_string(held_back_) + " of " + std::to_string(total_) + " requests waited for a slot, the longest " +
          text::printf("%.3f", to_seconds(longest_hold_)) +
          " s; TTFT and E2EL count from when a request was sent, as vLLM's client counts them");
    }
  }

  void handle_event(std::uint32_t kind, std::uint64_t arg) override {
    switch (kind) {
      case kArrival:
        waiting_.push_back(static_cast<std::int64_t>(arg));
        break;
      case kUserSend: {
        const std::optional<Request> q = users_->send(static_cast<std::int64_t>(arg), sim_.now());
        if (!q) return;
        check_fits(q->prompt_tokens, q->output_tokens, q->id);
        if (request_overhead_ > 0) {
          // As for open-loop arrivals: the request enters the queue after its host-side admission.
          sim_.schedule(sim_.now() + request_overhead_, handler_, kArrival, static_cast<std::uint64_t>(add_seq(*q)));
          return;
        }
        waiting_.push_back(add_seq(*q));
        break;
      }
      case kOffer:
        // A request's arrival time under max_concurrency: sent now if a slot is free, else held (first
        // come, first served: offers run in arrival order, and complete() sends the oldest held one).
        if (in_flight_ < cap_) {
          send(static_cast<std::int64_t>(arg));
        } else {
          held_.push_back(static_cast<std::int64_t>(arg));
        }
        break;
      case kStageFree:
        stage0_busy_ = false;
        break;
      case kBatchDone:
        finish_batch(static_cast<std::size_t>(arg));
        break;
      default:
        MOESIM_CHECK(false, "unknown serving event");
    }
    try_schedule();
  }

 private:
  /// max_concurrency: request `id` is sent now (vLLM's client acquires its semaphore): it counts as in
  /// flight until it completes, its arrival becomes now (TTFT and E2EL count from here, as vLLM's
  /// client-side start_time does), and it reaches the scheduler after the runtime's request_overhead.
  void send(std::int64_t id) {
    Seq& s = seqs_[static_cast<std::size_t>(id)];
    const SimTime now = sim_.now();
    if (now > s.arrival) {
      ++held_back_;
      longest_hold_ = std::max(longest_hold_, now - s.arrival);
    }
    s.arrival = now;
    ++in_flight_;
    sim_.schedule(now + request_overhead_, handler_, kArrival, static_cast<std::uint64_t>(id));
  }

  std::int64_t add_seq(const Request& q) {
    Seq s;
    s.id = static_cast<std::int64_t>(seqs_.size());
    s.prompt = q.prompt_tokens;
    s.output = q.output_tokens;
    s.arrival = q.arrival;
    s.user = q.user;
    // Where the request's tokens start in the routing trace: spread requests over it (Knuth's
    // multiplicative hash), consecutive tokens of one request stay consecutive.
    if (c_.trace && c_.trace->tokens() > 0) {
      s.trace_offset = static_cast<std::int64_t>((static_cast<std::uint64_t>(s.id) * 2654435761ULL) %
                                                 static_cast<std::uint64_t>(c_.trace->tokens()));
    }
    s.trace_pos = s.trace_offset;
    seqs_.push_back(s);
    ++sent_;
    return s.id;
  }

  void check_fits(std::int64_t prompt, std::int64_t output, std::int64_t id) const {
    const std::int64_t need = blocks_for(prompt + output);
    if (need > r_.memory.kv_blocks) {
      throw UserError("request " + std::to_string(id) + " needs " + std::to_string(prompt + output) +
                      " tokens of KV cache but the whole cache holds " + std::to_string(r_.memory.kv_tokens) +
                      " on this plan; shorten the request, add devices or use a smaller precision");
    }
    if (c_.scheduler.kind != SchedulerKind::Chunked && prompt > c_.scheduler.max_num_batched_tokens) {
      throw UserError("request " + std::to_string(id) + " has a " + std::to_string(prompt) +
                      "-token prompt, more than max_num_batched_tokens " +
                      std::to_string(c_.scheduler.max_num_batched_tokens) +
                      " (a whole prompt must fit one step without chunked prefill); raise it or use scheduler chunked");
    }
  }

  [[nodiscard]] std::int64_t blocks_for(std::int64_t tokens) const {
    const std::int64_t bs = c_.scheduler.block_size;
    return (tokens + bs - 1) / bs;
  }

  /// Grows `s`'s blocks to hold `tokens` cached tokens; false (and no change) if the cache is full.
  bool grow(Seq& s, std::int64_t tokens) {
    const std::int64_t need = blocks_for(tokens) - s.blocks;
    if (need <= 0) return true;
    if (need > blocks_free_) return false;
    blocks_free_ -= need;
    s.blocks += need;
    return true;
  }

  void release(Seq& s) {
    blocks_free_ += s.blocks;
    s.blocks = 0;
  }

  /// vLLM's recompute preemption: the victim loses its cache and goes back to the head of the queue.
  void preempt(std::int64_t id) {
    Seq& s = seqs_[static_cast<std::size_t>(id)];
    release(s);
    s.computed = 0;
    s.trace_pos = s.trace_offset;
    s.prefilled = false;
    s.running = false;
    ++s.preemptions;
    ++r_.preemptions;
    running_.erase(std::find(running_.begin(), running_.end(), id));
    waiting_.push_front(id);
  }

  /// Makes room for `s` to hold `tokens` by preempting the most recently admitted others not in flight.
  bool grow_or_preempt(Seq& s, std::int64_t tokens) {
    while (!grow(s, tokens)) {
      std::int64_t victim = -1;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        const Seq& v = seqs_[static_cast<std::size_t>(*it)];
        if (!v.in_flight && v.id != s.id && !scheduled_now(v.id)) {
          victim = *it;
          break;
        }
      }
      if (victim < 0) return false;
      preempt(victim);
    }
    return true;
  }

  bool scheduled_now(std::int64_t id) const {
    return std::any_of(batch_.begin(), batch_.end(), [&](const Entry& e) { return e.seq == id; });
  }

  void add_entry(Seq& s, std::int64_t tokens) {
    Entry e;
    e.seq = s.id;
    e.tokens = tokens;
    e.context = s.computed;
    e.trace_at = s.trace_pos;
    e.samples = s.prefilled || s.computed + tokens == s.prefill_target();
    e.decode = s.prefilled;
    batch_.push_back(e);
  }

  /// TensorRT-LLM's GUARANTEED_NO_EVICT: a request starts only with blocks for prompt + output reserved,
  /// so every later grow() of it is already covered and nothing is ever preempted.
  [[nodiscard]] bool no_evict() const { return c_.scheduler.capacity == CapacityPolicy::GuaranteedNoEvict; }

  void admit(Seq& s) {
    s.running = true;
    running_.push_back(s.id);
  }

  void form_continuous() {
    const auto& sc = c_.scheduler;
    // Prefill first: whole prompts from the head of the queue while they fit the step and the cache.
    std::int64_t budget = sc.max_num_batched_tokens;
    while (!waiting_.empty()) {
      Seq& s = seqs_[static_cast<std::size_t>(waiting_.front())];
      const std::int64_t n = s.prefill_target();
      if (n > budget || static_cast<std::int64_t>(running_.size()) >= sc.max_num_seqs) break;
      if (no_evict()) {
        if (!grow(s, s.prompt + s.output)) break;  // the whole sequence's blocks, reserved now
      } else {
        // Admission keeps one block per running sequence free for its next decode token (vLLM's watermark).
        if (blocks_for(n) + static_cast<std::int64_t>(running_.size()) > blocks_free_) break;
        grow(s, n);
      }
      waiting_.pop_front();
      admit(s);
      add_entry(s, n);
      budget -= n;
    }
    if (!batch_.empty()) return;
    schedule_decodes(std::numeric_limits<std::int64_t>::max());
  }

  /// One decode token for every running, prefilled sequence not in flight (at most `budget`), growing its
  /// cache and preempting the most recently admitted others when it is full. Returns the tokens used.
  std::int64_t schedule_decodes(std::int64_t budget) {
    snapshot_ = running_;
    std::int64_t used = 0;
    for (const std::int64_t id : snapshot_) {
      if (used >= budget) break;
      Seq& s = seqs_[static_cast<std::size_t>(id)];
      if (!s.running || s.in_flight || !s.prefilled) continue;
      if (!grow_or_preempt(s, s.computed + 1)) {
        preempt(s.id);
        continue;
      }
      add_entry(s, 1);
      ++used;
    }
    return used;
  }

  void form_chunked() {
    const auto& sc = c_.scheduler;
    std::int64_t budget = sc.max_num_batched_tokens;
    // Decodes first (one token each), then the running sequences' unfinished prompts, then new ones.
    budget -= schedule_decodes(budget);
    for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Seq& s = seqs_[static_cast<std::size_t>(running_[i])];
      if (s.in_flight || s.prefilled) continue;
      const std::int64_t n = std::min(budget, s.prefill_target() - s.computed);
      if (!grow(s, s.computed + n)) continue;
      add_entry(s, n);
      budget -= n;
    }
    while (budget > 0 && !waiting_.empty() && static_cast<std::int64_t>(running_.size()) < sc.max_num_seqs) {
      Seq& s = seqs_[static_cast<std::size_t>(waiting_.front())];
      const std::int64_t n = std::min(budget, s.prefill_target());
      if (!grow(s, no_evict() ? s.prompt + s.output : n)) break;
      waiting_.pop_front();
      admit(s);
      add_entry(s, n);
      budget -= n;
    }
  }

  void form_static() {
    const auto& sc = c_.scheduler;
    if (running_.empty()) {
      // A new batch: up to max_num_seqs waiting requests whose whole sequences fit the cache (static
      // batching reserves prompt + output up front, so it never preempts).
      while (!waiting_.empty() && static_cast<std::int64_t>(running_.size()) < sc.max_num_seqs) {
        Seq& s = seqs_[static_cast<std::size_t>(waiting_.front())];
        if (!grow(s, s.prompt + s.output)) break;
        waiting_.pop_front();
        admit(s);
      }
    }
    std::int64_t budget = sc.max_num_batched_tokens;
    bool prefilling = false;
    for (const std::int64_t id : running_) {
      Seq& s = seqs_[static_cast<std::size_t>(id)];
      if (s.in_flight || s.prefilled || budget <= 0) continue;
      const std::int64_t n = std::min(budget, s.prefill_target() - s.computed);
      add_entry(s, n);
      budget -= n;
      prefilling = true;
    }
    if (prefilling) return;
    for (const std::int64_t id : running_) {
      Seq& s = seqs_[static_cast<std::size_t>(id)];
      if (!s.in_flight && s.prefilled) add_entry(s, 1);
    }
  }

  void try_schedule() {
    if (stage0_busy_) return;
    batch_.clear();
    switch (c_.scheduler.kind) {
      case SchedulerKind::Static:
        form_static();
        break;
      case SchedulerKind::Continuous:
        form_continuous();
        break;
      case SchedulerKind::Chunked:
        form_chunked();
        break;
    }
    if (batch_.empty()) return;
    const StepCost& cost = cost_.cost(batch_, c_.trace);
    // Through the pipeline: stage s starts when the batch arrives and the stage is free.
    const SimTime now = sim_.now();
    // The step's host time (step_overhead, see the constructor) comes first: scheduling this batch and
    // processing the previous one's outputs hold the engine before stage 0 can start.
    SimTime t = now + step_overhead_;
    SimTime stage0_end = 0;
    for (std::size_t s = 0; s < stage_free_.size(); ++s) {
      if (s > 0) t += cost.transfer[s - 1];
      t = std::max(t, stage_free_[s]);
      t += cost.stage[s];
      stage_free_[s] = t;
      if (s == 0) stage0_end = t;
    }
    std::size_t slot = 0;
    while (slot < batches_.size() && !batches_[slot].empty()) ++slot;
    if (slot == batches_.size()) batches_.emplace_back();
    std::int32_t decodes = 0, prefill = 0;
    for (const Entry& e : batch_) {
      seqs_[static_cast<std::size_t>(e.seq)].in_flight = true;
      if (e.decode) {
        ++decodes;
      } else {
        prefill += static_cast<std::int32_t>(e.tokens);
      }
    }
    batches_[slot].assign(batch_.begin(), batch_.end());
    // The batch's results first, then stage 0's release: with one stage both happen at the same time, and
    // the next batch must see this one's tokens (events at equal times run in the order scheduled).
    sim_.schedule(t, handler_, kBatchDone, slot);
    stage0_busy_ = true;
    sim_.schedule(stage0_end, handler_, kStageFree);
    StepRecord rec;
    rec.start = to_seconds(now);
    rec.duration = to_seconds(cost.stage[0] + step_overhead_);
    rec.decode = decodes;
    rec.prefill_tokens = prefill;
    rec.waiting = static_cast<std::int32_t>(waiting_.size());
    rec.running = static_cast<std::int32_t>(running_.size());
    rec.kv_used = r_.memory.kv_blocks > 0
                      ? 1.0 - static_cast<double>(blocks_free_) / static_cast<double>(r_.memory.kv_blocks)
                      : 0.0;
    r_.steps.push_back(rec);
    if (prefill == 0 && decodes > 0) {
      r_.layer_split.io += cost.io;
      r_.layer_split.gpu += cost.gpu;
      r_.layer_split.cpu += cost.cpu;
      ++r_.layer_split.steps;
    }
  }

  void finish_batch(std::size_t slot) {
    const SimTime now = sim_.now();
    for (const Entry& e : batches_[slot]) {
      Seq& s = seqs_[static_cast<std::size_t>(e.seq)];
      s.in_flight = false;
      s.computed += e.tokens;
      if (c_.trace && c_.trace->tokens() > 0) {
        s.trace_pos += e.tokens;
        while (s.trace_pos >= c_.trace->tokens()) s.trace_pos -= c_.trace->tokens();
      }
      if (!e.samples) continue;
      s.prefilled = true;
      if (s.generated == 0) {
        s.first_token = now;
      } else {
        const double itl = to_seconds(now - s.last_token);
        itl_.push_back(static_cast<float>(itl));
        s.max_itl = std::max(s.max_itl, itl);
      }
      s.last_token = now;
      ++s.generated;
      if (s.generated >= s.output) complete(s);
    }
    batches_[slot].clear();
  }

  void complete(Seq& s) {
    s.done = true;
    release(s);
    s.running = false;
    running_.erase(std::find(running_.begin(), running_.end(), s.id));
    RequestRecord rec;
    rec.id = s.id;
    rec.prompt_tokens = s.prompt;
    rec.output_tokens = s.output;
    rec.arrival = to_seconds(s.arrival);
    rec.first_token = to_seconds(s.first_token);
    rec.finish = to_seconds(sim_.now());
    rec.max_itl = s.max_itl;
    rec.preemptions = s.preemptions;
    r_.requests.push_back(rec);
    ++completed_;
    if (c_.progress && (completed_ * 100 / std::max<std::int64_t>(total_, 1)) !=
                           ((completed_ - 1) * 100 / std::max<std::int64_t>(total_, 1))) {
      c_.progress(static_cast<double>(completed_) / static_cast<double>(total_));
    }
    if (s.user >= 0 && sent_ < total_) {
      sim_.schedule(users_->next_send_time(sim_.now()), handler_, kUserSend, static_cast<std::uint64_t>(s.user));
    }
    if (cap_ > 0) {
      --in_flight_;
      if (!held_.empty()) {
        const std::int64_t next = held_.front();
        held_.pop_front();
        send(next);
      }
    }
  }

 public:
  std::vector<float> itl_;  ///< every inter-token gap, seconds (float: millions of them, 7 digits suffice)
  [[nodiscard]] const CostModel& cost_model() const { return cost_; }

 private:
  const ServingConfig& c_;
  ServingResult& r_;
  CostModel cost_;
  Simulation sim_;
  std::uint32_t handler_ = 0;
  SimTime step_overhead_ = 0, request_overhead_ = 0;  ///< the runtime's host costs (0: none)
  std::vector<Seq> seqs_;
  std::deque<std::int64_t> waiting_;
  std::vector<std::int64_t> running_;  ///< in admission order
  std::vector<std::int64_t> snapshot_;
  std::int64_t blocks_free_ = 0;
  std::vector<Entry> batch_;
  std::vector<std::vector<Entry>> batches_;  ///< in flight, by slot
  std::vector<SimTime> stage_free_;
  bool stage0_busy_ = false;
  std::int64_t total_ = 0, sent_ = 0, completed_ = 0;
  std::optional<ClosedLoopUsers> users_;  ///< closed loop: who sends what when
  // max_concurrency (open loop): the cap (0: none), requests sent and not completed, those offered while
  // every slot was taken (oldest first), and how many waited and for how long at most.
  std::int64_t cap_ = 0, in_flight_ = 0, held_back_ = 0;
  std::deque<std::int64_t> held_;
  SimTime longest_hold_ = 0;
};

}  // namespace

ServingResult run_serving(const ServingConfig& c) {
  MOESIM_CHECK(c.arch && c.weights && c.node, "run_serving needs a model, a precision and a node");
  ServingResult r;
  r.plan = c.plan;
  if (c.plan.nodes > 1 && c.nic == nullptr) throw UserError("a plan over several nodes needs a NIC profile (nic)");
  if (c.plan.tp > 1 && c.plan.tp <= c.plan.devices_per_node && c.intra_link == nullptr) {
    throw UserError(c.node->origin + " has no intra_node_link, which tensor parallelism inside a node needs");
  }
  if (c.arch->is_moe() && (c.trace == nullptr || c.trace->tokens() == 0)) {
    throw UserError("an MoE model needs a routing trace (a file, or the generator)");
  }
  if (c.arch->is_moe()) {
    MOESIM_CHECK(c.trace->header.experts == c.arch->routed_experts && c.trace->header.top_k == c.arch->top_k &&
                     c.trace->header.layers == model::moe_layer_count(*c.arch),
                 "the trace does not match the model (checked by the caller)");
  }
  r.memory = plan_memory(c);
  if (r.memory.kv_blocks < 1) throw UserError("no room for a single KV-cache block on " + c.node->id);
  {
    // What the engine records as it runs, from the members above: a Seq and a RequestRecord per request,
    // a float per inter-token gap (output - 1 per request), and a StepRecord per engine step (at most one
    // per output token, when one sequence decodes alone, plus one per prompt chunk of
    // max_num_batched_tokens). A closed loop draws its lengths as it runs: the mean of the output
    // distribution stands in for them. Doubles, so absurd counts are refused rather than wrapped.
    double requests = 0, outputs = 0, chunks = 0;
    if (c.workload.arrival == ArrivalKind::ClosedLoop) {
      requests = static_cast<double>(c.workload.requests);
      outputs = requests * mean_length(c.workload.output);
      chunks = requests * std::ceil(mean_length(c.workload.prompt) /
                                    static_cast<double>(std::max<std::int64_t>(1, c.scheduler.max_num_batched_tokens)));
    } else {
      requests = static_cast<double>(c.requests.size());
      for (const Request& q : c.requests) {
        outputs += static_cast<double>(q.output_tokens);
        chunks += std::ceil(static_cast<double>(q.prompt_tokens) /
                            static_cast<double>(std::max<std::int64_t>(1, c.scheduler.max_num_batched_tokens)));
      }
    }
    const double bytes = requests * static_cast<double>(sizeof(Seq) + sizeof(RequestRecord)) +
                         outputs * (static_cast<double>(sizeof(float)) + static_cast<double>(sizeof(StepRecord))) +
                         chunks * static_cast<double>(sizeof(StepRecord));
    model::require_memory(units::bytes(bytes),
                          "serving " + text::printf("%.0f", requests) + " requests with " +
                              text::printf("%.4g", outputs) + " output tokens in all",
                          "serve fewer requests (--requests, workload.requests) or shorter outputs (--output, "
                          "workload.output), or use a machine with more memory");
  }
  ServingEngine engine(c, r);
  engine.run();
  std::sort(r.requests.begin(), r.requests.end(),
            [](const RequestRecord& x, const RequestRecord& y) { return x.id < y.id; });

  // Metrics (vLLM benchmark_serving): over completed requests; the duration runs from the first arrival
  // to the last completion.
  std::vector<double> ttft, tpot, e2el;
  double first = std::numeric_limits<double>::infinity(), last = 0, out_tokens = 0, all_tokens = 0;
  for (const RequestRecord& q : r.requests) {
    ttft.push_back(q.ttft());
    if (q.output_tokens > 1) tpot.push_back(q.tpot());
    e2el.push_back(q.e2el());
    first = std::min(first, q.arrival);
    last = std::max(last, q.finish);
    out_tokens += static_cast<double>(q.output_tokens);
    all_tokens += static_cast<double>(q.output_tokens + q.prompt_tokens);
    const bool good = (!c.slo.ttft_s || q.ttft() <= *c.slo.ttft_s) && (!c.slo.tpot_s || q.tpot() <= *c.slo.tpot_s) &&
                      (!c.slo.e2el_s || q.e2el() <= *c.slo.e2el_s);
    r.good_requests += good ? 1 : 0;
  }
  r.duration = r.requests.empty() ? 0.0 : last - first;
  r.slo_given = c.slo.given();
  r.ttft = percentiles(ttft, c.percentiles);
  r.tpot = percentiles(tpot, c.percentiles);
  r.itl = percentiles(std::move(engine.itl_), c.percentiles);
  r.e2el = percentiles(e2el, c.percentiles);
  if (r.duration > 0) {
    const auto n = static_cast<double>(r.requests.size());
    r.request_throughput = n / r.duration;
    r.output_throughput = out_tokens / r.duration;
    r.total_throughput = all_tokens / r.duration;
    r.goodput = static_cast<double>(r.good_requests) / r.duration;
  }
  double decode_sum = 0, decode_steps = 0;
  for (const StepRecord& s : r.steps) {
    if (s.decode > 0) {
      decode_sum += s.decode;
      decode_steps += 1;
    }
    r.max_kv_used = std::max(r.max_kv_used, s.kv_used);
    r.max_waiting = std::max(r.max_waiting, s.waiting);
  }
  r.mean_decode_batch = decode_steps > 0 ? decode_sum / decode_steps : 0.0;
  if (const ExpertStreamer* st = engine.cost_model().streamer()) r.cache_hit_rate = st->hit_rate();
  if (r.layer_split.steps > 0) {
    const double per = static_cast<double>(r.layer_split.steps) * static_cast<double>(c.arch->layers);
    r.layer_split.io /= per;
    r.layer_split.gpu /= per;
    r.layer_split.cpu /= per;
  }
  return r;
}

}  // namespace moesim::sim
