// End-to-end runs of the `moesim` binary: a golden `estimate --json` compared field by field with
// tolerances (never by log text), and the catalogue of bad inputs: each exits with code 2, prints ONE
// line on stderr naming the file/field and the fix, and prints nothing on stdout.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs `moesim <args>` (args are shell words) with stdout and stderr captured.
Run moesim(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("moesim_cli_" + std::to_string(::getpid()));
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

/// A temporary file with the given contents; removed at the end of the test.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : path_(fs::temp_directory_path() / ("moesim_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path_) << contents;
  }
  ~TempFile() { fs::remove(path_); }
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

/// Compares two JSON documents field by field; numbers within a relative tolerance.
void expect_json_near(const nlohmann::json& got, const nlohmann::json& want, const std::string& path) {
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

// Golden: the paper's configuration as JSON. Regenerate deliberately with
//   build/moesim estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nic 10gbe-grpc,rocev2-25g
//     --nodes 2,3,4,6,8 --json > tests/golden/estimate_dbrx_mac_studio.json   (one line)
// and review the diff: every changed number is a changed prediction.
TEST(GoldenCli, EstimateJson) {
  const auto r = moesim(
      "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nic 10gbe-grpc,rocev2-25g --nodes 2,3,4,6,8 "
      "--json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto got = nlohmann::json::parse(r.out);
  const auto want =
      nlohmann::json::parse(slurp(fs::path(MOESIM_SOURCE_DIR) / "tests/golden/estimate_dbrx_mac_studio.json"));
  expect_json_near(got, want, "$");
  // Every metric carries a unit.
  for (const auto& row : got["rows"]) {
    for (const auto& m : row["metrics"]) EXPECT_FALSE(m["unit"].get<std::string>().empty()) << m.dump();
  }
}

// The README's main job: `moesim study` with no arguments prints Table 6 and the NIC projections.
TEST(GoldenCli, DefaultStudyRuns) {
  const auto r = moesim("study");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("10gbe-grpc"), std::string::npos);
  EXPECT_NE(r.out.find("ib-200g"), std::string::npos);
  EXPECT_NE(r.out.find("0.000389"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.000447"), std::string::npos) << r.out;
}

TEST(GoldenCli, ListsAndHelp) {
  const auto models = moesim("models --json");
  ASSERT_EQ(models.code, 0) << models.err;
  EXPECT_EQ(nlohmann::json::parse(models.out).size(), 17u);
  const auto hw = moesim("hw");
  ASSERT_EQ(hw.code, 0) << hw.err;
  for (const char* id : {"mac-studio-m2-ultra-192", "dgx-h100", "rocev2-25g", "ib-200g", "apple-ssd-m3-max"}) {
    EXPECT_NE(hw.out.find(id), std::string::npos) << id;
  }
  const auto help = moesim("estimate --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("replicated-groups"), std::string::npos);
}

struct BadInput {
  const char* name;
  std::string args;
  std::vector<std::string> must_mention;  ///< substrings of the one-line message
};

/// The catalogue: every case exits 2 with one line on stderr and nothing on stdout.
void expect_bad_input(const BadInput& c) {
  SCOPED_TRACE(c.name);
  const auto r = moesim(c.args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& s : c.must_mention)
    EXPECT_NE(r.err.find(s), std::string::npos) << "missing '" << s << "' in: " << r.err;
}

const char* kGoodNic = R"({"id": "t", "kind": "nic", "latency": {"value": "1ms", "source": "test"},
  "bandwidth": {"value": "10Gb/s", "source": "test"}, "price": {"value": "100USD", "source": "test"}})";

TEST(BadInputs, Catalogue) {
  TempFile malformed("malformed.json", "{\"id\": \"x\", \"kind\": \"node\",,}");
  std::string unitless = kGoodNic;
  unitless.replace(unitless.find("\"10Gb/s\""), 8, "1.25e9");
  TempFile unitless_nic("unitless.json", unitless);
  std::string negative = kGoodNic;
  negative.replace(negative.find("\"10Gb/s\""), 8, "\"-10Gb/s\"");
  TempFile negative_nic("negative.json", negative);
  TempFile unsupported("config.json",
                       R"({"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 768})");
  std::string typo = kGoodNic;
  typo.replace(typo.find("\"latency\""), 9, "\"latncy\"");
  TempFile typo_nic("typo.json", typo);
  const std::string base = "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 ";

  const std::vector<BadInput> cases = {
      {"missing file", base + "--nic /nonexistent/nic.json --nodes 2", {"/nonexistent/nic.json", "no such file"}},
      {"malformed JSON",
       "estimate --model dbrx-instruct --hw " + malformed.path() + " --nodes 1",
       {malformed.path(), "malformed JSON", "line 1"}},
      {"unit-less bandwidth",
       base + "--nic " + unitless_nic.path() + " --nodes 2",
       {unitless_nic.path(), "$.bandwidth.value", "unit", "10Gb/s"}},
      {"negative bandwidth",
       base + "--nic " + negative_nic.path() + " --nodes 2",
       {negative_nic.path(), "$.bandwidth.value", "positive"}},
      {"unknown model",
       "estimate --model dbrx --hw mac-studio-m2-ultra-192 --nodes 1",
       {"unknown model 'dbrx'", "dbrx-instruct", "mixtral-8x7b"}},
      {"unknown hardware",
       "estimate --model dbrx-instruct --hw mac-studio --nodes 1",
       {"unknown hardware", "mac-studio-m2-ultra-192", "dgx-h100"}},
      {"unknown NIC", base + "--nic 10gbe --nodes 2", {"unknown NIC", "10gbe-grpc"}},
      {"unsupported family",
       "estimate --model " + unsupported.path() + " --hw mac-studio-m2-ultra-192 --nodes 1",
       {unsupported.path(), "mamba", "mixtral"}},
      {"nodes 0", base + "--nic 10gbe-grpc --nodes 0", {"--nodes", "at least 1"}},
      {"nodes not a number", base + "--nic 10gbe-grpc --nodes two", {"--nodes", "not a whole number"}},
      {"several nodes without a NIC", base + "--nodes 2", {"--nic", "10gbe-grpc"}},
      {"unknown key in a profile",
       base + "--nic " + typo_nic.path() + " --nodes 2",
       {"$.latncy", "did you mean 'latency'"}},
      {"unknown placement",
       base + "--nic 10gbe-grpc --nodes 2 --placement halves",
       {"unknown placement", "replicated-groups"}},
      {"unknown precision", base + "--nic 10gbe-grpc --nodes 2 --precision bf17", {"bf16"}},
      {"unknown flag", base + "--nic 10gbe-grpc --nodes 2 --nodez 3", {"nodez", "--help"}},
      {"unknown command", "estimat", {"unknown command", "did you mean 'estimate'"}},
      {"negative context", base + "--nodes 1 --context -5", {"--context", "negative"}},
      {"dense model across nodes",
       "estimate --model llama-3.1-70b --hw mac-studio-m2-ultra-192 --nic 10gbe-grpc --nodes 2",
       {"dense model", "--nodes 1"}},
      {"missing study file", "study --scenario /nonexistent/study.json", {"/nonexistent/study.json", "no such file"}},
      {"cost without price for nodes", "cost --hw mac-studio-m2-ultra-192 --nodes 0", {"--nodes", "at least 1"}},
  };
  for (const auto& c : cases) expect_bad_input(c);
}

}  // namespace
