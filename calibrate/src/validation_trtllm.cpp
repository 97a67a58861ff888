// trtllm-bench's batch limits (validation.hpp, trtllm_bench_limits): what `trtllm-bench throughput` runs a
// dataset with when its command gives no --max_batch_size and --max_num_tokens, as perf-overview's do.

#include <algorithm>
#include <cmath>

#include "moesim/calibrate/validation.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/precision.hpp"

namespace moesim::calibrate {

namespace {

/// The checkpoint's safetensors element count (ModelConfig.get_param_count sums the metadata's
/// parameter_count): a weight stored in 8 bits or fewer counts its bytes (NVFP4 packs two weights in a
/// uint8 element and adds an FP8 scale per 16), a 16-bit one counts itself.
double stored_elements(std::int64_t params, const model::Precision& p) {
  const auto n = static_cast<double>(params);
  return std::min(model::param_bytes(params, p).base(), n);
}

/// tuning.py BYTES_PER_ELEM: NVFP4 0.5, FP8 1, anything else 2.
double quant_bytes(const model::Precision& p) {
  const std::string_view f = model::expert_format(p);
  if (f == "nvfp4") return 0.5;
  if (f == "fp8") return 1.0;
  return 2.0;
}

/// finetune_setting's rounding: up to a multiple of `first_step` below `first_below` (at least `min`), of
/// `second_step` below `second_below`, of `rest_step` above.
struct Steps {
  double min, first_below, first_step, second_below, second_step, rest_step;
};
double stepped(double x, const Steps& s) {
  if (x < s.first_below) return std::max(s.min, s.first_step * std::ceil(x / s.first_step));
  if (x < s.second_below) return s.second_step * std::ceil(x / s.second_step);
  return s.rest_step * std::ceil(x / s.rest_step);
}

}  // namespace

TrtllmBenchLimits trtllm_bench_limits(const TrtllmBenchInputs& in) {
  MOESIM_CHECK(in.arch && in.weights && in.tp >= 1 && in.pp >= 1 && in.isl >= 1 && in.osl >= 1 &&
                   in.device_memory_gib > 0 && in.kv_element_bytes > 0,
               "trtllm_bench_limits needs a model, a format, a plan and a dataset");
  const model::Architecture& a = *in.arch;
  // tensorrt_llm/bench/build/tuning.py calc_engine_setting, every size in GiB as there.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::int64_t attention_layers = 0;
  for (const model::LayerSpec& l : a.layer_specs)
    if (l.attention != model::AttentionType::None) ++attention_layers;
  // "Each GPU in TP group has at least 1 kv head."
  const double kv_heads = std::max(static_cast<double>(in.tp), static_cast<double>(a.kv_heads));
  const double byte_per_token = 2.0 * static_cast<double>(attention_layers) * kv_heads *
                                static_cast<double>(a.head_dim) * in.kv_element_bytes / kGiB;
  const model::ComponentParams params = model::parameter_counts(a);
  const double param_count =
      stored_elements(params.routed_experts, *in.weights) +
      stored_elements(params.total() - params.routed_experts, model::others_precision(*in.weights));
  const double engine_size = param_count * quant_bytes(*in.weights) / kGiB;
  const double total_gpu_memory = in.device_memory_gib * static_cast<double>(in.tp * in.pp);
  const double cache_memory = (total_gpu_memory - engine_size) * in.kv_cache_free_gpu_mem_fraction;
  const double isl = static_cast<double>(in.isl), osl = static_cast<double>(in.osl);
  TrtllmBenchLimits r;
  r.kv_cache_max_requests = cache_memory / (byte_per_token * (isl + osl));
  if (!(r.kv_cache_max_requests >= 1)) return r;  // trtllm-bench raises: "insufficient to run this model"
  // finetune_setting, with enable_optimistic_tuning (every model but Nemotron-H hybrids).
  const double raw_bs = std::min(r.kv_cache_max_requests, 4096.0) / static_cast<double>(in.pp);
  const double raw_token = std::min(raw_bs * (1.0 + isl / osl), 32768.0);
  const double bs = stepped(raw_bs, {64, 256, 32, 1024, 128, 256});
  const double tokens = stepped(raw_token, {2048, 4096, 256, 8192, 512, 1024});
  r.max_batch_size = static_cast<std::int64_t>(bs);
  // tensorrt_llm/bench/benchmark/utils/general.py get_settings: without chunked prefill (its default)
  // "max_num_tokens = max(max_num_tokens, dataset_metadata.max_isl + max_batch_size)".
  r.max_num_tokens = static_cast<std::int64_t>(in.chunked_prefill ? tokens : std::max(tokens, isl + bs));
  return r;
}

}  // namespace moesim::calibrate
