#pragma once
// What moesim guarantees about the files it writes (README "Outputs"; issue 18):
//
//  1. Atomic. A result file is written to a temporary file beside its target and renamed over it only
//     when complete (rename(2) is atomic within a directory), so a reader never sees half a file. An error,
//     an exception or Ctrl-C before the commit leaves the target as it was and no temporary behind.
//  2. Safe temporaries. The temporary is created exclusively with an unpredictable name,
//     ".<name>.tmp-XXXXXX" (mkostemp(3): O_CREAT|O_EXCL, which never follows a symbolic link planted at that
//     name), mode 0600 while written, then the target's mode (or 0666 less the umask) before the rename.
//  3. Never replace what is not a regular file. A target that is a directory, a block device, a socket or
//     a symbolic link to nothing is refused. A character device (/dev/null, a terminal), a FIFO, or a
//     symbolic link to one of those or to a regular file (/proc/self/fd/1, a link into another folder) is
//     written THROUGH (opened and written, never renamed over): the link stays a link, the device a device.
//     Its data is held in an unnamed temporary file until the commit, so it too is written only whole.
//  4. All or nothing. The outputs of one run are an OutputSet: each is finished (flushed, checked for
//     write errors such as a full disk) before any is renamed into place, and the renames happen with
//     SIGINT/SIGTERM held back. Two flags naming the same file are refused before the run.
//
//  5. Directories (report --out, sweep --traces) are an OutputDir: built under a temporary name made by
//     mkdtemp(3) beside the target and renamed onto it when whole. The directory gets a marker file,
//     ".moesim-<kind>", listing every file moesim wrote in it. An existing target is replaced only if it
//     is empty, or if it carries that marker and holds nothing the marker does not list; anything else (a
//     folder of the user's, a link, a file) is refused, never removed. Replacing removes only the files
//     the old marker lists.
//
// Left open: a rename can still fail after every output was finished (the directory removed or made
// read-only in that instant); the message then names what was written and what was not.

#include <signal.h>

#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace moesim {

class OutputFile {
 public:
  /// Checks the target and opens its temporary; UserError naming `path` (and `flag`, the option that gave
  /// it, when not empty) if the target cannot be written (see the top of this file).
  explicit OutputFile(std::string path, std::string flag = "", bool binary = false);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  /// Removes the temporary file unless the output was committed.
  ~OutputFile();

  std::ostream& stream();
  /// Commits this file alone (an OutputSet of one).
  void commit();
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const std::string& flag() const { return flag_; }
  /// "path (--flag)" for messages.
  [[nodiscard]] std::string named() const;

 private:
  friend class OutputSet;
  struct Impl;
  /// Phase 1: flush and check for write errors; check the target is still what it was; open a
  /// write-through target. Nothing visible changes.
  void finish();
  /// Phase 2: rename into place, or copy the held data through to the device / FIFO / link.
  void publish();

  std::string path_;
  std::string flag_;
  std::unique_ptr<Impl> impl_;
};

/// The outputs of one run, committed together: all of them or none (see the top of this file).
class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  /// Opens an output; UserError if another output of this set already names the same file.
  OutputFile& add(const std::string& path, const std::string& flag = "", bool binary = false);
  /// Finishes every output, then puts them all in place. UserError, with nothing in place, if any fails
  /// to finish.
  void commit();
  [[nodiscard]] bool empty() const { return files_.empty(); }

 private:
  std::vector<std::unique_ptr<OutputFile>> files_;
  bool committed_ = false;
};

/// A directory of outputs built under a temporary name and put in place whole (point 5 above).
class OutputDir {
 public:
  /// Checks that `target` may be written (absent, empty, or an earlier moesim `kind` directory holding
  /// only what it lists) and creates the temporary directory; UserError naming `flag` otherwise.
  OutputDir(std::filesystem::path target, std::string flag, std::string kind);
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;
  /// Removes the temporary directory (moesim made it, with an unpredictable name) unless committed.
  ~OutputDir();

  /// Where to write: the temporary directory.
  [[nodiscard]] const std::filesystem::path& path() const { return tmp_; }
  [[nodiscard]] const std::filesystem::path& target() const { return target_; }
  /// Writes the marker (listing every file now under path()) and renames the directory onto the target,
  /// replacing an earlier one whose listed files are then removed.
  void commit();

 private:
  std::filesystem::path target_;
  std::string flag_;
  std::string kind_;
  std::filesystem::path tmp_;
  bool target_exists_ = false;
  bool committed_ = false;
};

/// The marker file's name for a kind of output directory: ".moesim-report".
std::string output_dir_marker(const std::string& kind);

/// Refuses two paths that name the same file (the same path written two ways, or two links to one file):
/// "--csv a.csv and --json-out ./a.csv name the same file; give each output its own path".
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& paths_and_flags);

/// Removes every OutputFile's temporary file that is still open (not committed). Async-signal-safe (it
/// only calls unlink on paths recorded when the files were opened): the SIGINT/SIGTERM handler of
/// `moesim` calls it before exiting, so an interrupted run leaves no partial file behind.
void remove_pending_outputs() noexcept;

/// Writes `contents` to `path` through an OutputFile.
void write_file_atomically(const std::string& path, const std::string& contents, const std::string& flag = "");

/// Signals SIGINT and SIGTERM held back for the life of this object (pthread_sigmask): a commit is not
/// cut in half. A signal that arrives meanwhile is delivered when the object goes.
class SignalsHeld {
 public:
  SignalsHeld();
  ~SignalsHeld();
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t saved_{};
};

}  // namespace moesim
