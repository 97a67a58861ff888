#include "moesim/model/output_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "moesim/model/error.hpp"

namespace moesim {
namespace {
std::string named(const std::string& path, const std::string& flag) {
  return flag.empty() ? path : path + " (" + flag + ")";
}
}  // namespace

OutputFile::OutputFile(std::string path, std::string flag, bool binary)
    : path_(std::move(path)), flag_(std::move(flag)), tmp_(path_ + ".tmp-" + std::to_string(::getpid())) {
  if (path_.empty()) throw UserError("an output path is empty" + (flag_.empty() ? "" : "; give " + flag_ + " FILE"));
  out_.open(tmp_, binary ? std::ios::out | std::ios::binary | std::ios::trunc : std::ios::out | std::ios::trunc);
  if (!out_) {
    throw UserError(named(path_, flag_) + ": cannot write here (" + std::strerror(errno) +
                    "); check that the directory exists and is writable");
  }
}

OutputFile::~OutputFile() {
  if (!committed_) {
    out_.close();
    std::remove(tmp_.c_str());
  }
}

void OutputFile::commit() {
  out_.flush();
  if (!out_) throw UserError(named(path_, flag_) + ": writing failed (disk full?); nothing was written");
  out_.close();
  if (!out_ || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw UserError(named(path_, flag_) + ": cannot rename the finished file into place (" + std::strerror(errno) +
                    "); nothing was written");
  }
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::string& contents, const std::string& flag) {
  OutputFile f(path, flag);
  f.stream() << contents;
  f.commit();
}

}  // namespace moesim
