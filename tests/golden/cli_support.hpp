#pragma once
// Running the built `moesim` binary from tests: capture its exit code, stdout and stderr; temporary input
// files; field-by-field JSON comparison with tolerances; the bad-input check every catalogue uses.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../test_support.hpp"

namespace moesim::test {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

/// The binary under test.
inline const std::string kBin = MOESIM_BINARY;
/// `mpirun` as the tests start it, followed by the rank count. Open MPI refuses root without the two
/// OMPI_ALLOW variables; under AddressSanitizer Open MPI's own allocations at exit would be reported as
/// leaks, so leak detection is off for the ranks only.
inline const std::string kMpirun =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 timeout 300 "
    "mpirun --oversubscribe -np ";

inline bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

/// Runs `moesim <args>` (args are shell words) with stdout and stderr captured in files under `capture`
/// (default: a folder of the test process's own, made by the first run and removed at exit).
inline Run run_cli(const std::string& args, const fs::path& capture = {}) {
  static const TestDir own("moesim_cli");
  const fs::path dir = capture.empty() ? own.path() : capture;
  fs::create_directories(dir);
  const std::string cmd =
      std::string(MOESIM_BINARY) + " " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

/// A temporary file `name` with the given contents, in a folder of its own (TestDir); removed with it.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : dir_("moesim_file"), path_(dir_.write(name, contents)) {}
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  TestDir dir_;
  fs::path path_;
};

/// Compares two JSON documents field by field; numbers within a relative tolerance.
inline void expect_json_near(const nlohmann::json& got, const nlohmann::json& want, const std::string& path) {
  if (want.is_number() && got.is_number()) {
    const double a = got.get<double>(), b = want.get<double>();
    EXPECT_LE(std::fabs(a - b), 1e-9 * std::max(1.0, std::fabs(b))) << path << ": got " << a << ", want " << b;
    return;
  }
  ASSERT_EQ(got.type(), want.type()) << path;
  if (want.is_object()) {
    for (const auto& [k, v] : want.items()) {
      ASSERT_TRUE(got.contains(k)) << path << "." << k << " missing";
      expect_json_near(got[k], v, path + "." + k);
    }
    for (const auto& [k, v] : got.items()) EXPECT_TRUE(want.contains(k)) << path << "." << k << " unexpected";
  } else if (want.is_array()) {
    ASSERT_EQ(got.size(), want.size()) << path;
    for (std::size_t i = 0; i < want.size(); ++i)
      expect_json_near(got[i], want[i], path + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(got, want) << path;
  }
}

/// A scratch directory per test (named after the test, removed at the end): files go to its "out"
/// folder, the captured stdout/stderr of the runs beside it.
class Scratch {
 public:
  explicit Scratch(const std::string& prefix) : dir_(prefix) { fs::create_directories(dir_.path() / "out"); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  /// The output folder, or a file in it.
  [[nodiscard]] std::string path(const std::string& name = "") const {
    return name.empty() ? (dir_.path() / "out").string() : (dir_.path() / "out" / name).string();
  }
  void write(const std::string& name, const std::string& contents) const {
    std::ofstream(dir_.path() / "out" / name, std::ios::binary) << contents;
  }
  /// Runs `moesim <args>` (shell words) with stdout and stderr captured.
  [[nodiscard]] Run moesim(const std::string& args) const { return run_cli(args, dir_.path() / "capture"); }
  /// Runs a shell command line with stdout and stderr captured.
  [[nodiscard]] Run shell(const std::string& cmd) const {
    const std::string full =
        cmd + " >" + (dir_.path() / "capture.out").string() + " 2>" + (dir_.path() / "capture.err").string();
    const int status = std::system(full.c_str());
    Run r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir_.path() / "capture.out");
    r.err = slurp(dir_.path() / "capture.err");
    return r;
  }
  /// Names of the files in the output folder, sorted.
  [[nodiscard]] std::vector<std::string> files() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_.path() / "out")) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  TestDir dir_;
};

struct BadInput {
  const char* name;
  std::string args;
  std::vector<std::string> must_mention;  ///< substrings of the one-line message
};

/// The catalogue: every case exits 2 with one line on stderr and nothing on stdout.
inline void expect_bad_input(const BadInput& c) {
  SCOPED_TRACE(c.name);
  const auto r = run_cli(c.args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& s : c.must_mention)
    EXPECT_NE(r.err.find(s), std::string::npos) << "missing '" << s << "' in: " << r.err;
}

}  // namespace moesim::test
