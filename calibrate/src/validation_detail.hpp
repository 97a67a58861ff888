#pragma once
// Internals of `moesim validate --table` shared by calibrate/src/validation*.cpp: the table's mapping onto
// moesim inputs, the prediction of a row by its kind's instrument, and the fit of each runtime.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moesim/calibrate/validation.hpp"
#include "moesim/model/hardware.hpp"

namespace moesim::calibrate::validation_detail {

/// The table's words for hardware and formats, as moesim inputs (DIR/mapping.json).
struct Mapping {
  struct Hw {
    std::string hardware;
    std::int64_t devices = 1;
    std::string hw;
  };
  std::vector<Hw> hardware;
  std::map<std::string, std::string> formats;
  std::map<std::string, std::string> models;  ///< a checkpoint's repo id -> the zoo entry of the same shapes
  /// runtime -> the low-precision tensor-core types its matmuls use (model::RuntimeProfile::native_dtypes)
  std::map<std::string, model::Sourced<std::vector<std::string>>> native_dtypes;
  /// runtime -> tokens per tile of its grouped expert GEMM (model::RuntimeProfile::expert_token_tile)
  std::map<std::string, model::Sourced<double>> expert_token_tile;
  /// runtime -> the most tokens of a step its expert kernel takes one (token, expert) pair at a time
  /// (model::RuntimeProfile::expert_matvec_tokens)
  std::map<std::string, model::Sourced<double>> expert_matvec_tokens;
  /// runtime -> its non-expert matmuls at steps of a few tokens (model::RuntimeProfile::dense_small_batch)
  std::map<std::string, model::DenseSmallBatch> dense_small_batch;
  /// runtime -> the versions that predate that kernel: llama.cpp builds up to `builds_up_to` and branches of
  /// pull requests numbered below `prs_before` (a version naming neither has the kernel, as today's does).
  struct MatvecPredates {
    std::int64_t builds_up_to = 0, prs_before = 0;
    std::string source;
  };
  std::map<std::string, MatvecPredates> expert_matvec_predates;
  /// runtime -> its grouped expert GEMM's rate over its dense GEMM's (model::RuntimeProfile::expert_gemm_efficiency)
  std::map<std::string, model::Sourced<double>> expert_gemm_efficiency;
  /// runtime -> how it stores a checkpoint's format (model::RuntimeProfile::checkpoint_formats)
  std::map<std::string, model::Sourced<std::map<std::string, std::string>>> checkpoint_formats;
  /// runtime -> the tokens it prefills per step (llama.cpp's n_ubatch); absent: the serving simulator's 2048
  std::map<std::string, model::Sourced<std::int64_t>> prompt_chunk;
  /// runtime -> how its max-load benchmark ran: the scheduler (a serve scenario's "scheduler" object) and
  /// the requests of each (prompt, output) dataset. A runtime without one has no max-load rows expressed.
  struct MaxLoad {
    model::Sourced<nlohmann::json> scheduler;
    model::Sourced<std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t>> requests;
    /// "trtllm-bench": the scheduler's max_num_seqs and max_num_batched_tokens are the ones trtllm-bench
    /// derives from each row's model, GPUs and dataset (trtllm_bench_limits); absent: as the scheduler says.
    std::optional<model::Sourced<std::string>> batch_limits;
  };
  std::map<std::string, MaxLoad> max_load;
  /// runtime -> the name of a hand-written runtime profile laid over the node before the fit, on the nodes
  /// that have one (hwprofiles/runtimes/<name>@<hw>.json): the rows' figure before the fit, and the
  /// figures the class's rows do not fit (a max-load class's kernel overhead) come from it.
  std::map<std::string, model::Sourced<std::string>> base_runtime;
  /// runtime -> the KV cache's element type of the runs that used another than the model's 16 bits: the
  /// first rule whose given fields (checkpoint, runtime version, format) all equal the row's applies.
  struct KvRule {
    std::optional<std::string> hf_repo, runtime_version, format;
    std::string dtype, source;
  };
  std::map<std::string, std::vector<KvRule>> kv_cache_dtype;
  /// routing_traces: the recorded routing of a model on the prompts of a row's benchmark, where one is given
  /// (the first rule whose model, and whose other given fields, equal the row's applies). The rows the
  /// serving simulator prices (prefill, batched decode, max load) replay it in place of the generated trace
  /// (independent uniform routing); batch-1 decode reads top-k experts a token either way.
  struct TraceRule {
    std::string model;  ///< zoo id
    std::optional<std::string> runtime, runtime_version, hf_repo, format;
    std::string trace;  ///< the file, as an absolute path (mapping.json names it relative to its folder)
    std::string source;
  };
  std::vector<TraceRule> routing_traces;
  /// node profile id -> a profile of its device measured by `moesim calibrate kernels --backend cuda`
  /// (hwprofiles/measured/): the rows on that node are also predicted with the device's figures taken from
  /// it (model::with_measured_device), nothing fitted.
  std::map<std::string, model::Sourced<std::string>> measured_device;
};

// validation_mapping.cpp: DIR/mapping.json and DIR/measurements.csv.
Mapping read_mapping(const std::filesystem::path& path);
std::vector<ValidationRow> read_rows(const std::filesystem::path& path);

// validation_predict.cpp: a row's figure by its kind's instrument.
double decode_b1(const ValidationPrediction& p, const model::NodeProfile& node,
                 std::optional<std::int64_t> context = std::nullopt);
std::optional<double> figure(const ValidationPrediction& p, const model::NodeProfile& node);
std::optional<double> max_load_throughput(const ValidationPrediction& p, const model::NodeProfile& node,
                                          double* sequence_steps = nullptr, double* engine_steps = nullptr);
std::optional<model::RuntimeProfile> base_runtime(const Mapping& m, const std::string& runtime, const std::string& hw);
model::NodeProfile base_node(const Mapping& m, const std::string& runtime, const std::string& hw,
                             const std::string* measured_device = nullptr);
void predict(ValidationPrediction& p, const Mapping& m);
/// `node` with every runtime cost taken off and its FLOPs free (validation_explain.cpp): each step of a row
/// costs the bytes it reads, once each, at the datasheet bandwidth (the roofline's memory side, Williams et
/// al. 2009): each distinct expert of the step once (no per-token matrix-vector re-reads), every other
/// weight and the KV cache once. No run of the row's configuration (its routing trace included) is faster.
model::NodeProfile floor_node(model::NodeProfile node);
/// Whether a row's runtime_version is one of `d`'s: a llama.cpp build ("<commit> (<n>)", "b<n>") up to its
/// builds_up_to, or the branch of a pull request ("PR #<n> branch") numbered below its prs_before.
bool predates(const Mapping::MatvecPredates& d, const std::string& version);

/// Configurations (model, format) a class needs for leave-one-out errors of its own: with fewer, a fit
/// without one has too little left to say how far it carries (2 leaves one configuration per fit).
constexpr std::size_t kMinConfigurations = 3;
/// Held-out errors a class needs for an interval of its own: of n exchangeable errors, their min and max
/// bound a new one with probability (n - 1) / (n + 1), at least 90% from 19 on (calibrate::error_interval's
/// order statistics); with fewer the class takes the range pooled over every class.
constexpr std::size_t kMinIntervalErrors = 19;

/// A max-load row's time per output token split by the two efficiencies a runtime profile carries and its
/// host time per sequence and engine step s: T(b, c, s) = bandwidth / b + compute / c + sequences · s +
/// rest, from three serving-simulator runs at (b, c) = (1, 1), (1/2, 1) and (1, 1/2), s = 0: halving one
/// efficiency doubles its part, so each difference from T(1, 1) is that part; `sequences` is the (1, 1)
/// run's sequences summed over its engine steps per output token (each step's host time grows by s per
/// sequence it holds; the batches a closed loop at full KV cache forms do not depend on the step's time).
/// Exact where every kernel group stays memory- or compute-bound across the three runs; where one
/// changes sides the split is the local linearisation the fit needs.
struct MaxLoadTerms {
  double bandwidth = 0, compute = 0, sequences = 0, rest = 0;
  double steps = 0;  ///< engine steps per output token: each pays the runtime's step_overhead
};

/// A max-load row's time per output token on `base` with the runtime `rp` at bandwidth and compute
/// efficiency 1, split into the part that scales with 1 / bandwidth efficiency, the part that scales with
/// 1 / compute efficiency, and the rest (the runtime's host times among it), from three serving-simulator
/// runs (efficiencies 1 and 1, 0.5 and 1, 1 and 0.5); `sequences` and `steps` per output token of the first.
/// nullopt where the row does not run (no KV room, a configuration the simulator refuses).
std::optional<MaxLoadTerms> max_load_terms(const ValidationPrediction& p, const model::NodeProfile& base,
                                           const model::RuntimeProfile& rp);

/// A max-load class's calibration rows and their split (fit_class fills it), for the joint fit of its
/// runtime: each class's two efficiencies and one sequence_overhead shared by the runtime's classes.
struct MaxLoadClass {
  std::size_t fit = 0;  ///< index of the class's ValidationFit
  std::vector<ValidationPrediction*> cal;
  std::vector<MaxLoadTerms> terms;
  std::vector<double> time;  ///< measured s per output token
};

/// A cost per kernel a class takes from its runtime's other fits (borrowed_kernel_costs), with its source.
struct BorrowedKernelCost {
  double seconds = 0;
  std::string source;
};

// validation_fit.cpp: the runtime of each (node profile, runtime) class fitted to its calibration rows.
/// A class with max-load calibration rows and no batch-1 decode ones is split into `max_load` (when given)
/// and fitted by fit_max_load_jointly with the runtime's other such classes. A class whose batch-1 decode
/// rows are one configuration cannot split a cost per kernel from its bandwidth: with `borrowed` it holds
/// that cost at the one given and fits the rest; without, at 0.
void fit_class(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m,
               MaxLoadClass* max_load = nullptr, const BorrowedKernelCost* borrowed = nullptr);
void fit_max_load_jointly(std::vector<MaxLoadClass>& classes, std::vector<ValidationFit>& fits);
void apply_fit(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m,
               const std::vector<double>& pooled_decode, const std::vector<double>& pooled_prefill,
               const std::vector<double>& pooled_max_load);
void batched_intervals(std::vector<std::vector<ValidationPrediction*>*>& classes);

// validation_transfer.cpp: each runtime fitted on several machines, transferred to any other of their GPUs' maker.
/// For each fit of `fits` whose batch-1 decode rows are one configuration, its runtime's cost per kernel:
/// the median over the same runtime's fits that split one (two configurations or more) on GPUs of the same
/// maker; nullopt for the other fits and where there is none.
std::vector<std::optional<BorrowedKernelCost>> borrowed_kernel_costs(const std::vector<ValidationFit>& fits,
                                                                     const Mapping& m);
/// Machines a runtime needs fits on (to batch-1 decode rows) for a transferred profile: each one's rows are
/// predicted from the medians of the others, so three leaves two to take a median of.
constexpr std::size_t kMinTransferMachines = 3;
/// Each fitted and transferred profile's checks against the MoE prediction rows it priced, one per kind
/// (RuntimeProfile::prediction_checks), from their fitted and transferred figures. `members[i]`: the rows of
/// r.fits[i]'s class.
void check_predictions(ValidationResult& r, const std::vector<std::vector<ValidationPrediction*>*>& members,
                       const Mapping& m);
/// The transferred runtimes of `r.fits` (TransferredRuntime, into r.transfers), and each prediction row of
/// their machines priced by the runtime transferred from the other machines (ValidationPrediction::
/// transferred). `members[i]`: the rows of r.fits[i]'s class.
void transfer_runtimes(ValidationResult& r, const std::vector<std::vector<ValidationPrediction*>*>& members,
                       const Mapping& m, unsigned threads);

/// The q-quantile of `v` by linear interpolation between order statistics (R's type 7, NumPy's default).
double quantile(std::vector<double> v, double q);

// validation_explain.cpp: r.explanation for the row `id` (its fitted figure split into parts); UserError
// for an id the table lacks or a row without a fitted figure.
void explain_row(ValidationResult& r, const Mapping& m, const std::string& id);

// validation.cpp: every row predicted, fitted (ValidationOptions::fit) and summarised into `r`.
void run_rows(ValidationResult& r, const std::vector<ValidationRow>& rows, const Mapping& m,
              const ValidationOptions& o);

}  // namespace moesim::calibrate::validation_detail
