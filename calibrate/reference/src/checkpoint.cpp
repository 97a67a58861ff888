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

#include "moesim/reference/checkpoint.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/splitmix64.hpp"

namespace moesim::reference {

// safetensors stores little-endian data; the reader hands out the mapped bytes and memcpy's them as-is.
static_assert(std::endian::native == std::endian::little, "moesim reads safetensors data in place: little-endian only");

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kCorrupt = "the file is corrupt or not safetensors; download it again";

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> dims;
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

std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
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

// --- writing -------------------------------------------------------------------------------------------

/// FNV-1a, 64 bit (http://www.isthe.com/chongo/tech/comp/fnv/), over the seed's 8 little-endian bytes and
/// the tensor name: a fixed, portable hash, so a tensor's values depend only on (seed, name).
std::uint64_t fnv1a(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 14695981039346656037ULL;
  const auto mix = [&h](std::uint8_t byte) {
    h ^= byte;
    h *= 1099511628211ULL;
  };
  for (int i = 0; i < 8; ++i) mix(static_cast<std::uint8_t>(seed >> (8 * i)));
  for (char c : name) mix(static_cast<std::uint8_t>(c));
  return h;
}

/// Values generated and converted per write: 1 Mi elements, at most 4 MiB of f32.
constexpr std::size_t kChunkElements = std::size_t{1} << 20;

struct PlannedTensor {
  const ExpectedTensor* tensor = nullptr;
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
};

/// Counts bytes written and reports them.
struct Progress {
  const std::function<void(std::uint64_t, std::uint64_t)>& callback;
  std::uint64_t total = 0;
  std::uint64_t written = 0;
  void advance(std::uint64_t bytes) {
    written += bytes;
    if (callback) callback(written, total);
  }
};

/// Streams one tensor's values: 1.0 for norm weights, else uniform on [-a, a], a = init_std·sqrt(3) (the
/// uniform distribution of standard deviation init_std), from SplitMix64 seeded by fnv1a(seed, name).
void write_tensor(OutputFile& out, const PlannedTensor& p, const InitOptions& options, Progress& progress,
                  std::vector<float>& values, std::vector<std::byte>& bytes) {
  const std::string& name = p.tensor->name;
  const bool norm = name.ends_with("norm.weight");
  const double a = options.init_std * std::sqrt(3.0);
  const std::size_t size = dtype_size(options.dtype);
  sim::SplitMix64 rng(fnv1a(options.seed, name));
  for (std::uint64_t done = 0; done < p.elements;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(p.elements - done, kChunkElements));
    if (norm) {
      std::fill_n(values.begin(), n, 1.0f);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const double u = static_cast<double>(rng.next() >> 11) * 0x1.0p-53;  // uniform on [0, 1), 53 bits
        values[i] = static_cast<float>(a * (2.0 * u - 1.0));
      }
    }
    const auto narrow = [&](auto convert) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t b = convert(values[i]);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
      return reinterpret_cast<const char*>(bytes.data());
    };
    const char* data = reinterpret_cast<const char*>(values.data());
    if (options.dtype == DType::BF16) data = narrow([](float v) { return f32_to_bf16(v); });
    if (options.dtype == DType::F16) data = narrow([](float v) { return f32_to_f16(v); });
    out.stream().write(data, static_cast<std::streamsize>(n * size));
    if (!out.stream()) {
      throw UserError(out.path() + ": writing failed while writing tensor '" + name +
                      "' (disk full?); free some space or choose another directory");
    }
    done += n;
    progress.advance(n * size);
  }
}

/// One .safetensors file: the 8-byte header length, the header (padded with spaces to a multiple of 8 as
/// the reference implementation does, so the data section starts aligned), then the tensors in order.
void write_shard(OutputSet& outputs, const fs::path& path, const std::vector<PlannedTensor>& tensors,
                 const InitOptions& options, Progress& progress) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}, {"generator", "moesim ref init"}, {"seed", std::to_string(options.seed)}};
  std::uint64_t offset = 0;
  for (const auto& p : tensors) {
    header[p.tensor->name] = {{"dtype", dtype_name(options.dtype)},
                              {"shape", p.tensor->shape},
                              {"data_offsets", nlohmann::json::array({offset, offset + p.bytes})}};
    offset += p.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  OutputFile& out = outputs.add(path.string(), "", true);
  std::array<char, 8> length{};
  for (std::size_t i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  out.stream().write(length.data(), length.size());
  out.stream().write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<float> values(kChunkElements);
  std::vector<std::byte> bytes(options.dtype == DType::F32 ? 0 : kChunkElements * 2);
  for (const auto& p : tensors) write_tensor(out, p, options, progress, values, bytes);
}

void write_json(OutputSet& outputs, const fs::path& path, const nlohmann::json& doc) {
  outputs.add(path.string(), "", true).stream() << doc.dump(2) << '\n';
}

/// Creates `dir` if absent (returns whether it did); UserError if it already holds a checkpoint.
bool prepare_out_dir(const fs::path& dir) {
  const std::string where = dir.string();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) throw UserError(where + ": cannot create the directory (" + ec.message() + "); check the path");
    return true;
  }
  if (!fs::is_directory(dir, ec)) {
    throw UserError(where + ": exists and is not a directory; choose an empty directory for the checkpoint");
  }
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.filename() == "config.json" || p.filename() == kIndexName || p.extension() == ".safetensors") {
      throw UserError(where + ": already holds a checkpoint (" + p.filename().string() +
                      "); choose an empty directory or remove it");
    }
  }
  if (ec) throw UserError(where + ": cannot list the directory (" + ec.message() + "); check its permissions");
  return false;
}

}  // namespace

// --- dtypes ------------------------------------------------------------------------------------------------

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
  }
  MOESIM_CHECK(false, "unknown DType");
  return {};
}

std::size_t dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType d : {DType::F32, DType::F16, DType::BF16}) {
    if (s == dtype_name(d)) return d;
  }
  return std::nullopt;
}

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// --- 16-bit floats -----------------------------------------------------------------------------------------

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1FU;
  std::uint32_t fraction = h & 0x3FFU;
  std::uint32_t bits = 0;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000U | (fraction << 13);  // infinity, or NaN with its payload (quiet bit kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (fraction << 13);  // rebias 15 -> 127
  } else if (fraction == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: fraction·2^-24. Shift the leading 1 up to the implicit bit; each shift lowers the exponent.
    exponent = 113;  // the binary32 exponent of 2^-14, the binary16 subnormals' scale
    while ((fraction & 0x400U) == 0) {
      fraction <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((fraction & 0x3FFU) << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000U);
  const std::uint32_t ax = x & 0x7FFFFFFFU;
  if (ax > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);  // NaN -> quiet NaN
  // 65520 = 0x477FF000 is halfway between 65504 (the largest binary16) and 2^16; ties go to even, to infinity.
  if (ax >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);
  const std::uint32_t exponent = ax >> 23;
  if (exponent < 113) {
    // Below 2^-14: a subnormal q·2^-24 with q = |f| / 2^-24 = significand · 2^(exponent - 126), rounded.
    const std::uint32_t shift = 126 - exponent;
    if (shift > 24) return sign;  // |f| < 2^-25: rounds to zero
    const std::uint32_t significand = (ax & 0x7FFFFFU) | 0x800000U;
    std::uint32_t q = significand >> shift;
    const std::uint32_t rest = significand & ((1U << shift) - 1);
    const std::uint32_t half = 1U << (shift - 1);
    if (rest > half || (rest == half && (q & 1U) != 0)) ++q;  // may carry into the smallest normal: correct
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias 127 -> 15 and drop 13 fraction bits, rounding; a carry into the exponent is correct.
  std::uint32_t h = ((exponent - 112) << 10) | ((ax >> 13) & 0x3FFU);
  const std::uint32_t rest = ax & 0x1FFFU;
  if (rest > 0x1000U || (rest == 0x1000U && (h & 1U) != 0)) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((x >> 16) | 0x0040U);  // quiet NaN
  // Round to nearest even on the 16 dropped bits; a carry ripples into the exponent (up to infinity) correctly.
  const std::uint32_t rounding = 0x7FFFU + ((x >> 16) & 1U);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

void to_f32(DType dtype, std::span<const std::byte> bytes, float* out, std::size_t n) {
  MOESIM_CHECK(bytes.size() >= n * dtype_size(dtype), "to_f32: fewer bytes than values");
  switch (dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, bytes.data(), n * sizeof(float));
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_u16(bytes.data() + 2 * i));
      return;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_u16(bytes.data() + 2 * i));
      return;
  }
}

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
                    kSingleName + " or " + kIndexName + " and its shards) or a .safetensors file");
  }
  const bool directory = fs::is_directory(status);
  c.dir_ = directory ? path : path.parent_path();
  if (!directory) {
    c.shards_.push_back(std::make_unique<SafetensorsFile>(path));
  } else if (!fs::exists(path / kIndexName)) {
    if (!fs::exists(path / kSingleName)) {
      throw UserError(path.string() + ": holds neither " + kIndexName + " nor " + kSingleName +
                      "; give a Hugging Face checkpoint directory, or write one with `moesim ref init`");
    }
    c.shards_.push_back(std::make_unique<SafetensorsFile>(path / kSingleName));
  } else {
    // Sharded: the index's weight_map is authoritative; every shard it names is opened and validated.
    const fs::path index = path / kIndexName;
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

// --- the Mixtral architecture ------------------------------------------------------------------------------

std::vector<ExpectedTensor> mixtral_tensors(const model::Architecture& arch) {
  const std::int64_t h = arch.hidden;
  const std::int64_t q = arch.heads * arch.head_dim;
  const std::int64_t kv = arch.kv_heads * arch.head_dim;
  const std::int64_t ffn = arch.expert_ffn;
  {
    // The list: 3 tensors per layer and expert, 7 per layer, 3 more. Per entry, an ExpectedTensor (a name
    // and a shape vector) with their heap buffers (a name of ~60 characters, two int64 dimensions) is
    // ~170 bytes; writing a checkpoint also holds a PlannedTensor and an index entry (name -> file in a
    // JSON object, ~250 bytes) per tensor: 420 bytes per tensor covers both. Doubles: layers x experts
    // may be large.
    const double tensors = static_cast<double>(arch.layers) * (3.0 * static_cast<double>(arch.routed_experts) + 7.0) + 3.0;
    model::require_memory(units::bytes(420.0 * tensors),
                          "the list of " + text::printf("%.4g", tensors) + " tensors (" +
                              std::to_string(arch.layers) + " layers x " + std::to_string(arch.routed_experts) +
                              " experts x 3)",
                          "use a config.json with fewer layers or experts (num_hidden_layers, num_local_experts), "
                          "or a machine with more memory");
  }
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {arch.vocab, h}});
  for (std::int64_t i = 0; i < arch.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    out.push_back({layer + "input_layernorm.weight", {h}});
    // nn.Linear(in, out).weight is [out, in].
    out.push_back({layer + "self_attn.q_proj.weight", {q, h}});
    out.push_back({layer + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({layer + "self_attn.v_proj.weight", {kv, h}});
    out.push_back({layer + "self_attn.o_proj.weight", {h, q}});
    out.push_back({layer + "post_attention_layernorm.weight", {h}});
    out.push_back({layer + "block_sparse_moe.gate.weight", {arch.routed_experts, h}});
    for (std::int64_t e = 0; e < arch.routed_experts; ++e) {
      // MixtralBlockSparseTop2MLP: w1 (gate) and w3 (up) map h -> I, w2 (down) maps I -> h.
      const std::string expert = layer + "block_sparse_moe.experts." + std::to_string(e) + ".";
      out.push_back({expert + "w1.weight", {ffn, h}});
      out.push_back({expert + "w2.weight", {h, ffn}});
      out.push_back({expert + "w3.weight", {ffn, h}});
    }
  }
  out.push_back({"model.norm.weight", {h}});
  if (!arch.tie_embeddings) out.push_back({"lm_head.weight", {arch.vocab, h}});
  return out;
}

void check_reference_architecture(const model::Architecture& arch, const std::string& where) {
  const auto refuse = [&](const std::string& what) {
    throw UserError(where + ": " + what +
                    "; the reference decoder runs Mixtral-architecture models only (model_type \"mixtral\": "
                    "grouped-query attention without biases, a softmax top-k router over SwiGLU experts in every "
                    "layer, no shared experts); give such a config.json, e.g. TinyMistral-6x248M's");
  };
  if (arch.family != "mixtral") refuse("model family '" + arch.family + "' is not supported");
  if (arch.routed_experts < 1 || arch.top_k < 1 || arch.top_k > arch.routed_experts || arch.expert_ffn < 1) {
    refuse("it has no routed experts");
  }
  if (static_cast<std::int64_t>(arch.layer_specs.size()) != arch.layers) refuse("its layers are not described");
  for (std::size_t i = 0; i < arch.layer_specs.size(); ++i) {
    if (arch.layer_specs[i].attention != model::AttentionType::Gqa) {
      refuse("layer " + std::to_string(i) + " does not use grouped-query attention");
    }
    if (!arch.layer_specs[i].moe) refuse("layer " + std::to_string(i) + " is a dense FFN layer, not a MoE layer");
  }
  if (arch.attention_bias || arch.attention_out_bias) refuse("it has attention projection biases");
  if (arch.qk_norm || arch.qk_norm_full_width) refuse("it has q/k norms");
  if (arch.attention_output_gate) refuse("it has a gated attention output");
  if (arch.attention_sinks) refuse("it has attention sinks");
  if (arch.shared_experts > 0 || arch.shared_ffn > 0 || arch.shared_expert_gate) refuse("it has shared experts");
  if (arch.router_bias || arch.expert_bias) refuse("it has router or expert biases");
  if (arch.dense_ffn > 0) refuse("it has dense FFN layers");
}

void check_checkpoint(const Checkpoint& ckpt, const model::Architecture& arch) {
  for (const auto& t : mixtral_tensors(arch)) (void)ckpt.require(t.name, t.shape);
}

// --- writing a random checkpoint ---------------------------------------------------------------------------

InitResult write_random_checkpoint(const nlohmann::json& config, const fs::path& out_dir, const InitOptions& options,
                                   const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const fs::path config_file = out_dir / "config.json";
  const model::Architecture arch = model::parse_hf_config(config, config_file.string());
  check_reference_architecture(arch, config_file.string());
  if (options.max_shard_bytes == 0) {
    throw UserError(out_dir.string() + ": the maximum shard size is 0 bytes; give a positive size");
  }
  if (!std::isfinite(options.init_std) || options.init_std < 0) {
    throw UserError(out_dir.string() + ": the initialisation standard deviation is " +
                    text::printf("%g", options.init_std) + "; give a finite value >= 0 (HF's default is 0.02)");
  }

  // Plan: sizes, then shards filled greedily in order; a tensor larger than max_shard_bytes gets a shard
  // of its own. parse_hf_config bounds a model to 1e17 parameters, so these sums fit in 64 bits.
  const auto expected = mixtral_tensors(arch);
  std::vector<std::vector<PlannedTensor>> shards;
  std::uint64_t shard_bytes = 0;
  InitResult result;
  for (const auto& t : expected) {
    PlannedTensor p{&t, 1, 0};
    for (auto d : t.shape) p.elements *= static_cast<std::uint64_t>(d);
    p.bytes = p.elements * dtype_size(options.dtype);
    if (shards.empty() || shard_bytes + p.bytes > options.max_shard_bytes) {  // the open shard is never empty
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(p);
    shard_bytes += p.bytes;
    result.parameters += p.elements;
    result.bytes += p.bytes;
  }

  const bool created = prepare_out_dir(out_dir);
  // Every file is an output of one OutputSet, committed together at the end: on any failure none is in
  // place, and the directory is removed too if this call created it, so no partial checkpoint remains.
  std::error_code ec;
  Progress reporter{progress, result.bytes, 0};
  try {
    const auto space = fs::space(out_dir, ec);
    if (!ec && space.available < result.bytes) {
      throw UserError(out_dir.string() + ": the checkpoint needs " +
                      text::printf("%.3g", 1e-9 * static_cast<double>(result.bytes)) + " GB but only " +
                      text::printf("%.3g", 1e-9 * static_cast<double>(space.available)) +
                      " GB are free; free some space or choose another directory");
    }
    OutputSet outputs;
    write_json(outputs, config_file, config);
    result.files.push_back(config_file);
    nlohmann::json weight_map = nlohmann::json::object();
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const std::string name = shards.size() == 1
                                   ? std::string(kSingleName)
                                   : text::printf("model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      write_shard(outputs, out_dir / name, shards[s], options, reporter);
      result.files.push_back(out_dir / name);
      for (const auto& p : shards[s]) weight_map[p.tensor->name] = name;
    }
    if (shards.size() > 1) {
      write_json(outputs, out_dir / kIndexName, {{"metadata", {{"total_size", result.bytes}}}, {"weight_map", weight_map}});
      result.files.push_back(out_dir / kIndexName);
    }
    outputs.commit();
  } catch (...) {
    if (created) fs::remove(out_dir, ec);  // only if empty
    throw;
  }
  return result;
}

}  // namespace moesim::reference
