// The helpers of the safetensors checkpoint tests (checkpoint_support.hpp).

#include "checkpoint_support.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include "moesim/model/json_reader.hpp"

namespace moesim::test::checkpoint {

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

moesim::model::Architecture tiny_arch(const nlohmann::json& config) {
  return moesim::model::parse_hf_config(config, "tiny/config.json");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_raw(const fs::path& p, const std::string& header, const std::string& data,
               std::optional<std::uint64_t> claimed_length) {
  std::ofstream out(p, std::ios::binary);
  const std::uint64_t n = claimed_length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header << data;
}

std::string open_error(const TempDir& dir, const std::string& header, std::size_t data_bytes) {
  const fs::path p = dir / "bad.safetensors";
  write_raw(p, header, std::string(data_bytes, '\0'));
  return error_of([&] { SafetensorsFile f(p); });
}

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

}  // namespace moesim::test::checkpoint
