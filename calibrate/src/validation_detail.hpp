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
  /// runtime -> how it stores a checkpoint's format (model::RuntimeProfile::checkpoint_formats)
  std::map<std::string, model::Sourced<std::map<std::string, std::string>>> checkpoint_formats;
  /// runtime -> the tokens it prefills per step (llama.cpp's n_ubatch); absent: the serving simulator's 2048
  std::map<std::string, model::Sourced<std::int64_t>> prompt_chunk;
  /// runtime -> how its max-load benchmark ran: the scheduler (a serve scenario's "scheduler" object) and
  /// the requests of each (prompt, output) dataset. A runtime without one has no max-load rows expressed.
  struct MaxLoad {
    model::Sourced<nlohmann::json> scheduler;
    model::Sourced<std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t>> requests;
  };
  std::map<std::string, MaxLoad> max_load;
  /// runtime -> the name of a hand-written runtime profile laid over the node before the fit, on the nodes
  /// that have one (hwprofiles/runtimes/<name>@<hw>.json): the rows' figure before the fit, and the
  /// figures the class's rows do not fit (a max-load class's kernel overhead) come from it.
  std::map<std::string, model::Sourced<std::string>> base_runtime;
};

// validation_mapping.cpp: DIR/mapping.json and DIR/measurements.csv.
Mapping read_mapping(const std::filesystem::path& path);
std::vector<ValidationRow> read_rows(const std::filesystem::path& path);

// validation_predict.cpp: a row's figure by its kind's instrument.
double decode_b1(const ValidationPrediction& p, const model::NodeProfile& node,
                 std::optional<std::int64_t> context = std::nullopt);
std::optional<double> figure(const ValidationPrediction& p, const model::NodeProfile& node);
std::optional<model::RuntimeProfile> base_runtime(const Mapping& m, const std::string& runtime, const std::string& hw);
model::NodeProfile base_node(const Mapping& m, const std::string& runtime, const std::string& hw);
void predict(ValidationPrediction& p, const Mapping& m);

/// Configurations (model, format) a class needs for leave-one-out errors of its own: with fewer, a fit
/// without one has too little left to say how far it carries (2 leaves one configuration per fit).
constexpr std::size_t kMinConfigurations = 3;

// validation_fit.cpp: the runtime of each (node profile, runtime) class fitted to its calibration rows.
void fit_class(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m);
void apply_fit(std::vector<ValidationPrediction*>& rows, ValidationFit& fit, const Mapping& m,
               const std::vector<double>& pooled_decode, const std::vector<double>& pooled_prefill,
               const std::vector<double>& pooled_max_load);
void batched_intervals(std::vector<std::vector<ValidationPrediction*>*>& classes);

// validation.cpp: every row predicted, fitted (ValidationOptions::fit) and summarised into `r`.
void run_rows(ValidationResult& r, const std::vector<ValidationRow>& rows, const Mapping& m,
              const ValidationOptions& o);

}  // namespace moesim::calibrate::validation_detail
