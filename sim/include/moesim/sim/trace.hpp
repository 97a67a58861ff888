#pragma once
// Routing traces: what each token's router chose, layer by layer (issue 3, part 1).
//
// A trace is a header (model, MoE layers, routed experts, top-k, source) and one record per token: for
// each MoE layer, the top-k chosen expert ids in router order and, when known, their gate weights. It is
// what the simulator replays (sim/decode.hpp) and what `moesim trace stats` measures.
//
// Storage is flat (token-major, then layer, then slot) so a 100,000-token trace of a 40-layer top-4
// model is 16 M ids in one vector: replay walks it without a pointer chase. Ids are 16-bit: the largest
// routed-expert count in the zoo is 512 (Qwen3.5), and readers refuse a header with more than 65,535.
//
// File formats (documented for users in sim/TRACES.md):
//  - JSON lines (`.jsonl`): line 1 is the header object, every later line one token record.
//  - binary (`.mtrace`): a magic, the header as JSON, then fixed-size records, so a truncated file is
//    detected exactly (the record number where it ends).
// Both hold the same information and convert losslessly (gate weights are float32 in both).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moesim::sim {

struct TraceHeader {
  std::string model;         ///< model id the trace was recorded or generated for (zoo id or config path)
  std::int64_t layers = 0;   ///< MoE layers recorded; trace layer i is the model's i-th MoE layer
  std::int64_t experts = 0;  ///< routed experts per layer (ids are 0 .. experts-1)
  std::int64_t top_k = 0;    ///< experts chosen per token and layer
  std::string source;        ///< provenance: generator and its parameters, or importer and original file
};

struct RoutingTrace {
  TraceHeader header;
  /// tokens × layers × top_k expert ids, in router order (highest gate weight first when known).
  std::vector<std::uint16_t> experts;
  /// Gate weights, same shape as `experts`; empty when the source did not record them.
  std::vector<float> weights;
  /// Per token: the request (sequence) it belongs to, and its position in that request.
  std::vector<std::uint32_t> request;
  std::vector<std::uint32_t> position;

  [[nodiscard]] std::int64_t tokens() const { return static_cast<std::int64_t>(request.size()); }
  [[nodiscard]] bool has_weights() const { return !weights.empty(); }
  /// The experts `token` chose at MoE layer `layer` (top_k ids).
  [[nodiscard]] std::span<const std::uint16_t> chosen(std::int64_t token, std::int64_t layer) const {
    const auto k = static_cast<std::size_t>(header.top_k);
    const auto at =
        (static_cast<std::size_t>(token) * static_cast<std::size_t>(header.layers) + static_cast<std::size_t>(layer)) *
        k;
    return {experts.data() + at, k};
  }
  [[nodiscard]] std::span<const float> gates(std::int64_t token, std::int64_t layer) const {
    const auto k = static_cast<std::size_t>(header.top_k);
    const auto at =
        (static_cast<std::size_t>(token) * static_cast<std::size_t>(header.layers) + static_cast<std::size_t>(layer)) *
        k;
    return {weights.data() + at, k};
  }
};

}  // namespace moesim::sim
