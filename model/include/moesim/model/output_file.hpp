#pragma once
// Result files are written whole or not at all: the data goes to a temporary file beside the target,
// which is renamed over it only when complete (rename is atomic within a directory on POSIX). An error,
// an exception or a crash before commit() leaves no file that looks complete and is not.

#include <fstream>
#include <string>

namespace moesim {

class OutputFile {
 public:
  /// Opens "<path>.tmp-<pid>" for writing; UserError naming `path` (and `flag`, the option that gave
  /// it, when not empty) if the directory does not exist or is not writable.
  explicit OutputFile(std::string path, std::string flag = "", bool binary = false);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  /// Removes the temporary file unless commit() succeeded.
  ~OutputFile();

  std::ofstream& stream() { return out_; }
  /// Flushes, checks for write errors (disk full) and renames onto the target path.
  void commit();
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string flag_;
  std::string tmp_;
  std::ofstream out_;
  bool committed_ = false;
  int slot_ = -1;  ///< its entry in the table remove_pending_outputs() reads
};

/// Removes every OutputFile's temporary file that is still open (not committed). Async-signal-safe (it
/// only calls unlink on paths recorded when the files were opened): the SIGINT/SIGTERM handler of
/// `moesim` calls it before exiting, so an interrupted run leaves no partial file behind.
void remove_pending_outputs() noexcept;

/// Writes `contents` to `path` through an OutputFile.
void write_file_atomically(const std::string& path, const std::string& contents, const std::string& flag = "");

}  // namespace moesim
