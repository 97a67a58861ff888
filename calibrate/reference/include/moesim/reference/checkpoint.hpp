#pragma once
// Hugging Face safetensors checkpoints for the reference decoder (issue 5, part 1).
//
// Format (https://huggingface.co/docs/safetensors, "Format"): 8 bytes little-endian u64 N, then N bytes
// of a JSON object {"name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"k": "v"}}, then the data section; offsets are relative to the data section's start.
// A sharded checkpoint is a directory with model.safetensors.index.json: {"metadata": {...},
// "weight_map": {"tensor name": "model-00001-of-00002.safetensors", ...}}.
//
// Everything is validated before anything is used, and nothing is read past a file's end: the header
// length against the file size (and a 100 MB cap, as the reference implementation's
// MAX_HEADER_SIZE), every dtype known, every shape's byte count equal to end - begin, every range inside
// the data section, no two ranges overlapping, every shard the index names present. The data section is
// memory-mapped read-only; the mapping lives as long as the SafetensorsFile.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/architecture.hpp"

namespace moesim::reference {

enum class DType { F32, F16, BF16 };
/// "F32", "F16", "BF16" (the safetensors spellings).
std::string_view dtype_name(DType d);
std::size_t dtype_size(DType d);
/// Parses a safetensors dtype string; nullopt for any other (the caller reports it with the tensor).
std::optional<DType> parse_dtype(std::string_view s);

/// The largest header the reader accepts (bytes).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  ///< byte offset inside the data section
  std::uint64_t end = 0;    ///< one past the last byte
  [[nodiscard]] std::int64_t elements() const;
};

/// One .safetensors file, validated and memory-mapped. UserError (one line naming the file, the tensor
/// and the fix) for a missing or unreadable file, a header length beyond the file or over
/// kMaxHeaderBytes, malformed header JSON, an unknown dtype, a shape that does not match its byte range,
/// a range outside the data section, or overlapping ranges.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] const TensorInfo* find(std::string_view name) const;
  /// The tensor's bytes inside the mapping (little-endian as stored).
  [[nodiscard]] std::span<const std::byte> bytes(const TensorInfo& t) const;
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::filesystem::path path_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  const std::byte* map_ = nullptr;  ///< the whole file, read-only
  std::size_t map_size_ = 0;
  std::uint64_t data_start_ = 0;  ///< 8 + header length
};

/// A tensor found in a checkpoint.
struct TensorRef {
  const TensorInfo* info = nullptr;
  std::span<const std::byte> bytes;
  const std::filesystem::path* file = nullptr;  ///< the shard holding it
};

/// Converts `n` stored values to f32 (F32 copied, F16 and BF16 widened exactly).
void to_f32(DType dtype, std::span<const std::byte> bytes, float* out, std::size_t n);
/// One IEEE 754 binary16 value (bits as stored) widened to f32 exactly: subnormals, infinities, NaN included.
float f16_to_f32(std::uint16_t bits);
/// One bfloat16 value (the high 16 bits of a binary32) widened to f32 exactly.
float bf16_to_f32(std::uint16_t bits);
/// f32 rounded to binary16, to nearest with ties to even (IEEE 754 default rounding): too large -> +-inf,
/// at most half the smallest subnormal -> +-0, NaN -> a quiet NaN of the same sign.
std::uint16_t f32_to_f16(float f);
/// f32 rounded to bfloat16, to nearest with ties to even; NaN -> a quiet NaN of the same sign.
std::uint16_t f32_to_bf16(float f);

/// A checkpoint: a directory (model.safetensors.index.json and its shards, or one model.safetensors)
/// or one .safetensors file. The model's config.json sits in the directory (or beside the file).
class Checkpoint {
 public:
  /// UserError for a missing path, a directory with neither an index nor model.safetensors, an index
  /// that is malformed, names a shard that is absent or maps a tensor to a shard that lacks it, or any
  /// shard that fails SafetensorsFile's checks.
  static Checkpoint open(const std::filesystem::path& path);

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  /// Path of the config.json next to the weights (whether or not it exists).
  [[nodiscard]] std::filesystem::path config_path() const;
  [[nodiscard]] std::optional<TensorRef> find(std::string_view name) const;
  /// The tensor, which must exist with exactly this shape; UserError naming the tensor, the checkpoint
  /// and the expected and found shapes (or that it is missing) otherwise.
  [[nodiscard]] TensorRef require(std::string_view name, const std::vector<std::int64_t>& shape) const;
  /// Reads the tensor (checked as by require) into f32.
  [[nodiscard]] std::vector<float> load_f32(std::string_view name, const std::vector<std::int64_t>& shape) const;
  [[nodiscard]] std::size_t tensor_count() const;
  [[nodiscard]] std::uint64_t total_bytes() const;  ///< bytes of tensor data over all shards

 private:
  std::filesystem::path path_;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, std::pair<std::size_t, const TensorInfo*>, std::less<>> index_;  ///< name -> shard
};

/// Mixtral-family tensor names (HF MixtralForCausalLM) and their shapes [rows, cols] for `arch`.
struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};
/// All tensors the reference decoder needs: model.embed_tokens.weight [vocab, h]; per layer i
/// model.layers.i.input_layernorm.weight [h], self_attn.{q,k,v,o}_proj.weight, post_attention_layernorm
/// [h], block_sparse_moe.gate.weight [E, h], block_sparse_moe.experts.e.{w1,w3} [I, h] and w2 [h, I];
/// model.norm.weight [h]; lm_head.weight [vocab, h] (absent when tie_embeddings).
std::vector<ExpectedTensor> mixtral_tensors(const model::Architecture& arch);
/// UserError unless the architecture is one the reference decoder runs: family "mixtral" (or "mistral"
/// with no experts is refused too: it has no MoE), GQA on every layer, no biases, no shared experts.
void check_reference_architecture(const model::Architecture& arch, const std::string& where);
/// Checks every tensor of mixtral_tensors(arch) is present with its shape (first failure -> UserError).
void check_checkpoint(const Checkpoint& ckpt, const model::Architecture& arch);

/// How `moesim ref init` writes a random checkpoint.
struct InitOptions {
  std::uint64_t seed = 1;
  DType dtype = DType::BF16;
  std::uint64_t max_shard_bytes = 2'000'000'000;  ///< HF's save_pretrained max_shard_size, in bytes
  double init_std = 0.02;                         ///< config initializer_range (HF default 0.02)
};
struct InitResult {
  std::vector<std::filesystem::path> files;  ///< config.json, the shards, and the index when sharded
  std::uint64_t parameters = 0;
  std::uint64_t bytes = 0;  ///< tensor data bytes (the index's total_size), headers excluded
};
/// Writes a random-weight checkpoint of `config` (a HF config.json object, family mixtral) into `out_dir`
/// (created if absent; UserError if it already holds a checkpoint): config.json as given, the weights
/// as one model.safetensors or as shards model-0000i-of-0000n.safetensors plus
/// model.safetensors.index.json when they exceed max_shard_bytes. Values: norm weights 1, every other
/// tensor uniform with standard deviation init_std, from a generator seeded by (seed, tensor name), so
/// the bytes do not depend on the sharding. Each file is written atomically (temporary name + rename).
/// `progress` (may be empty) is called with bytes written so far and the total.
InitResult write_random_checkpoint(const nlohmann::json& config, const std::filesystem::path& out_dir,
                                   const InitOptions& options,
                                   const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace moesim::reference
