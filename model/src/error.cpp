#include "moesim/model/error.hpp"

#include <string>

namespace moesim {

void fail_check(const char* expr, const char* file, int line, const std::string& what) {
  throw InternalError(std::string("internal error (a bug in moesim, please report it): ") + what + " [check '" + expr +
                      "' failed at " + file + ":" + std::to_string(line) + "]");
}

}  // namespace moesim
