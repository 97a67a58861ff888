// Placeholder: replaced by the implementation of calibrate fit.
#include "commands.hpp"
#include "moesim/model/error.hpp"
namespace moesim::apps {
int cmd_calibrate_fit(const Args&, std::ostream&) { throw UserError("calibrate fit: not implemented yet"); }
}  // namespace moesim::apps
