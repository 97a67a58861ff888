#pragma once
// Collectives as data (issue 19, "one physics"): for one use of a collective, how many messages each
// participant sends one after another (steps) and how many bytes it sends in all. Every instrument prices
// collectives through these shapes: the analytic model and the serving simulator as
//   time = latency × steps + bytes / bandwidth        (Hockney's model; R. Hockney, Parallel Computing 1994)
// and the decode simulator by scheduling the same steps as messages on its NICs (sim/src/decode.cpp).

#include <cstdint>

#include "moesim/model/units.hpp"

namespace moesim::cost {

struct CollectiveShape {
  std::int64_t steps = 0;  ///< messages each participant sends one after another
  double bytes = 0;        ///< bytes each participant sends in all

  /// `uses` of it over a link: latency × (steps × uses) + (bytes × uses) / bandwidth, in seconds.
  [[nodiscard]] double seconds(double latency_s, double bandwidth_bytes_per_s, double uses = 1.0) const {
    return latency_s * (static_cast<double>(steps) * uses) + bytes * uses / bandwidth_bytes_per_s;
  }
  [[nodiscard]] units::Duration time(units::Duration latency, units::Bandwidth bandwidth, double uses = 1.0) const {
    return latency * (static_cast<double>(steps) * uses) + units::bytes(bytes * uses) / bandwidth;
  }
};

/// Ring all-reduce of a vector of `bytes` over p members (Patarasuk & Yuan, JPDC 2009; NCCL's ring):
/// 2(p−1) steps, each a message of bytes/p, so 2(p−1)/p × bytes sent. Nothing for p <= 1.
CollectiveShape ring_allreduce(double bytes, std::int64_t p);

/// Recursive doubling over n members (Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4): log2(p) exchanges of
/// the whole vector among the largest power of two p <= n, plus one step before and one after when n > p
/// (the extra members fold their vectors into partners first and get the result back last).
struct RecursiveDoublingPlan {
  std::int64_t pow2 = 1;    ///< the largest power of two <= n
  std::int64_t rounds = 0;  ///< log2(pow2)
};
RecursiveDoublingPlan recursive_doubling_plan(std::int64_t n);
CollectiveShape recursive_doubling(double bytes, std::int64_t n);

/// Expert-output exchange of decentralised expert parallelism (seed 000, Table 1 note (a)): each node
/// sends its top-k expert outputs of `vector_bytes` each in one step.
CollectiveShape expert_outputs(double vector_bytes, std::int64_t top_k);

/// All-to-all of expert parallelism over p members (the dispatch, and symmetrically the combine, of
/// DeepSeek-V3 §3.2 and vLLM's all2all backends): each member sends the token copies it holds for the
/// others' experts, all pairs at once in one step; (p − 1)/p of its `bytes` leave it.
CollectiveShape all_to_all(double bytes, std::int64_t p);

/// One message of `bytes` (a pipeline stage boundary's activations).
CollectiveShape point_to_point(double bytes);

/// Ring all-gather of a vector of `bytes` over p members (Thakur, Rabenseifner & Gropp 2005): p − 1 steps
/// of bytes/p each. Nothing for p <= 1.
CollectiveShape ring_allgather(double bytes, std::int64_t p);

/// Centralised expert parallelism: the driver scatters the token to the experts' nodes and gathers their
/// outputs, 2 steps and 2 × top-k vectors.
CollectiveShape scatter_gather(double vector_bytes, std::int64_t top_k);

}  // namespace moesim::cost
