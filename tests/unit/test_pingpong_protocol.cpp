// The frame-header parser of `moesim calibrate net` (calibrate/net_protocol.hpp): a pure function over bytes.
// Each test names the bytes and the verdict the 24-byte layout (magic, version, type, sequence, length) gives.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "moesim/calibrate/net_protocol.hpp"

namespace {

using namespace moesim::calibrate::net;

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<std::uint8_t> frame(FrameType t, std::uint64_t seq, std::uint64_t length) {
  FrameHeader h;
  h.type = t;
  h.sequence = seq;
  h.length = length;
  const auto a = encode_frame_header(h);
  return {a.begin(), a.end()};
}

// Encoding then parsing gives the header back, for every type, with big-endian integers at fixed offsets.
TEST(PingPongProtocol, RoundTripsEveryType) {
  for (auto t :
       {FrameType::Hello, FrameType::Welcome, FrameType::Ping, FrameType::Pong, FrameType::Error, FrameType::Bye}) {
    const auto b = frame(t, 0x0102030405060708ull, 16);
    ASSERT_EQ(b.size(), kFrameHeaderBytes);
    const auto p = parse_frame_header(b, 1u << 20);
    EXPECT_EQ(p.status, FrameStatus::Ok) << frame_type_name(t);
    EXPECT_EQ(p.header.type, t);
    EXPECT_EQ(p.header.sequence, 0x0102030405060708ull);
    EXPECT_EQ(p.header.length, 16u);
    EXPECT_EQ(p.header.version, kProtocolVersion);
  }
  const auto b = frame(FrameType::Ping, 1, 0x1122);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "MSPP");
  EXPECT_EQ(b[5], kProtocolVersion);
  EXPECT_EQ(b[7], static_cast<std::uint8_t>(FrameType::Ping));
  EXPECT_EQ(b[15], 1u);
  EXPECT_EQ(b[22], 0x11u);
  EXPECT_EQ(b[23], 0x22u);
}

// An HTTP answer, an SSH banner, a TLS record and random bytes are refused on their first byte, even when
// only one byte has arrived: the client reports "not the moesim protocol" without waiting for 24 bytes.
TEST(PingPongProtocol, OtherProtocolsAreRefusedAtOnce) {
  const std::vector<std::string> others = {
      "HTTP/1.1 200 OK\r\n",   "SSH-2.0-OpenSSH_9.2\r\n", "\x16\x03\x01\x02", "H", "MSPX",
      std::string("MSP\0", 4), std::string(4, '\0')};
  for (const auto& s : others) {
    EXPECT_EQ(parse_frame_header(bytes_of(s), 1u << 20).status, FrameStatus::BadMagic) << s;
  }
  EXPECT_EQ(printable_prefix(bytes_of("HTTP/1.1 200 OK")), "HTTP/1.1");
  EXPECT_EQ(printable_prefix(std::vector<std::uint8_t>{0x16, 0x03, 0x01, 0x02, 0x00}, 4), "\\x16\\x03\\x01\\x02");
  EXPECT_EQ(printable_prefix(bytes_of("it's")), "it\\x27s");
}

// Fewer than 24 bytes that agree with the magic: wait for more (including nothing at all).
TEST(PingPongProtocol, APrefixOfAValidHeaderNeedsMore) {
  const auto b = frame(FrameType::Ping, 7, 100);
  for (std::size_t n = 0; n < kFrameHeaderBytes; ++n) {
    EXPECT_EQ(parse_frame_header({b.data(), n}, 1000).status, FrameStatus::NeedMore) << n;
  }
  // Extra bytes after the header (the payload, or the next frame) do not change the verdict.
  auto longer = b;
  longer.insert(longer.end(), 100, 0xab);
  EXPECT_EQ(parse_frame_header(longer, 1000).status, FrameStatus::Ok);
}

// Another protocol version is recognised from 6 bytes and reported with its number.
TEST(PingPongProtocol, OtherVersionIsReported) {
  auto b = frame(FrameType::Hello, 0, 0);
  b[4] = 0;
  b[5] = 2;
  const auto p = parse_frame_header({b.data(), 6}, 1000);
  EXPECT_EQ(p.status, FrameStatus::BadVersion);
  EXPECT_EQ(p.header.version, 2);
  EXPECT_EQ(parse_frame_header(b, 1000).status, FrameStatus::BadVersion);
}

// Types 0 and 7+ do not exist.
TEST(PingPongProtocol, UnknownTypesAreRefused) {
  for (int t : {0, 7, 0x0101, 0xffff}) {
    auto b = frame(FrameType::Ping, 0, 0);
    b[6] = static_cast<std::uint8_t>(t >> 8);
    b[7] = static_cast<std::uint8_t>(t & 0xff);
    EXPECT_EQ(parse_frame_header(b, 1000).status, FrameStatus::BadType) << t;
  }
}

// Ping and Pong are limited by the server's max message; control frames by their own small limits, so a
// 2^64-1 length never makes anyone allocate.
TEST(PingPongProtocol, LengthsAreBounded) {
  EXPECT_EQ(parse_frame_header(frame(FrameType::Ping, 0, 1000), 1000).status, FrameStatus::Ok);
  const auto big = parse_frame_header(frame(FrameType::Ping, 0, 1001), 1000);
  EXPECT_EQ(big.status, FrameStatus::TooLarge);
  EXPECT_EQ(big.limit, 1000u);
  EXPECT_EQ(big.header.length, 1001u);
  EXPECT_EQ(parse_frame_header(frame(FrameType::Pong, 0, ~0ull), ~0ull - 1).status, FrameStatus::TooLarge);
  EXPECT_EQ(parse_frame_header(frame(FrameType::Hello, 0, kMaxControlPayload + 1), ~0ull).status,
            FrameStatus::TooLarge);
  EXPECT_EQ(parse_frame_header(frame(FrameType::Error, 0, kMaxErrorPayload), 0).status, FrameStatus::Ok);
  EXPECT_EQ(parse_frame_header(frame(FrameType::Error, 0, kMaxErrorPayload + 1), 0).status, FrameStatus::TooLarge);
  EXPECT_EQ(parse_frame_header(frame(FrameType::Welcome, 0, kWelcomePayloadBytes), 0).status, FrameStatus::Ok);
}

// Every byte string of up to 24 bytes drawn from a small alphabet gets a verdict without reading past the
// span (run under ASan in CI); a cheap stand-in until the parser is fuzzed.
TEST(PingPongProtocol, AnyBytesGetAVerdict) {
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const std::size_t n = x % 30;
    std::vector<std::uint8_t> b = frame(FrameType::Ping, x, x >> 40);
    b.resize(n, static_cast<std::uint8_t>(x >> 8));
    if (n > 0 && (x & 0x300) == 0) b[(x >> 16) % n] = static_cast<std::uint8_t>(x >> 24);
    const auto p = parse_frame_header(b, 1u << 20);
    if (n < kFrameHeaderBytes) {
      EXPECT_NE(p.status, FrameStatus::Ok);
    }
  }
}

TEST(PingPongProtocol, U64IsBigEndian) {
  std::uint8_t b[8];
  store_u64(b, 0x0102030405060708ull);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[7], 8);
  EXPECT_EQ(load_u64(b), 0x0102030405060708ull);
}

}  // namespace
