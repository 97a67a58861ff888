#pragma once
// Test helper: a file written compressed, as the public trace sets are (gzip or zstd; Boost.Iostreams).

#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filter/zstd.hpp>
#include <boost/iostreams/filtering_stream.hpp>
#include <fstream>
#include <string>

namespace moesim::test {

/// Writes `bytes` compressed (gzip for "gz", zstd for "zst") to `path`.
inline void write_compressed(const std::string& path, const std::string& bytes, const std::string& kind) {
  namespace io = boost::iostreams;
  std::ofstream out(path, std::ios::binary);
  io::filtering_ostream z;
  if (kind == "gz") {
    z.push(io::gzip_compressor());
  } else {
    z.push(io::zstd_compressor());
  }
  z.push(out);
  z << bytes;
  z.reset();  // flushes the compressor's last block into `out`
}

}  // namespace moesim::test
