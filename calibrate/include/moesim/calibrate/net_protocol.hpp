#pragma once
// The wire protocol of `moesim calibrate net` (calibrate/NET.md): every message is a frame, a fixed 24-byte
// header followed by `length` payload bytes. All integers are big-endian (network byte order, RFC 1700).
//
//   offset  size  field
//        0     4  magic "MSPP" (moesim ping-pong): a peer speaking anything else is caught on its first bytes
//        4     2  version (kProtocolVersion)
//        6     2  type (FrameType)
//        8     8  sequence: the client numbers its pings; the server echoes the number in the pong
//       16     8  length of the payload in bytes
//
// A session: the client sends Hello; the server answers Welcome (payload: its maximum message size and its
// per-frame timeout, two u64) or Error (payload: one line of UTF-8 text) and closes. Then Ping frames,
// each answered by a Pong with the same sequence and payload, until the client sends Bye or closes.
//
// The header parser is a pure function over a byte span: it never reads past the span, never allocates for
// the bytes it judges, and decides "not this protocol" from the first byte that differs from the magic.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace moesim::calibrate::net {

inline constexpr std::size_t kFrameHeaderBytes = 24;
inline constexpr std::array<std::uint8_t, 4> kMagic = {'M', 'S', 'P', 'P'};
inline constexpr std::uint16_t kProtocolVersion = 1;
/// Hello, Welcome and Bye payloads are small; anything longer is not this protocol.
inline constexpr std::uint64_t kMaxControlPayload = 256;
/// An Error frame carries one line of text.
inline constexpr std::uint64_t kMaxErrorPayload = 1024;
/// Welcome's payload: max message (u64) and timeout in nanoseconds (u64).
inline constexpr std::uint64_t kWelcomePayloadBytes = 16;

enum class FrameType : std::uint16_t { Hello = 1, Welcome = 2, Ping = 3, Pong = 4, Error = 5, Bye = 6 };

/// "Hello", "Welcome", ... for messages.
const char* frame_type_name(FrameType t);

struct FrameHeader {
  std::uint16_t version = kProtocolVersion;
  FrameType type = FrameType::Ping;
  std::uint64_t sequence = 0;
  std::uint64_t length = 0;  ///< payload bytes
};

enum class FrameStatus {
  Ok,          ///< a valid header; `header` is filled and `kFrameHeaderBytes` bytes were consumed
  NeedMore,    ///< every byte given agrees with the protocol, but fewer than 24 were given
  BadMagic,    ///< not the moesim ping-pong protocol
  BadVersion,  ///< the magic matches, another protocol version (header.version says which)
  BadType,     ///< an unknown frame type
  TooLarge,    ///< the payload length exceeds the limit for its type
};

struct FrameParse {
  FrameStatus status = FrameStatus::NeedMore;
  FrameHeader header;       ///< filled as far as the bytes allow (version from 6 bytes, all of it from 24)
  std::uint64_t limit = 0;  ///< TooLarge: the limit that was exceeded
};

/// Judges the first bytes of a frame. `max_message` limits Ping and Pong payloads; control frames have
/// their own small limits (kMaxControlPayload, kMaxErrorPayload). Pure: no I/O, no allocation.
FrameParse parse_frame_header(std::span<const std::uint8_t> bytes, std::uint64_t max_message);

/// The 24 header bytes of `h`.
std::array<std::uint8_t, kFrameHeaderBytes> encode_frame_header(const FrameHeader& h);

/// Big-endian u64 at `p` (8 bytes) and its inverse.
std::uint64_t load_u64(const std::uint8_t* p);
void store_u64(std::uint8_t* p, std::uint64_t v);

/// Up to `max` bytes as text for an error message: printable ASCII as is, the rest as \xNN ("HTTP/1.1",
/// "\x16\x03\x01\x02" for a TLS hello).
std::string printable_prefix(std::span<const std::uint8_t> bytes, std::size_t max = 8);

}  // namespace moesim::calibrate::net
