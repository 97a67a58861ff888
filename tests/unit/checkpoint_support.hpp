#pragma once
// What the safetensors checkpoint tests (tests/unit/test_checkpoint*.cpp) share: the tiny Mixtral, a
// temporary directory, and hand-written safetensors files.
//
// The tiny Mixtral used throughout: hidden 32, 2 layers, 4 heads of 8 (2 KV heads), 4 experts of
// intermediate 48, vocab 64. Hand count of its parameters:
//   embedding 64·32 = 2048, lm_head 2048, final norm 32;
//   per layer: 2 norms 2·32 = 64, q and o 2·32·32 = 2048, k and v 2·16·32 = 1024, router 4·32 = 128,
//   experts 4·3·48·32 = 18432 -> 21696; two layers 43392.
//   Total 2048 + 2048 + 32 + 43392 = 47520 parameters in 1 + 2·(2 + 4 + 1 + 12) + 2 = 41 tensors.

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/reference/checkpoint.hpp"

namespace moesim::test::checkpoint {

namespace fs = std::filesystem;
using moesim::UserError;
using moesim::reference::Checkpoint;
using moesim::reference::DType;
using moesim::reference::InitOptions;
using moesim::reference::InitResult;
using moesim::reference::SafetensorsFile;
using moesim::reference::write_random_checkpoint;

inline constexpr std::uint64_t kTinyParameters = 47520;
inline constexpr std::size_t kTinyTensors = 41;

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

nlohmann::json tiny_config();
moesim::model::Architecture tiny_arch(const nlohmann::json& config = tiny_config());
bool contains(const std::string& text, const std::string& part);
std::string read_bytes(const fs::path& p);
/// Writes a safetensors file by hand: the 8-byte little-endian header length (`claimed_length`, else the
/// header's size), the header text, then `data` as the data section.
void write_raw(const fs::path& p, const std::string& header, const std::string& data,
               std::optional<std::uint64_t> claimed_length = std::nullopt);
/// The error opening a hand-written file with this header and `data_bytes` zero bytes of data.
std::string open_error(const TempDir& dir, const std::string& header, std::size_t data_bytes);
/// The values stored as `halves` (16-bit words, little-endian; two per F32 value) in `dtype`, as f32.
std::vector<float> f32_values(DType dtype, const std::vector<std::uint16_t>& halves);
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);
/// The header length a safetensors file starts with (8 bytes, little-endian).
std::uint64_t header_length(const fs::path& p);

}  // namespace moesim::test::checkpoint
