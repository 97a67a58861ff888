// Safetensors checkpoints (calibrate/reference/checkpoint.hpp): the architectures the reference decoder
// accepts and the Mixtral tensor names, and opening checkpoints (directory, file, index, shards). The dtypes
// are test_checkpoint_floats.cpp, the reader test_checkpoint_reader.cpp, `moesim ref init` test_checkpoint_init.cpp.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint_support.hpp"
#include "moesim/model/json_reader.hpp"

namespace moesim::test::checkpoint {
namespace {

// Of the zoo, exactly the Mixtral-family models are accepted; the others are refused naming the source.
TEST(CheckpointArchitecture, AcceptsOnlyMixtralModels) {
  for (const auto& a : moesim::model::zoo()) {
    const auto m = error_of([&] { moesim::reference::check_reference_architecture(a, a.id); });
    if (a.family == "mixtral") {
      EXPECT_EQ(m, "") << a.id;
    } else {
      EXPECT_TRUE(contains(m, a.id + ": ")) << m;
    }
  }
  auto biased = tiny_arch();
  biased.attention_bias = true;
  const auto m = error_of([&] { moesim::reference::check_reference_architecture(biased, "b.json"); });
  EXPECT_TRUE(contains(m, "b.json: it has attention projection biases")) << m;
}

// HF MixtralForCausalLM names and [out, in] shapes for the tiny model: q [4·8, 32], k [2·8, 32], o [32, 32],
// router [4, 32], w1/w3 [48, 32], w2 [32, 48]; 41 tensors, 40 when the LM head is tied to the embedding.
TEST(CheckpointArchitecture, MixtralTensorNamesAndShapes) {
  const auto tensors = moesim::reference::mixtral_tensors(tiny_arch());
  ASSERT_EQ(tensors.size(), kTinyTensors);
  const auto shape_of = [&](const std::string& name) {
    for (const auto& t : tensors) {
      if (t.name == name) return t.shape;
    }
    return std::vector<std::int64_t>{};
  };
  using S = std::vector<std::int64_t>;
  EXPECT_EQ(tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(shape_of("model.embed_tokens.weight"), (S{64, 32}));
  EXPECT_EQ(shape_of("model.layers.1.input_layernorm.weight"), (S{32}));
  EXPECT_EQ(shape_of("model.layers.1.self_attn.q_proj.weight"), (S{32, 32}));
  EXPECT_EQ(shape_of("model.layers.1.self_attn.k_proj.weight"), (S{16, 32}));
  EXPECT_EQ(shape_of("model.layers.1.self_attn.v_proj.weight"), (S{16, 32}));
  EXPECT_EQ(shape_of("model.layers.1.self_attn.o_proj.weight"), (S{32, 32}));
  EXPECT_EQ(shape_of("model.layers.1.post_attention_layernorm.weight"), (S{32}));
  EXPECT_EQ(shape_of("model.layers.1.block_sparse_moe.gate.weight"), (S{4, 32}));
  EXPECT_EQ(shape_of("model.layers.1.block_sparse_moe.experts.3.w1.weight"), (S{48, 32}));
  EXPECT_EQ(shape_of("model.layers.1.block_sparse_moe.experts.3.w2.weight"), (S{32, 48}));
  EXPECT_EQ(shape_of("model.layers.1.block_sparse_moe.experts.3.w3.weight"), (S{48, 32}));
  EXPECT_EQ(shape_of("model.norm.weight"), (S{32}));
  EXPECT_EQ(tensors.back().name, "lm_head.weight");
  auto config = tiny_config();
  config["tie_word_embeddings"] = true;
  EXPECT_EQ(moesim::reference::mixtral_tensors(tiny_arch(config)).size(), kTinyTensors - 1);
}

// --- opening checkpoints -------------------------------------------------------------------------------------

// A checkpoint opens from its directory or from its .safetensors file; config.json is beside either.
TEST(CheckpointOpen, OpensADirectoryOrAFile) {
  const TempDir dir;
  write_random_checkpoint(tiny_config(), dir / "c", InitOptions{});
  const Checkpoint by_dir = Checkpoint::open(dir / "c");
  const Checkpoint by_file = Checkpoint::open(dir / "c" / "model.safetensors");
  EXPECT_EQ(by_dir.config_path(), dir / "c" / "config.json");
  EXPECT_EQ(by_file.config_path(), dir / "c" / "config.json");
  EXPECT_EQ(by_file.tensor_count(), kTinyTensors);
  const auto ref = by_file.find("model.norm.weight");
  ASSERT_TRUE(ref);
  EXPECT_EQ(*ref->file, dir / "c" / "model.safetensors");
  EXPECT_EQ(ref->bytes.size(), 64U);
}

// A tensor the config needs but the checkpoint lacks, and one whose shape disagrees with the config
// (intermediate_size 64 instead of 48: the first expert matrix is [48, 32], the config implies [64, 32]).
TEST(CheckpointOpen, RequireNamesMissingAndMisShapedTensors) {
  const TempDir dir;
  write_random_checkpoint(tiny_config(), dir / "c", InitOptions{});
  const Checkpoint ckpt = Checkpoint::open(dir / "c");
  const std::string name = "model.layers.3.block_sparse_moe.experts.5.w2.weight";
  auto m = error_of([&] { (void)ckpt.require(name, {32, 48}); });
  EXPECT_TRUE(contains(m, "checkpoint " + (dir / "c").string() + ": tensor '" + name +
                              "' is missing; the checkpoint does not match config.json (expected shape [32, 48])"))
      << m;
  auto wider = tiny_config();
  wider["intermediate_size"] = 64;
  m = error_of([&] { moesim::reference::check_checkpoint(ckpt, tiny_arch(wider)); });
  EXPECT_TRUE(contains(m, "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight'")) << m;
  EXPECT_TRUE(contains(m, "has shape [48, 32] but config.json implies [64, 32]")) << m;
}

// An index mapping a tensor to a shard without it, or to a path instead of a file name; a shard the index
// names but the directory lacks.
TEST(CheckpointOpen, RefusesAnIndexThatDoesNotMatchItsShards) {
  const TempDir dir;
  const auto written = write_random_checkpoint(tiny_config(), dir / "s", InitOptions{.max_shard_bytes = 30'000});
  const fs::path index = dir / "s" / "model.safetensors.index.json";
  auto doc = moesim::json::load_file(index);
  const std::string second = written.files[2].filename().string();

  doc["weight_map"]["model.embed_tokens.weight"] = second;  // the embedding is in the first shard
  std::ofstream(index) << doc.dump();
  auto m = error_of([&] { (void)Checkpoint::open(dir / "s"); });
  EXPECT_TRUE(contains(
      m, second + ": tensor 'model.embed_tokens.weight' is missing, but " + index.string() + " maps it to this shard"))
      << m;

  // A shard name that is a path, which would reach outside the checkpoint.
  doc["weight_map"]["model.embed_tokens.weight"] = "../" + second;
  std::ofstream(index) << doc.dump();
  m = error_of([&] { (void)Checkpoint::open(dir / "s"); });
  EXPECT_TRUE(contains(m, "tensor 'model.embed_tokens.weight' maps to \"../" + second + "\"")) << m;

  doc["weight_map"]["model.embed_tokens.weight"] = written.files[1].filename().string();
  std::ofstream(index) << doc.dump();
  fs::remove(written.files[2]);
  m = error_of([&] { (void)Checkpoint::open(dir / "s"); });
  EXPECT_TRUE(contains(m, index.string() + ": shard '" + second + "'")) << m;
  EXPECT_TRUE(contains(m, "is missing from")) << m;
}

// Paths that are no checkpoint: absent, a directory with no weights, an index without a weight_map.
TEST(CheckpointOpen, RefusesPathsWithoutACheckpoint) {
  const TempDir dir;
  auto m = error_of([&] { (void)Checkpoint::open(dir / "nothing"); });
  EXPECT_TRUE(contains(m, "nothing: no such file or directory")) << m;
  fs::create_directories(dir / "empty");
  m = error_of([&] { (void)Checkpoint::open(dir / "empty"); });
  EXPECT_TRUE(contains(m, "empty: holds neither model.safetensors.index.json nor model.safetensors")) << m;
  std::ofstream(dir / "empty" / "model.safetensors.index.json") << R"({"metadata": {}})";
  m = error_of([&] { (void)Checkpoint::open(dir / "empty"); });
  EXPECT_TRUE(contains(m, "model.safetensors.index.json: weight_map is missing")) << m;
}

}  // namespace
}  // namespace moesim::test::checkpoint
