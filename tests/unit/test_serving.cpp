// The serving simulator (sim/serving.hpp): plans, memory, schedulers, pipelines and metrics, on small
// configurations whose answers follow by hand.

#include <gtest/gtest.h>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/sim/serving.hpp"
#include "moesim/sim/trace_gen.hpp"

namespace {

using namespace moesim;

struct Fixture {
  model::Architecture arch;
  model::NodeProfile node;
  std::optional<model::NicProfile> intra, nic;
  sim::RoutingTrace trace;
  sim::ServingConfig c;

  Fixture(const std::string& model_id, const std::string& hw, std::int64_t nodes = 1, std::int64_t tp = 0,
          std::int64_t pp = 1)
      : arch(model::load_model(model_id)), node(model::load_node(hw)) {
    if (node.intra_node_link) intra = model::load_nic(*node.intra_node_link);
    if (nodes > 1) nic = model::load_nic("ib-ndr-400");
    if (arch.is_moe()) {
      sim::TraceGenOptions o = sim::gen_options_for(arch, 2048, 1);
      trace = sim::generate_trace(o);
      c.trace = &trace;
    }
    c.arch = &arch;
    c.weights = &model::precision("bf16");
    c.node = &node;
    c.intra_link = intra ? &*intra : nullptr;
    c.nic = nic ? &*nic : nullptr;
    sim::ParallelPlan p;
    p.nodes = nodes;
    p.tp = tp > 0 ? tp : node.devices.count * nodes / pp;
    p.pp = pp;
    c.plan = sim::resolve_plan(p, arch, node, "test");
  }
  void requests(std::int64_t n, double gap_s, std::int64_t prompt, std::int64_t output) {
    c.requests.clear();
    for (std::int64_t i = 0; i < n; ++i) {
      c.requests.push_back({i, sim::to_sim_time(units::seconds(gap_s * static_cast<double>(i))), prompt, output, -1});
    }
    c.workload.arrival = sim::ArrivalKind::Poisson;
    c.workload.requests = n;
  }
};

// numpy.percentile([1..10], q) with linear interpolation: 5.5, 9.1, 9.91; mean 5.5.
TEST(Serving, PercentilesInterpolateLikeNumpy) {
  const auto p = sim::percentiles(std::vector<double>{10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_DOUBLE_EQ(p.mean, 5.5);
  EXPECT_DOUBLE_EQ(p.median, 5.5);
  EXPECT_NEAR(p.p90, 9.1, 1e-12);
  EXPECT_NEAR(p.p99, 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(p.max, 10);
}

// Mixtral has 32 heads and 8 KV heads, 32 layers, 8 experts: tp 3 does not divide the heads, 33 stages
// cannot each hold one of 32 layers, moe_tp 2 x moe_ep 2 is not tp 8, and 8 devices cannot be tp 4 x pp 1.
TEST(Serving, PlanChecksNameTheFieldAndTheFix) {
  const auto arch = model::load_model("mixtral-8x7b");
  auto node = model::load_node("dgx-h100");
  auto expect = [&](sim::ParallelPlan p, const std::string& field, const std::string& what) {
    try {
      (void)sim::resolve_plan(p, arch, node, "s.json: $.plan");
      ADD_FAILURE() << "accepted " << field;
    } catch (const UserError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("s.json: $.plan: " + field), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
  };
  node.devices.count = 3;
  expect({1, 3, 3, 1}, "tp", "does not divide the 32 attention heads");
  node.devices.count = 1;
  expect({33, 1, 1, 33}, "pp", "pipeline parallelism 33 is more than the 32 layers of mixtral-8x7b");
  // pp 5 does not divide the 32 layers: split unevenly (stage_layer_starts), as vLLM does.
  EXPECT_EQ(sim::resolve_plan({5, 1, 1, 5}, arch, node, "x").pp, 5);
  node.devices.count = 8;
  EXPECT_EQ(sim::resolve_plan({5, 8, 8, 5}, arch, node, "x").pp, 5);
  expect({1, 8, 8, 1, 2, 2}, "moe_tp", "must equal tp = 8");
  expect({1, 8, 4, 1}, "tp", "make tp × pp equal the devices");
  // A valid hybrid resolves its defaults: moe_ep alone gives moe_tp = tp / moe_ep.
  const auto ok = sim::resolve_plan({1, 8, 8, 1, 0, 4}, arch, node, "x");
  EXPECT_EQ(ok.moe_tp, 2);
  EXPECT_EQ(ok.moe_ep, 4);
}

// vLLM's get_pp_indices (vllm/distributed/utils.py): layers / pp per stage, the remainder one each to the
// stages just before the last, counting back (partitions[-i] += 1 for i in 2..remainder + 1).
//   61 over 2: 30 each, 1 left, to stage 0: 31 + 30 (DeepSeek-V3 over two devices).
//   32 over 4: 8 each, even.        32 over 3: 10 each, 2 left, to stages 1 and 0: 11 + 11 + 10.
//   10 over 4: 2 each, 2 left, to stages 2 and 1 (the middle ones): 2 + 3 + 3 + 2.
//   7 over 4: 1 each, 3 left, to stages 2, 1, 0: 2 + 2 + 2 + 1.     4 over 4: one layer each.
// More stages than layers, or none, is refused.
TEST(Serving, StageLayerStartsFollowVllm) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(sim::stage_layer_starts(61, 2), (V{0, 31, 61}));
  EXPECT_EQ(sim::stage_layer_starts(32, 4), (V{0, 8, 16, 24, 32}));
  EXPECT_EQ(sim::stage_layer_starts(32, 3), (V{0, 11, 22, 32}));
  EXPECT_EQ(sim::stage_layer_starts(10, 4), (V{0, 2, 5, 8, 10}));
  EXPECT_EQ(sim::stage_layer_starts(7, 4), (V{0, 2, 4, 6, 7}));
  EXPECT_EQ(sim::stage_layer_starts(4, 4), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(sim::stage_layer_starts(61, 1), (V{0, 61}));
  try {
    (void)sim::stage_layer_starts(61, 62);
    ADD_FAILURE() << "62 stages for 61 layers accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("62 is more than the 61 layers"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)sim::stage_layer_starts(61, 0), UserError);
}

// DeepSeek-V3 (61 layers, the first 3 dense) at fp8 on 2 x 8 H100, tp 8 x pp 2: stage 0 holds layers 0-30
// (3 dense + 28 MoE) and the embedding, stage 1 layers 31-60 (30 MoE), the final norm and the LM head.
// By hand, one device of stage 1 (fp8: 1 byte per weight; h 7,168, vocabulary 129,280):
//   MLA attention 187,107,328 per layer x 30 / tp 8                           =    701,652,480
//   router h x 256 + 256 bias = 1,835,264 x 30, norms 2h x 30 + h (final)     =     55,495,168
//   shared expert 3 x h x 2,048 = 44,040,192 x 30 / 8                        =    165,150,720
//   routed experts 256 x 44,040,192 x 30 / 8                                 = 42,278,584,320
//   LM head 129,280 x h / 8                                                  =    115,834,880
//   total                                                                    = 43,316,717,568 B
// Stage 0 is lighter though it has a layer more: its 3 dense FFNs (3 x h x 18,432 = 396 M each) replace
// two MoE layers (11.3 G of routed experts each): 40,655,495,936 B. MLA's KV latent (512 + 64, bf16) is
// replicated over tp: stage 1 keeps 30 x 1,152 = 34,560 B per token, stage 0 31 x 1,152 = 35,712; with
// 0.9 x 80 GiB usable, stage 1 runs out first.
TEST(Serving, UnevenPipelineSizesTheBusiestStage) {
  Fixture f("deepseek-v3", "dgx-h100", 2, 8, 2);
  f.c.weights = &model::precision("fp8");
  const auto m = sim::plan_memory(f.c);
  EXPECT_EQ(m.stage_starts, (std::vector<std::int64_t>{0, 31, 61}));
  EXPECT_EQ(m.busiest_stage, 1);
  EXPECT_DOUBLE_EQ(m.weights.base(), 43316717568.0);
  EXPECT_EQ(m.kv_stage, 1);
  EXPECT_DOUBLE_EQ(m.kv_per_token.base(), 34560.0);
  const double usable = 0.9 * 80.0 * 1073741824.0;
  EXPECT_DOUBLE_EQ(m.usable.base(), usable);
  const double tokens = (usable - 43316717568.0 - m.activations.base()) / 34560.0;
  EXPECT_EQ(m.kv_blocks, static_cast<std::int64_t>(tokens / 16.0));
  // Stage 0 has room for more: (usable - 40,655,495,936 - activations) / 35,712 tokens.
  EXPECT_GT((usable - 40655495936.0 - m.activations.base()) / 35712.0, tokens);
  // And it serves, end to end.
  f.requests(4, 0.01, 128, 8);
  const auto r = sim::run_serving(f.c);
  EXPECT_EQ(r.requests.size(), 4u);
  EXPECT_EQ(r.plan.pp, 2);
  EXPECT_GT(r.tpot.mean, 0);
}

// The step cost walks each stage's own layers. Llama 3.1 8B (32 identical layers) over 3 and over 4
// single-GPU stages: stage 0 holds 11 and 8 layers, and no LM head, so the first step (the same prefill of
// one prompt in both) costs stage 0 11/8 as long with pp 3 as with pp 4.
TEST(Serving, StageCostCoversTheStageLayers) {
  Fixture three("llama-3.1-8b", "h100-sxm", 3, 1, 3);
  Fixture four("llama-3.1-8b", "h100-sxm", 4, 1, 4);
  three.requests(1, 0, 256, 2);
  four.requests(1, 0, 256, 2);
  const auto r3 = sim::run_serving(three.c);
  const auto r4 = sim::run_serving(four.c);
  ASSERT_FALSE(r3.steps.empty());
  ASSERT_FALSE(r4.steps.empty());
  ASSERT_EQ(r3.steps[0].prefill_tokens, 256);
  ASSERT_EQ(r4.steps[0].prefill_tokens, 256);
  EXPECT_NEAR(r3.steps[0].duration / r4.steps[0].duration, 11.0 / 8.0, 1e-6);
}

// Llama 3.1 405B at bf16 is 811 GB: 101 GB per H100 with tp 8, more than 0.9 x 80 GiB = 77.3 GB. The
// message says by how much and that fp8 (50.7 GB per device) or a second node (pp 2) would fit.
TEST(Serving, ModelThatDoesNotFitSaysByHowMuchAndWhatWould) {
  Fixture f("llama-3.1-405b", "dgx-h100");
  try {
    (void)sim::plan_memory(f.c);
    ADD_FAILURE() << "405B at bf16 fitted on one 8xH100";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit on dgx-h100"), std::string::npos) << m;
    EXPECT_NE(m.find("short"), std::string::npos) << m;
    EXPECT_NE(m.find("precision fp8"), std::string::npos) << m;
    EXPECT_NE(m.find("2 nodes (pp 2)"), std::string::npos) << m;
  }
  f.c.weights = &model::precision("fp8");
  const auto mem = sim::plan_memory(f.c);
  EXPECT_GT(mem.weights, units::bytes(45e9));
  EXPECT_LT(mem.weights, units::bytes(56e9));
  EXPECT_GT(mem.kv_tokens, 0);
}

// One request on a dense model: the first token comes at the end of the prefill step, then one token per
// decode step, so TTFT = the prefill's time, every ITL equals TPOT, and E2EL = TTFT + 15 ITLs.
TEST(Serving, OneRequestTimesAddUp) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(1, 0, 100, 16);
  const auto r = sim::run_serving(f.c);
  ASSERT_EQ(r.requests.size(), 1u);
  const auto& q = r.requests[0];
  EXPECT_GT(q.ttft(), 0);
  EXPECT_NEAR(r.itl.p99, r.itl.median, 1e-6);
  EXPECT_NEAR(q.e2el(), q.ttft() + 15 * q.tpot(), 1e-9);
  EXPECT_NEAR(r.tpot.mean, r.itl.mean, 1e-6);
  // Decode of an 8B bf16 model on an H100 reads its weights but the embedding table per token (8.03 B
  // parameters less 128,256 x 4,096 of embedding = 7.5 B, 15.0 GB): about 4.5 ms at 3.35 TB/s.
  EXPECT_GT(q.tpot(), 15.0e9 / 3.35e12);
  EXPECT_LT(q.tpot(), 2 * 15.1e9 / 3.35e12);
}

// ServingConfig::engine_time_scale stretches the engine's time and nothing else: one request alone waits for
// nothing, so its TTFT and TPOT scale exactly (to the picosecond rounding), with the host times of a
// runtime's profile (step, sequence, request) included; requests that arrive slower than the engine serves
// them keep their throughput (the arrival rate sets it), and a scale that is not positive is refused.
TEST(Serving, EngineTimeScaleStretchesEveryEngineTime) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.node.devices.step_overhead = model::Sourced<units::Duration>{units::seconds(2e-3), "test"};
  f.node.devices.sequence_overhead = model::Sourced<units::Duration>{units::seconds(30e-6), "test"};
  f.node.devices.request_overhead = model::Sourced<units::Duration>{units::seconds(5e-3), "test"};
  f.requests(1, 0, 100, 16);
  const auto base = sim::run_serving(f.c);
  f.c.engine_time_scale = 1.75;
  const auto slow = sim::run_serving(f.c);
  ASSERT_EQ(slow.requests.size(), 1u);
  EXPECT_NEAR(slow.ttft.mean, 1.75 * base.ttft.mean, 1e-9);
  EXPECT_NEAR(slow.tpot.mean, 1.75 * base.tpot.mean, 1e-9);
  EXPECT_NEAR(slow.e2el.mean, 1.75 * base.e2el.mean, 1e-9);
  // Ten requests a second apart, each done in well under a second: the throughput is the arrivals'.
  f.requests(10, 1.0, 100, 16);
  f.c.engine_time_scale = 1;
  const double at_one = sim::run_serving(f.c).request_throughput;
  f.c.engine_time_scale = 0.5;
  const double fast = sim::run_serving(f.c).request_throughput;
  EXPECT_NEAR(fast / at_one, 1.0, 0.01);
  for (double bad : {0.0, -0.5, std::nan("")}) {
    f.c.engine_time_scale = bad;
    EXPECT_THROW((void)sim::run_serving(f.c), UserError) << bad;
  }
}

// ServingResult::host_time is the runtime's host time the engine spent: every step's step_overhead and
// sequence_overhead for each sequence it held (what `serve` reports as the run's host share), 0 without a
// runtime's host costs, and never more than the run.
TEST(Serving, HostTimeIsEveryStepsHostCost) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(20, 0, 100, 16);
  EXPECT_EQ(sim::run_serving(f.c).host_time, 0.0);
  f.node.devices.step_overhead = model::Sourced<units::Duration>{units::seconds(2e-3), "test"};
  f.node.devices.sequence_overhead = model::Sourced<units::Duration>{units::seconds(30e-6), "test"};
  const auto r = sim::run_serving(f.c);
  ASSERT_GE(r.steps.size(), 16u);  // a prefill step and 15 decode steps at least
  double expected = 0;
  for (const sim::StepRecord& s : r.steps) expected += 2e-3 + 30e-6 * s.sequences;
  EXPECT_NEAR(r.host_time, expected, 1e-9);
  EXPECT_LT(r.host_time, r.duration);
}

// The cost model counts a step's distinct experts per layer in bit masks of ceil(E / 64) words when the
// routing trace's masks fit ServingConfig::routing_mask_bytes, else by walking each token's experts: the two
// give the same steps to the bit, for 8 experts (one word), 128 (two) and 512 (eight, the last full).
TEST(Serving, ExpertMasksAndTheWalkGiveTheSameSteps) {
  for (const auto& [model, hw] : std::vector<std::pair<std::string, std::string>>{
           {"mixtral-8x7b", "dgx-h100"}, {"qwen3-30b-a3b", "h100-sxm"}, {"qwen3-next-80b-a3b", "dgx-h100"}}) {
    Fixture f(model, hw);
    f.c.scheduler.kind = sim::SchedulerKind::Continuous;
    f.c.scheduler.max_num_seqs = 64;
    f.requests(96, 0.01, 300, 40);
    const auto masks = sim::run_serving(f.c);
    f.c.routing_mask_bytes = 0;
    const auto walk = sim::run_serving(f.c);
    ASSERT_EQ(masks.steps.size(), walk.steps.size()) << model;
    ASSERT_GT(masks.steps.size(), 40u) << model;
    for (std::size_t i = 0; i < masks.steps.size(); ++i)
      ASSERT_EQ(masks.steps[i].duration, walk.steps[i].duration) << model << " step " << i;
    EXPECT_EQ(masks.ttft.mean, walk.ttft.mean) << model;
    EXPECT_EQ(masks.e2el.p99, walk.e2el.p99) << model;
  }
}

// With per-expert counts (here for expert parallelism's busiest device), a step's long entries (prefill
// chunks of 256 tokens or more) take their counts from the trace's running sums when those fit
// ServingConfig::routing_mask_bytes, else every token of them is walked: the two give the same steps to the
// bit, for chunks shorter than the 2,048-token trace, longer than it, and wrapping past its end.
TEST(Serving, ExpertCountsFromRunningSumsAndTheWalkGiveTheSameSteps) {
  Fixture f("qwen3-30b-a3b", "dgx-h100");
  sim::ParallelPlan p;
  p.tp = 8;
  p.moe_tp = 1;
  p.moe_ep = 8;
  f.c.plan = sim::resolve_plan(p, f.arch, f.node, "test");
  f.c.scheduler.kind = sim::SchedulerKind::Continuous;
  f.c.scheduler.max_num_seqs = 16;
  f.c.scheduler.max_num_batched_tokens = 8192;
  const std::vector<std::int64_t> prompts = {5000, 777, 300, 2100, 64, 4096, 1500, 260, 2047, 129, 6000, 1};
  f.requests(static_cast<std::int64_t>(prompts.size()), 0.002, 0, 24);
  for (std::size_t i = 0; i < prompts.size(); ++i) f.c.requests[i].prompt_tokens = prompts[i];
  const auto sums = sim::run_serving(f.c);
  f.c.routing_mask_bytes = 0;
  const auto walk = sim::run_serving(f.c);
  ASSERT_EQ(sums.steps.size(), walk.steps.size());
  ASSERT_GT(sums.steps.size(), 24u);
  for (std::size_t i = 0; i < sums.steps.size(); ++i)
    ASSERT_EQ(sums.steps[i].duration, walk.steps[i].duration) << "step " << i;
  EXPECT_EQ(sums.ttft.mean, walk.ttft.mean);
  EXPECT_EQ(sums.e2el.p99, walk.e2el.p99);
}

// ServingConfig::itl_distribution off keeps no inter-token gaps: the ITL figures stay zero and nothing else
// moves (the steps, the throughput, each request's own largest gap).
TEST(Serving, WithoutTheItlDistributionOnlyTheItlFiguresAreLeftOut) {
  Fixture f("mixtral-8x7b", "dgx-h100");
  f.c.scheduler.kind = sim::SchedulerKind::Continuous;
  f.requests(32, 0.01, 200, 30);
  const auto with = sim::run_serving(f.c);
  f.c.itl_distribution = false;
  const auto without = sim::run_serving(f.c);
  EXPECT_GT(with.itl.median, 0);
  EXPECT_EQ(without.itl.median, 0);
  EXPECT_EQ(without.itl.mean, 0);
  ASSERT_EQ(with.steps.size(), without.steps.size());
  for (std::size_t i = 0; i < with.steps.size(); ++i) ASSERT_EQ(with.steps[i].duration, without.steps[i].duration);
  EXPECT_EQ(with.output_throughput, without.output_throughput);
  EXPECT_EQ(with.tpot.mean, without.tpot.mean);
  ASSERT_EQ(with.requests.size(), without.requests.size());
  for (std::size_t i = 0; i < with.requests.size(); ++i)
    EXPECT_EQ(with.requests[i].max_itl, without.requests[i].max_itl);
}

// Under attention data parallelism each of the tp ranks runs its own executor over its own sequences, so a
// step's host time per sequence is paid for the busiest rank's share (16 sequences over 8 ranks: 2), where
// one tensor-parallel executor pays it for all 16. The step's per-step host time is paid once either way.
TEST(Serving, AttentionDpRanksPayTheirOwnSequencesHostTime) {
  for (const bool dp : {false, true}) {
    Fixture f("mixtral-8x7b", "dgx-h100");
    if (dp) {
      sim::ParallelPlan p;
      p.tp = 8;
      p.attention_dp = true;
      f.c.plan = sim::resolve_plan(p, f.arch, f.node, "test");
    }
    f.c.scheduler.kind = sim::SchedulerKind::Continuous;
    f.requests(16, 0, 64, 8);
    const auto bare = sim::run_serving(f.c);
    constexpr double kPerSequence = 40e-6, kPerStep = 1e-3;
    f.node.devices.sequence_overhead = model::Sourced<units::Duration>{units::seconds(kPerSequence), "test"};
    f.node.devices.step_overhead = model::Sourced<units::Duration>{units::seconds(kPerStep), "test"};
    const auto host = sim::run_serving(f.c);
    ASSERT_EQ(bare.steps.size(), host.steps.size()) << dp;
    ASSERT_GE(host.steps.size(), 2u);
    const sim::StepRecord& last = host.steps.back();
    ASSERT_EQ(last.sequences, bare.steps.back().sequences);
    const double held = dp ? std::ceil(last.sequences / 8.0) : last.sequences;
    EXPECT_NEAR(last.duration - bare.steps.back().duration, kPerStep + kPerSequence * held, 1e-9) << dp;
    const bool says = std::any_of(host.assumptions.begin(), host.assumptions.end(), [](const std::string& a) {
      return a.find("busiest of 8 attention-DP ranks") != std::string::npos;
    });
    EXPECT_EQ(says, dp);
  }
}

// Two requests arriving together are batched: every decode step carries both (mean decode batch 2), and
// the step costs less than twice a single one (the weights are read once).
TEST(Serving, ContinuousBatchingSharesTheWeightRead) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(1, 0, 64, 32);
  const double single = sim::run_serving(f.c).tpot.mean;
  f.requests(2, 0, 64, 32);
  f.c.scheduler.kind = sim::SchedulerKind::Continuous;
  const auto r = sim::run_serving(f.c);
  EXPECT_NEAR(r.mean_decode_batch, 2.0, 1e-9);
  EXPECT_LT(r.tpot.mean, 1.2 * single);
}

// Requests sent at the same instant meet the scheduler together: four 512-token prompts at time 0 under a
// 2048-token budget are one prefill step (llama-batched-bench's B prompts in one micro-batch), where a step
// formed at the first arrival would have held one prompt and left three for later steps. The same holds for a
// closed loop's users joining together.
TEST(Serving, SimultaneousArrivalsShareTheFirstStep) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(4, 0, 512, 1);
  f.c.scheduler.kind = sim::SchedulerKind::Chunked;
  f.c.scheduler.max_num_batched_tokens = 2048;
  auto r = sim::run_serving(f.c);
  ASSERT_FALSE(r.steps.empty());
  EXPECT_EQ(r.steps[0].prefill_tokens, 2048);
  EXPECT_EQ(r.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(r.ttft.max, r.ttft.median);  // every prompt's first token comes from that one step
  f.c.requests.clear();
  f.c.workload.arrival = sim::ArrivalKind::ClosedLoop;
  f.c.workload.users = 4;
  f.c.workload.requests = 4;
  f.c.workload.user_interval_s = 0;
  f.c.workload.prompt.value = 512;
  f.c.workload.output.value = 1;
  r = sim::run_serving(f.c);
  ASSERT_FALSE(r.steps.empty());
  EXPECT_EQ(r.steps[0].prefill_tokens, 2048);
}

// Chunked prefill with a budget of 512 tokens: a 2000-token prompt takes ceil(2000/512) = 4 steps before
// its first token; continuous batching does it in one.
TEST(Serving, ChunkedPrefillSplitsThePrompt) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(1, 0, 2000, 4);
  f.c.scheduler.kind = sim::SchedulerKind::Chunked;
  f.c.scheduler.max_num_batched_tokens = 512;
  auto r = sim::run_serving(f.c);
  int prefill_steps = 0;
  for (const auto& s : r.steps) prefill_steps += s.prefill_tokens > 0 ? 1 : 0;
  EXPECT_EQ(prefill_steps, 4);
  f.c.scheduler.kind = sim::SchedulerKind::Continuous;
  f.c.scheduler.max_num_batched_tokens = 2048;
  r = sim::run_serving(f.c);
  prefill_steps = 0;
  for (const auto& s : r.steps) prefill_steps += s.prefill_tokens > 0 ? 1 : 0;
  EXPECT_EQ(prefill_steps, 1);
}

// Static batching: a request arriving while a batch decodes waits for the whole batch to end, so its TTFT
// exceeds the first batch's remaining decode time; continuous batching admits it at the next step.
TEST(Serving, StaticBatchingMakesLateArrivalsWait) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(2, 0.05, 32, 200);  // the second arrives 50 ms in, while the first has ~150 tokens to go
  f.c.scheduler.kind = sim::SchedulerKind::Static;
  const auto s = sim::run_serving(f.c);
  f.c.scheduler.kind = sim::SchedulerKind::Continuous;
  const auto c = sim::run_serving(f.c);
  ASSERT_EQ(s.requests.size(), 2u);
  EXPECT_GE(s.requests[1].first_token, s.requests[0].finish);
  EXPECT_LT(c.requests[1].ttft(), 0.1 * s.requests[1].ttft());
}

// The scheduler registry (STYLE.md practice 2), as PlacementRegistry: the built-in ones in order with their
// --help lines, and only chunked prefill splits prompts; unknown and taken names are refused. A new one,
// "test-static", forms batches with static batching's form under its own value: the scenario above run with
// it gives static batching's times exactly.
TEST(SchedulerRegistry, ListsRefusesAndRunsARegisteredScheduler) {
  const auto& all = sim::scheduler_kinds();
  test::expect_builtins(all, {"static", "continuous", "chunked"});
  for (const auto& k : all) {
    EXPECT_NE(k.form, nullptr) << k.name;
    EXPECT_EQ(k.chunked_prefill, k.name == "chunked") << k.name;
  }
  test::expect_user_error([] { (void)sim::scheduler_by_name("chunky"); },
                          {"unknown scheduler 'chunky' (did you mean 'chunked'?); valid: static, continuous, chunked"});
  EXPECT_THROW(sim::register_scheduler({static_cast<sim::SchedulerKind>(90), "static", "again", false, all[0].form}),
               UserError);
  const auto test_static = static_cast<sim::SchedulerKind>(91);
  sim::register_scheduler(
      {test_static, "test-static", "static batching, registered again", false, sim::scheduler_kinds()[0].form});
  EXPECT_EQ(sim::scheduler_by_name("test-static"), test_static);
  EXPECT_EQ(sim::name_of(test_static), "test-static");
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(2, 0.05, 32, 200);
  f.c.scheduler.kind = sim::SchedulerKind::Static;
  const auto s = sim::run_serving(f.c);
  f.c.scheduler.kind = test_static;
  const auto t = sim::run_serving(f.c);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[1].first_token, s.requests[1].first_token);
  EXPECT_EQ(t.requests[1].finish, s.requests[1].finish);
}

// A KV cache of a few blocks: 8 concurrent 100 + 400 token requests cannot all hold their cache, so
// running sequences are preempted (recomputed) yet every request completes, and KV use peaks near 100%.
TEST(Serving, PreemptionWhenTheCacheRunsOut) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(8, 0, 100, 400);
  f.c.scheduler.kind = sim::SchedulerKind::Continuous;
  const auto base = sim::plan_memory(f.c);
  // Leave room for about 1,200 tokens of KV (an 8B model: 128 KiB per token) beyond weights and activations.
  const double want = (base.weights + base.activations + 1200.0 * base.kv_per_token).base();
  f.c.scheduler.gpu_memory_utilization = want / f.node.devices.memory->value.base();
  const auto r = sim::run_serving(f.c);
  EXPECT_EQ(r.requests.size(), 8u);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GT(r.max_kv_used, 0.9);
}

// A max-load run (every request queued at once) on a cache of about 1,200 tokens, under both capacity
// policies and both batching schedulers: vLLM's max-utilization admits on the prompt's blocks and then
// preempts when decodes outgrow the cache; TensorRT-LLM's guaranteed-no-evict admits a request only with
// its 500 tokens' blocks reserved, so at most two run at once, none is preempted, and the cache never
// holds more than it has. Every request completes either way.
TEST(Serving, GuaranteedNoEvictNeverPreempts) {
  for (const auto kind : {sim::SchedulerKind::Chunked, sim::SchedulerKind::Continuous}) {
    Fixture f("llama-3.1-8b", "h100-sxm");
    f.requests(12, 0, 100, 400);
    f.c.scheduler.kind = kind;
    const auto base = sim::plan_memory(f.c);
    const double want = (base.weights + base.activations + 1200.0 * base.kv_per_token).base();
    f.c.scheduler.gpu_memory_utilization = want / f.node.devices.memory->value.base();
    f.c.scheduler.capacity = sim::CapacityPolicy::MaxUtilization;
    const auto greedy = sim::run_serving(f.c);
    f.c.scheduler.capacity = sim::CapacityPolicy::GuaranteedNoEvict;
    const auto reserved = sim::run_serving(f.c);
    EXPECT_EQ(greedy.requests.size(), 12u);
    EXPECT_GT(greedy.preemptions, 0);
    EXPECT_EQ(reserved.requests.size(), 12u);
    EXPECT_EQ(reserved.preemptions, 0);
    EXPECT_LE(reserved.max_kv_used, 1.0);
    const std::int64_t per_request = (500 + f.c.scheduler.block_size - 1) / f.c.scheduler.block_size;
    for (const auto& st : reserved.steps) {
      EXPECT_LE(st.running * per_request, reserved.memory.kv_blocks);
    }
  }
}

// The capacity policy is a scenario key (scheduler.capacity) with TensorRT-LLM's names; a wrong one names
// the key and the choices.
TEST(Serving, CapacityPolicyNames) {
  EXPECT_EQ(sim::capacity_policy_by_name("guaranteed-no-evict"), sim::CapacityPolicy::GuaranteedNoEvict);
  EXPECT_EQ(sim::capacity_policy_by_name("max-utilization"), sim::CapacityPolicy::MaxUtilization);
  EXPECT_THROW((void)sim::capacity_policy_by_name("evict-sometimes"), UserError);
}

// A request whose prompt + output exceeds the whole KV cache is refused up front, naming the request.
TEST(Serving, RequestLargerThanTheCacheIsRefused) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(1, 0, 100, 400);
  const auto base = sim::plan_memory(f.c);
  f.c.scheduler.gpu_memory_utilization =
      (base.weights + base.activations + 200.0 * base.kv_per_token) / f.node.devices.memory->value;
  EXPECT_THROW((void)sim::run_serving(f.c), UserError);
}

// Two pipeline stages: one request's token passes both stages one after the other, so with pp 2 the
// per-token time is the sum of two half-model stages plus the transfer, not less than with pp 1 minus the
// halved all-reduces; and many concurrent requests keep both stages busy: throughput above pp 1's
// single-stage rate over the same 16 devices would be a bug only if it exceeded 2x.
TEST(Serving, PipelineStagesRunInSequenceForOneRequest) {
  Fixture two("llama-3.1-405b", "dgx-h100", 2, 8, 2);
  two.c.weights = &model::precision("fp8");
  two.requests(1, 0, 128, 16);
  const auto r = sim::run_serving(two.c);
  ASSERT_EQ(r.requests.size(), 1u);
  // 405 GB of fp8 weights over 16 H100s read once per token, stage after stage: at least 405e9 / 8 /
  // 3.35e12 = 15 ms per token (each stage's 8 devices read half the model).
  EXPECT_GT(r.tpot.mean, 405e9 / 8 / 3.35e12);
}

// A pipeline holds at most one micro-batch per stage (TensorRT-LLM's PyExecutor refills each of its pp_size
// micro-batch slots only when that slot's batch has come back; vLLM's engine core queues at most pp batches).
// 32 long prompts at time 0 are the first micro-batch (about 0.43 s per stage); short requests then arrive
// every 5 ms while it is in the second stage: with 2 stages one more micro-batch may start before the first
// one's tokens come back, and the later arrivals wait to share the next, where without the bound stage 0
// started a micro-batch of one request at each arrival and queued them all behind the first.
TEST(Serving, APipelineHoldsOneMicroBatchPerStage) {
  Fixture f("llama-3.1-70b", "dgx-h100", 1, 4, 2);
  f.c.weights = &model::precision("fp8");
  f.requests(72, 0, 16, 8);
  for (std::size_t i = 0; i < f.c.requests.size(); ++i) {
    f.c.requests[i].prompt_tokens = i < 32 ? 1024 : 16;
    f.c.requests[i].arrival = sim::to_sim_time(units::seconds(i < 32 ? 0.0 : 0.5 + 5e-3 * static_cast<double>(i - 32)));
  }
  f.c.scheduler.max_num_batched_tokens = 32768;
  const auto r = sim::run_serving(f.c);
  ASSERT_EQ(r.requests.size(), 72u);
  double first_back = r.requests[0].first_token;
  for (std::size_t i = 0; i < 32; ++i) first_back = std::min(first_back, r.requests[i].first_token);
  ASSERT_GT(first_back, 0.5 + 10 * 5e-3);  // the long prompts are still in the pipeline as requests arrive
  int started = 0;
  for (const auto& s : r.steps) started += s.start < first_back ? 1 : 0;
  EXPECT_EQ(started, 2);
}

// TensorRT-LLM's max_batch_size bounds each micro-batch, and its engine keeps pp x max_batch_size requests
// active (max_num_seqs here): 64 requests at once on 2 stages with max_batch_size 16 run as micro-batches of
// at most 16 sequences, where max_num_seqs alone let the first step take all 64 and leave the second stage
// nothing to overlap with.
TEST(Serving, MaxBatchSizeBoundsEachMicroBatch) {
  Fixture f("llama-3.1-70b", "dgx-h100", 1, 4, 2);
  f.c.weights = &model::precision("fp8");
  f.requests(64, 0, 16, 32);
  f.c.scheduler.max_num_seqs = 64;
  auto one_batch = sim::run_serving(f.c);
  int widest = 0;
  for (const auto& s : one_batch.steps) widest = std::max(widest, s.sequences);
  EXPECT_EQ(widest, 64);
  f.c.scheduler.max_batch_size = 16;
  const auto r = sim::run_serving(f.c);
  ASSERT_EQ(r.requests.size(), 64u);
  widest = 0;
  for (const auto& s : r.steps) widest = std::max(widest, s.sequences);
  EXPECT_EQ(widest, 16);
  EXPECT_NEAR(r.mean_decode_batch, 16.0, 1e-9);
  EXPECT_EQ(f.c.scheduler.step_seqs(), 16);
  f.c.scheduler.max_batch_size = 128;  // never more than max_num_seqs
  EXPECT_EQ(f.c.scheduler.step_seqs(), 64);
}

// Goodput counts only the requests meeting every SLO bound: a 1 ms TTFT bound excludes everything.
TEST(Serving, GoodputAppliesTheSlo) {
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(4, 0.5, 64, 8);
  f.c.slo.ttft_s = 10.0;
  auto r = sim::run_serving(f.c);
  EXPECT_EQ(r.good_requests, 4);
  f.c.slo.ttft_s = 1e-3;
  r = sim::run_serving(f.c);
  EXPECT_EQ(r.good_requests, 0);
  EXPECT_EQ(r.goodput, 0.0);
}

// MoE decode of one token on Mixtral TP 8: the device reads the 2 chosen experts' slices, not all 8; with
// expert parallelism (moe_ep 8) the busiest device reads one whole expert, 8x a TP slice, so a batch of 1
// is slower under EP (seed 002: TP wins at small batch).
TEST(Serving, ExpertParallelLosesAtBatchOne) {
  Fixture tp("mixtral-8x7b", "dgx-h100");
  tp.requests(1, 0, 16, 32);
  const double t_tp = sim::run_serving(tp.c).tpot.mean;
  Fixture ep("mixtral-8x7b", "dgx-h100");
  sim::ParallelPlan p;
  p.tp = 8;
  p.moe_ep = 8;
  ep.c.plan = sim::resolve_plan(p, ep.arch, ep.node, "test");
  ep.requests(1, 0, 16, 32);
  const double t_ep = sim::run_serving(ep.c).tpot.mean;
  EXPECT_GT(t_ep, t_tp);
}

// max_concurrency (vLLM's --max-concurrency): 12 requests all offered at 0 s, at most 3 in flight. At each
// request's send time (its record's arrival) at most 3 requests are in flight (sent and not finished), and
// at 0 s exactly 3 are: the cap is reached and never passed. Sends follow the ids (first come, first
// served); the first 3 go at 0 and every later one exactly when an earlier one finishes. With cap 1 the
// requests run back to back: request i + 1 is sent when request i finishes. Without a cap all 12 are in
// flight at 0 s. The run says so in its assumptions.
TEST(Serving, MaxConcurrencyCapsRequestsInFlight) {
  auto in_flight_at = [](const sim::ServingResult& r, double t) {
    int n = 0;
    for (const auto& q : r.requests) n += q.arrival <= t && t < q.finish ? 1 : 0;
    return n;
  };
  Fixture f("llama-3.1-8b", "h100-sxm");
  f.requests(12, 0.0, 256, 16);
  const auto open = sim::run_serving(f.c);
  EXPECT_EQ(in_flight_at(open, 0.0), 12);

  f.c.workload.max_concurrency = 3;
  const auto capped = sim::run_serving(f.c);
  ASSERT_EQ(capped.requests.size(), 12u);
  int most = 0;
  for (std::size_t i = 0; i < capped.requests.size(); ++i) {
    const auto& q = capped.requests[i];
    most = std::max(most, in_flight_at(capped, q.arrival));
    if (i < 3) {
      EXPECT_EQ(q.arrival, 0.0) << i;
    } else {
      EXPECT_GE(q.arrival, capped.requests[i - 1].arrival) << i;
      bool at_a_finish = false;
      for (std::size_t j = 0; j < i; ++j) at_a_finish = at_a_finish || capped.requests[j].finish == q.arrival;
      EXPECT_TRUE(at_a_finish) << i;
    }
  }
  EXPECT_EQ(most, 3);
  bool said = false;
  for (const auto& a : capped.assumptions) said = said || a.find("at most 3 requests in flight") != std::string::npos;
  EXPECT_TRUE(said);

  f.c.workload.max_concurrency = 1;
  const auto serial = sim::run_serving(f.c);
  for (std::size_t i = 1; i < serial.requests.size(); ++i)
    EXPECT_EQ(serial.requests[i].arrival, serial.requests[i - 1].finish) << i;
}

}  // namespace
