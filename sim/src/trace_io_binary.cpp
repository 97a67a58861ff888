// Routing traces in the binary format (.mtrace): a fixed prefix, the header JSON, then fixed-size
// little-endian records; read and written byte by byte.
#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_io.hpp"
#include "trace_io_detail.hpp"

namespace moesim::sim {
namespace trace_io_detail {
namespace {

// ------------------------------------------------------------------------------------------------------
// Binary: every field little-endian, written and read byte by byte, so the host's byte order does not matter.

void put_u16(char* p, std::uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}
void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint16_t get_u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t get_u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace
}  // namespace trace_io_detail

RoutingTrace read_trace_binary(std::istream& in, std::uint64_t size, const std::string& name) {
  using trace_io_detail::duplicate_text;
  using trace_io_detail::find_duplicate;
  using trace_io_detail::get_u16;
  using trace_io_detail::get_u32;
  using trace_io_detail::get_u64;
  using trace_io_detail::kFixedPrefix;
  using trace_io_detail::kMagic;
  using trace_io_detail::kWeightFix;
  using trace_io_detail::out_of_range_text;
  using trace_io_detail::parse_header;
  using trace_io_detail::record_bytes;
  using trace_io_detail::weight_ok;
  using trace_io_detail::weight_problem;
  using trace_io_detail::with_commas;
  const auto truncated_prefix = [&](const std::string& part) {
    return UserError(name + ": truncated: the file (" + with_commas(static_cast<std::int64_t>(size)) +
                     " bytes) ends inside the " + part +
                     ", before record 0; the file was cut short: copy or "
                     "regenerate it");
  };
  if (size < kFixedPrefix) throw truncated_prefix("fixed header (magic, version, header length)");
  unsigned char prefix[kFixedPrefix];
  in.read(reinterpret_cast<char*>(prefix), kFixedPrefix);
  if (!in) throw UserError(name + ": reading failed; check the file is readable");
  if (std::memcmp(prefix, kMagic, sizeof kMagic) != 0) {
    throw UserError(name + ": does not start with \"MOESIMTR\"; not a binary moesim trace");
  }
  const std::uint32_t version = get_u32(prefix + 8);
  if (version < 1 || version > kTraceFormatVersion) {
    throw UserError(name + ": binary trace version " + std::to_string(version) + " is not one this moesim reads (" +
                    std::to_string(kTraceFormatVersion) + "); upgrade moesim or re-export the trace");
  }
  const std::uint64_t header_len = get_u32(prefix + 12);
  if (size < kFixedPrefix + header_len + 9) throw truncated_prefix("header JSON or the token count");
  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json hj;
  try {
    hj = json::parse_strict(header_text, name + ": header JSON");
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(name + ": header JSON (bytes 16-" + std::to_string(kFixedPrefix + header_len) +
                    ") is malformed at byte " + std::to_string(e.byte) + " of it; the file is damaged: regenerate it");
  } catch (const nlohmann::json::out_of_range& e) {
    throw UserError(name + ": header JSON: " + json::number_overflow(e) + "; the file is damaged: regenerate it");
  }
  std::optional<std::int64_t> declared;
  RoutingTrace t;
  t.header = parse_header(json::Node(hj, name + ": header"), declared);
  unsigned char count_flag[9];
  in.read(reinterpret_cast<char*>(count_flag), 9);
  const std::uint64_t n = get_u64(count_flag);
  const unsigned flag = count_flag[8];
  const std::uint64_t offset = kFixedPrefix + header_len + 9;
  if (flag > 1) {
    throw UserError(name + ": byte " + std::to_string(offset - 1) + " (has-weights) is " + std::to_string(flag) +
                    ", must be 0 or 1; the file is damaged: regenerate it");
  }
  const bool weights = flag == 1;
  const std::uint64_t rec = record_bytes(t.header, weights);
  const std::uint64_t data = size - offset;
  const std::uint64_t fits = data / rec;
  if (n == 0) throw UserError(name + ": the token count is 0; a trace needs at least one token record");
  if (n > fits) {
    const std::uint64_t partial = data % rec;
    throw UserError(name + ": truncated at record " + std::to_string(fits) + ": " +
                    (partial ? "the file ends " + std::to_string(partial) + " bytes into it"
                             : std::string("the file ends just before it")) +
                    " (the header announces " + std::to_string(n) + " records of " + std::to_string(rec) +
                    " bytes); the file was cut short: copy or regenerate it");
  }
  if (data != n * rec) {
    throw UserError(name + ": the token count " + std::to_string(n) +
                    " disagrees with the file size: " + std::to_string(n) + " records of " + std::to_string(rec) +
                    " bytes end at byte " + std::to_string(offset + n * rec) + " but the file has " +
                    std::to_string(size) + " bytes (room for " + std::to_string(fits) + " records" +
                    (data % rec ? " and " + std::to_string(data % rec) + " bytes more" : std::string()) +
                    "); the file is damaged or was appended to: regenerate it");
  }
  model::require_memory(units::bytes(static_cast<double>(n) * static_cast<double>(rec)),
                        name + ": holding its " + std::to_string(n) + " token records",
                        "use a shorter trace (`moesim trace gen --tokens N`), or a machine with more memory");

  if (declared && static_cast<std::uint64_t>(*declared) != n) {
    throw UserError(name + ": header: $.tokens: says " + std::to_string(*declared) + " but the token count is " +
                    std::to_string(n) + "; the file is damaged: regenerate it");
  }

  const auto nn = static_cast<std::size_t>(n);
  const auto per_token = static_cast<std::size_t>(t.header.layers * t.header.top_k);
  const auto k = static_cast<std::size_t>(t.header.top_k);
  t.request.resize(nn);
  t.position.resize(nn);
  t.experts.resize(nn * per_token);
  if (weights) t.weights.resize(nn * per_token);
  // Records are decoded from a buffer of whole records, so memory stays bounded for any trace size.
  const std::size_t batch = std::max<std::size_t>(1, (4u << 20) / static_cast<std::size_t>(rec));
  std::vector<unsigned char> buf(batch * static_cast<std::size_t>(rec));
  for (std::size_t first = 0; first < nn; first += batch) {
    const std::size_t count = std::min(batch, nn - first);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(count * rec));
    if (!in) throw UserError(name + ": reading failed at record " + std::to_string(first) + "; check the file");
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t tok = first + r;
      const unsigned char* p = buf.data() + r * rec;
      t.request[tok] = get_u32(p);
      t.position[tok] = get_u32(p + 4);
      std::uint16_t* ids = t.experts.data() + tok * per_token;
      const unsigned char* q = p + 8;
      for (std::size_t i = 0; i < per_token; ++i) ids[i] = get_u16(q + 2 * i);
      for (std::size_t i = 0; i < per_token; ++i) {
        if (ids[i] >= t.header.experts) {
          throw UserError(name + ": record " + std::to_string(tok) + ", layer " + std::to_string(i / k) + ", slot " +
                          std::to_string(i % k) + ": " + out_of_range_text(ids[i], t.header.experts));
        }
      }
      for (std::size_t l = 0; l < per_token; l += k) {
        if (const auto dup = find_duplicate(ids + l, k)) {
          throw UserError(name + ": record " + std::to_string(tok) + ", layer " + std::to_string(l / k) + ", slot " +
                          std::to_string(dup->first) + ": " + duplicate_text(ids[l + dup->first], dup->second));
        }
      }
      if (weights) {
        float* w = t.weights.data() + tok * per_token;
        const unsigned char* f = q + 2 * per_token;
        for (std::size_t i = 0; i < per_token; ++i) {
          w[i] = std::bit_cast<float>(get_u32(f + 4 * i));
          if (!weight_ok(w[i])) {
            throw UserError(name + ": record " + std::to_string(tok) + ", layer " + std::to_string(i / k) + ", slot " +
                            std::to_string(i % k) + ": " + weight_problem(w[i]) + kWeightFix);
          }
        }
      }
    }
  }
  return t;
}

void write_trace_binary(const RoutingTrace& t, std::ostream& out) {
  using trace_io_detail::check_shape;
  using trace_io_detail::header_line;
  using trace_io_detail::kFixedPrefix;
  using trace_io_detail::kMagic;
  using trace_io_detail::put_u16;
  using trace_io_detail::put_u32;
  using trace_io_detail::put_u64;
  using trace_io_detail::record_bytes;
  check_shape(t);
  const std::string header = header_line(t.header, std::nullopt);
  char prefix[kFixedPrefix];
  std::memcpy(prefix, kMagic, sizeof kMagic);
  put_u32(prefix + 8, static_cast<std::uint32_t>(kTraceFormatVersion));
  put_u32(prefix + 12, static_cast<std::uint32_t>(header.size()));
  out.write(prefix, sizeof prefix);
  out << header;
  char count_flag[9];
  put_u64(count_flag, static_cast<std::uint64_t>(t.tokens()));
  count_flag[8] = t.has_weights() ? 1 : 0;
  out.write(count_flag, sizeof count_flag);

  const auto per_token = static_cast<std::size_t>(t.header.layers * t.header.top_k);
  const auto rec = static_cast<std::size_t>(record_bytes(t.header, t.has_weights()));
  const std::size_t batch = std::max<std::size_t>(1, (4u << 20) / rec);
  std::vector<char> buf(batch * rec);
  const auto n = static_cast<std::size_t>(t.tokens());
  for (std::size_t first = 0; first < n; first += batch) {
    const std::size_t count = std::min(batch, n - first);
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t tok = first + r;
      char* p = buf.data() + r * rec;
      put_u32(p, t.request[tok]);
      put_u32(p + 4, t.position[tok]);
      const std::uint16_t* ids = t.experts.data() + tok * per_token;
      for (std::size_t i = 0; i < per_token; ++i) put_u16(p + 8 + 2 * i, ids[i]);
      if (t.has_weights()) {
        const float* w = t.weights.data() + tok * per_token;
        for (std::size_t i = 0; i < per_token; ++i) {
          put_u32(p + 8 + 2 * per_token + 4 * i, std::bit_cast<std::uint32_t>(w[i]));
        }
      }
    }
    out.write(buf.data(), static_cast<std::streamsize>(count * rec));
  }
}

}  // namespace moesim::sim
