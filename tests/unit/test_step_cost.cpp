// The shared cost model (model/step_cost.hpp) on figures that follow by hand: the sliding-window sums,
// the compute path of each weight format, the size rule of the efficiency bands, the kernel table, the
// weights one device holds (and that the analytic model and the serving plan hold the same); and
// the attention-data-parallel step of the serving simulator, which charged every device for the whole
// batch's KV cache before the cost model was shared.

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/sim/serving.hpp"

namespace {

using namespace moesim;

TEST(StepCost, AttendedSumIsTheExactWindowedSum) {
  for (const std::int64_t window : {0, 1, 7, 64}) {
    for (const std::int64_t context : {0, 3, 63, 64, 100}) {
      for (const std::int64_t n : {1, 2, 5, 80}) {
        double brute = 0;
        for (std::int64_t i = 1; i <= n; ++i)
          brute += static_cast<double>(window > 0 ? std::min(context + i, window) : context + i);
        EXPECT_DOUBLE_EQ(cost::attended_sum(context, n, window), brute)
            << "window " << window << " context " << context << " n " << n;
      }
    }
  }
  // Tokens whose K/V a chunk reads: the union of its windows, [context + n − window − (n − 1), context + n).
  EXPECT_EQ(cost::kv_tokens_read(100, 1, 0), 101);
  EXPECT_EQ(cost::kv_tokens_read(100, 1, 64), 64);
  EXPECT_EQ(cost::kv_tokens_read(100, 10, 64), 73);
  EXPECT_EQ(cost::kv_tokens_read(5, 10, 64), 15);
}

TEST(StepCost, ComputePathPerWeightFormat) {
  const model::NodeProfile h100 = model::load_node("h100-sxm");               // bf16, fp16, fp8, int8 peaks
  const model::NodeProfile m2 = model::load_node("mac-studio-m2-ultra-192");  // bf16 only
  const model::NodeProfile m3 = model::load_node("mac-studio-m3-ultra-512");  // none
  EXPECT_EQ(cost::compute_path(h100, model::precision("fp8")).dtype, "fp8");
  EXPECT_TRUE(cost::compute_path(h100, model::precision("fp8")).native);
  EXPECT_EQ(cost::compute_path(h100, model::precision("int8")).dtype, "int8");
  EXPECT_EQ(cost::compute_path(h100, model::precision("q4")).dtype, "bf16");
  EXPECT_EQ(cost::compute_path(h100, model::precision("mxfp4")).dtype, "bf16");  // Hopper has no FP4 tensor cores
  std::vector<std::string> notes;
  const cost::ComputePath int8_m2 = cost::compute_path(m2, model::precision("int8"), &notes);
  EXPECT_EQ(int8_m2.dtype, "bf16");
  EXPECT_FALSE(int8_m2.native);
  EXPECT_TRUE(int8_m2.has_peak);
  ASSERT_EQ(notes.size(), 1u);  // no dequant_overhead for int8: said once
  EXPECT_NE(notes[0].find("dequant_overhead for int8"), std::string::npos);
  notes.clear();
  EXPECT_FALSE(cost::compute_path(m3, model::precision("bf16"), &notes).has_peak);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("peak_flops.bf16"), std::string::npos);

  // A Blackwell-like profile: FP4 weights run at its fp4 peak; a dequant overhead applies to q4.
  model::NodeProfile b = h100;
  b.devices.peak_flops["fp4"] = {units::flops_per_second(9e15), "test"};
  b.devices.dequant_overhead["q4"] = {0.25, "test"};
  EXPECT_EQ(cost::compute_path(b, model::precision("mxfp4")).dtype, "fp4");
  EXPECT_EQ(cost::compute_path(b, model::precision("nvfp4")).dtype, "fp4");
  EXPECT_DOUBLE_EQ(cost::compute_path(b, model::precision("q4")).dequant, 0.25);
}

TEST(StepCost, OneRooflinePerKernelGroupAndOneKernelTable) {
  // Mixtral on one H100 at bf16: one expert is 3 x 4096 x 14336 weights, 352,321,536 B; at 3.35 TB/s its
  // roofline at one token is the read, 105.17 us. Each token routed to it moves activations: the dispatch
  // and combine and the expert's input and output (4 x 4096) and its intermediate side (6 x 14336), 16-bit,
  // 118,784 B, through DRAM beyond the 4 MB the on-chip cache passes on (one token's stay on chip).
  const model::Architecture a = model::load_model("mixtral-8x7b");
  const model::NodeProfile h100 = model::load_node("h100-sxm");
  const cost::LayerCosts lc(a, model::precision("bf16"), h100, {}, 2.0);
  const double bw = h100.bandwidth().value.base();
  const double weights = 3.0 * 4096 * 14336 * 2, io = 2.0 * (4 * 4096 + 6 * 14336);
  EXPECT_DOUBLE_EQ(lc.expert_bytes(), weights);
  EXPECT_NEAR(lc.expert(1, 1), weights / bw, 1e-12);
  // 64 tokens are still memory-bound (ridge ~295 FLOP/B): 7.6 MB of activations, 3.6 MB of them off chip.
  ASSERT_EQ(cost::kOnChipActivationBytes, 4e6);
  EXPECT_NEAR(lc.expert(64, 64), (weights + 64 * io - 4e6) / bw, 1e-12);
  // Tokens a tile pads (computed, not routed) move no activations.
  EXPECT_DOUBLE_EQ(lc.expert(64, 1), lc.expert(1, 1));
  // Compute-bound at 4096 tokens: 2 FLOP x 176 M weights x 4096 tokens at the bf16 peak.
  EXPECT_NEAR(lc.expert(4096, 4096), 2.0 * 3 * 4096 * 14336 * 4096 / h100.peak("bf16").value.base(), 1e-12);
  // Fused: the experts' bytes in one group plus one set of 4 launches (h100-sxm gives no kernel overhead).
  EXPECT_DOUBLE_EQ(lc.expert_group(cost::ExpertExecution::Fused, 2, 2, 2), 2 * lc.expert(1, 1));
  // Kernels of a Mixtral layer: attention 8 + router 3 + combine 1, + 2 all-reduces under TP.
  EXPECT_EQ(lc.layer_kernels(a.layer_specs[0], false), 12);
  EXPECT_EQ(lc.layer_kernels(a.layer_specs[0], true), 14);
}

// The activations an FFN moves (its GEMMs and its activation function read their input and write their
// output, 16-bit) are bytes of its roofline beyond what the on-chip cache passes on (4 MB). Qwen3-30B-A3B's experts are
// narrow (768 of a 2048 hidden state) and each token goes to 8: at 65,536 routed tokens on one B200-like FP4 device the
// activations, 2 B x (4 x 2048 + 6 x 768) per routed token, outweigh the FP4 GEMMs' FLOPs at the ridge. Under 8-way MoE
// tensor parallelism the intermediate side splits, the hidden states do not; a dense FFN moves its input
// and output (2 x hidden) and its intermediate side, split over TP.
TEST(StepCost, FfnActivationsAreBytesOfTheirRoofline) {
  const model::Architecture a = model::load_model("qwen3-30b-a3b");
  ASSERT_EQ(a.hidden, 2048);
  ASSERT_EQ(a.expert_ffn, 768);
  ASSERT_TRUE(a.gated_ffn);
  model::NodeProfile b = model::load_node("h100-sxm");
  b.devices.peak_flops["fp4"] = {units::flops_per_second(9e15), "test"};
  const cost::LayerCosts lc(a, model::precision("nvfp4"), b, {}, 2.0);
  const double bw = b.bandwidth().value.base();
  const double per_routed = 2.0 * (4 * 2048 + 6 * 768);
  const double routed = 65536, distinct = 128;
  const double flops = routed * 2.0 * lc.expert_params() / 9e15;
  const double bytes = distinct * lc.expert_bytes() + routed * per_routed - cost::kOnChipActivationBytes;
  ASSERT_GT(bytes / bw, flops);  // the activations make it memory-bound
  EXPECT_NEAR(lc.expert_group(cost::ExpertExecution::Fused, distinct, routed, routed), bytes / bw, 1e-12);
  // Split 8 ways: each device's experts are 1/8 as wide; the hidden states move whole (1,000 tokens).
  const cost::LayerCosts tp8(a, model::precision("nvfp4"), b, {8, 8, false}, 2.0);
  EXPECT_NEAR(tp8.expert(1000, 1000), (lc.expert_bytes() / 8 + 1000 * 2.0 * (4 * 2048 + 6 * 768 / 8.0) - 4e6) / bw,
              1e-12);
  // One token's activations stay on chip.
  EXPECT_NEAR(tp8.expert(1, 1), lc.expert_bytes() / 8 / bw, 1e-12);

  // A dense model's FFN (Llama 3.1 8B: 4096 hidden, 14336 wide): input and output plus the wide side.
  const model::Architecture d = model::load_model("llama-3.1-8b");
  const cost::LayerCosts dl(d, model::precision("bf16"), b, {}, 2.0);
  const cost::LayerCosts dl2(d, model::precision("bf16"), b, {2, 2, false}, 2.0);
  const double dense_weights = 3.0 * 4096 * 14336 * 2;
  EXPECT_NEAR(dl.dense(100), (dense_weights + 100 * 2.0 * (2 * 4096 + 6 * 14336) - 4e6) / bw, 1e-12);
  EXPECT_NEAR(dl2.dense(100), (dense_weights / 2 + 100 * 2.0 * (2 * 4096 + 6 * 14336 / 2.0) - 4e6) / bw, 1e-12);
  EXPECT_NEAR(dl.dense(1), dense_weights / bw, 1e-12);
}

// Attention data parallelism: each of the 8 devices attends only its own 8 of 64 sequences. With the
// whole batch's KV charged to every device (the bug), Qwen3-235B at 8k context decoded slower with
// attention-DP (48.0 ms TPOT) than with plain TP (32.6 ms); with 4 KV heads over TP 8 each TP device reads
// a quarter of every sequence's KV (16 sequences' worth), a DP device 8 whole ones, so DP must be faster.
TEST(StepCost, AttentionDataParallelChargesEachDeviceItsOwnSequences) {
  auto tpot = [](bool dp) {
    scenario::ServeScenario s;
    s.doc = {
        {"model", "qwen3-235b-a22b"},
        {"hw", "dgx-h100"},
        {"precision", "fp8"},
        {"plan", {{"tp", 8}, {"attention_dp", dp}}},
        {"scheduler", {{"kind", "static"}, {"max_num_seqs", 64}, {"max_num_batched_tokens", 600000}}},
        {"workload", {{"arrival", "uniform"}, {"rate", "1000/s"}, {"requests", 64}, {"prompt", 8192}, {"output", 16}}},
        {"generate", {{"tokens", 4096}, {"seed", 1}}}};
    return scenario::run_serve(s).result.tpot.mean;
  };
  const double tp = tpot(false);
  const double dp = tpot(true);
  EXPECT_LT(dp, 0.8 * tp) << "TP " << tp << " s, attention-DP " << dp << " s";
}

// The weights one device holds (cost::device_weight_bytes), by hand on a small Mixtral-like model:
// h 8, 4 heads and 2 KV heads of 2, vocabulary 100, 4 experts of width 16; layer 0 dense (FFN 24), layers
// 1-3 MoE. Parameters (models_and_routing.md §A.3):
//   attention  h·nq·hd + 2·h·nkv·hd + nq·hd·h = 64 + 64 + 64    = 192 per layer,   768 in all
//   router     h·E = 32 per MoE layer                                                96
//   norms      2h = 16 per layer, + h = 8 final                                        72
//   dense FFN  3·h·24 = 576 (layer 0)                                                 576
//   experts    3·h·16 = 384 each, 4 per MoE layer                                   4,608
//   embedding and LM head  100·8 each                                               1,600
//   whole model                                                                     7,720 = 15,440 B at bf16
TEST(StepCost, DeviceWeightBytesSplitsEachPart) {
  model::Architecture a;
  a.id = "tiny-moe";
  a.hidden = 8;
  a.layers = 4;
  a.vocab = 100;
  a.heads = 4;
  a.kv_heads = 2;
  a.head_dim = 2;
  a.routed_experts = 4;
  a.top_k = 2;
  a.expert_ffn = 16;
  a.dense_ffn = 24;
  a.layer_specs.assign(4, model::LayerSpec{});
  a.layer_specs[0].moe = false;
  ASSERT_EQ(model::parameter_counts(a).total(), 7720);  // the figures above are this model's
  const model::Precision& bf16 = model::precision("bf16");
  const cost::StageLayers whole = cost::whole_model(a);

  // One device holds everything.
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {1, 1, false}, 1.0, whole), 2.0 * 7720);
  // TP 2, experts 1/2 each: attention 384, router + norms 168 (replicated), dense 288, experts 2,304,
  // embedding + head 800 (vocabulary-parallel): 3,944 parameters.
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {2, 2, false}, 0.5, whole), 2.0 * 3944);
  // Attention data-parallel over 2: attention, dense and the vocabulary whole, experts still halved: 5,416.
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {2, 1, true}, 0.5, whole), 2.0 * 5416);
  // Experts streamed from storage: none resident, 7,720 − 4,608 = 3,112.
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {1, 1, false}, 0.0, whole), 2.0 * 3112);

  // Two pipeline stages of 2 layers (vLLM's split): stage 0 holds layers 0 (dense) and 1 and the
  // embedding, not the final norm: 384 + 32 + 32 + 576 + 1,536 + 800 = 3,360; stage 1 layers 2-3, the
  // final norm and the LM head: 384 + 64 + 40 + 3,072 + 800 = 4,360. The two add up to the model.
  const auto stages = cost::pipeline_stages(a.layers, 2);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_TRUE(stages[0].first && !stages[0].last);
  EXPECT_TRUE(!stages[1].first && stages[1].last);
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {1, 1, false}, 1.0, stages[0]), 2.0 * 3360);
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {1, 1, false}, 1.0, stages[1]), 2.0 * 4360);
  // Tied embeddings: one matrix without a pipeline (7,720 − 800); a last stage of its own holds a copy.
  a.tie_embeddings = true;
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {1, 1, false}, 1.0, whole), 2.0 * 6920);
  EXPECT_DOUBLE_EQ(cost::device_weight_bytes(a, bf16, {1, 1, false}, 1.0, stages[1]), 2.0 * 4360);

  // Experts at their exact stored size: int8 keeps a scale per output row (model::routed_expert_bytes),
  // which a bare parameter count leaves out.
  const model::Precision& int8 = model::precision("int8");
  const double experts = cost::device_weight_bytes(a, int8, {1, 1, false}, 1.0, whole) -
                         cost::device_weight_bytes(a, int8, {1, 1, false}, 0.0, whole);
  EXPECT_DOUBLE_EQ(experts, 12.0 * model::routed_expert_bytes(a, int8).base());
  EXPECT_GT(experts, model::param_bytes(4608, int8).base());
}

// The analytic model and the serving simulator hold the same weights for the same split: a node's devices
// run tensor-parallel in both, every expert on the node. Mixtral at fp8 on one H100 (tp 1) and on a DGX
// H100 (tp 8): the analytic node's memory less its KV cache is the serving plan's device weights × devices.
TEST(StepCost, AnalyticAndServingHoldTheSameWeights) {
  const model::Architecture a = model::load_model("mixtral-8x7b");
  const model::Precision& fp8 = model::precision("fp8");
  for (const char* hw : {"h100-sxm", "dgx-h100"}) {
    const model::NodeProfile node = model::load_node(hw);
    std::optional<model::NicProfile> intra;
    if (node.intra_node_link) intra = model::load_nic(*node.intra_node_link);
    model::DecodeScenario d;
    d.arch = &a;
    d.node = &node;
    d.intra_link = intra ? &*intra : nullptr;
    d.weights = &fp8;
    d.expected_active_experts = 2;
    d.max_experts_per_node = a.routed_experts;
    d.context = 1000;
    const model::DecodeEstimate e = model::estimate_decode(d);
    const double kv = model::kv_bytes_at_context(a, d.context + 1, d.activation_bytes).base();

    sim::ServingConfig c;
    c.arch = &a;
    c.weights = &fp8;
    c.node = &node;
    sim::ParallelPlan p;
    p.tp = node.devices.count;
    c.plan = sim::resolve_plan(p, a, node, "test");
    const sim::MemoryPlan m = sim::plan_memory(c);
    EXPECT_DOUBLE_EQ(e.memory_needed.base() - kv, m.weights.base() * static_cast<double>(node.devices.count)) << hw;
  }
}

}  // namespace

namespace {

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

double whole_model_bytes(const std::string& model, const std::string& prec) {
  const model::Architecture a = model::load_model(model);
  return cost::device_weight_bytes(a, model::precision(prec), cost::DeviceSplit{}, 1.0, cost::whole_model(a));
}

// Scenario: gpt-oss as published. Expectation: ggml-org's GGUF (experts MXFP4, every other tensor Q8_0) is
// the size llama-bench prints for it, 11.27 GiB (20b) and 59.02 GiB (120b) (llama.cpp discussion #16578,
// the validation table's sources), within 1.5%; all-MXFP4 is far below (10.4 / 56.6 GiB); as OpenAI
// released gpt-oss-120b (experts MXFP4, the rest bf16) it fits one 80 GB GPU, as the model card says.
TEST(Precision, CompositeSizesGptOssAsPublished) {
  EXPECT_NEAR(gib(whole_model_bytes("gpt-oss-20b", "mxfp4/q8_0")) / 11.27, 1.0, 0.015);
  EXPECT_NEAR(gib(whole_model_bytes("gpt-oss-120b", "mxfp4/q8_0")) / 59.02, 1.0, 0.015);
  EXPECT_LT(gib(whole_model_bytes("gpt-oss-20b", "mxfp4")), 10.6);
  const double released = whole_model_bytes("gpt-oss-120b", "mxfp4/bf16");
  EXPECT_LT(released, 80e9);
  EXPECT_GT(released, whole_model_bytes("gpt-oss-120b", "mxfp4/q8_0"));
}

// Scenario: composite names. Expectation: any case, made once and kept; the experts' format decides the
// compute path; the same format twice is the format itself; an unknown part is named.
TEST(Precision, CompositeNames) {
  const model::Precision& p = model::precision("MXFP4/Q8_0");
  EXPECT_EQ(p.name, "mxfp4/q8_0");
  EXPECT_EQ(&p, &model::precision("mxfp4/q8_0"));
  EXPECT_EQ(model::expert_format(p), "mxfp4");
  EXPECT_EQ(model::others_precision(p).name, "q8_0");
  EXPECT_EQ(&model::others_precision(model::precision("q8_0")), &model::precision("q8_0"));
  EXPECT_EQ(model::precision("fp8/fp8").name, "fp8");
  const model::NodeProfile spark = model::load_node("dgx-spark");
  EXPECT_EQ(cost::compute_path(spark, model::precision("nvfp4/bf16")).dtype, "fp4");
  try {
    (void)model::precision("mxfp4/q9_0");
    FAIL() << "an unknown part was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown precision 'q9_0'"), std::string::npos) << e.what();
  }
}

// Scenario: a runtime that uses no low-precision tensor cores (llama.cpp's GGUF matmuls). Expectation: FP8
// weights on an H100 then run on the 16-bit path, dequantised; listing fp8 restores the FP8 path.
TEST(StepCost, RuntimeNativeDtypesPickTheComputePath) {
  model::NodeProfile h100 = model::load_node("h100-sxm");
  h100.devices.native_dtypes = model::Sourced<std::vector<std::string>>{{}, "test"};
  EXPECT_EQ(cost::compute_path(h100, model::precision("fp8")).dtype, "bf16");
  EXPECT_FALSE(cost::compute_path(h100, model::precision("fp8")).native);
  h100.devices.native_dtypes->value = {"fp8"};
  EXPECT_EQ(cost::compute_path(h100, model::precision("fp8")).dtype, "fp8");
}

// Scenario: NVFP4 weights on a Blackwell-like GPU (FP4, FP8 and 16-bit peaks). Expectation: the GEMMs run at
// the FP4 peak, but attention's QK^T and PV run in the KV cache's precision (an FP8 cache: the FP8 peak; a
// 16-bit one: the 16-bit peak), never at the FP4 one; a 16-bit model's attention stays 16-bit whatever the
// cache, and a runtime without FP8 matmuls keeps an FP8 cache's attention in 16 bits.
TEST(StepCost, AttentionRunsInTheKvCachesPrecisionNotTheWeights) {
  model::NodeProfile b = model::load_node("h100-sxm");
  b.devices.peak_flops["fp4"] = {units::flops_per_second(9e15), "test"};
  const cost::ComputePath fp4 = cost::compute_path(b, model::precision("nvfp4"));
  ASSERT_EQ(fp4.dtype, "fp4");
  EXPECT_EQ(cost::attention_dtype(b, fp4, 2.0), "bf16");
  EXPECT_EQ(cost::attention_dtype(b, fp4, 1.0), "fp8");
  EXPECT_EQ(cost::attention_dtype(b, cost::compute_path(b, model::precision("fp8")), 2.0), "bf16");
  EXPECT_EQ(cost::attention_dtype(b, cost::compute_path(b, model::precision("bf16")), 1.0), "bf16");
  model::NodeProfile no_fp8 = b;
  no_fp8.devices.native_dtypes = model::Sourced<std::vector<std::string>>{{"fp4"}, "test"};
  EXPECT_EQ(cost::attention_dtype(no_fp8, cost::compute_path(no_fp8, model::precision("nvfp4")), 1.0), "bf16");

  // The cost model prices the context's FLOPs at that peak: an FP8 cache's against a 16-bit cache's, the
  // ratio of the two peaks (the attention block's efficiency is the same, its weights being the same).
  const model::Architecture a = model::load_model("qwen3-30b-a3b");
  const cost::LayerCosts kv16(a, model::precision("nvfp4"), b, {}, 2.0), kv8(a, model::precision("nvfp4"), b, {}, 1.0);
  EXPECT_NEAR(kv8.memory_rate().peak / kv16.memory_rate().peak,
              b.peak("fp8").value.base() / b.peak("bf16").value.base(), 1e-9);
  EXPECT_LT(kv8.memory_rate().peak, b.peak("fp4").value.base());
}

}  // namespace

namespace {

// Scenario: a runtime's host time per engine step and per sequence of a step. Expectation: batch-1 decode
// runs one step of one sequence per token, so the analytic time per token grows by exactly the two (the
// decode and serving simulators agree with it: tests/oracle/test_three_way_oracle.cpp).
TEST(StepCost, StepOverheadIsPaidOncePerDecodedToken) {
  const model::Architecture a = model::load_model("mixtral-8x7b");
  model::NodeProfile node = model::load_node("h100-sxm");
  const model::Precision& fp8 = model::precision("fp8");
  model::DecodeScenario s;
  s.arch = &a;
  s.node = &node;
  s.weights = &fp8;
  s.context = 100;
  s.expected_active_experts = 2;
  s.max_experts_per_node = 8;
  const double before = model::estimate_decode(s).time.base();
  node.devices.step_overhead = model::Sourced<units::Duration>{units::seconds(3e-3), "test"};
  EXPECT_NEAR(model::estimate_decode(s).time.base() - before, 3e-3, 1e-12);
  // The host time per sequence of a step (sequence_overhead) is paid once more: a batch-1 step holds one.
  node.devices.sequence_overhead = model::Sourced<units::Duration>{units::seconds(2e-4), "test"};
  EXPECT_NEAR(model::estimate_decode(s).time.base() - before, 3.2e-3, 1e-12);
}

}  // namespace

namespace {

using namespace moesim;

/// One model on one H100 at bf16 priced twice: with the node profile as it is, and with one runtime
/// figure of its devices changed.
struct BeforeAfter {
  BeforeAfter(const char* model, const std::function<void(model::DeviceSpec&)>& change)
      : a(model::load_model(model)),
        node(model::load_node("h100-sxm")),
        changed([&] {
          model::NodeProfile n = node;
          change(n.devices);
          return n;
        }()),
        before(a, model::precision("bf16"), node, {}, 2.0),
        after(a, model::precision("bf16"), changed, {}, 2.0) {}
  model::Architecture a;
  model::NodeProfile node, changed;
  cost::LayerCosts before, after;
};

// A runtime's prefill attention factor (devices.prefill_attention_factor) multiplies the time of the
// attention FLOPs over the context, and only those: Mixtral on one H100, a chunk of 2048 tokens after
// 32k cached ones is compute-bound in its attention (QK^T and PV), so its attention time is 3x with a
// factor of 3; a decode step (one token, memory-bound on the KV reads) and the experts do not move.
TEST(StepCost, PrefillAttentionFactorScalesTheAttentionFlopsOnly) {
  const BeforeAfter c("mixtral-8x7b", [](model::DeviceSpec& d) {
    d.prefill_attention_factor = model::Sourced<double>{3.0, "test"};
  });
  const cost::SeqWork chunk = c.before.sequence(32768, 2048);
  const cost::SeqWork none{};
  const double weights = c.before.attention(2048, none);
  ASSERT_GT(chunk.flops / c.before.memory_rate().peak, chunk.kv_bytes / c.before.memory_rate().bw);  // compute-bound
  EXPECT_NEAR(c.after.attention(2048, chunk) - weights, 3.0 * (c.before.attention(2048, chunk) - weights),
              1e-9 * c.before.attention(2048, chunk));
  EXPECT_DOUBLE_EQ(c.after.attention(2048, none), weights);
  const cost::SeqWork token = c.before.sequence(32768, 1);
  EXPECT_DOUBLE_EQ(c.after.attention(1, token), c.before.attention(1, token));
  EXPECT_DOUBLE_EQ(c.after.expert(4096, 4096), c.before.expert(4096, 4096));
}

// A runtime's expert token tile (devices.expert_token_tile): an expert given n of a step's N tokens
// computes ceil(n / t)·t of them, t = min(tile, N); no tile, no padding.
TEST(StepCost, ExpertTokenTilePadsEachExpertsTokens) {
  const BeforeAfter c("qwen3-30b-a3b", [](model::DeviceSpec& d) {
    d.expert_token_tile = model::Sourced<double>{128, "test"};
  });
  EXPECT_FALSE(c.before.pads_expert_tokens());
  EXPECT_TRUE(c.after.pads_expert_tokens());
  EXPECT_DOUBLE_EQ(c.before.expert_compute_tokens(5, 2048), 5);
  EXPECT_DOUBLE_EQ(c.after.expert_compute_tokens(5, 2048), 128);
  EXPECT_DOUBLE_EQ(c.after.expert_compute_tokens(129, 2048), 256);
  EXPECT_DOUBLE_EQ(c.after.expert_compute_tokens(256, 2048), 256);
  EXPECT_DOUBLE_EQ(c.after.expert_compute_tokens(0, 2048), 0);
  EXPECT_DOUBLE_EQ(c.after.expert_compute_tokens(3, 8), 8);  // a step of 8 tokens: tiles of 8
  EXPECT_DOUBLE_EQ(c.after.expert_compute_tokens(1, 1), 1);
}

// A runtime's grouped expert GEMM efficiency (devices.expert_gemm_efficiency) divides the rate of the
// routed experts' FLOPs, and nothing else: Qwen3-30B-A3B on one H100, an expert given 4096 tokens is
// compute-bound, so its time doubles at 0.5, in one expert's kernel or a grouped one over 128 experts of
// 4096 tokens each; one token is bound by the expert's bytes and does not move, nor do attention and the
// LM head.
TEST(StepCost, ExpertGemmEfficiencySlowsTheRoutedExpertsFlopsOnly) {
  const BeforeAfter c("qwen3-30b-a3b", [](model::DeviceSpec& d) {
    d.expert_gemm_efficiency = model::Sourced<double>{0.5, "test"};
  });
  const double big = c.before.expert(4096, 4096);
  EXPECT_NEAR(c.after.expert(4096, 4096), 2.0 * big, 1e-9 * big);
  constexpr double kPairs = 128.0 * 4096.0;  // token-expert pairs computed
  const double grouped = c.before.expert_group(cost::ExpertExecution::Fused, 128, kPairs, kPairs);
  const double launch = c.before.expert_kernels_time(cost::ExpertExecution::Fused, 128);
  EXPECT_NEAR(c.after.expert_group(cost::ExpertExecution::Fused, 128, kPairs, kPairs) - launch,
              2.0 * (grouped - launch), 1e-9 * grouped);
  EXPECT_DOUBLE_EQ(c.after.expert(1, 1), c.before.expert(1, 1));
  const cost::SeqWork chunk = c.before.sequence(0, 4096);
  EXPECT_DOUBLE_EQ(c.after.attention(4096, chunk), c.before.attention(4096, chunk));
  EXPECT_DOUBLE_EQ(c.after.head(4096), c.before.head(4096));
}

}  // namespace
