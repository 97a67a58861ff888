// A runtime on a machine it has no measurement of (validation_detail.hpp, transfer_runtimes). Issue 20's
// buyer asks about hardware they do not own yet, and most machines have no public dense llama-bench rows
// for a runtime to be fitted to: an RTX 5090, an M4 Max. The runtime's figures on the machines it was
// fitted on (bandwidth efficiency, cost per kernel, the attention and K-quant factors, prefill's compute
// efficiency) are fractions and times of a software stack on a kind of chip; their median over those
// machines is the transferred runtime. How far that carries is measured as any other figure here is:
// each fitted machine's dense rows predicted from the medians of the others (leave one machine out), and
// each MoE prediction row of theirs priced the same way, its own machine's fit never seen.

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include "moesim/model/error.hpp"
#include "moesim/model/parallel.hpp"
#include "moesim/model/text.hpp"
#include "validation_detail.hpp"

namespace moesim::calibrate::validation_detail {

namespace {

/// A class fitted to batch-1 decode rows of its own (not a max-load class, whose runtime is the scheduler's).
bool decode_fit(const ValidationFit& f) {
  return f.calibration_rows > 0 && f.max_load_rows == 0 && f.profile.bandwidth_efficiency.has_value();
}

/// A fit whose figures carry to another machine: its rows hold two configurations or more, so its cost per
/// kernel is split from its bandwidth efficiency. A fit of one configuration puts that model's whole time
/// per byte into its efficiency (no cost per kernel), which is no figure of the runtime: with llama.cpp's
/// five one-configuration CUDA fits (four GeForce cards and the DGX Spark) among the donors, the median cost
/// per kernel was 0 and the RTX 4090's Qwen3-30B-A3B rows, a MoE model of many small kernels, came out
/// 2.75x fast.
bool transferable(const ValidationFit& f) { return f.configurations >= 2; }

/// The runtime of `donors` (its transferable fits) transferred to any machine: each figure the median over
/// the donors but the one on `without` (a node profile id; empty: none left out). A figure a fit leaves at
/// the node's own takes its neutral value there (a K-quant factor not split from the efficiency: 1, a host
/// time per token not split from the cost per kernel: 0), as that fit priced its rows; the prefill figures
/// come from the fits that had prefill rows.
model::RuntimeProfile transferred(const std::vector<const ValidationFit*>& donors, const std::string& gpu_vendor,
                                  const std::string& without) {
  std::vector<const ValidationFit*> use;
  std::vector<std::string> machines;
  for (const auto* f : donors)
    if (f->hw != without) {
      use.push_back(f);
      machines.push_back(f->hw);
    }
  MOESIM_CHECK(!use.empty(), "a transferred runtime needs a fit to take its figures from");
  const model::RuntimeProfile& first = use.front()->profile;
  model::RuntimeProfile rp;
  rp.runtime = first.runtime;
  rp.hw = std::string(model::kAnyNode);
  rp.gpu_vendor = gpu_vendor;
  rp.id = rp.runtime + "@" + rp.hw + "-" + gpu_vendor;
  rp.origin = "validation --fit";
  rp.transferred_from = machines;
  rp.name = rp.runtime + " on " + gpu_vendor + " GPUs it has no measurement of: the medians of its fits on " +
            text::join(machines);
  const std::string source = "the median over " + rp.runtime +
                             "'s fits by `moesim validate --table validation --fit` " +
                             "to the dense rows of validation/measurements.csv on " + text::join(machines);
  using Get = std::function<std::optional<double>(const model::RuntimeProfile&)>;
  const auto median = [&](const Get& get, std::optional<double> neutral) -> std::optional<model::Sourced<double>> {
    std::vector<double> v;
    for (const auto* f : use) {
      if (const auto x = get(f->profile)) {
        v.push_back(*x);
      } else if (neutral) {
        v.push_back(*neutral);
      }
    }
    if (v.empty()) return std::nullopt;
    return model::Sourced<double>{
        quantile(v, 0.5),
        source + (v.size() < use.size() ? " (the " + std::to_string(v.size()) + " whose rows fit it)" : std::string())};
  };
  using Ratio = std::optional<model::Sourced<double>> model::RuntimeProfile::*;
  const auto ratio = [&](Ratio field, std::optional<double> neutral) {
    return median(
        [field](const model::RuntimeProfile& p) {
          return p.*field ? std::optional((p.*field)->value) : std::optional<double>();
        },
        neutral);
  };
  rp.bandwidth_efficiency = ratio(&model::RuntimeProfile::bandwidth_efficiency, std::nullopt);
  rp.super_block_read_factor = ratio(&model::RuntimeProfile::super_block_read_factor, 1.0);
  rp.attention_factor = ratio(&model::RuntimeProfile::attention_factor, std::nullopt);
  rp.compute_efficiency = ratio(&model::RuntimeProfile::compute_efficiency, std::nullopt);
  rp.prefill_attention_factor = ratio(&model::RuntimeProfile::prefill_attention_factor, std::nullopt);
  using Time = std::optional<model::Sourced<units::Duration>> model::RuntimeProfile::*;
  const auto seconds = [&](const Get& get) -> model::Sourced<units::Duration> {
    const auto m = median(get, 0.0);
    return {units::seconds(m ? m->value : 0.0), m ? m->source : source};
  };
  const auto time = [&](Time field) {
    return seconds([field](const model::RuntimeProfile& p) {
      return p.*field ? std::optional((p.*field)->value.base()) : std::optional<double>();
    });
  };
  rp.kernel_overhead = time(&model::RuntimeProfile::kernel_overhead);
  rp.layer_overhead = time(&model::RuntimeProfile::layer_overhead);
  if (std::any_of(use.begin(), use.end(), [](const auto* f) { return !f->profile.step_overhead.source.empty(); }))
    rp.step_overhead = seconds([](const model::RuntimeProfile& p) {
      return p.step_overhead.source.empty() ? std::nullopt : std::optional(p.step_overhead.value.base());
    });
  // The runtime's own kernels and formats (mapping.json's, one per runtime): as every fit of it has them.
  rp.expert_token_tile = first.expert_token_tile;
  rp.expert_matvec_tokens = first.expert_matvec_tokens;
  rp.expert_gemm_efficiency = first.expert_gemm_efficiency;
  rp.dense_small_batch = first.dense_small_batch;
  rp.native_dtypes = first.native_dtypes;
  rp.checkpoint_formats = first.checkpoint_formats;
  return rp;
}

/// What leaving machine `k` out gives: its dense rows' errors and its prediction rows' figures.
struct HeldOut {
  std::vector<double> decode, prefill;
};

bool prefill_kind(const ValidationPrediction& p) { return p.kind == "prefill b1" || p.kind == "prefill batched"; }

}  // namespace

std::vector<std::optional<BorrowedKernelCost>> borrowed_kernel_costs(const std::vector<ValidationFit>& fits,
                                                                     const Mapping& m) {
  // A cost per kernel is the runtime's launch and dispatch path on a kind of GPU, as transferred() takes it to
  // machines with no fit at all; a class of one configuration has a fit but no such split, so it takes the
  // same median rather than none (which priced a MoE model's many small kernels as free on those machines).
  std::vector<std::string> vendor(fits.size());
  for (std::size_t i = 0; i < fits.size(); ++i)
    if (decode_fit(fits[i])) vendor[i] = base_node(m, fits[i].runtime, fits[i].hw).devices.gpu_vendor;
  std::vector<std::optional<BorrowedKernelCost>> out(fits.size());
  for (std::size_t i = 0; i < fits.size(); ++i) {
    if (!decode_fit(fits[i]) || transferable(fits[i]) || vendor[i].empty()) continue;
    std::vector<double> v;
    std::vector<std::string> machines;
    for (std::size_t j = 0; j < fits.size(); ++j)
      if (j != i && decode_fit(fits[j]) && transferable(fits[j]) && fits[j].runtime == fits[i].runtime &&
          vendor[j] == vendor[i]) {
        v.push_back(fits[j].kernel_overhead);
        machines.push_back(fits[j].hw);
      }
    if (v.empty()) continue;
    out[i] = BorrowedKernelCost{quantile(v, 0.5), "the median over " + fits[i].runtime + "'s fits on " +
                                                      text::join(machines) + " (" + vendor[i] +
                                                      " GPUs), whose dense rows of several models or formats split it"};
  }
  return out;
}

void transfer_runtimes(ValidationResult& r, const std::vector<std::vector<ValidationPrediction*>*>& members,
                       const Mapping& m, unsigned threads) {
  MOESIM_CHECK(members.size() == r.fits.size(), "transfer_runtimes needs each fit's rows");
  // A runtime's fits on the GPUs of one maker (their node profiles' devices.gpu_vendor) carry to that
  // maker's other GPUs, not to another's: llama.cpp's Vulkan kernels on a Radeon are not those on a
  // GeForce. A fit on a node that names no maker carries nowhere.
  std::map<std::pair<std::string, std::string>, std::vector<std::size_t>> by_runtime;  // -> indices into r.fits
  for (std::size_t i = 0; i < r.fits.size(); ++i) {
    if (!decode_fit(r.fits[i])) continue;
    const std::string vendor = base_node(m, r.fits[i].runtime, r.fits[i].hw).devices.gpu_vendor;
    if (!vendor.empty()) by_runtime[{r.fits[i].runtime, vendor}].push_back(i);
  }
  for (const auto& entry : by_runtime) {
    const std::string& runtime = entry.first.first;  // named, not bound: the lambda below captures them
    const std::string& vendor = entry.first.second;
    const std::vector<std::size_t>& index = entry.second;
    std::vector<const ValidationFit*> donors;
    for (const std::size_t i : index)
      if (transferable(r.fits[i])) donors.push_back(&r.fits[i]);
    if (donors.size() < kMinTransferMachines) continue;
    // Each fitted machine in turn, its own fit left out of the medians: its dense rows give held-out errors,
    // its MoE rows their transferred figure. Machines of one configuration are not among the donors, so the
    // medians never saw them.
    std::vector<HeldOut> held(index.size());
    model::parallel_for(index.size(), threads, [&](std::size_t k) {
      const ValidationFit& f = r.fits[index[k]];
      const model::NodeProfile node =
          model::apply_runtime(base_node(m, runtime, f.hw), transferred(donors, vendor, f.hw));
      for (ValidationPrediction* p : *members[index[k]]) {
        if (!p->predicted || (p->kind != "decode b1" && !prefill_kind(*p))) continue;
        if (prefill_kind(*p) && !node.devices.efficiency) continue;
        std::optional<double> figure_here;
        try {
          figure_here = p->kind == "decode b1" ? std::optional(decode_b1(*p, node)) : figure(*p, node);
        } catch (const UserError&) {
          continue;  // a configuration the held-out machine's profile refuses: no figure, as for `fitted`
        }
        if (!figure_here) continue;
        if (p->row.role == "calibration") {
          if (p->kind == "decode b1") held[k].decode.push_back(*figure_here / p->row.measured - 1.0);
          if (p->kind == "prefill b1") held[k].prefill.push_back(*figure_here / p->row.measured - 1.0);
        } else {
          p->transferred = figure_here;
        }
      }
    });
    TransferredRuntime t;
    t.profile = transferred(donors, vendor, "");
    for (const auto& h : held) {
      t.decode_errors.insert(t.decode_errors.end(), h.decode.begin(), h.decode.end());
      t.prefill_errors.insert(t.prefill_errors.end(), h.prefill.begin(), h.prefill.end());
    }
    if (const auto range = error_interval(t.decode_errors)) {
      t.profile.error_low = range->first;
      t.profile.error_high = range->second;
      t.profile.calibration_rows = static_cast<std::int64_t>(t.decode_errors.size());
      t.profile.interval_source =
          "leave-one-machine-out errors (predicted / measured - 1) of the dense batch-1 decode rows of every " +
          vendor + " machine " + runtime +
          " is fitted on in validation/measurements.csv, each machine's rows predicted from "
          "the medians of the other machines' fits";
    }
    // A prediction row's interval: the held-out errors of the other machines (whose medians did see this
    // machine's fit; the row's own figure did not).
    for (std::size_t k = 0; k < index.size(); ++k) {
      std::vector<double> decode, prefill;
      for (std::size_t j = 0; j < index.size(); ++j)
        if (j != k) {
          decode.insert(decode.end(), held[j].decode.begin(), held[j].decode.end());
          prefill.insert(prefill.end(), held[j].prefill.begin(), held[j].prefill.end());
        }
      const auto decode_range = error_interval(decode), prefill_range = error_interval(prefill);
      for (ValidationPrediction* p : *members[index[k]]) {
        if (!p->transferred) continue;
        const auto& range = prefill_kind(*p) ? prefill_range : decode_range;
        if (range) p->transferred_interval = model::prediction_interval(*p->transferred, range->first, range->second);
      }
    }
    r.transfers.push_back(std::move(t));
  }
}

}  // namespace moesim::calibrate::validation_detail
