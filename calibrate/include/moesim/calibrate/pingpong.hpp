#pragma once
// `moesim calibrate net`: a TCP ping-pong between two processes or hosts over Boost.Asio, and the NIC
// profile fitted to it (calibrate/NET.md).
//
//   server:  PingPongServer s(ServerOptions{.listen = "0.0.0.0:5201"}, &std::cerr); s.run();
//   client:  NetResult r = run_pingpong("hostA:5201", PingPongOptions{}, progress);
//   both in one process over loopback (what `moesim calibrate all` uses):
//            NetResult r = run_loopback(PingPongOptions{}, progress);
//            nlohmann::json profile = nic_profile_json(r, current_provenance(cmd), "my-nic", "...");
//
// The protocol is in net_protocol.hpp, the Hockney fit in net_fit.hpp, the MPI variant in mpi_bench.hpp.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/calibrate/net_fit.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"

namespace moesim::calibrate {

/// The default message sizes: 1 B, 4 B, 16 B, ... 64 MiB (powers of 4: 14 sizes, 7 / 3 / 4 per band).
std::vector<std::uint64_t> default_message_sizes(std::uint64_t max_bytes = 64u << 20);

/// Message sizes from a flag: "pow4" (the default set), "pow2" (1 B ... 64 MiB, 27 sizes), "small" (powers
/// of 4 up to 64 KiB, for quick tests), or a comma list of sizes ("1,64,4KiB,1MiB"; a bare number is
/// bytes). Capped at `max_bytes`. UserError naming `flag` on anything else.
std::vector<std::uint64_t> parse_message_sizes(const std::string& text, std::uint64_t max_bytes,
                                               const std::string& flag = "--sizes");

/// How the client measures (the defaults keep a loopback run to about two seconds).
struct PingPongOptions {
  std::vector<std::uint64_t> sizes = default_message_sizes();
  std::size_t max_repeats = 1000;  ///< timed pings per size at most
  std::size_t min_repeats = 5;     ///< timed pings per size at least, whatever the time budget
  std::size_t warmup = 3;          ///< untimed pings per size first (connection and caches warm)
  double time_per_size_s = 0.15;   ///< stop timing a size after this long once min_repeats are done
  double timeout_s = 10;           ///< per read/write/connect deadline
};

/// What one ping-pong (TCP) or MPI run measured, and its fit.
struct NetResult {
  std::string transport;  ///< "tcp" or "mpi"
  std::string peer;       ///< "127.0.0.1:5201", or "rank 0 <-> rank 1"
  bool loopback = false;  ///< both ends in this process over 127.0.0.1
  std::vector<SizeSamples> sizes;
  HockneyFit fit;
  /// LogP's sender overhead o (Culler et al., "LogP: towards a realistic model of parallel computation",
  /// PPoPP 1993; measured as the time of the send call, Culler et al. 1996 "LogP performance assessment of
  /// fast network interfaces"): the median time of the write call for the smallest size. TCP only.
  std::optional<double> send_overhead_s;
  std::uint64_t server_max_message = 0;  ///< TCP: what the server's Welcome said
  double wall_s = 0;                     ///< the whole run, seconds
  /// MPI only: collective timings (mpi_bench.hpp).
  nlohmann::json collectives;
  int ranks = 2;
};

// ------------------------------------------------------------------------------------------------------
// Server

struct ServerOptions {
  std::string listen = "127.0.0.1:5201";  ///< ADDR:PORT (port 0: any free port)
  std::uint64_t max_message = 64u << 20;  ///< largest Ping payload accepted, bytes
  /// Deadline of each whole frame, seconds: a frame the client sends must arrive in full within it of the
  /// server starting to wait for it (the idle time before it included), however its bytes trickle in; a frame
  /// the server sends must be taken within it. Past it: an Error frame naming --timeout, and the connection
  /// closes.
  double timeout_s = 10;
  /// The handshake's deadline, seconds from the accept: the Hello must arrive whole within it (or within
  /// `timeout_s` when that is shorter). 3 s: a real client sends Hello as soon as it connects, which takes
  /// half a round trip (well under a second even between continents), plus 1 s if that packet is lost and
  /// resent after TCP's initial retransmission timeout (RFC 6298); a connection that says nothing holds a
  /// slot for no longer than this.
  double handshake_timeout_s = 3;
  /// Clients served at once. When every slot is taken, a newcomer evicts the connection that has waited
  /// longest without completing its handshake (it gets an Error frame); when every slot holds a client that
  /// completed its handshake, the newcomer is refused with an Error frame ("server busy").
  std::size_t max_connections = 4;
  /// A session's longest life, seconds: past it the server ends the session with an Error frame at the next
  /// frame boundary. With `timeout_s` (each frame) and `max_message` (each frame's size) it bounds what one
  /// client can take from a shared server. A default client run takes a few seconds.
  double max_session_s = 900;
  bool once = false;            ///< run() returns after the first client that completed the handshake
  double accept_timeout_s = 0;  ///< run() fails if no client completes a handshake in this long (0: wait)
};

/// What a server has seen (for logs and tests).
struct ServerStats {
  std::uint64_t accepted = 0;            ///< connections accepted
  std::uint64_t served = 0;              ///< clients that completed the handshake and left cleanly
  std::uint64_t pings = 0;               ///< pings answered
  std::uint64_t refused_busy = 0;        ///< refused: --max-connections clients that completed the handshake
  std::uint64_t evicted = 0;             ///< closed before their handshake to make room for a newcomer
  std::uint64_t protocol_errors = 0;     ///< garbage, wrong version, unexpected frames
  std::uint64_t oversize = 0;            ///< pings longer than --max-message
  std::uint64_t vanished = 0;            ///< closed or reset mid-frame or mid-handshake
  std::uint64_t timeouts = 0;            ///< a frame (either way) past --timeout
  std::uint64_t handshake_timeouts = 0;  ///< no whole Hello within --handshake-timeout of connecting
  std::uint64_t expired = 0;             ///< sessions ended at --max-session
  std::uint64_t active = 0;              ///< sessions running now
};

/// A ping-pong server: one thread per client (at most max_connections), every frame under a deadline, the
/// handshake under a shorter one. A client that vanishes, stalls, trickles, sends garbage or an oversize frame
/// costs one line on `log` and its connection, never the server; connections that have not completed their
/// handshake give up their slot to a newcomer, so they cannot lock a well-behaved client out.
class PingPongServer {
 public:
  /// Binds and listens now (so local_endpoint() knows the port); UserError if it cannot. `log` (may be
  /// null) gets one line per notable event; it is written under a lock.
  PingPongServer(ServerOptions options, std::ostream* log);
  ~PingPongServer();
  PingPongServer(const PingPongServer&) = delete;
  PingPongServer& operator=(const PingPongServer&) = delete;

  /// "127.0.0.1:40123": the bound address with the actual port.
  [[nodiscard]] std::string local_endpoint() const;
  [[nodiscard]] std::uint16_t port() const;

  /// Serves until stop() (from any thread), or after one client with `once`. Joins its sessions before it
  /// returns. UserError if accept_timeout_s passes without a client.
  void run();
  /// Stops accepting and closes every session; run() returns soon after. Thread-safe, idempotent.
  void stop();

  [[nodiscard]] ServerStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// ------------------------------------------------------------------------------------------------------
// Client

/// Connects to `connect` ("HOST:PORT"), does the handshake, pings every size of `options`, says Bye and
/// fits. UserError (one line: the peer, what went wrong, how to fix it) for an unresolvable host, a closed
/// port, a timeout, a peer that speaks another protocol, or a size above the server's --max-message.
NetResult run_pingpong(const std::string& connect, const PingPongOptions& options, Progress& progress);

/// A server on 127.0.0.1:0 in a thread and the client against it, in this process.
NetResult run_loopback(const PingPongOptions& options, Progress& progress);

// ------------------------------------------------------------------------------------------------------
// Results

/// The results as JSON (`--json`): per size the RTT statistics, one-way time and bandwidth; the band fits
/// with R² and residuals. `max_raw_rtts` bounds the raw RTTs kept per size (evenly thinned beyond it).
nlohmann::json net_result_json(const NetResult& r, std::size_t max_raw_rtts = 200);

/// A NIC profile in the hwprofiles/ format (kind "nic"): latency = the smallest band's intercept, bandwidth =
/// 1 / the largest band's slope, overhead = the send call's median time when known and not above latency;
/// every figure's source is measured_source(provenance, ...); "calibration" holds the provenance, the raw
/// samples, the band fits and the command. Loads with model::load_nic.
nlohmann::json nic_profile_json(const NetResult& r, const Provenance& provenance, const std::string& id,
                                const std::string& name);

/// Plain-text report with units (µs, GB/s): per-size table, band fits, the profile's figures.
void print_net_result(const NetResult& r, std::ostream& out);

/// "HOST:PORT" split into host and port; IPv6 literals as "[::1]:5201". A bare port means 127.0.0.1.
/// UserError naming `flag` when malformed.
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};
HostPort parse_host_port(const std::string& text, const std::string& flag);

}  // namespace moesim::calibrate
