// `moesim calibrate all`: every microbenchmark on this machine, within a few minutes, written as a node,
// a NIC (loopback) and a storage profile in the hwprofiles/ format, each with its provenance.

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "commands.hpp"
#include "moesim/calibrate/kernels.hpp"
#include "moesim/calibrate/memory.hpp"
#include "moesim/calibrate/pingpong.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/provenance.hpp"
#include "moesim/calibrate/storage.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/table.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

/// "my-host.json" -> "my-host.<kind>.json".
std::string sibling(const std::string& out, const std::string& kind) {
  std::string base = out;
  if (base.size() > 5 && base.ends_with(".json")) base.resize(base.size() - 5);
  return base + "." + kind + ".json";
}

std::string gbps(double bytes_per_s) { return text::printf("%.2f GB/s", bytes_per_s / 1e9); }

/// The options of `calibrate all`.
po::options_description describe_calibrate_all_options() {
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("out", po::value<std::string>(), "node profile to write (required); the NIC and storage profiles go beside it "
                                      "as <name>.nic.json and <name>.storage.json")
    ("id", po::value<std::string>(), "profile id (default: the file name without .json)")
    ("model", po::value<std::string>(), "model whose matrix shapes and expert size to measure (default dbrx-instruct)")
    ("storage-dir", po::value<std::string>(), "directory for the storage test file (default: the --out directory)")
    ("storage-size", po::value<std::string>(), "bytes of the storage test file (default 1GiB)")
    ("no-storage", "skip the storage benchmark (no storage profile)")
    ("no-net", "skip the loopback ping-pong (no NIC profile)")
    ("quick", "about a minute: fewer repeats and shorter budgets everywhere")
    ("json", "print a JSON summary");
  // clang-format on
  return desc;
}

/// The storage benchmark's options (--storage-dir, --storage-size, --quick), checked now (plan_storage), so a
/// full disk fails before minutes of other measurements.
calibrate::StorageOptions storage_options_from(const po::variables_map& vm, const std::string& node_path,
                                               const model::Architecture& arch, bool quick) {
  calibrate::StorageOptions so;
  so.dir = vm.count("storage-dir") ? vm["storage-dir"].as<std::string>()
                                   : std::filesystem::absolute(node_path).parent_path().string();
  so.size_flag = "--storage-size";
  so.flag = vm.count("storage-dir") ? "--storage-dir" : "--storage-dir (default: the --out directory)";
  so.size = vm.count("storage-size") ? parse_byte_size(vm["storage-size"].as<std::string>(), "--storage-size")
                                     : (quick ? 256ull << 20 : 1ull << 30);
  std::string note;
  so.block = calibrate::default_storage_block(arch, &note);
  so.max_seconds = quick ? 10 : 40;
  // Checked now, so a full disk fails before minutes of other measurements.
  (void)calibrate::plan_storage(so);
  return so;
}

/// What `calibrate all` measured: memory and kernels always, storage and the loopback when asked.
struct AllResults {
  calibrate::MemoryResult mem;
  calibrate::KernelResult kern;
  std::optional<calibrate::StorageResult> store;
  std::optional<calibrate::NetResult> net;
};

/// Every microbenchmark in turn, with one progress bar across them.
AllResults measure_all(const model::Architecture& arch, const calibrate::StorageOptions& so, bool quick,
                       bool do_storage, bool do_net) {
  calibrate::Progress progress(&std::cerr);
  AllResults r;
  // Phases, with their share of the progress bar (roughly their share of the time).
  const double w_mem = 0.12, w_kern = do_storage ? 0.6 : 0.85, w_store = do_storage ? 0.25 : 0.0;
  calibrate::MemoryOptions mo;
  mo.max_seconds = quick ? 8 : 20;
  mo.repeats = quick ? 2 : 5;
  progress.set_phase(0, w_mem, "memory");
  r.mem = calibrate::run_memory(mo, progress);

  calibrate::KernelOptions ko;
  ko.shapes = calibrate::model_matrix_shapes(arch);
  ko.shapes_source = arch.id;
  ko.max_seconds = quick ? 25 : 100;
  ko.repeats = quick ? 2 : 3;
  ko.memory_bandwidth = r.mem.triad_bandwidth;
  ko.memory_bandwidth_source = "STREAM triad of this run";
  progress.set_phase(w_mem, w_kern, "kernels");
  r.kern = calibrate::run_kernels(ko, progress);

  if (do_storage) {
    progress.set_phase(w_mem + w_kern, w_store, "storage");
    r.store = calibrate::run_storage(so, progress);
  }
  if (do_net) {
    calibrate::PingPongOptions ping_options;
    ping_options.time_per_size_s = quick ? 0.05 : 0.15;
    progress.set_phase(w_mem + w_kern + w_store, 1.0 - (w_mem + w_kern + w_store), "net");
    r.net = calibrate::run_loopback(ping_options, progress);
  }
  return r;
}

/// The largest f32 GEMV at batch 1 and the most threads: an expert's matrix read from memory.
const calibrate::KernelSample* largest_expert_gemv(const calibrate::KernelResult& kern) {
  const calibrate::KernelSample* expert_gemv = nullptr;
  for (const auto& s : kern.samples) {
    if (s.batch != 1 || s.threads != kern.max_threads || s.dtype != calibrate::KernelDtype::F32) continue;
    if (!expert_gemv || s.cost.weight_bytes > expert_gemv->cost.weight_bytes) expert_gemv = &s;
  }
  return expert_gemv;
}

/// The summary as a table: the figures the profiles are built from.
void print_calibrate_all_text(std::ostream& out, const calibrate::Provenance& prov, const AllResults& r,
                              const calibrate::KernelSample* expert_gemv) {
  const auto& mem = r.mem;
  const auto& kern = r.kern;
  const auto& store = r.store;
  const auto fit = r.net ? std::optional<calibrate::HockneyFit>(r.net->fit) : std::nullopt;
  out << "moesim calibrate all on " << prov.host << " (" << prov.cpu_model << ", " << prov.cores << " CPUs), "
      << prov.date << ", moesim " << prov.commit << "\n\n";
  scenario::Table t({"figure", "value", "from"});
  t.add_row({"memory bandwidth (STREAM triad)", gbps(mem.triad_bandwidth),
             std::to_string(mem.triad_threads) + " threads, best of " + std::to_string(mem.repeats)});
  if (expert_gemv) {
    t.add_row({"GEMV f32 " + std::to_string(expert_gemv->shape.rows) + "x" + std::to_string(expert_gemv->shape.cols),
               gbps(expert_gemv->bytes_per_second()) +
                   text::printf(" (%.0f%% of triad)", 100.0 * expert_gemv->bytes_per_second() / mem.triad_bandwidth),
               std::to_string(expert_gemv->threads) + " threads, batch 1"});
  }
  for (const auto& [d, f] : kern.peak_flops)
    t.add_row({std::string("peak GEMM ") + std::string(calibrate::dtype_name(d)), text::printf("%.1f GFLOP/s", f / 1e9),
               "best measured"});
  if (store) {
    t.add_row({"storage sequential read, cold", gbps(store->read_bandwidth),
               std::to_string(store->read_bandwidth_readers) + " readers, " + store->cold_method});
    t.add_row({"storage read latency, cold (p50)", units::format(units::seconds(store->read_latency)), "4 KiB reads"});
  }
  if (fit) {
    t.add_row({"loopback one-way latency", units::format(units::seconds(fit->latency_s)), "smallest band's intercept"});
    t.add_row({"loopback bandwidth", gbps(fit->bandwidth), "largest band's slope"});
  }
  t.print_text(out);
}

}  // namespace

int cmd_calibrate_all(const Args& args, std::ostream& out) {
  const po::options_description desc = describe_calibrate_all_options();
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim calibrate all --out my-host.json [options]\n\n"
          "Measures this machine: STREAM memory bandwidth, OpenBLAS GEMV/GEMM at a model's shapes, storage "
          "reads and a\nloopback TCP ping-pong, in under 5 minutes (about 1 with --quick). Writes the node "
          "profile, and beside it the\nNIC (loopback) and storage profiles, all in the hwprofiles/ format with "
          "provenance (host, CPU, date, moesim\ncommit, command), raw samples and fit residuals. For a real "
          "NIC run `moesim calibrate net` between two hosts.")) {
    return 0;
  }
  if (!vm.count("out")) throw UserError("--out is required: the node profile to write, e.g. --out my-host.json");
  const std::string node_path = vm["out"].as<std::string>();
  const bool quick = vm.count("quick") > 0;
  const bool do_storage = vm.count("no-storage") == 0;
  const bool do_net = vm.count("no-net") == 0;
  std::string id = vm.count("id") ? vm["id"].as<std::string>() : std::filesystem::path(node_path).stem().string();
  if (id.empty()) id = "this-host";
  const model::Architecture arch =
      model::load_model(vm.count("model") ? vm["model"].as<std::string>() : "dbrx-instruct");

  calibrate::StorageOptions so;
  if (do_storage) so = storage_options_from(vm, node_path, arch, quick);

  // Every output is opened before the measurements and committed together after them.
  OutputSet outputs;
  OutputFile& node_file = outputs.add(node_path, "--out");
  OutputFile *nic_file = nullptr, *storage_file = nullptr;
  if (do_net) nic_file = &outputs.add(sibling(node_path, "nic"), "--out");
  if (do_storage) storage_file = &outputs.add(sibling(node_path, "storage"), "--out");

  const std::string command = command_line("calibrate all", args);
  const calibrate::Provenance prov = calibrate::current_provenance(command);
  const AllResults r = measure_all(arch, so, quick, do_storage, do_net);
  const auto& [mem, kern, store, net] = r;

  // The profiles.
  nlohmann::json node = calibrate::kernels_profile_json(kern, prov, id, calibrate::memory_devices_json(mem, prov),
                                                        {{"memory", calibrate::memory_calibration_json(mem)}});
  node["name"] = "This machine (" + prov.host + ", " + prov.cpu_model + "), measured by moesim calibrate all";
  nlohmann::json companions = nlohmann::json::object();
  if (nic_file) companions["nic"] = nic_file->path();
  if (storage_file) companions["storage"] = storage_file->path();
  node["calibration"]["companions"] = companions;
  node["calibration"]["command"] = command;
  node_file.stream() << node.dump(2) << "\n";
  if (nic_file) {
    nic_file->stream() << calibrate::nic_profile_json(*net, prov, id + "-loopback",
                                                      "TCP loopback of " + prov.host + " (Boost.Asio ping-pong)")
                              .dump(2)
                       << "\n";
  }
  if (storage_file)
    storage_file->stream() << calibrate::storage_profile_json(*store, prov, id + "-storage").dump(2) << "\n";

  // The summary: the figures a profile is built from.
  const calibrate::KernelSample* expert_gemv = largest_expert_gemv(r.kern);
  if (vm.count("json")) {
    nlohmann::json j = {{"provenance", calibrate::to_json(prov)},
                        {"node_profile", node_file.path()},
                        {"triad_bandwidth", {{"value", mem.triad_bandwidth}, {"unit", "B/s"}}}};
    if (expert_gemv) {
      j["largest_gemv"] = {
          {"shape", std::to_string(expert_gemv->shape.rows) + "x" + std::to_string(expert_gemv->shape.cols)},
          {"bandwidth", {{"value", expert_gemv->bytes_per_second()}, {"unit", "B/s"}}},
          {"fraction_of_triad", expert_gemv->bytes_per_second() / mem.triad_bandwidth}};
    }
    if (nic_file) j["nic_profile"] = nic_file->path();
    if (storage_file) j["storage_profile"] = storage_file->path();
    out << j.dump(2) << "\n";
  } else {
    print_calibrate_all_text(out, prov, r, expert_gemv);
    out << "\nwrote      " << node_file.path() << " (node)";
    if (nic_file) out << ", " << nic_file->path() << " (NIC: loopback)";
    if (storage_file) out << ", " << storage_file->path() << " (storage)";
    out << "\nuse them   moesim simulate --hw " << node_file.path() << " ...; moesim hw shows any profile's figures\n";
  }
  outputs.commit();
  return 0;
}

}  // namespace moesim::apps