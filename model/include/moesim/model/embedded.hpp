#pragma once
// Data files compiled into the binary (cmake/EmbedFiles.cmake): the model zoo and the hardware profiles.

#include <string_view>
#include <vector>

namespace moesim {

struct EmbeddedFile {
  std::string_view path;      ///< path relative to the data folder, e.g. "nodes/mac-studio-m2-ultra-192.json"
  std::string_view contents;  ///< the file's bytes
};

}  // namespace moesim
