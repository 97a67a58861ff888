#pragma once
// Internals of the workload shared by workload.cpp (the spec: JSON, validation), workload_lengths.cpp
// (length distributions) and workload_arrivals.cpp (arrival processes).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/workload.hpp"

namespace moesim::sim::workload_detail {

/// The streams of one workload's draws: request i's gap (Poisson), prompt and output length, and the
/// uniforms of its gamma gap (a variable number: the rejection sampler draws k = 0, 1, ...).
enum Stream : std::uint64_t { kArrivalStream = 0, kPromptStream = 1, kOutputStream = 2, kGammaStream = 3 };

/// A short number for messages ("2", "0.5").
using text::short_number;

/// The length of item `index` under `spec`, from one uniform draw in `stream`.
std::int64_t draw_length(const LengthSpec& spec, std::uint64_t seed, std::uint64_t stream, std::int64_t index);
/// The length distributions' names, for messages.
const std::vector<std::string>& length_names();
/// UserError, prefixed with `where`, for a length distribution out of range.
void validate_length(const LengthSpec& l, const std::string& where);
/// A length: a token count, or {"dist": ..., ...}.
LengthSpec parse_length(const json::Node& node, std::string_view key);
nlohmann::json length_to_json(const LengthSpec& l);

/// The built-in open-loop arrival times (ArrivalInfo::arrival), in workload_arrivals.cpp.
SimTime poisson_arrival(const WorkloadSpec& w, std::int64_t i, SimTime previous);
SimTime gamma_arrival(const WorkloadSpec& w, std::int64_t i, SimTime previous);
SimTime uniform_arrival(const WorkloadSpec& w, std::int64_t i, SimTime previous);

}  // namespace moesim::sim::workload_detail
