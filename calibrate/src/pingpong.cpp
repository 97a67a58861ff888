// The TCP ping-pong of `moesim calibrate net`: server, client and the loopback run (calibrate/NET.md).
//
// Both ends do their socket I/O through Channel: an Asio operation started on the end's own io_context and
// run with io_context::run_for(deadline), so every read, write and connect has a deadline without a timer
// per operation (the pattern of Asio's blocking_tcp_client example). The server runs one such io_context
// per client thread, so one slow or hostile client never delays another.

#include "moesim/calibrate/pingpong.hpp"

#include <algorithm>
#include <boost/asio.hpp>
#include <charconv>
#include <chrono>
#include <cstring>
#include <list>
#include <stdexcept>
#include <thread>

#include "moesim/calibrate/net_protocol.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using net::FrameHeader;
using net::FrameParse;
using net::FrameStatus;
using net::FrameType;
using net::kFrameHeaderBytes;

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::nanoseconds to_ns(double s) {
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(s, 1e6) * 1e9));
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
std::string seconds_text(double s) { return text::printf("%g s", s); }
std::string size_text(std::uint64_t b) { return size_label(b); }

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

IoFailure classify(const error_code& ec) {
  if (ec == asio::error::eof) return IoFailure::Eof;
  if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe || ec == asio::error::connection_aborted)
    return IoFailure::Reset;
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) return IoFailure::Aborted;
  return IoFailure::Other;
}

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
void send_error_and_close(Channel& ch, tcp::socket& socket, const std::string& message, bool linger = true) {
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

}  // namespace

// ------------------------------------------------------------------------------------------------------
// Host and port

HostPort parse_host_port(const std::string& text_in, const std::string& flag) {
  HostPort hp;
  std::string port;
  const std::string& t = text_in;
  const auto bad = [&](const std::string& why) {
    return UserError(flag + " " + t + ": " + why + "; write HOST:PORT, e.g. 127.0.0.1:5201, myhost:5201 or [::1]:5201");
  };
  if (!t.empty() && t.front() == '[') {
    const auto close = t.find(']');
    if (close == std::string::npos || close + 1 >= t.size() || t[close + 1] != ':')
      throw bad("an IPv6 address in [] needs a port after ']:'");
    hp.host = t.substr(1, close - 1);
    port = t.substr(close + 2);
  } else {
    const auto colon = t.rfind(':');
    if (colon == std::string::npos) {
      port = t;  // a bare port: loopback
    } else {
      if (t.find(':') != colon) throw bad("an IPv6 address goes in brackets");
      hp.host = t.substr(0, colon);
      port = t.substr(colon + 1);
    }
  }
  if (hp.host.empty()) hp.host = "127.0.0.1";
  unsigned value = 0;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    throw bad("the port '" + port + "' is not a number from 0 to 65535");
  }
  hp.port = static_cast<std::uint16_t>(value);
  return hp;
}

// ------------------------------------------------------------------------------------------------------
// Server

namespace {

/// Where a session stands for eviction. Pending -> Handshaken (its thread, on a valid Hello) and Pending ->
/// Evicted (the accept loop, when every slot is taken and a newcomer arrives) race; a compare-exchange makes
/// exactly one of them win, so a client that completed its handshake is never evicted.
enum class SessionState : int { Pending, Handshaken, Evicted };

struct Session {
  asio::io_context io;
  tcp::socket socket{io};
  std::string peer;
  Clock::time_point connected;  ///< when the accept completed: the handshake's deadline counts from it
  std::atomic<bool> done{false};
  std::atomic<SessionState> state{SessionState::Pending};
  /// Session thread only (the thread that runs `io`): it is telling an evicted peer why, and the eviction's
  /// cancel must not abort that.
  bool telling_evicted = false;

  /// From any thread: closes the socket inside the session's own loop, aborting what it waits for.
  void stop() {
    asio::post(io, [this] {
      error_code ignored;
      socket.close(ignored);
    });
  }
  /// Pending -> Handshaken; false when the accept loop evicted it first.
  bool claim_slot() {
    auto expected = SessionState::Pending;
    return state.compare_exchange_strong(expected, SessionState::Handshaken);
  }
  /// From the accept loop: Pending -> Evicted, and abort what the session waits for (it then sends an Error
  /// frame and ends); false when it completed its handshake first.
  bool evict() {
    auto expected = SessionState::Pending;
    if (!state.compare_exchange_strong(expected, SessionState::Evicted)) return false;
    asio::post(io, [this] {
      error_code ignored;
      if (!telling_evicted) socket.cancel(ignored);
    });
    return true;
  }
  [[nodiscard]] bool evicted() const { return state == SessionState::Evicted; }
};

struct Counters {
  std::atomic<std::uint64_t> accepted{0}, served{0}, pings{0}, refused_busy{0}, evicted{0}, protocol_errors{0},
      oversize{0}, vanished{0}, timeouts{0}, handshake_timeouts{0}, expired{0}, active{0};
};

}  // namespace

struct PingPongServer::Impl {
  ServerOptions opt;
  std::ostream* log;
  std::mutex log_mu;
  asio::io_context io;  // the accept loop
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_timer{io};
  std::atomic<bool> stopping{false};
  std::atomic<bool> had_client{false};
  bool accept_timed_out = false;
  Counters n;
  std::mutex sessions_mu;
  struct Slot {
    std::shared_ptr<Session> session;
    std::thread thread;
  };
  std::list<Slot> sessions;
  std::string endpoint;
  std::uint16_t port = 0;

  void log_line(const std::string& line) {
    if (!log) return;
    std::lock_guard<std::mutex> lock(log_mu);
    *log << "moesim calibrate net: " << line << "\n" << std::flush;
  }

  void bind() {
    const HostPort hp = parse_host_port(opt.listen, "--listen");
    tcp::resolver resolver(io);
    error_code ec;
    const auto results =
        resolver.resolve(hp.host, std::to_string(hp.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) {
      throw UserError("--listen " + opt.listen + ": cannot resolve '" + hp.host + "' (" + ec.message() +
                      "); give an address of this host, e.g. 127.0.0.1 or 0.0.0.0");
    }
    for (const auto& entry : results) {
      acceptor.open(entry.endpoint().protocol(), ec);
      if (ec) continue;
      acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor.bind(entry.endpoint(), ec);
      if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
      if (!ec) break;
      error_code ignored;
      acceptor.close(ignored);
    }
    if (!acceptor.is_open()) {
      std::string why = ec ? ec.message() : "no address";
      std::string fix = "pick another address or port (port 0 picks a free one)";
      if (ec == asio::error::address_in_use) {
        fix = "stop the other server or pick another port (port 0 picks a free one)";
      } else if (ec == boost::system::errc::address_not_available) {
        fix = hp.host + " is not an address of this host; give one of its addresses, 127.0.0.1 or 0.0.0.0";
      } else if (ec == asio::error::access_denied) {
        fix = "ports below 1024 need root; pick a port of 1024 or more";
      }
      throw UserError("--listen " + opt.listen + ": cannot listen (" + why + "); " + fix);
    }
    const auto ep = acceptor.local_endpoint();
    port = ep.port();
    endpoint = ep.address().is_v6() ? "[" + ep.address().to_string() + "]:" + std::to_string(port)
                                    : ep.address().to_string() + ":" + std::to_string(port);
  }

  /// Closes the acceptor and the timer from inside the accept loop; run() then returns once sessions end.
  void stop_accepting() {
    error_code ignored;
    acceptor.close(ignored);
    accept_timer.cancel();
  }

  void reap(bool all) {
    std::list<Slot> finished;
    {
      std::lock_guard<std::mutex> lock(sessions_mu);
      for (auto it = sessions.begin(); it != sessions.end();) {
        if (all || it->session->done) {
          finished.splice(finished.end(), sessions, it++);
        } else {
          ++it;
        }
      }
    }
    for (auto& s : finished) {
      if (s.thread.joinable()) s.thread.join();
    }
  }

  void start_accept() {
    auto session = std::make_shared<Session>();
    acceptor.async_accept(session->socket, [this, session](const error_code& ec) { on_accept(session, ec); });
  }

  void on_accept(const std::shared_ptr<Session>& session, const error_code& ec) {
    if (ec == asio::error::operation_aborted || stopping || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: say so, and try again shortly rather than spin.
      log_line("accept failed (" + ec.message() + "); retrying");
      auto retry = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
      retry->async_wait([this, retry](const error_code& e) {
        if (!e && acceptor.is_open()) start_accept();
      });
      return;
    }
    ++n.accepted;
    session->connected = Clock::now();  // before its thread starts, which then only reads it
    reap(false);
    error_code pe;
    const auto remote = session->socket.remote_endpoint(pe);
    session->peer =
        pe ? std::string("unknown peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
    session->socket.set_option(tcp::no_delay(true), pe);
    if (!take_slot(*session)) {
      ++n.refused_busy;
      log_line(session->peer + ": refused, " + std::to_string(opt.max_connections) +
               " clients are being served already (--max-connections)");
      const std::string text = "server busy: it serves " + std::to_string(opt.max_connections) +
                               " clients at once (--max-connections); try again when one is done";
      const auto h = header(FrameType::Error, 0, text.size());
      // A fresh socket's send buffer takes a small frame without blocking.
      std::array<asio::const_buffer, 2> bufs = {asio::buffer(h), asio::buffer(text)};
      asio::write(session->socket, bufs, pe);
      session->socket.shutdown(tcp::socket::shutdown_send, pe);
      session->socket.close(pe);
    } else {
      ++n.active;
      std::lock_guard<std::mutex> lock(sessions_mu);
      sessions.push_back(Slot{session, std::thread([this, session] { session_main(session); })});
    }
    start_accept();
  }

  /// Whether `newcomer` may have a slot. Every slot taken: the connection that has waited longest without
  /// completing its handshake is evicted to make room (so idle or trickling connections cannot lock out a
  /// client that speaks at once); when every slot holds a handshaken client, false (refused as busy).
  bool take_slot(const Session& newcomer) {
    std::shared_ptr<Session> victim;
    {
      std::lock_guard<std::mutex> lock(sessions_mu);
      std::vector<std::shared_ptr<Session>> pending;
      std::size_t occupied = 0;
      for (const auto& slot : sessions) {
        const auto& s = slot.session;
        if (s->done || s->evicted()) continue;  // its slot is free, or being given up
        ++occupied;
        if (s->state == SessionState::Pending) pending.push_back(s);
      }
      if (occupied < opt.max_connections) return true;
      std::sort(pending.begin(), pending.end(),
                [](const auto& a, const auto& b) { return a->connected < b->connected; });
      for (const auto& s : pending) {
        if (s->evict()) {
          victim = s;
          break;
        }
      }
    }
    if (!victim) return false;
    ++n.evicted;
    log_line(victim->peer + ": evicted after " + text::printf("%.1f s", since(victim->connected)) +
             " without completing the handshake, to make room for " + newcomer.peer + " (all " +
             std::to_string(opt.max_connections) + " --max-connections slots were taken)");
    return true;
  }

  void session_main(const std::shared_ptr<Session>& s) {
    bool handshaken = false;
    try {
      handshaken = serve(*s);
    } catch (const std::exception& e) {
      log_line(s->peer + ": internal error: " + e.what() + "; closed");
    }
    error_code ignored;
    s->socket.close(ignored);
    --n.active;
    s->done = true;
    if (opt.once && handshaken) asio::post(io, [this] { stop_accepting(); });
  }

  /// Serves one client; true when it completed the handshake.
  bool serve(Session& s) {
    Channel ch(s.io, s.socket, to_ns(opt.timeout_s));
    FrameReader rd;
    bool handshaken = false;
    std::uint64_t pings = 0, largest = 0;
    std::string stage = "its Hello frame";
    // Every frame, each way, is under one deadline over all its reads or its write: the Hello within
    // --handshake-timeout of connecting (or --timeout when that is shorter), each later frame within --timeout
    // of the server starting to wait for it (idle time included), each answer within --timeout. `limit_s` and
    // `limit_flag` say which bound the current frame is under, for the log line and the Error frame.
    const bool handshake_binds = opt.handshake_timeout_s < opt.timeout_s;
    double limit_s = handshake_binds ? opt.handshake_timeout_s : opt.timeout_s;
    const char* limit_flag = handshake_binds ? "--handshake-timeout" : "--timeout";
    bool writing = false;  // the deadline that passes is on a frame the server sends, not one it reads
    ch.set_deadline(s.connected + to_ns(limit_s));
    const auto next_frame = [&](bool write) {
      limit_s = opt.timeout_s;
      limit_flag = "--timeout";
      writing = write;
      ch.set_deadline(Clock::now() + to_ns(opt.timeout_s));
    };
    // Evicted by the accept loop (every slot taken, a newcomer, this connection still short of a Hello): tell
    // the peer why, without a linger (it sent nothing left unread), and free the thread at once.
    const auto tell_evicted = [&] {
      s.telling_evicted = true;
      send_error_and_close(ch, s.socket,
                           "evicted: this server was full (--max-connections " + std::to_string(opt.max_connections) +
                               ") and this connection had not completed the moesim handshake after " +
                               text::printf("%.1f s", since(s.connected)) +
                               "; connect again and send Hello at once (calibrate/NET.md)",
                           false);
      return false;
    };
    const auto protocol_error = [&](const std::string& what, const std::string& tell) {
      ++n.protocol_errors;
      log_line(s.peer + ": " + what + "; closed");
      send_error_and_close(ch, s.socket, tell);
      return handshaken;
    };
    const auto judge = [&](const FrameParse& p) -> std::optional<bool> {
      switch (p.status) {
        case FrameStatus::Ok:
        case FrameStatus::NeedMore:
          return std::nullopt;
        case FrameStatus::BadMagic:
          return protocol_error(
              "sent bytes that are not the moesim ping-pong protocol ('" + net::printable_prefix(rd.pending()) + "')",
              "this is a moesim calibrate net server; it speaks the moesim ping-pong protocol "
              "(calibrate/NET.md), not what was sent");
        case FrameStatus::BadVersion:
          return protocol_error("speaks ping-pong protocol version " + std::to_string(p.header.version),
                                "this server speaks moesim ping-pong protocol version " +
                                    std::to_string(net::kProtocolVersion) + ", the client version " +
                                    std::to_string(p.header.version) + "; run the same moesim version on both sides");
        case FrameStatus::BadType:
          return protocol_error("sent a frame of unknown type", "unknown frame type");
        case FrameStatus::TooLarge:
          if (p.header.type == FrameType::Ping) {
            ++n.oversize;
            log_line(s.peer + ": asked to echo " + size_text(p.header.length) + ", over --max-message " +
                     size_text(opt.max_message) + "; sent an error and closed");
            send_error_and_close(
                ch, s.socket,
                "a ping of " + size_text(p.header.length) + " exceeds this server's --max-message of " +
                    size_text(opt.max_message) +
                    "; lower the client's --max-size or restart the server with a larger --max-message");
            return handshaken;
          }
          return protocol_error(std::string("sent a ") + net::frame_type_name(p.header.type) + " frame of " +
                                    std::to_string(p.header.length) + " bytes (at most " + std::to_string(p.limit) +
                                    ")",
                                "frame too long");
      }
      return std::nullopt;
    };
    try {
      FrameParse p = rd.next_header(ch, opt.max_message);
      if (auto r = judge(p)) return *r;
      if (p.header.type != FrameType::Hello) {
        return protocol_error(std::string("sent a ") + net::frame_type_name(p.header.type) + " frame before Hello",
                              "expected a Hello frame first");
      }
      rd.payload(ch);
      rd.consume();
      if (!s.claim_slot()) return tell_evicted();
      std::array<std::uint8_t, net::kWelcomePayloadBytes> welcome{};
      net::store_u64(welcome.data(), opt.max_message);
      net::store_u64(welcome.data() + 8, static_cast<std::uint64_t>(to_ns(opt.timeout_s).count()));
      const auto h = header(FrameType::Welcome, p.header.sequence, welcome.size());
      writing = true;  // under the handshake's deadline still
      ch.write_all(h.data(), h.size(), welcome.data(), welcome.size());
      handshaken = true;
      had_client = true;
      log_line(s.peer + ": connected");
      const auto started = std::chrono::steady_clock::now();
      for (;;) {
        stage = "its next frame";
        if (std::chrono::steady_clock::now() - started > to_ns(opt.max_session_s)) {
          ++n.expired;
          log_line(s.peer + ": session older than --max-session " + seconds_text(opt.max_session_s) + " after " +
                   std::to_string(pings) + " pings; sent an error and closed");
          send_error_and_close(ch, s.socket,
                               "session ended: this server allows " + seconds_text(opt.max_session_s) +
                                   " per session (--max-session); measure fewer sizes or repeats per run, or "
                                   "restart the server with a larger --max-session");
          return handshaken;
        }
        next_frame(false);
        try {
          p = rd.next_header(ch, opt.max_message);
        } catch (const IoError& e) {
          if (e.kind == IoFailure::Eof && rd.have() == 0) break;  // closed between frames: done
          throw;
        }
        if (auto r = judge(p)) return *r;
        if (p.header.type == FrameType::Bye) break;
        if (p.header.type != FrameType::Ping) {
          return protocol_error(std::string("sent a ") + net::frame_type_name(p.header.type) + " frame mid-session",
                                "expected Ping or Bye");
        }
        stage = "a " + size_text(p.header.length) + " ping";
        rd.payload(ch);
        const auto pong = header(FrameType::Pong, p.header.sequence, p.header.length);
        std::memcpy(rd.frame(), pong.data(), pong.size());
        next_frame(true);
        ch.write_all(rd.frame(), rd.frame_bytes());
        rd.consume();
        ++pings;
        ++n.pings;
        largest = std::max(largest, p.header.length);
      }
    } catch (const IoError& e) {
      if (s.evicted()) return tell_evicted();  // whatever the eviction's cancel interrupted
      switch (e.kind) {
        case IoFailure::Aborted:
          return handshaken;  // stop()
        case IoFailure::Timeout: {
          ++(limit_flag == std::string_view("--timeout") ? n.timeouts : n.handshake_timeouts);
          if (writing) {
            // Part of a frame may have gone out: an Error frame now would not parse at the peer.
            log_line(s.peer + ": did not take the server's answer to " + stage + " within " + seconds_text(limit_s) + " (" +
                     limit_flag + "); closed");
            return handshaken;
          }
          const std::string got = std::to_string(rd.have() + e.done) + " bytes of it received";
          const std::string bound = handshaken ? "a whole frame must arrive within " + seconds_text(limit_s) +
                                                     " of the server waiting for it (" + limit_flag + ")"
                                               : "a whole Hello frame must arrive within " + seconds_text(limit_s) +
                                                     " of connecting (" + limit_flag + ")";
          log_line(s.peer + ": did not send " + stage + " in time: " + bound + ", " + got +
                   "; sent an error and closed");
          send_error_and_close(ch, s.socket, "timed out: " + bound + "; " + got);
          return handshaken;
        }
        case IoFailure::Eof:
        case IoFailure::Reset:
          ++n.vanished;
          if (!handshaken && rd.have() + e.done == 0) {
            log_line(s.peer + ": connected and closed without sending a byte");
            return false;
          }
          log_line(s.peer + ": vanished in the middle of " + stage + " (" +
                   (e.kind == IoFailure::Eof ? std::string("closed") : "reset: " + e.code.message()) + ", " +
                   std::to_string(rd.have() + e.done) + " bytes of it received); closed");
          return handshaken;
        case IoFailure::Other:
          ++n.vanished;
          log_line(s.peer + ": connection failed during " + stage + " (" + e.code.message() + "); closed");
          return handshaken;
      }
    }
    ++n.served;
    log_line(s.peer + ": done, " + std::to_string(pings) + " pings answered, largest " + size_text(largest));
    return true;
  }
};

PingPongServer::PingPongServer(ServerOptions options, std::ostream* log) : impl_(std::make_unique<Impl>()) {
  if (options.max_connections < 1) throw UserError("--max-connections must be at least 1");
  if (!(options.timeout_s > 0)) throw UserError("--timeout must be more than 0 seconds");
  if (!(options.max_session_s > 0)) throw UserError("--max-session must be more than 0 seconds");
  if (!(options.handshake_timeout_s > 0)) throw UserError("--handshake-timeout must be more than 0 seconds");
  impl_->opt = std::move(options);
  impl_->log = log;
  impl_->bind();
}

PingPongServer::~PingPongServer() {
  stop();
  impl_->reap(true);
}

std::string PingPongServer::local_endpoint() const { return impl_->endpoint; }
std::uint16_t PingPongServer::port() const { return impl_->port; }

void PingPongServer::run() {
  Impl& m = *impl_;
  if (m.stopping) return;
  m.start_accept();
  if (m.opt.accept_timeout_s > 0) {
    m.accept_timer.expires_after(to_ns(m.opt.accept_timeout_s));
    m.accept_timer.async_wait([&m](const error_code& ec) {
      if (ec || m.had_client) return;
      m.accept_timed_out = true;
      m.stop_accepting();
    });
  }
  m.io.run();
  // Accepting is over (stop(), --once, or the accept timeout): end the sessions still running.
  {
    std::lock_guard<std::mutex> lock(m.sessions_mu);
    for (auto& s : m.sessions) s.session->stop();
  }
  m.reap(true);
  if (m.accept_timed_out) {
    throw UserError("no client completed the handshake within " + seconds_text(m.opt.accept_timeout_s) + " of listening on " +
                    m.endpoint + " (--accept-timeout); start the client with --connect " + m.endpoint +
                    " or raise --accept-timeout");
  }
}

void PingPongServer::stop() {
  Impl& m = *impl_;
  if (m.stopping.exchange(true)) return;
  asio::post(m.io, [&m] { m.stop_accepting(); });
  std::lock_guard<std::mutex> lock(m.sessions_mu);
  for (auto& s : m.sessions) s.session->stop();
}

ServerStats PingPongServer::stats() const {
  const Counters& c = impl_->n;
  ServerStats s;
  s.accepted = c.accepted;
  s.served = c.served;
  s.pings = c.pings;
  s.refused_busy = c.refused_busy;
  s.evicted = c.evicted;
  s.protocol_errors = c.protocol_errors;
  s.oversize = c.oversize;
  s.vanished = c.vanished;
  s.timeouts = c.timeouts;
  s.handshake_timeouts = c.handshake_timeouts;
  s.expired = c.expired;
  s.active = c.active;
  return s;
}

// ------------------------------------------------------------------------------------------------------
// Client

namespace {

class Client {
 public:
  Client(const std::string& connect, double timeout_s) : timeout_s_(timeout_s), ch_(io_, socket_, to_ns(timeout_s)) {
    const HostPort hp = parse_host_port(connect, "--connect");
    if (hp.port == 0)
      throw UserError("--connect " + connect + ": port 0 is not a server's port; give the port it listens on");
    peer_ = connect;
    tcp::resolver resolver(io_);
    error_code ec;
    const auto results = resolver.resolve(hp.host, std::to_string(hp.port), tcp::resolver::numeric_service, ec);
    if (ec) {
      throw UserError("--connect " + connect + ": cannot resolve host '" + hp.host + "' (" + ec.message() +
                      "); check the name or give an IP address");
    }
    ec = asio::error::would_block;
    asio::async_connect(socket_, results, [&ec](const error_code& e, const tcp::endpoint&) { ec = e; });
    io_.restart();
    io_.run_for(to_ns(timeout_s));
    if (ec == asio::error::would_block) {
      error_code ignored;
      socket_.close(ignored);
      io_.restart();
      io_.run();
      throw UserError("no answer from " + connect + " within " + seconds_text(timeout_s) +
                      " (connect timed out); check the address, the route and any firewall, or raise --timeout");
    }
    if (ec == asio::error::connection_refused) {
      throw UserError("nothing is listening on " + connect +
                      " (connection refused); start the server there first with `moesim calibrate net --listen " +
                      connect + "`, or fix the port of --connect");
    }
    if (ec) {
      throw UserError("cannot connect to " + connect + " (" + ec.message() +
                      "); check the address and the route, and that the server is running");
    }
    socket_.set_option(tcp::no_delay(true), ec);
    handshake();
  }

  [[nodiscard]] std::uint64_t server_max_message() const { return server_max_; }

  SizeSamples measure(std::uint64_t bytes, const PingPongOptions& o) {
    if (payload_.size() < bytes) {
      payload_.resize(bytes);
      for (std::size_t i = 0; i < payload_.size(); ++i) payload_[i] = static_cast<std::uint8_t>((i * 131 + 7) & 0xffu);
    }
    SizeSamples s;
    s.bytes = bytes;
    const auto start = Clock::now();
    const std::size_t warmup = std::max<std::size_t>(o.warmup, 1);
    for (std::size_t i = 0; i < warmup; ++i) {
      double send = 0;
      ping(bytes, send, i == 0);
      if (since(start) > o.time_per_size_s / 2) break;
    }
    const auto timed = Clock::now();
    while (s.rtt_s.size() < std::max<std::size_t>(o.max_repeats, 1) &&
           (s.rtt_s.size() < o.min_repeats || since(timed) < o.time_per_size_s)) {
      double send = 0;
      s.rtt_s.push_back(ping(bytes, send, false));
      s.send_s.push_back(send);
    }
    return s;
  }

  void bye() {
    const auto h = header(FrameType::Bye, ++seq_, 0);
    try {
      ch_.write_all(h.data(), h.size());
    } catch (const IoError&) {
      // The measurement is complete; a server that left first changes nothing.
    }
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  [[noreturn]] void not_moesim(const std::string& detail) {
    throw UserError(peer_ + " " + detail +
                    "; is the server `moesim calibrate net --listen` (the same moesim version)?");
  }

  void handshake() {
    const auto hello = header(FrameType::Hello, 0, 0);
    FrameParse p;
    try {
      ch_.write_all(hello.data(), hello.size());
    } catch (const IoError& e) {
      // A server that refused us (busy) may have closed before our Hello arrived: its Error frame can still
      // be waiting to be read, so read on unless the deadline passed.
      if (e.kind == IoFailure::Timeout) {
        not_moesim("accepted the connection but did not take the moesim handshake within " + seconds_text(timeout_s_));
      }
    }
    try {
      p = rd_.next_header(ch_, 0);
    } catch (const IoError& e) {
      if (e.kind == IoFailure::Timeout)
        not_moesim("accepted the connection but did not answer the moesim handshake within " + seconds_text(timeout_s_));
      if (rd_.have() == 0) not_moesim("closed the connection without answering the moesim handshake");
      not_moesim("closed the connection in the middle of its answer (got bytes '" +
                 net::printable_prefix(rd_.pending()) + "')");
    }
    if (p.status == FrameStatus::BadMagic) {
      throw UserError(peer_ + " answered with something that is not the moesim ping-pong protocol (got bytes '" +
                      net::printable_prefix(rd_.pending()) + "'); is the server `moesim calibrate net --listen`?");
    }
    if (p.status == FrameStatus::BadVersion) {
      throw UserError(peer_ + " speaks moesim ping-pong protocol version " + std::to_string(p.header.version) +
                      " and this moesim speaks version " + std::to_string(net::kProtocolVersion) +
                      "; run the same moesim version on both sides");
    }
    if (p.status != FrameStatus::Ok) not_moesim("answered with a malformed moesim frame");
    std::span<std::uint8_t> body;
    try {
      body = rd_.payload(ch_);
    } catch (const IoError&) {
      not_moesim("closed the connection in the middle of its handshake answer");
    }
    if (p.header.type == FrameType::Error) {
      throw UserError(peer_ + " refused the connection: " + std::string(body.begin(), body.end()));
    }
    if (p.header.type != FrameType::Welcome || body.size() < net::kWelcomePayloadBytes) {
      not_moesim(std::string("answered the Hello with a ") + net::frame_type_name(p.header.type) + " frame");
    }
    server_max_ = net::load_u64(body.data());
    rd_.consume();
  }

  /// One timed round trip of `bytes`; returns the RTT in seconds, `send` gets the write call's time.
  double ping(std::uint64_t bytes, double& send, bool verify) {
    const std::uint64_t seq = ++seq_;
    const auto h = header(FrameType::Ping, seq, bytes);
    std::span<std::uint8_t> body;
    FrameParse p;
    const auto t0 = Clock::now();
    try {
      ch_.write_all(h.data(), h.size(), payload_.data(), static_cast<std::size_t>(bytes));
      const auto t1 = Clock::now();
      send = std::chrono::duration<double>(t1 - t0).count();
      p = rd_.next_header(ch_, server_max_);
      if (p.status == FrameStatus::Ok) body = rd_.payload(ch_);
    } catch (const IoError& e) {
      if (e.kind == IoFailure::Timeout) {
        throw UserError("no answer from " + peer_ + " within " + seconds_text(timeout_s_) + " to a " + size_text(bytes) +
                        " ping; raise --timeout (a slow link needs size / bandwidth seconds) or lower --max-size");
      }
      throw UserError(peer_ + " closed the connection during a " + size_text(bytes) + " ping (" + e.code.message() +
                      ", after " + std::to_string(seq - 1) + " pings); see the server's log");
    }
    const double rtt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (p.status != FrameStatus::Ok) not_moesim("sent a malformed frame in answer to a ping");
    if (p.header.type == FrameType::Error) {
      throw UserError(peer_ + " refused a " + size_text(bytes) + " ping: " + std::string(body.begin(), body.end()));
    }
    if (p.header.type != FrameType::Pong || p.header.sequence != seq || p.header.length != bytes) {
      not_moesim("answered ping " + std::to_string(seq) + " of " + std::to_string(bytes) + " bytes with a " +
                 net::frame_type_name(p.header.type) + " frame of " + std::to_string(p.header.length) +
                 " bytes, sequence " + std::to_string(p.header.sequence));
    }
    if (verify && !std::equal(body.begin(), body.end(), payload_.begin())) {
      not_moesim("echoed different bytes than it was sent for a " + size_text(bytes) + " ping");
    }
    rd_.consume();
    return rtt;
  }

  double timeout_s_;
  asio::io_context io_;
  tcp::socket socket_{io_};
  Channel ch_;
  FrameReader rd_;
  std::string peer_;
  std::uint64_t server_max_ = 0;
  std::uint64_t seq_ = 0;
  std::vector<std::uint8_t> payload_;
};

}  // namespace

NetResult run_pingpong(const std::string& connect, const PingPongOptions& o, Progress& progress) {
  if (o.sizes.empty()) throw UserError("--sizes: no message sizes to measure; give e.g. --sizes pow4");
  if (!(o.timeout_s > 0)) throw UserError("--timeout must be more than 0 seconds");
  const auto t0 = Clock::now();
  NetResult r;
  r.transport = "tcp";
  r.peer = connect;
  // No progress line before the handshake: a refused connection is one line on stderr, nothing else.
  Client client(connect, o.timeout_s);
  r.server_max_message = client.server_max_message();
  const std::uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  if (largest > r.server_max_message) {
    throw UserError("--sizes: " + size_text(largest) + " exceeds the --max-message of the server at " + connect + " (" +
                    size_text(r.server_max_message) + "); lower --max-size or restart the server with " +
                    "--max-message " + std::to_string(largest));
  }
  std::vector<std::uint64_t> sizes = o.sizes;
  std::sort(sizes.begin(), sizes.end());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    progress.update(static_cast<double>(i) / static_cast<double>(sizes.size()),
                    "ping-pong " + size_text(sizes[i]) + " with " + connect);
    r.sizes.push_back(client.measure(sizes[i], o));
  }
  client.bye();
  r.fit = fit_hockney(r.sizes);
  if (!r.sizes.front().send_s.empty()) r.send_overhead_s = sample_stats(r.sizes.front().send_s).median;
  r.wall_s = since(t0);
  progress.done(std::to_string(sizes.size()) + " sizes with " + connect);
  return r;
}

NetResult run_loopback(const PingPongOptions& o, Progress& progress) {
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.max_message = o.sizes.empty() ? 1 : *std::max_element(o.sizes.begin(), o.sizes.end());
  so.timeout_s = o.timeout_s;
  so.max_connections = 1;
  PingPongServer server(so, nullptr);
  std::exception_ptr server_error;
  std::thread thread([&] {
    try {
      server.run();
    } catch (...) {
      server_error = std::current_exception();
    }
  });
  NetResult r;
  try {
    r = run_pingpong(server.local_endpoint(), o, progress);
  } catch (...) {
    server.stop();
    thread.join();
    throw;
  }
  server.stop();
  thread.join();
  if (server_error) std::rethrow_exception(server_error);
  r.loopback = true;
  return r;
}

}  // namespace moesim::calibrate
