#include "moesim/model/collective.hpp"

#include "moesim/model/error.hpp"

namespace moesim::cost {

CollectiveShape ring_allreduce(double bytes, std::int64_t p) {
  if (p <= 1) return {};
  const auto n = static_cast<double>(p);
  return {2 * (p - 1), 2.0 * (n - 1.0) / n * bytes};
}

RecursiveDoublingPlan recursive_doubling_plan(std::int64_t n) {
  MOESIM_CHECK(n >= 1, "recursive doubling over no nodes");
  RecursiveDoublingPlan plan;
  while (plan.pow2 * 2 <= n) {
    plan.pow2 *= 2;
    ++plan.rounds;
  }
  return plan;
}

CollectiveShape recursive_doubling(double bytes, std::int64_t n) {
  const auto plan = recursive_doubling_plan(n);
  const std::int64_t steps = plan.rounds + (n > plan.pow2 ? 2 : 0);
  return {steps, static_cast<double>(steps) * bytes};
}

CollectiveShape expert_outputs(double vector_bytes, std::int64_t top_k) {
  return {1, static_cast<double>(top_k) * vector_bytes};
}

CollectiveShape all_to_all(double bytes, std::int64_t p) {
  if (p <= 1) return {};
  const auto n = static_cast<double>(p);
  return {1, (n - 1.0) / n * bytes};
}

CollectiveShape point_to_point(double bytes) { return {1, bytes}; }

CollectiveShape ring_allgather(double bytes, std::int64_t p) {
  if (p <= 1) return {};
  const auto n = static_cast<double>(p);
  return {p - 1, (n - 1.0) / n * bytes};
}

CollectiveShape scatter_gather(double vector_bytes, std::int64_t top_k) {
  return {2, 2.0 * static_cast<double>(top_k) * vector_bytes};
}

}  // namespace moesim::cost
