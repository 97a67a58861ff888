#pragma once
// `moesim validate` (issue 5, part 5): the simulator replays the reference run's own routing trace on the
// same model shape, placement, balancing, attention placement and rank count, with a profile of this
// machine, and its per-token decode time and time split are set beside the measured ones.
//
// What the simulator is told, and why:
//  - precision fp32: the reference keeps its weights in f32 (decoder.hpp), 4 bytes per weight read;
//  - activations of 4 bytes on the wire (the reference exchanges f32);
//  - the LM head counted (the reference runs it every token);
//  - context: the mean KV-cache length over the decode steps;
//  - no weight residency (a CPU keeps its pages resident; the profile has no residency block anyway);
//  - ranks sharing one host share its memory system and cores: each rank's node is the profile with
//    memory bandwidth and FLOP peaks divided by the ranks on the host (they run the same phases at the
//    same time in both designs' compute-heavy parts). Said in the output when it applies.

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moesim/reference/run.hpp"
#include "moesim/scenario/simulate.hpp"

namespace moesim::reference {

struct ValidateOptions {
  std::string hw;   ///< node profile id or path (from `moesim calibrate all`)
  std::string nic;  ///< NIC profile id or path; needed for more than one rank
  std::string placement = "contiguous";
  std::int64_t groups = 2;
  std::string placement_file;
};

struct ValidateResult {
  MeasuredSplit measured;
  scenario::TimeSplit predicted;
  std::int64_t tokens = 0;
  std::string node_id;
  std::string nic_id;
  std::vector<std::string> assumptions;
  [[nodiscard]] double error() const { return (predicted.time - measured.time) / measured.time; }
};

/// Loads the profiles and checks a NIC is given for more than one rank: UserError otherwise. `validate`
/// calls it before the run, so a bad profile is refused before minutes of decoding, not after.
void check_validate_options(const ValidateOptions& o, int ranks);

/// Runs the simulator on the reference run `r` (rank 0's result). UserError for an unknown profile, a
/// missing NIC for several ranks, or a run without decode steps.
ValidateResult validate_run(const RunResult& r, const ValidateOptions& o);

void print_validate(const RunResult& r, const ValidateResult& v, std::ostream& out);
nlohmann::json validate_json(const RunResult& r, const ValidateResult& v);

}  // namespace moesim::reference
