// `moesim calibrate net`: the TCP ping-pong (server with --listen, client with --connect, both in this process
// by default) or, under mpirun, the MPI ping-pong and collectives (--mpi). The protocol, the fit and the
// commands are in calibrate/NET.md; the code is in calibrate/pingpong.hpp and calibrate/mpi_bench.hpp. This
// file only parses arguments, calls the libraries and prints.

#include <boost/program_options.hpp>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "moesim/calibrate/mpi_bench.hpp"
#include "moesim/calibrate/pingpong.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

/// Seconds from "10", "10s" or "250ms".
double parse_seconds(const std::string& v, const std::string& flag, bool allow_zero) {
  double s = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
    s = units::parse(v, units::Dimension::Time, flag);
  }
  if (!std::isfinite(s) || s < 0 || (!allow_zero && s == 0)) {
    throw UserError(flag + " " + v + ": give a duration " + (allow_zero ? "of 0 or more" : "above 0") +
                    ", in seconds or with its unit (e.g. 10, 250ms)");
  }
  return s;
}

/// Bytes from "65536" or "64MiB".
std::uint64_t parse_bytes(const std::string& v, const std::string& flag) {
  std::uint64_t b = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), b);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
    const double x = units::parse(v, units::Dimension::Bytes, flag);
    if (!(x >= 1) || x > 1e15 || x != std::floor(x))
      throw UserError(flag + " " + v + ": give a whole size of 1 byte or more, e.g. 64MiB");
    b = static_cast<std::uint64_t>(x);
  }
  if (b == 0) throw UserError(flag + " " + v + ": give a size of 1 byte or more, e.g. 64MiB");
  return b;
}

std::size_t positive(const po::variables_map& vm, const char* key) {
  const auto v = vm[key].as<std::int64_t>();
  if (v < 1) throw UserError(std::string("--") + key + " " + std::to_string(v) + ": give a whole number of 1 or more");
  return static_cast<std::size_t>(v);
}

const char* const kUsage =
    "usage: moesim calibrate net [--connect HOST:PORT | --listen [ADDR:PORT] | --mpi] [options]\n\n"
    "Network latency and bandwidth by ping-pong: the client sends messages of 1 B ... 64 MiB, the server echoes\n"
    "each whole message back; one-way time = RTT / 2. A Hockney line t(m) = o + m / B is fitted per size band\n"
    "(small <= 4 KiB, medium, large >= 1 MiB; each with >= 3 sizes), with R^2 and residuals. The NIC profile\n"
    "(--out) takes latency = the small band's o and bandwidth = 1 / the large band's slope. See calibrate/NET.md.\n\n"
    "modes:\n"
    "  (none)              both ends in this process over 127.0.0.1 (this host's TCP stack, not a NIC)\n"
    "  --listen [ADDR:PORT] serve pings (default 127.0.0.1:5201; 0.0.0.0:5201 for every interface; port 0 picks\n"
    "                      a free one); prints 'listening on ADDR:PORT' on stderr and one line per client\n"
    "  --connect HOST:PORT measure against a server started with --listen\n"
    "  --mpi               under `mpirun -np N`: ping-pong rank 0 <-> 1 over MPI, MPI_Allreduce and MPI_Alltoall\n"
    "                      timings across all ranks; rank 0 prints and writes\n\n"
    "examples:\n"
    "  moesim calibrate net --out loopback.json\n"
    "  moesim calibrate net --listen 0.0.0.0:5201             # on host A\n"
    "  moesim calibrate net --connect hostA:5201 --out my-nic.json   # on host B\n"
    "  mpirun -np 2 --host a,b moesim calibrate net --mpi --out my-mpi-nic.json";

/// The options of `calibrate net`: the client's, the server's (--listen) and the output's.
po::options_description describe_net_options() {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("listen", po::value<std::string>()->implicit_value("127.0.0.1:5201"),
     "server: listen on ADDR:PORT (default 127.0.0.1:5201; another address only when given)")
    ("connect", po::value<std::string>(), "client: the server's HOST:PORT")
    ("mpi", "under mpirun: MPI ping-pong between ranks 0 and 1, all-reduce and all-to-all across all ranks")
    ("sizes", po::value<std::string>()->default_value("pow4"),
     "message sizes: pow4 (1 B, 4 B, ... 64 MiB), pow2, small (pow4 up to 64 KiB) or a list (1,64,4KiB,1MiB)")
    ("max-size", po::value<std::string>()->default_value("64MiB"), "largest message size measured")
    ("repeats", po::value<std::int64_t>()->default_value(1000), "timed pings per size at most")
    ("min-repeats", po::value<std::int64_t>()->default_value(5), "timed pings per size at least")
    ("warmup", po::value<std::int64_t>()->default_value(3), "untimed pings per size first")
    ("time-per-size", po::value<std::string>()->default_value("0.15"),
     "seconds of timed pings per size, once --min-repeats are done")
    ("timeout", po::value<std::string>()->default_value("10"),
     "seconds. client: deadline of the connect and of each read and write; server: each whole frame a client "
     "sends must arrive within it of the server waiting for it (idle time included), and each answer be taken")
    ("handshake-timeout", po::value<std::string>()->default_value("3"),
     "server: seconds from connecting within which a client must send its whole Hello (a real client does at "
     "once); past it, or when a newcomer needs its slot, the connection is closed")
    ("max-message", po::value<std::string>()->default_value("64MiB"),
     "server: largest ping it echoes; larger ones get an error frame")
    ("max-connections", po::value<std::int64_t>()->default_value(4),
     "server: clients served at once (each may hold a buffer of --max-message); a newcomer evicts the oldest "
     "connection that has not completed its handshake, or is refused when every client has")
    ("max-session", po::value<std::string>()->default_value("900"),
     "server: seconds one client's session may last; it then gets an error frame and is closed")
    ("once", "server: exit after the first client that completed the handshake")
    ("accept-timeout", po::value<std::string>()->default_value("0"),
     "server: fail if no client completes a handshake within this many seconds (0: wait forever)")
    ("out", po::value<std::string>(), "write a NIC profile (hwprofiles/ format, with the calibration data) here")
    ("id", po::value<std::string>(), "the profile's id (default: --out's file name without .json)")
    ("name", po::value<std::string>(), "the profile's name")
    ("json", "print the results as JSON")
    ("quiet", "no progress lines on stderr");
  // clang-format on
  return desc;
}

/// --listen: serves pings until stopped (or --once), then prints what it served. Client options are refused.
void serve_pings(const po::variables_map& vm, double timeout, bool json, std::ostream& out) {
  for (const char* k :
       {"out", "id", "name", "sizes", "max-size", "repeats", "min-repeats", "warmup", "time-per-size"}) {
    if (flag_given(vm, k)) {
      throw UserError(std::string("--") + k +
                      " is a client option; the server (--listen) only echoes. Give it to the --connect side");
    }
  }
  calibrate::ServerOptions so;
  so.listen = vm["listen"].as<std::string>();
  so.max_message = parse_bytes(vm["max-message"].as<std::string>(), "--max-message");
  so.timeout_s = timeout;
  so.max_connections = positive(vm, "max-connections");
  so.max_session_s = parse_seconds(vm["max-session"].as<std::string>(), "--max-session", false);
  so.handshake_timeout_s = parse_seconds(vm["handshake-timeout"].as<std::string>(), "--handshake-timeout", false);
  so.once = vm.count("once") > 0;
  so.accept_timeout_s = parse_seconds(vm["accept-timeout"].as<std::string>(), "--accept-timeout", true);
  calibrate::PingPongServer server(so, &std::cerr);
  std::cerr << "moesim calibrate net: listening on " << server.local_endpoint() << " (max message "
            << calibrate::size_label(so.max_message) << ", timeout " << timeout << " s, handshake timeout "
            << so.handshake_timeout_s << " s, " << so.max_connections << " clients at once)" << std::endl;
  server.run();
  const auto st = server.stats();
  if (json) {
    out << nlohmann::json{{"listen", server.local_endpoint()},
                          {"accepted", st.accepted},
                          {"served", st.served},
                          {"pings", st.pings},
                          {"refused_busy", st.refused_busy},
                          {"evicted", st.evicted},
                          {"protocol_errors", st.protocol_errors},
                          {"oversize", st.oversize},
                          {"vanished", st.vanished},
                          {"timeouts", st.timeouts},
                          {"handshake_timeouts", st.handshake_timeouts},
                          {"expired", st.expired}}
               .dump(2)
        << "\n";
  } else {
    out << "served " << st.served << " client(s), " << st.pings << " pings, on " << server.local_endpoint()
        << "; refused " << st.refused_busy << " (busy), evicted " << st.evicted
        << " (no handshake, slot needed), dropped " << st.protocol_errors << " (protocol), " << st.oversize
        << " (oversize), " << st.vanished << " (vanished), " << st.timeouts << " (--timeout), " << st.handshake_timeouts
        << " (--handshake-timeout), " << st.expired << " (--max-session)\n";
  }
}

/// The client's ping-pong options (sizes, repeats, warm-up, time per size). Server options are refused.
calibrate::PingPongOptions client_options_from(const po::variables_map& vm, double timeout) {
  for (const char* k :
       {"max-message", "max-connections", "max-session", "handshake-timeout", "once", "accept-timeout"}) {
    if (flag_given(vm, k)) {
      throw UserError(std::string("--") + k + " is a server option; give it with --listen");
    }
  }
  calibrate::PingPongOptions o;
  const std::uint64_t max_size = parse_bytes(vm["max-size"].as<std::string>(), "--max-size");
  o.sizes = calibrate::parse_message_sizes(vm["sizes"].as<std::string>(), max_size, "--sizes");
  o.max_repeats = positive(vm, "repeats");
  o.min_repeats = std::min(positive(vm, "min-repeats"), o.max_repeats);
  const auto warmup = vm["warmup"].as<std::int64_t>();
  if (warmup < 0) throw UserError("--warmup " + std::to_string(warmup) + ": give 0 or more");
  o.warmup = static_cast<std::size_t>(warmup);
  o.time_per_size_s = parse_seconds(vm["time-per-size"].as<std::string>(), "--time-per-size", true);
  o.timeout_s = timeout;
  return o;
}

/// --out, checked before measuring, not after: the directory must exist. Empty when not given.
std::string checked_out_path(const po::variables_map& vm) {
  std::string out_path;
  if (vm.count("out")) {
    out_path = vm["out"].as<std::string>();
    // Fail before measuring, not after: the directory must exist.
    const auto dir = std::filesystem::path(out_path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      throw UserError("--out " + out_path + ": the directory " + dir.string() + " does not exist; create it first");
    }
  }
  return out_path;
}

/// The NIC profile of the measurement, written to `out_path`: its id is --id or the file's name.
void write_nic_profile(const po::variables_map& vm, const std::string& out_path, const calibrate::NetResult& r,
                       const calibrate::Provenance& prov) {
  std::string id = vm.count("id") ? vm["id"].as<std::string>() : std::filesystem::path(out_path).stem().string();
  if (id.empty()) id = "measured-nic";
  const std::string what = r.transport == "mpi" ? "MPI ping-pong (" + std::to_string(r.ranks) + " ranks)"
                           : r.loopback         ? "TCP over loopback"
                                                : "TCP ping-pong with " + r.peer;
  const std::string name =
      vm.count("name") ? vm["name"].as<std::string>() : what + " measured on " + prov.host + ", " + prov.day;
  write_file_atomically(out_path, calibrate::nic_profile_json(r, prov, id, name).dump(2) + "\n", "--out");
}

}  // namespace

int cmd_calibrate_net(const Args& args, std::ostream& out) {
  const po::options_description desc = describe_net_options();
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out, kUsage)) return 0;
  const int modes =
      static_cast<int>(vm.count("listen")) + static_cast<int>(vm.count("connect")) + static_cast<int>(vm.count("mpi"));
  if (modes > 1) throw UserError("--listen, --connect and --mpi are different modes; give one of them");
  const double timeout = parse_seconds(vm["timeout"].as<std::string>(), "--timeout", false);
  const bool json = vm.count("json") > 0;

  if (vm.count("listen")) {
    serve_pings(vm, timeout, json, out);
    return 0;
  }
  const calibrate::PingPongOptions o = client_options_from(vm, timeout);
  const std::string out_path = checked_out_path(vm);

  calibrate::Progress progress(vm.count("quiet") ? nullptr : &std::cerr);
  progress.set_phase(0, 1, "net");
  calibrate::NetResult r;
  if (vm.count("mpi")) {
    auto res = calibrate::run_mpi_bench(o, progress);
    if (!res) return 0;  // not rank 0: rank 0 reports
    r = std::move(*res);
  } else if (vm.count("connect")) {
    r = calibrate::run_pingpong(vm["connect"].as<std::string>(), o, progress);
  } else {
    r = calibrate::run_loopback(o, progress);
  }

  const auto prov = calibrate::current_provenance(command_line("calibrate net", args));
  if (!out_path.empty()) write_nic_profile(vm, out_path, r, prov);
  if (json) {
    auto j = calibrate::net_result_json(r);
    j["provenance"] = calibrate::to_json(prov);
    if (!out_path.empty()) j["out"] = out_path;
    out << j.dump(2) << "\n";
  } else {
    calibrate::print_net_result(r, out);
    if (!out_path.empty()) out << "wrote " << out_path << " (kind nic; load it with --nic " << out_path << ")\n";
  }
  return 0;
}

}  // namespace moesim::apps