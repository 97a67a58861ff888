// moesim: what throughput, latency and throughput per dollar will a Mixture-of-Experts model get on a
// given cluster? See README.md and `moesim --help`.
//
// Exit codes (DESIGN.md): 0 success, 2 bad input (one line: what, where, how to fix), 1 internal error.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options/errors.hpp>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "docs.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"

namespace {

struct Command {
  const char* name;
  int (*run)(const moesim::apps::Args&, std::ostream&);
  const char* summary;
  std::vector<const char*> parts = {};  ///< a command with parts: `moesim calibrate fit` (for docs)
};

int cmd_docs(const moesim::apps::Args& args, std::ostream& out);

const Command kCommands[] = {
    {"study", moesim::apps::cmd_study,
     "the paper's Mac Studio study (default: DBRX on 2-8 nodes, 10 GbE / RoCE / InfiniBand, Table 5 costs)"},
    {"estimate", moesim::apps::cmd_estimate,
     "analytic per-token estimate: load, compute, latency, transfer, tokens/s, cost, tokens/s per USD"},
    {"simulate", moesim::apps::cmd_simulate,
     "discrete-event run of expert-parallel decode over a routing trace: tokens/s, time split, per-node load"},
    {"serve", moesim::apps::cmd_serve,
     "serving under load: workloads, batching, KV cache, TP/PP/EP plans; TTFT, TPOT, ITL, throughput, goodput"},
    {"sweep", moesim::apps::cmd_sweep,
     "the purchase question over a grid: cheapest meeting an SLO, best tokens/s per USD, Pareto front; splits under "
     "mpirun"},
    {"report", moesim::apps::cmd_report,
     "a report directory (Markdown, HTML, gnuplot PNG/SVG with data and scripts) answering what to buy"},
    {"trace",
     moesim::apps::cmd_trace,
     "routing traces: gen (synthetic), stats (load, reuse, LRU hits), convert",
     {"gen", "stats", "convert"}},
    {"calibrate",
     moesim::apps::cmd_calibrate,
     "measure this machine (kernels, memory, storage, network) into a profile; fit profiles to measured runs",
     {"kernels", "memory", "storage", "net", "all", "fit"}},
    {"ref",
     moesim::apps::cmd_ref,
     "the reference path: random-weight checkpoints (init) and a real MoE decoder over MPI ranks (run)",
     {"init", "run"}},
    {"validate", moesim::apps::cmd_validate,
     "predicted vs measured, error in %: the reference decoder on this machine, or the public table (--table)"},
    {"cost", moesim::apps::cmd_cost, "capital cost of a configuration and tokens/s per USD for a measured throughput"},
    {"models", moesim::apps::cmd_models, "the model zoo: id, family, total / active parameters, experts, source"},
    {"hw", moesim::apps::cmd_hw, "hardware profiles: nodes, NICs, storage, with units, prices and sources"},
    {"docs", cmd_docs, "the man page (man) and shell completions (bash, zsh), from every command's --help"},
};

void usage(std::ostream& out) {
  out << "moesim: performance model and cluster-design simulator for Mixture-of-Experts LLM inference\n\n"
         "usage: moesim <command> [options]     (moesim <command> --help, or moesim help <command>, for its "
         "options)\n\n"
         "commands:\n";
  for (const auto& c : kCommands)
    out << "  " << c.name << std::string(10 - std::string(c.name).size(), ' ') << c.summary << "\n";
  out << "\nExit codes: 0 success, 2 bad input (the message says what, where and how to fix it), 1 internal error.\n";
}

/// Every command's and part's --help text, as the command itself prints it.
std::vector<moesim::apps::CommandDoc> command_docs() {
  std::vector<moesim::apps::CommandDoc> out;
  static const std::string kHelpFlag = "--help";
  const auto help_of = [](const Command& c, moesim::apps::Args args) {
    args.push_back(kHelpFlag);
    std::ostringstream text;
    c.run(args, text);
    return text.str();
  };
  for (const auto& c : kCommands) {
    if (c.run == cmd_docs) continue;
    out.push_back({c.name, c.summary, help_of(c, {})});
    for (const char* part : c.parts) {
      moesim::apps::Args args;
      args.push_back(part);
      out.push_back({std::string(c.name) + " " + part, "", help_of(c, std::move(args))});
    }
  }
  out.push_back({"docs", "", ""});
  return out;
}

int cmd_docs(const moesim::apps::Args& args, std::ostream& out) {
  static constexpr const char* kHelp =
      "usage: moesim docs man|bash|zsh\n\n"
      "Writes to standard output, generated from every command's --help (so always in step with it):\n"
      "  man   the man page moesim(1) in man(7) macros     moesim docs man > moesim.1 && man ./moesim.1\n"
      "  bash  a bash completion script                   source <(moesim docs bash)\n"
      "  zsh   a zsh completion function (#compdef)       moesim docs zsh > ~/.zfunc/_moesim\n"
      "`cmake --install build` installs all three (share/man/man1, share/bash-completion/completions,\n"
      "share/zsh/site-functions).\n";
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    out << kHelp;
    return 0;
  }
  if (args.size() != 1)
    throw moesim::UserError(
        "give one of man, bash or zsh (e.g. `moesim docs man > moesim.1`); see `moesim docs --help`");
  auto docs = command_docs();
  docs.back().help = kHelp;
  if (args[0] == "man") {
    std::ostringstream overview;
    usage(overview);
    out << moesim::apps::man_page(overview.str(), docs);
  } else if (args[0] == "bash") {
    out << moesim::apps::bash_completion(docs);
  } else if (args[0] == "zsh") {
    out << moesim::apps::zsh_completion(docs);
  } else {
    throw moesim::UserError("'" + moesim::text::one_line(args[0]) + "' is not a document moesim writes" +
                            moesim::text::did_you_mean(args[0], {"man", "bash", "zsh"}) + "; give man, bash or zsh");
  }
  return 0;
}

}  // namespace

namespace {

// The line the handler prints. It is set twice: a generic one first thing in main(), the command's own once
// it is known; signals are held back while it changes, so the handler never reads half of it.
char g_interrupt_message[256];
std::size_t g_interrupt_length = 0;
volatile sig_atomic_t g_stopping = 0;

extern "C" void on_fatal_signal(int /*signal*/) {
  // Async-signal-safe only: remove the unfinished output files, say so once, exit 2. Both signals are
  // blocked while this runs (sa_mask), and g_stopping covers a signal on another thread. (sweep and
  // report install their own handler and stop between units of work instead.)
  if (g_stopping) return;
  g_stopping = 1;
  moesim::remove_pending_outputs();
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, g_interrupt_message, g_interrupt_length);
  ::_exit(2);
}

void set_interrupt_message(const std::string& msg) {
  const moesim::SignalsHeld held;
  g_interrupt_length = std::min(msg.size(), sizeof g_interrupt_message);
  std::memcpy(g_interrupt_message, msg.data(), g_interrupt_length);
}

/// SIGINT and SIGTERM stop any command cleanly: no partial output file stays behind. Called from the
/// executable's .preinit_array (below), so only memcpy and sigaction, nothing that needs a constructor.
void install_interrupt_handler() {
  static constexpr char kFirst[] = "moesim: interrupted; nothing was written\n";
  g_interrupt_length = sizeof kFirst - 1;
  std::memcpy(g_interrupt_message, kFirst, g_interrupt_length);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

extern "C" void moesim_preinit(int, char**, char**) { install_interrupt_handler(); }

}  // namespace

// The handler is installed before anything else runs: functions in an executable's .preinit_array run
// after relocation and before the initialisers of every shared library (System V ABI, "Initialization and
// Termination Functions"; ld.so(8)). The libraries moesim links (OpenBLAS starting its threads, the CUDA
// runtime, Open MPI) take ~70 ms to initialise before main(); a Ctrl-C in that time used to kill moesim
// with 143 instead of exit 2 and its message. The entry's name is the linker's section entry, not a constant
// moesim's code refers to (hence the NOLINT of the k-prefix rule).
// NOLINTNEXTLINE(readability-identifier-naming)
__attribute__((section(".preinit_array"), used)) void (*const moesim_preinit_entry)(int, char**,
                                                                                    char**) = &moesim_preinit;

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // `moesim help serve` (and `moesim help calibrate fit`) is `moesim serve --help`, as git and cargo read it.
  if (args.size() >= 2 && args[0] == "help") {
    args.erase(args.begin());
    args.push_back("--help");
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    usage(std::cout);
    return 0;
  }
  if (args[0] == "--version") {
    std::cout << "moesim 0.1.0\n";
    return 0;
  }
  const std::string name = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  // Errors of a command with parts name the part: "moesim calibrate net: error: ...".
  const std::string shown = moesim::text::one_line((name == "calibrate" || name == "ref" || name == "trace") &&
                                                           !rest.empty() && !rest[0].starts_with("-")
                                                       ? name + " " + rest[0]
                                                       : name);
  set_interrupt_message("moesim " + shown +
                        ": interrupted; unfinished output files were removed, nothing was written\n");
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    // Results go to a buffer and reach stdout only when the command succeeds: an error never leaves a
    // half-printed table behind it.
    std::ostringstream buffer;
    try {
      const int rc = c.run(rest, buffer);
      std::cout << buffer.str() << std::flush;
      return rc;
    } catch (const moesim::UserError& e) {
      // Under mpirun every rank raises the same error (reference::World::agree): rank 0 says it once.
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (rank == nullptr || std::string_view(rank) == "0")
        std::cerr << "moesim " << shown << ": error: " << moesim::text::one_line(e.what()) << "\n";
      return 2;
    } catch (const boost::program_options::error& e) {
      std::cerr << "moesim " << shown << ": error: " << moesim::text::one_line(e.what()) << "; see `moesim " << shown
                << " --help`\n";
      return 2;
    } catch (const std::bad_alloc&) {
      // Sizes are checked against the memory budget before allocating (model/resources.hpp); reaching
      // this is a missed check, so still exit 1, but say what happened and how to bound it.
      std::cerr << "moesim " << shown << ": ran out of memory (a size moesim failed to check first: please report "
                << "it); give smaller inputs, or set MOESIM_MEMORY_LIMIT (e.g. 8GiB) to be refused up front\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "moesim " << shown << ": " << moesim::text::one_line(e.what()) << "\n";
      return 1;
    }
  }
  std::vector<std::string> names;
  for (const auto& c : kCommands) names.emplace_back(c.name);
  std::cerr << "moesim: error: unknown command '" << moesim::text::one_line(name) << "'"
            << moesim::text::did_you_mean(name, names) << "; commands: " << moesim::text::join(names)
            << " (see `moesim --help`)\n";
  return 2;
}
