#pragma once
// Internals of the TCP ping-pong shared by calibrate/src/pingpong*.cpp: Channel (socket I/O with a
// deadline) and FrameReader (the frames received on one connection), and the helpers of both ends.

// <utility> before Boost.Asio: its awaitable.hpp uses std::exchange without including it (libstdc++ 12).
#include <utility>
// The rest in order.
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "moesim/calibrate/net_protocol.hpp"

namespace moesim::calibrate {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using net::FrameHeader;
using net::FrameParse;
using net::FrameStatus;
using net::FrameType;
using net::kFrameHeaderBytes;

namespace pingpong_detail {

using Clock = std::chrono::steady_clock;

std::chrono::nanoseconds to_ns(double s);
double since(Clock::time_point t0);
std::string seconds_text(double s);
std::string size_text(std::uint64_t b);

// ------------------------------------------------------------------------------------------------------
// Channel: reads and writes with a deadline.

enum class IoFailure { Eof, Timeout, Reset, Aborted, Other };

class IoError : public std::runtime_error {
 public:
  IoError(IoFailure k, const error_code& ec, std::size_t n)
      : std::runtime_error(ec.message()), kind(k), code(ec), done(n) {}
  IoFailure kind;
  error_code code;
  std::size_t done;  // bytes transferred before the failure
};

IoFailure classify(const error_code& ec);

// asio::transfer_all() moves at most 64 KiB per system call (detail::default_max_transfer_size); a 64 MiB
// ping would pay a thousand calls. This lets each call move up to 1 GiB, as a plain send/recv loop would.
struct TransferAllLarge {
  std::size_t operator()(const error_code& ec, std::size_t) const { return ec ? 0 : (std::size_t{1} << 30); }
};

class Channel {
 public:
  Channel(asio::io_context& io, tcp::socket& socket, std::chrono::nanoseconds timeout)
      : io_(io), socket_(socket), timeout_(timeout) {}

  std::size_t read_some(std::uint8_t* p, std::size_t n) {
    return wait([&](auto handler) { socket_.async_read_some(asio::buffer(p, n), handler); });
  }
  void read_exact(std::uint8_t* p, std::size_t n) {
    wait([&](auto handler) { asio::async_read(socket_, asio::buffer(p, n), TransferAllLarge{}, handler); });
  }
  /// One gathered write of a then b.
  void write_all(const std::uint8_t* a, std::size_t na, const std::uint8_t* b = nullptr, std::size_t nb = 0) {
    const std::array<asio::const_buffer, 2> bufs = {asio::buffer(a, na), asio::buffer(b, nb)};
    wait([&](auto handler) { asio::async_write(socket_, bufs, TransferAllLarge{}, handler); });
  }
  /// Every operation from now on must also finish by `deadline`: one deadline over all the reads of a
  /// frame, so a peer that trickles a byte now and then cannot stretch a frame past it.
  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }

 private:
  template <class Initiate>
  std::size_t wait(Initiate&& initiate) {
    error_code ec = asio::error::would_block;
    std::size_t n = 0;
    initiate([&ec, &n](const error_code& e, std::size_t k) {
      ec = e;
      n = k;
    });
    io_.restart();
    // run_until with a deadline already passed runs nothing: the operation times out even if its bytes
    // are waiting.
    io_.run_until(std::min(Clock::now() + timeout_, deadline_));
    if (ec == asio::error::would_block) {
      // Past the deadline: cancelling aborts the operation (the socket stays open, so the server can still
      // send an Error frame saying why); run it to completion, since its handler refers to this frame.
      error_code ignored;
      socket_.cancel(ignored);
      io_.restart();
      io_.run();
      throw IoError(IoFailure::Timeout, asio::error::timed_out, n);
    }
    if (ec) throw IoError(classify(ec), ec, n);
    return n;
  }

  asio::io_context& io_;
  tcp::socket& socket_;
  std::chrono::nanoseconds timeout_;
  Clock::time_point deadline_ = Clock::time_point::max();
};

// ------------------------------------------------------------------------------------------------------
// FrameReader: the bytes received on one connection, judged frame by frame.

class FrameReader {
 public:
  FrameReader() : buf_(kFrameHeaderBytes + net::kMaxErrorPayload + 4096) {}

  /// Reads until the next frame's header is judged: Ok or a failure, never NeedMore. IoError on I/O.
  FrameParse next_header(Channel& ch, std::uint64_t max_message) {
    for (;;) {
      const FrameParse p = net::parse_frame_header({buf_.data(), have_}, max_message);
      if (p.status != FrameStatus::NeedMore) {
        if (p.status == FrameStatus::Ok) header_ = p.header;
        return p;
      }
      have_ += ch.read_some(buf_.data() + have_, buf_.size() - have_);
    }
  }
  /// The current frame's payload, read in full; valid until consume().
  std::span<std::uint8_t> payload(Channel& ch) {
    const std::size_t total = frame_bytes();
    if (buf_.size() < total) buf_.resize(total);
    if (have_ < total) {
      ch.read_exact(buf_.data() + have_, total - have_);
      have_ = total;
    }
    return {buf_.data() + kFrameHeaderBytes, static_cast<std::size_t>(header_.length)};
  }
  /// The current frame, header and payload (after payload()).
  std::uint8_t* frame() { return buf_.data(); }
  [[nodiscard]] std::size_t frame_bytes() const { return kFrameHeaderBytes + static_cast<std::size_t>(header_.length); }
  /// Drops the current frame, keeping any bytes of the next one.
  void consume() {
    const std::size_t total = frame_bytes();
    if (have_ > total) std::memmove(buf_.data(), buf_.data() + total, have_ - total);
    have_ = have_ > total ? have_ - total : 0;
  }
  [[nodiscard]] std::span<const std::uint8_t> pending() const { return {buf_.data(), have_}; }
  [[nodiscard]] std::size_t have() const { return have_; }

 private:
  std::vector<std::uint8_t> buf_;
  std::size_t have_ = 0;
  FrameHeader header_;
};

std::array<std::uint8_t, kFrameHeaderBytes> header(FrameType t, std::uint64_t seq, std::uint64_t length);

/// Best effort: an Error frame with one line of text, then a lingering close (shut down our side, read and
/// drop what the peer still sends for a moment) so the peer reads the frame before the connection goes:
/// closing with unread bytes would send a reset, which can discard the frame at the peer. The write and the
/// linger share one 500 ms deadline (long enough for a loopback or LAN peer to read a 1 KiB frame, short
/// enough that a hostile peer holds the thread for no longer), so a peer that trickles bytes cannot keep the
/// linger going. `linger` false: no linger, for a peer that has sent nothing unread (an evicted one).
void send_error_and_close(Channel& ch, tcp::socket& socket, const std::string& message, bool linger = true);

}  // namespace pingpong_detail
}  // namespace moesim::calibrate
