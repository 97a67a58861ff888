// `moesim ref init`: a random-weight Mixtral checkpoint written as save_pretrained would (shards
// model-00001-of-0000N.safetensors filled greedily in order, and model.safetensors.index.json).

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "checkpoint_detail.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reference/checkpoint.hpp"
#include "moesim/sim/splitmix64.hpp"

namespace moesim::reference {

namespace fs = std::filesystem;

namespace {

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
    if (p.filename() == "config.json" || p.filename() == checkpoint_detail::kIndexName ||
        p.extension() == ".safetensors") {
      throw UserError(where + ": already holds a checkpoint (" + p.filename().string() +
                      "); choose an empty directory or remove it");
    }
  }
  if (ec) throw UserError(where + ": cannot list the directory (" + ec.message() + "); check its permissions");
  return false;
}

}  // namespace

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
                                   ? std::string(checkpoint_detail::kSingleName)
                                   : text::printf("model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      write_shard(outputs, out_dir / name, shards[s], options, reporter);
      result.files.push_back(out_dir / name);
      for (const auto& p : shards[s]) weight_map[p.tensor->name] = name;
    }
    if (shards.size() > 1) {
      write_json(outputs, out_dir / checkpoint_detail::kIndexName,
                 {{"metadata", {{"total_size", result.bytes}}}, {"weight_map", weight_map}});
      result.files.push_back(out_dir / checkpoint_detail::kIndexName);
    }
    outputs.commit();
  } catch (...) {
    if (created) fs::remove(out_dir, ec);  // only if empty
    throw;
  }
  return result;
}

}  // namespace moesim::reference
