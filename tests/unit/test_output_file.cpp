// Outputs and inputs (model/output_file.hpp, model/fd_io.hpp; issue 18): temporaries that cannot be
// planted, targets that are never replaced unless they are regular files, all outputs of a run or none,
// output directories that replace only what moesim wrote, inputs that are regular files.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

using moesim::test::error_of;
namespace fs = std::filesystem;
using moesim::InputFile;
using moesim::OutputDir;
using moesim::OutputFile;
using moesim::OutputSet;
using moesim::UserError;

namespace {

class Dir {
 public:
  Dir() {
    std::string t = (fs::temp_directory_path() / "moesim-out-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~Dir() { fs::remove_all(path_); }
  [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

// The temporary is ".<name>.tmp-XXXXXX" beside the target (six random characters, mode 0600 while written);
// the finished file has the umask's mode, the temporary is gone.
TEST(OutputFile, TemporaryIsUnpredictableAndPrivate) {
  const Dir d;
  OutputFile f((d / "a.csv").string());
  f.stream() << "x\n";
  const auto during = names(d.path());
  ASSERT_EQ(during.size(), 1u);
  EXPECT_EQ(during[0].rfind(".a.csv.tmp-", 0), 0u) << during[0];
  EXPECT_EQ(during[0].size(), std::string(".a.csv.tmp-").size() + 6);
  struct stat st {};
  ASSERT_EQ(::lstat((d / during[0]).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  f.commit();
  EXPECT_EQ(names(d.path()), std::vector<std::string>{"a.csv"});
  EXPECT_EQ(read(d / "a.csv"), "x\n");
  const mode_t mask = ::umask(022);
  ::umask(mask);
  ASSERT_EQ(::stat((d / "a.csv").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
}

// Replacing a file keeps its permissions; an uncommitted output leaves the old file as it was.
TEST(OutputFile, ReplacesAFileWholeAndKeepsItsMode) {
  const Dir d;
  write(d / "p.json", "old");
  ::chmod((d / "p.json").c_str(), 0640);
  {
    OutputFile f((d / "p.json").string());
    f.stream() << "half";
  }  // destroyed without commit
  EXPECT_EQ(read(d / "p.json"), "old");
  EXPECT_EQ(names(d.path()), std::vector<std::string>{"p.json"});
  OutputFile f((d / "p.json").string());
  f.stream() << "new";
  f.commit();
  EXPECT_EQ(read(d / "p.json"), "new");
  struct stat st {};
  ASSERT_EQ(::stat((d / "p.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// A link is written through (the link stays a link), a character device too; a dangling link, a
// directory and a socket are refused.
TEST(OutputFile, WritesThroughLinksAndDevicesAndRefusesTheRest) {
  const Dir d;
  write(d / "target.txt", "before");
  fs::create_symlink(d / "target.txt", d / "link");
  moesim::write_file_atomically((d / "link").string(), "through");
  EXPECT_TRUE(fs::is_symlink(d / "link"));
  EXPECT_EQ(read(d / "target.txt"), "through");
  moesim::write_file_atomically("/dev/null", "discarded");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));

  fs::create_symlink(d / "missing", d / "dangling");
  EXPECT_NE(error_of([&] { OutputFile f((d / "dangling").string(), "--out"); }).find("does not exist"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d / "missing"));
  fs::create_directory(d / "sub");
  EXPECT_NE(error_of([&] { OutputFile f((d / "sub").string()); }).find("is a directory"), std::string::npos);
  EXPECT_EQ(names(d.path()), (std::vector<std::string>{"dangling", "link", "sub", "target.txt"}));
}

// All or nothing: when one output cannot be finished (here its target became a directory while the run
// went on), none is put in place.
TEST(OutputSet, NothingIsWrittenWhenOneOutputFails) {
  const Dir d;
  OutputSet set;
  set.add((d / "first.csv").string(), "--a").stream() << "1\n";
  set.add((d / "second.csv").string(), "--b").stream() << "2\n";
  fs::create_directory(d / "second.csv");
  const auto m = error_of([&] { set.commit(); });
  EXPECT_NE(m.find("second.csv (--b)"), std::string::npos) << m;
  EXPECT_NE(m.find("nothing was written"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(d / "first.csv"));
}

// Two outputs that are the same file, written two ways or through a hard link, are refused.
TEST(OutputSet, RefusesTwoNamesOfOneFile) {
  const Dir d;
  OutputSet set;
  set.add((d / "a.csv").string(), "--csv");
  const auto same = error_of([&] { set.add((d / "." / "a.csv").string(), "--json-out"); });
  EXPECT_NE(same.find("name the same file"), std::string::npos) << same;
  write(d / "x", "x");
  fs::create_hard_link(d / "x", d / "y");
  const auto linked = error_of([&] {
    moesim::check_distinct_outputs({{(d / "x").string(), "--a"}, {(d / "y").string(), "--b"}});
  });
  EXPECT_NE(linked.find("name the same file"), std::string::npos) << linked;
}

// An output directory: created whole with a marker listing its files; an earlier one is replaced and only
// its listed files removed; a directory of the user's, or an earlier one holding a file of the user's, is
// refused; an empty directory is taken.
TEST(OutputDir, ReplacesOnlyWhatMoesimWrote) {
  const Dir d;
  {
    OutputDir o(d / "rep", "--out", "report");
    write(o.path() / "a.txt", "1");
    fs::create_directory(o.path() / "sub");
    write(o.path() / "sub" / "b.txt", "2");
    EXPECT_FALSE(fs::exists(d / "rep"));
    o.commit();
  }
  EXPECT_EQ(names(d / "rep"), (std::vector<std::string>{".moesim-report", "a.txt", "sub"}));
  {
    OutputDir o(d / "rep", "--out", "report");
    write(o.path() / "c.txt", "3");
    o.commit();
  }
  EXPECT_EQ(names(d / "rep"), (std::vector<std::string>{".moesim-report", "c.txt"}));
  EXPECT_EQ(names(d.path()), std::vector<std::string>{"rep"}) << "the earlier report and the temporaries are gone";

  write(d / "rep" / "mine.txt", "user");
  const auto extra = error_of([&] { OutputDir o(d / "rep", "--out", "report"); });
  EXPECT_NE(extra.find("mine.txt"), std::string::npos) << extra;
  fs::create_directory(d / "user");
  write(d / "user" / "notes", "n");
  const auto user = error_of([&] { OutputDir o(d / "user", "--out", "report"); });
  EXPECT_NE(user.find("is not a moesim report"), std::string::npos) << user;
  EXPECT_EQ(read(d / "user" / "notes"), "n");

  fs::create_directory(d / "empty");
  OutputDir o(d / "empty", "--out", "report");
  write(o.path() / "z.txt", "z");
  o.commit();
  EXPECT_EQ(read(d / "empty" / "z.txt"), "z");
}

// Inputs: a FIFO with no writer and a character device are refused at once, a link to a regular file is
// read, and read_all stops at its bound.
TEST(InputFile, ReadsOnlyRegularFiles) {
  const Dir d;
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { InputFile f(d / "fifo"); }).find("is a FIFO"), std::string::npos);
  EXPECT_NE(error_of([&] { InputFile f("/dev/zero"); }).find("character device"), std::string::npos);
  write(d / "real.json", "{\"a\": 1}");
  fs::create_symlink(d / "real.json", d / "link.json");
  InputFile f(d / "link.json");
  EXPECT_EQ(f.size(), 8u);
  EXPECT_EQ(f.read_all(100, "a test", "fix"), "{\"a\": 1}");
  InputFile g(d / "real.json");
  EXPECT_NE(error_of([&] { (void)g.read_all(4, "a test", "fix"); }).find("more than the 4"), std::string::npos);
}

// The strict JSON parser: a key twice (with its path) and a NUL byte are refused; nlohmann's own errors
// pass through for the caller to word.
TEST(JsonStrict, RefusesDuplicateKeysAndNul) {
  const auto dup = error_of([] { (void)moesim::json::parse_strict(R"({"a": [1, {"b": 1, "b": 2}]})", "f.json"); });
  EXPECT_EQ(dup,
            "f.json: $.a[1]: the key \"b\" appears twice in one object; keep one (JSON readers differ on "
            "which would win)");
  const auto nul = error_of([] { (void)moesim::json::parse_strict(std::string("{}\0{}", 5), "g.json"); });
  EXPECT_NE(nul.find("g.json: holds a NUL byte at byte 2"), std::string::npos) << nul;
  EXPECT_EQ(moesim::json::parse_strict(R"({"a": {"b": 1}, "c": {"b": 2}})", "h")["c"]["b"], 2);
  EXPECT_THROW((void)moesim::json::parse_strict("{", "i"), nlohmann::json::parse_error);
}

// Quantities: an overflowing number says so; values beyond any real figure (before or after the prefix)
// are refused; ordinary figures parse as before.
TEST(UnitsRange, RefusesOverflowAndUnrealFigures) {
  using moesim::units::Dimension;
  const auto msg = [](const char* t, Dimension dim) {
    return error_of([&] { (void)moesim::units::parse(t, dim, "x"); });
  };
  EXPECT_NE(msg("1e400GB/s", Dimension::Bandwidth).find("overflows a double"), std::string::npos);
  EXPECT_NE(msg("1e308PB/s", Dimension::Bandwidth).find("overflows a double once its prefix"), std::string::npos);
  EXPECT_NE(msg("5e-324GB/s", Dimension::Bandwidth).find("outside any real bandwidth"), std::string::npos);
  EXPECT_NE(msg("1e9h", Dimension::Time).find("outside any real duration"), std::string::npos);
  EXPECT_NE(msg("1e-400s", Dimension::Time).find("too small for a double"), std::string::npos);
  EXPECT_DOUBLE_EQ(moesim::units::parse("800GB/s", Dimension::Bandwidth, "x"), 800e9);
  EXPECT_DOUBLE_EQ(moesim::units::parse("750ns", Dimension::Time, "x"), 750e-9);
  EXPECT_DOUBLE_EQ(moesim::units::parse("0s", Dimension::Time, "x"), 0.0);
}

// Messages quote user input; control characters in it become visible escapes.
TEST(TextOneLine, EscapesControlCharacters) {
  EXPECT_EQ(moesim::text::one_line("a\nb\r\tc\x1b[31m\x7f"), "a\\nb\\r\\tc\\x1b[31m\\x7f");
  EXPECT_EQ(moesim::text::one_line("plain, ünïcode"), "plain, ünïcode");
}

// A long source quoted in a note loses its long parenthesised asides (a fitted runtime's list of rows) and
// keeps the rest, short asides and nested ones inside them included; an unclosed "(" stays.
TEST(TextBrief, DropsLongAsidesOnly) {
  EXPECT_EQ(moesim::text::brief("fitted (to rows a, b) by hand", 40), "fitted (to rows a, b) by hand");
  EXPECT_EQ(moesim::text::brief("fitted (to rows a, b, c (and d)); none tests it", 10), "fitted (...); none tests it");
  EXPECT_EQ(moesim::text::brief("of 14 (node, runtime) classes (rows: a, b, c, d, e)", 15),
            "of 14 (node, runtime) classes (...)");
  EXPECT_EQ(moesim::text::brief("open (aside never closed", 3), "open (aside never closed");
}

// Lines are read with a bound: a line past it is refused before it is held; lines, the last without its
// newline, and empty lines read as std::getline reads them.
TEST(ReadLine, BoundedLikeGetline) {
  moesim::LineBound bound{1.0, 100, 100.0, "a test budget"};
  std::istringstream in("ab\n\nlast");
  std::string line;
  std::vector<std::string> got;
  std::int64_t n = 0;
  while (moesim::read_line(in, line, bound, "t.csv", ++n)) got.push_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "", "last"}));
  bound = {2.0, 5000, 10000.0, "a test budget"};
  std::istringstream big(std::string(10000, 'x') + "\nshort\n");
  const auto m = error_of([&] { (void)moesim::read_line(big, line, bound, "big.jsonl", 1); });
  EXPECT_EQ(m.find("big.jsonl: line 1 needs more than"), 0u) << m;
  EXPECT_NE(m.find("(a test budget)"), std::string::npos) << m;
  std::istringstream exact(std::string(5000, 'y') + "\n");
  EXPECT_TRUE(moesim::read_line(exact, line, bound, "e", 1));
  EXPECT_EQ(line.size(), 5000u);
  EXPECT_FALSE(moesim::read_line(exact, line, bound, "e", 2));
}
