#pragma once
// Internals of the routing-trace formats shared by trace_io.cpp (validation, dispatch), trace_io_jsonl.cpp
// and trace_io_binary.cpp: the binary prefix, the header, and the checks and messages both readers use.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "moesim/model/json_reader.hpp"
#include "moesim/sim/trace.hpp"

namespace moesim::sim::trace_io_detail {

inline constexpr char kMagic[8] = {'M', 'O', 'E', 'S', 'I', 'M', 'T', 'R'};
/// magic + u32 version + u32 header length: the part before the header JSON.
inline constexpr std::uint64_t kFixedPrefix = 16;
inline constexpr const char* kHeaderKeys[] = {"format",  "version", "model",  "layers",
                                              "experts", "top_k",   "source", "tokens"};
inline constexpr const char* kRecordKeys[] = {"request", "position", "experts", "weights"};

/// n with thousands separators ("65,535").
std::string with_commas(std::int64_t n);
/// "N MoE layers, E experts, top-k".
std::string shape_text(const TraceHeader& h);

/// The first duplicate in one token-layer's ids: (slot of the second occurrence, slot of the first). O(k^2),
/// which for k <= 64 beats any set.
inline std::optional<std::pair<std::size_t, std::size_t>> find_duplicate(const std::uint16_t* ids, std::size_t k) {
  for (std::size_t i = 1; i < k; ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (ids[i] == ids[j]) return std::make_pair(i, j);
    }
  }
  return std::nullopt;
}

std::string duplicate_text(std::uint16_t id, std::size_t first_slot);
std::string out_of_range_text(std::int64_t id, std::int64_t experts);

/// Fast test first: building an empty string per weight would cost more than reading it.
inline bool weight_ok(float w) { return w >= 0 && w <= std::numeric_limits<float>::max(); }

/// Empty when the weight is acceptable, else what is wrong with it.
std::string weight_problem(float w);
inline constexpr const char* kWeightFix =
    "; gate weights are the router's probabilities for the chosen experts (finite, >= 0): fix the value, or drop "
    "\"weights\" from every record";

/// Validates the header object (JSON lines line 1, or the binary header) and fills `h`.
TraceHeader parse_header(const json::Node& n, std::optional<std::int64_t>& tokens);

/// Bytes of one token's record in memory (request, position, ids and, with `weights`, gate weights).
std::uint64_t record_bytes(const TraceHeader& h, bool weights);

/// The header as one JSON line (JSON lines line 1, or the binary header).
std::string header_line(const TraceHeader& h, std::optional<std::int64_t> tokens);
/// Checks that the trace's arrays agree with its shape (MOESIM_CHECK).
void check_shape(const RoutingTrace& t);

}  // namespace moesim::sim::trace_io_detail
