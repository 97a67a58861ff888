#include "moesim/model/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/text.hpp"

namespace moesim {
namespace {

namespace fs = std::filesystem;

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

/// The process's umask, read from /proc/self/status ("Umask:", Linux 4.7+, proc(5)): umask(2) can only
/// read it by setting it, which would race with other threads creating files, so that is the fallback.
mode_t umask_value() {
  static const mode_t mask = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
    }
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }();
  return mask;
}

/// The permission bits a new file gets, as open(2) with mode 0666 would give it.
mode_t default_mode() { return static_cast<mode_t>(0666 & ~umask_value()); }

/// An unnamed file for data held until the commit: O_TMPFILE where the file system has it (open(2)),
/// else a mkstemp file unlinked at once. Neither has a name anyone could plant a link at.
Fd unnamed_file(const std::string& for_whom) {
  const fs::path dir = [] {
    std::error_code ec;
    auto d = fs::temp_directory_path(ec);
    return ec ? fs::path("/tmp") : d;
  }();
  Fd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd.valid()) return fd;
  std::string tmpl = (dir / "moesim.tmp-XXXXXX").string();
  fd = Fd(::mkostemp(tmpl.data(), O_CLOEXEC));
  if (!fd.valid())
    throw UserError(for_whom + ": cannot create a temporary file in " + dir.string() + " (" + std::strerror(errno) +
                    "); set TMPDIR to a writable directory");
  ::unlink(tmpl.c_str());
  return fd;
}

}  // namespace

struct OutputFile::Impl {
  enum class Kind { Replace, WriteThrough };
  Kind kind = Kind::Replace;
  mode_t mode = 0;  ///< Replace: the permission bits the finished file gets
  std::string tmp;  ///< Replace: the temporary's name
  Fd fd;            ///< the temporary (named for Replace, unnamed for WriteThrough)
  Fd target;        ///< WriteThrough: the device / FIFO / link target, opened by finish()
  bool target_regular = false;
  std::unique_ptr<FdStreambuf> buf;
  std::unique_ptr<std::ostream> out;
  int slot = -1;  ///< its entry in the table remove_pending_outputs() reads
  bool finished = false;
  bool committed = false;
};

OutputFile::OutputFile(std::string path, std::string flag, bool /*binary: POSIX files have no text mode*/)
    : path_(std::move(path)), flag_(std::move(flag)), impl_(std::make_unique<Impl>()) {
  if (path_.empty()) throw UserError("an output path is empty" + (flag_.empty() ? "" : "; give " + flag_ + " FILE"));
  const std::string who = named();
  struct stat l {};
  if (::lstat(path_.c_str(), &l) == 0) {
    if (S_ISDIR(l.st_mode))
      throw UserError(who + ": is a directory; give the path of a file (moesim never replaces a directory)");
    if (S_ISLNK(l.st_mode) || S_ISCHR(l.st_mode) || S_ISFIFO(l.st_mode)) {
      struct stat t {};
      if (::stat(path_.c_str(), &t) != 0) {
        throw UserError(who +
                        ": is a symbolic link to a file that does not exist; moesim does not create files "
                        "through links; give the path of the file itself");
      }
      if (!S_ISREG(t.st_mode) && !S_ISCHR(t.st_mode) && !S_ISFIFO(t.st_mode)) {
        throw UserError(who + ": " + (S_ISLNK(l.st_mode) ? "links to " : "is ") + file_kind(t.st_mode) +
                        "; moesim writes to regular files, character devices and FIFOs; give a file path");
      }
      impl_->kind = Impl::Kind::WriteThrough;
      impl_->target_regular = S_ISREG(t.st_mode);
    } else if (!S_ISREG(l.st_mode)) {
      throw UserError(who + ": is " + file_kind(l.st_mode) +
                      "; moesim writes to regular files, character devices and FIFOs; give a file path");
    } else {
      impl_->mode = l.st_mode & 07777;  // replacing a file keeps its permissions
    }
  } else if (errno != ENOENT) {
    throw UserError(who + ": cannot write here (" + std::strerror(errno) + "); check the path");
  } else {
    impl_->mode = default_mode();
  }

  if (impl_->kind == Impl::Kind::WriteThrough) {
    impl_->fd = unnamed_file(who);
  } else {
    const fs::path p(path_);
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    std::string tmpl = (dir / ("." + p.filename().string() + ".tmp-XXXXXX")).string();
    impl_->fd = Fd(::mkostemp(tmpl.data(), O_CLOEXEC));
    if (!impl_->fd.valid()) {
      throw UserError(who + ": cannot write here (" + std::strerror(errno) +
                      "); check that the directory exists and is writable");
    }
    impl_->tmp = tmpl;
    impl_->slot = register_pending(impl_->tmp);
  }
  impl_->buf = std::make_unique<FdStreambuf>(impl_->fd.get(), FdStreambuf::Mode::Write);
  impl_->out = std::make_unique<std::ostream>(impl_->buf.get());
}

OutputFile::~OutputFile() {
  if (!impl_) return;
  if (!impl_->committed && !impl_->tmp.empty()) ::unlink(impl_->tmp.c_str());
  unregister_pending(impl_->slot);
}

std::ostream& OutputFile::stream() { return *impl_->out; }

std::string OutputFile::named() const { return moesim::named(path_, flag_); }

void OutputFile::finish() {
  if (impl_->finished) return;
  impl_->out->flush();
  if (!*impl_->out || impl_->buf->errno_value() != 0) {
    const int e = impl_->buf->errno_value();
    throw UserError(named() + ": writing failed (" + (e ? std::strerror(e) : "stream error") +
                    (e == ENOSPC || e == EDQUOT ? "; the disk is full" : "") + "); nothing was written");
  }
  if (impl_->kind == Impl::Kind::Replace) {
    if (::fchmod(impl_->fd.get(), impl_->mode) != 0 || ::close(impl_->fd.release()) != 0)
      throw UserError(named() + ": writing failed (" + std::strerror(errno) + "); nothing was written");
    // The target must still be absent or a regular file: a link or a directory put there since the run
    // began would be replaced by the rename.
    struct stat l {};
    if (::lstat(path_.c_str(), &l) == 0 && !S_ISREG(l.st_mode))
      throw UserError(named() + ": became " + file_kind(l.st_mode) +
                      " while moesim ran; nothing was written; remove it or give another path");
  } else {
    // Open the device, FIFO or link target now, before anything is put in place, so that a FIFO with no
    // reader or a target that cannot be written is found while nothing is written yet. O_NONBLOCK makes
    // open(2) of a FIFO without a reader fail with ENXIO instead of waiting (fifo(7)).
    impl_->target = Fd(::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!impl_->target.valid()) {
      const int e = errno;
      throw UserError(named() +
                      (e == ENXIO ? ": is a FIFO that no process reads; start its reader first"
                                  : ": cannot be opened for writing (" + std::string(std::strerror(e)) +
                                        "); check its permissions") +
                      "; nothing was written");
    }
    const int flags = ::fcntl(impl_->target.get(), F_GETFL);
    if (flags >= 0) ::fcntl(impl_->target.get(), F_SETFL, flags & ~O_NONBLOCK);
  }
  impl_->finished = true;
}

void OutputFile::publish() {
  if (impl_->kind == Impl::Kind::Replace) {
    if (std::rename(impl_->tmp.c_str(), path_.c_str()) != 0)
      throw UserError(named() + ": cannot rename the finished file into place (" + std::strerror(errno) + ")");
    unregister_pending(impl_->slot);
    impl_->slot = -1;
    impl_->tmp.clear();
  } else {
    // A regular file behind a link is truncated only now; a device or FIFO is written as it is.
    if (impl_->target_regular && ::ftruncate(impl_->target.get(), 0) != 0)
      throw UserError(named() + ": cannot truncate the linked file (" + std::strerror(errno) + ")");
    if (::lseek(impl_->fd.get(), 0, SEEK_SET) != 0)
      throw UserError(named() + ": cannot read back the held data (" + std::strerror(errno) + ")");
    char chunk[1 << 16];
    for (;;) {
      const ssize_t n = ::read(impl_->fd.get(), chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw UserError(named() + ": cannot read back the held data (" + std::strerror(errno) + ")");
      if (n == 0) break;
      if (!write_all(impl_->target.get(), chunk, static_cast<std::size_t>(n)))
        throw UserError(named() + ": writing failed (" + std::strerror(errno) + ")");
    }
    impl_->target.reset();
  }
  impl_->committed = true;
}

void OutputFile::commit() {
  finish();
  const SignalsHeld held;
  publish();
}

OutputFile& OutputSet::add(const std::string& path, const std::string& flag, bool binary) {
  std::vector<std::pair<std::string, std::string>> all;
  for (const auto& f : files_) all.emplace_back(f->path(), f->flag());
  all.emplace_back(path, flag);
  check_distinct_outputs(all);
  files_.push_back(std::make_unique<OutputFile>(path, flag, binary));
  return *files_.back();
}

void OutputSet::commit() {
  if (committed_) return;
  for (auto& f : files_) f->finish();  // phase 1: any failure here leaves everything as it was
  const SignalsHeld held;
  std::vector<std::string> done;
  for (auto& f : files_) {
    // Files first, devices and FIFOs last: a stream cannot be taken back, a file can still be refused.
    if (f->impl_->kind != OutputFile::Impl::Kind::Replace) continue;
    try {
      f->publish();
    } catch (const UserError& e) {
      throw UserError(std::string(e.what()) +
                      (done.empty() ? "; nothing was written" : "; written before it failed: " + text::join(done)));
    }
    done.push_back(f->path());
  }
  for (auto& f : files_)
    if (f->impl_->kind == OutputFile::Impl::Kind::WriteThrough) f->publish();
  committed_ = true;
}

// --- OutputDir ---------------------------------------------------------------------------------------------

std::string output_dir_marker(const std::string& kind) { return ".moesim-" + kind; }

namespace {

/// The files an earlier moesim directory lists in its marker, or nullopt when it has no marker (a regular
/// file of at most 4 MiB holding {"files": [...]}): it is then not moesim's to replace.
std::optional<std::vector<std::string>> listed_files(const fs::path& dir, const std::string& kind) {
  const fs::path marker = dir / output_dir_marker(kind);
  struct stat st {};
  if (::lstat(marker.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  try {
    InputFile in(marker);
    const auto doc = nlohmann::json::parse(in.read_all(4u << 20, "a marker file", "it is not moesim's"));
    std::vector<std::string> files;
    for (const auto& f : doc.at("files")) files.push_back(f.get<std::string>());
    return files;
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable or not ours: treated as no marker
  }
}

/// Every entry under `dir` (links not followed), as paths relative to it.
std::vector<std::string> entries_under(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end; !ec && it != end;
       it.increment(ec)) {
    out.push_back(fs::relative(it->path(), dir, ec).generic_string());
  }
  if (ec) throw UserError(dir.string() + ": cannot list the directory (" + ec.message() + ")");
  std::sort(out.begin(), out.end());
  return out;
}

/// Removes what an earlier moesim directory listed, then the directories left empty; anything else stays.
void remove_listed(const fs::path& dir, const std::vector<std::string>& files) {
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (const auto& f : files) {
    const fs::path p = dir / f;
    if (p.lexically_normal().string().rfind(dir.lexically_normal().string(), 0) != 0) continue;  // "../x"
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      dirs.push_back(p);
    } else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
      ::unlink(p.c_str());
    }
  }
  // Deepest first; rmdir(2) removes only empty directories.
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) { return a.string() > b.string(); });
  for (const auto& d : dirs) ::rmdir(d.c_str());
  ::rmdir(dir.c_str());
}

/// Makes a directory with an unpredictable name beside `target` (mkdtemp(3): mode 0700, never an existing
/// path).
fs::path make_temp_dir(const fs::path& target, const std::string& tag, const std::string& who) {
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (parent / ("." + target.filename().string() + "." + tag + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw UserError(who + ": cannot write in " + parent.string() + " (" + std::strerror(errno) +
                    "); give a writable path");
  return tmpl;
}

}  // namespace

OutputDir::OutputDir(fs::path target, std::string flag, std::string kind)
    : target_(std::move(target)), flag_(std::move(flag)), kind_(std::move(kind)) {
  // A trailing slash ("out/") names the same directory; without it filename() is empty.
  if (!target_.has_filename()) target_ = target_.parent_path();
  const std::string who = flag_ + " " + target_.string();
  const fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  struct stat l {};
  if (::lstat(target_.c_str(), &l) == 0) {
    if (S_ISLNK(l.st_mode))
      throw UserError(who + ": is a symbolic link; moesim replaces only directories it wrote; give the real path");
    if (!S_ISDIR(l.st_mode)) {
      throw UserError(who + ": is " + (S_ISREG(l.st_mode) ? std::string("a file") : file_kind(l.st_mode)) +
                      ", not a directory; give a directory path");
    }
    const auto entries = entries_under(target_);
    if (!entries.empty()) {
      const auto listed = listed_files(target_, kind_);
      if (!listed) {
        throw UserError(who + ": exists and is not a moesim " + kind_ + " (it has no " + output_dir_marker(kind_) +
                        " file); moesim never replaces a directory it did not write; give a new or empty directory");
      }
      for (const auto& e : entries) {
        if (e == output_dir_marker(kind_) || std::find(listed->begin(), listed->end(), e) != listed->end()) continue;
        throw UserError(who + ": holds " + e + ", which the earlier moesim " + kind_ +
                        " there did not write; move it out, or give another directory");
      }
    }
    target_exists_ = true;
  } else if (errno != ENOENT) {
    throw UserError(who + ": cannot be inspected (" + std::strerror(errno) + ")");
  } else {
    std::error_code ec;
    if (!fs::is_directory(parent, ec))
      throw UserError(who + ": the directory " + parent.string() + " does not exist; create it or give another path");
  }
  tmp_ = make_temp_dir(target_, "tmp", who);
}

OutputDir::~OutputDir() {
  if (committed_ || tmp_.empty()) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);  // moesim's own mkdtemp directory; remove_all does not follow links in it
}

void OutputDir::commit() {
  if (committed_) return;
  const std::string who = flag_ + " " + target_.string();
  nlohmann::json files = nlohmann::json::array();
  for (const auto& e : entries_under(tmp_)) files.push_back(e);
  write_file_atomically((tmp_ / output_dir_marker(kind_)).string(),
                        nlohmann::json{{"written_by", "moesim " + kind_}, {"files", files}}.dump(1) + "\n");
  // mkdtemp made it 0700; the finished directory gets what mkdir(2) would have given it.
  ::chmod(tmp_.c_str(), static_cast<mode_t>(0777 & ~umask_value()));
  const SignalsHeld held;
  std::optional<std::vector<std::string>> old_files;
  fs::path old;
  if (target_exists_) {
    old_files = listed_files(target_, kind_);
    if (old_files) {
      // Move the earlier directory aside onto an empty directory of our own (rename(2) replaces an empty
      // directory), so the new one can take its name.
      old = make_temp_dir(target_, "old", who);
      if (std::rename(target_.c_str(), old.c_str()) != 0) {
        ::rmdir(old.c_str());
        throw UserError(who + ": cannot move the earlier " + kind_ + " aside (" + std::strerror(errno) +
                        "); nothing was written");
      }
    }
    // else: the target is an empty directory, which the rename below replaces.
  }
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0) {
    const int e = errno;
    if (!old.empty()) std::rename(old.c_str(), target_.c_str());
    throw UserError(who + ": cannot move the " + kind_ + " into place (" + std::strerror(e) +
                    (e == ENOTEMPTY || e == EEXIST ? "; something was written there meanwhile" : "") +
                    "); nothing was written");
  }
  committed_ = true;
  if (!old.empty()) {
    old_files->push_back(output_dir_marker(kind_));
    remove_listed(old, *old_files);
  }
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& paths_and_flags) {
  // Two names are the same file when they resolve to the same path (weakly_canonical follows the links
  // of the part that exists) or, for files that exist, when they have the same device and inode.
  std::map<std::string, std::size_t> seen;
  std::map<std::pair<dev_t, ino_t>, std::size_t> seen_inode;
  for (std::size_t i = 0; i < paths_and_flags.size(); ++i) {
    const auto& [path, flag] = paths_and_flags[i];
    std::error_code ec;
    fs::path key = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (ec) key = fs::absolute(path, ec).lexically_normal();
    std::optional<std::size_t> same;
    if (auto it = seen.find(key.string()); it != seen.end()) same = it->second;
    struct stat st {};
    if (!same && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      const auto id = std::make_pair(st.st_dev, st.st_ino);
      if (auto it = seen_inode.find(id); it != seen_inode.end()) same = it->second;
      seen_inode.emplace(id, i);
    }
    if (same) {
      const auto& [p0, f0] = paths_and_flags[*same];
      throw UserError(moesim::named(p0, f0) + " and " + moesim::named(path, flag) +
                      " name the same file; give each output its own path");
    }
    seen.emplace(key.string(), i);
  }
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

SignalsHeld::SignalsHeld() {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &saved_);
}

SignalsHeld::~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

}  // namespace moesim
