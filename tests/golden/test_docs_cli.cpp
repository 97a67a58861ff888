// `moesim docs man|bash|zsh` (issue 21): the man page and the shell completions come from every command's
// own --help, so each flag a command prints is in both; the bash completion is exercised in bash itself.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;

/// The long flags of `moesim <command> --help`, read the way a person would: words that start with "--"
/// on the lines that start with blanks and a dash.
std::vector<std::string> flags_of(const std::string& command) {
  const moesim::test::Run r = run_cli(command + " --help");
  EXPECT_EQ(r.code, 0) << command;
  std::vector<std::string> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto first = line.find_first_not_of(' ');
    if (first == std::string::npos || first == 0 || line[first] != '-') continue;
    std::istringstream words(line.substr(first, line.find("  ", first) - first));
    for (std::string w; words >> w;) {
      if (w.starts_with("--") && w.size() > 2) out.push_back(w);
    }
  }
  return out;
}

std::string roff_flag(const std::string& flag) {
  std::string out;
  for (const char c : flag) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

TEST(GoldenDocs, ManPageHoldsEveryCommandAndFlag) {
  const moesim::test::Run man = run_cli("docs man");
  ASSERT_EQ(man.code, 0) << man.err;
  EXPECT_TRUE(man.out.starts_with(".\\\""));
  EXPECT_NE(man.out.find(".TH MOESIM 1"), std::string::npos);
  for (const std::string command : {"serve", "estimate", "sweep", "trace convert", "calibrate fit", "validate"}) {
    EXPECT_NE(man.out.find(".SS \"moesim " + command + "\""), std::string::npos) << command;
    const auto flags = flags_of(command);
    EXPECT_GT(flags.size(), 2u) << command;
    for (const auto& f : flags) EXPECT_NE(man.out.find(roff_flag(f)), std::string::npos) << command << " " << f;
  }
  // No line may start a request by accident (a help line beginning with '.' is escaped).
  std::istringstream lines(man.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(".") || line.starts_with("'")) {
      EXPECT_TRUE(line.starts_with(".TH") || line.starts_with(".SH") || line.starts_with(".SS") ||
                  line.starts_with(".nf") || line.starts_with(".fi") || line.starts_with(".PP") ||
                  line.starts_with(".TP") || line.starts_with(".B") || line.starts_with(".I") ||
                  line.starts_with(".br") || line.starts_with(".\\\""))
          << line;
    }
  }
}

TEST(GoldenDocs, BashCompletesCommandsPartsAndEachCommandsFlags) {
  const Scratch s("moesim_docs");
  const moesim::test::Run script = s.moesim("docs bash");
  ASSERT_EQ(script.code, 0) << script.err;
  s.write("moesim.bash", script.out);
  // COMP_WORDS as bash fills it for the line typed so far; the words COMPREPLY holds, one per line.
  const auto complete = [&](const std::string& words, int cword) {
    const moesim::test::Run r =
        s.shell("bash -c 'source " + s.path("moesim.bash") + "; COMP_WORDS=(" + words +
                "); COMP_CWORD=" + std::to_string(cword) + "; _moesim; printf \"%s\\n\" \"${COMPREPLY[@]}\"'");
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(complete("moesim ser", 1), "serve\n");
  EXPECT_EQ(complete("moesim help cal", 2), "calibrate\n");
  EXPECT_EQ(complete("moesim calibrate fi", 2), "fit\n");
  EXPECT_EQ(complete("moesim serve --goo", 2), "--goodput\n");
  EXPECT_EQ(complete("moesim calibrate fit --llama-b", 3), "--llama-bench\n--llama-batched-bench\n");
  EXPECT_EQ(complete("moesim calibrate fit --mlx", 3), "--mlx-lm\n");
  // serve's flags are not offered after estimate.
  EXPECT_EQ(complete("moesim estimate --goo", 2), "\n");
}

TEST(GoldenDocs, ZshFunctionListsEveryCommand) {
  const moesim::test::Run z = run_cli("docs zsh");
  ASSERT_EQ(z.code, 0) << z.err;
  EXPECT_TRUE(z.out.starts_with("#compdef moesim\n"));
  for (const char* c : {"'serve:", "'estimate:", "'report:", "'calibrate fit')", "'serve')"})
    EXPECT_NE(z.out.find(c), std::string::npos) << c;
  EXPECT_NE(z.out.find("--goodput"), std::string::npos);
}

// Every key a serve scenario accepts is described in `serve --help` (issue 21 found slo, block_size,
// devices_per_node, ... documented nowhere); so it is in the man page too.
TEST(GoldenDocs, ServeHelpNamesEveryScenarioKey) {
  const moesim::test::Run help = run_cli("serve --help");
  ASSERT_EQ(help.code, 0);
  for (const char* key : {"description",
                          "model_overrides",
                          "nodes",
                          "plan.tp",
                          "plan.pp",
                          "plan.moe_tp",
                          "plan.moe_ep",
                          "plan.attention_dp",
                          "plan.attention_replicated",
                          "plan.devices_per_node",
                          "plan.nics_per_node",
                          "precision",
                          "experts",
                          "runtime",
                          "scheduler.kind",
                          "scheduler.capacity",
                          "scheduler.max_num_seqs",
                          "scheduler.max_num_batched_tokens",
                          "scheduler.block_size",
                          "scheduler.gpu_memory_utilization",
                          "kv_bytes",
                          "activation_bytes",
                          "slo",
                          "percentiles",
                          "trace",
                          "generate",
                          "streaming",
                          "costs",
                          "workload.arrival",
                          "workload.rate",
                          "workload.burstiness",
                          "workload.max_concurrency",
                          "sweep"})
    EXPECT_NE(help.out.find(key), std::string::npos) << key;
}

TEST(GoldenDocs, UnknownDocumentIsRefused) {
  const moesim::test::Run r = run_cli("docs pdf");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'pdf' is not a document moesim writes"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli("docs").code, 2);
  EXPECT_EQ(run_cli("help docs").code, 0);
}

}  // namespace
