#pragma once
// Helpers shared by the unit and golden tests: the message of a refusal, a loopback TCP connection.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "moesim/model/error.hpp"

namespace moesim::test {

/// A folder of its own for the running test (prefix, suite and test name and a random suffix), made by
/// mkdtemp: created new and only for this test (never a folder that was there, never through a link), and
/// removed at the end; write() puts a file in it byte for byte (CRLF stays CRLF) and returns its path.
class TestDir {
 public:
  explicit TestDir(const std::string& prefix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name =
        prefix + "_" + (info ? std::string(info->test_suite_name()) + "_" + info->name() : "") + "_XXXXXX";
    std::replace(name.begin(), name.end(), '/', '_');  // a parameterised test's name is Name/0
    std::string t = (std::filesystem::temp_directory_path() / name).string();
    if (::mkdtemp(t.data()) == nullptr)
      throw std::runtime_error("cannot make a test folder from " + t + ": " + std::strerror(errno));
    path_ = t;
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;
  [[nodiscard]] std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = path_ / name;  // not const: returned by move
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// The whole file, byte for byte ("" if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs `f`, expects a one-line UserError whose message contains every one of `parts`; returns the message.
inline std::string expect_user_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const UserError& e) {
    std::string what = e.what();  // not const: returned by move
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "missing \"" << p << "\" in: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    return what;
  }
  ADD_FAILURE() << "no UserError thrown";
  return "";
}

/// The UserError message of `f`, or "" if it did not throw.
/// A registry (STYLE.md practice 2) lists `names` first, in this order, each with its line of --help.
template <class Info>
void expect_builtins(const std::vector<Info>& all, std::initializer_list<std::string> names) {
  ASSERT_GE(all.size(), names.size());
  std::size_t i = 0;
  for (const auto& name : names) {
    EXPECT_EQ(all[i].name, name);
    EXPECT_FALSE(all[i].description.empty()) << all[i].name;
    ++i;
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

/// The UserError message of `f`; a test failure if it did not throw.
template <typename F>
std::string user_error(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

/// A TCP socket connected to 127.0.0.1:port, or -1.
inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace moesim::test
