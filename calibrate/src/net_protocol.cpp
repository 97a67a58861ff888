#include "moesim/calibrate/net_protocol.hpp"

#include <cstdio>

namespace moesim::calibrate::net {

const char* frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::Hello:
      return "Hello";
    case FrameType::Welcome:
      return "Welcome";
    case FrameType::Ping:
      return "Ping";
    case FrameType::Pong:
      return "Pong";
    case FrameType::Error:
      return "Error";
    case FrameType::Bye:
      return "Bye";
  }
  return "unknown";
}

std::uint64_t load_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void store_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<std::uint8_t>(v & 0xffu);
    v >>= 8;
  }
}

FrameParse parse_frame_header(std::span<const std::uint8_t> bytes, std::uint64_t max_message) {
  FrameParse r;
  // The magic first, on however many bytes there are: an HTTP or SSH banner is refused on its first byte.
  const std::size_t m = bytes.size() < kMagic.size() ? bytes.size() : kMagic.size();
  for (std::size_t i = 0; i < m; ++i) {
    if (bytes[i] != kMagic[i]) {
      r.status = FrameStatus::BadMagic;
      return r;
    }
  }
  if (bytes.size() >= 6) {
    r.header.version = static_cast<std::uint16_t>((bytes[4] << 8) | bytes[5]);
    if (r.header.version != kProtocolVersion) {
      r.status = FrameStatus::BadVersion;
      return r;
    }
  }
  if (bytes.size() < kFrameHeaderBytes) {
    r.status = FrameStatus::NeedMore;
    return r;
  }
  const auto type = static_cast<std::uint16_t>((bytes[6] << 8) | bytes[7]);
  r.header.sequence = load_u64(bytes.data() + 8);
  r.header.length = load_u64(bytes.data() + 16);
  if (type < static_cast<std::uint16_t>(FrameType::Hello) || type > static_cast<std::uint16_t>(FrameType::Bye)) {
    r.status = FrameStatus::BadType;
    return r;
  }
  r.header.type = static_cast<FrameType>(type);
  switch (r.header.type) {
    case FrameType::Ping:
    case FrameType::Pong:
      r.limit = max_message;
      break;
    case FrameType::Error:
      r.limit = kMaxErrorPayload;
      break;
    default:
      r.limit = kMaxControlPayload;
      break;
  }
  r.status = r.header.length > r.limit ? FrameStatus::TooLarge : FrameStatus::Ok;
  return r;
}

std::array<std::uint8_t, kFrameHeaderBytes> encode_frame_header(const FrameHeader& h) {
  std::array<std::uint8_t, kFrameHeaderBytes> b{};
  for (std::size_t i = 0; i < kMagic.size(); ++i) b[i] = kMagic[i];
  b[4] = static_cast<std::uint8_t>(h.version >> 8);
  b[5] = static_cast<std::uint8_t>(h.version & 0xffu);
  const auto t = static_cast<std::uint16_t>(h.type);
  b[6] = static_cast<std::uint8_t>(t >> 8);
  b[7] = static_cast<std::uint8_t>(t & 0xffu);
  store_u64(b.data() + 8, h.sequence);
  store_u64(b.data() + 16, h.length);
  return b;
}

std::string printable_prefix(std::span<const std::uint8_t> bytes, std::size_t max) {
  std::string s;
  for (std::size_t i = 0; i < bytes.size() && i < max; ++i) {
    const std::uint8_t c = bytes[i];
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      s += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    }
  }
  return s;
}

}  // namespace moesim::calibrate::net
