#include "moesim/scenario/estimate.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <tuple>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/step_cost.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/common_keys.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::scenario {
namespace {

using units::Dimension;

std::int64_t parse_count(std::string_view s, const std::string& flag, const std::string& whole) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
    throw UserError(flag + " " + whole + ": '" + std::string(s) +
                    "' is not a whole number; write node counts like 2,3,4 or 2-8");
  }
  if (v < 1) {
    throw UserError(flag + " " + whole + ": " + std::to_string(v) +
                    " nodes is not a cluster; node counts must be at least 1");
  }
  if (v > kMaxClusterNodes)
    throw UserError(flag + " " + whole + ": " + std::to_string(v) + " nodes is more than moesim models (" +
                    std::to_string(kMaxClusterNodes) + ")");
  return v;
}

}  // namespace

std::vector<std::int64_t> parse_node_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  for (const auto& item : text::split(text, ',')) {
    const auto dash = item.find('-');
    if (dash != std::string::npos && dash > 0) {
      const auto lo = parse_count(std::string_view(item).substr(0, dash), flag, text);
      const auto hi = parse_count(std::string_view(item).substr(dash + 1), flag, text);
      if (hi < lo)
        throw UserError(flag + " " + text + ": range " + item + " runs backwards; write it low-high, e.g. 2-8");
      for (auto n = lo; n <= hi; ++n) out.push_back(n);
    } else {
      out.push_back(parse_count(item, flag, text));
    }
  }
  return out;
}

const scenario::ParamTable<EstimateRequest>& estimate_params() {
  using R = EstimateRequest;
  static const auto table = [] {
    scenario::ParamTable<R> t(&R::origins);
    t.field("model", &R::model)
        .origin()
        .required()
        .describe("model: a zoo id (`moesim models`) or the path of a Hugging Face config.json");
    t.field("hw", &R::hw)
        .origin()
        .required()
        .describe("node profile: an id (`moesim hw`) or the path of a profile JSON");
    t.custom("nic", "string or list of strings")
        .origin()
        .describe(
            "NIC profile(s) between nodes, ids or paths (a list, or comma-separated after --nic); needed when "
            "nodes > 1")
        .reader([](const scenario::Param<R>& p, const json::Node& root, R& r) {
          r.nics.clear();
          if (root.raw()[p.key()].is_string()) {
            r.nics.push_back(root.string(p.key()));
            return;
          }
          for (const auto& n : root.elements(p.key())) {
            if (!n.raw().is_string()) throw n.error("is not a NIC id string");
            r.nics.push_back(n.raw().get<std::string>());
          }
        })
        .writer([](const scenario::Param<R>& p, const R& r, nlohmann::json& out) { out[p.key()] = r.nics; })
        .flag_value<std::string>()
        .flag_applier([](const scenario::Param<R>& p, const scenario::po::variables_map& vm, R& r) {
          r.nics = text::split(vm[p.flag_name()].as<std::string>(), ',');
          for (const auto& n : r.nics) {
            if (n.empty())
              throw UserError("--nic has an empty entry; give comma-separated NIC ids, e.g. 10gbe-grpc,rocev2-25g");
          }
        });
    t.custom("nodes", "list of integers >= 1")
        .required()
        .describe("node counts, e.g. [2, 3, 4] (after --nodes: 2,3,4 or a range 2-8)")
        .shown_default([](const R& r) {
          std::vector<std::string> n;
          for (auto x : r.nodes) n.push_back(std::to_string(x));
          return text::join(n, ",");
        })
        .reader([](const scenario::Param<R>& p, const json::Node& root, R& r) {
          r.nodes.clear();
          for (const auto& n : root.elements(p.key())) {
            if (!n.raw().is_number_integer() || n.raw().get<std::int64_t>() < 1) {
              throw n.error("must be a whole number of nodes >= 1, e.g. [2, 3, 4]");
            }
            r.nodes.push_back(n.raw().get<std::int64_t>());
          }
        })
        .writer([](const scenario::Param<R>& p, const R& r, nlohmann::json& out) { out[p.key()] = r.nodes; })
        .flag_value<std::string>()
        .flag_applier([](const scenario::Param<R>& p, const scenario::po::variables_map& vm, R& r) {
          r.nodes = parse_node_list(vm[p.flag_name()].as<std::string>(), "--" + p.flag_name());
        });
    t.field("placement", &R::placement).origin().describe("expert placement (below)");
    t.field("groups", &R::groups).min(1).origin().describe("replicated-groups: number of expert groups");
    t.field("placement_file", &R::placement_file)
        .origin()
        .written_if([](const R& r) { return !r.placement_file.empty(); })
        .describe("custom placement JSON: {\"groups\": [{\"experts\": [...], \"members\": [...]}]}");
    t.field("precision", &R::precision)
        .origin()
        .describe(
            "weight precision (below); checkpoint: the format the model's config.json declares in "
            "quantization_config, else bf16");
    t.field("context", &R::context)
        .min(0)
        .unit("tokens")
        .describe("tokens already in the KV cache; 0 = Equation 1, which omits attention over the context");
    t.field("lm_head", &R::lm_head)
        .describe("count the LM head's weights (Equation 1 omits them; always counted with a runtime)")
        .switch_flag("lm-head", true,
                     "count the LM head's weights (Equation 1 omits them; always counted with --runtime)");
    t.field("exchange", &R::exchange).origin().describe("how nodes combine expert outputs (below)");
    t.field("experts", &R::experts)
        .origin()
        .describe("how a node runs the experts of a layer, which sets the kernel launches charged (below)");
    scenario::streaming_key(t, &R::streaming).origin();
    t.field("runtime", &R::runtime)
        .origin()
        .written_if([](const R& r) { return !r.runtime.empty(); })
        .describe(
            "a runtime profile fitted on hw, or transferred to any node with GPUs of its maker (hw \"any\"); none: "
            "the node profile alone")
        .flag_help(scenario::runtime_help() + "; a fitted one gives tokens/s an interval");
    t.ignored("description", "what the scenario is, for the reader (not used)");
    return t;
  }();
  return table;
}

EstimateRequest scenario_from_json(const nlohmann::json& doc, const std::string& source) {
  EstimateRequest r;
  estimate_params().read(json::Node(doc, source), r);
  return r;
}

EstimateRequest load_scenario(const std::string& path) { return scenario_from_json(json::load_file(path), path); }

EstimateResult run_estimate(const EstimateRequest& request) {
  if (request.nodes.empty()) throw UserError("--nodes is empty; give node counts like 2,3,4");
  for (auto n : request.nodes) {
    if (n < 1) throw UserError("--nodes " + std::to_string(n) + ": node counts must be at least 1");
  }
  EstimateResult r;
  r.request = request;
  const auto& at = request.origins;
  r.arch = json::resolving(at, "model", [&] { return model::load_model(request.model); });
  r.node = json::resolving(at, "hw", [&] { return model::load_node(request.hw); });
  if (!request.runtime.empty()) {
    // The software on the hardware: its fitted bandwidth efficiency, attention factor and kernel cost.
    r.runtime = json::resolving(at, "runtime", [&] { return model::find_runtime(request.runtime, r.node); });
    r.node = model::apply_runtime(r.node, *r.runtime);
    // The runtime's figures and its interval were fitted to predictions that read the LM head each token
    // (calibrate::validation_predict: every runtime computes the logits): a figure without it would be
    // faster than the one the interval belongs to (gpt-oss-120b on the DGX Spark: 75 tok/s against 62).
    r.request.lm_head = true;
  }
  const auto* stored_as = r.runtime && r.runtime->checkpoint_formats ? &r.runtime->checkpoint_formats->value : nullptr;
  r.precision =
      json::resolving(at, "precision", [&] { return &model::precision_for(request.precision, r.arch, stored_as); });
  const model::Exchange exchange =
      json::resolving(at, "exchange", [&] { return model::exchange_by_name(request.exchange); });
  const cost::ExpertExecution experts =
      json::resolving(at, "experts", [&] { return cost::expert_execution_by_name(request.experts); });
  for (const auto& n : request.nics) r.nics.push_back(json::resolving(at, "nic", [&] { return model::load_nic(n); }));
  if (request.streaming)
    r.streaming = json::resolving(at, "streaming",
                                  [&] { return cost::resolve_streaming(*request.streaming, r.arch, *r.precision); });
  if (r.node.intra_node_link) r.intra_link = model::load_nic(*r.node.intra_node_link);

  bool multi = false;
  for (auto n : request.nodes) multi = multi || n > 1;
  if (multi && r.nics.empty()) {
    throw UserError(
        "--nic is missing: a cluster of several nodes needs a NIC profile, e.g. --nic 10gbe-grpc (see `moesim hw`)");
  }
  if (multi && !r.arch.is_moe()) {
    throw UserError(r.arch.id +
                    " is a dense model: expert parallelism across nodes needs routed experts; use --nodes 1 "
                    "(tensor and pipeline parallel plans come with the serving model)");
  }
  std::vector<const model::NicProfile*> nic_list;
  for (const auto& n : r.nics) nic_list.push_back(&n);
  if (nic_list.empty()) nic_list.push_back(nullptr);

  const model::ModelCosts costs = model::model_costs(r.arch, *r.precision);
  for (const auto* nic : nic_list) {
    for (const auto nodes : request.nodes) {
      EstimateRow row;
      std::string expected_active_note;  ///< when E[active] was sampled rather than computed exactly
      row.nic = (nic && nodes > 1) ? nic->id : "-";
      row.nodes = nodes;
      model::DecodeScenario s;
      s.arch = &r.arch;
      s.costs = &costs;
      s.node = &r.node;
      s.nic = nodes > 1 ? nic : nullptr;
      s.intra_link = r.intra_link ? &*r.intra_link : nullptr;
      s.nodes = nodes;
      s.weights = r.precision;
      s.context = request.context;
      s.include_lm_head = r.request.lm_head;
      s.exchange = exchange;
      s.experts = experts;
      s.streaming = r.streaming ? &*r.streaming : nullptr;
      if (r.arch.is_moe()) {
        const sim::Placement p = json::resolving(at, "placement", [&] {
          return sim::resolve_placement(request.placement, r.arch.routed_experts, nodes, {request.groups, {}},
                                        request.placement_file);
        });
        row.placement = p.describe();
        const sim::ExpectedActive active = sim::expected_active_experts(p, r.arch.top_k);
        row.expected_active = active.value;
        if (!active.note.empty()) expected_active_note = active.note;
        s.expected_active_experts = row.expected_active;
        s.max_experts_per_node = p.max_experts_per_node();
      } else {
        row.placement = "dense (no experts)";
      }
      row.estimate = model::estimate_decode(s);
      if (!row.estimate.fits && r.arch.is_moe() && !s.streaming) {
        // Replication costs memory: the fewest nodes, from this count, at which one copy of the experts
        // split over them fits (issue 21: DeepSeek-V3 on 2-4 nodes with replicated groups never fits).
        for (std::int64_t n = nodes; n <= r.arch.routed_experts; ++n) {
          model::DecodeScenario alt = s;
          alt.nodes = n;
          alt.nic = n > 1 ? (nic ? nic : nullptr) : nullptr;
          if (n > 1 && !alt.nic) break;
          const sim::Placement p = sim::make_placement("contiguous", r.arch.routed_experts, n);
          alt.expected_active_experts = sim::expected_active_experts(p, r.arch.top_k).value;
          alt.max_experts_per_node = p.max_experts_per_node();
          const model::DecodeEstimate e = model::estimate_decode(alt);
          if (e.fits) {
            row.fits_contiguous = std::make_pair(n, e.memory_needed.base());
            break;
          }
        }
      }
      if (r.runtime && !r.runtime->interval_source.empty()) {
        row.interval = r.runtime->interval(row.estimate.tokens_per_second);
        if (r.runtime->prediction_check("decode b1") != nullptr && r.arch.is_moe())
          row.estimate.notes.push_back("range tok/s: " + r.runtime->interval_basis(true, {"decode b1"}));
      }
      if (!expected_active_note.empty()) row.estimate.notes.push_back(expected_active_note);
      // The cost is a column beside the answer, not the answer: without a price the row keeps its
      // tokens/s and says which price to add (`moesim cost` and sweeps, whose answer is the cost, refuse).
      if (auto missing = model::missing_price(r.node, s.nic, nodes)) {
        row.price_missing = *missing;
      } else {
        row.cost = model::capital_cost(r.node, s.nic, nodes);
        row.tokens_per_second_per_usd =
            model::tokens_per_second_per_usd(row.estimate.tokens_per_second, row.cost->total());
      }
      r.rows.push_back(std::move(row));
    }
  }
  return r;
}

namespace {
/// "989 TFLOP/s fp8", or what the compute path lacks.
std::string peak_text(const model::NodeProfile& node, const model::Precision& weights) {
  const cost::ComputePath path = cost::compute_path(node, weights);
  return path.has_peak ? units::format(node.peak(path.dtype).value) + " " + path.dtype : "no " + path.dtype + " peak";
}
}  // namespace

void print_estimate_text(const EstimateResult& r, std::ostream& out) {
  const auto& a = r.arch;
  const auto p = model::parameter_counts(a);
  out << "moesim estimate: Equation 1 of seed 000 (Chen et al., RACS '24), generalised; decode, one user, per token\n";
  out << "model      " << a.id << " (" << a.name << "): "
      << text::printf("%.1f B params, %.1f B active", static_cast<double>(p.total()) / 1e9,
                      static_cast<double>(model::active_parameters(a)) / 1e9);
  if (a.is_moe()) {
    out << ", " << a.routed_experts << " experts top-" << a.top_k << ", "
        << units::format(model::routed_expert_bytes(a, *r.precision)) << " per expert per layer";
  }
  out << " at " << r.precision->name << "\n";
  out << "node       " << r.node.id << ": " << r.node.devices.count << " x " << units::format(r.node.bandwidth().value)
      << ", " << peak_text(r.node, *r.precision) << ", " << units::format_binary(r.node.memory_total()) << " memory, "
      << (r.node.price ? units::format(r.node.price->value) : std::string("no price")) << "\n";
  for (const auto& n : r.nics) {
    out << "nic        " << n.id << ": " << units::format(n.latency.value) << " per message, "
        << units::format(n.bandwidth.value) << ", "
        << (n.price ? units::format(n.price->value) + " per NIC" : std::string("no price")) << "\n";
  }
  out << "assumes    placement " << r.request.placement << ", exchange " << r.request.exchange << ", experts "
      << r.request.experts << ", context " << r.request.context << " tokens, LM head "
      << (!r.request.lm_head ? "excluded (as in Equation 1)"
          : r.runtime        ? "included (the runtime reads it each token, as its fit did)"
                             : "included")
      << "\n";
  if (r.runtime) {
    // The figures the runtime gives; the node profile's own stand for the rest (model::apply_runtime).
    const auto& rt = *r.runtime;
    std::vector<std::string> gives;
    if (rt.bandwidth_efficiency)
      gives.push_back("weights at " + text::printf("%.1f%%", 100.0 * rt.bandwidth_efficiency->value) +
                      " of the bandwidth");
    if (rt.super_block_read_factor)
      gives.push_back("K-quant and i-quant weights " + text::printf("%.2f", rt.super_block_read_factor->value) +
                      " x that time");
    if (rt.compute_efficiency)
      gives.push_back("matmuls at " + text::printf("%.1f%%", 100.0 * rt.compute_efficiency->value) + " of the peak");
    if (rt.attention_factor)
      gives.push_back("attention " + text::printf("%.2f", rt.attention_factor->value) + " x its roofline");
    if (rt.prefill_attention_factor)
      gives.push_back("prefill attention " + text::printf("%.2f", rt.prefill_attention_factor->value) +
                      " x its compute roofline");
    if (rt.expert_token_tile)
      gives.push_back("expert GEMMs in tiles of " + text::printf("%.0f", rt.expert_token_tile->value) + " tokens");
    if (rt.expert_matvec_tokens)
      gives.push_back("experts read once per token that chose them at steps of up to " +
                      text::printf("%.0f", rt.expert_matvec_tokens->value) + " tokens");
    if (rt.expert_gemm_efficiency)
      gives.push_back("expert GEMMs at " + text::printf("%.0f%%", 100.0 * rt.expert_gemm_efficiency->value) +
                      " of the dense GEMMs' rate");
    if (rt.dense_small_batch) gives.push_back("other weights " + model::dense_small_batch_text(*rt.dense_small_batch));
    // A zero says there is no such cost (or none the fit could split from the bandwidth), not "0.00 s".
    const auto per = [&](const std::optional<model::Sourced<units::Duration>>& d, const char* what) {
      if (d)
        gives.push_back(d->value.base() > 0 ? units::format(d->value) + " per " + what
                                            : std::string("no cost per ") + what);
    };
    per(rt.kernel_overhead, "kernel");
    per(rt.layer_overhead, "layer");
    out << "runtime    " << rt.runtime << " ("
        << rt.id + (!rt.transferred_from.empty()
                        ? ", transferred: the medians of its fits on " + std::to_string(rt.transferred_from.size()) +
                              " other " + rt.gpu_vendor + " machines (" + text::join(rt.transferred_from) +
                              "); no dense measurement of it on this one"
                    : rt.calibration_rows > 0
                        ? ", fitted to " + std::to_string(rt.calibration_rows) + " dense measurements"
                        : std::string(", sources in ") + rt.origin)
        << "): " << text::join(gives) << "\n";
  }
  if (r.streaming && r.request.streaming) {
    const auto& sp = *r.streaming;
    out << "streaming  experts read from " << r.request.streaming->storage << " ("
        << units::format(units::bytes_per_second(sp.ssd_bytes_per_s)) << ", "
        << units::format(units::seconds(sp.read_latency_s)) << " per read over " << sp.readers << " readers, "
        << units::format(units::bytes(sp.cache_capacity_bytes)) << " page cache), serial\n";
  }
  out << "\n";
  // The storage column only when experts stream: the other tables keep their shape.
  std::vector<std::string> head = {"nodes", "nic", "E[active]", "load s", "comp s", "lat s", "trans s"};
  if (r.streaming) head.push_back("io s");
  const bool ranged = !r.rows.empty() && r.rows.front().interval.has_value();
  for (const char* h : {"time s", "tokens/s"}) head.emplace_back(h);
  if (ranged) head.emplace_back("range tok/s");
  for (const char* h : {"cost USD", "tok/s/USD", "mem/node GiB", "fits"}) head.emplace_back(h);
  Table t(head);
  for (const auto& row : r.rows) {
    const auto& e = row.estimate;
    std::vector<std::string> cells = {std::to_string(row.nodes),
                                      row.nic,
                                      a.is_moe() ? text::printf("%.3f", row.expected_active) : "-",
                                      fixed(e.load.base(), 3),
                                      fixed(e.compute.base(), 3),
                                      fixed(e.latency.base() + e.intra_node.base(), 3),
                                      fixed(e.transfer.base(), 3)};
    if (r.streaming) cells.push_back(fixed(e.io.base(), 3));
    cells.push_back(fixed(e.time.base(), 3));
    cells.push_back(fixed(e.tokens_per_second, 1));
    if (ranged)
      cells.push_back(row.interval ? fixed(row.interval->first, 1) + "-" + fixed(row.interval->second, 1)
                                   : std::string("-"));
    for (auto& c : std::vector<std::string>{
             row.cost ? text::printf("%.0f", row.cost->total().base()) : std::string("no price"),
             row.tokens_per_second_per_usd ? text::printf("%.6f", *row.tokens_per_second_per_usd) : std::string("-"),
             text::printf("%.1f", e.memory_needed.base() / 1073741824.0), e.fits ? "yes" : "NO"})
      cells.push_back(std::move(c));
    t.add_row(cells);
  }
  t.print_text(out);
  bool any_unfit = false;
  for (const auto& row : r.rows) any_unfit = any_unfit || !row.estimate.fits;
  if (any_unfit) {
    out << "\nfits = NO: the model's weights on the fullest node exceed its "
        << units::format_binary(r.node.memory_total())
        << "; those rows are bounds for hardware that cannot hold the model.\n";
    std::set<std::pair<std::int64_t, std::int64_t>> said;  // (nodes, fitting nodes), once per pair
    for (const auto& row : r.rows) {
      if (row.estimate.fits) continue;
      if (!row.fits_contiguous) {
        if (said.insert({row.nodes, 0}).second && a.is_moe())
          out << "  " << row.nodes << " node" << (row.nodes > 1 ? "s" : "")
              << ": no placement fits, even one copy of the experts split over up to " << a.routed_experts
              << " nodes (a smaller --precision, or nodes with more memory)\n";
        continue;
      }
      const auto [n, bytes] = *row.fits_contiguous;
      if (!said.insert({row.nodes, n}).second) continue;
      out << "  " << row.nodes << " node" << (row.nodes > 1 ? "s" : "") << ": would fit with "
          << (n == row.nodes ? std::string() : std::to_string(n) + " nodes and ")
          << "--placement contiguous (one copy of the experts, " << text::printf("%.1f", bytes / 1073741824.0)
          << " GiB per node)\n";
    }
  }
  std::vector<std::string> notes;
  for (const auto& row : r.rows) {
    if (row.estimate.overhead.base() > 0 && notes.empty())
      notes.push_back("time s includes " + fixed(row.estimate.overhead.base(), 3) +
                      " s per token of kernel launches and per-layer overhead (" +
                      "devices.kernel_overhead and devices.layer_overhead of " + r.node.id +
                      (r.runtime ? ", runtime " + r.runtime->id + "'s where it gives them" : std::string()) + ")");
    for (const auto& n : row.estimate.notes)
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
    std::vector<std::string> cost_notes = row.cost ? row.cost->notes : std::vector<std::string>{};
    if (!row.price_missing.empty())
      cost_notes.push_back("cost USD and tok/s/USD are not computed: " + row.price_missing);
    for (const auto& n : cost_notes)
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
  }
  cost::profile_notes(r.node, *r.precision, notes);
  for (const auto& n : notes) out << "\nnote: " << n;
  if (!notes.empty()) out << "\n";
  if (r.node.devices.count > 1) {
    out << "\nlat s includes tensor-parallel all-reduces over " << (r.intra_link ? r.intra_link->id : "?")
        << " between the node's " << r.node.devices.count << " devices.\n";
  }
}

nlohmann::json estimate_to_json(const EstimateResult& r) {
  const auto& a = r.arch;
  const auto p = model::parameter_counts(a);
  nlohmann::json inputs;
  inputs["model"] = {
      {"id", a.id},
      {"name", a.name},
      {"family", a.family},
      {"source", a.source},
      {"layers", a.layers},
      {"moe_layers", model::moe_layer_count(a)},
      {"hidden", a.hidden},
      {"routed_experts", a.routed_experts},
      {"top_k", a.top_k},
      {"total_params", metric("total_params", static_cast<double>(p.total()), "params")},
      {"active_params", metric("active_params", static_cast<double>(model::active_parameters(a)), "params")},
      {"non_expert_layer_params",
       metric("non_expert_layer_params", static_cast<double>(model::non_expert_layer_params(a)), "params")}};
  if (a.is_moe()) {
    inputs["model"]["bytes_per_routed_expert"] =
        metric("bytes_per_routed_expert", model::routed_expert_bytes(a, *r.precision).base(), "B");
  }
  const auto& n = r.node;
  const cost::ComputePath path = cost::compute_path(n, *r.precision);
  inputs["hw"] = {
      {"id", n.id},
      {"origin", n.origin},
      {"devices", n.devices.count},
      // memory_total() throws the "add it" error if the profile lacks memory; the estimate needed it already.
      {"memory_per_device",
       sourced_json(n.memory_total().base() / static_cast<double>(n.devices.count), "B", n.devices.memory->source)},
      {"memory_bandwidth_per_device", sourced_json(n.bandwidth().value.base(), "B/s", n.bandwidth().source)},
      {"peak_per_device", path.has_peak
                              ? sourced_json(n.peak(path.dtype).value.base(), "FLOP/s", n.peak(path.dtype).source)
                              : nlohmann::json(nullptr)},
      {"compute_dtype", path.dtype},
      {"price",
       n.price ? sourced_json(n.price->value.base(), "USD", n.price->source) : missing_json("USD", n.price_missing())}};
  inputs["nics"] = nlohmann::json::array();
  for (const auto& nic : r.nics) {
    inputs["nics"].push_back({{"id", nic.id},
                              {"origin", nic.origin},
                              {"latency", sourced_json(nic.latency.value.base(), "s", nic.latency.source)},
                              {"bandwidth", sourced_json(nic.bandwidth.value.base(), "B/s", nic.bandwidth.source)},
                              {"price", nic.price ? sourced_json(nic.price->value.base(), "USD", nic.price->source)
                                                  : missing_json("USD", nic.price_missing())}});
  }
  inputs["precision"] = {{"name", r.precision->name}, {"source", r.precision->source}};
  inputs["placement"] = r.request.placement;
  inputs["groups"] = r.request.groups;
  if (!r.request.placement_file.empty()) inputs["placement_file"] = r.request.placement_file;
  inputs["exchange"] = r.request.exchange;
  inputs["experts"] = r.request.experts;
  inputs["context"] = metric("context", static_cast<double>(r.request.context), "tokens");
  inputs["lm_head"] = r.request.lm_head;
  if (r.request.streaming) inputs["streaming"] = cost::streaming_spec_to_json(*r.request.streaming);
  if (r.runtime) {
    inputs["runtime"] = {{"id", r.runtime->id}, {"origin", r.runtime->origin}};
    // Each figure the runtime gives; one it does not give is the node profile's own (inputs.node).
    const auto& rt = *r.runtime;
    auto& j = inputs["runtime"];
    if (rt.bandwidth_efficiency)
      j["bandwidth_efficiency"] =
          sourced_json(rt.bandwidth_efficiency->value, "fraction", rt.bandwidth_efficiency->source);
    if (rt.super_block_read_factor)
      j["super_block_read_factor"] = sourced_json(rt.super_block_read_factor->value, "x the other formats' time",
                                                  rt.super_block_read_factor->source);
    if (rt.compute_efficiency)
      j["compute_efficiency"] = sourced_json(rt.compute_efficiency->value, "fraction", rt.compute_efficiency->source);
    if (rt.attention_factor)
      j["attention_factor"] = sourced_json(rt.attention_factor->value, "x roofline", rt.attention_factor->source);
    if (rt.expert_token_tile)
      j["expert_token_tile"] = sourced_json(rt.expert_token_tile->value, "tokens", rt.expert_token_tile->source);
    if (rt.expert_matvec_tokens)
      j["expert_matvec_tokens"] =
          sourced_json(rt.expert_matvec_tokens->value, "tokens", rt.expert_matvec_tokens->source);
    if (rt.expert_gemm_efficiency)
      j["expert_gemm_efficiency"] =
          sourced_json(rt.expert_gemm_efficiency->value, "x the dense GEMMs' rate", rt.expert_gemm_efficiency->source);
    if (rt.dense_small_batch)
      j["dense_small_batch"] = {{"matvec_passes", rt.dense_small_batch->matvec_passes},
                                {"token_tile", {{"value", rt.dense_small_batch->token_tile}, {"unit", "tokens"}}},
                                {"source", rt.dense_small_batch->source}};
    if (rt.prefill_attention_factor)
      j["prefill_attention_factor"] =
          sourced_json(rt.prefill_attention_factor->value, "x compute roofline", rt.prefill_attention_factor->source);
    if (rt.kernel_overhead)
      j["kernel_overhead"] = sourced_json(rt.kernel_overhead->value.base(), "s", rt.kernel_overhead->source);
    if (rt.layer_overhead)
      j["layer_overhead"] = sourced_json(rt.layer_overhead->value.base(), "s", rt.layer_overhead->source);
  }
  inputs["phase"] = "decode";
  inputs["users"] = 1;

  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    const auto& e = row.estimate;
    nlohmann::json m = nlohmann::json::array();
    if (a.is_moe())
      m.push_back(metric("expected_active_experts_per_node", row.expected_active, "experts per MoE layer"));
    m.push_back(metric("bytes_per_token", e.bytes_per_token.base(), "B"));
    m.push_back(metric("flops_per_token", e.flops_per_token.base(), "FLOP"));
    m.push_back(metric("load", e.load.base(), "s"));
    m.push_back(metric("compute", e.compute.base(), "s"));
    m.push_back(metric("layer_overhead", e.overhead.base(), "s"));
    m.push_back(metric("latency", e.latency.base(), "s"));
    m.push_back(metric("messages", static_cast<double>(e.messages), "messages per token"));
    m.push_back(metric("wire_bytes", e.wire_bytes.base(), "B"));
    m.push_back(metric("transfer", e.transfer.base(), "s"));
    m.push_back(metric("intra_node", e.intra_node.base(), "s"));
    if (r.streaming) {
      m.push_back(metric("io", e.io.base(), "s"));
      m.push_back(metric("page_cache_hit_rate", e.cache_hit_rate, "fraction of expert reads"));
    }
    m.push_back(metric("time_per_token", e.time.base(), "s"));
    m.push_back(metric("tokens_per_second", e.tokens_per_second, "tokens/s"));
    if (row.interval) {
      m.back()["low"] = row.interval->first;
      m.back()["high"] = row.interval->second;
    }
    m.push_back(metric("memory_needed_per_node", e.memory_needed.base(), "B"));
    m.push_back(metric("memory_per_node", e.memory_available.base(), "B"));
    // Without a price the cost metrics are null with the line that says what to add, never a made-up 0.
    const model::CapitalCost* c = row.cost ? &*row.cost : nullptr;
    const std::vector<std::tuple<std::string, double, std::string>> costs = {
        {"cost_nodes", c ? c->nodes.base() : 0.0, "USD"},
        {"cost_nics", c ? c->nics.base() : 0.0, "USD"},
        {"cost_switches", c ? c->switches.base() : 0.0, "USD"},
        {"cost", c ? c->total().base() : 0.0, "USD"},
        {"tokens_per_second_per_usd", row.tokens_per_second_per_usd.value_or(0.0), "tokens/s/USD"}};
    for (const auto& [name, value, unit] : costs)
      m.push_back(c ? metric(name, value, unit) : missing_metric(name, unit, row.price_missing));
    rows.push_back({{"nodes", row.nodes},
                    {"nic", row.nic},
                    {"placement", row.placement},
                    {"bound", e.bound},
                    {"fits", e.fits},
                    {"metrics", m}});
    if (row.fits_contiguous)
      rows.back()["would_fit"] = {{"placement", "contiguous"},
                                  {"nodes", row.fits_contiguous->first},
                                  {"memory_needed_per_node", {{"value", row.fits_contiguous->second}, {"unit", "B"}}}};
  }
  // The scenario as resolved (every key with its value, defaults included), as `estimate --scenario` reads it
  // back: the same for every instrument (simulate and serve write theirs).
  return {
      {"command", "estimate"}, {"inputs", inputs}, {"rows", rows}, {"scenario", estimate_params().to_json(r.request)}};
}

}  // namespace moesim::scenario
