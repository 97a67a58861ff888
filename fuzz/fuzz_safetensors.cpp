// Fuzz target: checkpoints as `moesim ref run --checkpoint` opens them (calibrate/reference/checkpoint.hpp):
//  selector 0: one .safetensors file: header length, header JSON, dtypes, shapes against byte ranges,
//              ranges inside the data section and not overlapping; then every tensor read and widened to f32.
//  selector 1: a sharded checkpoint: model.safetensors.index.json plus one shard. Input after the selector:
//              a 2-byte little-endian index length, the index JSON, then the shard's bytes.
#include <cstring>
#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "moesim/reference/checkpoint.hpp"

namespace ref = moesim::reference;

namespace {
// Reads every element of a tensor through to_f32 (ASan checks each read stays inside the mapping).
void read_all(ref::DType dtype, std::span<const std::byte> bytes, std::int64_t elements) {
  if (elements <= 0 || static_cast<std::size_t>(elements) * ref::dtype_size(dtype) != bytes.size()) {
    if (elements > 0) __builtin_trap();  // the checks promised the shape matches the byte range
    return;
  }
  std::vector<float> out(static_cast<std::size_t>(elements));
  ref::to_f32(dtype, bytes, out.data(), out.size());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto sel = moesim::fuzz::select(data, size, 2);
  const unsigned which = sel.which;
  const std::string_view rest = sel.rest;
  const auto dir = moesim::fuzz::scratch_dir() / "ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (which == 0) {
    const auto path = moesim::fuzz::write_file("ckpt/model.safetensors", rest);
    moesim::fuzz::expect_user_errors_only([&] {
      const ref::SafetensorsFile f(path);
      for (const auto& t : f.tensors()) {
        if (t.end - t.begin > (64u << 20)) continue;  // large but valid: reading it proves nothing more
        read_all(t.dtype, f.bytes(t), t.elements());
      }
      const auto ckpt = ref::Checkpoint::open(dir);
      (void)ckpt.total_bytes();
    });
    return 0;
  }
  if (rest.size() < 2) return 0;
  const std::size_t index_len =
      std::min<std::size_t>(rest.size() - 2, static_cast<std::size_t>(static_cast<unsigned char>(rest[0])) |
                                                 static_cast<std::size_t>(static_cast<unsigned char>(rest[1])) << 8);
  const std::string_view index = rest.substr(2, index_len);
  const std::string_view shard = rest.substr(2 + index_len);
  moesim::fuzz::write_file("ckpt/model.safetensors.index.json", index);
  moesim::fuzz::write_file("ckpt/model-00001-of-00001.safetensors", shard);
  moesim::fuzz::expect_user_errors_only([&] {
    const auto ckpt = ref::Checkpoint::open(dir);
    (void)ckpt.tensor_count();
    (void)ckpt.total_bytes();
    // Every name the index maps: found, and readable within its shard.
    const auto doc = nlohmann::json::parse(index, nullptr, false);
    if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) return;
    for (const auto& [name, file] : doc["weight_map"].items()) {
      const auto t = ckpt.find(name);
      if (!t || t->info->end - t->info->begin > (64u << 20)) continue;
      read_all(t->info->dtype, t->bytes, t->info->elements());
    }
  });
  return 0;
}
