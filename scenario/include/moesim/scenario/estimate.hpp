#pragma once
// `moesim estimate` as a library: a request (model, hardware, NICs, node counts, placement, precision,
// ...) is resolved into profiles, each (NIC, node count) point gets its E[active experts] from the
// placement and its per-token time from the analytic model, and the result renders as a table or as
// JSON ({name, value, unit} per metric plus the resolved inputs, STYLE.md practice 8).
//
// A scenario file holds the same keys as the flags (every flag has a scenario key and the other way
// round): {"model", "hw", "nic": [..], "nodes": [..], "placement", "groups", "placement_file",
// "precision", "context", "lm_head", "exchange", "experts", "streaming", "runtime"}.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/model/analytic.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/cost.hpp"
#include "moesim/model/expert_streaming.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/precision.hpp"
#include "moesim/scenario/params.hpp"
#include "moesim/sim/placement.hpp"

namespace moesim::scenario {

struct EstimateRequest {
  json::Origins origins;                  ///< where the scenario file gave each id (messages); flags have none
  std::string model;                      ///< zoo id or config.json path
  std::string hw;                         ///< node profile id or path
  std::vector<std::string> nics;          ///< NIC profile ids or paths (may be empty for one node)
  std::vector<std::int64_t> nodes = {1};  ///< node counts, each >= 1
  std::string placement = "replicated-groups";
  std::int64_t groups = 2;               ///< replicated-groups: number of groups
  std::string placement_file;            ///< custom placement
  std::string precision = "checkpoint";  ///< a precision name, or the model config's own (model::precision_for)
  std::int64_t context = 0;
  bool lm_head = false;
  std::string exchange = "expert-outputs";
  std::string experts = "fused";                 ///< cost::ExpertExecution by name
  std::optional<cost::StreamingSpec> streaming;  ///< routed experts read from storage (serial)
  std::string runtime;  ///< a runtime profile fitted on `hw` (model::find_runtime); empty: the hardware alone
};

/// The keys of an estimate scenario, each declared once (scenario/params.hpp): the file reader, the flags,
/// their --help come from them.
const scenario::ParamTable<EstimateRequest>& estimate_params();
/// Reads a scenario file into a request (unknown keys and bare numbers are errors with their path).
EstimateRequest load_scenario(const std::string& path);
/// The same from parsed JSON whose origin is `source`.
EstimateRequest scenario_from_json(const nlohmann::json& doc, const std::string& source);

struct EstimateRow {
  std::string nic;  ///< NIC id, "-" for one node
  std::int64_t nodes = 0;
  std::string placement;  ///< the placement, described
  double expected_active = 0;
  model::DecodeEstimate estimate;
  /// Absent when a profile lacks a price this row needs (the node's; the NIC's from two nodes on): the
  /// tokens/s do not need it, so the row is still answered and `price_missing` says what to add.
  std::optional<model::CapitalCost> cost;
  std::optional<double> tokens_per_second_per_usd;
  std::string price_missing;  ///< model::missing_price's line, empty when the row is priced
  /// With a runtime profile: the tokens/s interval its calibration rows' leave-one-out errors give.
  std::optional<std::pair<double, double>> interval;
  /// A row that does not fit: the fewest nodes (from this row's count) at which the experts split without
  /// replication (--placement contiguous) fit, and the memory per node there; absent when none up to the
  /// expert count does, or the row fits.
  std::optional<std::pair<std::int64_t, double>> fits_contiguous;
};

struct EstimateResult {
  EstimateRequest request;
  model::Architecture arch;
  model::NodeProfile node;
  std::vector<model::NicProfile> nics;
  std::optional<model::NicProfile> intra_link;
  const model::Precision* precision = nullptr;
  std::optional<cost::StreamingParams> streaming;
  std::optional<model::RuntimeProfile> runtime;  ///< applied to `node` (model::apply_runtime)
  std::vector<EstimateRow> rows;
};

/// Validates the request (UserError for node counts < 1, unknown names, missing figures the per-token
/// time needs) and runs it. A missing price is not an error here: the rows it concerns carry no cost.
EstimateResult run_estimate(const EstimateRequest& request);

void print_estimate_text(const EstimateResult& r, std::ostream& out);
nlohmann::json estimate_to_json(const EstimateResult& r);

/// "2,3,4" -> {2,3,4}; "2-8" -> {2,...,8}. UserError naming `flag` for anything else or a count < 1.
/// The most nodes a cluster may have in `estimate` and in a sweep grid: a placement holds a list per node
/// and a sweep a point per node count, so the count is bounded before anything is allocated for it.
inline constexpr std::int64_t kMaxClusterNodes = 65536;

std::vector<std::int64_t> parse_node_list(const std::string& text, const std::string& flag);

}  // namespace moesim::scenario
