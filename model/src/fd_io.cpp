#include "moesim/model/fd_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"

namespace moesim {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {
constexpr std::size_t kBuffer = 1 << 16;  // 64 KiB: large enough that write(2) calls are not the cost
}  // namespace

FdStreambuf::FdStreambuf(int fd, Mode mode) : fd_(fd), mode_(mode), buffer_(kBuffer) {
  if (mode_ == Mode::Write) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  } else {
    setg(buffer_.data(), buffer_.data(), buffer_.data());
  }
}

FdStreambuf::~FdStreambuf() {
  if (mode_ == Mode::Write) flush_buffer();
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking FIFO or terminal that is full: wait for room
        ::usleep(1000);
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool FdStreambuf::flush_buffer() {
  if (mode_ != Mode::Write || errno_ != 0) return errno_ == 0;
  const auto n = static_cast<std::size_t>(pptr() - pbase());
  if (n > 0 && !write_all(fd_, pbase(), n)) {
    errno_ = errno == 0 ? EIO : errno;
    return false;
  }
  setp(buffer_.data(), buffer_.data() + buffer_.size());
  return true;
}

FdStreambuf::int_type FdStreambuf::overflow(int_type c) {
  if (mode_ != Mode::Write || !flush_buffer()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

int FdStreambuf::sync() { return mode_ == Mode::Write ? (flush_buffer() ? 0 : -1) : 0; }

FdStreambuf::int_type FdStreambuf::underflow() {
  if (mode_ != Mode::Read) return traits_type::eof();
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  for (;;) {
    const ssize_t n = ::read(fd_, buffer_.data(), buffer_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) errno_ = errno;
      return traits_type::eof();
    }
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }
}

FdStreambuf::pos_type FdStreambuf::seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) {
  // Readers rewind after sniffing a file's magic bytes; regular files only (InputFile checks that).
  if (mode_ == Mode::Write && !flush_buffer()) return pos_type(off_type(-1));
  const int whence = dir == std::ios_base::beg ? SEEK_SET : dir == std::ios_base::cur ? SEEK_CUR : SEEK_END;
  if (mode_ == Mode::Read && dir == std::ios_base::cur) off -= egptr() - gptr();  // the buffered bytes
  const off_t at = ::lseek(fd_, static_cast<off_t>(off), whence);
  if (at < 0) return pos_type(off_type(-1));
  if (mode_ == Mode::Read) setg(buffer_.data(), buffer_.data(), buffer_.data());
  return pos_type(static_cast<off_type>(at));
}

FdStreambuf::pos_type FdStreambuf::seekpos(pos_type pos, std::ios_base::openmode which) {
  return seekoff(off_type(pos), std::ios_base::beg, which);
}

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a regular file";
}

namespace {

Fd open_input(const std::filesystem::path& path, const std::string& name, std::uint64_t& size) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once (and is then refused below) instead of
  // blocking in open(2) forever; it changes nothing for a regular file (open(2), "O_NONBLOCK").
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) {
    const int e = errno;
    if (e == ENOENT) {
      struct stat l {};
      if (::lstat(path.c_str(), &l) == 0 && S_ISLNK(l.st_mode))
        throw UserError(name + ": is a symbolic link to a file that does not exist; give the path of the file itself");
      throw UserError(name + ": no such file; check the path (relative paths are from the current directory)");
    }
    if (e == EACCES) throw UserError(name + ": cannot be read (permission denied); check its permissions");
    throw UserError(name + ": cannot be opened (" + std::strerror(e) + "); check the path");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw UserError(name + ": cannot be read (" + std::strerror(errno) + "); check the path");
  if (S_ISDIR(st.st_mode)) throw UserError(name + ": is a directory, not a file; give the path of the file in it");
  if (!S_ISREG(st.st_mode)) {
    throw UserError(name + ": is " + file_kind(st.st_mode) +
                    ", not a regular file; moesim reads inputs only from regular files (their size is known "
                    "before reading); save the data to a file and give its path");
  }
  // Back to blocking reads (a regular file never blocks, but the flag is not ours to leave on).
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

}  // namespace

InputFile::InputFile(const std::filesystem::path& path)
    : name_(path.string()),
      fd_(open_input(path, name_, size_)),
      buf_(fd_.get(), FdStreambuf::Mode::Read),
      stream_(&buf_) {}

std::string InputFile::read_all(std::uint64_t max_bytes, std::string_view what, std::string_view fix) {
  const auto refuse = [&](std::uint64_t bytes) {
    return UserError(name_ + ": has at least " + std::to_string(bytes) + " bytes, more than the " +
                     std::to_string(max_bytes) + " that " + std::string(what) + " may take; " + std::string(fix));
  };
  if (size_ > max_bytes) throw refuse(size_);
  std::string text;
  text.reserve(static_cast<std::size_t>(size_));
  char chunk[1 << 16];
  for (;;) {
    stream_.read(chunk, sizeof chunk);
    const auto n = static_cast<std::size_t>(stream_.gcount());
    if (n == 0) break;
    if (text.size() + n > max_bytes) throw refuse(text.size() + n);
    text.append(chunk, n);
  }
  if (buf_.errno_value() != 0)
    throw UserError(name_ + ": reading failed (" + std::string(std::strerror(buf_.errno_value())) + ")");
  return text;
}

std::string read_input_file(const std::filesystem::path& path, double memory_per_byte, std::string_view what) {
  InputFile in(path);
  const std::string fix = "split the file, or use a machine with more memory (or raise MOESIM_MEMORY_LIMIT)";
  model::require_memory(units::bytes(memory_per_byte * static_cast<double>(in.size())),
                        in.name() + ": " + std::string(what), fix);
  // The same bound on the bytes really read: the budget divided by the memory each byte will take.
  const double budget = model::memory_budget().bytes.base() / std::max(1.0, memory_per_byte);
  const auto limit = budget >= 1.8e19 ? UINT64_MAX : static_cast<std::uint64_t>(budget);
  return in.read_all(limit, what, fix);
}

bool read_line(std::istream& in, std::string& line, const LineBound& bound, const std::string& where,
               std::int64_t lineno) {
  line.clear();
  bool any = false;
  char chunk[4096];
  for (;;) {
    // get() stops before a '\n' or once the chunk is full; it sets failbit when it extracts nothing.
    in.get(chunk, sizeof chunk, '\n');
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n > 0) {
      any = true;
      if (line.size() + n > bound.max_bytes) {
        throw UserError(
            where + ": line " + std::to_string(lineno) + " needs more than " +
            units::format_binary(units::bytes(static_cast<double>(bound.max_bytes) * bound.memory_per_byte)) +
            " in memory once parsed, but only " + units::format_binary(units::bytes(bound.budget)) + " is available (" +
            bound.source + "); is this the right file? (its lines end somewhere)");
      }
      line.append(chunk, n);
    }
    if (in.eof()) return any;
    if (in.fail()) in.clear();  // nothing extracted: the next character is the '\n'
    const int c = in.peek();
    if (c == '\n') {
      in.ignore();
      return true;
    }
    if (c == std::char_traits<char>::eof()) return any;
  }
}

LineBound line_bound(double memory_per_byte) {
  const auto budget = model::memory_budget();
  LineBound b;
  b.memory_per_byte = std::max(1.0, memory_per_byte);
  b.budget = budget.bytes.base();
  b.source = budget.source;
  const double max = b.budget / b.memory_per_byte;
  b.max_bytes = max >= 1.8e19 ? UINT64_MAX : static_cast<std::uint64_t>(max);
  return b;
}

}  // namespace moesim
