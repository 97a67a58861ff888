// Scenario keys several commands share (common_keys.hpp).

#include "moesim/scenario/common_keys.hpp"

#include <cmath>
#include <exception>
#include <map>
#include <vector>

#include "moesim/model/hardware.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

namespace moesim::scenario {

std::string runtime_help() {
  std::map<std::string, std::vector<std::string>> on;  // runtime -> the node profiles it has a profile for
  for (const auto& r : model::builtin_runtimes())
    on[r.runtime].push_back(r.hw == model::kAnyNode ? "any " + r.gpu_vendor + " GPU" : r.hw);
  std::vector<std::string> items;
  items.reserve(on.size());
  for (const auto& [runtime, hws] : on) items.push_back(runtime + " (" + text::join(hws) + ")");
  return "the software on the hardware: a runtime profile for --hw (built in: " + text::join(items) +
         "; `moesim hw` lists their figures), fitted to dense measurements or written by hand from published "
         "figures. It sets the figures it gives (bandwidth and compute efficiency, attention factor, cost per "
         "kernel and per layer) and leaves the node's own for the rest. On a node with no profile of that "
         "runtime, its \"any\" profile for the node's GPU maker (devices.gpu_vendor): the medians of its fits on "
         "that maker's machines it was measured on, with an interval from each of them predicted from the others "
         "(leave one machine out). Without it the node "
         "profile alone: no runtime's launch or dispatch costs";
}

void add_streaming_options(po::options_description& desc) {
  desc.add_options()("stream-from", po::value<std::string>(),
                     "stream the routed experts from this storage profile (`moesim hw`), serially: each MoE layer "
                     "reads its experts through the OS page cache before computing them (seed 004, flash-moe)")(
      "readers", po::value<std::int64_t>(), "streaming: parallel pread() threads (default 4)")(
      "page-cache", po::value<std::string>(),
      "streaming: the page cache experts may use, e.g. 35GB; 0B = every read from the SSD (default: the "
      "storage profile's page_cache)");
}

void apply_streaming_options(const po::variables_map& vm, std::optional<cost::StreamingSpec>& spec) {
  if (vm.count("stream-from")) {
    if (!spec) spec.emplace();
    spec->storage = vm["stream-from"].as<std::string>();
    if (spec->storage.empty()) throw UserError("--stream-from is empty; give a storage profile id (see `moesim hw`)");
  }
  for (const char* k : {"readers", "page-cache"}) {
    if (vm.count(k) && !spec)
      throw UserError(std::string("--") + k +
                      " without --stream-from: give the storage the experts stream from, "
                      "e.g. --stream-from apple-ssd-m3-max");
  }
  if (vm.count("readers")) {
    const std::int64_t n = vm["readers"].as<std::int64_t>();
    if (n < 1 || n > 1024) throw UserError("--readers " + std::to_string(n) + ": give 1 to 1024 parallel readers");
    spec->readers = static_cast<std::int32_t>(n);
  }
  if (vm.count("page-cache")) {
    const std::string text = vm["page-cache"].as<std::string>();
    const double b = units::parse(text, units::Dimension::Bytes, "--page-cache");
    if (!(b >= 0) || b > 9.2e18)
      throw UserError("--page-cache " + text + ": give a size >= 0 with its unit, e.g. 35GB");
    spec->page_cache = units::bytes(b);
  }
}

bool streaming_flag_given(const po::variables_map& vm) {
  return vm.count("stream-from") + vm.count("readers") + vm.count("page-cache") > 0;
}

double number_with_suffix(const json::Node& n, std::string_view key, const std::vector<std::string>& suffixes,
                          const std::string& example) {
  const std::string text = n.string(key);
  for (const auto& suffix : suffixes) {
    if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string num = text.substr(0, text.size() - suffix.size());
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(num, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == num.size() && std::isfinite(v) && v > 0) return v;
      throw n.error(key,
                    "\"" + text + "\" is not a positive number followed by " + suffix + ", e.g. \"" + example + "\"");
    }
  }
  throw n.error(key, "\"" + text + "\" needs its unit, e.g. \"" + example + "\"");
}

model::CostAssumptions read_costs(const json::Node& c, std::string& source) {
  c.expect_only({"energy_price", "amortisation", "utilisation", "source"});
  model::CostAssumptions a;
  source = c.optional_string("source").value_or("");
  if (c.has("energy_price")) a.usd_per_kwh = number_with_suffix(c, "energy_price", {"USD/kWh"}, "0.15USD/kWh");
  if (c.has("amortisation")) a.years = number_with_suffix(c, "amortisation", {"years", "year", "y"}, "3years");
  if (c.has("utilisation")) {
    a.utilisation = number_with_suffix(c, "utilisation", {"%"}, "50%") / 100.0;
    if (a.utilisation > 1) throw c.error("utilisation", "is above 100%");
  }
  return a;
}

}  // namespace moesim::scenario
