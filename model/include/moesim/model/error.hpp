#pragma once
// Two kinds of failure (STYLE.md practice 6, after gem5's fatal()/panic()):
//  - UserError: the user's input is wrong. The message is one line that names the file, the field or
//    record, what is wrong and how to fix it. `moesim` prints it and exits with code 2.
//  - MOESIM_CHECK: an internal invariant. It stays on in Release builds; failing it is a bug in moesim
//    (exit code 1), never the user's fault.
// Library code throws; only apps/main.cpp decides exit codes.

#include <stdexcept>
#include <string>

namespace moesim {

/// The user's input is wrong; what() is one actionable line.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

/// An internal invariant failed: a bug in moesim.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

[[noreturn]] void fail_check(const char* expr, const char* file, int line, const std::string& what);

}  // namespace moesim

#define MOESIM_CHECK(cond, what)                                          \
  do {                                                                    \
    if (!(cond)) ::moesim::fail_check(#cond, __FILE__, __LINE__, (what)); \
  } while (false)
