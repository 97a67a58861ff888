// Placeholder: replaced by the implementation of calibrate net.
#include "commands.hpp"
#include "moesim/model/error.hpp"
namespace moesim::apps {
int cmd_calibrate_net(const Args&, std::ostream&) { throw UserError("calibrate net: not implemented yet"); }
}  // namespace moesim::apps
