// The TCP ping-pong's server (`moesim calibrate net --listen`): the accept loop, the slots and eviction of
// clients, and one thread per client session answering its pings.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "moesim/calibrate/pingpong.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "pingpong_detail.hpp"

namespace moesim::calibrate {

namespace pingpong_detail {

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

/// PingPongServer::Impl: the server's state and the code of its accept loop and sessions.
struct ServerImpl {
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

  /// Evicted by the accept loop (every slot taken, a newcomer, this connection still short of a Hello): tell
  /// the peer why, without a linger (it sent nothing left unread), and free the thread at once. False:
  /// serve()'s result for a connection that never completed its handshake.
  bool tell_evicted(Session& s, Channel& ch) {
    s.telling_evicted = true;
    send_error_and_close(ch, s.socket,
                         "evicted: this server was full (--max-connections " + std::to_string(opt.max_connections) +
                             ") and this connection had not completed the moesim handshake after " +
                             text::printf("%.1f s", since(s.connected)) +
                             "; connect again and send Hello at once (calibrate/NET.md)",
                         false);
    return false;
  }

  /// Ends a session whose socket operation failed with `e`: logged, counted, and where the peer can still
  /// read one, an Error frame saying why. serve()'s state at the failure comes along; returns serve()'s result.
  bool on_io_error(Session& s, Channel& ch, const FrameReader& rd, const IoError& e, bool handshaken, bool writing,
                   double limit_s, const char* limit_flag, const std::string& stage) {
    if (s.evicted()) return tell_evicted(s, ch);  // whatever the eviction's cancel interrupted
    switch (e.kind) {
      case IoFailure::Aborted:
        return handshaken;  // stop()
      case IoFailure::Timeout: {
        ++(limit_flag == std::string_view("--timeout") ? n.timeouts : n.handshake_timeouts);
        if (writing) {
          // Part of a frame may have gone out: an Error frame now would not parse at the peer.
          log_line(s.peer + ": did not take the server's answer to " + stage + " within " + seconds_text(limit_s) +
                   " (" + limit_flag + "); closed");
          return handshaken;
        }
        const std::string got = std::to_string(rd.have() + e.done) + " bytes of it received";
        const std::string bound = handshaken ? "a whole frame must arrive within " + seconds_text(limit_s) +
                                                   " of the server waiting for it (" + limit_flag + ")"
                                             : "a whole Hello frame must arrive within " + seconds_text(limit_s) +
                                                   " of connecting (" + limit_flag + ")";
        log_line(s.peer + ": did not send " + stage + " in time: " + bound + ", " + got + "; sent an error and closed");
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
    return handshaken;  // not reached: every case above returns
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
      if (!s.claim_slot()) return tell_evicted(s, ch);
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
      return on_io_error(s, ch, rd, e, handshaken, writing, limit_s, limit_flag, stage);
    }
    ++n.served;
    log_line(s.peer + ": done, " + std::to_string(pings) + " pings answered, largest " + size_text(largest));
    return true;
  }
};

}  // namespace pingpong_detail

struct PingPongServer::Impl : pingpong_detail::ServerImpl {};

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
    m.accept_timer.expires_after(pingpong_detail::to_ns(m.opt.accept_timeout_s));
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
    throw UserError("no client completed the handshake within " +
                    pingpong_detail::seconds_text(m.opt.accept_timeout_s) + " of listening on " + m.endpoint +
                    " (--accept-timeout); start the client with --connect " + m.endpoint +
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
  const pingpong_detail::Counters& c = impl_->n;
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

}  // namespace moesim::calibrate
