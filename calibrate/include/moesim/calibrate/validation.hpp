#pragma once
// `moesim validate --table DIR`: moesim against public measurements nobody here produced (issue 20).
//
// DIR holds measurements.csv (one public measurement per row with its source; validation/README.md) and
// mapping.json, which says how the table's words map onto moesim's inputs: a hardware name and device
// count onto a node profile, a weight format onto a precision. Each row moesim can express is predicted by
// the instrument its metric needs, with the same defaults a user gets:
//   - batch-1 decode (llama-bench tg, `@ dN` depth): the analytic model at the mean context of the
//     generated tokens (depth + prompt + output / 2), LM head included (a runtime samples every token);
//     at batch 1 it equals the two simulators (tests/oracle/test_three_way_oracle.cpp);
//   - batch-1 prefill (llama-bench pp at depth 0): the serving simulator, one request: prompt / TTFT;
//   - batched decode (llama-batched-bench S_TG, B sequences): the serving simulator, B users at once,
//     B / mean TPOT;
//   - max-load output throughput (trtllm-bench throughput: every request of a fixed-ISL/OSL dataset queued
//     at once) for a runtime whose mapping.json entry gives its scheduler and the benchmark's request
//     counts: the serving simulator with that scheduler, output tokens / duration.
// The rest (other runtimes' serving throughput, latency under load) is listed as not expressed yet, with why.
// Rows are never fitted here: calibration rows (dense) show how far the datasheet profiles are on the
// models they would be fitted to, prediction rows (MoE) how far moesim is where it has not been fitted.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "moesim/model/architecture.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/scenario/plot.hpp"

namespace moesim::calibrate {

struct ValidationRow {
  std::string id, role, model, format, hardware, hw_family, runtime, metric, unit, source_url;
  std::string locator;  ///< where in the source (optional column): a max-load row's "TP2,PP2" plan
  /// The checkpoint and the runtime's version as the source names them (optional columns `hf_repo`,
  /// `runtime_version`): mapping.json's KV-cache rules match on them.
  std::string hf_repo, runtime_version;
  std::int64_t devices = 1;
  std::optional<std::int64_t> batch, prompt, output, depth;
  /// Tokens the runtime computed per forward pass as the source printed it (llama.cpp's n_ubatch, optional
  /// column `step_tokens`); absent: the runtime's default (mapping.json's prompt_chunk).
  std::optional<std::int64_t> step_tokens;
  /// Why the table keeps the row out of every figure (optional column `excluded`): a measurement its own
  /// source shows to be something else than it says (a cold first run). Empty: the row counts.
  std::string excluded;
  double measured = 0;
  std::int64_t line = 0;  ///< in measurements.csv
};

struct ValidationPrediction {
  ValidationRow row;
  /// "decode b1", "prefill b1", "decode batched", "prefill batched", "max-load", or empty when not expressed
  std::string kind;
  std::string model, hw, precision;  ///< the moesim inputs it mapped to (a zoo id, a node profile, a precision)
  std::string instrument;            ///< "analytic", "serving-sim"
  std::int64_t step_tokens = 2048;   ///< tokens the runtime prefills per engine step (mapping.json's prompt_chunk)
  /// max-load: the runtime's scheduler (a serve scenario's "scheduler" object, mapping.json), the
  /// benchmark's request count for the row's prompt/output, and the plan's pipeline stages (tp = devices / pp).
  nlohmann::json scheduler;
  std::int64_t requests = 0, pp = 1;
  /// max-load: the devices the MoE layers' experts are split over (expert parallelism inside the tp group,
  /// as a trtllm-bench report's EP size says); 1: the experts tensor-parallel, as the table's rows run.
  std::int64_t moe_ep = 1;
  /// The KV cache's element type the run used (mapping.json's runtimes.<runtime>.kv_cache_dtype, a serve
  /// scenario's kv_cache_dtype); empty: the model's own 16-bit cache.
  std::string kv_cache_dtype;
  /// The row's runtime version predates its runtime's matrix-vector expert kernel at small steps (mapping.json's
  /// runtimes.<runtime>.expert_matvec_predates): its figures are priced without devices.expert_matvec_tokens.
  bool predates_expert_matvec = false;
  /// The recorded routing trace its serving-simulator runs replay (mapping.json's routing_traces: an absolute
  /// path) and where it comes from; empty: the generated trace.
  std::string routing_trace, routing_trace_source;
  std::optional<double> predicted;  ///< in the row's unit, with the shipped (datasheet) profiles
  std::string skipped;              ///< why not expressed (when !predicted)
  /// With the runtime fitted to the calibration rows of its (node profile, runtime) class (--fit), and
  /// the interval the leave-one-out errors of those rows give (a prediction row's measurement should lie
  /// in it).
  std::optional<double> fitted;
  std::optional<std::pair<double, double>> interval;
  /// The same row with its device's figures measured by microbenchmarks (mapping.json's measured_devices:
  /// `moesim calibrate kernels --backend cuda` on that GPU), nothing fitted: the profile's id and the figure.
  std::string measured_device;
  std::optional<double> measured_predicted;
  /// With the runtime transferred from its fits on the other machines (the medians of their figures, this
  /// row's machine left out: RuntimeProfile::transferred_from), and the interval of those machines' dense
  /// rows each predicted from the others' medians: the figure for hardware moesim has no measurement of.
  std::optional<double> transferred;
  std::optional<std::pair<double, double>> transferred_interval;
  /// --floors, rows on one device: the row's figure at its floor (floor_node), in the row's unit: what its instrument
  /// gives with every byte read once at the datasheet bandwidth and nothing else. A measurement above it read fewer
  /// bytes than the configuration moesim prices (an MoE benchmark's routing more concentrated than the trace's).
  std::optional<double> floor;
  [[nodiscard]] double error() const { return predicted ? *predicted / row.measured - 1.0 : 0.0; }
  [[nodiscard]] double transferred_error() const { return transferred ? *transferred / row.measured - 1.0 : 0.0; }
  [[nodiscard]] double measured_error() const {
    return measured_predicted ? *measured_predicted / row.measured - 1.0 : 0.0;
  }
  [[nodiscard]] double fitted_error() const { return fitted ? *fitted / row.measured - 1.0 : 0.0; }
};

/// A runtime fitted on one hardware profile (--fit) from the class's dense calibration rows: the weights
/// are read at `efficiency` of the profile's bandwidth, the KV cache and attention over the context take
/// `context_factor` times their roofline, and each kernel costs `kernel_overhead` s (the three costs of
/// batch-1 decode a runtime adds to the hardware; issue 20's runtime profiles will carry them).
struct ValidationFit {
  std::string hw, runtime;
  std::int64_t calibration_rows = 0;
  /// the (model, format) configurations of its batch-1 decode rows: with one, the cost per kernel is not
  /// split from the efficiency (both describe that configuration's time only)
  std::int64_t configurations = 0;
  double efficiency = 1, kernel_overhead = 0;
  /// super-block weights (K-quants, i-quants) take this × the time of the others' bytes: fitted where the
  /// class's dense decode rows hold both kinds of format (DeviceSpec::super_block_read_factor), else 1
  double super_block_read_factor = 1;
  double context_factor = 1;  ///< the KV-cache and attention roofline's time is multiplied by this
  /// whether the rows fixed context_factor (their context share varies); else it is kept at 1
  bool context_fitted = false;
  std::vector<double> loo_errors;    ///< leave-one-configuration-out: predicted / measured − 1 of each decode row
  std::vector<std::string> loo_ids;  ///< the row id of each loo_errors entry (in the same order)
  double compute_efficiency = 1;     ///< prefill: achieved / peak FLOP rate (fitted when the class has prefill rows)
  /// prefill: the attention FLOPs over the context take this × their compute roofline (fitted where the
  /// class's prefill rows vary the attention's share enough to split it; else 1)
  double prefill_attention_factor = 1;
  std::int64_t prefill_rows = 0;
  std::vector<double> prefill_loo_errors;                  ///< leave-one-configuration-out errors of the prefill rows
  std::optional<std::pair<double, double>> prefill_range;  ///< the prefill interval's errors (own or pooled)
  /// max-load (a class with max-load calibration rows and no batch-1 decode ones): bandwidth and compute
  /// efficiency fitted to the dense max-load rows, their leave-one-configuration-out errors, and the range
  /// the MoE rows' intervals take (own or pooled).
  std::int64_t max_load_rows = 0, max_load_configurations = 0;
  double sequence_overhead = 0;  ///< max-load: the runtime's host time per sequence and engine step, s
  /// the runtime's host time per engine step, s: fitted with the max-load rows, or at batch-1 decode (one
  /// step a token) where the class's kernel counts spread enough to split it from the cost per kernel
  double step_overhead = 0;
  /// Each configuration's rows predicted by the fit of the others (from 2 configurations: the range pooled
  /// over classes takes them; a class's own range needs kMinConfigurations).
  std::vector<double> max_load_loo_errors;
  std::optional<std::pair<double, double>> max_load_range;
  std::string note;
  model::RuntimeProfile profile;  ///< the fit as a runtime profile (`--write-runtimes`, `estimate --runtime`)
};

/// Error statistics of a group of predictions (|error| = |predicted / measured − 1|).
struct ErrorSummary {
  /// "datasheet" (shipped profiles), "fitted" (--fit), "transferred" (--fit: the runtime's medians over its
  /// other machines) or "measured device" (MeasuredDeviceSummary)
  std::string basis = "datasheet";
  std::string role, kind, hw_family, runtime;  ///< the group ("all" where it spans every value)
  std::int64_t n = 0;
  double median_abs = 0, p90_abs = 0;   ///< fractions
  double within_10 = 0, within_25 = 0;  ///< shares of rows
  double median_signed = 0;             ///< > 0: moesim too fast / high
  double worst_ratio = 1;               ///< max over rows of max(p/m, m/p)
  std::int64_t with_interval = 0;       ///< fitted: rows with an interval
  double coverage = 0;                  ///< fitted: share of those whose measurement lies in it
};

/// A runtime transferred to machines it has no dense measurement of (--fit): its profile (hw "any", the
/// medians of its fits on `profile.transferred_from`, the machines whose rows split the cost per kernel
/// from the bandwidth) and every fitted machine's dense rows predicted from the others' medians (leave one
/// machine out), whose errors give its interval.
struct TransferredRuntime {
  model::RuntimeProfile profile;
  std::vector<double> decode_errors, prefill_errors;  ///< predicted / measured − 1 of the held-out machines' rows
};

/// The rows of the nodes a measured device profile is mapped to (mapping.json's measured_devices), per role ×
/// kind: the same rows' errors with the datasheet profiles, with the measured device figures (nothing
/// fitted), and fitted (--fit; n = 0 without).
struct MeasuredDeviceSummary {
  std::string profile, role, kind;
  ErrorSummary datasheet, measured, fitted;
};

/// Where one row's fitted figure spends its time (`validate --table DIR --fit --explain ID`): the seconds
/// per token of the row's metric (per output token at max load, per generated token in decode, per prompt
/// token in prefill), split by what each cost of the fitted profile adds. A memory, compute or KV part is
/// the time the figure grows by when that rate is halved (the node's bandwidth, its peaks, the KV reads'
/// roofline): the part of the time bound by it. A host or kernel part is the time it shrinks by when that
/// cost is 0. The rest is what none of them claims (collectives, pipeline transfers); below 0 where
/// kernels sit near the roofline's ridge, so that a halved rate adds less than its own time.
struct RowPart {
  std::string name;    ///< e.g. "memory-bound (weights, activations)"
  std::string cost;    ///< the profile figure behind it, e.g. "bandwidth_efficiency 0.93"
  double seconds = 0;  ///< per token of the row's metric
};
struct RowExplanation {
  std::size_t row = 0;  ///< in ValidationResult::rows
  std::string profile;  ///< the fitted runtime profile's id
  double seconds = 0;   ///< 1 / the fitted figure
  std::vector<RowPart> parts;
  double rest = 0;
  /// 1 / the row's figure with every byte its steps read priced once at the datasheet bandwidth and nothing
  /// else (no compute, kernel, host or runtime-specific cost): no run of the configuration the row's
  /// instrument prices (its routing trace included) can be faster.
  double floor_seconds = 0;
  double datasheet_bandwidth = 0;  ///< B/s per device, the floor's
};

struct ValidationResult {
  std::filesystem::path table;
  std::vector<ValidationPrediction> rows;
  std::vector<MeasuredDeviceSummary> measured_devices;
  std::vector<ErrorSummary> summaries;          ///< per role × kind, then per role × kind × hw_family × runtime
  std::map<std::string, std::int64_t> skipped;  ///< reason → rows
  std::vector<ValidationFit> fits;              ///< --fit: one per (node profile, runtime) class
  /// --fit: one per runtime fitted to batch-1 decode rows on kMinTransferMachines machines or more
  std::vector<TransferredRuntime> transfers;
  std::optional<RowExplanation> explanation;  ///< --explain ID
  /// --floors: per role × kind, the rows with a floor and those whose measurement is above it.
  struct FloorCount {
    std::string role, kind;
    std::int64_t rows = 0, above = 0;
  };
  std::vector<FloorCount> floors;
};

struct ValidationOptions {
  std::string role;  ///< "calibration", "prediction", or empty for both
  bool fit = false;  ///< fit each (node profile, runtime) class to its calibration rows (ValidationFit)
  std::function<void(std::size_t, std::size_t)> progress;  ///< rows done, rows in all
  /// Worker threads for the rows' simulations and the classes' fits (0: every core). The result does not
  /// depend on it: each row and each class is computed alone.
  unsigned threads = 0;
  /// With `fit`: the id of a row whose fitted figure is split into its parts (ValidationResult::explanation).
  std::string explain;
  /// Price each predicted row at its floor too (ValidationPrediction::floor), and count the measurements above.
  bool floors = false;
};

/// A `llama-bench -o json` file of the user's own machine: which zoo model it ran, on which node profile,
/// under which runtime name (its rows are calibration rows for a dense model, prediction rows for MoE).
struct LlamaBenchImport {
  std::string model;    ///< zoo id or config.json of the model the GGUF holds
  std::string hw;       ///< node profile id or path of the machine
  std::string runtime;  ///< e.g. llama.cpp-metal
  std::string source;   ///< where the measurement comes from (default: the file)
  /// Which benchmark wrote the file: "llama-bench" (-o json or its table), "mlx-lm" (mlx_lm.generate
  /// --verbose) or "llama-batched-bench" (calibrate/bench_import.hpp reads each as llama-bench tests).
  std::string format = "llama-bench";
  /// The weights' precision (model::precision) where the output does not name it (mlx-lm,
  /// llama-batched-bench); llama-bench's model_type names it.
  std::string precision;
};

/// The tests of llama-bench JSON files (tg: batch-1 decode at n_depth, pp: batch-1 prefill; the weight
/// format from model_type), or of the other formats LlamaBenchImport::format names (llama-batched-bench's
/// B > 1 rows: batched decode, predicted, not fitted; their S_PP listed in `skipped`) predicted and, with o.fit, fitted
/// like the table's rows. UserError naming the file and test for a file llama-bench did not write.
ValidationResult run_llama_bench(const std::vector<std::filesystem::path>& files,
                                 const std::vector<LlamaBenchImport>& imports, const ValidationOptions& o = {});

/// Reads DIR/measurements.csv and DIR/mapping.json (UserError naming the file, line and field) and
/// predicts every row it can express.
ValidationResult run_validation(const std::filesystem::path& dir, const ValidationOptions& o = {});

/// Summary statistics over `preds` with a prediction (n = 0 when none): of the datasheet figure, or of the
/// fitted one (`fitted`), with the intervals' coverage.
ErrorSummary summarise(const std::vector<const ValidationPrediction*>& preds, const std::string& basis = "datasheet");

/// A prediction interval from n leave-one-out relative errors: the k-th smallest to the k-th largest, k the
/// largest whole number with (n + 1 - 2k) / (n + 1) >= 90%, at least 1 (so the min and max below n = 19).
/// A new error exchangeable with the sample lies in that order-statistic range with probability
/// (n + 1 - 2k) / (n + 1), whatever their distribution (Wilks 1941; split conformal prediction, Vovk,
/// Gammerman & Shafer 2005). nullopt for no errors.
std::optional<std::pair<double, double>> error_interval(std::vector<double> errors);

void print_validation_text(const ValidationResult& r, std::ostream& out, bool every_row);
nlohmann::json validation_to_json(const ValidationResult& r);
/// The explanation alone (`--explain`): text, or JSON with every figure's unit.
void print_explanation_text(const ValidationResult& r, std::ostream& out);
nlohmann::json explanation_to_json(const ValidationResult& r);
/// One line per row: the table's columns that identify it, the mapping, predicted, measured, error.
void write_validation_csv(const ValidationResult& r, std::ostream& out);
/// Predicted against measured per kind, log-log, the fitted figures with their intervals as error bars
/// (scenario::draw_plot writes it: validation.csv, .gp, .png, .svg).
scenario::PlotSpec validation_plot(const ValidationResult& r);
/// A fitted runtime as the profile JSON model::load_runtime reads (hwprofiles/runtimes/).
nlohmann::json runtime_profile_json(const model::RuntimeProfile& r);

/// What trtllm-bench's batch-limit heuristic sees of a run (NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/
/// tuning.py calc_engine_setting, called by build.py get_benchmark_engine_settings from both `trtllm-bench
/// build --dataset` and the PyTorch backend's `throughput` without --max_batch_size/--max_num_tokens).
struct TrtllmBenchInputs {
  const model::Architecture* arch = nullptr;
  const model::Precision* weights = nullptr;  ///< the checkpoint's format (its quant_algo)
  double kv_element_bytes = 2;                ///< the KV cache's (FP8: 1)
  double device_memory_gib = 0;               ///< one GPU's memory, GiB (get_device_memory)
  std::int64_t tp = 1, pp = 1;
  std::int64_t isl = 1, osl = 1;  ///< the dataset's average input and output lengths
  double kv_cache_free_gpu_mem_fraction = 0.95;
  bool chunked_prefill = false;  ///< the options file's enable_chunked_prefill (default off)
};
/// The limits it sets: max_batch_size (per pipeline micro-batch) and max_num_tokens (per step), 0 where
/// trtllm-bench would refuse the run (the KV cache holds less than one request).
struct TrtllmBenchLimits {
  std::int64_t max_batch_size = 0, max_num_tokens = 0;
  double kv_cache_max_requests = 0;  ///< the requests it estimates the KV cache holds
};
TrtllmBenchLimits trtllm_bench_limits(const TrtllmBenchInputs& in);

}  // namespace moesim::calibrate
