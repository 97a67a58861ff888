// The serving simulator's metrics (serving_metrics.hpp) and the percentiles of sim/serving.hpp.

#include "serving_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

namespace moesim::sim {

namespace {
template <class T>
Percentiles percentiles_of(std::vector<T>& v, const std::vector<double>& percents) {
  Percentiles p;
  if (v.empty()) {
    for (double q : percents) p.requested.emplace_back(q, 0.0);
    return p;
  }
  p.mean = std::accumulate(v.begin(), v.end(), 0.0, [](double acc, T x) { return acc + static_cast<double>(x); }) /
           static_cast<double>(v.size());
  // np.std: the population standard deviation (ddof 0), two passes for accuracy.
  const double ss = std::accumulate(v.begin(), v.end(), 0.0, [&](double acc, T x) {
    const double d = static_cast<double>(x) - p.mean;
    return acc + d * d;
  });
  p.std = std::sqrt(ss / static_cast<double>(v.size()));
  // Linear interpolation between closest ranks (numpy's default percentile, which vLLM's benchmark uses),
  // by selection (O(n)), each search confined to the part above the previous one: an ITL vector holds one
  // value per generated token, millions of them.
  auto from = v.begin();
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto it = v.begin() + static_cast<std::ptrdiff_t>(lo);
    std::nth_element(from, it, v.end());
    from = it;
    const auto a = static_cast<double>(*it);
    const double b = lo + 1 < v.size() ? static_cast<double>(*std::min_element(it + 1, v.end())) : a;
    return a + (b - a) * (pos - static_cast<double>(lo));
  };
  // Ascending, so that each selection searches above the one before.
  std::vector<double> qs = {0.5, 0.9, 0.99};
  for (double q : percents) qs.push_back(q / 100.0);
  std::vector<std::size_t> order(qs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return qs[a] < qs[b]; });
  std::vector<double> value(qs.size());
  for (std::size_t i : order) value[i] = at(qs[i]);
  p.median = value[0];
  p.p90 = value[1];
  p.p99 = value[2];
  for (std::size_t i = 0; i < percents.size(); ++i) p.requested.emplace_back(percents[i], value[3 + i]);
  p.max = static_cast<double>(*std::max_element(v.begin(), v.end()));
  return p;
}

}  // namespace

Percentiles percentiles(std::vector<double> v, const std::vector<double>& percents) {
  return percentiles_of(v, percents);
}
Percentiles percentiles(std::vector<float> v, const std::vector<double>& percents) {
  return percentiles_of(v, percents);
}

namespace serving_detail {

void summarise(const ServingConfig& c, std::vector<float> itl, ServingResult& r) {
  std::sort(r.requests.begin(), r.requests.end(),
            [](const RequestRecord& x, const RequestRecord& y) { return x.id < y.id; });

  // Metrics (vLLM benchmark_serving): over completed requests; the duration runs from the first arrival
  // to the last completion.
  std::vector<double> ttft, tpot, e2el;
  double first = std::numeric_limits<double>::infinity(), last = 0, out_tokens = 0, all_tokens = 0;
  for (const RequestRecord& q : r.requests) {
    ttft.push_back(q.ttft());
    if (q.output_tokens > 1) tpot.push_back(q.tpot());
    e2el.push_back(q.e2el());
    first = std::min(first, q.arrival);
    last = std::max(last, q.finish);
    out_tokens += static_cast<double>(q.output_tokens);
    all_tokens += static_cast<double>(q.output_tokens + q.prompt_tokens);
    const bool good = (!c.slo.ttft_s || q.ttft() <= *c.slo.ttft_s) && (!c.slo.tpot_s || q.tpot() <= *c.slo.tpot_s) &&
                      (!c.slo.e2el_s || q.e2el() <= *c.slo.e2el_s);
    r.good_requests += good ? 1 : 0;
  }
  r.duration = r.requests.empty() ? 0.0 : last - first;
  r.slo_given = c.slo.given();
  r.ttft = percentiles(ttft, c.percentiles);
  r.tpot = percentiles(tpot, c.percentiles);
  r.itl = percentiles(std::move(itl), c.percentiles);
  r.e2el = percentiles(e2el, c.percentiles);
  if (r.duration > 0) {
    const auto n = static_cast<double>(r.requests.size());
    r.request_throughput = n / r.duration;
    r.output_throughput = out_tokens / r.duration;
    r.total_throughput = all_tokens / r.duration;
    r.goodput = static_cast<double>(r.good_requests) / r.duration;
  }
  double decode_sum = 0, decode_steps = 0;
  for (const StepRecord& s : r.steps) {
    if (s.decode > 0) {
      decode_sum += s.decode;
      decode_steps += 1;
    }
    r.max_kv_used = std::max(r.max_kv_used, s.kv_used);
    r.max_waiting = std::max(r.max_waiting, s.waiting);
  }
  r.mean_decode_batch = decode_steps > 0 ? decode_sum / decode_steps : 0.0;
  if (r.layer_split.steps > 0) {
    const double per = static_cast<double>(r.layer_split.steps) * static_cast<double>(c.arch->layers);
    r.layer_split.io /= per;
    r.layer_split.gpu /= per;
    r.layer_split.cpu /= per;
  }
}

}  // namespace serving_detail

}  // namespace moesim::sim
