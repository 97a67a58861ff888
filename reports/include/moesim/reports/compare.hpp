#pragma once
// The three instruments side by side (issue 19): for each row of an estimate, the same configuration
// replayed by the decode simulator and served to one user by the serving simulator, with everything
// dynamic switched off (no NIC contention, no weight residency; P-L_R-D balancing, so nodes finish each
// layer together), so all three price
// one decode token with the one cost model (moesim/model/step_cost.hpp) and must agree. `moesim estimate
// --compare` prints it; tests/golden/test_three_way_oracle.cpp holds them to 0.5%.
//
// What is compared, and what cannot be:
//   - simulate replays `tokens` uniformly routed tokens of a generated trace at the estimate's context
//     (the analytic model uses the exact E[active] of the placement, the simulator the trace's mean);
//   - serve runs one user's eight requests whose decode steps average the estimate's context (prompt =
//     context − m, 2m + 2 output tokens), on the plan that matches: one node's devices as tensor parallel, or nodes of
//     one device each as expert parallel with replicated attention (seed 000's decentralised design, one
//     expert group per node). Other configurations (a centralised driver, an all-reduce exchange, a
//     placement that replicates expert groups) have no serving counterpart, and the row says why.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/scenario/estimate.hpp"

namespace moesim::reports {

/// A serving scenario of one user decoding at `context` (the estimate's token), as `serve` reads it.
nlohmann::json single_user_scenario(const std::string& model, const std::string& hw, const std::string& precision,
                                    const std::string& experts, std::int64_t nodes, const nlohmann::json& plan,
                                    std::int64_t context);

struct CompareRow {
  std::int64_t nodes = 0;
  std::string nic;
  double estimate = 0;             ///< tokens/s
  std::optional<double> simulate;  ///< tokens/s
  std::optional<double> serve;     ///< tokens/s (1 / mean TPOT)
  std::vector<std::string> notes;  ///< why a figure is absent
  /// Largest relative difference of the present figures from the estimate.
  [[nodiscard]] double spread() const;
};

struct CompareOptions {
  std::int64_t tokens = 2000;  ///< simulate: tokens replayed
};

std::vector<CompareRow> compare_instruments(const scenario::EstimateResult& r, const CompareOptions& o = {});
void print_compare_text(const std::vector<CompareRow>& rows, std::ostream& out);
/// One object per row: {nodes, nic, estimate, simulate, serve, spread, notes}, tokens/s as metrics.
nlohmann::json compare_to_json(const std::vector<CompareRow>& rows);

}  // namespace moesim::reports
