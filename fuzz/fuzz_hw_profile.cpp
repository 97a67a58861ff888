// Fuzz target: hardware profile JSON (model/hardware.hpp): a node, a NIC or a storage profile, as
// `--hw my-node.json`, `--nic my-nic.json` and `--storage my-ssd.json` load them. The first byte picks the
// kind; the rest is the file.
#include "fuzz_support.hpp"
#include "moesim/model/hardware.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto sel = moesim::fuzz::select(data, size, 3);
  const unsigned which = sel.which;
  const std::string_view rest = sel.rest;
  const auto path = moesim::fuzz::write_file("profile.json", rest).string();
  moesim::fuzz::expect_user_errors_only([&] {
    switch (which) {
      case 0:
        (void)moesim::model::load_node(path);
        break;
      case 1:
        (void)moesim::model::load_nic(path);
        break;
      default:
        (void)moesim::model::load_storage(path);
        break;
    }
  });
  return 0;
}
