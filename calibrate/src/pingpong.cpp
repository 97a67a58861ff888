// The TCP ping-pong of `moesim calibrate net`: host:port, the client and the loopback run (calibrate/NET.md).
//
// Both ends do their socket I/O through Channel: an Asio operation started on the end's own io_context and
// run with io_context::run_for(deadline), so every read, write and connect has a deadline without a timer
// per operation (the pattern of Asio's blocking_tcp_client example). The server runs one such io_context
// per client thread, so one slow or hostile client never delays another.
// The server is pingpong_server.cpp, Channel and FrameReader pingpong_detail.hpp.

#include "moesim/calibrate/pingpong.hpp"

#include <algorithm>
#include <boost/asio.hpp>
#include <charconv>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "moesim/calibrate/net_protocol.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "pingpong_detail.hpp"

namespace moesim::calibrate {

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
// Client

namespace pingpong_detail {

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
        not_moesim("accepted the connection but did not answer the moesim handshake within " +
                   seconds_text(timeout_s_));
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
        throw UserError("no answer from " + peer_ + " within " + seconds_text(timeout_s_) + " to a " +
                        size_text(bytes) +
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

}  // namespace pingpong_detail

NetResult run_pingpong(const std::string& connect, const PingPongOptions& o, Progress& progress) {
  if (o.sizes.empty()) throw UserError("--sizes: no message sizes to measure; give e.g. --sizes pow4");
  if (!(o.timeout_s > 0)) throw UserError("--timeout must be more than 0 seconds");
  const auto t0 = pingpong_detail::Clock::now();
  NetResult r;
  r.transport = "tcp";
  r.peer = connect;
  // No progress line before the handshake: a refused connection is one line on stderr, nothing else.
  pingpong_detail::Client client(connect, o.timeout_s);
  r.server_max_message = client.server_max_message();
  const std::uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  if (largest > r.server_max_message) {
    throw UserError("--sizes: " + pingpong_detail::size_text(largest) + " exceeds the --max-message of the server at " +
                    connect + " (" + pingpong_detail::size_text(r.server_max_message) +
                    "); lower --max-size or restart the server with " + "--max-message " + std::to_string(largest));
  }
  std::vector<std::uint64_t> sizes = o.sizes;
  std::sort(sizes.begin(), sizes.end());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    progress.update(static_cast<double>(i) / static_cast<double>(sizes.size()),
                    "ping-pong " + pingpong_detail::size_text(sizes[i]) + " with " + connect);
    r.sizes.push_back(client.measure(sizes[i], o));
  }
  client.bye();
  r.fit = fit_hockney(r.sizes);
  if (!r.sizes.front().send_s.empty()) r.send_overhead_s = sample_stats(r.sizes.front().send_s).median;
  r.wall_s = pingpong_detail::since(t0);
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
