#pragma once
// One function per subcommand of `moesim`. Each takes the arguments after the subcommand's name,
// writes to `out`, and returns the exit code; user errors are thrown as moesim::UserError.

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/model/expert_streaming.hpp"
#include "moesim/scenario/common_keys.hpp"
#include "moesim/scenario/params.hpp"

namespace moesim::apps {

using Args = std::vector<std::string>;

/// Parses `args` against `desc`; positional arguments are errors. Returns false (after printing
/// `usage`, the options and `footer`) when --help was given; the caller then returns 0.
bool parse_options(const Args& args, const boost::program_options::options_description& desc,
                   boost::program_options::variables_map& vm, std::ostream& out, const std::string& usage,
                   const std::string& footer = "");

/// True when the user gave `flag` on the command line: a value that is only the option's default does not count.
bool flag_given(const boost::program_options::variables_map& vm, const char* flag);

/// A seed given as `flag`, and comma-separated numbers (scenario/params.hpp, where the parameter table reads
/// them too).
using scenario::parse_numbers;
using scenario::parse_seed;

/// "1,2,4" -> whole numbers in [lo, hi]; UserError naming `flag` and showing `example` otherwise.
std::vector<std::int64_t> parse_whole_numbers(const std::string& text, const std::string& flag, std::int64_t lo,
                                              std::int64_t hi, const std::string& example);

/// A size with its unit ("2GiB", "512MB") as whole bytes; UserError naming `flag` for a bare number, a
/// unit of another kind, or a size that is not positive.
std::uint64_t parse_byte_size(const std::string& text, const std::string& flag);

/// The streaming flags and --runtime's help (scenario/common_keys.hpp: the parameter tables use them).
using scenario::add_streaming_options;
using scenario::apply_streaming_options;
using scenario::runtime_help;

/// Removes and returns the leading arguments that are not options (a lone "-" counts as one): the input files
/// of `trace stats` and `trace convert`, which come before the options.
std::vector<std::string> take_inputs(Args& args);

/// Wall-clock seconds since `t0`: a step says how long it took on stderr only when that is long enough to matter.
double seconds_since(std::chrono::steady_clock::time_point t0);

/// "moesim <command> <args...>" as the user typed it (arguments with spaces quoted), for provenance.
std::string command_line(const std::string& command, const Args& args);

/// While alive, SIGINT and SIGTERM set a flag instead of killing the process, so a long run can stop
/// between units of work, remove what it had started to write, and exit 2 with a message.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  /// True once SIGINT or SIGTERM arrived.
  [[nodiscard]] static bool interrupted();
};

int cmd_models(const Args& args, std::ostream& out);
int cmd_hw(const Args& args, std::ostream& out);
int cmd_estimate(const Args& args, std::ostream& out);
int cmd_cost(const Args& args, std::ostream& out);
int cmd_study(const Args& args, std::ostream& out);
int cmd_simulate(const Args& args, std::ostream& out);  // apps/simulate_cmd.cpp
int cmd_serve(const Args& args, std::ostream& out);     // apps/serve_cmd.cpp
int cmd_sweep(const Args& args, std::ostream& out);     // apps/sweep_cmd.cpp
int cmd_report(const Args& args, std::ostream& out);    // apps/report_cmd.cpp
/// `moesim trace gen|stats|convert` (apps/trace_cmd.cpp dispatches, and runs convert).
int cmd_trace(const Args& args, std::ostream& out);
int cmd_trace_gen(const Args& args, std::ostream& out);    // apps/trace_gen_cmd.cpp
int cmd_trace_stats(const Args& args, std::ostream& out);  // apps/trace_stats_cmd.cpp
/// `moesim calibrate kernels|memory|storage|net|all|fit` (apps/calibrate_cmd.cpp dispatches).
int cmd_calibrate(const Args& args, std::ostream& out);
int cmd_calibrate_kernels(const Args& args, std::ostream& out);  // apps/calibrate_bench_cmd.cpp
int cmd_calibrate_memory(const Args& args, std::ostream& out);   // apps/calibrate_bench_cmd.cpp
int cmd_calibrate_storage(const Args& args, std::ostream& out);  // apps/calibrate_bench_cmd.cpp
int cmd_calibrate_net(const Args& args, std::ostream& out);      // apps/calibrate_net_cmd.cpp
int cmd_calibrate_all(const Args& args, std::ostream& out);      // apps/calibrate_cmd.cpp
int cmd_calibrate_fit(const Args& args, std::ostream& out);      // apps/calibrate_fit_cmd.cpp
/// `calibrate fit --llama-bench / --vllm-serving` (options parsed by cmd_calibrate_fit).
int cmd_calibrate_fit_imports(const boost::program_options::variables_map& vm, const Args& args,
                              std::ostream& out);  // apps/calibrate_import_cmd.cpp
/// `moesim ref init|run` and `moesim validate` (apps/ref_cmd.cpp).
int cmd_ref(const Args& args, std::ostream& out);
int cmd_validate(const Args& args, std::ostream& out);
int cmd_validate_table(const Args& args, std::ostream& out);  // apps/validate_table_cmd.cpp

}  // namespace moesim::apps
