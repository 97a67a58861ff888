// Parallel plans and the memory plan of the serving simulator (sim/serving.hpp).

#include <algorithm>
#include <cmath>
#include <sstream>

#include "moesim/model/analytic.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/serving.hpp"

namespace moesim::sim {

namespace {

std::string gb(units::Bytes bytes) { return units::format(bytes, 3); }

}  // namespace

const std::vector<NamedOption<CapacityPolicy>>& capacity_policies() {
  static const std::vector<NamedOption<CapacityPolicy>> all = {
      {CapacityPolicy::MaxUtilization, "max-utilization",
       "admit a request when its prompt's KV blocks fit; when a running decode finds the cache full, preempt the "
       "most recently admitted request and recompute it later (vLLM's recompute preemption; TensorRT-LLM's "
       "MAX_UTILIZATION)"},
      {CapacityPolicy::GuaranteedNoEvict, "guaranteed-no-evict",
       "admit a request only when KV blocks for its whole prompt + output are free, reserving them up front: no "
       "preemption, ever (TensorRT-LLM's default CapacitySchedulerPolicy GUARANTEED_NO_EVICT, "
       "tensorrt_llm/llmapi/llm_args.py SchedulerConfig)"},
  };
  return all;
}
CapacityPolicy capacity_policy_by_name(std::string_view name) {
  return by_name(capacity_policies(), name, "scheduler capacity");
}
std::string_view name_of(CapacityPolicy p) { return name_in(capacity_policies(), p); }

ParallelPlan resolve_plan(const ParallelPlan& in, const model::Architecture& a, const model::NodeProfile& node,
                          std::string_view where) {
  ParallelPlan p = in;
  const std::string w(where);
  auto fail = [&](const std::string& field, const std::string& msg) { throw UserError(w + ": " + field + ": " + msg); };
  if (p.nodes < 1) fail("nodes", "must be at least 1");
  if (p.devices_per_node == 0) p.devices_per_node = node.devices.count;
  if (p.devices_per_node < 1 || p.devices_per_node > node.devices.count) {
    fail("devices_per_node", std::to_string(p.devices_per_node) + " is not between 1 and the " +
                                 std::to_string(node.devices.count) + " devices of " + node.id);
  }
  if (p.tp < 1) fail("tp", "must be at least 1");
  if (p.pp < 1) fail("pp", "must be at least 1");
  const std::int64_t devices = p.nodes * p.devices_per_node;
  if (p.tp * p.pp != devices) {
    fail("tp", "tp × pp = " + std::to_string(p.tp) + " × " + std::to_string(p.pp) + " = " +
                   std::to_string(p.tp * p.pp) + " but the cluster has " + std::to_string(p.nodes) + " node(s) × " +
                   std::to_string(p.devices_per_node) + " device(s) = " + std::to_string(devices) +
                   "; make tp × pp equal the devices (e.g. tp " + std::to_string(p.devices_per_node) + ", pp " +
                   std::to_string(p.nodes) + ")");
  }
  if (p.attention_dp && p.attention_replicated)
    fail("attention_replicated",
         "and attention_dp are both set; keep one (replicated: every device attends every "
         "sequence; data-parallel: each device its own)");
  if (!p.attention_dp && !p.attention_replicated) {
    if (a.heads % p.tp != 0) {
      fail("tp", "tensor parallelism " + std::to_string(p.tp) + " does not divide the " + std::to_string(a.heads) +
                     " attention heads of " + a.id + "; use a divisor of " + std::to_string(a.heads));
    }
    if (a.kv_heads > 0 && a.kv_heads % p.tp != 0 && p.tp % a.kv_heads != 0) {
      fail("tp", "tensor parallelism " + std::to_string(p.tp) + " neither divides nor is a multiple of the " +
                     std::to_string(a.kv_heads) + " KV heads of " + a.id);
    }
  }
  if (p.pp > a.layers) {
    fail("pp", "pipeline parallelism " + std::to_string(p.pp) + " is more than the " + std::to_string(a.layers) +
                   " layers of " + a.id + ": every stage needs at least one layer; use at most " +
                   std::to_string(a.layers) + " stages");
  }
  if (a.is_moe()) {
    if (p.moe_tp == 0 && p.moe_ep == 0) {
      p.moe_tp = p.attention_dp || p.attention_replicated ? 1 : p.tp;
      p.moe_ep = p.tp / p.moe_tp;
    } else if (p.moe_tp == 0) {
      if (p.moe_ep < 1 || p.tp % p.moe_ep != 0) fail("moe_ep", "must divide tp = " + std::to_string(p.tp));
      p.moe_tp = p.tp / p.moe_ep;
    } else if (p.moe_ep == 0) {
      if (p.moe_tp < 1 || p.tp % p.moe_tp != 0) fail("moe_tp", "must divide tp = " + std::to_string(p.tp));
      p.moe_ep = p.tp / p.moe_tp;
    }
    if (p.moe_tp * p.moe_ep != p.tp) {
      fail("moe_tp", "moe_tp × moe_ep = " + std::to_string(p.moe_tp) + " × " + std::to_string(p.moe_ep) +
                         " must equal tp = " + std::to_string(p.tp) + " (seed 002: TensorRT-LLM's rule)");
    }
    if (a.routed_experts % p.moe_ep != 0) {
      fail("moe_ep", std::to_string(p.moe_ep) + " does not divide the " + std::to_string(a.routed_experts) +
                         " experts of " + a.id);
    }
    if (a.expert_ffn % p.moe_tp != 0) {
      fail("moe_tp", std::to_string(p.moe_tp) + " does not divide the expert width " + std::to_string(a.expert_ffn));
    }
    if (p.attention_dp && p.moe_tp != 1) {
      fail("moe_tp", "attention data-parallel dispatches whole tokens to whole experts: set moe_tp 1 (moe_ep = tp)");
    }
    if (p.attention_replicated && p.moe_tp != 1) {
      fail("moe_tp", "replicated attention runs whole experts on each device: set moe_tp 1 (moe_ep = tp)");
    }
  } else {
    p.moe_tp = p.tp;
    p.moe_ep = 1;
  }
  if (p.nics_per_node < 1) fail("nics_per_node", "must be at least 1");
  return p;
}

namespace {

/// What one device of a pipeline stage holds: weights, and KV bytes per token of context.
struct StageBytes {
  units::Bytes weights;
  units::Bytes kv_per_token;
};

/// Every stage's device, from the stage's own layers (cost::pipeline_stages): its weights
/// (cost::device_weight_bytes, routed experts 1/tp each unless they stream from storage) and its KV share.
std::vector<StageBytes> stage_bytes(const ServingConfig& c, const ParallelPlan& p, const model::Precision& prec) {
  const auto& a = *c.arch;
  const cost::DeviceSplit split{p.tp, p.moe_tp, p.attention_dp || p.attention_replicated};
  const double experts = c.streaming ? 0.0 : 1.0 / static_cast<double>(p.tp);
  // KV per token on a device of a stage (cost::kv_share, the cost model's).
  const double share = cost::kv_share(a, split);
  std::vector<StageBytes> out;
  for (const cost::StageLayers& stage : cost::pipeline_stages(a.layers, p.pp)) {
    out.push_back({units::bytes(cost::device_weight_bytes(a, prec, split, experts, stage)),
                   model::kv_bytes_per_token(cost::stage_architecture(a, stage), c.kv_bytes) * share});
  }
  return out;
}

/// The stage whose devices hold the most weights (the first of equals).
std::size_t fullest(const std::vector<StageBytes>& stages) {
  std::size_t best = 0;
  for (std::size_t s = 1; s < stages.size(); ++s)
    if (stages[s].weights > stages[best].weights) best = s;
  return best;
}

}  // namespace

MemoryPlan check_memory(const ServingConfig& c) {
  const auto& a = *c.arch;
  const auto& node = *c.node;
  const ParallelPlan& p = c.plan;
  MOESIM_CHECK(node.devices.memory.has_value(), "check_memory needs the device memory (checked by the caller)");
  MemoryPlan m;
  const units::Bytes device_memory = node.devices.memory->value;
  m.usable = device_memory * c.scheduler.gpu_memory_utilization;
  m.stage_starts = stage_layer_starts(a.layers, p.pp);
  const std::vector<StageBytes> stages = stage_bytes(c, p, *c.weights);
  m.busiest_stage = static_cast<std::int64_t>(fullest(stages));
  m.weights = stages[static_cast<std::size_t>(m.busiest_stage)].weights;
  // Activations: vLLM profiles a forward pass of max_num_batched_tokens and reserves its peak. Estimate
  // that peak as the widest live tensors of one layer: the residual stream and its normalised copy (2·h),
  // q/k/v and the attention output (per device), and the MLP's gate and up halves (2·I per device), at the
  // activation precision; plus the logits of the sequences that sample in one step (step_seqs × vocab / tp) in
  // fp32: one pipeline micro-batch's where a step holds fewer than max_num_seqs.
  const double tp = static_cast<double>(p.tp);
  const double ffn = static_cast<double>(
      std::max({a.expert_ffn * std::max<std::int64_t>(a.top_k, 1), a.dense_ffn, a.shared_ffn * a.shared_experts}));
  const double width = 2.0 * static_cast<double>(a.hidden) +
                       static_cast<double>((a.heads + 2 * a.kv_heads) * a.head_dim + a.heads * a.head_dim) / tp +
                       2.0 * ffn / tp;
  const double per_token = width * c.activation_bytes;
  const double logits = static_cast<double>(c.scheduler.step_seqs()) * static_cast<double>(a.vocab) / tp * 4.0;
  m.activations = units::bytes(static_cast<double>(c.scheduler.max_num_batched_tokens) * per_token + logits);
  const units::Bytes free_bytes = m.usable - m.weights - m.activations;
  if (free_bytes <= units::Bytes{}) {
    // Say by how much, and what would fit: a smaller token budget, a smaller precision with this plan, or
    // more pipeline stages.
    std::vector<std::string> fits;
    // Half the room left by the weights and logits for activations leaves the other half for the KV cache.
    const auto tokens =
        static_cast<std::int64_t>((m.usable - m.weights - units::bytes(logits)).base() / 2.0 / per_token);
    if (tokens >= 1 && tokens < c.scheduler.max_num_batched_tokens)
      fits.push_back("scheduler.max_num_batched_tokens " + std::to_string(tokens) + " (now " +
                     std::to_string(c.scheduler.max_num_batched_tokens) + ")");
    for (const char* name : {"bf16", "fp8", "int8", "q4", "q2"}) {
      const model::Precision& q = model::precision(name);
      if (q.bits_per_weight >= c.weights->bits_per_weight) continue;
      const std::vector<StageBytes> smaller = stage_bytes(c, p, q);
      if (smaller[fullest(smaller)].weights + m.activations < m.usable) {
        fits.push_back("precision " + q.name + " with tp " + std::to_string(p.tp) + " × pp " + std::to_string(p.pp));
        break;
      }
    }
    for (std::int64_t more = 2; more <= 16; more *= 2) {
      ParallelPlan bigger = p;
      bigger.pp = p.pp * more;
      bigger.nodes = p.nodes * more;
      if (bigger.pp > a.layers) break;
      const std::vector<StageBytes> split = stage_bytes(c, bigger, *c.weights);
      if (split[fullest(split)].weights + m.activations < m.usable) {
        fits.push_back(std::to_string(bigger.nodes) + " nodes (pp " + std::to_string(bigger.pp) + ") at " +
                       c.weights->name);
        break;
      }
    }
    std::ostringstream o;
    o << a.id << " at " << c.weights->name << " does not fit on " << node.id << " with tp " << p.tp << " × pp " << p.pp
      << ": "
      << (p.pp > 1 ? "the fullest device (stage " + std::to_string(m.busiest_stage) + ") needs " : "each device needs ")
      << gb(m.weights) << " of weights + " << gb(m.activations) << " of activations, but has " << gb(m.usable)
      << " usable (" << gb(device_memory) << " × " << c.scheduler.gpu_memory_utilization
      << " gpu_memory_utilization): " << gb(units::bytes(-free_bytes.base())) << " short, before any KV cache; "
      << (fits.empty() ? std::string("nothing smaller in this family fits; use a node with more memory")
                       : "would fit: " + text::join(fits, " or "));
    m.fits = false;
    m.why_not = o.str();
    return m;
  }
  // Every stage holds the KV cache of its own layers for every token in flight, so the pipeline holds as
  // many tokens as its tightest stage (the fullest one, unless another's layers cost more KV per token).
  const double kv_multiplier = p.attention_dp ? static_cast<double>(p.tp) : 1.0;
  double tokens = 1e15;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].kv_per_token <= units::Bytes{}) continue;
    const double t = (m.usable - stages[s].weights - m.activations) / stages[s].kv_per_token * kv_multiplier;
    if (t < tokens) {
      tokens = t;
      m.kv_stage = static_cast<std::int64_t>(s);
    }
  }
  m.kv_per_token = stages[static_cast<std::size_t>(m.kv_stage)].kv_per_token;
  const std::int64_t bs = c.scheduler.block_size;
  m.kv_blocks = static_cast<std::int64_t>(std::min(tokens / static_cast<double>(bs), 1e12));
  m.kv_tokens = m.kv_blocks * bs;
  return m;
}

MemoryPlan plan_memory(const ServingConfig& c) {
  MemoryPlan m = check_memory(c);
  if (!m.fits) throw UserError(m.why_not);
  return m;
}

}  // namespace moesim::sim
