// Safetensors checkpoints (calibrate/reference/checkpoint.hpp): `moesim ref init` round trips in every
// dtype, single-file and sharded; the 16-bit float conversions; and the catalogue of bad files, each
// refused with one line that names the file or tensor and the reason.
//
// The tiny Mixtral used throughout: hidden 32, 2 layers, 4 heads of 8 (2 KV heads), 4 experts of
// intermediate 48, vocab 64. Hand count of its parameters:
//   embedding 64·32 = 2048, lm_head 2048, final norm 32;
//   per layer: 2 norms 2·32 = 64, q and o 2·32·32 = 2048, k and v 2·16·32 = 1024, router 4·32 = 128,
//   experts 4·3·48·32 = 18432 -> 21696; two layers 43392.
//   Total 2048 + 2048 + 32 + 43392 = 47520 parameters in 1 + 2·(2 + 4 + 1 + 12) + 2 = 41 tensors.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/reference/checkpoint.hpp"

using moesim::test::error_of;
namespace {

namespace fs = std::filesystem;
using moesim::UserError;
using moesim::reference::Checkpoint;
using moesim::reference::DType;
using moesim::reference::InitOptions;
using moesim::reference::InitResult;
using moesim::reference::SafetensorsFile;
using moesim::reference::write_random_checkpoint;

constexpr std::uint64_t kTinyParameters = 47520;
constexpr std::size_t kTinyTensors = 41;

/// A fresh directory under /tmp, removed with its contents when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string name = "/tmp/moesim-checkpoint-XXXXXX";
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

nlohmann::json tiny_config() {
  return {{"architectures", {"MixtralForCausalLM"}},
          {"model_type", "mixtral"},
          {"hidden_size", 32},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"num_local_experts", 4},
          {"num_experts_per_tok", 2},
          {"intermediate_size", 48},
          {"vocab_size", 64},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", false}};
}

moesim::model::Architecture tiny_arch(const nlohmann::json& config = tiny_config()) {
  return moesim::model::parse_hf_config(config, "tiny/config.json");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Writes a safetensors file by hand: the 8-byte little-endian header length (`claimed_length`, else the
/// header's size), the header text, then `data` as the data section.
void write_raw(const fs::path& p, const std::string& header, const std::string& data,
               std::optional<std::uint64_t> claimed_length = std::nullopt) {
  std::ofstream out(p, std::ios::binary);
  const std::uint64_t n = claimed_length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header << data;
}

/// The error opening a hand-written file with this header and `data_bytes` zero bytes of data.
std::string open_error(const TempDir& dir, const std::string& header, std::size_t data_bytes) {
  const fs::path p = dir / "bad.safetensors";
  write_raw(p, header, std::string(data_bytes, '\0'));
  return error_of([&] { SafetensorsFile f(p); });
}

/// The values stored as `halves` (16-bit words, little-endian; two per F32 value) in `dtype`, as f32.
std::vector<float> f32_values(DType dtype, const std::vector<std::uint16_t>& halves) {
  std::vector<std::byte> bytes(halves.size() * 2);
  std::memcpy(bytes.data(), halves.data(), bytes.size());
  std::vector<float> out(bytes.size() / moesim::reference::dtype_size(dtype));
  moesim::reference::to_f32(dtype, bytes, out.data(), out.size());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::uint64_t header_length(const fs::path& p) {
  const std::string bytes = read_bytes(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return n;
}

// --- dtypes and 16-bit floats --------------------------------------------------------------------------------

// The safetensors spellings parse to their dtypes with their sizes; others (and other cases) do not.
TEST(SafetensorsDtype, NamesSizesAndParsing) {
  using moesim::reference::parse_dtype;
  EXPECT_EQ(parse_dtype("F32"), DType::F32);
  EXPECT_EQ(parse_dtype("F16"), DType::F16);
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(parse_dtype("bf16"), std::nullopt);
  EXPECT_EQ(parse_dtype("I64"), std::nullopt);
  EXPECT_EQ(moesim::reference::dtype_size(DType::F32), 4U);
  EXPECT_EQ(moesim::reference::dtype_size(DType::BF16), 2U);
  EXPECT_EQ(moesim::reference::dtype_name(DType::F16), "F16");
}

// Known encodings: bf16 0x3F80 = 1 and 0xC000 = -2 (the high halves of the binary32s); f16 0x3C00 = 1,
// 0x0001 = 2^-24 (the smallest subnormal), 0x03FF = 1023·2^-24 (the largest), 0x0400 = 2^-14 (the smallest
// normal), 0x7BFF = 65504 (the largest finite), 0x7C00 / 0xFC00 = ±inf, 0x7E00 NaN, 0x8000 = -0.
TEST(SafetensorsFloat16, KnownValues) {
  const auto bf = f32_values(DType::BF16, {0x3F80, 0xC000});
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], -2.0f);
  const auto h = f32_values(DType::F16, {0x3C00, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000});
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[2], 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(h[3], std::ldexp(1.0f, -14));
  EXPECT_EQ(h[4], 65504.0f);
  EXPECT_EQ(h[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[6], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h[7]));
  EXPECT_EQ(h[8], 0.0f);
  EXPECT_TRUE(std::signbit(h[8]));
  const std::vector<std::uint16_t> f32_as_halves = {0x0000, 0x3FC0};  // 1.5f = 0x3FC00000, little-endian
  EXPECT_EQ(f32_values(DType::F32, f32_as_halves)[0], 1.5f);
}

// Widening is exact, so narrowing it back must give every one of the 65536 encodings again (NaNs stay
// NaN), for binary16 and for bfloat16.
TEST(SafetensorsFloat16, EveryEncodingRoundTrips) {
  using namespace moesim::reference;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float h = f16_to_f32(bits);
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(h)))) << b;
    } else {
      ASSERT_EQ(f32_to_f16(h), bits) << b;
    }
    const float bf = bf16_to_f32(bits);
    if (std::isnan(bf)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bf)))) << b;
    } else {
      ASSERT_EQ(f32_to_bf16(bf), bits) << b;
    }
  }
}

// Narrowing rounds to nearest, ties to even. binary16 near 1 has a step of 2^-10: 1 + 2^-11 is a tie that
// goes down to 1 (even), 1 + 3·2^-11 goes up to 1 + 2^-9 (0x3C02), just above a tie goes up. 65504 is the
// largest binary16 and 65520 the tie above it, which rounds (to even) to infinity. Subnormals step by
// 2^-24: 2^-25 ties down to 0, 3·2^-25 ties to 2 (0x0002), and the tie between the largest subnormal and
// 2^-14 rounds up into the smallest normal (0x0400). bfloat16 near 1 steps by 2^-7.
TEST(SafetensorsFloat16, RoundsToNearestEven) {
  using moesim::reference::f32_to_bf16;
  using moesim::reference::f32_to_f16;
  const auto p2 = [](int e) { return std::ldexp(1.0f, e); };
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11)), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * p2(-11)), 0x3C02);
  EXPECT_EQ(f32_to_f16(1.0f + p2(-11) + p2(-20)), 0x3C01);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(f32_to_f16(p2(-25)), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * p2(-25)), 0x0002);
  EXPECT_EQ(f32_to_f16(p2(-25) + p2(-30)), 0x0001);
  EXPECT_EQ(f32_to_f16(p2(-14) - p2(-25)), 0x0400);
  EXPECT_EQ(f32_to_f16(-p2(-30)), 0x8000);
  EXPECT_EQ(f32_to_bf16(1.0f + p2(-8)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * p2(-8)), 0x3F82);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_TRUE(std::isnan(moesim::reference::bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

// --- the reader on hand-written files ------------------------------------------------------------------------

// A valid file with metadata, an F32 vector, a BF16 matrix and an empty F16 tensor at the BF16 one's offset
// (empty tensors occupy no bytes and overlap nothing). Tensors are listed by name; the bytes are the data.
TEST(SafetensorsReader, ReadsAHandWrittenFile) {
  const TempDir dir;
  const fs::path p = dir / "ok.safetensors";
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
      R"( "a": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]},)"
      R"( "empty": {"dtype": "F16", "shape": [0, 3], "data_offsets": [8, 8]}})";
  std::string data(12, '\0');
  const float b[2] = {1.5f, -2.0f};
  const std::uint16_t a[2] = {0x3F80, 0x4000};  // 1 and 2
  std::memcpy(data.data(), b, 8);
  std::memcpy(data.data() + 8, a, 4);
  write_raw(p, header, data);

  const SafetensorsFile file(p);
  ASSERT_EQ(file.tensors().size(), 3U);
  EXPECT_EQ(file.tensors()[0].name, "a");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  const auto* ta = file.find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::BF16);
  EXPECT_EQ(ta->shape, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(ta->elements(), 2);
  float out[2] = {};
  moesim::reference::to_f32(ta->dtype, file.bytes(*ta), out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  const auto* tb = file.find("b");
  ASSERT_NE(tb, nullptr);
  moesim::reference::to_f32(tb->dtype, file.bytes(*tb), out, 2);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(file.find("empty")->elements(), 0);
  EXPECT_EQ(file.bytes(*file.find("empty")).size(), 0U);
  EXPECT_EQ(file.find("c"), nullptr);

  // Moving keeps the mapping valid; the moved-to object serves the same bytes.
  SafetensorsFile moved(p);
  SafetensorsFile other(std::move(moved));
  moved = std::move(other);
  EXPECT_EQ(moved.bytes(*moved.find("b")).size(), 8U);
}

// A missing file, and a file shorter than the 8-byte length field.
TEST(SafetensorsReader, RefusesMissingAndTinyFiles) {
  const TempDir dir;
  const auto m = error_of([&] { SafetensorsFile f(dir / "absent.safetensors"); });
  EXPECT_TRUE(contains(m, "absent.safetensors: no such file")) << m;
  std::ofstream(dir / "tiny.safetensors") << "abc";
  const auto t = error_of([&] { SafetensorsFile f(dir / "tiny.safetensors"); });
  EXPECT_TRUE(contains(t, "tiny.safetensors: is 3 bytes, shorter than the 8-byte header length")) << t;
}

// A length of 1000 bytes in a 28-byte file: the header would run past the end.
TEST(SafetensorsReader, RefusesHeaderLengthBeyondTheFile) {
  const TempDir dir;
  write_raw(dir / "short.safetensors", "{}", std::string(18, ' '), 1000);
  const auto m = error_of([&] { SafetensorsFile f(dir / "short.safetensors"); });
  EXPECT_TRUE(contains(m, "short.safetensors: header length 1000 bytes runs past the end of the file (28 bytes)")) << m;
  EXPECT_TRUE(contains(m, "download it again")) << m;
}

// Just the 8-byte length, claiming a 200 MB header: refused by the 100 MB cap (nothing is read or allocated;
// the file is memory-mapped and the cap is checked first).
TEST(SafetensorsReader, RefusesHeaderOverTheCap) {
  const TempDir dir;
  write_raw(dir / "huge.safetensors", "", "", 200'000'000);
  const auto m = error_of([&] { SafetensorsFile f(dir / "huge.safetensors"); });
  EXPECT_TRUE(contains(m, "huge.safetensors: header length 200000000 bytes is over the 100000000-byte limit")) << m;
}

// Header JSON cut short: the error gives the position; a header that is an array is not a tensor table.
TEST(SafetensorsReader, RefusesMalformedOrNonObjectHeader) {
  const TempDir dir;
  const auto m = open_error(dir, R"({"w": {"dtype": "F32",)", 0);
  EXPECT_TRUE(contains(m, "bad.safetensors: header: malformed JSON at line 1")) << m;
  const auto a = open_error(dir, "[1, 2]", 0);
  EXPECT_TRUE(contains(a, "the header is an array, expected an object of tensors")) << a;
}

// Two 16-byte tensors at [0, 16) and [8, 24) share bytes 8..15.
TEST(SafetensorsReader, RefusesOverlappingOffsets) {
  const TempDir dir;
  const auto m = open_error(dir,
                            R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                            R"( "y": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                            24);
  EXPECT_TRUE(contains(m, "tensor 'y': data_offsets [8, 24] overlap those of tensor 'x' [0, 16]")) << m;
}

// A 16-byte tensor in an 8-byte data section.
TEST(SafetensorsReader, RefusesOffsetsPastTheDataSection) {
  const TempDir dir;
  const auto m = open_error(dir, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
  EXPECT_TRUE(contains(m, "tensor 'w': data_offsets [0, 16] run past the end of the data section (8 bytes)")) << m;
}

// Integer and FP8 tensors are not weights the reference decoder reads; the message lists what it reads.
TEST(SafetensorsReader, RefusesUnknownDtypes) {
  const TempDir dir;
  for (const std::string dtype : {"I64", "F8_E4M3"}) {
    const auto m =
        open_error(dir, R"({"ids": {"dtype": ")" + dtype + R"(", "shape": [1], "data_offsets": [0, 8]}})", 8);
    EXPECT_TRUE(contains(m, "tensor 'ids': dtype " + dtype + " is not supported (supported: F32, F16, BF16)")) << m;
  }
}

// Shape [3] of F32 is 12 bytes, but the offsets span 16.
TEST(SafetensorsReader, RefusesShapeThatDoesNotMatchItsBytes) {
  const TempDir dir;
  const auto m = open_error(dir, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16);
  EXPECT_TRUE(contains(m, "tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets [0, 16] span 16")) << m;
}

// Malformed entries: a negative dimension, offsets that end before they begin, a shape of 2^80 elements
// (the element count overflows and must not wrap to a small number), a metadata value that is not a string.
TEST(SafetensorsReader, RefusesMalformedEntries) {
  const TempDir dir;
  auto m = open_error(dir, R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 0);
  EXPECT_TRUE(contains(m, "tensor 'w': a dimension of shape [-1] is -1, expected a non-negative integer")) << m;
  m = open_error(dir, R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 8);
  EXPECT_TRUE(contains(m, "tensor 'w': data_offsets [8, 0] end before they begin")) << m;
  m = open_error(dir, R"({"w": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 0]}})", 0);
  EXPECT_TRUE(contains(m, "tensor 'w': shape [1099511627776,1099511627776] has more elements than 64 bits")) << m;
  m = open_error(dir, R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
  EXPECT_TRUE(contains(m, "tensor 'w': the header entry has no data_offsets")) << m;
  m = open_error(dir, R"({"__metadata__": {"seed": 7}})", 0);
  EXPECT_TRUE(contains(m, "bad.safetensors: __metadata__ 'seed' is an integer, expected a string")) << m;
  // A name with a newline in it is shown with '?': the message stays one line.
  m = open_error(dir, R"({"two\nlines": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})", 1);
  EXPECT_TRUE(contains(m, "tensor 'two?lines': dtype I8 is not supported")) << m;
  EXPECT_FALSE(contains(m, "\n")) << m;
}

// A valid file cut short: 100 bytes missing from the data section are caught by the last tensor's range;
// cut inside the header, the header length runs past the end.
TEST(SafetensorsReader, RefusesTruncatedFiles) {
  const TempDir dir;
  write_random_checkpoint(tiny_config(), dir / "ckpt", InitOptions{.dtype = DType::F32});
  const fs::path cut = dir / "cut.safetensors";
  fs::copy_file(dir / "ckpt/model.safetensors", cut);
  fs::resize_file(cut, fs::file_size(cut) - 100);
  auto m = error_of([&] { SafetensorsFile f(cut); });
  EXPECT_TRUE(contains(m, "cut.safetensors: tensor '")) << m;
  EXPECT_TRUE(contains(m, "run past the end of the data section")) << m;
  fs::resize_file(cut, 20);
  m = error_of([&] { SafetensorsFile f(cut); });
  EXPECT_TRUE(contains(m, "runs past the end of the file (20 bytes)")) << m;
}

// --- ref init round trips ------------------------------------------------------------------------------------

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

// --- architectures -------------------------------------------------------------------------------------------

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
