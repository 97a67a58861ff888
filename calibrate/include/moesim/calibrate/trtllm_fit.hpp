#pragma once
// `moesim calibrate fit --trtllm-bench FILE`: a TensorRT-LLM `trtllm-bench throughput` run replayed in the
// serving simulator as the validation table's max-load rows are (calibrate/src/validation_predict.cpp), and
// the runtime's bandwidth and compute efficiency on this machine fitted to it (issue 20).
//
// The input is what `trtllm-bench --model M throughput ...` prints at the end of a run, or the JSON its
// --report_json option writes: NVIDIA/TensorRT-LLM tensorrt_llm/bench/dataclasses/reporting.py (commit
// 0249976575050d2c624a5f285683c66de311a3b7), ReportUtility.get_statistics_dict() (the JSON: "engine" {model,
// version, backend, dtype, kv_cache_dtype, quantization}, "world_info" {tp_size, pp_size, ep_size,
// max_batch_size, max_num_tokens, kv_cache_percentage}, "request_info" {num_requests, avg_input_length,
// avg_output_length}, "performance" {system_output_throughput_tok_s, total_latency_ms, ...}) and
// report_statistics() (the text: "= PYTORCH BACKEND" or "= ENGINE DETAILS" with "Model:", "TensorRT LLM
// Version:", "Dtype:", "KV Cache Dtype:", "Quantization:"; "= WORLD + RUNTIME INFORMATION" with "TP Size:",
// "PP Size:", "EP Size:", "Max Runtime Batch Size:", "Max Runtime Tokens:", "KV Memory Percentage:" as
// "95.00%" or "None"; "= REQUEST DETAILS" with "Number of requests:", "Average Input Length (tokens):",
// "Average Output Length (tokens):"; "= PERFORMANCE OVERVIEW" with "Total Output Throughput (tokens/sec):").
// The text is read into the JSON's shape, so both go through one reader. calibrate/FIT.md describes it and
// tests/data/trtllm/ holds fixtures.
//
// The replay: num_requests requests of the average input and output lengths sent at time 0 on tp x pp GPUs
// of the node (an MoE model's experts split over the report's EP size of them), under the run's own max batch size (per
// pipeline micro-batch) and max tokens per step, the KV cache at the run's KV memory percentage of each GPU's memory
// (0.90, TensorRT-LLM's default, when the report says None), in-flight batching with guaranteed-no-evict admission; the
// figure is output tokens per second of the steady state (two waves of the requests the KV cache holds, as the table's
// rows).
//
// The fit: each run's time per output token split into a part that scales with 1 / bandwidth efficiency, a
// part that scales with 1 / compute efficiency and the rest (validation_detail::max_load_terms, the split the
// table's max-load fit uses), then the non-negative least squares of the relative residuals for the inverse
// efficiencies. The runtime's host times per engine step and per sequence stay the given runtime profile's
// (tensorrt-llm@<node>'s are fitted to the table's 263 dense max-load rows); one run fits the bandwidth
// efficiency alone (the compute efficiency stays the profile's), two or more fit both.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "moesim/model/hardware.hpp"

namespace moesim::calibrate {

/// One trtllm-bench throughput report.
struct TrtllmBenchReport {
  std::string path;
  std::string model, version, backend, dtype, kv_cache_dtype, quantization;  ///< as the report prints them
  std::int64_t tp = 1, pp = 1, ep = 1;
  std::int64_t max_batch_size = 0, max_num_tokens = 0;
  std::optional<double> kv_fraction;  ///< "KV Memory Percentage" as a fraction; absent: "None" (the default)
  std::int64_t num_requests = 0;
  double input_length = 0, output_length = 0;  ///< tokens, the requests' averages
  double output_throughput = 0;                ///< "Total Output Throughput", tokens/s
};

/// Reads a report (the --report_json file, or the text trtllm-bench printed; bounded before reading).
/// UserError "<file>: ... ; <fix>" for a missing or malformed field.
TrtllmBenchReport read_trtllm_bench(const std::filesystem::path& path);

/// The moesim precision of a report's weights: its Quantization (FP8, NVFP4, W4A16_AWQ, ...) or, without
/// one, its Dtype (bfloat16, float16); `given` (--precision) overrides. UserError when none maps.
std::string trtllm_precision(const TrtllmBenchReport& r, const std::string& given);

struct TrtllmImport {
  std::string model;      ///< zoo id or config.json
  std::string hw;         ///< node profile id or path
  std::string precision;  ///< empty: trtllm_precision(report, "")
  /// The runtime profile whose other figures (host times, kernel cost) the replay uses; its bandwidth and
  /// compute efficiency are what the fit replaces.
  model::RuntimeProfile runtime;
};

struct TrtllmFileFit {
  std::string path;
  std::string precision, kv_cache_dtype;  ///< moesim's names of what was replayed
  std::int64_t moe_ep = 1;                ///< the experts' split replayed (1: tensor-parallel, or a dense model)
  double measured = 0;                    ///< output tokens/s
  double before = 0;                      ///< with the runtime profile as given
  double after = 0;                       ///< with the fitted efficiencies
  std::optional<double> loo;              ///< with the efficiencies fitted to the other files (>= 2 files)
};

struct TrtllmFit {
  double bandwidth_efficiency = 1, compute_efficiency = 1;
  bool compute_fitted = false;  ///< false with one file: the compute efficiency is the profile's
  /// The reports leave a part no time (the runtime's host times and the other part already take as long as
  /// measured, or longer): its efficiency is unbounded, and the profile's is kept.
  bool bandwidth_pinned = false, compute_pinned = false;
  std::vector<TrtllmFileFit> files;
};

/// Fits the efficiencies to the reports' output throughput (the header's description); with two files or
/// more each is also predicted by the fit to the others. UserError when a run does not fit the node (no KV
/// room) or the simulator refuses its configuration.
TrtllmFit fit_trtllm_bench(const std::vector<TrtllmBenchReport>& runs, const TrtllmImport& in);

}  // namespace moesim::calibrate
