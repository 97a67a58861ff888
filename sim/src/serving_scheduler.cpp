// The serving simulator's schedulers (serving_scheduler.hpp): how each engine step's batch is formed, and
// whom to preempt when the KV cache is full.

#include "serving_scheduler.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "moesim/model/error.hpp"

namespace moesim::sim::serving_detail {

namespace {

std::vector<SchedulerInfo>& scheduler_registry() {
  static std::vector<SchedulerInfo> all = {
      {SchedulerKind::Static, "static",
       "static batching: up to max_num_seqs waiting requests start together and run to the last one's end", false,
       [](Scheduler& s) { s.form_static(); }},
      {SchedulerKind::Continuous, "continuous",
       "continuous batching (vLLM without chunked prefill): whole-prompt prefill steps first, then decode steps", false,
       [](Scheduler& s) { s.form_continuous(); }},
      {SchedulerKind::Chunked, "chunked",
       "chunked prefill (vLLM enable_chunked_prefill, DeepSpeed Dynamic SplitFuse): decodes first, then prompt "
       "chunks up to max_num_batched_tokens",
       true, [](Scheduler& s) { s.form_chunked(); }},
  };
  return all;
}

}  // namespace

}  // namespace moesim::sim::serving_detail

namespace moesim::sim {

const std::vector<SchedulerInfo>& scheduler_kinds() { return serving_detail::scheduler_registry(); }
void register_scheduler(SchedulerInfo info) {
  add_entry(serving_detail::scheduler_registry(), std::move(info), "scheduler");
}
SchedulerKind scheduler_by_name(std::string_view name) {
  return entry_by_name(scheduler_kinds(), name, "scheduler").value;
}
std::string_view name_of(SchedulerKind s) { return name_in(scheduler_kinds(), s); }

}  // namespace moesim::sim

namespace moesim::sim::serving_detail {

Scheduler::Scheduler(const ServingConfig& c, const MemoryPlan& memory)
    : c_(c),
      kind_(registered(scheduler_kinds(), c.scheduler.kind, "scheduler")),
      kv_(memory.kv_blocks, c.scheduler.block_size),
      kv_tokens_(memory.kv_tokens),
      step_seqs_(c.scheduler.step_seqs()) {}

std::int64_t Scheduler::add(const Request& q) {
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
  return s.id;
}

void Scheduler::check_fits(std::int64_t prompt, std::int64_t output, std::int64_t id) const {
  if (const auto len = c_.scheduler.max_model_len; len && prompt + output > *len) {
    throw UserError("request " + std::to_string(id) + " asks for " + std::to_string(prompt) + " prompt + " +
                    std::to_string(output) + " output tokens, more than max_model_len " + std::to_string(*len) +
                    " (vLLM refuses such a request); raise scheduler.max_model_len or shorten the request");
  }
  const std::int64_t need = kv_.blocks_for(prompt + output);
  if (need > kv_.total_blocks()) {
    throw UserError("request " + std::to_string(id) + " needs " + std::to_string(prompt + output) +
                    " tokens of KV cache but the whole cache holds " + std::to_string(kv_tokens_) +
                    " on this plan; shorten the request, add devices or use a smaller precision");
  }
  if (!kind_.chunked_prefill && prompt > c_.scheduler.max_num_batched_tokens) {
    throw UserError("request " + std::to_string(id) + " has a " + std::to_string(prompt) +
                    "-token prompt, more than max_num_batched_tokens " +
                    std::to_string(c_.scheduler.max_num_batched_tokens) +
                    " (a whole prompt must fit one step without chunked prefill); raise it or use scheduler chunked");
  }
}

const std::vector<Entry>& Scheduler::form() {
  batch_.clear();
  kind_.form(*this);
  return batch_;
}

void Scheduler::finish(Seq& s) {
  s.done = true;
  kv_.release(s.blocks);
  s.running = false;
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
}

/// vLLM's recompute preemption: the victim loses its cache and goes back to the head of the queue.
void Scheduler::preempt(std::int64_t id) {
  Seq& s = seqs_[static_cast<std::size_t>(id)];
  kv_.release(s.blocks);
  s.computed = 0;
  s.trace_pos = s.trace_offset;
  s.prefilled = false;
  s.running = false;
  ++s.preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
}

/// Makes room for `s` to hold `tokens` by preempting the most recently admitted others not in flight.
bool Scheduler::grow_or_preempt(Seq& s, std::int64_t tokens) {
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

bool Scheduler::scheduled_now(std::int64_t id) const {
  return std::any_of(batch_.begin(), batch_.end(), [&](const Entry& e) { return e.seq == id; });
}

void Scheduler::add_entry(Seq& s, std::int64_t tokens) {
  Entry e;
  e.seq = s.id;
  e.tokens = tokens;
  e.context = s.computed;
  e.trace_at = s.trace_pos;
  e.samples = s.prefilled || s.computed + tokens == s.prefill_target();
  e.decode = s.prefilled;
  batch_.push_back(e);
}

void Scheduler::admit(Seq& s) {
  s.running = true;
  running_.push_back(s.id);
}

void Scheduler::form_continuous() {
  const auto& sc = c_.scheduler;
  // Prefill first: whole prompts from the head of the queue while they fit the step and the cache.
  std::int64_t budget = sc.max_num_batched_tokens;
  while (!waiting_.empty()) {
    Seq& s = seqs_[static_cast<std::size_t>(waiting_.front())];
    const std::int64_t n = s.prefill_target();
    if (n > budget || static_cast<std::int64_t>(running_.size()) >= sc.max_num_seqs || step_full()) break;
    if (no_evict()) {
      if (!grow(s, s.prompt + s.output)) break;  // the whole sequence's blocks, reserved now
    } else {
      // Admission keeps one block per running sequence free for its next decode token (vLLM's watermark).
      if (kv_.blocks_for(n) + static_cast<std::int64_t>(running_.size()) > kv_.free_blocks()) break;
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
std::int64_t Scheduler::schedule_decodes(std::int64_t budget) {
  snapshot_ = running_;
  std::int64_t used = 0;
  for (const std::int64_t id : snapshot_) {
    if (used >= budget || step_full()) break;
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

void Scheduler::form_chunked() {
  const auto& sc = c_.scheduler;
  std::int64_t budget = sc.max_num_batched_tokens;
  // Decodes first (one token each), then the running sequences' unfinished prompts, then new ones.
  budget -= schedule_decodes(budget);
  for (std::size_t i = 0; i < running_.size() && budget > 0 && !step_full(); ++i) {
    Seq& s = seqs_[static_cast<std::size_t>(running_[i])];
    if (s.in_flight || s.prefilled) continue;
    const std::int64_t n = std::min(budget, s.prefill_target() - s.computed);
    if (!grow(s, s.computed + n)) continue;
    add_entry(s, n);
    budget -= n;
  }
  while (budget > 0 && !waiting_.empty() && static_cast<std::int64_t>(running_.size()) < sc.max_num_seqs &&
         !step_full()) {
    Seq& s = seqs_[static_cast<std::size_t>(waiting_.front())];
    const std::int64_t n = std::min(budget, s.prefill_target());
    if (!grow(s, no_evict() ? s.prompt + s.output : n)) break;
    waiting_.pop_front();
    admit(s);
    add_entry(s, n);
    budget -= n;
  }
}

void Scheduler::form_static() {
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
    if (s.in_flight || s.prefilled || budget <= 0 || step_full()) continue;
    const std::int64_t n = std::min(budget, s.prefill_target() - s.computed);
    add_entry(s, n);
    budget -= n;
    prefilling = true;
  }
  if (prefilling) return;
  for (const std::int64_t id : running_) {
    Seq& s = seqs_[static_cast<std::size_t>(id)];
    if (!s.in_flight && s.prefilled && !step_full()) add_entry(s, 1);
  }
}

}  // namespace moesim::sim::serving_detail
