// Hugging Face safetensors checkpoints: the validated, memory-mapped reader, the Mixtral tensor names the
// reference decoder needs, and the random-weight writer behind `moesim ref init`.
//
// Sources:
//  - safetensors format: https://huggingface.co/docs/safetensors ("Format"), and its reference implementation
//    https://github.com/huggingface/safetensors (safetensors/src/tensor.rs: MAX_HEADER_SIZE = 100 MB, the
//    header padded with spaces to a multiple of 8 bytes, the check that a shape's byte count equals
//    end - begin).
//  - sharded checkpoints: transformers PreTrainedModel.save_pretrained (modeling_utils.py) and
//    huggingface_hub split_torch_state_dict_into_shards: shards model-00001-of-00003.safetensors filled
//    greedily in order, and model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"}.
//  - tensor names and shapes: transformers src/transformers/models/mixtral/modeling_mixtral.py
//    (MixtralForCausalLM, MixtralDecoderLayer, MixtralSparseMoeBlock, MixtralBlockSparseTop2MLP).
//  - binary16: IEEE 754-2019 §3.6 (1 sign bit, 5 exponent bits with bias 15, 10 fraction bits; exponent 0
//    holds zeros and subnormals, exponent 31 infinities and NaNs). bfloat16 is the high half of a binary32.
//
// This file holds the reader (SafetensorsFile, Checkpoint); dtypes and 16-bit floats are checkpoint_dtype.cpp,
// the Mixtral tensors checkpoint_mixtral.cpp, the writer checkpoint_write.cpp.

#include "moesim/reference/checkpoint.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "checkpoint_detail.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"

namespace moesim::reference {

// safetensors stores little-endian data; the reader hands out the mapped bytes and memcpy's them as-is.
static_assert(std::endian::native == std::endian::little, "moesim reads safetensors data in place: little-endian only");

namespace fs = std::filesystem;

namespace {

constexpr const char* kCorrupt = "the file is corrupt or not safetensors; download it again";

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> dims;
  dims.reserve(shape.size());
  for (auto d : shape) dims.push_back(std::to_string(d));
  return "[" + text::join(dims) + "]";
}

/// Text taken from a file, fit for a one-line message: control characters shown as '?', cut after 200.
std::string printable(std::string_view s) {
  constexpr std::size_t kMax = 200;
  std::string out;
  for (char c : s.substr(0, kMax)) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7F ? '?' : c;
  if (s.size() > kMax) out += "...";
  return out;
}

/// A JSON value of a file, for a message.
std::string excerpt(const nlohmann::json& v) { return printable(v.dump()); }

std::string offsets_text(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

/// a * b, or nullopt when it does not fit in 64 bits (shapes in a header are untrusted).
std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b) return std::nullopt;
  return a * b;
}

/// Unmaps a mapping on scope exit unless released to its owner.
class MappingGuard {
 public:
  MappingGuard(const std::byte* data, std::size_t size) : data_(data), size_(size) {}
  ~MappingGuard() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;
  const std::byte* release() { return std::exchange(data_, nullptr); }

 private:
  const std::byte* data_;
  std::size_t size_;
};

/// A non-negative integer of the header (a shape dimension or an offset); `what` names it for errors.
std::uint64_t header_uint(const nlohmann::json& v, const std::string& where, const std::string& what) {
  // nlohmann parses non-negative integers as number_unsigned; negatives and fractions are something else.
  if (!v.is_number_unsigned()) {
    throw UserError(where + ": " + what + " is " + excerpt(v) + ", expected a non-negative integer; " + kCorrupt);
  }
  return v.get<std::uint64_t>();
}

/// One header entry {"dtype", "shape", "data_offsets"}, checked against itself and the data section size.
TensorInfo parse_entry(const std::string& file, const std::string& name, const nlohmann::json& entry,
                       std::uint64_t data_size) {
  const std::string where = file + ": tensor '" + printable(name) + "'";
  if (!entry.is_object()) {
    throw UserError(where + ": the header entry is " + json::type_name(entry) +
                    ", expected an object with dtype, shape and data_offsets; " + kCorrupt);
  }
  const auto field = [&](const char* key) -> const nlohmann::json& {
    const auto it = entry.find(key);
    if (it == entry.end()) throw UserError(where + ": the header entry has no " + key + "; " + kCorrupt);
    return *it;
  };

  TensorInfo t;
  t.name = name;
  const auto& dtype = field("dtype");
  if (!dtype.is_string()) throw UserError(where + ": dtype is " + excerpt(dtype) + ", expected a string; " + kCorrupt);
  const auto parsed = parse_dtype(dtype.get_ref<const std::string&>());
  if (!parsed) {
    throw UserError(where + ": dtype " + printable(dtype.get_ref<const std::string&>()) +
                    " is not supported (supported: F32, F16, BF16); convert the checkpoint to one of them, e.g. "
                    "load it in transformers with torch_dtype=torch.bfloat16 and save_pretrained it");
  }
  t.dtype = *parsed;

  const auto& shape = field("shape");
  if (!shape.is_array()) throw UserError(where + ": shape is " + excerpt(shape) + ", expected an array; " + kCorrupt);
  std::uint64_t elements = 1;
  for (const auto& d : shape) {
    const std::uint64_t n = header_uint(d, where, "a dimension of shape " + excerpt(shape));
    const auto product = checked_mul(elements, n);
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) || !product) {
      throw UserError(where + ": shape " + excerpt(shape) + " has more elements than 64 bits can count; " + kCorrupt);
    }
    elements = *product;
    t.shape.push_back(static_cast<std::int64_t>(n));
  }

  const auto& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    throw UserError(where + ": data_offsets is " + excerpt(offsets) + ", expected [begin, end]; " + kCorrupt);
  }
  t.begin = header_uint(offsets[0], where, "data_offsets[0]");
  t.end = header_uint(offsets[1], where, "data_offsets[1]");
  if (t.begin > t.end) {
    throw UserError(where + ": data_offsets " + offsets_text(t.begin, t.end) + " end before they begin; " + kCorrupt);
  }
  const auto bytes = checked_mul(elements, dtype_size(t.dtype));
  if (!bytes || *bytes != t.end - t.begin) {
    throw UserError(where + ": shape " + shape_text(t.shape) + " of " + std::string(dtype_name(t.dtype)) + " needs " +
                    (bytes ? std::to_string(*bytes) : "more than 2^64") + " bytes but data_offsets " +
                    offsets_text(t.begin, t.end) + " span " + std::to_string(t.end - t.begin) + "; " + kCorrupt);
  }
  if (t.end > data_size) {
    throw UserError(where + ": data_offsets " + offsets_text(t.begin, t.end) +
                    " run past the end of the data section (" + std::to_string(data_size) +
                    " bytes); the file is truncated; download it again");
  }
  return t;
}

/// Two non-empty byte ranges may not share a byte (empty tensors occupy nothing and never overlap).
void check_overlaps(const std::string& file, const std::vector<TensorInfo>& tensors) {
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  // Sorted by begin and overlap-free so far, the previous range reaches furthest.
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      throw UserError(file + ": tensor '" + printable(cur.name) + "': data_offsets " +
                      offsets_text(cur.begin, cur.end) + " overlap those of tensor '" + printable(prev.name) + "' " +
                      offsets_text(prev.begin, prev.end) + "; " + kCorrupt);
    }
  }
}

/// "__metadata__": a map of strings to strings.
std::map<std::string, std::string> parse_metadata(const std::string& file, const nlohmann::json& m) {
  const std::string fix = "; safetensors metadata maps strings to strings: " + std::string(kCorrupt);
  if (!m.is_object()) throw UserError(file + ": __metadata__ is " + json::type_name(m) + ", expected an object" + fix);
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      throw UserError(file + ": __metadata__ '" + printable(key) + "' is " + json::type_name(value) +
                      ", expected a string" + fix);
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

/// The weight_map of an index: tensor name -> shard file name (a plain name inside the index's directory).
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  const std::string file = index.string();
  const nlohmann::json doc = json::load_file(index);
  const std::string fix = "; the index is corrupt; download it again";
  if (!doc.is_object()) throw UserError(file + ": is " + json::type_name(doc) + ", expected an object" + fix);
  const auto it = doc.find("weight_map");
  if (it == doc.end()) throw UserError(file + ": weight_map is missing" + fix);
  if (!it->is_object() || it->empty()) {
    throw UserError(file + ": weight_map is " + (it->is_object() ? "empty" : json::type_name(*it)) +
                    ", expected an object {\"tensor name\": \"shard file name\", ...}" + fix);
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : it->items()) {
    // A shard is a file beside the index; a path would reach outside the checkpoint.
    if (!shard.is_string() || shard.get<std::string>().empty() ||
        fs::path(shard.get<std::string>()).filename() != fs::path(shard.get<std::string>()) ||
        shard.get<std::string>() == "." || shard.get<std::string>() == "..") {
      throw UserError(file + ": weight_map: tensor '" + printable(name) + "' maps to " + excerpt(shard) +
                      ", expected the file name of a shard in the index's directory" + fix);
    }
    out.emplace(name, shard.get<std::string>());
  }
  return out;
}

}  // namespace

// --- SafetensorsFile ---------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  const std::string file = path.string();
  const InputFile fd(path);  // a regular file (links followed), opened without blocking on a FIFO
  const auto size = fd.size();
  if (size < 8) {
    throw UserError(file + ": is " + std::to_string(size) + " bytes, shorter than the 8-byte header length; " +
                    "the file is truncated or not safetensors; download it again");
  }
  // Map exactly the file, read-only: every later access is checked to lie inside it.
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd(), 0);
  if (mapped == MAP_FAILED) {
    throw UserError(file + ": cannot be memory-mapped (" + std::strerror(errno) + "); check that it is a local file");
  }
  MappingGuard guard(static_cast<const std::byte*>(mapped), size);
  const auto* base = static_cast<const std::byte*>(mapped);

  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | std::to_integer<std::uint64_t>(base[i]);
  if (header_length > kMaxHeaderBytes) {
    throw UserError(file + ": header length " + std::to_string(header_length) + " bytes is over the " +
                    std::to_string(kMaxHeaderBytes) + "-byte limit of safetensors readers; " + kCorrupt);
  }
  if (header_length > size - 8) {
    throw UserError(file + ": header length " + std::to_string(header_length) +
                    " bytes runs past the end of the file (" + std::to_string(size) +
                    " bytes): the file is truncated or not safetensors; download it again");
  }
  const std::string_view text(reinterpret_cast<const char*>(base + 8), header_length);
  const nlohmann::json header = json::parse_text(text, file + ": header");
  if (!header.is_object()) {
    throw UserError(file + ": the header is " + json::type_name(header) + ", expected an object of tensors; " +
                    kCorrupt);
  }
  const std::uint64_t data_size = size - 8 - header_length;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(file, entry);
    } else {
      tensors_.push_back(parse_entry(file, name, entry, data_size));
    }
  }
  check_overlaps(file, tensors_);
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });

  data_start_ = 8 + header_length;
  map_size_ = size;
  map_ = guard.release();
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_start_(std::exchange(other.data_start_, 0)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  // Swap: `other` unmaps what this held when it is destroyed.
  std::swap(path_, other.path_);
  std::swap(tensors_, other.tensors_);
  std::swap(metadata_, other.metadata_);
  std::swap(map_, other.map_);
  std::swap(map_size_, other.map_size_);
  std::swap(data_start_, other.data_start_);
  return *this;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                   [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& t) const {
  MOESIM_CHECK(map_ != nullptr && t.begin <= t.end && t.end <= map_size_ - data_start_,
               "tensor '" + t.name + "' lies outside " + path_.string());
  return {map_ + data_start_ + t.begin, static_cast<std::size_t>(t.end - t.begin)};
}

// --- Checkpoint --------------------------------------------------------------------------------------------

Checkpoint Checkpoint::open(const fs::path& path) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) {
    throw UserError(path.string() + ": no such file or directory; give a checkpoint directory (config.json with " +
                    checkpoint_detail::kSingleName + " or " + checkpoint_detail::kIndexName +
                    " and its shards) or a .safetensors file");
  }
  const bool directory = fs::is_directory(status);
  c.dir_ = directory ? path : path.parent_path();
  if (!directory) {
    c.shards_.push_back(std::make_unique<SafetensorsFile>(path));
  } else if (!fs::exists(path / checkpoint_detail::kIndexName)) {
    if (!fs::exists(path / checkpoint_detail::kSingleName)) {
      throw UserError(path.string() + ": holds neither " + checkpoint_detail::kIndexName + " nor " +
                      checkpoint_detail::kSingleName +
                      "; give a Hugging Face checkpoint directory, or write one with `moesim ref init`");
    }
    c.shards_.push_back(std::make_unique<SafetensorsFile>(path / checkpoint_detail::kSingleName));
  } else {
    // Sharded: the index's weight_map is authoritative; every shard it names is opened and validated.
    const fs::path index = path / checkpoint_detail::kIndexName;
    const auto weight_map = read_weight_map(index);
    std::map<std::string, std::size_t> shard_of;
    for (const auto& [name, shard] : weight_map) shard_of.emplace(shard, 0);
    for (auto& [shard, i] : shard_of) {
      const fs::path file = path / shard;
      if (!fs::exists(file, ec)) {
        const auto holder = std::find_if(weight_map.begin(), weight_map.end(),
                                         [&shard = shard](const auto& entry) { return entry.second == shard; });
        throw UserError(index.string() + ": shard '" + printable(shard) + "' (holding tensor '" +
                        printable(holder->first) + "', among others) is missing from " + path.string() +
                        "; download every shard the index lists");
      }
      i = c.shards_.size();
      c.shards_.push_back(std::make_unique<SafetensorsFile>(file));
    }
    for (const auto& [name, shard] : weight_map) {
      const std::size_t i = shard_of.at(shard);
      const TensorInfo* info = c.shards_[i]->find(name);
      if (info == nullptr) {
        throw UserError(c.shards_[i]->path().string() + ": tensor '" + printable(name) + "' is missing, but " +
                        index.string() +
                        " maps it to this shard; the index and the shards do not match; download them again");
      }
      c.index_.emplace(name, std::make_pair(i, info));
    }
    return c;
  }
  for (const auto& t : c.shards_.front()->tensors()) c.index_.emplace(t.name, std::make_pair(std::size_t{0}, &t));
  return c;
}

fs::path Checkpoint::config_path() const { return dir_ / "config.json"; }

std::optional<TensorRef> Checkpoint::find(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const SafetensorsFile& shard = *shards_[it->second.first];
  const TensorInfo& info = *it->second.second;
  return TensorRef{&info, shard.bytes(info), &shard.path()};
}

TensorRef Checkpoint::require(std::string_view name, const std::vector<std::int64_t>& shape) const {
  const auto ref = find(name);
  if (!ref) {
    throw UserError("checkpoint " + path_.string() + ": tensor '" + std::string(name) +
                    "' is missing; the checkpoint does not match config.json (expected shape " + shape_text(shape) +
                    ")");
  }
  if (ref->info->shape != shape) {
    throw UserError("checkpoint " + path_.string() + ": tensor '" + std::string(name) + "' (in " + ref->file->string() +
                    ") has shape " + shape_text(ref->info->shape) + " but config.json implies " + shape_text(shape) +
                    "; use the config.json that came with these weights");
  }
  return *ref;
}

std::vector<float> Checkpoint::load_f32(std::string_view name, const std::vector<std::int64_t>& shape) const {
  const TensorRef ref = require(name, shape);
  std::vector<float> out(static_cast<std::size_t>(ref.info->elements()));
  to_f32(ref.info->dtype, ref.bytes, out.data(), out.size());
  return out;
}

std::size_t Checkpoint::tensor_count() const { return index_.size(); }

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& shard : shards_) {
    for (const auto& t : shard->tensors()) total += t.end - t.begin;
  }
  return total;
}

}  // namespace moesim::reference
