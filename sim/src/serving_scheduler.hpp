#pragma once
// The serving simulator's schedulers (internal to sim/src): each request's state (Seq), the waiting and
// running queues, the KV cache (serving_kv.hpp) and the three policies of SchedulerConfig that form an
// engine step's batch (static batching, continuous batching, chunked prefill), with vLLM's recompute
// preemption. The engine (serving.cpp) adds the requests, queues each as it reaches the scheduler, asks
// form() for every step's batch, advances the sequences when the step ends and hands back those that
// complete.
//
// The policies are registered (scheduler_kinds(), sim/serving.hpp): adding one is a member that fills the
// batch, like form_static(), and its entry in scheduler_registry() (serving_scheduler.cpp).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "moesim/sim/event_core.hpp"
#include "moesim/sim/request.hpp"
#include "moesim/sim/serving.hpp"
#include "serving_cost.hpp"
#include "serving_kv.hpp"

namespace moesim::sim::serving_detail {

struct Seq {
  std::int64_t id = 0;
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  SimTime arrival{};
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
  SimTime first_token{-1};
  SimTime last_token{};
  double max_itl = 0;
  std::int32_t preemptions = 0;
  [[nodiscard]] std::int64_t prefill_target() const { return prompt + generated; }
};

class Scheduler {
 public:
  /// A scheduler for `c`'s policy over a KV cache of `memory`'s capacity.
  Scheduler(const ServingConfig& c, const MemoryPlan& memory);

  /// Adds request `q`'s sequence, not yet queued, and returns its id: its index in the order added.
  std::int64_t add(const Request& q);
  void reserve(std::size_t requests) { seqs_.reserve(requests); }
  [[nodiscard]] Seq& seq(std::int64_t id) { return seqs_[static_cast<std::size_t>(id)]; }

  /// Refuses (UserError) a request that could never run: one that needs more than the whole KV cache, or
  /// without chunked prefill a prompt longer than a step.
  void check_fits(std::int64_t prompt, std::int64_t output, std::int64_t id) const;

  /// Sequence `id` reaches the scheduler: it waits at the tail of the queue.
  void enqueue(std::int64_t id) { waiting_.push_back(id); }

  /// The next step's batch under the configured policy, from the sequences not in flight (empty: nothing
  /// to run now). Valid until the next call.
  const std::vector<Entry>& form();

  /// Sequence `s` has sampled its last token: its blocks go back to the cache and it stops running.
  void finish(Seq& s);

  [[nodiscard]] std::size_t waiting() const { return waiting_.size(); }
  [[nodiscard]] std::size_t running() const { return running_.size(); }
  [[nodiscard]] double kv_used() const { return kv_.used(); }
  [[nodiscard]] std::int64_t preemptions() const { return preemptions_; }

  // The built-in policies, each called by the `form` of its scheduler_kinds() entry: they fill the batch that
  // form() returns.
  inline void form_continuous();
  inline void form_chunked();
  inline void form_static();

 private:
  // The policies' parts are inline and defined in serving_scheduler.cpp, beside their callers, so that the
  // compiler can still inline them into the policies and their per-sequence loops (bench/bench_serve.cpp
  // measures them).

  /// Grows `s`'s blocks to hold `tokens` cached tokens; false (and no change) if the cache is full.
  bool grow(Seq& s, std::int64_t tokens) { return kv_.grow(s.blocks, tokens); }
  inline void preempt(std::int64_t id);
  inline bool grow_or_preempt(Seq& s, std::int64_t tokens);
  [[nodiscard]] inline bool scheduled_now(std::int64_t id) const;
  inline void add_entry(Seq& s, std::int64_t tokens);
  /// TensorRT-LLM's GUARANTEED_NO_EVICT: a request starts only with blocks for prompt + output reserved,
  /// so every later grow() of it is already covered and nothing is ever preempted.
  [[nodiscard]] bool no_evict() const { return c_.scheduler.capacity == CapacityPolicy::GuaranteedNoEvict; }
  /// The step holds as many sequences as it may (SchedulerConfig::step_seqs: one pipeline micro-batch's).
  [[nodiscard]] bool step_full() const { return static_cast<std::int64_t>(batch_.size()) >= step_seqs_; }
  inline void admit(Seq& s);
  inline std::int64_t schedule_decodes(std::int64_t budget);

  const ServingConfig& c_;
  const SchedulerInfo kind_;  ///< the registry entry of c_.scheduler.kind
  KvBlocks kv_;
  std::int64_t kv_tokens_ = 0;  ///< the cache's capacity in tokens, for check_fits' message
  std::int64_t step_seqs_ = 0;  ///< c_.scheduler.step_seqs()
  std::vector<Seq> seqs_;
  std::deque<std::int64_t> waiting_;
  std::vector<std::int64_t> running_;  ///< in admission order
  std::vector<std::int64_t> snapshot_;
  std::vector<Entry> batch_;
  std::int64_t preemptions_ = 0;
};

}  // namespace moesim::sim::serving_detail
