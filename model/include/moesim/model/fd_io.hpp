#pragma once
// File descriptors for moesim's inputs and outputs: an owning Fd, a std::streambuf over one (so a file that
// was opened and checked is the file that is read or written, with no second open by name between the
// check and the use), and the checks every input file passes before a byte of it is read (issue 18).

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <istream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace moesim {

/// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

/// A buffered std::streambuf over a file descriptor it does not own, for reading or for writing (not
/// both). A failed write(2) (a full disk, EIO) makes the stream bad; errno_value() keeps its errno.
class FdStreambuf : public std::streambuf {
 public:
  enum class Mode { Read, Write };
  FdStreambuf(int fd, Mode mode);
  ~FdStreambuf() override;
  FdStreambuf(const FdStreambuf&) = delete;
  FdStreambuf& operator=(const FdStreambuf&) = delete;
  [[nodiscard]] int errno_value() const { return errno_; }

 protected:
  int_type overflow(int_type c) override;
  int sync() override;
  int_type underflow() override;
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override;
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override;

 private:
  bool flush_buffer();
  int fd_;
  Mode mode_;
  std::vector<char> buffer_;
  int errno_ = 0;
};

/// Writes all of [data, data+size) to `fd`, retrying short writes and EINTR; false (errno set) on error.
bool write_all(int fd, const char* data, std::size_t size);

/// "a directory", "a FIFO", "a character device", "a block device", "a socket", "a symbolic link" or
/// "a regular file", for messages.
std::string file_kind(mode_t mode);

/// An input file, opened and checked before anything is read from it:
///  - it must be a regular file once symbolic links are followed (a checkpoint in a Hugging Face cache
///    is a tree of links into blobs/, which is fine; a link to /dev/zero is not);
///  - it is opened with O_NONBLOCK, so a FIFO with no writer is refused at once instead of hanging;
///  - devices, FIFOs, sockets and directories are refused with one line naming the file and its kind.
/// UserError "<path>: no such file; ..." / "<path>: is a FIFO, not a regular file; ..." otherwise.
class InputFile {
 public:
  explicit InputFile(const std::filesystem::path& path);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  [[nodiscard]] std::istream& stream() { return stream_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] int fd() const { return fd_.get(); }
  [[nodiscard]] const std::string& name() const { return name_; }
  /// The whole file as text, refused beyond `max_bytes` (which callers derive from the memory budget).
  /// The bound is checked on the bytes really read, so a file that grows while it is read is caught too.
  std::string read_all(std::uint64_t max_bytes, std::string_view what, std::string_view fix);

 private:
  std::string name_;
  std::uint64_t size_ = 0;
  Fd fd_;  // opened and checked in the member initialiser, before buf_ takes it
  FdStreambuf buf_;
  std::istream stream_;
};

/// The longest line a line-by-line reader holds: the memory budget (model/resources.hpp) over
/// `memory_per_byte`, the memory a byte of the line takes once parsed (17 for a JSON line; json_reader.cpp).
struct LineBound {
  double memory_per_byte = 1;
  std::uint64_t max_bytes = 0;
  double budget = 0;   ///< bytes
  std::string source;  ///< where the budget came from, for the message
};
LineBound line_bound(double memory_per_byte);

/// std::getline with a bound: reads one line (without its '\n') into `line`; false at the end of the input.
/// Once a line passes the bound, before it is held: UserError "<where>: line N needs more than X in memory
/// once parsed, but only Y is available (<source>); ..." (a file with no newline in gigabytes cannot take
/// all memory one line at a time).
bool read_line(std::istream& in, std::string& line, const LineBound& bound, const std::string& where,
               std::int64_t lineno);

/// Reads a whole input file (see InputFile) whose parsed form takes `memory_per_byte` times its size in
/// memory: refused before reading when that exceeds the memory budget (model/resources.hpp).
std::string read_input_file(const std::filesystem::path& path, double memory_per_byte, std::string_view what);

}  // namespace moesim
