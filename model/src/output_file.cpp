#include "moesim/model/output_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "moesim/model/error.hpp"

namespace moesim {
namespace {

// Temporary files being written, for remove_pending_outputs() (called from a signal handler: fixed
// storage, no allocation, lock-free slot claims).
constexpr int kSlots = 256;
constexpr std::size_t kPathMax = 4096;
struct Pending {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live
  char path[kPathMax];
};
Pending g_pending[kSlots];

int register_pending(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_pending[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_pending[i].path, path.c_str(), path.size() + 1);
      g_pending[i].state.store(2);
      return i;
    }
  }
  return -1;  // more than kSlots files open at once: this one is not removed on a signal
}

void unregister_pending(int slot) {
  if (slot >= 0) g_pending[slot].state.store(0);
}

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
  slot_ = register_pending(tmp_);
}

OutputFile::~OutputFile() {
  if (!committed_) {
    out_.close();
    std::remove(tmp_.c_str());
  }
  unregister_pending(slot_);
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
  unregister_pending(slot_);
  slot_ = -1;
}

void remove_pending_outputs() noexcept {
  for (auto& p : g_pending)
    if (p.state.load() == 2) ::unlink(p.path);
}

void write_file_atomically(const std::string& path, const std::string& contents, const std::string& flag) {
  OutputFile f(path, flag);
  f.stream() << contents;
  f.commit();
}

}  // namespace moesim
