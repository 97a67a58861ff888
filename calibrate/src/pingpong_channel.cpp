// The TCP ping-pong's transport helpers (pingpong_detail.hpp): the error kinds of a socket operation, frame
// headers, and the Error frame with a lingering close.

#include <algorithm>
#include <chrono>

#include "moesim/calibrate/net_fit.hpp"
#include "moesim/model/text.hpp"
#include "pingpong_detail.hpp"

namespace moesim::calibrate::pingpong_detail {

std::chrono::nanoseconds to_ns(double s) {
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(s, 1e6) * 1e9));
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
std::string seconds_text(double s) { return text::printf("%g s", s); }
std::string size_text(std::uint64_t b) { return size_label(b); }

IoFailure classify(const error_code& ec) {
  if (ec == asio::error::eof) return IoFailure::Eof;
  if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe || ec == asio::error::connection_aborted)
    return IoFailure::Reset;
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) return IoFailure::Aborted;
  return IoFailure::Other;
}

std::array<std::uint8_t, kFrameHeaderBytes> header(FrameType t, std::uint64_t seq, std::uint64_t length) {
  FrameHeader h;
  h.type = t;
  h.sequence = seq;
  h.length = length;
  return net::encode_frame_header(h);
}

/// Best effort: an Error frame with one line of text, then a lingering close (shut down our side, read and
/// drop what the peer still sends for a moment) so the peer reads the frame before the connection goes:
/// closing with unread bytes would send a reset, which can discard the frame at the peer. The write and the
/// linger share one 500 ms deadline (long enough for a loopback or LAN peer to read a 1 KiB frame, short
/// enough that a hostile peer holds the thread for no longer), so a peer that trickles bytes cannot keep the
/// linger going. `linger` false: no linger, for a peer that has sent nothing unread (an evicted one).
void send_error_and_close(Channel& ch, tcp::socket& socket, const std::string& message, bool linger) {
  const std::string text = message.substr(0, net::kMaxErrorPayload);
  const auto h = header(FrameType::Error, 0, text.size());
  try {
    ch.set_deadline(Clock::now() + std::chrono::milliseconds(500));
    ch.write_all(h.data(), h.size(), reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    std::array<std::uint8_t, 4096> sink{};
    // 1 MiB: a peer still sending after the Error frame is not worth reading further.
    for (std::size_t drained = 0; linger && drained < (1u << 20);) drained += ch.read_some(sink.data(), sink.size());
  } catch (const IoError&) {
    // The peer is gone or silent: nothing more to tell it.
  }
  error_code ignored;
  socket.close(ignored);
}

}  // namespace moesim::calibrate::pingpong_detail
