#pragma once
// One function per subcommand of `moesim`. Each takes the arguments after the subcommand's name,
// writes to `out`, and returns the exit code; user errors are thrown as moesim::UserError.

#include <ostream>
#include <string>
#include <vector>

namespace moesim::apps {

using Args = std::vector<std::string>;

int cmd_models(const Args& args, std::ostream& out);
int cmd_hw(const Args& args, std::ostream& out);
int cmd_estimate(const Args& args, std::ostream& out);
int cmd_cost(const Args& args, std::ostream& out);
int cmd_study(const Args& args, std::ostream& out);

}  // namespace moesim::apps
