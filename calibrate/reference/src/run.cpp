// The reference decoder, expert-parallel over MPI ranks (see run.hpp for the design and its sources).
// This file holds the engine and run_reference; World is run_world.cpp, the results' outputs run_results.cpp.
#include "moesim/reference/run.hpp"

#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/mpi/collectives.hpp>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <ostream>
#include <random>
#include <sstream>
#include <thread>

#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::reference {

namespace mpi = boost::mpi;

namespace {

/// UserError unless `b` is a built-in balancing: the decoder's layer implements their fillers; a balancing
/// registered beside them (sim::register_balancing) has its `fill` run by the simulator's decode engine only.
void check_builtin_balancing(sim::Balancing b) {
  const std::vector<sim::Balancing> builtin = {sim::Balancing::None, sim::Balancing::BusyAll, sim::Balancing::LruFill};
  if (std::find(builtin.begin(), builtin.end(), b) != builtin.end()) return;
  std::vector<std::string> names;
  names.reserve(builtin.size());
  for (const auto v : builtin) names.emplace_back(sim::name_of(v));
  throw UserError("--balancing " + std::string(sim::name_of(b)) +
                  ": the reference decoder implements the built-in balancings only (" + text::join(names) +
                  "); a registered one runs in the simulator (`moesim simulate --balancing`)");
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Message tags of the centralised protocol.
constexpr int kTagHeader = 1;
constexpr int kTagRouting = 2;
constexpr int kTagInputs = 3;
constexpr int kTagOutputs = 4;
// Header kinds.
constexpr int kWork = 0;
constexpr int kStop = 1;

double peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

/// One rank's decoder state and its part of every layer.
class Engine {
 public:
  Engine(const World& world, const RunOptions& opt, const std::vector<std::int32_t>& prompt, const DecoderShape& shape,
         Weights& w, const sim::Placement& p)
      : opt_(opt),
        prompt_(prompt),
        shape_(shape),
        a_(shape.arch),
        w_(w),
        dispatcher_(p),
        rank_(world.rank()),
        size_(world.size()),
        centralised_(opt.attention == sim::AttentionMode::Centralised),
        local_(p.group_of_node(world.rank()).experts) {
    std::sort(local_.begin(), local_.end());
    lru_.assign(static_cast<std::size_t>(a_.layers * a_.routed_experts), -1);
    if (w_.dense) {
      attention_ = std::make_unique<Attention>(shape, static_cast<std::int64_t>(prompt.size()) + opt.new_tokens);
    }
    if (world.mpi()) comm_ = std::make_unique<mpi::communicator>();
  }

  /// Runs the prompt and the decode steps on a rank that holds the dense weights (rank 0, or every rank
  /// when decentralised). Fills `r` on rank 0.
  void generate(RunResult& r, calibrate::Progress& progress) {
    const auto layers = static_cast<std::size_t>(a_.layers);
    std::vector<std::int32_t> input = prompt_;
    std::int64_t position = 0;
    const auto total = static_cast<std::int64_t>(opt_.new_tokens);
    const auto t_decode = Clock::now();
    for (std::int64_t step = 0; step < total; ++step) {
      const bool prefill = step == 0;
      const auto t = static_cast<std::int64_t>(input.size());
      StepTiming st;
      st.prefill = prefill;
      st.position = position;
      st.tokens = t;
      st.layers.resize(layers);
      const auto t0 = Clock::now();
      // Embedding.
      x_.resize(static_cast<std::size_t>(t * a_.hidden));
      for (std::int64_t i = 0; i < t; ++i) {
        std::copy_n(&w_.embed[static_cast<std::size_t>(input[static_cast<std::size_t>(i)] * a_.hidden)], a_.hidden,
                    &x_[static_cast<std::size_t>(i * a_.hidden)]);
      }
      st.embed = since(t0);
      const std::int64_t decode_index = prefill ? -1 : step - 1;
      for (std::int64_t layer = 0; layer < a_.layers; ++layer) {
        layer_forward(layer, position, t, decode_index, st.layers[static_cast<std::size_t>(layer)], r);
      }
      // Final norm and LM head on the last position only: its arg-max is the next token.
      const auto th = Clock::now();
      last_.resize(static_cast<std::size_t>(a_.hidden));
      rms_norm(&x_[static_cast<std::size_t>((t - 1) * a_.hidden)], w_.final_norm.data(), a_.hidden, shape_.rms_eps,
               last_.data());
      logits_.resize(static_cast<std::size_t>(a_.vocab));
      linear(w_.lm_head.data(), a_.vocab, a_.hidden, last_.data(), 1, logits_.data());
      const auto next = static_cast<std::int32_t>(argmax(logits_.data(), a_.vocab));
      st.head = since(th);
      st.seconds = since(t0);
      r.generated.push_back(next);
      r.steps.push_back(std::move(st));
      position += t;
      input.assign(1, next);
      if (rank_ == 0 && step > 0) {
        const double rate = static_cast<double>(step) / since(t_decode);
        progress.update(static_cast<double>(step + 1) / static_cast<double>(total),
                        "decode token " + std::to_string(step + 1) + "/" + std::to_string(total) + ", " +
                            std::to_string(rate).substr(0, 5) + " tokens/s");
      } else if (rank_ == 0) {
        progress.update(1.0 / static_cast<double>(total), "prefill of " + std::to_string(t) + " tokens done");
      }
    }
    if (centralised_ && comm_ && rank_ == 0) {
      const int header[4] = {kStop, 0, 0, 0};
      for (int dst = 1; dst < size_; ++dst) comm_->send(dst, kTagHeader, header, 4);
    }
    r.logits = logits_;
  }

  /// A centralised worker: serves rank 0's layer requests until it says stop.
  void serve(RunResult& r) {
    const auto k = static_cast<std::size_t>(a_.top_k);
    for (;;) {
      LayerTiming lt;
      const auto t0 = Clock::now();
      int header[4];
      comm_->recv(0, kTagHeader, header, 4);
      if (header[0] == kStop) break;
      const std::int64_t layer = header[1], t = header[2], decode_index = header[3];
      chosen_.resize(static_cast<std::size_t>(t) * k);
      n2_.resize(static_cast<std::size_t>(t * a_.hidden));
      comm_->recv(0, kTagRouting, chosen_.data(), static_cast<int>(chosen_.size()));
      comm_->recv(0, kTagInputs, n2_.data(), static_cast<int>(n2_.size()));
      lt.exchange += since(t0);
      const auto te = Clock::now();
      run_experts(layer, t, decode_index, lt);
      lt.experts = since(te);
      const auto ts = Clock::now();
      pack_mine();
      comm_->send(0, kTagOutputs, packed_.data(), static_cast<int>(packed_.size()));
      lt.exchange += since(ts);
      worker_layers_.push_back(lt);
    }
    // The worker's layers become steps of one layer each, enough for the end-of-run gather.
    StepTiming st;
    st.layers = std::move(worker_layers_);
    r.steps.push_back(std::move(st));
  }

 private:
  void layer_forward(std::int64_t layer, std::int64_t position, std::int64_t t, std::int64_t decode_index,
                     LayerTiming& lt, RunResult& r) {
    const auto& lw = w_.layers[static_cast<std::size_t>(layer)];
    const auto k = static_cast<std::size_t>(a_.top_k);
    const auto h = static_cast<std::size_t>(a_.hidden);
    const auto tt = static_cast<std::size_t>(t);
    auto t0 = Clock::now();
    attention_->forward(lw, layer, position, t, x_.data());
    lt.attention = since(t0);
    // Router: RMSNorm, gate logits, softmax, top-k, renormalise.
    t0 = Clock::now();
    n2_.resize(tt * h);
    for (std::size_t i = 0; i < tt; ++i)
      rms_norm(&x_[i * h], lw.post_norm.data(), a_.hidden, shape_.rms_eps, &n2_[i * h]);
    router_logits_.resize(tt * static_cast<std::size_t>(a_.routed_experts));
    linear(lw.gate.data(), a_.routed_experts, a_.hidden, n2_.data(), t, router_logits_.data());
    chosen_.resize(tt * k);
    gates_.resize(tt * k);
    for (std::size_t i = 0; i < tt; ++i) {
      route(&router_logits_[i * static_cast<std::size_t>(a_.routed_experts)], a_.routed_experts, a_.top_k,
            &chosen_[i * k], &gates_[i * k]);
    }
    lt.router = since(t0);
    if (rank_ == 0) record_routing(layer, position, t, r);
    // Centralised: the driver sends every worker the routing and the inputs (exchange 1 of 2).
    if (centralised_ && comm_) {
      t0 = Clock::now();
      const int header[4] = {kWork, static_cast<int>(layer), static_cast<int>(t), static_cast<int>(decode_index)};
      for (int dst = 1; dst < size_; ++dst) {
        comm_->send(dst, kTagHeader, header, 4);
        comm_->send(dst, kTagRouting, chosen_.data(), static_cast<int>(chosen_.size()));
        comm_->send(dst, kTagInputs, n2_.data(), static_cast<int>(n2_.size()));
      }
      lt.exchange += since(t0);
    }
    t0 = Clock::now();
    run_experts(layer, t, decode_index, lt);
    lt.experts = since(t0);
    // Exchange of expert outputs.
    t0 = Clock::now();
    const float* outputs = slots_.data();
    if (comm_ && !centralised_) {
      // Each (token, slot) was written by exactly one rank and is 0 elsewhere: the sum is exact.
      summed_.resize(slots_.size());
      mpi::all_reduce(*comm_, slots_.data(), static_cast<int>(slots_.size()), summed_.data(), std::plus<float>());
      outputs = summed_.data();
    } else if (comm_) {
      // Centralised, exchange 2 of 2: gather every worker's outputs, in (token, slot) order.
      for (int src = 1; src < size_; ++src) {
        const auto mine = slots_of(src);
        packed_.resize(mine.size() * h);
        comm_->recv(src, kTagOutputs, packed_.data(), static_cast<int>(packed_.size()));
        for (std::size_t j = 0; j < mine.size(); ++j) std::copy_n(&packed_[j * h], h, &slots_[mine[j] * h]);
      }
    }
    lt.exchange += since(t0);
    // Combine in router order, then the residual.
    t0 = Clock::now();
    acc_.resize(h);
    for (std::size_t i = 0; i < tt; ++i) {
      std::fill(acc_.begin(), acc_.end(), 0.0F);
      for (std::size_t s = 0; s < k; ++s) {
        const float g = gates_[i * k + s];
        const float* o = outputs + (i * k + s) * h;
        for (std::size_t d = 0; d < h; ++d) acc_[d] += g * o[d];
      }
      for (std::size_t d = 0; d < h; ++d) x_[i * h + d] += acc_[d];
    }
    lt.combine = since(t0);
  }

  void record_routing(std::int64_t layer, std::int64_t position, std::int64_t t, RunResult& r) const {
    const auto k = static_cast<std::size_t>(a_.top_k);
    const auto layers = static_cast<std::size_t>(a_.layers);
    auto& tr = r.trace;
    if (layer == 0) {
      for (std::int64_t i = 0; i < t; ++i) {
        tr.request.push_back(0);
        tr.position.push_back(static_cast<std::uint32_t>(position + i));
      }
      tr.experts.resize(tr.request.size() * layers * k);
      tr.weights.resize(tr.request.size() * layers * k);
    }
    for (std::int64_t i = 0; i < t; ++i) {
      const auto at = ((static_cast<std::size_t>(position + i)) * layers + static_cast<std::size_t>(layer)) * k;
      for (std::size_t s = 0; s < k; ++s) {
        tr.experts[at + s] = static_cast<std::uint16_t>(chosen_[static_cast<std::size_t>(i) * k + s]);
        tr.weights[at + s] = gates_[static_cast<std::size_t>(i) * k + s];
      }
    }
  }

  /// The dispatch of every token-layer of the current layer: owners_[token · k + slot] = rank.
  void dispatch(std::int64_t t) {
    const auto k = static_cast<std::size_t>(a_.top_k);
    owners_.resize(static_cast<std::size_t>(t) * k);
    for (std::size_t i = 0; i < static_cast<std::size_t>(t); ++i) {
      dispatcher_.nodes_for(std::span<const std::int32_t>(&chosen_[i * k], k), &owners_[i * k]);
    }
  }

  /// (token · k + slot) indices rank `who` computes, in order, from this layer's dispatch (run_experts).
  [[nodiscard]] std::vector<std::size_t> slots_of(int who) const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < owners_.size(); ++i)
      if (owners_[i] == who) out.push_back(i);
    return out;
  }

  void pack_mine() {
    const auto h = static_cast<std::size_t>(a_.hidden);
    const auto mine = slots_of(rank_);
    packed_.resize(mine.size() * h);
    for (std::size_t j = 0; j < mine.size(); ++j) std::copy_n(&slots_[mine[j] * h], h, &packed_[j * h]);
  }

  /// This rank's experts for the current layer: the routed ones into slots_, then balancing's fillers.
  void run_experts(std::int64_t layer, std::int64_t t, std::int64_t decode_index, LayerTiming& lt) {
    const auto k = static_cast<std::size_t>(a_.top_k);
    const auto h = static_cast<std::size_t>(a_.hidden);
    const auto tt = static_cast<std::size_t>(t);
    dispatch(t);
    slots_.assign(tt * k * h, 0.0F);
    const auto& lw = w_.layers[static_cast<std::size_t>(layer)];
    std::int64_t* lru = &lru_[static_cast<std::size_t>(layer * a_.routed_experts)];
    const std::int64_t g = decode_index < 0 ? -1 : decode_index * a_.layers + layer;
    std::vector<std::int32_t> computed;
    // Routed experts, grouped by expert (seed 001's group-by): one batched call per expert.
    std::vector<std::size_t> rows;
    for (const auto e : local_) {
      rows.clear();
      for (std::size_t i = 0; i < tt * k; ++i)
        if (owners_[i] == rank_ && chosen_[i] == e) rows.push_back(i);
      if (rows.empty()) continue;
      batch_in_.resize(rows.size() * h);
      batch_out_.resize(rows.size() * h);
      for (std::size_t j = 0; j < rows.size(); ++j) std::copy_n(&n2_[(rows[j] / k) * h], h, &batch_in_[j * h]);
      expert_forward(*lw.experts[static_cast<std::size_t>(e)], a_.hidden, a_.expert_ffn, batch_in_.data(),
                     static_cast<std::int64_t>(rows.size()), batch_out_.data(), scratch_);
      for (std::size_t j = 0; j < rows.size(); ++j) std::copy_n(&batch_out_[j * h], h, &slots_[rows[j] * h]);
      lt.routed += static_cast<std::int32_t>(rows.size());
      computed.push_back(static_cast<std::int32_t>(e));
    }
    if (g < 0) return;  // balancing is a decode-time policy
    for (const auto e : computed) lru[e] = g;
    // Fillers run on the token's input and are thrown away (seed 000 §4.2: they keep weights hot).
    std::vector<std::int32_t> fillers;
    if (opt_.balancing == sim::Balancing::BusyAll) {
      for (const auto e : local_)
        if (std::find(computed.begin(), computed.end(), e) == computed.end())
          fillers.push_back(static_cast<std::int32_t>(e));
    } else if (opt_.balancing == sim::Balancing::LruFill) {
      std::vector<std::int32_t> per_rank(static_cast<std::size_t>(size_), 0);
      for (const auto o : owners_) ++per_rank[static_cast<std::size_t>(o)];
      const std::int32_t max_routed = *std::max_element(per_rank.begin(), per_rank.end());
      const std::int32_t mine = per_rank[static_cast<std::size_t>(rank_)];
      // The spare quota goes to the least recently used local experts (ties: lowest id), as the simulator.
      for (std::int32_t f = mine; f < max_routed; ++f) {
        std::int64_t best = -1;
        for (const auto e : local_) {
          const auto ei = static_cast<std::int32_t>(e);
          if (std::find(computed.begin(), computed.end(), ei) != computed.end() ||
              std::find(fillers.begin(), fillers.end(), ei) != fillers.end())
            continue;
          if (best < 0 || lru[e] < lru[best]) best = e;
        }
        if (best < 0) break;
        fillers.push_back(static_cast<std::int32_t>(best));
      }
    }
    batch_out_.resize(tt * h);
    for (const auto e : fillers) {
      expert_forward(*lw.experts[static_cast<std::size_t>(e)], a_.hidden, a_.expert_ffn, n2_.data(), t,
                     batch_out_.data(), scratch_);
      lru[e] = g;
    }
    lt.fillers += static_cast<std::int32_t>(fillers.size());
  }

  const RunOptions& opt_;
  const std::vector<std::int32_t>& prompt_;
  const DecoderShape& shape_;
  const model::Architecture& a_;
  Weights& w_;
  sim::Dispatcher dispatcher_;
  int rank_;
  int size_;
  bool centralised_;
  std::vector<std::int64_t> local_;
  std::unique_ptr<Attention> attention_;
  std::unique_ptr<mpi::communicator> comm_;
  std::vector<std::int64_t> lru_;  ///< layer × expert: last decode token-layer it was computed (-1: never)
  std::vector<float> x_, n2_, acc_, last_, router_logits_, gates_, slots_, summed_, packed_, batch_in_, batch_out_,
      scratch_, logits_;
  std::vector<std::int32_t> chosen_, owners_;
  std::vector<LayerTiming> worker_layers_;
};

/// Per step and layer, the time a rank worked before the exchange (see LayerTiming::wait).
std::vector<double> work_before_exchange(const RunResult& r, bool centralised) {
  std::vector<double> out;
  for (const auto& st : r.steps)
    for (const auto& l : st.layers) out.push_back(centralised ? l.experts : l.attention + l.router + l.experts);
  return out;
}

}  // namespace

RunResult run_reference(const World& world, const RunOptions& options) {
  RunResult r;
  r.ranks = world.size();
  r.ranks_on_host = world.ranks_on_host();
  r.attention = options.attention;
  r.balancing = options.balancing;
  std::unique_ptr<Checkpoint> ckpt;
  Weights weights;
  std::string error;
  calibrate::Progress progress(world.rank() == 0 && options.progress ? &std::cerr : nullptr, 1.0);
  const auto t_load = Clock::now();
  std::string config_path;
  try {
    check_builtin_balancing(options.balancing);  // before anything is loaded
    ckpt = std::make_unique<Checkpoint>(Checkpoint::open(options.checkpoint));
    config_path = ckpt->config_path().string();
    r.shape = load_decoder_shape(ckpt->config_path());
    const auto& a = r.shape.arch;
    r.notes = r.shape.notes;
    r.prompt = options.prompt;
    if (r.prompt.empty()) {
      if (options.prompt_length < 1) {
        throw UserError("--prompt-length " + std::to_string(options.prompt_length) +
                        ": give at least 1, or the ids themselves with --prompt 1,2,3");
      }
      std::mt19937_64 rng(options.prompt_seed);
      for (std::int64_t i = 0; i < options.prompt_length; ++i)
        r.prompt.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(a.vocab)));
    }
    for (std::size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] < 0 || r.prompt[i] >= a.vocab) {
        throw UserError("--prompt: token " + std::to_string(i) + " is id " + std::to_string(r.prompt[i]) +
                        ", outside the vocabulary of " + ckpt->config_path().string() + " (0 .. " +
                        std::to_string(a.vocab - 1) + ")");
      }
    }
    if (options.new_tokens < 1) throw UserError("--tokens must be at least 1");
    const auto context = static_cast<std::int64_t>(r.prompt.size()) + options.new_tokens;
    if (a.max_context > 0 && context > a.max_context) {
      throw UserError("--tokens: prompt + generated tokens = " + std::to_string(context) + " exceed the model's " +
                      "max_position_embeddings " + std::to_string(a.max_context) + "; generate fewer tokens");
    }
    r.placement = sim::resolve_placement(options.placement, a.routed_experts, world.size(), {options.groups, {}},
                                         options.placement_file);
    const auto& mine = r.placement.group_of_node(world.rank()).experts;
    r.threads = options.threads > 0
                    ? options.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world.ranks_on_host());
    openblas_set_num_threads(r.threads);
    const bool dense = options.attention == sim::AttentionMode::Decentralised || world.rank() == 0;
    progress.set_phase(0, 1, "ref: loading");
    weights = load_weights(*ckpt, r.shape, dense, mine, [&](std::size_t done, std::size_t total) {
      progress.update(static_cast<double>(done) / static_cast<double>(total),
                      std::to_string(done) + "/" + std::to_string(total) + " tensors");
    });
    ckpt.reset();  // the f32 copies are all that is needed: unmap the checkpoint
  } catch (const UserError& e) {
    error = e.what();
  }
  world.agree(error);
  r.load_seconds = since(t_load);
  progress.done("weights loaded");

  Engine engine(world, options, r.prompt, r.shape, weights, r.placement);
  progress.set_phase(0, 1, "ref: decoding");
  if (weights.dense) {
    engine.generate(r, progress);
  } else {
    engine.serve(r);
  }
  progress.done(std::to_string(r.generated.size()) + " tokens generated");

  // Gather what rank 0 reports for every rank.
  const bool centralised = options.attention == sim::AttentionMode::Centralised;
  r.weight_bytes = {weights.bytes};
  r.peak_rss_bytes = {peak_rss()};
  if (world.mpi()) {
    mpi::communicator comm;
    const auto work = work_before_exchange(r, centralised);
    std::vector<std::vector<double>> all_work;
    std::vector<std::uint64_t> bytes;
    std::vector<double> rss;
    mpi::gather(comm, work, all_work, 0);
    mpi::gather(comm, weights.bytes, bytes, 0);
    mpi::gather(comm, peak_rss(), rss, 0);
    if (world.rank() == 0) {
      r.weight_bytes = bytes;
      r.peak_rss_bytes = rss;
      std::size_t at = 0;
      for (auto& st : r.steps) {
        for (auto& l : st.layers) {
          double slowest = 0;
          for (const auto& wv : all_work)
            if (at < wv.size()) slowest = std::max(slowest, wv[at]);
          l.wait = std::clamp(slowest - work[at], 0.0, l.exchange);
          ++at;
        }
      }
    }
  }
  r.trace.header.model = config_path;
  r.trace.header.layers = r.shape.arch.layers;
  r.trace.header.experts = r.shape.arch.routed_experts;
  r.trace.header.top_k = r.shape.arch.top_k;
  r.trace.header.source = "moesim ref run: " + options.checkpoint.string() + ", " + std::to_string(world.size()) +
                          " rank(s), greedy decoding of a " + std::to_string(r.prompt.size()) + "-token prompt";
  return r;
}

}  // namespace moesim::reference
