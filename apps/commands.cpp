#include "commands.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/compare.hpp"
#include "moesim/scenario/estimate.hpp"
#include "moesim/scenario/study.hpp"
#include "moesim/scenario/table.hpp"
#include "moesim/sim/placement.hpp"

namespace po = boost::program_options;

namespace moesim::apps {

namespace {

template <class T>
bool is(const po::value_semantic* s) {
  return dynamic_cast<const po::typed_value<T>*>(s) != nullptr;
}

/// What Boost.Program_options lets through for typed options: "-1" for an unsigned option wraps around to
/// 4294967295 (boost::lexical_cast accepts a sign for unsigned types), and "inf" or "nan" are doubles.
/// Every option of every command is checked here, once, after parsing.
void check_typed_values(const po::parsed_options& parsed, const po::options_description& desc,
                        const po::variables_map& vm) {
  for (const auto& o : parsed.options) {
    const auto* d = desc.find_nothrow(o.string_key, false);
    if (d == nullptr || o.value.empty()) continue;
    const po::value_semantic* sem = d->semantic().get();
    const std::string shown = "--" + o.string_key + " " + o.value.front();
    if (is<unsigned>(sem) || is<unsigned long>(sem) || is<unsigned long long>(sem) || is<unsigned short>(sem)) {
      for (const auto& v : o.value) {
        const auto first = v.find_first_not_of(" \t");
        if (first != std::string::npos && v[first] == '-')
          throw UserError("--" + o.string_key + " " + v + ": must be a whole number, 0 or more");
      }
    }
    if (is<double>(sem) && vm.count(o.string_key) && !std::isfinite(vm[o.string_key].as<double>()))
      throw UserError(shown + ": must be a finite number");
  }
}

}  // namespace

bool parse_options(const Args& args, const po::options_description& desc, po::variables_map& vm, std::ostream& out,
                   const std::string& usage, const std::string& footer) {
  // No command takes positional arguments: Boost.Program_options keeps a stray word as an option without
  // a name, which store() drops silently (`moesim models path/config.json` printed the zoo). Refused here.
  // --help anywhere shows the help, also where it follows an option that takes a value (`validate --table
  // --help`, which validate's own help suggests): Boost would take it as that option's value.
  if (desc.find_nothrow("help", false) != nullptr &&
      std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; })) {
    out << usage << "\n\n" << desc << footer;
    return false;
  }
  const po::positional_options_description none;
  const po::parsed_options parsed = [&] {
    try {
      return po::command_line_parser(args).options(desc).positional(none).run();
    } catch (const po::too_many_positional_options_error&) {
      // Name the word: the first one that is neither an option nor the value of the option before it.
      for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a.empty() || a[0] != '-')
          throw UserError("'" + a + "' is not an option: options start with -- (see --help)");
        if (a.find('=') != std::string::npos) continue;
        const po::option_description* d = desc.find_nothrow(a.substr(a.rfind('-') + 1), false);
        if (d != nullptr && d->semantic()->max_tokens() > 0) ++i;  // its value
      }
      throw UserError("a word without an option before it: options start with -- (see --help)");
    }
  }();
  po::store(parsed, vm);
  check_typed_values(parsed, desc, vm);
  if (vm.count("help")) {
    out << usage << "\n\n" << desc << footer;
    return false;
  }
  po::notify(vm);
  return true;
}

bool flag_given(const po::variables_map& vm, const char* flag) { return vm.count(flag) && !vm[flag].defaulted(); }

std::vector<std::int64_t> parse_whole_numbers(const std::string& text, const std::string& flag, std::int64_t lo,
                                              std::int64_t hi, const std::string& example) {
  std::vector<std::int64_t> v;
  for (const auto& item : text::split(text, ',')) {
    std::int64_t x = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || x < lo || x > hi) {
      throw UserError(flag + ": '" + item + "' is not a whole number from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + "; write e.g. " + example);
    }
    v.push_back(x);
  }
  return v;
}

std::uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  const double b = units::parse(text, units::Dimension::Bytes, flag);
  if (!(b >= 1) || b > 9.2e18) {
    throw UserError(flag + " " + text + ": give a positive size with its unit, e.g. 2GiB or 512MB");
  }
  return static_cast<std::uint64_t>(b);
}

std::vector<std::string> take_inputs(Args& args) {
  std::vector<std::string> in;
  while (!args.empty() && (args.front().empty() || args.front()[0] != '-' || args.front() == "-")) {
    in.push_back(args.front());
    args.erase(args.begin());
  }
  return in;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string command_line(const std::string& command, const Args& args) {
  std::string s = "moesim " + command;
  for (const auto& a : args) s += " " + (a.find(' ') == std::string::npos ? a : "'" + a + "'");
  return s;
}

namespace {

std::string billions(double params) { return text::printf("%.2f", params / 1e9); }

std::string registry_help() {
  std::string s = "\nplacements (--placement):\n";
  for (const auto& p : sim::placements()) s += "  " + p.name + ": " + p.description + "\n";
  s += "\nexchanges (--exchange):\n";
  for (const auto& e : model::exchanges()) s += "  " + e.name + ": " + e.description + "\n";
  s += "\nexpert execution (--experts):\n";
  for (const auto& e : cost::expert_executions()) s += "  " + e.name + ": " + e.description + "\n";
  s += "\nprecisions (--precision):\n";
  s += "  checkpoint: the format the model's config.json declares (quantization_config: gpt-oss mxfp4/bf16, "
       "DeepSeek-V3 fp8, AWQ/GPTQ int4_g128), else bf16\n";
  for (const auto& p : model::precisions()) s += "  " + p.name + ": " + p.description + "\n";
  s += "  EXPERTS/OTHERS, e.g. mxfp4/q8_0: the routed experts in the first format, every other tensor (attention, "
       "dense layers, embedding, LM head) in the second\n";
  return s;
}

}  // namespace

int cmd_models(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("json", "print the zoo as JSON");
  po::variables_map vm;
  // The families come from the parser's own table (model::supported_families), so the list cannot drift.
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim models [--json]\n\nThe built-in model zoo. Any command that takes "
                     "--model also takes the path of a Hugging Face config.json whose model_type is one of: " +
                         text::join(model::supported_families()) + ".")) {
    return 0;
  }
  if (vm.count("json")) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& a : model::zoo()) {
      const auto p = model::parameter_counts(a);
      j.push_back({{"id", a.id},
                   {"name", a.name},
                   {"family", a.family},
                   {"hf_repo", a.hf_repo},
                   {"source", a.source},
                   {"layers", a.layers},
                   {"hidden", a.hidden},
                   {"routed_experts", a.routed_experts},
                   {"top_k", a.top_k},
                   {"shared_experts", a.shared_experts},
                   {"total_params", {{"value", p.total()}, {"unit", "params"}}},
                   {"active_params", {{"value", model::active_parameters(a)}, {"unit", "params"}}}});
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  scenario::Table t(
      {"id", "family", "total B params", "active B params", "layers", "experts", "top-k", "shared", "source"});
  for (const auto& a : model::zoo()) {
    const auto p = model::parameter_counts(a);
    t.add_row({a.id, a.family, billions(static_cast<double>(p.total())),
               billions(static_cast<double>(model::active_parameters(a))), std::to_string(a.layers),
               a.is_moe() ? std::to_string(a.routed_experts) : "dense", a.is_moe() ? std::to_string(a.top_k) : "-",
               std::to_string(a.shared_experts), a.hf_repo});
  }
  t.print_text(out);
  out << "\nactive = parameters used per token, embedding and LM head included (model cards differ: see `moesim "
         "models --json` and model/zoo/*.json for each published figure and its convention).\n";
  return 0;
}

int cmd_hw(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("json", "print the profiles as JSON, with every source");
  po::variables_map vm;
  if (!parse_options(args, desc, vm, out,
                     "usage: moesim hw [--json]\n\nBuilt-in hardware profiles (hwprofiles/). Any "
                     "command that takes --hw or --nic also takes the path of your own profile JSON.")) {
    return 0;
  }
  const auto nodes = model::builtin_nodes();
  const auto nics = model::builtin_nics();
  const auto storage = model::builtin_storage();
  auto q = [](const auto& opt) { return opt ? units::format(opt->value) : std::string("-"); };
  if (vm.count("json")) {
    auto s = [](const auto& opt, std::string_view unit) -> nlohmann::json {
      if (!opt) return nullptr;
      return {{"value", opt->value.base()}, {"unit", unit}, {"source", opt->source}};
    };
    nlohmann::json j;
    for (const auto& n : nodes) {
      nlohmann::json flops;
      for (const auto& [k, v] : n.devices.peak_flops)
        flops[k] = {{"value", v.value.base()}, {"unit", "FLOP/s"}, {"source", v.source}};
      j["nodes"].push_back(
          {{"id", n.id},
           {"name", n.name},
           {"devices", n.devices.count},
           {"device", n.devices.name},
           {"gpu_vendor", n.devices.gpu_vendor.empty() ? nlohmann::json() : nlohmann::json(n.devices.gpu_vendor)},
           {"memory_per_device", s(n.devices.memory, "B")},
           {"memory_bandwidth_per_device", s(n.devices.memory_bandwidth, "B/s")},
           {"peak_flops_per_device", flops},
           {"intra_node_link", n.intra_node_link ? nlohmann::json(*n.intra_node_link) : nlohmann::json()},
           {"price", s(n.price, "USD")},
           {"price_date", n.price_date},
           {"power", s(n.power, "W")}});
    }
    for (const auto& n : nics) {
      j["nics"].push_back({{"id", n.id},
                           {"name", n.name},
                           {"latency", s(std::optional(n.latency), "s")},
                           {"bandwidth", s(std::optional(n.bandwidth), "B/s")},
                           {"price", s(n.price, "USD")},
                           {"price_date", n.price_date}});
    }
    for (const auto& n : storage) {
      j["storage"].push_back({{"id", n.id},
                              {"name", n.name},
                              {"read_bandwidth", s(std::optional(n.read_bandwidth), "B/s")},
                              {"read_latency", s(n.read_latency, "s")},
                              {"capacity", s(n.capacity, "B")}});
    }
    // A runtime's figure it does not give is null: the node profile's own applies (model::apply_runtime).
    auto ratio = [](const std::optional<model::Sourced<double>>& f) -> nlohmann::json {
      if (!f) return nullptr;
      return {{"value", f->value}, {"source", f->source}};
    };
    for (const auto& r : model::builtin_runtimes()) {
      nlohmann::json host = nlohmann::json::object();  // serving host costs, when the profile has them
      if (!r.step_overhead.source.empty()) host["step_overhead"] = s(std::optional(r.step_overhead), "s");
      if (!r.request_overhead.source.empty()) host["request_overhead"] = s(std::optional(r.request_overhead), "s");
      if (!r.sequence_overhead.source.empty()) host["sequence_overhead"] = s(std::optional(r.sequence_overhead), "s");
      j["runtimes"].push_back({{"id", r.id},
                               {"runtime", r.runtime},
                               {"hw", r.hw},
                               {"bandwidth_efficiency", ratio(r.bandwidth_efficiency)},
                               {"compute_efficiency", ratio(r.compute_efficiency)},
                               {"attention_factor", ratio(r.attention_factor)},
                               {"prefill_attention_factor", ratio(r.prefill_attention_factor)},
                               {"expert_token_tile", ratio(r.expert_token_tile)},
                               {"expert_matvec_tokens", ratio(r.expert_matvec_tokens)},
                               {"expert_gemm_efficiency", ratio(r.expert_gemm_efficiency)},
                               {"kernel_overhead", s(r.kernel_overhead, "s")},
                               {"layer_overhead", s(r.layer_overhead, "s")},
                               {"calibration_rows", r.calibration_rows},
                               {"transferred_from", r.transferred_from},
                               {"gpu_vendor", r.gpu_vendor.empty() ? nlohmann::json() : nlohmann::json(r.gpu_vendor)}});
      j["runtimes"].back().update(host);
      if (const auto& d = r.dense_small_batch)
        j["runtimes"].back()["dense_small_batch"] = {
            {"matvec_passes", d->matvec_passes}, {"token_tile", d->token_tile}, {"source", d->source}};
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  out << "nodes (figures per device; `moesim hw --json` gives every source)\n";
  scenario::Table tn({"id", "devices", "GPUs by", "memory", "memory bandwidth", "peak bf16", "price", "name"});
  for (const auto& n : nodes) {
    const auto it = n.devices.peak_flops.find("bf16");
    tn.add_row({n.id, std::to_string(n.devices.count), n.devices.gpu_vendor.empty() ? "-" : n.devices.gpu_vendor,
                n.devices.memory ? units::format_binary(n.devices.memory->value) : "-", q(n.devices.memory_bandwidth),
                it == n.devices.peak_flops.end() ? "-" : units::format(it->second.value), q(n.price), n.name});
  }
  tn.print_text(out);
  out << "\nNICs\n";
  scenario::Table tc({"id", "latency", "bandwidth", "price", "name"});
  for (const auto& n : nics) {
    tc.add_row({n.id, units::format(n.latency.value), units::format(n.bandwidth.value), q(n.price), n.name});
  }
  tc.print_text(out);
  out << "\nstorage\n";
  scenario::Table ts({"id", "read bandwidth", "read latency", "name"});
  for (const auto& n : storage) {
    ts.add_row({n.id, units::format(n.read_bandwidth.value), q(n.read_latency), n.name});
  }
  ts.print_text(out);
  out << "\nruntimes (the software on one node profile, `--runtime NAME`: fitted to dense measurements, or written "
         "by hand from published figures; - leaves the node profile's own)\n";
  scenario::Table tr({"runtime", "hw", "bandwidth efficiency", "K-quant reads x", "compute efficiency", "attention x",
                      "prefill attention x", "per kernel", "per layer", "fitted to"});
  auto ratio = [](const std::optional<model::Sourced<double>>& f, const char* format) {
    return f ? text::printf(format, f->value) : std::string("-");
  };
  for (const auto& r : model::builtin_runtimes()) {
    tr.add_row({r.runtime, r.hw == model::kAnyNode ? "any " + r.gpu_vendor + " GPU" : r.hw,
                ratio(r.bandwidth_efficiency, "%.3f"), ratio(r.super_block_read_factor, "%.2f"),
                ratio(r.compute_efficiency, "%.3f"), ratio(r.attention_factor, "%.2f"),
                ratio(r.prefill_attention_factor, "%.2f"), q(r.kernel_overhead), q(r.layer_overhead),
                !r.transferred_from.empty() ? "medians of " + std::to_string(r.transferred_from.size()) + " machines"
                : r.calibration_rows > 0    ? std::to_string(r.calibration_rows) + " rows"
                                            : std::string("by hand")});
  }
  tr.print_text(out);
  return 0;
}

int cmd_estimate(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help");
  const auto& keys = scenario::estimate_params();
  keys.add_flags(desc);
  desc.add_options()("scenario", po::value<std::string>(),
                     "a scenario JSON with the same keys as these flags; flags given override it")(
      "json",
      "print the result as JSON: every value with its unit, the resolved inputs and the resolved scenario (--scenario "
      "reads it back)")(
      "compare",
      "also run each row through the decode simulator and the serving simulator (one request) with contention, "
      "residency and balancing off, and print the three tokens/s side by side");
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim estimate --model ID --hw ID [--nic ID[,ID...]] --nodes N[,N...] [options]\n\n"
          "Equation 1 of seed 000, generalised: per decode token on the busiest node, the kernels' rooflines\n"
          "max(bytes / bandwidth, FLOPs / peak) and launch overheads (the shared cost model the simulators use too)\n"
          "+ NIC latency x messages + bytes / NIC bandwidth; E[active experts per node] is computed exactly from\n"
          "the placement. --compare runs each row through the decode and serving simulators as well.\n"
          "Cost USD and tok/s/USD use the profiles' prices (the node's; the NIC's from two nodes on); a profile "
          "without one\n"
          "still gets its tokens/s, and the cost columns say \"no price\" with a note naming the price to add.\n"
          "example: moesim estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nic 10gbe-grpc --nodes "
          "2,3,4,6,8",
          registry_help() +
              keys.help("scenario keys (a --scenario file holds them; a flag given overrides its key)"))) {
    return 0;
  }
  scenario::EstimateRequest r;
  if (vm.count("scenario")) r = scenario::load_scenario(vm["scenario"].as<std::string>());
  keys.apply_flags(vm, r);
  if (r.model.empty()) throw UserError("--model is missing; give a zoo id (see `moesim models`) or a config.json path");
  if (r.hw.empty()) throw UserError("--hw is missing; give a node profile id (see `moesim hw`) or a profile JSON path");
  const auto result = scenario::run_estimate(r);
  const auto compared = vm.count("compare") ? reports::compare_instruments(result) : std::vector<reports::CompareRow>{};
  if (vm.count("json")) {
    nlohmann::json j = scenario::estimate_to_json(result);
    if (vm.count("compare")) j["compare"] = reports::compare_to_json(compared);
    out << j.dump(2) << "\n";
  } else {
    scenario::print_estimate_text(result, out);
    if (vm.count("compare")) reports::print_compare_text(compared, out);
  }
  return 0;
}

int cmd_cost(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("hw", po::value<std::string>()->required(), "node profile id or path")(
      "nic", po::value<std::string>(), "NIC profile id or path (counted when nodes > 1)")(
      "nodes", po::value<std::int64_t>()->default_value(1), "number of nodes")(
      "tokens-per-s", po::value<double>(), "a measured throughput in tokens/s, to get tokens/s per USD")(
      "json", "print the result as JSON");
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim cost --hw ID [--nic ID] [--nodes N] [--tokens-per-s X]\n\n"
          "Capital cost (node price x nodes + NIC price x nodes) and, given a throughput, tokens/s per USD as in\n"
          "seed 000 Table 5. example: moesim cost --hw dgx-h100 --nodes 1 --tokens-per-s 112.5")) {
    return 0;
  }
  scenario::CostPoint p;
  p.hw = vm["hw"].as<std::string>();
  p.nic = vm.count("nic") ? vm["nic"].as<std::string>() : "";
  p.nodes = vm["nodes"].as<std::int64_t>();
  if (p.nodes < 1) throw UserError("--nodes " + std::to_string(p.nodes) + ": node counts must be at least 1");
  if (vm.count("tokens-per-s")) {
    p.tokens_per_second = vm["tokens-per-s"].as<double>();
    if (!(p.tokens_per_second > 0)) throw UserError("--tokens-per-s must be a positive throughput in tokens/s");
  }
  const auto row = scenario::price_point(p);
  if (vm.count("json")) {
    nlohmann::json j = {{"command", "cost"},
                        {"inputs", {{"hw", p.hw}, {"nic", p.nic}, {"nodes", p.nodes}}},
                        {"metrics",
                         {{{"name", "cost_nodes"}, {"value", row.cost.nodes.base()}, {"unit", "USD"}},
                          {{"name", "cost_nics"}, {"value", row.cost.nics.base()}, {"unit", "USD"}},
                          {{"name", "cost_switches"}, {"value", row.cost.switches.base()}, {"unit", "USD"}},
                          {{"name", "cost"}, {"value", row.cost.total().base()}, {"unit", "USD"}}}}};
    if (p.tokens_per_second > 0) {
      j["metrics"].push_back({{"name", "tokens_per_second"}, {"value", p.tokens_per_second}, {"unit", "tokens/s"}});
      j["metrics"].push_back(
          {{"name", "tokens_per_second_per_usd"}, {"value", row.tokens_per_second_per_usd}, {"unit", "tokens/s/USD"}});
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  out << "nodes " << units::format(row.cost.nodes) << " + NICs " << units::format(row.cost.nics);
  if (row.cost.switch_count > 0)
    out << " + " << row.cost.switch_count << " switch" << (row.cost.switch_count > 1 ? "es " : " ")
        << units::format(row.cost.switches);
  out << " = " << units::format(row.cost.total()) << "\n";
  for (const auto& n : row.cost.notes) out << "note: " << n << "\n";
  if (p.tokens_per_second > 0) {
    out << text::printf("%.1f tokens/s / %.0f USD = %.6f tokens/s per USD\n", p.tokens_per_second,
                        row.cost.total().base(), row.tokens_per_second_per_usd);
  }
  return 0;
}

int cmd_study(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("scenario", po::value<std::string>(),
                                                 "a study JSON (default: the built-in examples/dbrx-mac-studio.json)")(
      "json", "print the result as JSON");
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim study [--scenario FILE] [--json]\n\n"
          "With no arguments: the paper's study (seed 000): DBRX on 2-8 Mac Studio M2 Ultra nodes over 10 GbE (gRPC),\n"
          "RoCEv2 and InfiniBand (Table 6, Figure 8), and Table 5's tokens/s per USD.")) {
    return 0;
  }
  const auto study = scenario::load_study(vm.count("scenario") ? vm["scenario"].as<std::string>() : "");
  if (vm.count("json")) {
    out << scenario::study_to_json(study).dump(2) << "\n";
  } else {
    scenario::print_study_text(study, out);
  }
  return 0;
}

namespace {
std::atomic<bool> g_interrupted{false};
struct sigaction g_old_int {
}, g_old_term{};
extern "C" void on_interrupt(int /*signal*/) { g_interrupted.store(true); }
}  // namespace

InterruptGuard::InterruptGuard() {
  g_interrupted.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool InterruptGuard::interrupted() { return g_interrupted.load(); }

}  // namespace moesim::apps
