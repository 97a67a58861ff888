// The catalogue of bad inputs, across every command (issue 8 part 3, issue 18): each case exits 2, prints
// ONE line on stderr that names the file / field / flag / record and says how to fix it, prints nothing on
// stdout, and leaves no output file behind (neither the file it was asked to write nor a temporary one).
// The error format is documented in the README ("Errors").
//
// What moesim guarantees about its outputs (README "Outputs"; moesim/model/output_file.hpp), each checked
// below:
//  - written atomically: a temporary with an unpredictable name beside the target (created exclusively,
//    so a link planted there is never followed), renamed onto it only when complete;
//  - never replacing what is not a regular file: a directory, a dangling link, a block device or socket is
//    refused; a character device, a FIFO or a link is written through, never replaced; an output directory
//    (report --out, sweep --traces) replaces only an empty one or an earlier one of moesim's that holds
//    nothing but what its .moesim-<kind> marker lists;
//  - all outputs of a run or none: every output is finished (a full disk found) before any is put in place,
//    and two flags naming one file are refused before the run.
//
// Issue 18's classes and their tests: 1 NeverRemovesADirectoryItDidNotWrite, 2 and 3
// OutputsAreNeverFollowedOrReplacedUnsafely and AFullDiskWritesNoOutputAtAll, 4
// InputsThatAreNotRegularFilesAreRefusedAtOnce, 5 SizesBeyondMemoryAreRefused, 6 NoSilentWrongValues,
// 7 MessagesNameTheirPlaceAndStayOneLine (all below); 8 Signals.EarlyAndRepeatedSignalsStopOnceWithOneLine
// and 10 Determinism.SameScenarioSameBytes (test_hardening.cpp, beside the other signal and determinism
// tests); 9 ServerFixture.ServesARealClientPastFourHostileOnes (unit/test_pingpong_server.cpp) and
// CalibrateNetCli.ServerEvictsASilentConnectionForAClient (test_calibrate_net_cli.cpp). The unit tests of
// the mechanisms are in unit/test_output_file.cpp.

#include <sys/stat.h>

#include <map>

#include "bad_input_catalogue.hpp"
#include "cli_support.hpp"

using namespace moesim::test;

namespace {

std::string expand(std::string s, const std::string& dir) {
  for (auto at = s.find("{d}"); at != std::string::npos; at = s.find("{d}", at + dir.size())) s.replace(at, 3, dir);
  return s;
}

/// Runs one case (its command line prefixed by `env`, e.g. "MOESIM_MEMORY_LIMIT=1GiB", and bounded by
/// timeout(1) so that a regression to a hang fails instead of stalling the suite) and checks the contract
/// above. Returns the run.
Run check_case(const Scratch& s, const CatalogueCase& c, const std::string& env = "") {
  SCOPED_TRACE(c.name);
  const std::string d = s.path();
  auto r = s.shell(env + " timeout 120 " + std::string(MOESIM_BINARY) + " " + expand(c.args, d));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("moesim", 0), 0u) << "the line starts with moesim and the command: " << r.err;
  for (const auto& m : c.must_mention)
    EXPECT_NE(r.err.find(expand(m, d)), std::string::npos) << "missing '" << m << "' in: " << r.err;
  for (const auto& o : c.outputs) EXPECT_FALSE(fs::exists(fs::symlink_status(s.path(o)))) << o << " was left behind";
  return r;
}

/// No temporary of moesim's (".<name>.tmp-XXXXXX", a file or a directory) is left anywhere under `dir`.
void expect_no_temporaries(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path() << " was left behind";
}

}  // namespace

TEST(BadInputCatalogue, EveryCommandRefusesWithOneLineAndLeavesNothing) {
  Scratch s("catalogue");
  ASSERT_NO_FATAL_FAILURE(write_catalogue_inputs(s));
  const std::vector<CatalogueCase> cases = catalogue_cases();
  ASSERT_GE(cases.size(), 40u);
  std::map<std::string, int> commands;
  for (const auto& c : cases) {
    check_case(s, c);
    ++commands[std::string(c.args.substr(0, c.args.find(' ')))];
  }
  expect_no_temporaries(s.path());
  // Every command with inputs is in the catalogue.
  for (const char* cmd :
       {"estimate", "simulate", "serve", "trace", "cost", "calibrate", "ref", "validate", "sweep", "report", "models"})
    EXPECT_GT(commands[cmd], 0) << cmd;
}

// Issue 18 class 1: moesim never removes or replaces a directory it did not write. A user's folder, a link
// to one, and an earlier report to which the user added a file are refused (before any work), untouched.
TEST(BadInputCatalogue, NeverRemovesADirectoryItDidNotWrite) {
  Scratch s("catalogue_dirs");
  fs::create_directories(s.path("mine"));
  s.write("mine/notes.txt", "my notes\n");
  fs::create_directory_symlink(s.path("mine"), s.path("mine-link"));
  fs::create_directories(s.path("old-report"));
  s.write("old-report/.moesim-report", R"({"written_by": "moesim report", "files": ["a.txt"]})");
  s.write("old-report/a.txt", "a\n");
  s.write("old-report/b.txt", "the user's\n");
  s.write("grid-ok.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"]})");
  const std::vector<CatalogueCase> cases = {
      {"report onto a directory of the user's",
       "report -q --out {d}/mine",
       {"--out", "is not a moesim report", ".moesim-report", "never replaces"},
       {}},
      {"report onto a link to a directory", "report -q --out {d}/mine-link", {"--out", "symbolic link"}, {}},
      {"report onto an earlier report holding a file of the user's",
       "report -q --out {d}/old-report",
       {"--out", "b.txt", "did not write"},
       {}},
      {"sweep traces into a directory of the user's",
       "sweep -q --grid {d}/grid-ok.json --traces {d}/mine --csv {d}/p.csv",
       {"--traces", "not a moesim traces"},
       {"p.csv"}},
  };
  for (const auto& c : cases) check_case(s, c);
  EXPECT_EQ(slurp(s.path("mine/notes.txt")), "my notes\n");
  EXPECT_TRUE(fs::is_symlink(s.path("mine-link")));
  EXPECT_EQ(slurp(s.path("old-report/a.txt")), "a\n");
  EXPECT_EQ(slurp(s.path("old-report/b.txt")), "the user's\n");
  expect_no_temporaries(s.path());
}

// Issue 18 classes 2 and 3: an output is never created through a link, never replaces a directory or a
// FIFO, and two outputs naming one file are refused before the run. A link to a file and a character
// device are written through: the link stays a link, /dev/null stays a device.
TEST(BadInputCatalogue, OutputsAreNeverFollowedOrReplacedUnsafely) {
  Scratch s("catalogue_outputs");
  s.write("victim.txt", "precious\n");
  fs::create_symlink(s.path("nothere"), s.path("dangling"));
  fs::create_symlink(s.path("victim.txt"), s.path("link-to-victim"));
  fs::create_directories(s.path("adir"));
  ASSERT_EQ(::mkfifo(s.path("fifo").c_str(), 0600), 0);
  const std::string serve = "serve -q --model mixtral-8x7b --hw dgx-h100 --rate 4/s --requests 5";
  const std::vector<CatalogueCase> cases = {
      {"output onto a dangling link",
       serve + " --steps-out {d}/dangling",
       {"--steps-out", "symbolic link", "does not exist"},
       {"nothere"}},
      {"output onto a directory", serve + " --steps-out {d}/adir", {"--steps-out", "is a directory"}, {}},
      {"output onto a FIFO nobody reads", serve + " --steps-out {d}/fifo", {"--steps-out", "FIFO", "reader"}, {}},
      {"two outputs naming one file",
       serve + " --requests-out {d}/r.csv --steps-out {d}/./r.csv",
       {"--requests-out", "--steps-out", "name the same file"},
       {"r.csv"}},
      {"two outputs, one through a link to the other",
       serve + " --requests-out {d}/victim.txt --steps-out {d}/link-to-victim",
       {"name the same file"},
       {}},
  };
  for (const auto& c : cases) check_case(s, c);
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(s.path("adir"))));
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(s.path("fifo"))));
  EXPECT_EQ(slurp(s.path("victim.txt")), "precious\n");

  // Written through: the link is kept and its file gets the data; /dev/null stays a character device.
  const auto through = s.moesim(serve + " --steps-out " + s.path("link-to-victim") + " --requests-out /dev/null");
  ASSERT_EQ(through.code, 0) << through.err;
  EXPECT_TRUE(fs::is_symlink(s.path("link-to-victim")));
  EXPECT_EQ(slurp(s.path("victim.txt")).rfind("start_s,", 0), 0u) << slurp(s.path("victim.txt")).substr(0, 80);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  expect_no_temporaries(s.path());
}

// Issue 18 class 3: all outputs of a run or none. The second output's disk is full (a 16 KiB tmpfs, where
// the machine allows mounting one): the first output, finished on a disk with room, is not put in place
// either, and no temporary stays on either disk.
TEST(BadInputCatalogue, AFullDiskWritesNoOutputAtAll) {
  Scratch s("catalogue_full");
  fs::create_directories(s.path("full"));
  if (std::system(("mount -t tmpfs -o size=16k moesim-test " + s.path("full") + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): the full-disk case is not run";
  struct Unmount {
    std::string at;
    ~Unmount() { (void)std::system(("umount " + at).c_str()); }
  } unmount{s.path("full")};
  const CatalogueCase c{
      "the second output's disk is full",
      "serve -q --model mixtral-8x7b --hw dgx-h100 --rate 4/s --requests 300 --requests-out {d}/r.csv "
      "--steps-out {d}/full/s.csv",
      {"--steps-out", "disk is full", "nothing was written"},
      {"r.csv", "full/s.csv"}};
  check_case(s, c);
  expect_no_temporaries(s.path());
}

// Issue 18 class 4: an input that is not a regular file (a device, a FIFO with no writer, a directory, a
// checkpoint's config.json linked to /dev/zero) is refused at once, before a byte is read; timeout(1) in
// check_case turns a hang into a failure.
TEST(BadInputCatalogue, InputsThatAreNotRegularFilesAreRefusedAtOnce) {
  Scratch s("catalogue_inputs");
  ASSERT_EQ(::mkfifo(s.path("fifo.json").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(s.path("fifo.csv").c_str(), 0600), 0);
  fs::create_directories(s.path("ckpt"));
  fs::create_symlink("/dev/zero", s.path("ckpt/config.json"));
  fs::create_symlink("/dev/zero", s.path("ckpt/model.safetensors"));
  const std::vector<CatalogueCase> cases = {
      {"a scenario that is /dev/zero", "estimate --scenario /dev/zero", {"/dev/zero", "character device"}, {}},
      {"a scenario that is a FIFO with no writer",
       "simulate --scenario {d}/fifo.json --per-token {d}/pt.csv",
       {"fifo.json", "a FIFO", "regular file"},
       {"pt.csv"}},
      {"a model config that is a FIFO", "estimate --model {d}/fifo.json --hw dgx-h100", {"fifo.json", "FIFO"}, {}},
      {"a checkpoint whose config.json links to /dev/zero",
       "ref run --checkpoint {d}/ckpt",
       {"ckpt/", "character device"},
       {}},
      {"a trace that is a directory", "trace stats {d}/ckpt", {"ckpt", "directory"}, {}},
      {"a request trace that is a FIFO",
       "serve -q --request-trace {d}/fifo.csv --steps-out {d}/s.csv",
       {"fifo.csv", "FIFO"},
       {"s.csv"}},
  };
  for (const auto& c : cases) check_case(s, c);
  expect_no_temporaries(s.path());
}

// Issue 18 class 6: no silent wrong values. A key given twice, bytes after a NUL, a scenario that is not an
// object, a CSV column given twice, quantities that overflow or underflow after their prefix, an infinite
// throughput, a negative value for an unsigned option, more groups than experts: each refused.
TEST(BadInputCatalogue, NoSilentWrongValues) {
  Scratch s("catalogue_values");
  s.write("dup.json", R"({"model": "dbrx-instruct", "hw": "dgx-h100", "nodes": [1], "context": 0, "context": 8})");
  s.write("nul.json", std::string(R"({"model": "dbrx-instruct", "hw": "dgx-h100", "nodes": [1]})") +
                          std::string(1, '\0') + R"({"context": 8})");
  s.write("array.json", R"([{"model": "dbrx-instruct"}])");
  s.write("dupcol.csv", "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,10,10,20\n");
  s.write("alias.csv", "arrival_s,prompt_tokens,output_tokens,ContextTokens\n0,10,10,20\n");
  const auto nic = [](const std::string& latency, const std::string& bandwidth) {
    return R"({"id": "x", "kind": "nic", "name": "x", "latency": {"value": ")" + latency +
           R"(", "source": "t"}, "bandwidth": {"value": ")" + bandwidth +
           R"(", "source": "t"}, "price": {"value": "1USD", "source": "t"}})";
  };
  s.write("nic-huge-bw.json", nic("1us", "1e308PB/s"));
  s.write("nic-tiny-bw.json", nic("1us", "5e-324GB/s"));
  s.write("nic-huge-latency.json", nic("1e9h", "10Gb/s"));
  const std::string two_macs = "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nodes 2 --nic ";
  const std::vector<CatalogueCase> cases = {
      {"a key given twice", "estimate --scenario {d}/dup.json", {"dup.json", "$", "\"context\"", "twice"}, {}},
      {"bytes after a NUL", "estimate --scenario {d}/nul.json", {"nul.json", "NUL"}, {}},
      {"a scenario that is not an object",
       "simulate --scenario {d}/array.json --per-token {d}/pt.csv",
       {"array.json", "$", "is an array", "expected an object"},
       {"pt.csv"}},
      {"a request CSV naming a column twice",
       "serve --request-trace {d}/dupcol.csv",
       {"dupcol.csv", "line 1", "prompt_tokens", "twice"},
       {}},
      {"a request CSV giving a length under two names",
       "serve --request-trace {d}/alias.csv",
       {"alias.csv", "line 1", "prompt_tokens", "ContextTokens"},
       {}},
      {"a bandwidth that overflows once its prefix applies",
       two_macs + "{d}/nic-huge-bw.json",
       {"nic-huge-bw.json", "$.bandwidth", "overflows"},
       {}},
      {"a bandwidth below any real one (a denormal)",
       two_macs + "{d}/nic-tiny-bw.json",
       {"nic-tiny-bw.json", "$.bandwidth", "outside any real bandwidth"},
       {}},
      {"a latency beyond any real one",
       two_macs + "{d}/nic-huge-latency.json",
       {"nic-huge-latency.json", "$.latency", "outside any real duration"},
       {}},
      {"an infinite throughput", "cost --hw dgx-h100 --nodes 1 --tokens-per-s inf", {"--tokens-per-s", "finite"}, {}},
      {"a negative value for an unsigned option",
       "sweep -q --threads -1 --csv {d}/p.csv",
       {"--threads -1", "0 or more"},
       {"p.csv"}},
      {"more expert groups than experts",
       "estimate --model mixtral-8x7b --hw mac-studio-m2-ultra-192 --nodes 2 --nic 10gbe-grpc --groups 9",
       {"--groups 9", "8 experts"},
       {}},
  };
  for (const auto& c : cases) check_case(s, c);
  expect_no_temporaries(s.path());
}

// Issue 18 class 7: messages name their place and stay one line. An unknown id inside a scenario file names
// the file and the JSON path; control characters from the input are escaped; a number beyond a double is
// called an overflow; a NIC profile given as --hw says so.
TEST(BadInputCatalogue, MessagesNameTheirPlaceAndStayOneLine) {
  Scratch s("catalogue_messages");
  s.write("sim-model.json", R"({"model": "dbrx", "nodes": 2})");
  s.write("sim-placement.json", R"({"placement": "nope"})");
  s.write("est-hw.json", R"({"model": "dbrx-instruct", "hw": "dgxx", "nodes": [1]})");
  s.write("serve-hw.json", R"({"model": "mixtral-8x7b", "hw": "dgxx"})");
  const std::vector<CatalogueCase> cases = {
      {"an unknown model in a simulate scenario",
       "simulate --scenario {d}/sim-model.json",
       {"sim-model.json: $.model: unknown model 'dbrx'", "dbrx-instruct"},
       {}},
      {"an unknown placement in a simulate scenario",
       "simulate --scenario {d}/sim-placement.json",
       {"sim-placement.json: $.placement:", "'nope'"},
       {}},
      {"an unknown node profile in an estimate scenario",
       "estimate --scenario {d}/est-hw.json",
       {"est-hw.json: $.hw:", "'dgxx'"},
       {}},
      {"an unknown node profile in a serve scenario",
       "serve --scenario {d}/serve-hw.json",
       {"serve-hw.json: $.hw:", "'dgxx'"},
       {}},
      {"a model name with a newline and a terminal escape",
       "estimate --model \"$(printf 'a\\nb\\033[31m')\" --hw dgx-h100",
       {"'a\\nb\\x1b[31m'"},
       {}},
      {"a number beyond a double", "calibrate memory --array-size 1e400GB", {"--array-size", "overflows"}, {}},
      {"a NIC profile given as --hw",
       "estimate --model dbrx-instruct --hw 10gbe-grpc",
       {"'10gbe-grpc' is a NIC profile", "--nic"},
       {}},
      {"a NIC profile file given as --hw",
       "estimate --model dbrx-instruct --nodes 1 --hw " + std::string(MOESIM_SOURCE_DIR) +
           "/hwprofiles/nics/10gbe-grpc.json",
       {"10gbe-grpc.json: $.kind", "NIC profile", "--hw", "--nic"},
       {}},
  };
  for (const auto& c : cases) {
    const auto r = check_case(s, c);
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "a raw escape reached the terminal";
  }
}

// Issue 18 part 5: sizes beyond the memory budget are refused before anything is allocated (one line, exit
// 2), not ended by std::bad_alloc or an internal check. MOESIM_MEMORY_LIMIT=1GiB makes the budget the same
// on every machine; every case here asks for far more than that, and is refused before any work.
TEST(BadInputCatalogue, SizesBeyondMemoryAreRefused) {
  Scratch s("catalogue_memory");
  const std::string d = s.path();
  // A Mixtral-family config.json with five million experts per layer (a tiny model otherwise).
  s.write("huge-experts.json",
          R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 5000000,
              "num_experts_per_tok": 2, "vocab_size": 100})");
  s.write("grid-nodes.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "nodes": [1000000000000000000],
    "nics": ["10gbe-grpc"]})");
  s.write("grid-nodes-float.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "nodes": [1e18],
    "nics": ["10gbe-grpc"]})");
  // A cluster point (a lone GPU server is served as one user, which replays no generated decode trace).
  s.write("grid-tokens.json", R"({"models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-192"], "nodes": [2],
    "nics": ["10gbe-grpc"], "simulate": {"tokens": 1e12}})");
  s.write("grid-tokens-huge.json",
          R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "simulate": {"tokens": 1e30}})");
  const std::vector<CatalogueCase> cases = {
      {"simulate: a generated trace too large",
       "simulate --tokens 30000000 --per-token {d}/pt.csv",
       {"30000000 tokens", "MOESIM_MEMORY_LIMIT", "--tokens"},
       {"pt.csv"}},
      {"simulate: a Chrome trace too large",
       "simulate --tokens 100000 --chrome-tokens 100000 --chrome-trace {d}/ct.json",
       {"--chrome-trace", "MOESIM_MEMORY_LIMIT", "--chrome-tokens"},
       {"ct.json"}},
      {"serve: outputs too long",
       "serve --output 1000000000000 --requests-out {d}/r.csv",
       {"output tokens", "MOESIM_MEMORY_LIMIT", "--output"},
       {"r.csv"}},
      {"trace gen: too many tokens",
       "trace gen --model dbrx-instruct --tokens 1000000000000 --out {d}/t.mtrace",
       {"1000000000000 tokens", "MOESIM_MEMORY_LIMIT", "--tokens"},
       {"t.mtrace"}},
      {"trace gen: too many layers",
       "trace gen --model dbrx-instruct --layers 100000000 --out {d}/l.mtrace",
       {"100000000 MoE layers", "MOESIM_MEMORY_LIMIT"},
       {"l.mtrace"}},
      {"ref init: millions of experts",
       "ref init --config {d}/huge-experts.json --out {d}/ckpt",
       {"5000000 experts", "MOESIM_MEMORY_LIMIT", "num_local_experts"},
       {"ckpt"}},
      {"sweep: a node count beyond the limit",
       "sweep -q --grid {d}/grid-nodes.json --csv {d}/p.csv",
       {"grid-nodes.json", "$.nodes[0]", "65536"},
       {"p.csv"}},
      {"sweep: a node count as a huge float", "sweep -q --grid {d}/grid-nodes-float.json", {"$.nodes[0]"}, {}},
      {"sweep: simulate.tokens too large",
       "sweep -q --grid {d}/grid-tokens.json --csv {d}/p2.csv",
       {"1000000000000 tokens", "MOESIM_MEMORY_LIMIT"},
       {"p2.csv"}},
      {"sweep: simulate.tokens beyond a 64-bit count",
       "sweep -q --grid {d}/grid-tokens-huge.json",
       {"grid-tokens-huge.json", "tokens", "too large"},
       {}},
      {"report: simulate.tokens too large",
       "report -q --grid {d}/grid-tokens.json --out {d}/rep",
       {"1000000000000 tokens", "MOESIM_MEMORY_LIMIT"},
       {"rep"}},
      {"calibrate kernels: a memory bandwidth beyond any machine",
       "calibrate kernels --memory-bandwidth 5PB/s --out {d}/k.json",
       {"--memory-bandwidth", "1PB/s"},
       {"k.json"}},
      {"calibrate kernels: a memory bandwidth near zero",
       "calibrate kernels --memory-bandwidth 20kB/s --out {d}/k2.json",
       {"--memory-bandwidth", "1MB/s"},
       {"k2.json"}},
  };
  for (const auto& c : cases) check_case(s, c, "MOESIM_MEMORY_LIMIT=1GiB");
  expect_no_temporaries(s.path());
}
