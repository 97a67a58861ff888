// The safetensors reader (calibrate/reference/checkpoint.hpp) on hand-written files: a valid one read back,
// and the catalogue of bad files, each refused with one line that names the file or tensor and the reason.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint_support.hpp"

namespace moesim::test::checkpoint {
namespace {

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

}  // namespace
}  // namespace moesim::test::checkpoint
