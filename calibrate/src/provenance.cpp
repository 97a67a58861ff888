#include "moesim/calibrate/provenance.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <ctime>
#include <fstream>
#include <string>

namespace moesim::calibrate {

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        if (!v.empty()) return v;
      }
    }
  }
  utsname u{};
  return ::uname(&u) == 0 ? std::string(u.machine) : std::string("unknown CPU");
}

std::string utc(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::array<char, 64> buf{};
  const auto n = std::strftime(buf.data(), buf.size(), format, &tm);
  return std::string(buf.data(), n);
}

}  // namespace

Provenance current_provenance(const std::string& command) {
  Provenance p;
  std::array<char, 256> host{};
  p.host = ::gethostname(host.data(), host.size() - 1) == 0 ? std::string(host.data()) : "unknown host";
  p.cpu_model = cpu_model_name();
  p.cores = static_cast<std::int64_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  utsname u{};
  if (::uname(&u) == 0) p.kernel = std::string(u.sysname) + " " + u.release;
  p.date = utc("%Y-%m-%dT%H:%M:%SZ");
  p.day = utc("%Y-%m-%d");
  p.commit = build_commit();
  p.command = command;
  return p;
}

nlohmann::json to_json(const Provenance& p) {
  return {{"host", p.host}, {"cpu_model", p.cpu_model},  {"cores", p.cores},    {"kernel", p.kernel},
          {"date", p.date}, {"moesim_commit", p.commit}, {"command", p.command}};
}

std::string measured_source(const Provenance& p, const std::string& what) {
  return what + ", measured by `" + p.command + "` on " + p.host + " (" + p.cpu_model + ", " + std::to_string(p.cores) +
         " CPUs), " + p.day + ", moesim " + p.commit;
}

}  // namespace moesim::calibrate
