#pragma once
// `moesim calibrate fit --vllm-serving FILE`: a vLLM serving benchmark replayed in the serving simulator,
// and the runtime's host costs (model::DeviceSpec::step_overhead, request_overhead) fitted to it (issue 20).
//
// The input is what vLLM's benchmarks/benchmark_serving.py writes with --save-result (vllm-project/vllm
// commit 0049e29c41fd383bda519a3f250e3227713081ef, main() "Save config and results to json" and
// benchmark() `result`): the setup ("date", "backend", "model_id", "tokenizer_id", "num_prompts"), the
// traffic ("request_rate": a number or "inf", "burstiness", "max_concurrency": null or a number), the
// results ("duration" s, "completed", "total_input_tokens", "total_output_tokens", "request_throughput"
// req/s, "output_throughput" and "total_token_throughput" tok/s, per request "input_lens", "output_lens",
// "ttfts" s, "itls" s, "generated_texts", "errors") and the statistics in milliseconds
// ("mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", the same for "tpot" and "itl", and
// "e2el" when selected). calibrate/FIT.md describes what is read and tests/data/vllm/ holds a fixture.
//
// The replay: num_prompts requests with the file's per-request input and output lengths (their means
// when the lists are absent), arriving all at once for "inf", else as a Poisson process at request_rate
// (vLLM draws gamma gaps with shape burstiness, 1 = Poisson; moesim's own generator draws the gaps, so
// the arrival instants differ, not their law); with max_concurrency, a closed loop of that many users
// with no think time (the benchmark's semaphore: a request is sent when one finishes).
//
// The fit: TTFT_i(s, r) and TPOT_i(s, r) of each file from the simulator, s = step_overhead, r =
// request_overhead; Gauss-Newton on the relative residuals (predicted − measured) / measured of the mean
// TTFT and mean TPOT, each step the non-negative least squares of the linearised problem (the Jacobian
// by forward differences of the simulator; calibrate::nonnegative_least_squares), until the parameters
// move less than 0.1%. Nothing else is moved: the GPU's side comes from the runtime profile (or the
// hardware profile's datasheet figures).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/hardware.hpp"

namespace moesim::calibrate {

/// One benchmark_serving.py --save-result file, times in seconds.
struct VllmServingResult {
  std::string path;
  std::string date, backend, model_id;
  std::int64_t num_prompts = 0, completed = 0;
  std::optional<double> request_rate;  ///< requests/s; absent: "inf" (every request sent at once)
  double burstiness = 1.0;
  std::optional<std::int64_t> max_concurrency;
  double duration = 0;  ///< s
  std::int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0;                      ///< req/s
  double output_throughput = 0;                       ///< output tokens/s
  std::vector<std::int64_t> input_lens, output_lens;  ///< per request (empty when not saved)
  double mean_ttft = 0, mean_tpot = 0;                ///< s
  std::optional<double> median_ttft, mean_itl;        ///< s
};

/// Reads and checks a file (bounded before reading). UserError "<file>: $.<key>: <what>; <fix>" for a
/// missing or malformed key.
VllmServingResult read_vllm_serving(const std::filesystem::path& path);

/// What the runs were served with, as moesim inputs.
struct ServingImport {
  std::string model;  ///< zoo id or config.json
  std::string hw;     ///< node profile id or path
  std::string precision = "bf16";
  std::int64_t tp = 1;
  /// The runtime profile whose GPU-side figures the replay uses (already resolved by the caller; its
  /// step/request overheads are what the fit replaces).
  model::RuntimeProfile runtime;
};

/// The three figures compared with the file: mean TTFT (s), mean TPOT (s), output throughput (tokens/s).
struct ServingFigures {
  double ttft = 0, tpot = 0, output_throughput = 0;
  double duration = 0;  ///< s, first arrival to last completion
};

/// The file's run replayed with step_overhead `step` s and request_overhead `request` s.
ServingFigures replay_vllm_serving(const VllmServingResult& run, const ServingImport& in, double step, double request);

struct ServingFileFit {
  std::string path;
  ServingFigures measured, before, after;
  std::optional<ServingFigures> loo;  ///< predicted by the fit to the other files (>= 2 files)
  std::optional<double> loo_step, loo_request;
};

struct ServingFit {
  double step_overhead = 0, request_overhead = 0;  ///< s
  std::int64_t iterations = 0, simulations = 0;
  double rms_relative = 0;  ///< of the fitted residuals
  std::vector<ServingFileFit> files;
};

/// Fits step_overhead and request_overhead to the files' mean TTFT and TPOT, and, with two files or more,
/// refits without each to predict it (leave-one-out). `progress` (may be empty) gets a line now and then.
ServingFit fit_vllm_serving(const std::vector<VllmServingResult>& runs, const ServingImport& in,
                            const std::function<void(const std::string&)>& progress = {});

/// One vLLM benchmarks/benchmark_latency.py --output-json file (vllm-project/vllm commit
/// 00db02095a5d578c18383609a00fa0c6e7fc8db8, main(): {"avg_latency": s, "latencies": [s, ...],
/// "percentiles": {"10": s, ...}}): the time of llm.generate() over one batch of `batch_size` prompts of
/// `input_len` random tokens, each generating `output_len` tokens (ignore_eos). The file does not record
/// the three lengths: they come from "input_len" / "output_len" / "batch_size" keys when a wrapper added
/// them, else from the caller (the command line), else benchmark_latency.py's argparse defaults 32, 128, 8.
struct VllmLatencyResult {
  std::string path;
  double avg_latency = 0;  ///< s
  std::int64_t input_len = 32, output_len = 128, batch_size = 8;
  std::string lengths_from;  ///< "file", "command line" or "benchmark_latency.py defaults"
};

struct LatencyLengths {
  std::optional<std::int64_t> input_len, output_len, batch_size;
};
VllmLatencyResult read_vllm_latency(const std::filesystem::path& path, const LatencyLengths& given = {});

struct LatencyFileFit {
  std::string path;
  double measured = 0, before = 0, after = 0;  ///< batch latency, s
  std::optional<double> loo;                   ///< predicted by the fit to the other files (>= 2 files)
  double steps = 0;                            ///< engine steps of the batch (the latency's slope in step_overhead)
};

struct LatencyFit {
  double step_overhead = 0;  ///< s
  std::vector<LatencyFileFit> files;
};

/// The batch replayed (every prompt at time 0) and step_overhead fitted to the files' avg_latency: the
/// replayed latency is L0 + steps × step_overhead (a fixed batch takes the same steps whatever their
/// length), so the fit is the one-column non-negative least squares of the relative residuals.
LatencyFit fit_vllm_latency(const std::vector<VllmLatencyResult>& runs, const ServingImport& in);

}  // namespace moesim::calibrate
