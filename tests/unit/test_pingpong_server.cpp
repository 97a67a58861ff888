// The ping-pong server of `moesim calibrate net` (calibrate/pingpong.hpp) against clients that misbehave: one
// that connects and vanishes, one that sends garbage, one that asks for an oversize message, one that stalls
// past the timeout, one that vanishes mid-message, one too many. After each, the server must still serve a
// good client. The server runs in a thread of this process on 127.0.0.1:0; the bad clients are raw POSIX
// sockets, so they can do what the real client never would.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "../test_support.hpp"
#include "moesim/calibrate/net_protocol.hpp"
#include "moesim/calibrate/pingpong.hpp"
#include "moesim/model/error.hpp"

namespace {

using namespace moesim::calibrate;
using net::FrameType;

/// Waits (polling every 2 ms) until `done` holds, for at most 20 s; the bound only stops a broken server from
/// hanging the suite, it is not a timing assertion.
bool eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done();
}

/// A raw TCP client socket.
class RawClient {
 public:
  explicit RawClient(std::uint16_t port) : fd_(moesim::test::connect_loopback(port)), ok_(fd_ >= 0) {}
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::vector<std::uint8_t>& b) {
    return ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  bool send(const std::string& s) { return send(std::vector<std::uint8_t>(s.begin(), s.end())); }
  /// Reads until `n` bytes, EOF, an error or 20 s; returns what came.
  std::vector<std::uint8_t> recv(std::size_t n) {
    std::vector<std::uint8_t> out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (out.size() < n && std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      std::uint8_t buf[4096];
      const ssize_t k = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (k <= 0) break;
      out.insert(out.end(), buf, buf + k);
    }
    return out;
  }
  /// True when the server closed the connection (EOF or reset) within 20 s, after any bytes it sent.
  bool closed_by_peer() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      std::uint8_t buf[4096];
      const ssize_t k = ::recv(fd_, buf, sizeof buf, 0);
      if (k <= 0) return true;
    }
    return false;
  }
  /// True when the server has sent something (or closed) within `ms` milliseconds.
  bool readable(int ms) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }
  /// Reads one frame (header and payload): its type and payload as text.
  std::pair<FrameType, std::string> frame() {
    const auto h = recv(net::kFrameHeaderBytes);
    if (h.size() < net::kFrameHeaderBytes) return {FrameType::Bye, "<no frame>"};
    const auto p = net::parse_frame_header(h, 1u << 30);
    if (p.status != net::FrameStatus::Ok) return {FrameType::Bye, "<bad frame>"};
    const auto body = recv(static_cast<std::size_t>(p.header.length));
    return {p.header.type, std::string(body.begin(), body.end())};
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

std::vector<std::uint8_t> frame_bytes(FrameType t, std::uint64_t length, std::uint64_t seq = 0) {
  net::FrameHeader h;
  h.type = t;
  h.length = length;
  h.sequence = seq;
  const auto a = net::encode_frame_header(h);
  return {a.begin(), a.end()};
}

/// Tiny, fast measurement options for the good client.
PingPongOptions quick() {
  PingPongOptions o;
  o.sizes = {1, 64, 4096, 65536};
  o.max_repeats = 5;
  o.min_repeats = 3;
  o.warmup = 1;
  o.time_per_size_s = 0;
  o.timeout_s = 10;
  return o;
}

/// A server on 127.0.0.1:0 in a thread: max message 1 MiB, a 300 ms deadline per frame, 2 clients at once (the
/// handshake's own deadline, 3 s by default, is then longer than the frame's, so the frame's binds).
class ServerFixture : public ::testing::Test {
 protected:
  void start(std::size_t max_connections = 2, double max_session_s = 900, double timeout_s = 0.3,
             double handshake_timeout_s = ServerOptions{}.handshake_timeout_s) {
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.max_message = 1u << 20;
    so.timeout_s = timeout_s;
    so.handshake_timeout_s = handshake_timeout_s;
    so.max_connections = max_connections;
    so.max_session_s = max_session_s;
    server_ = std::make_unique<PingPongServer>(so, &log_);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  std::uint16_t port() const { return server_->port(); }
  /// A good client's whole run; the server must answer every ping.
  void good_client_is_served() {
    const auto before = server_->stats().served;
    Progress quiet = Progress::quiet();
    const NetResult r = run_pingpong(server_->local_endpoint(), quick(), quiet);
    ASSERT_EQ(r.sizes.size(), 4u);
    EXPECT_GE(r.sizes[0].rtt_s.size(), 3u);
    EXPECT_GT(r.fit.latency_s, 0);
    EXPECT_TRUE(eventually([&] { return server_->stats().served == before + 1; }));
  }
  /// The log, once the server has stopped writing to it.
  std::string log_text() {
    TearDown();
    return log_.str();
  }

  std::ostringstream log_;
  std::unique_ptr<PingPongServer> server_;
  std::thread thread_;
};

// A client that connects and closes without a byte costs the server one log line.
TEST_F(ServerFixture, SurvivesAClientThatVanishes) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.ok());
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().vanished == 1; }));
  good_client_is_served();
  EXPECT_NE(log_text().find("connected and closed without sending a byte"), std::string::npos) << log_.str();
}

// An HTTP request gets an Error frame that says what this server is, then the connection closes.
TEST_F(ServerFixture, SurvivesGarbage) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    const auto [type, text] = c.frame();
    EXPECT_EQ(type, FrameType::Error);
    EXPECT_NE(text.find("moesim ping-pong protocol"), std::string::npos) << text;
    EXPECT_TRUE(c.closed_by_peer());
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().protocol_errors == 1; }));
  good_client_is_served();
  EXPECT_NE(log_text().find("not the moesim ping-pong protocol ('G"), std::string::npos) << log_.str();
}

// A ping of 2^63 bytes (over --max-message 1 MiB) is refused before anything is allocated, with an Error frame
// naming the limit.
TEST_F(ServerFixture, RefusesAnOversizeMessage) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send(frame_bytes(FrameType::Hello, 0)));
    EXPECT_EQ(c.frame().first, FrameType::Welcome);
    ASSERT_TRUE(c.send(frame_bytes(FrameType::Ping, 1ull << 63, 1)));
    const auto [type, text] = c.frame();
    EXPECT_EQ(type, FrameType::Error);
    EXPECT_NE(text.find("--max-message of 1 MiB"), std::string::npos) << text;
    EXPECT_TRUE(c.closed_by_peer());
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().oversize == 1; }));
  good_client_is_served();
}

// Half a header, then silence: the server drops the client after its 300 ms deadline (the client sees the
// connection close; no assertion on how long it took).
TEST_F(ServerFixture, DropsAClientThatStalls) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.ok());
  auto hello = frame_bytes(FrameType::Hello, 0);
  hello.resize(10);
  ASSERT_TRUE(c.send(hello));
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_TRUE(eventually([&] { return server_->stats().timeouts == 1; }));
  good_client_is_served();
  EXPECT_NE(log_text().find("--timeout"), std::string::npos) << log_.str();
}

// A client that keeps pinging inside every per-frame deadline (one ping every 0.1 s, under the 0.3 s timeout)
// cannot hold the server forever: past --max-session (0.5 s here) its next frame gets an Error frame naming the
// limit, the connection closes, and the next client is served.
TEST_F(ServerFixture, EndsASessionPastMaxSession) {
  start(2, 0.5);
  {
    RawClient c(port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send(frame_bytes(FrameType::Hello, 0)));
    ASSERT_EQ(c.frame().first, FrameType::Welcome);
    std::pair<FrameType, std::string> reply{FrameType::Pong, ""};
    int pongs = 0;
    for (std::uint64_t seq = 1; seq < 200 && reply.first == FrameType::Pong; ++seq) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto ping = frame_bytes(FrameType::Ping, 4, seq);
      ping.insert(ping.end(), {'a', 'b', 'c', 'd'});
      if (!c.send(ping)) break;
      reply = c.frame();
      if (reply.first == FrameType::Pong) ++pongs;
    }
    EXPECT_GE(pongs, 1);
    EXPECT_EQ(reply.first, FrameType::Error);
    EXPECT_NE(reply.second.find("--max-session"), std::string::npos) << reply.second;
    EXPECT_TRUE(c.closed_by_peer());
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().expired == 1; }));
  EXPECT_EQ(server_->stats().timeouts, 0u);
  EXPECT_NE(log_text().find("older than --max-session"), std::string::npos) << log_.str();
}

// A client that announces 1000 bytes, sends 100 and closes: one log line, then the next client.
TEST_F(ServerFixture, SurvivesAClientThatVanishesMidMessage) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send(frame_bytes(FrameType::Hello, 0)));
    EXPECT_EQ(c.frame().first, FrameType::Welcome);
    auto ping = frame_bytes(FrameType::Ping, 1000, 1);
    ping.resize(ping.size() + 100, 0x55);
    ASSERT_TRUE(c.send(ping));
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().vanished == 1; }));
  good_client_is_served();
  EXPECT_NE(log_text().find("124 bytes of it received"), std::string::npos) << log_.str();
}

// Another protocol version is told which version the server speaks.
TEST_F(ServerFixture, RefusesAnotherVersion) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.ok());
    auto hello = frame_bytes(FrameType::Hello, 0);
    hello[5] = 9;
    ASSERT_TRUE(c.send(hello));
    const auto [type, text] = c.frame();
    EXPECT_EQ(type, FrameType::Error);
    EXPECT_NE(text.find("version 1, the client version 9"), std::string::npos) << text;
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().protocol_errors == 1; }));
  good_client_is_served();
}

// With --max-connections 1, a second client is refused with "server busy" while the first holds its
// connection (the real client reports it as a UserError); once the first leaves, the next is served.
TEST_F(ServerFixture, BoundsConcurrentClients) {
  start(1);
  auto first = std::make_unique<RawClient>(port());
  ASSERT_TRUE(first->ok());
  ASSERT_TRUE(first->send(frame_bytes(FrameType::Hello, 0)));
  EXPECT_EQ(first->frame().first, FrameType::Welcome);
  Progress quiet = Progress::quiet();
  try {
    run_pingpong(server_->local_endpoint(), quick(), quiet);
    ADD_FAILURE() << "a second client was served with --max-connections 1";
  } catch (const moesim::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("server busy"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_->stats().refused_busy, 1u);
  first->send(frame_bytes(FrameType::Bye, 0));
  first.reset();
  EXPECT_TRUE(eventually([&] { return server_->stats().active == 0; }));
  good_client_is_served();
}

/// A client that completed its handshake (Hello, then the server's Welcome) and then does what the test says.
std::unique_ptr<RawClient> handshaken_client(std::uint16_t port) {
  auto c = std::make_unique<RawClient>(port);
  EXPECT_TRUE(c->ok());
  EXPECT_TRUE(c->send(frame_bytes(FrameType::Hello, 0)));
  EXPECT_EQ(c->frame().first, FrameType::Welcome);
  return c;
}

/// Sends `bytes` one at a time, `every` apart, until the server answers or closes (then returns what it sent)
/// or every byte is out (then returns bytes.size()). Bounded: at most bytes.size() sends.
std::size_t trickle(RawClient& c, const std::vector<std::uint8_t>& bytes, std::chrono::milliseconds every) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (c.readable(static_cast<int>(every.count()))) return i;
    if (!c.send(std::vector<std::uint8_t>{bytes[i]})) return i;
  }
  return bytes.size();
}

/// A Ping frame of `length` payload bytes.
std::vector<std::uint8_t> ping_frame(std::uint64_t length, std::uint64_t seq) {
  std::vector<std::uint8_t> ping(net::kFrameHeaderBytes + length, 0x5a);
  const auto h = frame_bytes(FrameType::Ping, length, seq);
  std::copy(h.begin(), h.end(), ping.begin());
  return ping;
}

// A client that trickles a ping one byte per 100 ms keeps every single read well inside the 300 ms deadline,
// but the whole frame (88 bytes: 8.8 s) cannot arrive within it: the server cuts it off at the frame's deadline
// with an Error frame naming --timeout, long before the frame is complete. (The margins are wide: the cut
// comes after about 3 bytes; the test fails only if the server waits for most of the frame.)
TEST_F(ServerFixture, CutsOffATricklingClientAtTheFrameDeadline) {
  start();
  auto c = handshaken_client(port());
  const auto frame = ping_frame(64, 1);
  const std::size_t sent = trickle(*c, frame, std::chrono::milliseconds(100));
  EXPECT_LT(sent, frame.size() / 2) << "the server let a trickled frame run far past --timeout";
  const auto [type, text] = c->frame();
  EXPECT_EQ(type, FrameType::Error);
  EXPECT_NE(text.find("a whole frame must arrive within 0.3 s"), std::string::npos) << text;
  EXPECT_NE(text.find("(--timeout)"), std::string::npos) << text;
  EXPECT_TRUE(c->closed_by_peer());
  EXPECT_TRUE(eventually([&] { return server_->stats().timeouts == 1; }));
  EXPECT_EQ(server_->stats().handshake_timeouts, 0u);
  good_client_is_served();
  EXPECT_NE(log_text().find("did not send its next frame in time"), std::string::npos) << log_.str();
}

// The same before the handshake: a Hello trickled a byte per 100 ms (2.4 s for 24 bytes) is cut off at
// --handshake-timeout (0.5 s here, under the 10 s --timeout), counted apart from frame timeouts.
TEST_F(ServerFixture, CutsOffATricklingHandshake) {
  start(2, 900, 10, 0.5);
  RawClient c(port());
  ASSERT_TRUE(c.ok());
  const auto hello = frame_bytes(FrameType::Hello, 0);
  const std::size_t sent = trickle(c, hello, std::chrono::milliseconds(100));
  EXPECT_LT(sent, hello.size()) << "the server let a trickled Hello run past --handshake-timeout";
  const auto [type, text] = c.frame();
  EXPECT_EQ(type, FrameType::Error);
  EXPECT_NE(text.find("within 0.5 s of connecting (--handshake-timeout)"), std::string::npos) << text;
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_TRUE(eventually([&] { return server_->stats().handshake_timeouts == 1; }));
  EXPECT_EQ(server_->stats().timeouts, 0u);
  good_client_is_served();
}

// Every slot taken (2): one client that completed its handshake and one connection that never sent a byte;
// the deadlines are long (10 s, 30 s), so only eviction can make room. A newcomer evicts the silent one (it
// gets an Error frame saying why) and is served; the handshaken client is untouched and still answered.
TEST_F(ServerFixture, EvictsTheOldestConnectionWithoutAHandshake) {
  start(2, 900, 10, 30);
  auto handshaken = handshaken_client(port());
  RawClient silent(port());
  ASSERT_TRUE(silent.ok());
  ASSERT_TRUE(eventually([&] { return server_->stats().active == 2; }));
  good_client_is_served();
  EXPECT_EQ(server_->stats().evicted, 1u);
  EXPECT_EQ(server_->stats().refused_busy, 0u);
  const auto [type, text] = silent.frame();
  EXPECT_EQ(type, FrameType::Error);
  EXPECT_NE(text.find("evicted: this server was full (--max-connections 2)"), std::string::npos) << text;
  EXPECT_TRUE(silent.closed_by_peer());
  ASSERT_TRUE(handshaken->send(ping_frame(4, 1)));
  EXPECT_EQ(handshaken->frame().first, FrameType::Pong);
  EXPECT_NE(log_text().find("evicted after"), std::string::npos) << log_.str();
}

// The lockout this guards against: four hostile connections take every slot of a server with the default
// --max-connections (4) and long deadlines (--timeout 10 s, --handshake-timeout 3 s): one that never sends,
// one that trickles a Hello a byte per second, one that completes its handshake and then announces an
// oversize ping and holds the connection without reading, one that sends half a Hello and stalls. A real
// client must still be served, within 2 s of connecting (a tolerant bound: refused or made to wait for a
// deadline, it would fail; served, it takes milliseconds even under a sanitizer).
TEST_F(ServerFixture, ServesARealClientPastFourHostileOnes) {
  const std::size_t slots = std::min<std::size_t>(ServerOptions{}.max_connections, 4);
  start(slots, 900, 10, ServerOptions{}.handshake_timeout_s);
  RawClient idle(port());
  ASSERT_TRUE(idle.ok());
  RawClient trickler(port());
  ASSERT_TRUE(trickler.ok());
  // A jthread: stopped and joined when the test ends, also when an ASSERT below returns early.
  std::jthread trickling([&trickler](const std::stop_token& stop) {
    const auto hello = frame_bytes(FrameType::Hello, 0);
    for (std::size_t i = 0; i < hello.size() && !stop.stop_requested(); ++i) {
      if (!trickler.send(std::vector<std::uint8_t>{hello[i]})) return;
      for (int t = 0; t < 100 && !stop.stop_requested(); ++t)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  auto oversize = handshaken_client(port());
  ASSERT_TRUE(oversize->send(frame_bytes(FrameType::Ping, 1ull << 40, 1)));
  RawClient stalled(port());
  ASSERT_TRUE(stalled.ok());
  auto half_hello = frame_bytes(FrameType::Hello, 0);
  half_hello.resize(12);
  ASSERT_TRUE(stalled.send(half_hello));
  ASSERT_TRUE(eventually([&] { return server_->stats().accepted == 4; }));

  const auto t0 = std::chrono::steady_clock::now();
  Progress quiet = Progress::quiet();
  NetResult r;
  try {
    r = run_pingpong(server_->local_endpoint(), quick(), quiet);
  } catch (const moesim::UserError& e) {
    ADD_FAILURE() << "the real client was not served: " << e.what();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  trickling.request_stop();
  EXPECT_EQ(r.sizes.size(), 4u);
  EXPECT_LT(waited, 2.0) << "the real client was served only after " << waited << " s";
  EXPECT_EQ(server_->stats().refused_busy, 0u);
  EXPECT_TRUE(eventually([&] { return server_->stats().served == 1; }));
  // The oversize ping was refused at its header, whatever else happened.
  const auto [type, text] = oversize->frame();
  EXPECT_EQ(type, FrameType::Error);
  EXPECT_NE(text.find("--max-message of 1 MiB"), std::string::npos) << text;
  EXPECT_EQ(server_->stats().oversize, 1u);
}

// The real client against a port nobody listens on, and against a server that answers in another protocol:
// each a UserError that says what happened and what to do.
TEST(PingPongClient, ClosedPortAndForeignPeerAreUserErrors) {
  // A port that was free a moment ago (bound, then closed).
  std::uint16_t closed = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    closed = ntohs(a.sin_port);
    ::close(fd);
  }
  Progress quiet = Progress::quiet();
  try {
    run_pingpong("127.0.0.1:" + std::to_string(closed), quick(), quiet);
    ADD_FAILURE() << "no error";
  } catch (const moesim::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing is listening on 127.0.0.1:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--listen"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_pingpong("127.0.0.1:99999", quick(), quiet), moesim::UserError);
}

// Both ends in one process: every size measured, positive latency and bandwidth.
TEST(PingPongClient, LoopbackRunMeasuresEverySize) {
  Progress quiet = Progress::quiet();
  const NetResult r = run_loopback(quick(), quiet);
  EXPECT_TRUE(r.loopback);
  ASSERT_EQ(r.sizes.size(), 4u);
  for (const auto& s : r.sizes) EXPECT_GE(s.rtt_s.size(), 3u);
  EXPECT_GT(r.fit.latency_s, 0);
  EXPECT_GT(r.fit.bandwidth, 0);
  ASSERT_TRUE(r.send_overhead_s.has_value());
  EXPECT_EQ(r.server_max_message, 65536u);
}

TEST(PingPongClient, HostPortParsing) {
  EXPECT_EQ(parse_host_port("10.0.0.1:5201", "--connect").host, "10.0.0.1");
  EXPECT_EQ(parse_host_port("10.0.0.1:5201", "--connect").port, 5201);
  EXPECT_EQ(parse_host_port("[::1]:7", "--connect").host, "::1");
  EXPECT_EQ(parse_host_port("5201", "--listen").host, "127.0.0.1");
  EXPECT_EQ(parse_host_port(":0", "--listen").port, 0);
  EXPECT_THROW(parse_host_port("host:", "--connect"), moesim::UserError);
  EXPECT_THROW(parse_host_port("host:http", "--connect"), moesim::UserError);
  EXPECT_THROW(parse_host_port("::1:80", "--connect"), moesim::UserError);
}

}  // namespace
