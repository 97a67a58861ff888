#include "moesim/model/hardware.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "moesim/model/embedded.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/text.hpp"

namespace moesim::hw_data {
const std::vector<moesim::EmbeddedFile>& embedded_files();
}

namespace moesim::model {
namespace {

using units::Dimension;

/// A {"value": "...", "source": "..."} figure.
template <Dimension D>
Sourced<units::Quantity<D>> sourced(const json::Node& parent, std::string_view key, bool allow_zero = false) {
  const json::Node n = parent.child(key);
  n.expect_only({"value", "source", "date", "note"});
  Sourced<units::Quantity<D>> out;
  out.value = n.quantity<D>("value", allow_zero);
  out.source = n.string("source");
  if (out.source.empty())
    throw n.error("source", "is empty; say where the figure comes from (datasheet, paper, measurement)");
  return out;
}

template <Dimension D>
std::optional<Sourced<units::Quantity<D>>> optional_sourced(const json::Node& parent, std::string_view key,
                                                            bool allow_zero = false) {
  if (!parent.has(key) || parent.is_null(key)) return std::nullopt;
  return sourced<D>(parent, key, allow_zero);
}

std::string date_of(const json::Node& parent, std::string_view key) {
  if (!parent.has(key)) return "";
  return parent.child(key).optional_string("date").value_or("");
}

/// "node", "NIC", "storage" for messages; the option that takes a profile of that kind.
std::string kind_name(std::string_view kind) { return kind == "nic" ? "NIC" : std::string(kind); }
std::string flag_of(std::string_view kind) {
  return kind == "node"      ? "--hw"
         : kind == "nic"     ? "--nic"
         : kind == "runtime" ? "--runtime"
         : kind == "storage" ? "--stream-from (the scenario key streaming.storage)"
                             : "a profile option";
}

void expect_kind(const json::Node& n, std::string_view kind) {
  const std::string k = n.string("kind");
  if (k != kind) {
    throw n.error("kind", "is \"" + k + "\": this is a " + kind_name(k) + " profile, given where a " + kind_name(kind) +
                              " profile belongs; give a " + kind_name(kind) + " profile (" + flag_of(kind) +
                              "), and this one with " + flag_of(k));
  }
}

/// The fields every profile kind shares: only `keys` allowed, the right "kind", id, name, origin.
// `origin` is moved into p.origin: clang-tidy 14 does not see a move into a member of the template's type P
// and asks for a const& (which would copy instead).
template <class P>
P profile_header(const json::Node& n, std::string_view kind, std::initializer_list<std::string_view> keys,
                 std::string origin) {  // NOLINT(performance-unnecessary-value-param): moved, see above
  expect_kind(n, kind);  // first: a NIC profile given as --hw is named as such, not as a list of bad keys
  n.expect_only(keys);
  P p;
  p.id = n.string("id");
  p.name = n.optional_string("name").value_or(p.id);
  p.origin = std::move(origin);
  return p;
}

std::vector<EfficiencyBand> efficiency_bands(const json::Node& table, std::string_view key) {
  std::vector<EfficiencyBand> out;
  if (!table.has(key)) return out;
  for (const auto& b : table.elements(key)) {
    b.expect_only({"from", "to", "value", "samples"});
    EfficiencyBand band;
    band.from = b.quantity<Dimension::Bytes>("from", true);
    band.to = b.quantity<Dimension::Bytes>("to");
    band.value = b.number("value");
    band.samples = b.optional_integer("samples").value_or(0);
    if (!(band.to > band.from)) {
      throw b.error("to", "(" + units::format(band.to) + ") must be larger than from (" + units::format(band.from) +
                              "); a band covers weight matrices of from <= bytes < to");
    }
    if (!(band.value > 0.0) || band.value > 100.0) {
      throw b.error("value",
                    "must be an efficiency > 0 (achieved / peak, e.g. 0.65); got " + std::to_string(band.value));
    }
    if (!out.empty() && band.from < out.back().to) {
      throw b.error("from", "overlaps the previous band (which ends at " + units::format(out.back().to) +
                                "); sort the bands by size and do not let them overlap");
    }
    out.push_back(band);
  }
  return out;
}

/// A fraction written as a percentage, "5%" (a bare number is refused: 0.05 and 5 would both be plausible).
double percent(const json::Node& n, std::string_view key) {
  const std::string text = n.string(key);
  if (text.empty() || text.back() != '%') {
    throw n.error(key, "\"" + text + "\" is not a percentage; write it with a percent sign, e.g. \"5%\"");
  }
  try {
    std::size_t used = 0;
    const double v = std::stod(text.substr(0, text.size() - 1), &used);
    if (used != text.size() - 1 || !(v >= 0) || v > 1000) throw std::invalid_argument("range");
    return v / 100.0;
  } catch (const std::exception&) {
    throw n.error(key, "\"" + text + "\" is not a percentage between 0% and 1000%");
  }
}

/// `n`'s gpu_vendor: one of kGpuVendors.
std::string gpu_vendor(const json::Node& n) {
  std::string v = n.string("gpu_vendor");
  if (std::find(kGpuVendors.begin(), kGpuVendors.end(), v) == kGpuVendors.end()) {
    const std::vector<std::string> valid(kGpuVendors.begin(), kGpuVendors.end());
    throw n.error("gpu_vendor", "\"" + v + "\" is no GPU maker moesim knows; give one of " + text::join(valid) +
                                    " (the maker of the node's GPUs), or leave it out for a node without GPUs");
  }
  return v;
}

NodeProfile parse_node(const json::Node& n, std::string origin) {
  auto p = profile_header<NodeProfile>(n, "node",
                                       {"id", "kind", "name", "devices", "intra_node_link", "nics_per_node", "price",
                                        "power", "cloud_price", "residency", "notes", "calibration"},
                                       std::move(origin));
  const json::Node d = n.child("devices");
  d.expect_only({"count", "name", "gpu_vendor", "memory", "memory_bandwidth", "peak_flops", "kernel_overhead",
                 "layer_overhead", "dequant_overhead", "efficiency", "step_overhead", "request_overhead",
                 "sequence_overhead", "notes"});
  p.devices.count = d.integer("count", 1);
  p.devices.name = d.optional_string("name").value_or("");
  if (d.has("gpu_vendor")) p.devices.gpu_vendor = gpu_vendor(d);
  p.devices.memory = optional_sourced<Dimension::Bytes>(d, "memory");
  p.devices.memory_bandwidth = optional_sourced<Dimension::Bandwidth>(d, "memory_bandwidth");
  if (auto f = d.optional_child("peak_flops")) {
    for (const auto& [dtype, v] : f->raw().items()) {
      (void)v;
      p.devices.peak_flops[dtype] = sourced<Dimension::FlopRate>(*f, dtype);
    }
  }
  if (auto link = n.optional_child("intra_node_link")) {
    link->expect_only({"nic", "source", "note"});
    p.intra_node_link = link->string("nic");
  }
  p.price = optional_sourced<Dimension::Money>(n, "price", true);
  p.price_date = date_of(n, "price");
  p.power = optional_sourced<Dimension::Power>(n, "power");
  if (n.has("cloud_price")) {
    const json::Node c = n.child("cloud_price");
    c.expect_only({"value", "source", "date", "note"});
    const std::string v = c.string("value");
    constexpr std::string_view kPerHour = "/h";
    if (v.size() <= kPerHour.size() || v.substr(v.size() - kPerHour.size()) != kPerHour)
      throw c.error("value", "\"" + v + "\" must be a price per hour, e.g. \"98.32USD/h\"");
    const double usd =
        units::parse(std::string_view(v).substr(0, v.size() - kPerHour.size()), Dimension::Money, c.where("value"));
    if (usd <= 0) throw c.error("value", "must be positive (USD per hour of one node)");
    p.cloud_price_per_hour = Sourced<units::Money>{units::usd(usd), c.string("source")};
    p.cloud_price_date = c.optional_string("date").value_or("");
  }
  p.devices.kernel_overhead = optional_sourced<Dimension::Time>(d, "kernel_overhead", true);
  p.devices.layer_overhead = optional_sourced<Dimension::Time>(d, "layer_overhead", true);
  p.devices.step_overhead = optional_sourced<Dimension::Time>(d, "step_overhead", true);
  p.devices.request_overhead = optional_sourced<Dimension::Time>(d, "request_overhead", true);
  p.devices.sequence_overhead = optional_sourced<Dimension::Time>(d, "sequence_overhead", true);
  if (auto q = d.optional_child("dequant_overhead")) {
    for (const auto& [name, v] : q->raw().items()) {
      (void)v;
      const json::Node item = q->child(name);
      item.expect_only({"value", "source", "date", "note"});
      Sourced<double> f;
      f.value = percent(item, "value");
      f.source = item.string("source");
      if (f.source.empty()) throw item.error("source", "is empty; say where the figure comes from");
      p.devices.dequant_overhead[name] = f;
    }
  }
  if (auto nics = n.optional_child("nics_per_node")) {
    nics->expect_only({"value", "source", "note"});
    p.nics_per_node = Sourced<std::int64_t>{nics->integer("value", 1), nics->string("source")};
  }
  if (auto e = d.optional_child("efficiency")) {
    e->expect_only({"source", "memory", "compute", "note"});
    EfficiencyTable t;
    t.source = e->string("source");
    if (t.source.empty()) throw e->error("source", "is empty; say how the efficiencies were measured or fitted");
    t.memory = efficiency_bands(*e, "memory");
    t.compute = efficiency_bands(*e, "compute");
    p.devices.efficiency = std::move(t);
  }
  if (auto r = n.optional_child("residency")) {
    r->expect_only({"unwire_after", "rewire_per_buffer", "rewire_bandwidth", "note"});
    p.residency = ResidencyProfile{sourced<Dimension::Time>(*r, "unwire_after"),
                                   sourced<Dimension::Time>(*r, "rewire_per_buffer", true),
                                   sourced<Dimension::Bandwidth>(*r, "rewire_bandwidth")};
  }
  return p;
}

NicProfile parse_nic(const json::Node& n, std::string origin) {
  auto p = profile_header<NicProfile>(
      n, "nic", {"id", "kind", "name", "latency", "overhead", "bandwidth", "price", "switch", "notes", "calibration"},
      std::move(origin));
  p.latency = sourced<Dimension::Time>(n, "latency");
  p.overhead = optional_sourced<Dimension::Time>(n, "overhead", true);
  if (p.overhead && p.overhead->value > p.latency.value) {
    throw n.error("overhead", "(" + units::format(p.overhead->value) + ") is larger than latency (" +
                                  units::format(p.latency.value) +
                                  "); overhead is the sender's share of the one-way latency, so it must not exceed it");
  }
  p.bandwidth = sourced<Dimension::Bandwidth>(n, "bandwidth");
  p.price = optional_sourced<Dimension::Money>(n, "price", true);
  p.price_date = date_of(n, "price");
  if (n.has("switch")) {
    const json::Node sw = n.child("switch");
    sw.expect_only({"name", "ports", "price", "note"});
    NicProfile::Switch s;
    s.name = sw.string("name");
    s.ports = sw.integer("ports", 3);
    s.price = sourced<Dimension::Money>(sw, "price", true);
    s.price_date = date_of(sw, "price");
    p.switch_spec = std::move(s);
  }
  return p;
}

StorageProfile parse_storage(const json::Node& n, std::string origin) {
  // No "price" key: storage is part of a node and is priced with it.
  auto p = profile_header<StorageProfile>(n, "storage",
                                          {"id", "kind", "name", "read_bandwidth", "read_latency", "capacity",
                                           "cached_read_bandwidth", "page_cache", "notes", "calibration"},
                                          std::move(origin));
  p.read_bandwidth = sourced<Dimension::Bandwidth>(n, "read_bandwidth");
  p.read_latency = optional_sourced<Dimension::Time>(n, "read_latency");
  p.capacity = optional_sourced<Dimension::Bytes>(n, "capacity");
  p.cached_read_bandwidth = optional_sourced<Dimension::Bandwidth>(n, "cached_read_bandwidth");
  p.page_cache = optional_sourced<Dimension::Bytes>(n, "page_cache", true);  // 0: no caching (F_NOCACHE)
  return p;
}

/// Built-in profiles of one folder ("nodes", "nics", "storage"), parsed once.
/// The "kind" of the profiles in hwprofiles/<folder>/.
std::string folder_kind(std::string_view folder) {
  return folder == "nodes" ? "node" : folder == "nics" ? "nic" : folder == "runtimes" ? "runtime" : "storage";
}

/// Whether the embedded file `path` may hold a profile of `folder`: one of its files, or a measured profile
/// (hwprofiles/measured/, built in too, by its "kind").
bool may_hold(std::string_view path, std::string_view folder) {
  return path.substr(0, 9) == "measured/" || path.substr(0, folder.size() + 1) == std::string(folder) + "/";
}

/// Whether `doc`, the embedded file at `path`, is a profile of `folder` (a measured one: by its "kind").
bool is_profile_of(const nlohmann::json& doc, std::string_view path, std::string_view folder) {
  return path.substr(0, 9) != "measured/" || doc.value("kind", std::string()) == folder_kind(folder);
}

template <class P, class Parse>
const std::vector<P>& builtins(std::string_view folder, Parse parse) {
  // Function-local statics are initialised once, thread-safely; the data never changes after that.
  static const std::vector<P> all = [&] {
    std::vector<P> out;
    const std::string kind = folder_kind(folder);
    for (const auto& f : hw_data::embedded_files()) {
      if (!may_hold(f.path, folder)) continue;
      const std::string origin = "built-in hwprofiles/" + std::string(f.path);
      const nlohmann::json doc = json::parse_text(f.contents, origin);
      if (!is_profile_of(doc, f.path, folder)) continue;
      out.push_back(parse(json::Node(doc, origin), origin));
    }
    std::sort(out.begin(), out.end(), [](const P& a, const P& b) { return a.id < b.id; });
    // Two built-in profiles of one kind under one id: the id would name whichever sorted first.
    const auto twin = std::adjacent_find(out.begin(), out.end(), [](const P& a, const P& b) { return a.id == b.id; });
    MOESIM_CHECK(twin == out.end(), "two built-in " + kind + " profiles have the id '" + twin->id + "'");
    return out;
  }();
  return all;
}

template <class P, class Parse>
P load(std::string_view id_or_path, std::string_view folder, std::string_view what, std::string_view list_cmd,
       Parse parse) {
  // The built-in profile of that id alone, parsed from its own file: parsing every built-in profile (the
  // measured GPUs' hold megabytes of raw samples) would cost each command more than its own work. A file
  // that does not hold the id as a JSON string is not parsed.
  const std::string quoted = "\"" + std::string(id_or_path) + "\"";
  for (const auto& f : hw_data::embedded_files()) {
    if (!may_hold(f.path, folder) || f.contents.find(quoted) == std::string_view::npos) continue;
    const std::string origin = "built-in hwprofiles/" + std::string(f.path);
    const nlohmann::json doc = json::parse_text(f.contents, origin);
    if (doc.value("id", std::string()) == id_or_path && is_profile_of(doc, f.path, folder))
      return parse(json::Node(doc, origin), origin);
  }
  const std::filesystem::path path{std::string(id_or_path)};
  std::error_code ec;
  if (std::filesystem::exists(path, ec) || path.extension() == ".json") {
    const nlohmann::json doc = json::load_file(path);
    return parse(json::Node(doc, path.string()), path.string());
  }
  // The id of a built-in profile of another kind (a NIC id given as --hw): say which.
  for (const auto& f : hw_data::embedded_files()) {
    if (f.path.substr(0, folder.size() + 1) == std::string(folder) + "/") continue;
    const nlohmann::json doc = json::parse_text(f.contents, "built-in hwprofiles/" + std::string(f.path));
    if (doc.value("id", std::string()) != id_or_path) continue;
    const std::string other = doc.value("kind", std::string());
    throw UserError("'" + std::string(id_or_path) + "' is a " + kind_name(other) + " profile, not a " +
                    std::string(what) + "; give it with " + flag_of(other) + ", and a " + std::string(what) +
                    " here (see `" + std::string(list_cmd) + "`)");
  }
  const auto& all = builtins<P>(folder, parse);
  std::vector<std::string> ids;
  ids.reserve(all.size());
  for (const auto& p : all) ids.push_back(p.id);
  throw UserError("unknown " + std::string(what) + " '" + std::string(id_or_path) + "'" +
                  text::did_you_mean(id_or_path, ids) + "; valid ids: " + text::join(ids) + " (see `" +
                  std::string(list_cmd) + "`), or give the path of a profile JSON file");
}

}  // namespace

EfficiencyLookup efficiency_at(const std::vector<EfficiencyBand>& bands, units::Bytes bytes) {
  EfficiencyLookup out;
  if (bands.empty()) return out;
  for (const auto& b : bands) {
    if (!(bytes < b.from) && bytes < b.to) {
      out.value = b.value;
      out.band = &b;
      return out;
    }
  }
  // Outside every band (or in a gap between two): the nearest band by log-distance of sizes.
  const double x = std::max(bytes.base(), 1.0);
  double best = 0;
  for (const auto& b : bands) {
    const double lo = std::max(b.from.base(), 1.0);
    const double hi = b.to.base();
    const double d = x < lo ? std::log(lo / x) : std::log(x / hi);
    if (!out.band || d < best) {
      best = d;
      out.band = &b;
    }
  }
  out.value = out.band->value;
  out.inside = false;
  return out;
}

KernelRates kernel_rates(const NodeProfile& node, units::FlopRate peak, units::Bytes matrix_bytes,
                         std::string_view what) {
  KernelRates r{node.bandwidth().value, peak, ""};
  if (!node.devices.efficiency) {
    r.note = node.origin + " has no devices.efficiency: kernels run at 100% of the peak bandwidth and FLOP rate " +
             "(measure them with `moesim calibrate kernels`, or fit them with `moesim calibrate fit`)";
    return r;
  }
  const auto& t = *node.devices.efficiency;
  const EfficiencyLookup m = efficiency_at(t.memory, matrix_bytes);
  const EfficiencyLookup c = efficiency_at(t.compute, matrix_bytes);
  r.bandwidth = r.bandwidth * m.value;
  r.peak = r.peak * c.value;
  for (const auto& [look, bands, name] : {std::tuple{m, &t.memory, "memory"}, std::tuple{c, &t.compute, "compute"}}) {
    if (look.inside) continue;
    r.note += (r.note.empty() ? "" : "; ") + node.origin + ": " + std::string(what) + " matrices of " +
              units::format(matrix_bytes) + " lie outside the measured " + name + " efficiency bands (" +
              units::format(bands->front().from) + " to " + units::format(bands->back().to) + "): the nearest band's " +
              std::to_string(look.value).substr(0, 5) + " is used";
  }
  return r;
}

units::Bytes NodeProfile::memory_total() const {
  if (!devices.memory) {
    throw UserError(
        origin +
        ": $.devices.memory is missing and this command needs it; add {\"value\": \"192GB\", \"source\": \"...\"}");
  }
  return devices.memory->value * static_cast<double>(devices.count);
}

const Sourced<units::Bandwidth>& NodeProfile::bandwidth() const {
  if (!devices.memory_bandwidth) {
    throw UserError(origin +
                    ": $.devices.memory_bandwidth is missing and this command needs it; add {\"value\": \"800GB/s\", "
                    "\"source\": \"...\"}");
  }
  return *devices.memory_bandwidth;
}

const Sourced<units::FlopRate>& NodeProfile::peak(std::string_view dtype) const {
  const auto it = devices.peak_flops.find(std::string(dtype));
  if (it == devices.peak_flops.end()) {
    std::vector<std::string> have;
    for (const auto& [k, v] : devices.peak_flops) have.push_back(k);
    throw UserError(origin + ": $.devices.peak_flops." + std::string(dtype) +
                    " is missing and this estimate computes in " + std::string(dtype) + "; add it (the profile has: " +
                    (have.empty() ? "none" : text::join(have)) + ") or choose a --precision whose compute type it has");
  }
  return it->second;
}

namespace {

/// The one line for a profile without a price: the file, the field, and the key to add (`example` is a
/// price in the profile's unit syntax).
std::string price_missing_line(const std::string& origin, std::string_view example) {
  return origin + ": $.price is missing and the cost needs it; add \"price\": {\"value\": \"" + std::string(example) +
         "\", \"source\": \"where the price comes from\"} to this profile";
}

}  // namespace

std::string NodeProfile::price_missing() const { return price_missing_line(origin, "6599USD"); }

const Sourced<units::Money>& NodeProfile::node_price() const {
  if (!price) throw UserError(price_missing());
  return *price;
}

std::string NicProfile::price_missing() const { return price_missing_line(origin, "339USD"); }

const Sourced<units::Money>& NicProfile::nic_price() const {
  if (!price) throw UserError(price_missing());
  return *price;
}

NodeProfile load_node(std::string_view id_or_path) {
  return load<NodeProfile>(id_or_path, "nodes", "hardware (node) profile", "moesim hw", parse_node);
}
namespace {

/// A dimensionless figure with its source: {"value": 0.85, "source": "..."}, value in (0, max].
Sourced<double> sourced_ratio(const json::Node& n, std::string_view key, double max) {
  const json::Node item = n.child(key);
  item.expect_only({"value", "source", "note"});
  Sourced<double> f;
  f.value = item.number("value");
  if (!(f.value > 0) || f.value > max)
    throw item.error("value",
                     "must be > 0 and at most " + text::printf("%g", max) + "; got " + std::to_string(f.value));
  f.source = item.string("source");
  if (f.source.empty()) throw item.error("source", "is empty; say where the figure comes from");
  return f;
}

}  // namespace

namespace {

/// A runtime's count of tokens a kernel's choice depends on ({"value": n, "source": "..."}), 1-65536.
Sourced<double> parse_kernel_tokens(const json::Node& item, const std::string& what) {
  item.expect_only({"value", "source"});
  const std::int64_t n = item.integer("value", 1);
  if (n > 65536) throw item.error("value", "is " + std::to_string(n) + " tokens; " + what + " is at most 65536");
  std::string source = item.string("source");
  if (source.empty()) throw item.error("source", "is empty; name the kernel source the figure comes from");
  return {static_cast<double>(n), std::move(source)};
}

}  // namespace

Sourced<double> parse_expert_token_tile(const json::Node& item) { return parse_kernel_tokens(item, "a kernel tile"); }

Sourced<double> parse_expert_matvec_tokens(const json::Node& item) {
  return parse_kernel_tokens(item, "a matrix-vector kernel's batch");
}

Sourced<double> parse_expert_gemm_efficiency(const json::Node& item) {
  item.expect_only({"value", "source"});
  const double f = item.number("value");
  // Up to 2: a grouped kernel may beat the dense one it is compared with, but not by an order of magnitude.
  if (!(f > 0) || f > 2.0)
    throw item.error("value", "must be > 0 and at most 2 (the grouped expert GEMM's rate over the dense GEMM's); got " +
                                  text::printf("%g", f));
  std::string source = item.string("source");
  if (source.empty())
    throw item.error("source", "is empty; name the microbenchmark of the grouped and the dense kernel it comes from");
  return {f, std::move(source)};
}

DenseSmallBatch parse_dense_small_batch(const json::Node& item) {
  item.expect_only({"matvec_passes", "token_tile", "source"});
  DenseSmallBatch d;
  const std::vector<json::Node> passes = item.elements("matvec_passes");
  if (passes.empty() || passes.size() > 64)
    throw item.error("matvec_passes", "give 1 to 64 counts of weight reads, for steps of 2, 3, ... tokens");
  for (const json::Node& e : passes) {
    const nlohmann::json& v = e.raw();
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 65536)
      throw item.error("matvec_passes", "holds " + v.dump() + "; each is a whole number of reads, 1-65536");
    d.matvec_passes.push_back(static_cast<double>(v.get<std::int64_t>()));
  }
  if (item.has("token_tile")) {
    const std::int64_t t = item.integer("token_tile", 1);
    if (t > 65536)
      throw item.error("token_tile", "is " + std::to_string(t) + " tokens; a kernel tile is at most 65536");
    d.token_tile = static_cast<double>(t);
  }
  d.source = item.string("source");
  if (d.source.empty()) throw item.error("source", "is empty; name the kernel dispatch source the figures come from");
  return d;
}

std::string dense_small_batch_text(const DenseSmallBatch& d) {
  std::string passes;
  for (std::size_t i = 0; i < d.matvec_passes.size(); ++i)
    passes += (i ? ", " : "") + text::printf("%.0f", d.matvec_passes[i]);
  return "read " + passes + " times at steps of 2-" + std::to_string(d.matvec_passes.size() + 1) + " tokens" +
         (d.token_tile > 0 ? text::printf(", computed in tiles of %.0f tokens above", d.token_tile) : std::string());
}

Sourced<std::vector<std::string>> parse_native_dtypes(const json::Node& d) {
  d.expect_only({"value", "source"});
  Sourced<std::vector<std::string>> v;
  for (const json::Node& e : d.elements("value")) {
    if (!e.raw().is_string() || (e.raw() != "fp8" && e.raw() != "int8" && e.raw() != "fp4"))
      throw UserError(e.where() + ": give the low-precision tensor-core types the runtime uses: fp8, int8, fp4");
    v.value.push_back(e.raw().get<std::string>());
  }
  v.source = d.string("source");
  if (v.source.empty()) throw d.error("source", "is empty; say where the figure comes from");
  return v;
}

Sourced<std::map<std::string, std::string>> parse_checkpoint_formats(const json::Node& d) {
  d.expect_only({"value", "source"});
  const json::Node v = d.child("value");
  if (!v.raw().is_object())
    throw d.error("value", "give an object of {\"checkpoint format\": \"format the runtime stores it in\"}");
  Sourced<std::map<std::string, std::string>> out;
  for (const auto& item : v.raw().items()) {
    if (!item.value().is_string()) throw v.error(item.key(), "is not a precision name (see `moesim estimate --help`)");
    const std::string to = item.value().get<std::string>();
    const std::string& from = item.key();
    (void)v.resolving(item.key(), [&] { return &precision(from); });
    (void)v.resolving(item.key(), [&] { return &precision(to); });
    out.value[precision(from).name] = precision(to).name;
  }
  out.source = d.string("source");
  if (out.source.empty()) throw d.error("source", "is empty; say where the figure comes from");
  return out;
}

namespace {

RuntimeProfile parse_runtime(const json::Node& n, std::string origin) {
  auto p = profile_header<RuntimeProfile>(n, "runtime",
                                          {"id",
                                           "kind",
                                           "name",
                                           "runtime",
                                           "hw",
                                           "bandwidth_efficiency",
                                           "super_block_read_factor",
                                           "attention_factor",
                                           "prefill_attention_factor",
                                           "expert_token_tile",
                                           "expert_matvec_tokens",
                                           "expert_gemm_efficiency",
                                           "dense_small_batch",
                                           "kernel_overhead",
                                           "layer_overhead",
                                           "compute_efficiency",
                                           "native_dtypes",
                                           "checkpoint_formats",
                                           "step_overhead",
                                           "request_overhead",
                                           "sequence_overhead",
                                           "prediction_interval",
                                           "transferred_from",
                                           "gpu_vendor",
                                           "prediction_check",
                                           "calibration",
                                           "notes"},
                                          std::move(origin));
  p.runtime = n.string("runtime");
  p.hw = n.string("hw");
  if (n.has("transferred_from")) {
    const nlohmann::json& t = n.raw().at("transferred_from");
    if (!t.is_array() || t.empty())
      throw n.error("transferred_from",
                    "give the node profiles whose fits it was transferred from, e.g. [\"rtx-4090\", \"rtx-3090\"]");
    for (const auto& id : t) {
      if (!id.is_string()) throw n.error("transferred_from", "give node profile ids as strings");
      p.transferred_from.push_back(id.get<std::string>());
    }
  }
  if ((p.hw == kAnyNode) != !p.transferred_from.empty())
    throw n.error("hw", p.hw == kAnyNode ? "is \"any\" (a transferred runtime): give transferred_from too"
                                         : "names one node profile: transferred_from belongs to a runtime for \"any\"");
  if ((p.hw == kAnyNode) != n.has("gpu_vendor"))
    throw n.error("hw", p.hw == kAnyNode
                            ? "is \"any\" (a transferred runtime): give gpu_vendor too, the maker of the GPUs of the "
                              "machines it was transferred from (it applies to that maker's GPUs only)"
                            : "names one node profile: gpu_vendor belongs to a runtime for \"any\" (a fitted "
                              "runtime is for its own node, whatever its maker)");
  if (p.hw == kAnyNode) p.gpu_vendor = gpu_vendor(n);
  // Every figure is optional (one not given leaves the node's own), but a profile must give one.
  static constexpr std::array<std::string_view, 16> kFigures = {
      "bandwidth_efficiency",    "attention_factor",       "prefill_attention_factor",
      "kernel_overhead",         "layer_overhead",         "compute_efficiency",
      "native_dtypes",           "checkpoint_formats",     "step_overhead",
      "request_overhead",        "sequence_overhead",      "expert_token_tile",
      "super_block_read_factor", "expert_gemm_efficiency", "expert_matvec_tokens",
      "dense_small_batch"};
  if (std::none_of(kFigures.begin(), kFigures.end(), [&](std::string_view k) { return n.has(k); })) {
    std::vector<std::string> keys(kFigures.begin(), kFigures.end());
    throw n.error("gives no figure, so it would change nothing; give at least one of " + text::join(keys) +
                  ", each {\"value\": ..., \"source\": \"...\"}");
  }
  if (n.has("bandwidth_efficiency")) p.bandwidth_efficiency = sourced_ratio(n, "bandwidth_efficiency", 1.5);
  if (n.has("super_block_read_factor")) p.super_block_read_factor = sourced_ratio(n, "super_block_read_factor", 10.0);
  if (n.has("attention_factor")) p.attention_factor = sourced_ratio(n, "attention_factor", 1000.0);
  if (n.has("expert_token_tile")) p.expert_token_tile = parse_expert_token_tile(n.child("expert_token_tile"));
  if (n.has("expert_matvec_tokens"))
    p.expert_matvec_tokens = parse_expert_matvec_tokens(n.child("expert_matvec_tokens"));
  if (n.has("expert_gemm_efficiency"))
    p.expert_gemm_efficiency = parse_expert_gemm_efficiency(n.child("expert_gemm_efficiency"));
  if (n.has("dense_small_batch")) p.dense_small_batch = parse_dense_small_batch(n.child("dense_small_batch"));
  if (n.has("prefill_attention_factor"))
    p.prefill_attention_factor = sourced_ratio(n, "prefill_attention_factor", 1000.0);
  p.kernel_overhead = optional_sourced<Dimension::Time>(n, "kernel_overhead", true);
  p.layer_overhead = optional_sourced<Dimension::Time>(n, "layer_overhead", true);
  if (n.has("step_overhead")) p.step_overhead = sourced<Dimension::Time>(n, "step_overhead", true);
  if (n.has("request_overhead")) p.request_overhead = sourced<Dimension::Time>(n, "request_overhead", true);
  if (n.has("sequence_overhead")) p.sequence_overhead = sourced<Dimension::Time>(n, "sequence_overhead", true);
  if (n.has("compute_efficiency")) p.compute_efficiency = sourced_ratio(n, "compute_efficiency", 1.5);
  if (auto d = n.optional_child("native_dtypes")) p.native_dtypes = parse_native_dtypes(*d);
  if (auto f = n.optional_child("checkpoint_formats")) p.checkpoint_formats = parse_checkpoint_formats(*f);
  if (auto i = n.optional_child("prediction_interval")) {
    i->expect_only({"low", "high", "rows", "source"});
    p.error_low = i->number("low");
    p.error_high = i->number("high");
    if (!(p.error_low > -1) || !(p.error_high >= p.error_low) || !std::isfinite(p.error_high))
      throw i->error("give low <= high, both relative errors above -1 (e.g. -0.08 and 0.23)");
    p.calibration_rows = i->integer("rows", 0);
    p.interval_source = i->string("source");
  }
  if (n.has("prediction_check")) {
    for (const json::Node& c : n.elements("prediction_check")) {
      c.expect_only({"kind", "rows", "median_abs_error", "interval_coverage", "source"});
      RuntimeProfile::PredictionCheck k;
      k.kind = c.string("kind");
      std::vector<std::string> kinds;
      kinds.reserve(kPredictionCheckKinds.size());
      for (const auto& [name, words] : kPredictionCheckKinds) kinds.emplace_back(name);
      if (std::find(kinds.begin(), kinds.end(), k.kind) == kinds.end())
        throw c.error(
            "kind", "is \"" + k.kind + "\"" + text::did_you_mean(k.kind, kinds) + "; give one of " + text::join(kinds));
      if (p.prediction_check(k.kind) != nullptr) throw c.error("kind", "\"" + k.kind + "\" is checked twice");
      k.rows = c.integer("rows", 0);
      k.median_abs_error = c.number("median_abs_error");
      k.interval_coverage = c.number("interval_coverage");
      k.source = c.string("source");
      if (k.rows < 1 || !(k.median_abs_error >= 0) || !std::isfinite(k.median_abs_error) ||
          !(k.interval_coverage >= 0 && k.interval_coverage <= 1))
        throw c.error("give rows >= 1, median_abs_error >= 0 and interval_coverage in [0, 1] (e.g. 46, 0.109, 0.67)");
      p.prediction_checks.push_back(std::move(k));
    }
  }
  return p;
}

}  // namespace

const RuntimeProfile::PredictionCheck* RuntimeProfile::prediction_check(std::string_view kind) const {
  for (const PredictionCheck& c : prediction_checks)
    if (c.kind == kind) return &c;
  return nullptr;
}

std::string RuntimeProfile::interval_basis(bool moe, const std::vector<std::string_view>& kinds) const {
  std::string s = id + "'s interval from held-out dense rows (" +
                  text::printf("%+.0f%% .. %+.0f%%", 100 * error_low, 100 * error_high) + " error)";
  if (!moe) return s;
  // The interval is made of dense rows' held-out errors; how the profile did on the MoE rows no fit saw is
  // the buyer's to know beside it.
  for (const auto& [kind, words] : kPredictionCheckKinds) {
    const PredictionCheck* c = prediction_check(kind);
    if (c == nullptr || (!kinds.empty() && std::find(kinds.begin(), kinds.end(), kind) == kinds.end())) continue;
    s += "; on the " + std::to_string(c->rows) + " MoE " + std::string(words) + (c->rows == 1 ? " row" : " rows") +
         " of validation/measurements.csv it was checked on, its figures were " +
         text::printf("%.0f%%", 100 * c->median_abs_error) + " off (median) and " +
         text::printf("%.0f%%", 100 * c->interval_coverage) + " of them inside such a range";
  }
  return s;
}

RuntimeProfile load_runtime(std::string_view id_or_path) {
  return load<RuntimeProfile>(id_or_path, "runtimes", "runtime profile", "moesim hw", parse_runtime);
}
std::vector<RuntimeProfile> builtin_runtimes() { return builtins<RuntimeProfile>("runtimes", parse_runtime); }

RuntimeProfile find_runtime(std::string_view name, const NodeProfile& node) {
  std::vector<RuntimeProfile> on_node, matching, transferred, other_gpus, other_nodes;
  const auto named = [&](const RuntimeProfile& r) {
    return r.runtime == name || r.runtime.starts_with(std::string(name) + "-");
  };
  for (const auto& r : builtin_runtimes()) {
    if (r.id == name) return r;
    if (r.hw == kAnyNode && named(r)) (r.gpu_vendor == node.devices.gpu_vendor ? transferred : other_gpus).push_back(r);
    if (r.hw != kAnyNode && r.hw != node.id && named(r)) other_nodes.push_back(r);
    if (r.hw != node.id) continue;
    on_node.push_back(r);
    if (named(r)) matching.push_back(r);
  }
  const std::filesystem::path path{std::string(name)};
  std::error_code ec;
  if (std::filesystem::exists(path, ec) || path.extension() == ".json") return load_runtime(name);
  if (matching.size() == 1) return matching.front();
  // No fit of that runtime on this node: its transferred profile for this node's GPUs, the medians of its
  // fits on other machines of their maker.
  if (matching.empty() && transferred.size() == 1) return transferred.front();
  std::vector<std::string> ids;
  for (const auto& r : (matching.empty() ? (transferred.empty() ? on_node : transferred) : matching))
    ids.push_back(r.runtime);
  if (matching.size() > 1 || transferred.size() > 1)
    throw UserError("--runtime " + std::string(name) + " matches several runtimes" +
                    (matching.empty() ? " transferred to any " + node.devices.gpu_vendor + " GPU" : " on " + node.id) +
                    ": " + text::join(ids) + "; name one of them");
  // Transferred profiles of that name exist, for other makers' GPUs only: say so, and what this node is.
  std::string elsewhere;
  if (!other_gpus.empty()) {
    std::vector<std::string> others, makers;
    for (const auto& r : other_gpus) {
      others.push_back(r.id);
      if (std::find(makers.begin(), makers.end(), r.gpu_vendor) == makers.end()) makers.push_back(r.gpu_vendor);
    }
    elsewhere = "; " + text::join(others) + (other_gpus.size() == 1 ? " carries" : " carry") + " only to " +
                text::join(makers) + " GPUs, and " +
                (node.devices.gpu_vendor.empty()
                     ? node.id + " names no devices.gpu_vendor (give one of nvidia, amd, apple, intel if it has GPUs)"
                     : node.id + "'s are " + node.devices.gpu_vendor);
  }
  // Fitted on other machines only, with no transfer to this one's GPUs: say where (a fit of the same chip in
  // another box is the user's nearest figure).
  if (transferred.empty() && other_gpus.empty() && !other_nodes.empty()) {
    std::vector<std::string> where;
    where.reserve(other_nodes.size());
    for (const auto& r : other_nodes) where.push_back(r.hw);
    elsewhere += "; " + std::string(name) + " is fitted on " + text::join(where) + " only, and no transfer of it to " +
                 (node.devices.gpu_vendor.empty() ? node.id : node.devices.gpu_vendor + " GPUs") +
                 " exists (validate --fit writes one from a runtime's decode fits on three machines of a GPU maker)";
  }
  throw UserError("no runtime profile '" + std::string(name) + "' on " + node.id +
                  (ids.empty() ? std::string(" (it has none)") : "; its runtimes: " + text::join(ids)) + elsewhere +
                  "; fit one from dense measurements with `moesim validate --table validation --fit --write-runtimes "
                  "DIR`, or give a runtime profile's path");
}

NodeProfile apply_runtime(NodeProfile node, const RuntimeProfile& runtime) {
  if (runtime.hw != node.id && runtime.hw != kAnyNode)
    throw UserError(runtime.origin + ": $.hw: runtime " + runtime.runtime + " is for " + runtime.hw + ", not for " +
                    node.id + "; a runtime's figures belong to the machine they were measured on (fit one for " +
                    node.id + " with `moesim validate --table validation --fit`)");
  if (runtime.hw == kAnyNode && runtime.gpu_vendor != node.devices.gpu_vendor)
    throw UserError(runtime.origin + ": $.gpu_vendor: runtime " + runtime.id + " was transferred from " +
                    runtime.gpu_vendor + " GPUs (" + text::join(runtime.transferred_from) + "), and " + node.id +
                    (node.devices.gpu_vendor.empty() ? std::string(" names no devices.gpu_vendor")
                                                     : "'s GPUs are " + node.devices.gpu_vendor) +
                    "; a runtime's figures carry only to GPUs of the maker they were measured on (fit one for " +
                    node.id + " with `moesim validate --table validation --fit`)");
  // One band over every size for each efficiency the runtime gives; the node's own bands for the other.
  const auto one_band = [&](const Sourced<double>& e) {
    return std::vector<EfficiencyBand>{{units::bytes(0), units::bytes(1e18), e.value, runtime.calibration_rows}};
  };
  if (runtime.bandwidth_efficiency || runtime.compute_efficiency) {
    EfficiencyTable t = node.devices.efficiency.value_or(EfficiencyTable{});
    if (runtime.bandwidth_efficiency) {
      t.source = runtime.bandwidth_efficiency->source;
      t.memory = one_band(*runtime.bandwidth_efficiency);
    } else if (t.source.empty()) {
      t.source = runtime.compute_efficiency->source;
    }
    if (runtime.compute_efficiency) t.compute = one_band(*runtime.compute_efficiency);
    node.devices.efficiency = t;
  }
  if (runtime.kernel_overhead) node.devices.kernel_overhead = runtime.kernel_overhead;
  if (runtime.layer_overhead) node.devices.layer_overhead = runtime.layer_overhead;
  if (runtime.attention_factor) node.devices.attention_factor = runtime.attention_factor;
  if (runtime.super_block_read_factor) node.devices.super_block_read_factor = runtime.super_block_read_factor;
  if (runtime.prefill_attention_factor) node.devices.prefill_attention_factor = runtime.prefill_attention_factor;
  if (runtime.expert_token_tile) node.devices.expert_token_tile = runtime.expert_token_tile;
  if (runtime.expert_matvec_tokens) node.devices.expert_matvec_tokens = runtime.expert_matvec_tokens;
  if (runtime.expert_gemm_efficiency) node.devices.expert_gemm_efficiency = runtime.expert_gemm_efficiency;
  if (runtime.dense_small_batch) node.devices.dense_small_batch = runtime.dense_small_batch;
  if (!runtime.step_overhead.source.empty()) node.devices.step_overhead = runtime.step_overhead;
  if (!runtime.request_overhead.source.empty()) node.devices.request_overhead = runtime.request_overhead;
  if (!runtime.sequence_overhead.source.empty()) node.devices.sequence_overhead = runtime.sequence_overhead;
  if (runtime.native_dtypes) node.devices.native_dtypes = runtime.native_dtypes;
  return node;
}

NodeProfile with_measured_device(NodeProfile node, const NodeProfile& measured) {
  const DeviceSpec& m = measured.devices;
  if (m.count != 1)
    throw UserError(measured.origin + ": $.devices.count: a measured device profile describes one device, this one " +
                    std::to_string(m.count) + "; measure one GPU with `moesim calibrate kernels --backend cuda`");
  if (!m.memory_bandwidth)
    throw UserError(measured.origin +
                    ": $.devices.memory_bandwidth is missing; a measured device needs it (`moesim "
                    "calibrate kernels --backend cuda` writes it)");
  DeviceSpec& d = node.devices;
  if (m.memory) d.memory = m.memory;
  d.memory_bandwidth = m.memory_bandwidth;
  for (const auto& [dtype, peak] : m.peak_flops) d.peak_flops[dtype] = peak;
  if (m.efficiency) d.efficiency = m.efficiency;
  if (m.kernel_overhead) d.kernel_overhead = m.kernel_overhead;
  node.name += " (device figures measured: " + measured.id + ")";
  return node;
}

NicProfile load_nic(std::string_view id_or_path) {
  return load<NicProfile>(id_or_path, "nics", "NIC profile", "moesim hw", parse_nic);
}
StorageProfile load_storage(std::string_view id_or_path) {
  return load<StorageProfile>(id_or_path, "storage", "storage profile", "moesim hw", parse_storage);
}
namespace {
template <class P>
nlohmann::json document_of(const P& profile) {
  const std::string prefix = "built-in hwprofiles/";
  if (profile.origin.rfind(prefix, 0) == 0) {
    const std::string rel = profile.origin.substr(prefix.size());
    for (const auto& f : hw_data::embedded_files())
      if (f.path == rel) return json::parse_text(f.contents, profile.origin);
  }
  return json::load_file(profile.origin);
}
}  // namespace

nlohmann::json load_node_document(std::string_view id_or_path) { return document_of(load_node(id_or_path)); }
nlohmann::json load_nic_document(std::string_view id_or_path) { return document_of(load_nic(id_or_path)); }

std::vector<NodeProfile> builtin_nodes() { return builtins<NodeProfile>("nodes", parse_node); }
std::vector<NicProfile> builtin_nics() { return builtins<NicProfile>("nics", parse_nic); }
std::vector<StorageProfile> builtin_storage() { return builtins<StorageProfile>("storage", parse_storage); }

}  // namespace moesim::model
