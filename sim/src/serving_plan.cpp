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

std::string gb(double bytes) { return units::format(units::bytes(bytes), 3); }

}  // namespace


const std::vector<NamedOption<SchedulerKind>>& scheduler_kinds() {
  static const std::vector<NamedOption<SchedulerKind>> all = {
      {SchedulerKind::Static, "static",
       "static batching: up to max_num_seqs waiting requests start together and run to the last one's end"},
      {SchedulerKind::Continuous, "continuous",
       "continuous batching (vLLM without chunked prefill): whole-prompt prefill steps first, then decode steps"},
      {SchedulerKind::Chunked, "chunked",
       "chunked prefill (vLLM enable_chunked_prefill, DeepSpeed Dynamic SplitFuse): decodes first, then prompt "
       "chunks up to max_num_batched_tokens"},
  };
  return all;
}
SchedulerKind scheduler_by_name(std::string_view name) { return by_name(scheduler_kinds(), name, "scheduler"); }
std::string_view name_of(SchedulerKind s) { return name_in(scheduler_kinds(), s); }

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
    fail("attention_replicated", "and attention_dp are both set; keep one (replicated: every device attends every "
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
  if (a.layers % p.pp != 0) {
    fail("pp", "pipeline parallelism " + std::to_string(p.pp) + " does not divide the " + std::to_string(a.layers) +
                   " layers of " + a.id + "; use a divisor of " + std::to_string(a.layers));
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

/// Weights per device of a stage, activations, KV bytes per token: the fullest device (stage 0 holds the
/// embedding, the last stage the LM head; with pp = 1 one device holds both).
struct DeviceBytes {
  double weights = 0;
  double kv_per_token = 0;
  double kv_multiplier = 1;  ///< attention-DP: each device holds its own sequences' KV
};

DeviceBytes device_bytes(const ServingConfig& c, const ParallelPlan& p, const model::Precision& prec) {
  const auto& a = *c.arch;
  const model::ComponentParams params = model::parameter_counts(a);
  const double pp = static_cast<double>(p.pp);
  const double tp = static_cast<double>(p.tp);
  const double attn_tp = p.attention_dp || p.attention_replicated ? 1.0 : tp;
  auto bytes = [&](double n) { return model::param_bytes(static_cast<std::int64_t>(std::llround(n)), prec).base(); };
  DeviceBytes d;
  // Per stage (layers split evenly): attention split over TP (or whole under attention-DP), router and
  // norms replicated, shared experts and dense FFNs split over TP, routed experts over moe_tp × moe_ep.
  double w = bytes(static_cast<double>(params.attention) / pp / attn_tp) +
             bytes(static_cast<double>(params.router + params.norms) / pp) +
             bytes(static_cast<double>(params.shared_experts + params.dense_ffn) / pp / attn_tp);
  if (!c.streaming) w += bytes(static_cast<double>(params.routed_experts) / pp / tp);
  // Embedding and LM head are vocabulary-parallel over TP (vLLM's VocabParallelEmbedding / ParallelLMHead).
  const double head = static_cast<double>(params.lm_head > 0 ? params.lm_head : 0);
  const double ends =
      p.pp == 1 ? static_cast<double>(params.embedding) + head : std::max(static_cast<double>(params.embedding), head);
  w += bytes(ends / attn_tp);
  d.weights = w;
  // KV per token on a device of a stage: GQA heads split over TP (one head replicated when tp > heads),
  // MLA's latent replicated (vLLM), attention-DP: the device's own sequences hold the whole KV.
  const double kv_all = model::kv_bytes_per_token(a, c.kv_bytes).base() / pp;
  double share = 1.0;
  if (!p.attention_dp && !p.attention_replicated && a.kv_heads > 0 && a.mla.kv_lora_rank == 0) {
    share = std::max(1.0 / tp, 1.0 / static_cast<double>(a.kv_heads));
  }
  d.kv_per_token = kv_all * share;
  d.kv_multiplier = p.attention_dp ? tp : 1.0;
  return d;
}

}  // namespace

MemoryPlan plan_memory(const ServingConfig& c) {
  const auto& a = *c.arch;
  const auto& node = *c.node;
  const ParallelPlan& p = c.plan;
  MOESIM_CHECK(node.devices.memory.has_value(), "plan_memory needs the device memory (checked by the caller)");
  MemoryPlan m;
  const double device_memory = node.devices.memory->value.base();
  m.usable = device_memory * c.scheduler.gpu_memory_utilization;
  const DeviceBytes d = device_bytes(c, p, *c.weights);
  m.weights = d.weights;
  // Activations: vLLM profiles a forward pass of max_num_batched_tokens and reserves its peak. Estimate
  // that peak as the widest live tensors of one layer: the residual stream and its normalised copy (2·h),
  // q/k/v and the attention output (per device), and the MLP's gate and up halves (2·I per device), at the
  // activation precision; plus the logits of the sequences that sample (max_num_seqs × vocab / tp) in fp32.
  const double tp = static_cast<double>(p.tp);
  const double ffn = static_cast<double>(
      std::max({a.expert_ffn * std::max<std::int64_t>(a.top_k, 1), a.dense_ffn, a.shared_ffn * a.shared_experts}));
  const double width = 2.0 * static_cast<double>(a.hidden) +
                       static_cast<double>((a.heads + 2 * a.kv_heads) * a.head_dim + a.heads * a.head_dim) / tp +
                       2.0 * ffn / tp;
  m.activations = static_cast<double>(c.scheduler.max_num_batched_tokens) * width * c.activation_bytes +
                  static_cast<double>(c.scheduler.max_num_seqs) * static_cast<double>(a.vocab) / tp * 4.0;
  m.kv_per_token = d.kv_per_token;
  const double free_bytes = m.usable - m.weights - m.activations;
  if (free_bytes <= 0) {
    // Say by how much, and what would fit: a smaller precision with this plan, or more pipeline stages.
    std::vector<std::string> fits;
    for (const char* name : {"bf16", "fp8", "int8", "q4", "q2"}) {
      const model::Precision& q = model::precision(name);
      if (q.bits_per_weight >= c.weights->bits_per_weight) continue;
      if (device_bytes(c, p, q).weights + m.activations < m.usable) {
        fits.push_back("precision " + q.name + " with tp " + std::to_string(p.tp) + " × pp " + std::to_string(p.pp));
        break;
      }
    }
    for (std::int64_t more = 2; more <= 16; more *= 2) {
      ParallelPlan bigger = p;
      bigger.pp = p.pp * more;
      bigger.nodes = p.nodes * more;
      if (a.layers % bigger.pp != 0) continue;
      if (device_bytes(c, bigger, *c.weights).weights + m.activations < m.usable) {
        fits.push_back(std::to_string(bigger.nodes) + " nodes (pp " + std::to_string(bigger.pp) + ") at " +
                       c.weights->name);
        break;
      }
    }
    std::ostringstream o;
    o << a.id << " at " << c.weights->name << " does not fit on " << node.id << " with tp " << p.tp << " × pp " << p.pp
      << ": each device needs " << gb(m.weights) << " of weights + " << gb(m.activations) << " of activations, but has "
      << gb(m.usable) << " usable (" << gb(device_memory) << " × " << c.scheduler.gpu_memory_utilization
      << " gpu_memory_utilization): " << gb(-free_bytes) << " short, before any KV cache; "
      << (fits.empty() ? std::string("nothing smaller in this family fits; use a node with more memory")
                       : "would fit: " + text::join(fits, " or "));
    throw UserError(o.str());
  }
  const std::int64_t bs = c.scheduler.block_size;
  const double tokens = m.kv_per_token > 0 ? free_bytes / m.kv_per_token * d.kv_multiplier : 1e15;
  m.kv_blocks = static_cast<std::int64_t>(std::min(tokens / static_cast<double>(bs), 1e12));
  m.kv_tokens = m.kv_blocks * bs;
  return m;
}

}  // namespace moesim::sim
