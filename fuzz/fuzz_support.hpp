#pragma once
// Shared by the libFuzzer targets (fuzz/README.md). A target's contract: for ANY bytes, the parser under
// test returns, or throws moesim::UserError (bad input, one line for the user). Anything else is a finding:
// a crash, a sanitizer report, a hang, or another exception (an InternalError from MOESIM_CHECK, a
// std::out_of_range or nlohmann::json::exception that escaped a parser), which the fuzzer reports as an
// uncaught exception (abort).
//
// Parsers that read files get the bytes through a file in a private temporary directory, named as the
// command line would name it (.json, .jsonl, .mtrace, .csv, .safetensors).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "moesim/model/error.hpp"

namespace moesim::fuzz {

/// A per-process scratch directory, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("moesim-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

/// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
inline std::filesystem::path write_file(std::string_view name, std::string_view bytes) {
  auto path = scratch_dir() / std::string(name);  // not const: returned by move
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("fuzz harness: cannot write " + path.string());
  return path;
}

/// Runs `f`, swallowing the user errors a parser is allowed to throw.
template <class F>
void expect_user_errors_only(F&& f) {
  try {
    f();
  } catch (const moesim::UserError&) {
  }
}

/// Splits a selector byte off the input: targets that cover several parsers pick one with it.
struct Selected {
  unsigned which = 0;
  std::string_view rest;
};
inline Selected select(const std::uint8_t* data, std::size_t size, unsigned choices) {
  if (size == 0) return {0, {}};
  return {static_cast<unsigned>(data[0]) % choices, {reinterpret_cast<const char*>(data) + 1, size - 1}};
}

}  // namespace moesim::fuzz
