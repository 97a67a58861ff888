// Fuzz target: what a ping-pong peer can send or a user can type for `moesim calibrate net`: the frame
// header parser (calibrate/net_protocol.hpp, a pure function over the bytes received), the printable
// prefix quoted in its errors, and the --sizes and --listen/--connect parsers. The first byte picks one.
#include <cstring>

#include "fuzz_support.hpp"
#include "moesim/calibrate/net_protocol.hpp"
#include "moesim/calibrate/pingpong.hpp"

namespace net = moesim::calibrate::net;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto sel = moesim::fuzz::select(data, size, 3);
  const unsigned which = sel.which;
  const std::string_view rest = sel.rest;
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(rest.data());
  switch (which) {
    case 0: {
      // Every prefix, as a stream delivers them: a parse never reads past the span it is given (ASan
      // checks: the span is its own heap copy), and a prefix of a valid header never says BadMagic.
      const std::vector<std::uint8_t> copy(bytes, bytes + rest.size());
      const std::uint64_t max_message = rest.size() >= 8 ? net::load_u64(copy.data()) : 1u << 20;
      const auto full = net::parse_frame_header(copy, max_message);
      for (std::size_t n = 0; n <= copy.size() && n <= net::kFrameHeaderBytes; ++n) {
        const std::vector<std::uint8_t> prefix(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(n));
        const auto p = net::parse_frame_header(prefix, max_message);
        if (full.status == net::FrameStatus::Ok && p.status == net::FrameStatus::BadMagic) __builtin_trap();
      }
      if (full.status == net::FrameStatus::Ok) {
        // Encoding what was parsed gives the same 24 bytes back.
        const auto again = net::encode_frame_header(full.header);
        if (std::memcmp(again.data(), copy.data(), net::kFrameHeaderBytes) != 0) __builtin_trap();
      }
      (void)net::printable_prefix(copy);
      break;
    }
    case 1:
      moesim::fuzz::expect_user_errors_only([&] {
        const auto sizes = moesim::calibrate::parse_message_sizes(std::string(rest), 64u << 20);
        for (const auto s : sizes) {
          if (s > (64u << 20)) __builtin_trap();
        }
      });
      break;
    default:
      moesim::fuzz::expect_user_errors_only(
          [&] { (void)moesim::calibrate::parse_host_port(std::string(rest), "--connect"); });
      break;
  }
  return 0;
}
