#pragma once
// Serving at scale (issue 6): many users' requests through an engine that batches them, on a cluster split
// by a parallel plan. An iteration-level simulator, as vLLM's engine steps and as Vidur (Agrawal et al.,
// MLSys 2024) models it: each step the scheduler forms a batch (decode tokens and prefill chunks), the
// step costs what the plan's slowest device spends on it (cost model below), and requests advance.
//
//  - Parallel plan (ParallelPlan): tensor parallelism `tp` over the devices of a stage (Megatron-LM: two
//    all-reduces of the batch's activations per layer), pipeline stages `pp` (layers split as vLLM splits
//    them, stage_layer_starts; the stage boundary sends the activations; seed 003's scatter/all-gather
//    sends 1/tp of them across nodes), and for the MoE layers the hybrid of seed 002: each expert split
//    `moe_tp` ways, the experts spread over `moe_ep` groups, moe_tp × moe_ep = tp (TP: moe_ep = 1; EP:
//    moe_tp = 1). With `attention_dp`, attention runs data-parallel (each device holds all attention
//    weights and 1/tp of the sequences) and the MoE layers dispatch and combine tokens with two
//    all-to-alls (DeepSeek-V3 style).
//  - Routing: the experts a device loads for a batch are the distinct experts its tokens chose, read from
//    a routing trace (request r's i-th token is trace token (offset_r + i) mod T, so consecutive tokens of
//    a request keep the trace's reuse). That is where MoE decode cost lives: a batch of 1 reads top-k
//    experts per layer, a batch of 64 on Mixtral reads all 8.
//  - Step cost per device and layer (rooflines with the profile's measured efficiency bands,
//    model::kernel_rates): attention projections, attention over the KV cache (decode: every cached
//    token's K and V; prefill chunk of n tokens after p cached: 4·nq·hd·(n·p + n(n+1)/2) FLOPs), router,
//    experts, shared experts or dense FFN (their weights and the activations each token moves through
//    them, model/step_cost.hpp), the collectives, the profile's per-kernel and per-layer
//    overheads; the last stage adds the LM head for the sequences that sample. Quantised weights
//    (fp8, int8, q4, q2) are dequantised inside the GEMM (seed 003 §FP8): bytes at their precision, FLOPs
//    at bf16, the compute time scaled by 1 + the profile's devices.dequant_overhead for that precision.
//  - Experts from storage (flash-moe, seed 004): with `streaming` set, routed experts are not resident;
//    each MoE layer reads the batch's distinct experts through the page cache (sim/streaming.hpp) before
//    computing them: the serial GPU → SSD → GPU pipeline, or overlapped.
//  - Schedulers (SchedulerConfig): static batching, continuous batching (vLLM's default without chunked
//    prefill: prefill-only steps first, whole prompts), chunked prefill (vLLM's enable_chunked_prefill and
//    DeepSpeed's Dynamic SplitFuse: decodes first, then prompt chunks up to max_num_batched_tokens).
//    KV cache in blocks of `block_size` tokens, capacity from device memory × utilisation − weights −
//    activations. The capacity policy (SchedulerConfig::capacity) says when a request is admitted:
//    max-utilization (vLLM's): when its prompt's blocks fit, and when a running decode needs a block and
//    none is free the most recently admitted request is preempted (vLLM's recompute preemption);
//    guaranteed-no-evict (TensorRT-LLM's default CapacitySchedulerPolicy): only when blocks for its whole
//    prompt + output are free, reserved up front, so that no request is ever preempted.
//  - Pipelines: up to pp batches are in flight, one per stage; a request is in at most one of them (vLLM's
//    virtual engines), so a pipeline with fewer runnable requests than stages has bubbles.
//  - Client concurrency: with the workload's max_concurrency (vLLM's --max-concurrency) at most that many
//    requests are in flight; a request offered while all are is held until one completes (first come,
//    first served), and its TTFT and E2EL count from when it was sent, as vLLM's client counts them.
//  - Metrics as vLLM's benchmark_serving names them: TTFT, TPOT, ITL, E2EL (mean, median, p90, p99),
//    request and token throughput, goodput under an SLO, plus queue depth and KV usage over time.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/registry.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/model/units.hpp"
#include "moesim/sim/event_core.hpp"
#include "moesim/sim/streaming.hpp"
#include "moesim/sim/trace.hpp"
#include "moesim/sim/workload.hpp"

namespace moesim::sim {

struct ParallelPlan {
  std::int64_t nodes = 1;
  std::int64_t devices_per_node = 0;  ///< 0: all the node profile's devices
  std::int64_t tp = 1;                ///< tensor-parallel devices per pipeline stage
  std::int64_t pp = 1;                ///< pipeline stages
  std::int64_t moe_tp = 0;            ///< 0: tp (seed 002's default: MoE tensor parallel)
  std::int64_t moe_ep = 0;            ///< 0: tp / moe_tp
  bool attention_dp = false;          ///< attention data-parallel inside the tp group, MoE by all-to-all
  /// Seed 000's decentralised design (§4.3, Fig. 7): every device of the tp group runs attention and the
  /// router for every sequence, the experts are expert-parallel, and each device sends its experts' outputs
  /// to all the others once per MoE layer (cost::expert_outputs): no all-reduce, no dispatch.
  bool attention_replicated = false;
  std::int64_t nics_per_node = 1;  ///< inter-node NIC ports per node (rails): cross-node traffic spreads over them
};

/// How the experts of one MoE layer run on one device: one option for every instrument (model/step_cost.hpp).
using cost::expert_execution_by_name;
using cost::expert_executions;
using cost::ExpertExecution;
using cost::name_of;

enum class SchedulerKind { Static, Continuous, Chunked };
namespace serving_detail {
class Scheduler;
}
/// A scheduler as the registry holds it: `form` forms an engine step's batch from the scheduler's queues
/// (sim/src/serving_scheduler.hpp, where the built-in ones are).
struct SchedulerInfo {
  SchedulerKind value;
  std::string name;
  std::string description;
  /// Splits a prompt over steps; without it a whole prompt must fit one step (max_num_batched_tokens).
  bool chunked_prefill = false;
  void (*form)(serving_detail::Scheduler& scheduler) = nullptr;
};
/// The registered schedulers, in registration order (--help lists them); the built-in ones first.
const std::vector<SchedulerInfo>& scheduler_kinds();
/// Adds a scheduler: scheduler.kind and --scheduler then accept its name, and a serving run with its value
/// forms batches with its `form`. UserError for a name or value taken. Not thread-safe: register before
/// running.
void register_scheduler(SchedulerInfo info);
SchedulerKind scheduler_by_name(std::string_view name);
std::string_view name_of(SchedulerKind s);

/// When a waiting request may start (TensorRT-LLM's CapacitySchedulerPolicy names both:
/// tensorrt_llm/llmapi/llm_args.py SchedulerConfig.capacity_scheduler_policy, default GUARANTEED_NO_EVICT).
enum class CapacityPolicy { MaxUtilization, GuaranteedNoEvict };
const std::vector<NamedOption<CapacityPolicy>>& capacity_policies();
CapacityPolicy capacity_policy_by_name(std::string_view name);
std::string_view name_of(CapacityPolicy p);

struct SchedulerConfig {
  SchedulerKind kind = SchedulerKind::Chunked;
  CapacityPolicy capacity = CapacityPolicy::MaxUtilization;  ///< vLLM's behaviour by default
  std::int64_t max_num_seqs = 256;                           ///< vLLM max_num_seqs: sequences running at once
  /// Sequences in one engine step, which with pipeline stages is one micro-batch (TensorRT-LLM's
  /// max_batch_size: its MicroBatchScheduler fills each micro-batch up to it, while its capacity scheduler
  /// keeps pp x max_batch_size requests active, tensorrt_llm/_torch/pyexecutor/_util.py and
  /// model_engine.py get_max_num_sequences). Unset: max_num_seqs, as vLLM's one limit.
  std::optional<std::int64_t> max_batch_size;
  /// The sequences one step may hold: max_batch_size where set (never more than max_num_seqs), else max_num_seqs.
  [[nodiscard]] std::int64_t step_seqs() const {
    return max_batch_size ? std::min(*max_batch_size, max_num_seqs) : max_num_seqs;
  }
  std::int64_t max_num_batched_tokens = 2048;  ///< vLLM max_num_batched_tokens (chunked: the token budget)
  std::int64_t block_size = 16;                ///< KV-cache block, tokens (vLLM's default)
  double gpu_memory_utilization = 0.9;         ///< fraction of device memory the engine may use (vLLM's default)
  /// vLLM's max_model_len: the longest request (prompt + output) the engine accepts. vLLM refuses a longer
  /// request (vllm/entrypoints/openai/serving_engine.py, _validate_input) and refuses to start when the KV
  /// cache cannot hold one request of this length (vllm/v1/core/kv_cache_utils.py,
  /// check_enough_kv_cache_memory). Unset: vLLM's default is the model's max_position_embeddings, which
  /// moesim does not hold, so only the KV cache bounds a request.
  std::optional<std::int64_t> max_model_len;
};

/// Service-level objective for goodput (vLLM benchmark_serving --goodput). A request is good when every
/// set bound holds: TTFT, its mean inter-token latency (TPOT) and its end-to-end latency.
struct Slo {
  std::optional<double> ttft_s;
  std::optional<double> tpot_s;  ///< a request's mean time per output token (vLLM's goodput "tpot")
  std::optional<double> e2el_s;
  [[nodiscard]] bool given() const { return ttft_s || tpot_s || e2el_s; }
};

struct ServingConfig {
  const model::Architecture* arch = nullptr;
  const model::Precision* weights = nullptr;
  const model::NodeProfile* node = nullptr;
  const model::NicProfile* nic = nullptr;         ///< between nodes (required for nodes > 1)
  const model::NicProfile* intra_link = nullptr;  ///< between the devices of a node (required for tp > 1 in a node)
  ParallelPlan plan;
  SchedulerConfig scheduler;
  ExpertExecution experts = ExpertExecution::Fused;
  const RoutingTrace* trace = nullptr;  ///< required for an MoE model
  WorkloadSpec workload;
  std::vector<Request> requests;  ///< the open-loop requests (empty for a closed loop)
  Slo slo;
  /// Percentiles of each latency to report besides mean, median and std (serve --percentiles; vLLM's
  /// --metric-percentiles). moesim's default: 90 and 99.
  std::vector<double> percentiles = {90, 99};
  double activation_bytes = 2.0;  ///< bytes per activation on the wire (bf16)
  double kv_bytes = 2.0;          ///< bytes per KV-cache element (bf16)
  std::optional<StreamingParams> streaming;
  std::function<void(double)> progress;  ///< fraction of requests done
  /// Every engine step's time (its stages, their transfers, the host's step and sequence overheads) and
  /// every request's request_overhead take this multiple of what the cost model gives: 1 + a runtime's
  /// held-out error (model::RuntimeProfile::error_low, error_high), so that the run's figures come out as
  /// the measured ones would if the engine ran that much slower or faster (scenario::run_serve's range).
  double engine_time_scale = 1.0;
  /// Memory the cost model may give each routing-trace token's chosen experts as bit masks (one bit per
  /// expert and MoE layer), which count a step's distinct experts in a few ORs per token; a trace whose
  /// masks would take more is walked expert by expert instead (the same figures, more slowly). 0: always
  /// walk. The masks serve the fused expert path only; per-expert counts always walk.
  std::int64_t routing_mask_bytes = std::int64_t{256} << 20;
  /// Keep every inter-token gap for ServingResult::itl (one float per generated token: millions in a
  /// max-load run). false: itl stays zero (each request's max_itl is still kept), for a caller that reads
  /// only throughput (validate's max-load rows) and would pay the memory and the selection for nothing.
  bool itl_distribution = true;
};

/// The layers of each pipeline stage, vLLM's split (model/step_cost.hpp).
using cost::stage_layer_starts;

/// Weights, activations and KV cache on the fullest device. With pp > 1 each stage is sized from its own
/// layers (MoE and dense layers, their KV cache; the embedding on the first stage, the final norm and LM
/// head on the last), and the KV capacity is that of the stage that runs out first.
struct MemoryPlan {
  units::Bytes weights;        ///< weights on the fullest device (the busiest stage's)
  units::Bytes activations;    ///< reserved for activations (max_num_batched_tokens through one layer)
  units::Bytes usable;         ///< device memory × utilisation
  units::Bytes kv_per_token;   ///< KV one token of context costs on a device of kv_stage
  std::int64_t kv_tokens = 0;  ///< KV capacity in tokens (whole blocks): kv_stage's, the smallest
  std::int64_t kv_blocks = 0;
  std::int64_t busiest_stage = 0;  ///< the pipeline stage whose devices hold the most weights
  std::int64_t kv_stage = 0;       ///< the pipeline stage whose devices have room for the fewest KV tokens
  /// stage_layer_starts(layers, pp): stage s holds layers [stage_starts[s], stage_starts[s + 1]).
  std::vector<std::int64_t> stage_starts;
  /// false when the fullest device's weights and activations exceed its usable memory (the KV fields are
  /// then 0); why_not says by how much and what would fit.
  bool fits = true;
  std::string why_not;
};

/// Checks the plan against the model and the node (TP divides the heads, PP is at most the layers, ...) and returns
/// it with the defaults resolved. UserError naming the field and what would work.
ParallelPlan resolve_plan(const ParallelPlan& plan, const model::Architecture& a, const model::NodeProfile& node,
                          std::string_view where);
/// The memory plan, or why it does not fit (MemoryPlan::fits, why_not): what a sweep screens a point with.
MemoryPlan check_memory(const ServingConfig& c);
/// check_memory; UserError (its why_not) when the weights do not fit, saying by how much and what would fit.
MemoryPlan plan_memory(const ServingConfig& c);

/// A request's life, in seconds from the start of the run.
struct RequestRecord {
  std::int64_t id = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  double arrival = 0;
  double first_token = 0;
  double finish = 0;
  double max_itl = 0;
  std::int32_t preemptions = 0;
  [[nodiscard]] double ttft() const { return first_token - arrival; }
  [[nodiscard]] double e2el() const { return finish - arrival; }
  [[nodiscard]] double tpot() const {
    return output_tokens > 1 ? (finish - first_token) / static_cast<double>(output_tokens - 1) : 0.0;
  }
};

/// One engine step, for the time series (queue depth and KV usage over time).
struct StepRecord {
  double start = 0;
  double duration = 0;  ///< stage 0 (the whole step when pp = 1)
  std::int32_t decode = 0;
  std::int32_t prefill_tokens = 0;
  std::int32_t sequences = 0;  ///< sequences in the step (decoding, or prefilling a chunk)
  std::int32_t waiting = 0;
  std::int32_t running = 0;
  double kv_used = 0;  ///< fraction of KV blocks in use
};

/// A latency's distribution, as vLLM's benchmark_serving reports it: mean, median, standard deviation
/// (numpy's np.std, the population one) and the percentiles asked for (`--metric-percentiles`, numpy's
/// linear interpolation); p90, p99 and max always (the sweep and the report use them).
struct Percentiles {
  double mean = 0, median = 0, std = 0, p90 = 0, p99 = 0, max = 0;
  std::vector<std::pair<double, double>> requested;  ///< (percent, value) for each percent asked for
};
/// `percents`: each in (0, 100], e.g. {90, 99} (vLLM's default is {99}).
Percentiles percentiles(std::vector<double> values, const std::vector<double>& percents = {});
Percentiles percentiles(std::vector<float> values, const std::vector<double>& percents = {});

/// Per-layer time split of the decode steps (seed 004's I/O vs GPU vs CPU), seconds per layer, averaged
/// over decode-only steps.
struct LayerSplit {
  double io = 0, gpu = 0, cpu = 0;
  std::int64_t steps = 0;
};

struct ServingResult {
  MemoryPlan memory;
  ParallelPlan plan;
  std::vector<RequestRecord> requests;  ///< completed, by id
  std::vector<StepRecord> steps;
  std::int64_t preemptions = 0;
  double duration = 0;  ///< first arrival to last completion, seconds
  Percentiles ttft, tpot, itl, e2el;
  double request_throughput = 0;  ///< requests/s
  double output_throughput = 0;   ///< output tokens/s
  double total_throughput = 0;    ///< prompt + output tokens/s
  double goodput = 0;             ///< requests/s meeting the SLO
  bool slo_given = false;         ///< goodput means something only when an SLO was given
  std::int64_t good_requests = 0;
  double mean_decode_batch = 0;
  double max_kv_used = 0;
  std::int32_t max_waiting = 0;
  double cache_hit_rate = -1;  ///< streaming: page-cache hit rate (−1 without streaming)
  /// The runtime's host time the engine spent over the run, seconds: every step's step_overhead and
  /// sequence_overhead (on its busiest executor), which hold the engine before the step's GPU work.
  double host_time = 0;
  LayerSplit layer_split;
  std::uint64_t events = 0;
  std::vector<std::string> assumptions;
};

/// Runs the workload through the engine. UserError for an impossible configuration.
ServingResult run_serving(const ServingConfig& config);

}  // namespace moesim::sim
