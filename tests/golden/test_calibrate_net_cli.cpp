// `moesim calibrate net` end to end through the built binary: the bad peers of the calibration issue (a closed
// port, a peer that speaks another protocol: one line, exit 2), a loopback run whose --out profile loads, a
// server process and a client process, the same between two network namespaces joined by a veth pair (as
// root), and the MPI variant under mpirun. Sizes, repeats and time per size are kept small: the suite runs
// twice in CI, once under sanitizers, on 2 cores.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../test_support.hpp"
#include "cli_support.hpp"
#include "moesim/model/hardware.hpp"

namespace {

namespace fs = std::filesystem;
using moesim::test::kBin;
using moesim::test::Run;
using moesim::test::Scratch;
using moesim::test::slurp;

/// Small, quick measurement flags for every client run in this file.
const std::string kQuick = " --repeats 20 --min-repeats 3 --warmup 1 --time-per-size 0.01 --quiet";

/// A child process (`sh -c "exec CMD"`) whose stderr we read as it comes; killed if still running at the end.
class Spawned {
 public:
  explicit Spawned(const std::string& cmd) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      const std::string line = "exec " + cmd;
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~Spawned() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  /// Reads stderr until it holds `needle` (true), or EOF or 60 s (false).
  bool read_until(const std::string& needle) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (err.find(needle) == std::string::npos && std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t k = ::read(fd_, buf, sizeof buf);
      if (k <= 0) break;
      err.append(buf, static_cast<std::size_t>(k));
    }
    return err.find(needle) != std::string::npos;
  }
  /// The "ADDR:PORT" of a "listening on ADDR:PORT" line.
  std::string listening_on() {
    if (!read_until(")\n")) return "";
    const auto at = err.find("listening on ");
    if (at == std::string::npos) return "";
    const auto from = at + std::string("listening on ").size();
    return err.substr(from, err.find(' ', from) - from);
  }
  /// Waits up to 60 s for the exit code (-1 if it did not exit, or was killed); reads the rest of stderr.
  int wait() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        read_until("\x01");  // drain to EOF
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  std::string err;

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
};

/// A port that was free a moment ago (bound to 127.0.0.1, then closed).
std::uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// A tiny TCP server that answers every connection with an HTTP response, reads until the client closes,
/// and closes: "a peer that speaks another protocol".
class HttpPeer {
 public:
  HttpPeer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    ::listen(fd_, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 60000) <= 0) return;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
      (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      char buf[256];
      for (;;) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 60000) <= 0 || ::recv(c, buf, sizeof buf, 0) <= 0) break;
      }
      ::close(c);
    });
  }
  ~HttpPeer() {
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  HttpPeer(const HttpPeer&) = delete;
  HttpPeer& operator=(const HttpPeer&) = delete;
  std::uint16_t port = 0;

 private:
  int fd_ = -1;
  std::thread thread_;
};

// Nothing listens: one line saying so and how to start a server; exit 2, nothing on stdout.
TEST(CalibrateNetCli, ClosedPortIsOneLine) {
  const std::string peer = "127.0.0.1:" + std::to_string(closed_port());
  moesim::test::expect_bad_input({"closed port",
                                  "calibrate net --connect " + peer,
                                  {"nothing is listening on " + peer, "moesim calibrate net --listen"}});
}

// An HTTP server where the ping-pong server should be: recognised from its first bytes.
TEST(CalibrateNetCli, PeerSpeakingAnotherProtocolIsOneLine) {
  HttpPeer http;
  const std::string peer = "127.0.0.1:" + std::to_string(http.port);
  moesim::test::expect_bad_input(
      {"http peer",
       "calibrate net --connect " + peer,
       {peer + " answered with something that is not the moesim ping-pong protocol (got bytes 'HTTP/1.1')",
        "is the server `moesim calibrate net --listen`?"}});
}

TEST(CalibrateNetCli, BadFlagsAreOneLine) {
  const std::vector<moesim::test::BadInput> cases = {
      {"two modes", "calibrate net --connect 127.0.0.1:1 --listen", {"different modes"}},
      {"client flag on server", "calibrate net --listen 127.0.0.1:0 --out x.json", {"--out", "client option"}},
      {"server flag on client", "calibrate net --connect 127.0.0.1:1 --once", {"--once", "server option"}},
      {"one size", "calibrate net --sizes 64", {"--sizes", "at least 2 message sizes"}},
      {"size over max", "calibrate net --sizes 1,2MiB --max-size 1MiB", {"--sizes '2MiB'", "--max-size"}},
      {"bad size", "calibrate net --sizes 1,lots", {"--sizes 'lots'"}},
      {"zero timeout", "calibrate net --timeout 0", {"--timeout"}},
      {"zero handshake timeout",
       "calibrate net --listen 127.0.0.1:0 --handshake-timeout 0",
       {"--handshake-timeout 0", "above 0"}},
      {"server timeout on client",
       "calibrate net --connect 127.0.0.1:1 --handshake-timeout 5",
       {"--handshake-timeout", "server option"}},
      {"bad port", "calibrate net --connect 127.0.0.1:http", {"--connect 127.0.0.1:http", "port"}},
      {"bad listen", "calibrate net --listen 127.0.0.1:70000", {"--listen 127.0.0.1:70000"}},
      {"foreign address",
       "calibrate net --listen 192.0.2.1:0",
       {"--listen 192.0.2.1:0", "not an address of this host"}},
      {"missing out dir", "calibrate net --out /nonexistent-dir/x.json", {"--out", "does not exist"}},
  };
  for (const auto& c : cases) moesim::test::expect_bad_input(c);
}

// Both ends in one process: the JSON has every size and a fit, and --out is a NIC profile moesim loads, with
// the calibration data beside the figures.
TEST(CalibrateNetCli, LoopbackWritesAProfileThatLoads) {
  Scratch s("moesim_net_cli");
  const auto r = s.moesim("calibrate net --sizes 1,64,1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,2MiB,4MiB --json --out " +
                          s.path("lo-nic.json") + kQuick);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // --quiet
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["transport"], "tcp");
  EXPECT_EQ(j["loopback"], true);
  ASSERT_EQ(j["sizes"].size(), 10u);
  for (const auto& sz : j["sizes"]) {
    EXPECT_GE(sz["repeats"].get<int>(), 3);
    EXPECT_GT(sz["rtt_s"]["median"].get<double>(), 0);
  }
  ASSERT_EQ(j["fit"]["bands"].size(), 3u);
  EXPECT_EQ(j["fit"]["latency"]["unit"], "s");
  EXPECT_GT(j["fit"]["latency"]["value"].get<double>(), 0);
  EXPECT_GT(j["fit"]["bandwidth"]["value"].get<double>(), 0);
  const auto nic = moesim::model::load_nic(s.path("lo-nic.json"));
  EXPECT_EQ(nic.id, "lo-nic");
  EXPECT_NEAR(nic.latency.value.base(), j["fit"]["latency"]["value"].get<double>(),
              1e-3 * j["fit"]["latency"]["value"].get<double>());
  EXPECT_NE(nic.latency.source.find("measured by `moesim calibrate net --sizes"), std::string::npos);
  const auto profile = nlohmann::json::parse(slurp(s.path("lo-nic.json")));
  EXPECT_EQ(profile["kind"], "nic");
  EXPECT_TRUE(profile["calibration"].contains("provenance"));
  EXPECT_EQ(profile["calibration"]["sizes"].size(), 10u);
  // The profile works where a NIC id does (simulate: a measured NIC has no price, so not `estimate`).
  const auto sim = s.moesim("simulate --nic " + s.path("lo-nic.json") + " --tokens 20");
  EXPECT_EQ(sim.code, 0) << sim.err;
}

/// A TCP connection to 127.0.0.1:port that sends nothing (closed when destroyed): a client that never speaks.
class SilentConnection {
 public:
  explicit SilentConnection(std::uint16_t port) : ok(false), fd_(moesim::test::connect_loopback(port)) {
    ok = fd_ >= 0;
  }
  ~SilentConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentConnection(const SilentConnection&) = delete;
  SilentConnection& operator=(const SilentConnection&) = delete;
  bool ok = false;

 private:
  int fd_ = -1;
};

// A server process with one slot (--max-connections 1) and a long --handshake-timeout, taken by a connection
// that never speaks: the client process is served anyway (the silent connection is evicted, and the server
// says so on stderr), and the server's --json stats count it.
TEST(CalibrateNetCli, ServerEvictsASilentConnectionForAClient) {
  Scratch s("moesim_net_cli_evict");
  Spawned server(kBin +
                 " calibrate net --listen 127.0.0.1:0 --once --accept-timeout 60 --max-connections 1"
                 " --handshake-timeout 60 --max-message 1MiB --json >" +
                 s.path("server.out"));
  const std::string at = server.listening_on();
  ASSERT_FALSE(at.empty()) << server.err;
  SilentConnection silent(static_cast<std::uint16_t>(std::stoi(at.substr(at.rfind(':') + 1))));
  ASSERT_TRUE(silent.ok);
  // The kernel queues connections in order, so the server accepts the silent one first.
  const auto c = s.moesim("calibrate net --connect " + at + " --sizes small" + kQuick);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(server.wait(), 0) << server.err;
  EXPECT_NE(server.err.find("without completing the handshake, to make room for"), std::string::npos) << server.err;
  const auto stats = nlohmann::json::parse(slurp(s.path("server.out")));
  EXPECT_EQ(stats.at("served"), 1) << stats.dump();
  EXPECT_EQ(stats.at("evicted"), 1) << stats.dump();
  EXPECT_EQ(stats.at("refused_busy"), 0) << stats.dump();
  EXPECT_EQ(stats.at("handshake_timeouts"), 0) << stats.dump();
}

// A server process (--listen on port 0, --once) and a client process: the server prints its port on stderr,
// the client prints a table with units, the server exits after that one client.
TEST(CalibrateNetCli, ServerAndClientProcesses) {
  Scratch s("moesim_net_cli");
  Spawned server(kBin + " calibrate net --listen 127.0.0.1:0 --once --accept-timeout 60 --max-message 1MiB >" +
                 s.path("server.out"));
  const std::string at = server.listening_on();
  ASSERT_FALSE(at.empty()) << server.err;
  const auto c = s.moesim("calibrate net --connect " + at + " --sizes small" + kQuick);
  ASSERT_EQ(c.code, 0) << c.err;
  for (const char* want :
       {"TCP ping-pong with ", "RTT median µs", "one-way GB/s", "Hockney fit", "NIC profile: latency"}) {
    EXPECT_NE(c.out.find(want), std::string::npos) << want << " in\n" << c.out;
  }
  EXPECT_EQ(server.wait(), 0) << server.err;
  EXPECT_NE(slurp(s.path("server.out")).find("served 1 client(s)"), std::string::npos) << slurp(s.path("server.out"));
  EXPECT_NE(slurp(s.path("server.out")).find("evicted 0 (no handshake, slot needed)"), std::string::npos)
      << slurp(s.path("server.out"));
  EXPECT_NE(server.err.find(": done, "), std::string::npos) << server.err;
}

/// Two network namespaces joined by a veth pair, named after this process; deleted at the end (which deletes
/// the veth pair with them).
class VethPair {
 public:
  VethPair() {
    const auto pid = std::to_string(::getpid());
    a = "moesim-a-" + pid;
    b = "moesim-b-" + pid;
    const std::string va = "mva" + pid, vb = "mvb" + pid;  // interface names: at most 15 characters
    const std::string net = "10.77." + std::to_string(::getpid() % 250 + 1);
    addr_a = net + ".1";
    addr_b = net + ".2";
    const std::string cmd = "ip netns add " + a + " && ip netns add " + b + " && ip link add " + va +
                            " type veth peer name " + vb + " && ip link set " + va + " netns " + a +
                            " && ip link set " + vb + " netns " + b + " && ip -n " + a + " addr add " + addr_a +
                            "/24 dev " + va + " && ip -n " + b + " addr add " + addr_b + "/24 dev " + vb +
                            " && ip -n " + a + " link set " + va + " up && ip -n " + b + " link set " + vb +
                            " up && ip -n " + a + " link set lo up && ip -n " + b + " link set lo up";
    const std::string log = (fs::temp_directory_path() / ("moesim_veth_" + pid + ".log")).string();
    ok = std::system((cmd + " >" + log + " 2>&1").c_str()) == 0;
    error = slurp(log);
    fs::remove(log);
  }
  ~VethPair() {
    (void)std::system(("ip netns del " + a + " >/dev/null 2>&1; ip netns del " + b + " >/dev/null 2>&1").c_str());
  }
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;
  std::string a, b, addr_a, addr_b, error;
  bool ok = false;
};

// Server in one namespace, client in the other, over a veth pair: a real (virtual) link with its own
// addresses. Needs root and iproute2; skipped otherwise.
TEST(CalibrateNetCli, VethBetweenTwoNamespaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces and a veth pair";
  if (std::system("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "no `ip` command (iproute2)";
  Scratch s("moesim_net_cli");
  VethPair veth;
  if (!veth.ok) GTEST_SKIP() << "cannot create network namespaces here: " << veth.error;
  Spawned server("ip netns exec " + veth.a + " " + kBin + " calibrate net --listen " + veth.addr_a +
                 ":0 --once --accept-timeout 60 --max-message 4MiB >" + s.path("server.out"));
  const std::string at = server.listening_on();
  ASSERT_FALSE(at.empty()) << server.err;
  EXPECT_EQ(at.rfind(veth.addr_a + ":", 0), 0u) << at;
  const auto c =
      s.shell("ip netns exec " + veth.b + " " + kBin + " calibrate net --connect " + at +
              " --sizes 1,64,1KiB,4KiB,64KiB,256KiB,1MiB,2MiB,4MiB --json --out " + s.path("veth.json") + kQuick);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(server.wait(), 0) << server.err;
  const auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["loopback"], false);
  EXPECT_EQ(j["peer"], at);
  // Plausible, not precise: a veth link answers within 10 ms and moves more than 10 MB/s.
  const double latency = j["fit"]["latency"]["value"].get<double>();
  const double bandwidth = j["fit"]["bandwidth"]["value"].get<double>();
  EXPECT_GT(latency, 0);
  EXPECT_LT(latency, 10e-3);
  EXPECT_GT(bandwidth, 10e6);
  const auto nic = moesim::model::load_nic(s.path("veth.json"));
  EXPECT_NE(nic.bandwidth.source.find("TCP ping-pong with " + at), std::string::npos) << nic.bandwidth.source;
}

// Under mpirun: rank 0 prints the JSON (rank 1 nothing), with the ping-pong fit and both collectives.
TEST(CalibrateNetCli, MpiPingPongAndCollectives) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun (Open MPI) on this machine";
  Scratch s("moesim_net_cli");
  // Open MPI refuses to run as root without the two OMPI_ALLOW_* variables. Under AddressSanitizer, Open MPI's
  // own allocations at exit are reported as leaks and would fail the ranks, so leak detection is off for this
  // child only (detect_leaks=0); every other check of the sanitizers stays on.
  const auto r = s.shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 timeout 300 "
      "mpirun -np 2 --oversubscribe " +
      kBin + " calibrate net --mpi --sizes small --json --out " + s.path("mpi.json") + kQuick);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);  // one JSON document: rank 1 printed nothing
  EXPECT_EQ(j["transport"], "mpi");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["sizes"].size(), 9u);
  EXPECT_GT(j["fit"]["latency"]["value"].get<double>(), 0);
  EXPECT_FALSE(j["collectives"]["allreduce_f32_sum"].empty());
  EXPECT_FALSE(j["collectives"]["alltoall"].empty());
  EXPECT_EQ(moesim::model::load_nic(s.path("mpi.json")).id, "mpi");
}

// --mpi with one rank (no mpirun: an MPI singleton) says how to run it.
TEST(CalibrateNetCli, MpiWithOneRankIsOneLine) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun (Open MPI) on this machine";
  Scratch s("moesim_net_cli");
  // detect_leaks=0: Open MPI's own allocations at exit (MPI_Init/MPI_Finalize) would fail the run under ASan.
  const auto r = s.shell("ASAN_OPTIONS=detect_leaks=0 " + kBin + " calibrate net --mpi --sizes small");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("needs at least 2 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mpirun -np 2"), std::string::npos) << r.err;
}

}  // namespace
