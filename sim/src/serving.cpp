// The serving simulator's engine (sim/serving.hpp): the event loop, the clients' arrivals and concurrency
// cap, the pipeline that each step's batch runs through, and the requests' records. Its parts: the
// schedulers and the KV cache (serving_scheduler.cpp, serving_kv.hpp), the step cost model
// (serving_cost.cpp) and the metrics (serving_metrics.cpp).

#include "moesim/sim/serving.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "serving_cost.hpp"
#include "serving_metrics.hpp"
#include "serving_scheduler.hpp"

namespace moesim::sim {

namespace serving_detail {
namespace {

/// The longest parenthesised aside of a runtime figure's source an assumption line quotes (a longer one, a
/// fitted runtime's list of rows, is left to `moesim hw --json`).
constexpr std::size_t kSourceAside = 120;

enum EventKind : std::uint32_t { kArrival, kStageFree, kBatchDone, kUserSend, kOffer, kSchedule };

class ServingEngine final : public EventHandler {
 public:
  ServingEngine(const ServingConfig& c, ServingResult& r)
      : c_(c), r_(r), cost_(c, r.plan, r.assumptions), sched_(c, r.memory) {
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
    if (!(c_.engine_time_scale > 0) || !std::isfinite(c_.engine_time_scale))
      throw UserError("the engine's time scale " + text::printf("%g", c_.engine_time_scale) +
                      " must be a positive number (1 + a runtime's held-out error, which is above -100%)");
    if (c_.node->devices.step_overhead) step_overhead_ = scaled(to_sim_time(c_.node->devices.step_overhead->value));
    if (c_.node->devices.request_overhead)
      request_overhead_ = scaled(to_sim_time(c_.node->devices.request_overhead->value));
    if (c_.node->devices.sequence_overhead)
      sequence_overhead_ = scaled(to_sim_time(c_.node->devices.sequence_overhead->value));
    if (c_.plan.attention_dp) host_ranks_ = std::max<std::int64_t>(c_.plan.tp, 1);
    // A fitted runtime's source names every row it was fitted to: quoted without those lists, which the
    // profile holds whole.
    const auto source = [](const std::string& s) {
      const std::string b = text::brief(s, kSourceAside);
      return b.size() < s.size() ? b + " [(...): `moesim hw --json` gives the whole source]" : b;
    };
    if (sequence_overhead_ > SimTime{})
      r_.assumptions.push_back("every engine step adds the runtime's host time sequence_overhead " +
                               units::format(c_.node->devices.sequence_overhead->value) + " per sequence it holds" +
                               (host_ranks_ > 1 ? " on its busiest of " + std::to_string(host_ranks_) +
                                                      " attention-DP ranks, each its own executor"
                                                : std::string()) +
                               " (" + source(c_.node->devices.sequence_overhead->source) + ")");
    if (step_overhead_ > SimTime{})
      r_.assumptions.push_back("every engine step adds the runtime's host time step_overhead " +
                               units::format(c_.node->devices.step_overhead->value) + " (" +
                               source(c_.node->devices.step_overhead->source) + ")");
    if (request_overhead_ > SimTime{})
      r_.assumptions.push_back("every request waits the runtime's request_overhead " +
                               units::format(c_.node->devices.request_overhead->value) +
                               " before the scheduler sees it (" + source(c_.node->devices.request_overhead->source) +
                               ")");
    batches_.resize(static_cast<std::size_t>(r_.plan.pp) + 1);
    stage_free_.assign(static_cast<std::size_t>(r_.plan.pp), SimTime{});
    if (r_.plan.pp > 1)
      r_.assumptions.push_back("pipeline: at most " + std::to_string(r_.plan.pp) +
                               " micro-batches in flight, one per stage, each of at most " +
                               std::to_string(c_.scheduler.step_seqs()) + " sequences (" +
                               (c_.scheduler.max_batch_size ? "scheduler.max_batch_size"
                                                            : "scheduler.max_num_seqs: set max_batch_size for "
                                                              "TensorRT-LLM's per-micro-batch limit") +
                               "), as TensorRT-LLM's and vLLM's engines keep them");
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
      if (c_.itl_distribution) itl_.reserve(static_cast<std::size_t>(gaps));
      sched_.reserve(c_.requests.size());
      cap_ = w.max_concurrency;
      for (const Request& q : c_.requests) {
        sched_.check_fits(q.prompt_tokens, q.output_tokens, q.id);
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
    r_.preemptions = sched_.preemptions();
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
        sched_.enqueue(static_cast<std::int64_t>(arg));
        break;
      case kUserSend: {
        const std::optional<Request> q = users_->send(static_cast<std::int64_t>(arg), sim_.now());
        if (!q) return;
        sched_.check_fits(q->prompt_tokens, q->output_tokens, q->id);
        if (request_overhead_ > SimTime{}) {
          // As for open-loop arrivals: the request enters the queue after its host-side admission.
          sim_.schedule(sim_.now() + request_overhead_, handler_, kArrival, static_cast<std::uint64_t>(add_seq(*q)));
          return;
        }
        sched_.enqueue(add_seq(*q));
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
      case kSchedule:
        schedule_pending_ = false;
        break;
      default:
        MOESIM_CHECK(false, "unknown serving event");
    }
    if (kind == kArrival || kind == kUserSend || kind == kOffer) {
      // A request that arrives while the engine is idle is scheduled after every other event of the same
      // instant (events at equal times run in the order scheduled): requests sent together, as a burst's
      // or a closed loop's users at time 0 or llama-batched-bench's B prompts, meet the scheduler together
      // and share its first step, rather than the first of them stepping alone.
      if (!schedule_pending_) {
        schedule_pending_ = true;
        sim_.schedule(sim_.now(), handler_, kSchedule);
      }
      return;
    }
    try_schedule();
  }

 private:
  /// max_concurrency: request `id` is sent now (vLLM's client acquires its semaphore): it counts as in
  /// flight until it completes, its arrival becomes now (TTFT and E2EL count from here, as vLLM's
  /// client-side start_time does), and it reaches the scheduler after the runtime's request_overhead.
  void send(std::int64_t id) {
    Seq& s = sched_.seq(id);
    const SimTime now = sim_.now();
    if (now > s.arrival) {
      ++held_back_;
      longest_hold_ = std::max(longest_hold_, now - s.arrival);
    }
    s.arrival = now;
    ++in_flight_;
    sim_.schedule(now + request_overhead_, handler_, kArrival, static_cast<std::uint64_t>(id));
  }

  /// Adds request `q`'s sequence to the scheduler (not yet queued) and counts it as sent.
  std::int64_t add_seq(const Request& q) {
    ++sent_;
    return sched_.add(q);
  }

  /// A duration of the engine's at ServingConfig::engine_time_scale (exactly itself at 1).
  [[nodiscard]] SimTime scaled(SimTime t) const {
    if (c_.engine_time_scale == 1.0) return t;
    return SimTime{static_cast<std::int64_t>(std::llround(static_cast<double>(t.ps()) * c_.engine_time_scale))};
  }

  void try_schedule() {
    // At most one micro-batch per pipeline stage in flight: TensorRT-LLM's PyExecutor runs pp_size micro-batch
    // slots round-robin, each refilled only once its previous batch has come back (num_micro_batches =
    // mapping.pp_size, tensorrt_llm/_torch/pyexecutor/py_executor.py _executor_loop_pp), as vLLM's engine core
    // keeps a batch queue of the executor's max_concurrent_batches, its pipeline-parallel size
    // (vllm/v1/engine/core.py). Without the cap a stage 0 freed early would start ever smaller batches from
    // the sequences left over, each reading the stage's weights again.
    if (stage0_busy_ || in_flight_batches_ >= stage_free_.size()) return;
    const std::vector<Entry>& batch = sched_.form();
    if (batch.empty()) return;
    const StepCost& cost = cost_.cost(batch, c_.trace);
    // Through the pipeline: stage s starts when the batch arrives and the stage is free.
    const SimTime now = sim_.now();
    // The step's host time (step_overhead, and sequence_overhead per sequence of the batch, see the
    // constructor) comes first: scheduling this batch and processing the previous one's outputs hold the
    // engine before stage 0 can start.
    // Under attention data parallelism every one of the tp ranks runs its own executor over its own
    // requests (TensorRT-LLM's attention DP: "different user requests are routed to different DP ranks",
    // docs/source/features/parallel-strategy.md; vLLM's data_parallel_size: one engine core per rank), so
    // the ranks' host loops run side by side and the busiest one, holding ceil(batch / tp) sequences
    // (CostModel::cost deals them out in turn), sets the step's host time.
    const auto held = static_cast<std::int64_t>(batch.size());
    const SimTime host = step_overhead_ + sequence_overhead_ * ((held + host_ranks_ - 1) / host_ranks_);
    r_.host_time += to_seconds(host);
    SimTime t = now + host;
    SimTime stage0_end{};
    for (std::size_t s = 0; s < stage_free_.size(); ++s) {
      if (s > 0) t += scaled(cost.transfer[s - 1]);
      t = std::max(t, stage_free_[s]);
      t += scaled(cost.stage[s]);
      stage_free_[s] = t;
      if (s == 0) stage0_end = t;
    }
    std::size_t slot = 0;
    while (slot < batches_.size() && !batches_[slot].empty()) ++slot;
    if (slot == batches_.size()) batches_.emplace_back();
    std::int32_t decodes = 0, prefill = 0;
    for (const Entry& e : batch) {
      sched_.seq(e.seq).in_flight = true;
      if (e.decode) {
        ++decodes;
      } else {
        prefill += static_cast<std::int32_t>(e.tokens);
      }
    }
    batches_[slot].assign(batch.begin(), batch.end());
    ++in_flight_batches_;
    // The batch's results first, then stage 0's release: with one stage both happen at the same time, and
    // the next batch must see this one's tokens (events at equal times run in the order scheduled).
    sim_.schedule(t, handler_, kBatchDone, slot);
    stage0_busy_ = true;
    sim_.schedule(stage0_end, handler_, kStageFree);
    StepRecord rec;
    rec.start = to_seconds(now);
    rec.duration = to_seconds(scaled(cost.stage[0]) + host);
    rec.sequences = static_cast<std::int32_t>(batch.size());
    rec.decode = decodes;
    rec.prefill_tokens = prefill;
    rec.waiting = static_cast<std::int32_t>(sched_.waiting());
    rec.running = static_cast<std::int32_t>(sched_.running());
    rec.kv_used = sched_.kv_used();
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
      Seq& s = sched_.seq(e.seq);
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
        if (c_.itl_distribution) itl_.push_back(static_cast<float>(itl));
        s.max_itl = std::max(s.max_itl, itl);
      }
      s.last_token = now;
      ++s.generated;
      if (s.generated >= s.output) complete(s);
    }
    batches_[slot].clear();
    --in_flight_batches_;
  }

  void complete(Seq& s) {
    sched_.finish(s);
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
  Scheduler sched_;
  Simulation sim_;
  std::uint32_t handler_ = 0;
  SimTime step_overhead_{}, request_overhead_{}, sequence_overhead_{};  ///< the runtime's host costs (0: none)
  std::int64_t host_ranks_ = 1;  ///< executors that hold the step's sequences side by side (attention DP: tp)
  std::vector<std::vector<Entry>> batches_;  ///< in flight, by slot
  std::vector<SimTime> stage_free_;
  std::size_t in_flight_batches_ = 0;  ///< non-empty slots of batches_: at most one per pipeline stage
  bool stage0_busy_ = false;
  bool schedule_pending_ = false;  ///< a kSchedule event is queued at the current instant
  std::int64_t total_ = 0, sent_ = 0, completed_ = 0;
  std::optional<ClosedLoopUsers> users_;  ///< closed loop: who sends what when
  // max_concurrency (open loop): the cap (0: none), requests sent and not completed, those offered while
  // every slot was taken (oldest first), and how many waited and for how long at most.
  std::int64_t cap_ = 0, in_flight_ = 0, held_back_ = 0;
  std::deque<std::int64_t> held_;
  SimTime longest_hold_{};
};

/// Refuses (model::require_memory) a run whose records would not fit in this machine's memory.
void require_record_memory(const ServingConfig& c) {
  // What the engine records as it runs (ServingEngine above; Seq in serving_scheduler.hpp): a Seq and a
  // RequestRecord per request, a float per inter-token gap (output - 1 per request), and a StepRecord per
  // engine step (at most one per output token, when one sequence decodes alone, plus one per prompt chunk of
  // max_num_batched_tokens). A closed loop draws its lengths as it runs: the mean of the output distribution
  // stands in for them. Doubles, so absurd counts are refused rather than wrapped.
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

}  // namespace
}  // namespace serving_detail

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
  if (const auto len = c.scheduler.max_model_len; len && r.memory.kv_tokens < *len) {
    // vLLM's start-up check (check_enough_kv_cache_memory): one request of max_model_len must fit.
    throw UserError("the KV cache holds " + std::to_string(r.memory.kv_tokens) +
                    " tokens on this plan, fewer than "
                    "one request of max_model_len " +
                    std::to_string(*len) +
                    " (vLLM refuses to start); lower "
                    "scheduler.max_model_len, raise gpu_memory_utilization, add devices or use a smaller precision");
  }
  serving_detail::require_record_memory(c);
  serving_detail::ServingEngine engine(c, r);
  engine.run();
  serving_detail::summarise(c, std::move(engine.itl_), r);
  if (const ExpertStreamer* st = engine.cost_model().streamer()) r.cache_hit_rate = st->hit_rate();
  return r;
}

}  // namespace moesim::sim
