#include "moesim/model/resources.hpp"

#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "moesim/model/error.hpp"

namespace moesim::model {
namespace {

// "MemAvailable:   12345678 kB" (proc(5): the unit is kibibytes despite the "kB").
std::optional<double> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024.0;
  }
  return std::nullopt;
}

std::optional<double> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// cgroup v2: the line "0::/some/path" of /proc/self/cgroup names the cgroup under /sys/fs/cgroup.
std::optional<double> cgroup_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    const auto max = read_number(dir + "/memory.max");
    const auto current = read_number(dir + "/memory.current");
    if (max && current) return *max > *current ? *max - *current : 0.0;
  }
  return std::nullopt;
}

std::optional<double> limit_of(int resource) {
  struct rlimit r {};
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<double>(r.rlim_cur);
}

}  // namespace

MemoryBudget memory_budget() {
  if (const char* env = std::getenv("MOESIM_MEMORY_LIMIT"); env && *env) {
    units::Bytes limit;
    try {
      limit = units::parse_as<units::Dimension::Bytes>(env, "MOESIM_MEMORY_LIMIT");
    } catch (const UserError& e) {
      throw UserError(std::string("environment variable ") + e.what() + "; or unset it to use the machine's memory");
    }
    if (!(limit.base() > 0)) {
      throw UserError(std::string("environment variable MOESIM_MEMORY_LIMIT: \"") + env +
                      "\" must be more than 0 bytes, e.g. \"8GiB\"; or unset it to use the machine's memory");
    }
    return {limit, "MOESIM_MEMORY_LIMIT"};
  }
  MemoryBudget b{units::bytes(std::numeric_limits<double>::infinity()), "no limit found"};
  const auto consider = [&](std::optional<double> v, const char* source) {
    if (v && *v < b.bytes.base()) b = {units::bytes(*v), source};
  };
  consider(mem_available(), "MemAvailable in /proc/meminfo");
  consider(cgroup_room(), "the cgroup's memory.max less memory.current");
  consider(limit_of(RLIMIT_AS), "RLIMIT_AS (ulimit -v)");
  consider(limit_of(RLIMIT_DATA), "RLIMIT_DATA (ulimit -d)");
  return b;
}

void require_memory(units::Bytes needed, std::string_view what, std::string_view fix) {
  const auto budget = memory_budget();
  if (needed.base() <= budget.bytes.base()) return;
  throw UserError(std::string(what) + " needs " + units::format_binary(needed) + " in memory, but only " +
                  units::format_binary(budget.bytes) + " is available (" + budget.source + "); " + std::string(fix));
}

}  // namespace moesim::model
