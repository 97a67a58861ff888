#pragma once
// Where a measurement comes from: the host, its CPU, the date, the moesim commit and the command that
// produced it. Every profile `moesim calibrate` writes carries one.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace moesim::calibrate {

/// The moesim commit this binary was built from (`git describe --dirty`), or "unknown".
const char* build_commit();

struct Provenance {
  std::string host;        ///< gethostname()
  std::string cpu_model;   ///< /proc/cpuinfo "model name" (or the architecture when absent)
  std::int64_t cores = 0;  ///< online logical CPUs
  std::string kernel;      ///< uname -sr
  std::string date;        ///< UTC, ISO 8601 (2026-11-21T10:00:00Z)
  std::string day;         ///< UTC date only (2026-11-21), for sources and file names
  std::string commit;      ///< build_commit()
  std::string command;     ///< the command line, as the user typed it
};

/// Reads this machine's facts now. `command` is recorded as given.
Provenance current_provenance(const std::string& command);

nlohmann::json to_json(const Provenance& p);

/// "measured by `COMMAND` on HOST (CPU), DAY, moesim COMMIT": the source line of a measured figure.
std::string measured_source(const Provenance& p, const std::string& what);

}  // namespace moesim::calibrate
