#pragma once
// Hardware profiles: nodes (their devices, memory, peak rates, price), NICs (per-message latency,
// bandwidth, price) and storage. Built-in profiles live in hwprofiles/ as JSON (compiled into the
// binary); a user's own JSON file works wherever an id does. Every figure is {"value": "<number><unit>",
// "source": "..."}: the unit is parsed once here into strong types, the source is kept for reports.

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moesim/model/units.hpp"

namespace moesim::json {
class Node;
}

namespace moesim::model {

/// A hardware figure with where it comes from (datasheet, seed table, measurement).
template <class Q>
struct Sourced {
  Q value{};
  std::string source;
};

/// One size band of a measured efficiency table: kernels whose weight matrix holds [from, to) bytes
/// reach `value` × the profile's peak (memory bandwidth or FLOP rate). Measured by `moesim calibrate
/// kernels` (`samples` measurements fell in the band) or fitted by `moesim calibrate fit`.
struct EfficiencyBand {
  units::Bytes from;
  units::Bytes to;
  double value = 1.0;
  std::int64_t samples = 0;
};

/// A roofline times measured efficiency (issue 4): `memory` bands scale memory_bandwidth for
/// memory-bound kernels (GEMV at batch 1), `compute` bands scale peak_flops (GEMM at large batch).
/// Bands are sorted, contiguous and non-overlapping; a kernel outside them uses the nearest band and the
/// simulator says so (it never extrapolates silently).
struct EfficiencyTable {
  std::string source;
  std::vector<EfficiencyBand> memory;
  std::vector<EfficiencyBand> compute;
};

/// The efficiency a kernel of `bytes` gets from `bands`: the band that holds it, else the nearest one
/// (`inside` false). Empty bands: 1 (the roofline itself), `inside` true.
struct EfficiencyLookup {
  double value = 1.0;
  bool inside = true;
  const EfficiencyBand* band = nullptr;
};
EfficiencyLookup efficiency_at(const std::vector<EfficiencyBand>& bands, units::Bytes bytes);

struct NodeProfile;

/// The rates a kernel whose weight matrices hold `matrix_bytes` each gets on one device of `node`: its
/// memory bandwidth and `peak` (the compute path's, cost::compute_path) times the measured efficiency bands
/// (seed 000 Eq. 1a's roofline with calibrated efficiency). `note` says when the profile has no table or
/// the size lies outside it (`what` names the kernel). The one caller is cost::LayerCosts.
struct KernelRates {
  units::Bandwidth bandwidth;
  units::FlopRate peak;
  std::string note;  ///< empty when the size lies inside the measured bands
};
KernelRates kernel_rates(const NodeProfile& node, units::FlopRate peak, units::Bytes matrix_bytes,
                         std::string_view what);

/// How a runtime runs the weights of its non-expert matmuls (attention, dense FFN, router, LM head) at steps of
/// a few tokens, from its kernels' dispatch source (llama.cpp Metal's ggml_metal_op_mul_mat): at a step of
/// n = 2, 3, ... tokens a small-batch matrix-vector kernel reads each weight matrix matvec_passes[n - 2] times
/// (kernel_mul_mv_ext takes r1ptg tokens a threadgroup: ceil(n / r1ptg) reads); above the list's last count a
/// matrix kernel computes token columns in tiles of token_tile (kernel_mul_mm: 32), a step of n tokens as
/// ceil(n / t)·t of them, reading each weight once.
struct DenseSmallBatch {
  std::vector<double> matvec_passes;  ///< index n - 2: weight reads at a step of n tokens, each >= 1
  double token_tile = 0;              ///< tokens per column tile above them (0: no padding)
  std::string source;
};

struct DeviceSpec {
  std::int64_t count = 1;  ///< devices (GPUs) per node
  std::string name;
  /// The maker of the node's GPUs (one of kGpuVendors), which says which GPU runtimes run on it: a runtime
  /// transferred from machines of one maker (RuntimeProfile::gpu_vendor) applies to nodes of that maker
  /// only (llama.cpp's Metal fits say nothing of an H100, nor its CUDA fits of a Mac). Empty: the node's
  /// devices are no GPU of a known maker (a CPU host), and no transferred runtime applies.
  std::string gpu_vendor;
  std::optional<Sourced<units::Bytes>> memory;                 ///< per device
  std::optional<Sourced<units::Bandwidth>> memory_bandwidth;   ///< per device
  std::map<std::string, Sourced<units::FlopRate>> peak_flops;  ///< per device, dense, by dtype ("bf16", "fp8", ...)
  /// Fixed time per kernel launch (framework dispatch + launch), added to every kernel's roofline time
  /// by the simulator. Absent: 0, and the simulator says so in its assumptions.
  std::optional<Sourced<units::Duration>> kernel_overhead;
  /// Fixed time per decoder layer outside the kernels' rooflines (framework dispatch, Python, graph
  /// building: the paper's "Misc." beyond attention's roofline), counted as misc. Absent: 0.
  std::optional<Sourced<units::Duration>> layer_overhead;
  /// Extra compute time of a GEMM whose weights are stored in a quantised format (by precision name:
  /// "fp8", "int8", "q4", ...) and dequantised inside the kernel (seed 003 §FP8), as a fraction of the
  /// GEMM's compute roofline; written "5%". Absent: 0, and the serving simulator says so.
  std::map<std::string, Sourced<double>> dequant_overhead;
  /// Measured efficiency bands (absent: the roofline at 100% of the peaks, and the simulator says so).
  std::optional<EfficiencyTable> efficiency;
  /// The KV-cache reads over the context take this many times their roofline (a runtime's attention
  /// kernels at small batch are far from it). Set by a runtime profile (apply_runtime), never by the
  /// hardware's own. Absent: 1.
  std::optional<Sourced<double>> attention_factor;
  /// The attention FLOPs over the context (QK^T and PV: what long-context prefill spends its time on) take
  /// this many times the attention block's compute roofline. Set by a runtime profile. Absent: 1.
  std::optional<Sourced<double>> prefill_attention_factor;
  /// Weights stored in GGUF super-blocks (model::super_block_format: K-quants, i-quants) take this many times
  /// the time other formats' bytes take at the same bandwidth efficiency: the runtime's matrix-vector
  /// kernels unpack their sub-block scales per weight. Set by a runtime profile, fitted where a class's dense
  /// rows hold both kinds of format. Absent: 1.
  std::optional<Sourced<double>> super_block_read_factor;
  /// Serving host costs (issue 20), set by a runtime profile (apply_runtime). `step_overhead`: host time of
  /// every engine step outside the GPU's kernels (vLLM's engine loop runs the scheduler, the sampler's
  /// host side and the detokeniser on the CPU between GPU steps, vllm/v1/engine/core.py step()), added
  /// to each serving-simulator step. `request_overhead`: host time of each request before it reaches the
  /// scheduler (the API server's tokenisation and admission), added to its TTFT. `sequence_overhead`: host
  /// time per sequence in an engine step (each running request's share of the loop's per-request work:
  /// TensorRT-LLM's PyExecutor and vLLM's update_from_output walk the scheduled requests every iteration),
  /// added to the step once per sequence it holds. Absent: 0.
  std::optional<Sourced<units::Duration>> step_overhead;
  std::optional<Sourced<units::Duration>> request_overhead;
  std::optional<Sourced<units::Duration>> sequence_overhead;
  /// The low-precision tensor-core types ("fp8", "int8", "fp4") the runtime's matmuls use for weights in
  /// those formats; a format whose type is not listed is dequantised into the 16-bit path. Set by a runtime
  /// profile (apply_runtime). Absent: every type the profile gives a peak for.
  std::optional<Sourced<std::vector<std::string>>> native_dtypes;
  /// The runtime's grouped expert GEMM computes each expert's tokens of a step in tiles of this many
  /// (llama.cpp's MUL_MAT_ID kernels): an expert given n of a step's N tokens computes ceil(n / t)·t of
  /// them, t = min(tile, N). Set by a runtime profile. Absent: no padding.
  std::optional<Sourced<double>> expert_token_tile;
  /// At a step of at most this many tokens the runtime's expert kernel is a matrix-vector product per token
  /// and chosen expert (llama.cpp's mul_mat_vec_q / kernel_mul_mv_id for MUL_MAT_ID): it reads an expert's
  /// matrices once for every token that chose it, where the grouped GEMM above it reads them once per step.
  /// Set by a runtime profile. Absent: every step reads each of its distinct experts once.
  std::optional<Sourced<double>> expert_matvec_tokens;
  /// The runtime's grouped expert GEMM (MLX's sorted gather_qmm, llama.cpp's MUL_MAT_ID) computes at this
  /// fraction of the rate of its dense GEMM at the same FLOPs, which the compute efficiency was fitted on: a
  /// microbenchmark of the two kernels on one machine. It scales the routed experts' compute rate only.
  /// Set by a runtime profile. Absent: the dense rate.
  std::optional<Sourced<double>> expert_gemm_efficiency;
  /// The runtime's non-expert matmuls at steps of a few tokens (DenseSmallBatch). Set by a runtime profile.
  /// Absent: each weight read once a step, every token computed as one column.
  std::optional<DenseSmallBatch> dense_small_batch;
};

/// How the device driver keeps weight buffers resident (Apple's Metal "wiring", seed 000 §3.2): a buffer
/// idle for longer than `unwire_after` is unwired, and touching it again costs `rewire_per_buffer` plus
/// its bytes / `rewire_bandwidth`. Absent for devices that keep weights resident (discrete GPUs).
struct ResidencyProfile {
  Sourced<units::Duration> unwire_after;
  Sourced<units::Duration> rewire_per_buffer;
  Sourced<units::Bandwidth> rewire_bandwidth;
};

struct NodeProfile {
  std::string id;
  std::string name;
  std::string origin;  ///< "built-in: hwprofiles/nodes/x.json" or the user's file path
  DeviceSpec devices;
  std::optional<std::string> intra_node_link;  ///< NIC profile id linking the devices of one node
  /// Inter-node NIC ports per node (rails; a DGX H100 has 8): cross-node traffic spreads over them.
  std::optional<Sourced<std::int64_t>> nics_per_node;
  std::optional<Sourced<units::Money>> price;  ///< whole node
  std::string price_date;
  std::optional<Sourced<units::Power>> power;  ///< whole node under load, at the wall
  /// On-demand cloud rental of one such node, USD per hour ("98.32USD/h" in the profile).
  std::optional<Sourced<units::Money>> cloud_price_per_hour;
  std::string cloud_price_date;
  std::optional<ResidencyProfile> residency;

  /// Memory of all devices. UserError naming the missing field if the profile lacks it.
  [[nodiscard]] units::Bytes memory_total() const;
  /// Per-device memory bandwidth (UserError if missing).
  [[nodiscard]] const Sourced<units::Bandwidth>& bandwidth() const;
  /// Per-device dense peak for a compute dtype (UserError listing what the profile has if missing).
  [[nodiscard]] const Sourced<units::FlopRate>& peak(std::string_view dtype) const;
  /// The node's price, for answers that are a cost: UserError (price_missing()) if the profile has none.
  [[nodiscard]] const Sourced<units::Money>& node_price() const;
  /// One line naming the profile file, $.price and how to add it: what node_price() throws, and what an
  /// answer that does not need the price (estimate's tokens/s) prints in place of the cost.
  [[nodiscard]] std::string price_missing() const;
};

struct NicProfile {
  std::string id;
  std::string name;
  std::string origin;
  Sourced<units::Duration> latency;  ///< per message (software + wire), one way
  /// The part of `latency` the sender's CPU spends per message (LogP's o, Culler et al. 1993): messages
  /// from one node pay it one after another, the rest of `latency` is in flight and overlaps. Absent: 0.
  std::optional<Sourced<units::Duration>> overhead;
  Sourced<units::Bandwidth> bandwidth;         ///< per direction, per port
  std::optional<Sourced<units::Money>> price;  ///< per NIC
  std::string price_date;
  /// The switch this NIC's nodes plug into when there are more than two of them ("switch" in the
  /// profile: {"name", "ports", "price": {value, source, date}}). Absent: the switch is not priced.
  struct Switch {
    std::string name;
    std::int64_t ports = 0;
    Sourced<units::Money> price;
    std::string price_date;
  };
  std::optional<Switch> switch_spec;

  /// The NIC's price, for answers that are a cost: UserError (price_missing()) if the profile has none.
  [[nodiscard]] const Sourced<units::Money>& nic_price() const;
  /// One line naming the profile file, $.price and how to add it (as NodeProfile::price_missing).
  [[nodiscard]] std::string price_missing() const;
};

struct StorageProfile {
  std::string id;
  std::string name;
  std::string origin;
  Sourced<units::Bandwidth> read_bandwidth;
  std::optional<Sourced<units::Duration>> read_latency;
  std::optional<Sourced<units::Bytes>> capacity;
  /// A page-cache hit: the rate of copying a cached file's bytes into the reader's buffer (sim/streaming.hpp).
  std::optional<Sourced<units::Bandwidth>> cached_read_bandwidth;
  /// The OS page cache available for files read from this storage (experts streamed by flash-moe).
  std::optional<Sourced<units::Bytes>> page_cache;
};

/// The interval of a predicted throughput `value` (tokens/s) from the relative errors of held-out predictions
/// (predicted / measured - 1, leave-one-out): measured = predicted / (1 + error), so the measured value of a
/// new prediction lies in [value / (1 + error_high), value / (1 + error_low)] as often as the held-out errors
/// did. One formula for every such interval: RuntimeProfile::interval and the report's calibrated figures.
[[nodiscard]] inline std::pair<double, double> prediction_interval(double value, double error_low, double error_high) {
  return {value / (1.0 + error_high), value / (1.0 + error_low)};
}

/// A runtime on one hardware profile (issue 20): what a software stack adds to the hardware's physics.
/// Fitted to dense measurements of that runtime on that machine (`moesim validate --table validation --fit
/// --write-runtimes DIR`), or written by hand from a seed's published figures (flexflow@l4: FlexFlow's
/// per-kernel task dispatch; flash-moe@macbook-pro-m3-max-48: flash-moe's command buffers and CPU time per
/// layer), each figure with its source. The node profile stays physical; apply_runtime() lays this over it.
/// Every figure is optional: one the profile does not give leaves the node's own. `error_low`/`error_high`:
/// the leave-one-out relative errors (predicted / measured − 1) of the calibration rows, from which a
/// prediction's interval is measured / predicted in [1/(1+high), 1/(1+low)].
struct RuntimeProfile {
  std::string id;  ///< "<runtime>@<hw>"
  std::string name;
  std::string origin;
  std::string runtime;  ///< "llama.cpp-metal", "vllm", ...
  std::string hw;       ///< the node profile it belongs to (fitted or written for); refused on any other
  /// A transferred runtime (hw kAnyNode): its figures are the medians of this runtime's fits on these node
  /// profiles (`moesim validate --table --fit`), for a machine it has no dense measurement of; its interval
  /// is that of each of them predicted from the others (leave one machine out).
  std::vector<std::string> transferred_from;
  /// A transferred runtime's GPU maker (DeviceSpec::gpu_vendor), that of every machine it was transferred
  /// from: it applies to nodes of that maker only. Empty for a runtime fitted to one node.
  std::string gpu_vendor;
  std::optional<Sourced<double>> bandwidth_efficiency;  ///< weights are read at this fraction of memory_bandwidth
  /// Super-block weights (K-quants, i-quants) take this × the time of the others' bytes
  /// (DeviceSpec::super_block_read_factor), fitted where the class's dense rows hold both kinds of format.
  std::optional<Sourced<double>> super_block_read_factor;
  std::optional<Sourced<double>> attention_factor;  ///< KV reads take this × their roofline
  /// The attention FLOPs over the context take this × their compute roofline (DeviceSpec::
  /// prefill_attention_factor), fitted to dense prefill rows after a context depth or of long prompts.
  std::optional<Sourced<double>> prefill_attention_factor;
  std::optional<Sourced<units::Duration>> kernel_overhead;  ///< per kernel launched (DeviceSpec::kernel_overhead)
  std::optional<Sourced<units::Duration>> layer_overhead;   ///< per decoder layer (DeviceSpec::layer_overhead)
  /// Serving host costs (DeviceSpec::step_overhead, request_overhead), fitted by `moesim calibrate fit
  /// --vllm-serving`. Optional in the JSON; absent: 0 with an empty source (apply_runtime then leaves the
  /// node's own, if any).
  Sourced<units::Duration> step_overhead;     ///< per engine step
  Sourced<units::Duration> request_overhead;  ///< per request, before its first prefill
  /// Per sequence in each engine step (DeviceSpec::sequence_overhead), fitted by `moesim validate --fit` to
  /// dense max-load rows.
  Sourced<units::Duration> sequence_overhead;
  /// Compute-bound matmuls (prefill, large batches) run at this fraction of the node's peak FLOP rate
  /// (absent: the node profile's own compute bands).
  std::optional<Sourced<double>> compute_efficiency;
  /// The tensor-core types its matmuls use for low-precision weights (devices.native_dtypes); absent: all.
  std::optional<Sourced<std::vector<std::string>>> native_dtypes;
  /// Tokens per tile of its grouped expert GEMM (DeviceSpec::expert_token_tile), from the kernel's source.
  std::optional<Sourced<double>> expert_token_tile;
  /// The most tokens of a step its expert kernel takes one token and expert at a time
  /// (DeviceSpec::expert_matvec_tokens), from the kernel's dispatch source.
  std::optional<Sourced<double>> expert_matvec_tokens;
  /// Its grouped expert GEMM's compute rate over its dense GEMM's (DeviceSpec::expert_gemm_efficiency), from a
  /// microbenchmark of the two kernels.
  std::optional<Sourced<double>> expert_gemm_efficiency;
  /// Its non-expert matmuls at steps of a few tokens (DeviceSpec::dense_small_batch), from its kernels'
  /// dispatch source.
  std::optional<DenseSmallBatch> dense_small_batch;
  /// How the runtime stores a checkpoint's declared format ("mxfp4/bf16" -> "mxfp4/q8_0": llama.cpp runs
  /// gpt-oss from a GGUF with the non-expert tensors in Q8_0): the default precision under this runtime.
  std::optional<Sourced<std::map<std::string, std::string>>> checkpoint_formats;
  double error_low = 0, error_high = 0;
  std::int64_t calibration_rows = 0;
  std::string interval_source;
  /// How its figures compared with the validation table's MoE measurements of one kind, which no fit sees
  /// (`moesim validate --table validation --fit`; a transferred profile's with each row's own machine left
  /// out): the kind (kPredictionCheckKinds), rows, median |predicted / measured - 1|, the share inside
  /// their interval. A dense row's held-out error, which the interval is made of, need not carry to a MoE
  /// model: the instruments say beside a range how the profile did.
  struct PredictionCheck {
    std::string kind;  ///< "decode b1", "max-load", ... (kPredictionCheckKinds)
    std::int64_t rows = 0;
    double median_abs_error = 0, interval_coverage = 0;
    std::string source;
  };
  /// One per kind of MoE prediction row the profile priced with an interval, in kPredictionCheckKinds' order.
  std::vector<PredictionCheck> prediction_checks;
  /// The check of `kind`, or nullptr.
  [[nodiscard]] const PredictionCheck* prediction_check(std::string_view kind) const;
  /// The interval of a prediction `value` (tokens/s): [value / (1 + error_high), value / (1 + error_low)].
  [[nodiscard]] std::pair<double, double> interval(double value) const {
    return prediction_interval(value, error_low, error_high);
  }
  /// What an interval from this profile is made of, for the line beside a figure: "<id>'s interval from
  /// held-out dense rows (-36% .. +56% error)", and for an MoE model (`moe`) how the profile did on the
  /// validation table's MoE rows of each of `kinds` it has a check of ("; on the 24 MoE batch-1 decode
  /// rows ..."); every check where `kinds` is empty.
  [[nodiscard]] std::string interval_basis(bool moe, const std::vector<std::string_view>& kinds = {}) const;
};

/// The kinds of validation row a runtime's prediction check may be of (validation/README.md), each with the
/// words that name its rows: "decode b1" -> "batch-1 decode".
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kPredictionCheckKinds = {{
    {"decode b1", "batch-1 decode"},
    {"prefill b1", "batch-1 prefill"},
    {"decode batched", "batched decode"},
    {"prefill batched", "batched prefill"},
    {"max-load", "max-load"},
}};

/// The `hw` of a transferred runtime profile (RuntimeProfile::transferred_from): it applies to any node whose
/// GPUs are of its gpu_vendor.
inline constexpr std::string_view kAnyNode = "any";

/// The GPU makers a node profile's devices.gpu_vendor and a transferred runtime's gpu_vendor may name.
inline constexpr std::array<std::string_view, 4> kGpuVendors = {"nvidia", "amd", "apple", "intel"};

/// A runtime's native_dtypes item ({"value": ["int8"], "source": "..."}), as runtime profiles and
/// validation/mapping.json give it. UserError naming the JSON path for anything else.
Sourced<std::vector<std::string>> parse_native_dtypes(const moesim::json::Node& item);
/// A runtime's expert_token_tile item ({"value": 128, "source": "..."}): a whole number of tokens, 1-65536.
Sourced<double> parse_expert_token_tile(const moesim::json::Node& item);
/// A runtime's expert_matvec_tokens item ({"value": 8, "source": "..."}): a whole number of tokens, 1-65536.
Sourced<double> parse_expert_matvec_tokens(const moesim::json::Node& item);
/// A runtime's expert_gemm_efficiency item ({"value": 0.69, "source": "..."}): a ratio in (0, 2].
Sourced<double> parse_expert_gemm_efficiency(const moesim::json::Node& item);
/// A runtime's dense_small_batch item ({"matvec_passes": [1, 1, 1, 1, 2, 2, 2], "token_tile": 32, "source":
/// "..."}): at most 64 whole numbers of reads, 1-65536, and a tile of 1-65536 tokens (optional).
DenseSmallBatch parse_dense_small_batch(const moesim::json::Node& item);
/// In words: "read 1, 1, 2 times at steps of 2-4 tokens, computed in tiles of 32 tokens above".
std::string dense_small_batch_text(const DenseSmallBatch& d);
/// A runtime's checkpoint_formats item ({"value": {"mxfp4/bf16": "mxfp4/q8_0"}, "source": "..."}); every
/// name must be a precision. UserError naming the JSON path otherwise.
Sourced<std::map<std::string, std::string>> parse_checkpoint_formats(const moesim::json::Node& item);

/// An id of a built-in profile, or a path to a JSON file. UserError (listing the ids) if neither.
NodeProfile load_node(std::string_view id_or_path);
RuntimeProfile load_runtime(std::string_view id_or_path);
std::vector<RuntimeProfile> builtin_runtimes();
/// The runtime profile `name` on `node`: a path or an id, or a runtime name with a profile for this node
/// ("llama.cpp" finds "llama.cpp-metal@mac-studio-m2-ultra-192" for that Mac); where the node has none of
/// that name, the runtime's profile transferred to its GPUs' maker ("llama.cpp-cuda" on an RTX 5090, whose
/// devices.gpu_vendor is nvidia, finds "llama.cpp-cuda@any-nvidia"). UserError listing the runtimes this
/// node has, the transfers that carry only to other makers' GPUs, and how to fit one, when there is none
/// (or more than one).
RuntimeProfile find_runtime(std::string_view name, const NodeProfile& node);
/// `node` with the figures the runtime gives, each in place of the node's own; a figure it does not give
/// leaves the node's. A bandwidth efficiency becomes one memory band over every size (the node's compute
/// bands stay unless the runtime gives a compute efficiency, then one compute band of it; a compute
/// efficiency alone keeps the node's memory bands). UserError if the runtime belongs to another node profile
/// (a transferred one, hw kAnyNode, belongs to every node whose devices.gpu_vendor is its gpu_vendor).
NodeProfile apply_runtime(NodeProfile node, const RuntimeProfile& runtime);

/// `node` with the figures of one of its devices taken from `measured`, a profile of that device measured by
/// `moesim calibrate kernels --backend cuda` (hwprofiles/measured/): memory, memory_bandwidth, the peaks it
/// gives (the node's other peaks stay), efficiency and kernel_overhead, each with the measured profile's
/// source. The device count, the links, NICs, price and power stay the node's. UserError when `measured`
/// has no memory bandwidth or describes more than one device.
NodeProfile with_measured_device(NodeProfile node, const NodeProfile& measured);
NicProfile load_nic(std::string_view id_or_path);
StorageProfile load_storage(std::string_view id_or_path);

/// The JSON document of a node or NIC profile (an id or a path), as written: `calibrate fit` copies it
/// and replaces only the figures it fitted.
nlohmann::json load_node_document(std::string_view id_or_path);
nlohmann::json load_nic_document(std::string_view id_or_path);

std::vector<NodeProfile> builtin_nodes();
std::vector<NicProfile> builtin_nics();
std::vector<StorageProfile> builtin_storage();

}  // namespace moesim::model
