// The main() of a fuzz target in a build without libFuzzer (MOESIM_FUZZ=OFF, any compiler): runs the
// target once on every file named, or every file in every directory named, as libFuzzer does when given
// files. CTest uses it to replay the seed corpora and the regression inputs (fuzz/regressions/) in every
// build, so a fixed finding stays fixed under GCC as well as under the Clang fuzz build.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
void run_one(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::cerr << p.string() << ": cannot be read\n";
    std::exit(2);
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}
}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        run_one(f);
        ++n;
      }
    } else {
      run_one(arg);
      ++n;
    }
  }
  std::cout << "ran " << n << " inputs\n";
  return n == 0 ? 2 : 0;
}
