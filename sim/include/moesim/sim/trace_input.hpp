#pragma once
// Opening a routing-trace input: moesim's own files and the public formats alike may come gzip- or
// zstd-compressed (public traces are usually published that way). Compression is recognised from the
// file's first bytes (gzip 1f 8b, zstd 28 b5 2f fd: RFC 1952 §2.3.1, RFC 8878 §3.1.1), not from its name,
// and undone on the fly with Boost.Iostreams.
//
// A compressed file's decompressed size is measured before anything is parsed, with a bound: a few
// kilobytes of zstd can claim terabytes (a "decompression bomb"). The bound is the memory budget
// (model/resources.hpp) divided by the memory a decompressed byte takes once read, the same bound
// read_input_file() puts on an uncompressed file's size; past it the file is refused with one line.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

namespace moesim::sim {

enum class Compression { None, Gzip, Zstd };

/// "none", "gzip", "zstd".
std::string compression_name(Compression c);

/// An input file opened for reading (a regular file: moesim/model/fd_io.hpp's InputFile checks), its
/// content decompressed when it is gzip or zstd.
class TraceInput {
 public:
  /// `memory_per_byte`: the memory one byte of the (decompressed) content takes once the caller has read
  /// it (1 for the streaming trace readers, 17 for a JSON document parsed whole: json_reader.cpp). A
  /// compressed file is decompressed once to measure it; UserError naming the file if it is damaged or
  /// decompresses to more than the budget allows.
  /// `measure` false: skip the measuring pass, for a caller that reads a bounded prefix only (size() is then
  /// the compressed size).
  explicit TraceInput(const std::string& path, double memory_per_byte = 1.0, bool measure = true);
  ~TraceInput();
  TraceInput(const TraceInput&) = delete;
  TraceInput& operator=(const TraceInput&) = delete;

  /// The (decompressed) content, from where the last read stopped (its start at first).
  [[nodiscard]] std::istream& stream();
  /// Back to the start of the content (after sniffing its first bytes).
  void rewind();
  /// Bytes of (decompressed) content.
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] Compression compression() const { return compression_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  /// The whole (decompressed) content as text; `what` says what it is read for, for the refusal.
  std::string read_all(std::string_view what);

 private:
  struct Impl;
  std::string name_;
  Compression compression_ = Compression::None;
  std::uint64_t size_ = 0;
  double memory_per_byte_ = 1.0;
  std::unique_ptr<Impl> impl_;
};

/// The whole (decompressed) content of `path`, bounded as TraceInput bounds it: what json::load_file does,
/// for compressed files too. `what` names the use ("parsing it as JSON").
std::string read_trace_text(const std::string& path, double memory_per_byte, std::string_view what);

}  // namespace moesim::sim
