// Placeholder: replaced by the implementation of calibrate kernels,memory,storage.
#include "commands.hpp"
#include "moesim/model/error.hpp"
namespace moesim::apps {
int cmd_calibrate_kernels(const Args&, std::ostream&) { throw UserError("calibrate kernels: not implemented yet"); }
int cmd_calibrate_memory(const Args&, std::ostream&) { throw UserError("calibrate memory: not implemented yet"); }
int cmd_calibrate_storage(const Args&, std::ostream&) { throw UserError("calibrate storage: not implemented yet"); }
}  // namespace moesim::apps
