#include "moesim/sim/trace_input.hpp"

#include <algorithm>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filter/zstd.hpp>
#include <boost/iostreams/filtering_stream.hpp>
#include <cstring>
#include <istream>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

namespace moesim::sim {
namespace {

namespace io = boost::iostreams;

// The bytes of content a reader may take: the memory budget over the memory each byte takes once read.
struct Limit {
  std::uint64_t bytes = 0;
  model::MemoryBudget budget;
};

Limit content_limit(double memory_per_byte) {
  Limit l;
  l.budget = model::memory_budget();
  const double b = l.budget.bytes.base() / std::max(1.0, memory_per_byte);
  l.bytes = b >= 1.8e19 ? UINT64_MAX : static_cast<std::uint64_t>(b);
  return l;
}

}  // namespace

std::string compression_name(Compression c) {
  switch (c) {
    case Compression::Gzip:
      return "gzip";
    case Compression::Zstd:
      return "zstd";
    case Compression::None:
      break;
  }
  return "none";
}

struct TraceInput::Impl {
  explicit Impl(const std::string& path) : file(path) {}
  InputFile file;
  std::unique_ptr<io::filtering_istream> filtered;

  // A decompressing stream over the file from its first byte.
  std::unique_ptr<io::filtering_istream> open(Compression c) {
    std::istream& raw = file.stream();
    raw.clear();
    raw.seekg(0);
    auto f = std::make_unique<io::filtering_istream>();
    if (c == Compression::Gzip) {
      f->push(io::gzip_decompressor());
    } else {
      f->push(io::zstd_decompressor());
    }
    f->push(raw);
    return f;
  }
};

TraceInput::TraceInput(const std::string& path, double memory_per_byte, bool measure)
    : name_(path), memory_per_byte_(memory_per_byte), impl_(std::make_unique<Impl>(path)) {
  std::istream& raw = impl_->file.stream();
  unsigned char magic[4] = {};
  raw.read(reinterpret_cast<char*>(magic), sizeof magic);
  const auto got = raw.gcount();
  raw.clear();
  raw.seekg(0);
  static constexpr unsigned char kZstd[4] = {0x28, 0xb5, 0x2f, 0xfd};  // RFC 8878 §3.1.1, little-endian 0xFD2FB528
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {              // RFC 1952 §2.3.1: ID1, ID2
    compression_ = Compression::Gzip;
  } else if (got == 4 && std::memcmp(magic, kZstd, 4) == 0) {
    compression_ = Compression::Zstd;
  }
  if (compression_ == Compression::None || !measure) {
    size_ = impl_->file.size();
    if (compression_ != Compression::None) impl_->filtered = impl_->open(compression_);
    return;
  }
  // Measure the content first, bounded, so that a bomb is refused before a byte of it is parsed (and the
  // binary reader, which checks records against the size, gets the size).
  const Limit limit = content_limit(memory_per_byte);
  const std::string kind = compression_name(compression_);
  {
    auto f = impl_->open(compression_);
    f->exceptions(std::ios::badbit);  // a filter's error (gzip_error, zstd_error) reaches the catch below
    std::vector<char> chunk(1 << 16);
    try {
      for (;;) {
        f->read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
        const auto n = static_cast<std::uint64_t>(f->gcount());
        if (n == 0) break;
        size_ += n;
        if (size_ > limit.bytes) {
          throw UserError(
              name_ + ": " + kind + " data that decompresses to more than " +
              units::format_binary(units::bytes(static_cast<double>(limit.bytes))) + " (" +
              std::to_string(impl_->file.size()) + " bytes compressed), more than fits in the " +
              units::format_binary(limit.budget.bytes) + " of memory this process may use (" + limit.budget.source +
              ") once read" +
              (memory_per_byte > 1 ? text::printf(" at %g bytes of memory per byte", memory_per_byte) : std::string()) +
              "; refused as a decompression bomb: check the file (its uncompressed size), or raise "
              "MOESIM_MEMORY_LIMIT if it is a genuine trace");
        }
      }
    } catch (const UserError&) {
      throw;
    } catch (const std::exception& e) {
      throw UserError(name_ + ": is not valid " + kind + " data after " + std::to_string(size_) +
                      " decompressed bytes (" + e.what() + "); the file is damaged or cut short: copy it again");
    }
  }
  if (size_ == 0) throw UserError(name_ + ": " + kind + " data that decompresses to nothing; the trace is empty");
  impl_->filtered = impl_->open(compression_);
}

TraceInput::~TraceInput() = default;

std::istream& TraceInput::stream() {
  if (impl_->filtered) return *impl_->filtered;
  return impl_->file.stream();
}

void TraceInput::rewind() {
  if (impl_->filtered) {
    impl_->filtered = impl_->open(compression_);  // a decompressing stream cannot seek: start it again
    return;
  }
  impl_->file.stream().clear();
  impl_->file.stream().seekg(0);
}

std::string TraceInput::read_all(std::string_view what) {
  const std::string fix = "split the file, or use a machine with more memory (or raise MOESIM_MEMORY_LIMIT)";
  model::require_memory(units::bytes(memory_per_byte_ * static_cast<double>(size_)), name_ + ": " + std::string(what),
                        fix);
  if (!impl_->filtered) return impl_->file.read_all(content_limit(memory_per_byte_).bytes, what, fix);
  std::string text;
  text.reserve(static_cast<std::size_t>(size_));
  std::vector<char> chunk(1 << 16);
  std::istream& in = *impl_->filtered;
  for (;;) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0) break;
    // The size was measured; a file that grows while it is read is cut at that size.
    text.append(chunk.data(), std::min<std::size_t>(n, static_cast<std::size_t>(size_) - text.size()));
    if (text.size() >= size_) break;
  }
  if (in.bad()) throw UserError(name_ + ": reading failed while decompressing; check the file");
  return text;
}

std::string read_trace_text(const std::string& path, double memory_per_byte, std::string_view what) {
  TraceInput in(path, memory_per_byte);
  return in.read_all(what);
}

}  // namespace moesim::sim
