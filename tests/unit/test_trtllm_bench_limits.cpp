// trtllm-bench's batch limits (calibrate/validation.hpp trtllm_bench_limits), by hand from tuning.py's
// formulas: the KV cache's requests, finetune_setting's rounding, get_settings' raise without chunked
// prefill.
#include <gtest/gtest.h>

#include "moesim/calibrate/validation.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/precision.hpp"

namespace moesim::calibrate {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// One GPU of `gib` GiB, an FP8 KV cache (kv_bytes 1) unless said.
TrtllmBenchInputs inputs(const model::Architecture& a, const char* format, std::int64_t isl, std::int64_t osl,
                         double gib = 80, double kv_bytes = 1) {
  TrtllmBenchInputs in;
  in.arch = &a;
  in.weights = &model::precision(format);
  in.kv_element_bytes = kv_bytes;
  in.device_memory_gib = gib;
  in.isl = isl;
  in.osl = osl;
  return in;
}

// Llama 3.1 8B FP8 on one 80 GiB GPU, 128/2048: 32 layers x 8 KV heads x 128 x 2 x 1 B = 65,536 B a token;
// 8,030,261,248 parameters at 1 B; (80 GiB - 7.479 GiB) x 0.95 = 68.895 GiB of cache hold 518.7 requests
// of 2176 tokens; 518.7 rounds up to 640 (steps of 128 between 256 and 1024) and 518.7 x (1 + 128/2048)
// = 551 tokens to the minimum of 2048.
TEST(TrtllmBenchLimits, KvCacheRequestsRoundedAsFinetuneSettingRoundsThem) {
  const model::Architecture a = model::load_model("llama-3.1-8b");
  ASSERT_EQ(model::parameter_counts(a).total(), 8030261248);
  const TrtllmBenchLimits l = trtllm_bench_limits(inputs(a, "fp8", 128, 2048));
  const double per_token = 2.0 * 32 * 8 * 128 / kGiB;
  const double cache = (80.0 - 8030261248.0 / kGiB) * 0.95;
  EXPECT_NEAR(l.kv_cache_max_requests, cache / (per_token * 2176), 1e-9);
  EXPECT_NEAR(l.kv_cache_max_requests, 518.7, 0.1);
  EXPECT_EQ(l.max_batch_size, 640);
  EXPECT_EQ(l.max_num_tokens, 2048);
}

// An NVFP4 checkpoint's parameter count is its safetensors elements: two weights per uint8 and an FP8
// scale per 16, 0.5625 elements a weight, at tuning.py's 0.5 B each: the engine is 2.10 GiB, not 3.74.
TEST(TrtllmBenchLimits, Nvfp4CountsPackedElements) {
  const model::Architecture a = model::load_model("llama-3.1-8b");
  const TrtllmBenchLimits l = trtllm_bench_limits(inputs(a, "nvfp4", 128, 2048));
  const double engine = 8030261248.0 * 0.5625 * 0.5 / kGiB;
  EXPECT_NEAR(l.kv_cache_max_requests, (80.0 - engine) * 0.95 / (2.0 * 32 * 8 * 128 / kGiB * 2176), 1e-9);
}

// Two pipeline stages, 20000/2000: 144.9 GiB hold 107.9 requests of 22,000 tokens, 54 per stage, raised
// to the minimum batch of 64; without chunked prefill a step must hold the whole prompt and the batch:
// 20,000 + 64 tokens. With chunked prefill the heuristic's 2048 stand.
TEST(TrtllmBenchLimits, PipelineStagesSplitTheBatchAndPromptsRaiseTheTokens) {
  const model::Architecture a = model::load_model("llama-3.1-8b");
  TrtllmBenchInputs in = inputs(a, "fp8", 20000, 2000);
  in.pp = 2;
  TrtllmBenchLimits l = trtllm_bench_limits(in);
  EXPECT_NEAR(l.kv_cache_max_requests, 107.9, 0.1);
  EXPECT_EQ(l.max_batch_size, 64);
  EXPECT_EQ(l.max_num_tokens, 20064);
  in.chunked_prefill = true;
  l = trtllm_bench_limits(in);
  EXPECT_EQ(l.max_num_tokens, 2048);
}

// More KV heads than GPUs keep their count; fewer are replicated to one per GPU (Qwen3-30B-A3B's 4 heads
// at TP 8 count 8), so the same memory holds half the requests. A large dataset's batch stops at 4096.
TEST(TrtllmBenchLimits, EveryGpuHoldsAtLeastOneKvHeadAndTheBatchStopsAt4096) {
  const model::Architecture a = model::load_model("qwen3-30b-a3b");
  ASSERT_EQ(a.kv_heads, 4);
  TrtllmBenchInputs in = inputs(a, "nvfp4", 128, 128, 180);
  in.tp = 4;
  const TrtllmBenchLimits four = trtllm_bench_limits(in);
  in.tp = 8;
  in.device_memory_gib = 180.0 * 4 / 8;  // the same memory in all
  const TrtllmBenchLimits eight = trtllm_bench_limits(in);
  EXPECT_NEAR(eight.kv_cache_max_requests, four.kv_cache_max_requests / 2, 1e-9 * four.kv_cache_max_requests);
  EXPECT_GT(four.kv_cache_max_requests, 4096);
  EXPECT_EQ(four.max_batch_size, 4096);
  EXPECT_EQ(four.max_num_tokens, 8192);  // 4096 x (1 + 128/128)
}

// A model whose weights leave no cache: trtllm-bench refuses the run; so does this (0).
TEST(TrtllmBenchLimits, NoRequestFitsNoLimits) {
  const model::Architecture a = model::load_model("llama-3.1-405b");
  const TrtllmBenchInputs in = inputs(a, "bf16", 128, 128, 80, 2);
  const TrtllmBenchLimits l = trtllm_bench_limits(in);
  EXPECT_EQ(l.max_batch_size, 0);
  EXPECT_EQ(l.max_num_tokens, 0);
}

}  // namespace
}  // namespace moesim::calibrate
