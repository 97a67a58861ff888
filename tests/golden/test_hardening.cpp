// Hardening (issue 8): an interrupted run (SIGINT, SIGTERM) stops, says so, and leaves no partial file;
// the same scenario and seed give byte-identical results and traces.

#include "cli_support.hpp"

using namespace moesim::test;

namespace {

/// Starts `moesim <args>`, sends `signal` after `delay` seconds, waits. The run either finished first
/// (exit 0, and then every output must be there) or was stopped (exit 2, a message, and no output).
bool interrupt_and_check(const Scratch& s, const std::string& args, const char* signal, double delay,
                         const std::vector<std::string>& outputs) {
  SCOPED_TRACE(args + " + SIG" + signal);
  const auto r = s.shell("( " + std::string(MOESIM_BINARY) + " " + args + " & pid=$!; sleep " + std::to_string(delay) +
                         "; kill -" + signal + " $pid; wait $pid )");
  if (r.code == 0) {
    for (const auto& o : outputs) EXPECT_TRUE(fs::exists(s.path(o))) << o;
  } else {
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("interrupted"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const auto& o : outputs) EXPECT_FALSE(fs::exists(s.path(o))) << o << " was left behind";
  }
  for (const auto& f : s.files()) EXPECT_EQ(f.find(".tmp-"), std::string::npos) << f << " was left behind";
  return r.code != 0;
}

}  // namespace

TEST(Signals, InterruptedRunsLeaveNoPartialFiles) {
  Scratch s("signals");
  // The signal comes after the process is up (an ASan build takes ~0.4 s to reach main) and, for trace
  // gen and simulate, long before the end (tens of seconds in release).
  // 3 million DBRX tokens take seconds to generate: this one is always stopped mid-run.
  EXPECT_TRUE(interrupt_and_check(s, "trace gen --model dbrx-instruct --tokens 3000000 --out " + s.path("big.mtrace"),
                                  "INT", 1.0, {"big.mtrace"}));
  interrupt_and_check(
      s, "simulate --nodes 2 --tokens 400000 --per-token " + s.path("pt.csv") + " --chrome-trace " + s.path("ct.json"),
      "TERM", 1.0, {"pt.csv", "ct.json"});
  interrupt_and_check(s, "sweep -q --simulate all --csv " + s.path("sw.csv"), "INT", 1.0, {"sw.csv"});
}

TEST(Determinism, SameScenarioSameBytes) {
  Scratch s("determinism");
  for (int run = 0; run < 2; ++run) {
    const std::string k = std::to_string(run);
    ASSERT_EQ(s.moesim("trace gen --model mixtral-8x7b --tokens 2000 --popularity zipf --reuse 0.5 --seed 7 --out " +
                       s.path("t" + k + ".mtrace"))
                  .code,
              0);
    ASSERT_EQ(s.moesim("trace gen --model mixtral-8x7b --tokens 2000 --popularity zipf --reuse 0.5 --seed 7 --out " +
                       s.path("t" + k + ".jsonl"))
                  .code,
              0);
    const auto sim = s.moesim("simulate --scenario " + std::string(MOESIM_SOURCE_DIR) +
                              "/examples/simulate-dbrx-3-nodes-p-lr-d.json --json --per-token " +
                              s.path("pt" + k + ".csv") + " --chrome-trace " + s.path("ct" + k + ".json"));
    ASSERT_EQ(sim.code, 0) << sim.err;
    s.write("sim" + k + ".json", sim.out);
    const auto serve =
        s.moesim("serve --scenario " + std::string(MOESIM_SOURCE_DIR) +
                 "/examples/serve-dbrx-dgx-h100-closed-loop.json --sweep-out " + s.path("sv" + k + ".csv"));
    ASSERT_EQ(serve.code, 0) << serve.err;
  }
  for (const char* f : {"t%.mtrace", "t%.jsonl", "pt%.csv", "ct%.json", "sim%.json", "sv%.csv"}) {
    std::string a = f, b = f;
    a.replace(a.find('%'), 1, "0");
    b.replace(b.find('%'), 1, "1");
    const std::string x = slurp(s.path(a)), y = slurp(s.path(b));
    EXPECT_FALSE(x.empty()) << a;
    EXPECT_EQ(x, y) << a << " and " << b << " differ";
  }
  // The sweep at 1 and 2 threads and under 1, 2 and 4 MPI ranks: tests/golden/test_sweep_cli.cpp.
}
