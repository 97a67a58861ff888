// `moesim ref init` (calibrate/reference/checkpoint.hpp): round trips in every dtype, single-file and
// sharded, the same bytes for a seed, progress, and the directories and configs it refuses.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint_support.hpp"
#include "moesim/model/json_reader.hpp"

namespace moesim::test::checkpoint {
namespace {

/// Statistics of every value of the checkpoint's non-norm tensors; norms must all be 1.
struct Moments {
  double mean = 0;
  double std = 0;
  float max_abs = 0;
};
Moments check_values(const Checkpoint& ckpt, const moesim::model::Architecture& arch) {
  double sum = 0, sum2 = 0, n = 0;
  float max_abs = 0;
  for (const auto& t : moesim::reference::mixtral_tensors(arch)) {
    const auto v = ckpt.load_f32(t.name, t.shape);
    for (float x : v) {
      if (t.name.ends_with("norm.weight")) {
        EXPECT_EQ(x, 1.0f) << t.name;
        continue;
      }
      sum += x;
      sum2 += static_cast<double>(x) * x;
      n += 1;
      max_abs = std::max(max_abs, std::abs(x));
    }
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean), max_abs};
}

// For each dtype, one file and 4 KB shards: the files, the parameter count (47520, see the top), the
// index, every tensor with its shape, and values bit-identical between the two layouts. Norms are 1 and
// the rest is uniform on [-a, a], a = 0.02·sqrt(3): over ~47k values the standard deviation is 0.02 within
// 3% (its sampling error is ~0.3%) and the mean is ~0.
TEST(CheckpointInit, RoundTripsEveryDtypeSingleAndSharded) {
  const TempDir dir;
  const auto arch = tiny_arch();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    const std::string tag(moesim::reference::dtype_name(dtype));
    SCOPED_TRACE(tag);
    const InitOptions single_opts{.seed = 3, .dtype = dtype};
    const InitOptions sharded_opts{.seed = 3, .dtype = dtype, .max_shard_bytes = 4096};
    const InitResult single = write_random_checkpoint(tiny_config(), dir / (tag + "-single"), single_opts);
    const InitResult sharded = write_random_checkpoint(tiny_config(), dir / (tag + "-sharded"), sharded_opts);

    const std::uint64_t bytes = kTinyParameters * moesim::reference::dtype_size(dtype);
    EXPECT_EQ(single.parameters, kTinyParameters);
    EXPECT_EQ(single.bytes, bytes);
    EXPECT_EQ(sharded.bytes, bytes);
    ASSERT_EQ(single.files.size(), 2U);
    EXPECT_EQ(single.files[1].filename(), "model.safetensors");
    ASSERT_GT(sharded.files.size(), 3U);
    const std::size_t shards = sharded.files.size() - 2;
    char first_shard[64];
    std::snprintf(first_shard, sizeof first_shard, "model-00001-of-%05zu.safetensors", shards);
    EXPECT_EQ(sharded.files[1].filename(), first_shard);
    EXPECT_EQ(sharded.files.back().filename(), "model.safetensors.index.json");
    EXPECT_EQ(tiny_arch(moesim::json::load_file(sharded.files[0])).hidden, 32);

    const auto index = moesim::json::load_file(sharded.files.back());
    EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), bytes);
    EXPECT_EQ(index["weight_map"].size(), kTinyTensors);

    const Checkpoint a = Checkpoint::open(dir / (tag + "-single"));
    const Checkpoint b = Checkpoint::open(dir / (tag + "-sharded"));
    moesim::reference::check_checkpoint(a, arch);
    moesim::reference::check_checkpoint(b, arch);
    EXPECT_EQ(a.tensor_count(), kTinyTensors);
    EXPECT_EQ(b.tensor_count(), kTinyTensors);
    EXPECT_EQ(a.total_bytes(), bytes);
    EXPECT_EQ(b.total_bytes(), bytes);
    EXPECT_EQ(b.config_path(), dir / (tag + "-sharded") / "config.json");
    for (const auto& t : moesim::reference::mixtral_tensors(arch)) {
      EXPECT_EQ(a.require(t.name, t.shape).info->dtype, dtype);
      EXPECT_TRUE(same_bits(a.load_f32(t.name, t.shape), b.load_f32(t.name, t.shape))) << t.name;
    }
    // Greedy sharding: a shard holds at most 4096 bytes unless it is a single tensor, and the next shard's
    // first tensor (at offset 0) would not have fitted.
    std::vector<std::uint64_t> sums, firsts;
    for (std::size_t s = 1; s + 1 < sharded.files.size(); ++s) {
      const SafetensorsFile shard(sharded.files[s]);
      sums.push_back(0);
      for (const auto& t : shard.tensors()) {
        sums.back() += t.end - t.begin;
        if (t.begin == 0) firsts.push_back(t.end);
      }
      EXPECT_TRUE(sums.back() <= 4096 || shard.tensors().size() == 1) << sharded.files[s];
    }
    for (std::size_t s = 0; s + 1 < sums.size(); ++s) EXPECT_GT(sums[s] + firsts[s + 1], 4096U) << s;

    const Moments m = check_values(a, arch);
    EXPECT_NEAR(m.std, 0.02, 0.02 * 0.03);
    EXPECT_LT(std::abs(m.mean), 0.02 * 0.03);
    EXPECT_LE(m.max_abs, 0.02 * std::sqrt(3.0) * (1 + 1.0 / 128));  // bf16 may round up by half a step
  }
}

// BF16 and F16 checkpoints hold exactly the F32 checkpoint's values rounded: one generator stream per tensor,
// independent of dtype. A vocabulary of 33000 makes the embedding 1,056,000 values, more than one 2^20-value
// write chunk, so the stream must continue across chunks.
TEST(CheckpointInit, NarrowDtypesHoldTheRoundedF32Values) {
  const TempDir dir;
  auto config = tiny_config();
  config["vocab_size"] = 33000;
  config["tie_word_embeddings"] = true;
  const auto arch = tiny_arch(config);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    write_random_checkpoint(config, dir / std::string(moesim::reference::dtype_name(dtype)),
                            InitOptions{.seed = 11, .dtype = dtype});
  }
  const Checkpoint f32 = Checkpoint::open(dir / "F32");
  const Checkpoint bf16 = Checkpoint::open(dir / "BF16");
  const Checkpoint f16 = Checkpoint::open(dir / "F16");
  EXPECT_FALSE(f32.find("lm_head.weight").has_value());  // tied
  for (const auto& t : moesim::reference::mixtral_tensors(arch)) {
    const auto wide = f32.load_f32(t.name, t.shape);
    const auto b = bf16.load_f32(t.name, t.shape);
    const auto h = f16.load_f32(t.name, t.shape);
    for (std::size_t i = 0; i < wide.size(); ++i) {
      ASSERT_EQ(moesim::reference::f32_to_bf16(wide[i]), moesim::reference::f32_to_bf16(b[i]))
          << t.name << "[" << i << "]";
      ASSERT_EQ(moesim::reference::bf16_to_f32(moesim::reference::f32_to_bf16(wide[i])), b[i]) << t.name;
      ASSERT_EQ(moesim::reference::f16_to_f32(moesim::reference::f32_to_f16(wide[i])), h[i]) << t.name;
    }
  }
}

// The same seed writes the same bytes in every file; another seed changes the weights. The header length is
// a multiple of 8 and the metadata records the writer and the seed.
TEST(CheckpointInit, SameSeedSameBytes) {
  const TempDir dir;
  const InitOptions opts{.seed = 42, .max_shard_bytes = 30'000};
  const auto first = write_random_checkpoint(tiny_config(), dir / "a", opts);
  const auto second = write_random_checkpoint(tiny_config(), dir / "b", opts);
  ASSERT_EQ(first.files.size(), second.files.size());
  for (std::size_t i = 0; i < first.files.size(); ++i) {
    EXPECT_EQ(first.files[i].filename(), second.files[i].filename());
    EXPECT_TRUE(read_bytes(first.files[i]) == read_bytes(second.files[i])) << first.files[i];
  }
  const auto third =
      write_random_checkpoint(tiny_config(), dir / "c", InitOptions{.seed = 43, .max_shard_bytes = 30'000});
  EXPECT_FALSE(read_bytes(first.files[1]) == read_bytes(third.files[1]));

  EXPECT_EQ(header_length(first.files[1]) % 8, 0U);
  const SafetensorsFile shard(first.files[1]);
  EXPECT_EQ(shard.metadata().at("format"), "pt");
  EXPECT_EQ(shard.metadata().at("generator"), "moesim ref init");
  EXPECT_EQ(shard.metadata().at("seed"), "42");
}

// Progress is reported in increasing byte counts and ends at the total (47520 BF16 values = 95040 bytes).
TEST(CheckpointInit, ReportsProgressUpToTheTotal) {
  const TempDir dir;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  write_random_checkpoint(tiny_config(), dir / "p", InitOptions{},
                          [&](std::uint64_t done, std::uint64_t total) { calls.emplace_back(done, total); });
  ASSERT_FALSE(calls.empty());
  for (std::size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back(), std::make_pair(std::uint64_t{95040}, std::uint64_t{95040}));
}

// A directory that already holds a checkpoint is refused before anything in it changes.
TEST(CheckpointInit, RefusesADirectoryHoldingACheckpoint) {
  const TempDir dir;
  const auto first = write_random_checkpoint(tiny_config(), dir / "x", InitOptions{});
  const std::string before = read_bytes(first.files[1]);
  const auto m = error_of([&] { write_random_checkpoint(tiny_config(), dir / "x", InitOptions{.seed = 2}); });
  EXPECT_TRUE(contains(m, "already holds a checkpoint")) << m;
  EXPECT_TRUE(contains(m, "choose an empty directory or remove it")) << m;
  EXPECT_TRUE(read_bytes(first.files[1]) == before);
}

// A failure while writing the last shard (here the progress callback throws once most bytes are written,
// as a full disk would fail the write) leaves nothing behind: config.json and the shards already finished
// are never put in place, since all the files of a checkpoint are one OutputSet, and no temporary stays.
TEST(CheckpointInit, WritesNothingWhenTheLastShardFails) {
  const TempDir dir;
  const InitOptions opts{.max_shard_bytes = 30'000};
  const auto reference = write_random_checkpoint(tiny_config(), dir / "ref", opts);
  ASSERT_GT(reference.files.size(), 3u);
  const auto m = error_of([&] {
    write_random_checkpoint(tiny_config(), dir / "out", opts, [](std::uint64_t done, std::uint64_t total) {
      if (done > total * 9 / 10) throw UserError("injected write failure");
    });
  });
  EXPECT_TRUE(contains(m, "injected write failure")) << m;
  EXPECT_FALSE(fs::exists(dir / "out")) << "the directory this call created is removed again";
}

// Configs the reference decoder cannot run are refused before any file is written.
TEST(CheckpointInit, RefusesNonMixtralConfigs) {
  const TempDir dir;
  nlohmann::json qwen = tiny_config();
  qwen["model_type"] = "qwen3_moe";
  qwen["architectures"] = {"Qwen3MoeForCausalLM"};
  qwen["num_experts"] = 4;
  qwen["moe_intermediate_size"] = 48;
  const auto m = error_of([&] { write_random_checkpoint(qwen, dir / "q", InitOptions{}); });
  EXPECT_TRUE(contains(m, "q/config.json: model family 'qwen3_moe' is not supported")) << m;
  EXPECT_FALSE(fs::exists(dir / "q"));
}

}  // namespace
}  // namespace moesim::test::checkpoint
