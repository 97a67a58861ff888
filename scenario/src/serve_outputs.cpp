// A serving run's outputs: the text report, the JSON document (vLLM's metric names), the per-request and
// per-step CSVs and the Chrome trace.
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "moesim/model/text.hpp"
#include "moesim/scenario/chrome_trace.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/table.hpp"
#include "serve_detail.hpp"

namespace moesim::scenario {

namespace serve_detail {

std::string ms(double s) { return fixed(s * 1e3, 1); }

}  // namespace serve_detail

namespace {

/// A percentile as vLLM names it: 99 -> "99", 99.9 -> "99.9" (benchmark_serving: p{int(p) if int(p) == p
/// else p}).
std::string percent_label(double p) { return text::printf("%g", p); }

/// A figure's interval from the run's range (ServeRange): its values in the fast and the slow run, lower
/// first; none without a range.
using Figure = std::function<double(const sim::ServingResult&)>;
std::optional<std::pair<double, double>> interval_of(const ServeRun& r, const Figure& figure) {
  if (!r.range) return std::nullopt;
  return r.range->interval(figure);
}

/// " (range 12.1-15.3)" of a figure printed with `decimals`, or nothing without a range.
std::string range_text(const ServeRun& r, const Figure& figure, int decimals, double scale = 1) {
  const auto i = interval_of(r, figure);
  return i ? " (range " + fixed(i->first * scale, decimals) + "-" + fixed(i->second * scale, decimals) + ")"
           : std::string();
}

double per_user(const sim::ServingResult& x) { return x.tpot.mean > 0 ? 1.0 / x.tpot.mean : 0.0; }

}  // namespace

void print_serve_text(const ServeRun& r, std::ostream& out, bool timing) {
  const auto& res = r.result;
  const auto& p = res.plan;
  out << "model      " << r.model_id << " at " << r.precision << " on " << p.nodes << " × " << r.hw_id;
  if (r.scenario.contains("runtime")) out << " with runtime " << r.scenario["runtime"].get<std::string>();
  out << "\n";
  out << "plan       tp " << p.tp << " × pp " << p.pp;
  if (p.pp > 1) {
    // The layers of each stage (vLLM's split, sim::stage_layer_starts), e.g. 61 layers over 2: 31 + 30.
    const auto& starts = res.memory.stage_starts;
    std::vector<std::string> counts;
    for (std::size_t s = 0; s + 1 < starts.size(); ++s) counts.push_back(std::to_string(starts[s + 1] - starts[s]));
    out << " (layers " << text::join(counts, " + ") << ")";
  }
  if (r.moe) {
    out << "; MoE: moe_tp " << p.moe_tp << " × moe_ep " << p.moe_ep
        << (p.attention_dp ? ", attention data-parallel" : "")
        << (p.attention_replicated ? ", attention replicated (expert outputs exchanged)" : "");
  } else if (p.attention_dp && p.tp > 1) {
    // A dense model has no experts to split: attention data parallelism is then plain data parallelism.
    out << "; attention data-parallel: a dense model's every weight on every device";
  }
  out << "\n";
  out << "memory     " << units::format(res.memory.weights) << " of weights per device"
      << (p.pp > 1 ? " (stage " + std::to_string(res.memory.busiest_stage) + ", the fullest)" : std::string()) << ", "
      << units::format(res.memory.activations) << " of activations, KV cache " << res.memory.kv_tokens << " tokens ("
      << res.memory.kv_blocks << " blocks)\n";
  out << "requests   " << res.requests.size() << " completed in " << fixed(res.duration, 2) << " s simulated ("
      << (timing ? fixed(r.wall_seconds, 3) + " s wall, " : std::string()) << res.events << " events)\n\n";
  std::vector<std::string> head = {"metric", "mean ms", "median ms", "std ms"};
  for (const auto& [pct, value] : res.ttft.requested) head.push_back("p" + percent_label(pct) + " ms");
  if (r.range) head.push_back("median range ms");
  Table t(head);
  using Latency = sim::Percentiles sim::ServingResult::*;
  auto row = [&](const char* name, Latency latency) {
    const sim::Percentiles& q = res.*latency;
    std::vector<std::string> cells = {name, serve_detail::ms(q.mean), serve_detail::ms(q.median),
                                      serve_detail::ms(q.std)};
    for (const auto& [pct, value] : q.requested) cells.push_back(serve_detail::ms(value));
    if (const auto i = interval_of(r, [&](const sim::ServingResult& x) { return (x.*latency).median; }))
      cells.push_back(serve_detail::ms(i->first) + "-" + serve_detail::ms(i->second));
    t.add_row(cells);
  };
  row("TTFT", &sim::ServingResult::ttft);
  row("TPOT", &sim::ServingResult::tpot);
  row("ITL", &sim::ServingResult::itl);
  row("E2EL", &sim::ServingResult::e2el);
  t.print_text(out);
  out << "\nthroughput  " << fixed(res.request_throughput, 3) << " requests/s, " << fixed(res.output_throughput, 1)
      << " output tokens/s"
      << range_text(
             r, [](const sim::ServingResult& x) { return x.output_throughput; }, 1)
      << ", " << fixed(res.total_throughput, 1) << " total tokens/s\n";
  if (res.slo_given)
    out << "goodput     " << fixed(res.goodput, 3) << " requests/s"
        << range_text(
               r, [](const sim::ServingResult& x) { return x.goodput; }, 3)
        << " (" << res.good_requests << " of " << res.requests.size() << " met the SLO)\n";
  if (res.tpot.mean > 0)
    out << "per user    " << fixed(per_user(res), 1) << " tokens/s" << range_text(r, per_user, 1)
        << ", 1 / mean TPOT\n";
  if (r.range) {
    const ServeRange& g = *r.range;
    out << "range       the same requests run again with every engine step and host time "
        << text::printf("%.2f", 1 + g.runtime.error_low) << "x and " << text::printf("%.2f", 1 + g.runtime.error_high)
        << "x as long (what the arrival rate sets, not the engine, hardly moves): " << g.runtime.interval_basis(g.moe)
        << "\n";
  }
  if (r.capital && r.running && r.running->usd_per_million_tokens) {
    const auto& a = r.costs;
    out << "cost        " << text::printf("%.0f", r.capital->total().base()) << " USD of hardware; "
        << text::printf("%.3f", *r.running->usd_per_million_tokens) << " USD per million output tokens at this "
        << "throughput (capital over " << text::printf("%g", a.years) << " years at "
        << text::printf("%g", a.utilisation * 100) << "% use"
        << (r.running->energy_usd_per_million_tokens
                ? ", energy " + text::printf("%.3f", *r.running->energy_usd_per_million_tokens)
                : std::string(", no energy price"))
        << ")";
    if (r.running->cloud_usd_per_million_tokens)
      out << "; rented " << text::printf("%.3f", *r.running->cloud_usd_per_million_tokens) << " USD per million";
    out << "\n";
  } else if (!r.price_missing.empty()) {
    out << "cost        not computed: " << r.price_missing << "\n";
  }
  out << "batching    mean decode batch " << fixed(res.mean_decode_batch, 1) << ", max queue " << res.max_waiting
      << ", peak KV use " << fixed(100.0 * res.max_kv_used, 1) << "%, " << res.preemptions << " preemptions\n";
  if (res.host_time > 0 && res.duration > 0)
    out << "host        " << res.steps.size() << " engine steps spent " << fixed(res.host_time, 3)
        << " s on host work (step_overhead and sequence_overhead, below), "
        << fixed(100.0 * res.host_time / res.duration, 1) << "% of the run: the GPUs wait meanwhile\n";
  if (res.cache_hit_rate >= 0) {
    out << "streaming   page-cache hit rate " << fixed(100.0 * res.cache_hit_rate, 1) << "%; per layer (decode): I/O "
        << serve_detail::ms(res.layer_split.io) << " ms, GPU " << serve_detail::ms(res.layer_split.gpu) << " ms, CPU "
        << fixed(res.layer_split.cpu * 1e3, 2) << " ms\n";
  }
  for (const auto& a : res.assumptions) out << "assumption  " << a << "\n";
}

nlohmann::json serve_to_json(const ServeRun& r, bool timing) {
  const auto& res = r.result;
  nlohmann::json m = nlohmann::json::array();
  // vLLM benchmark_serving's names and units (--save-result): mean_ttft_ms, median_ttft_ms, std_ttft_ms and
  // p<P>_ttft_ms for each percentile asked for, the same for tpot, itl and e2el.
  // A figure with its interval (ServeRange): "low" and "high" beside its value, in its unit.
  auto ranged = [&](nlohmann::json item, const Figure& figure, double scale = 1) {
    if (const auto i = interval_of(r, figure)) {
      item["low"] = i->first * scale;
      item["high"] = i->second * scale;
    }
    m.push_back(std::move(item));
  };
  using Latency = sim::Percentiles sim::ServingResult::*;
  auto pct = [&](const std::string& name, Latency latency) {
    const sim::Percentiles& q = res.*latency;
    ranged(
        metric("mean_" + name + "_ms", q.mean * 1e3, "ms"),
        [&](const sim::ServingResult& x) { return (x.*latency).mean; }, 1e3);
    ranged(
        metric("median_" + name + "_ms", q.median * 1e3, "ms"),
        [&](const sim::ServingResult& x) { return (x.*latency).median; }, 1e3);
    m.push_back(metric("std_" + name + "_ms", q.std * 1e3, "ms"));
    for (std::size_t k = 0; k < q.requested.size(); ++k)
      ranged(
          metric("p" + percent_label(q.requested[k].first) + "_" + name + "_ms", q.requested[k].second * 1e3, "ms"),
          [&](const sim::ServingResult& x) {
            const auto& other = (x.*latency).requested;
            return k < other.size() ? other[k].second : 0.0;
          },
          1e3);
  };
  pct("ttft", &sim::ServingResult::ttft);
  pct("tpot", &sim::ServingResult::tpot);
  pct("itl", &sim::ServingResult::itl);
  pct("e2el", &sim::ServingResult::e2el);
  double input_tokens = 0, output_tokens = 0;
  for (const auto& q : res.requests) {
    input_tokens += static_cast<double>(q.prompt_tokens);
    output_tokens += static_cast<double>(q.output_tokens);
  }
  m.push_back(metric("completed", static_cast<double>(res.requests.size()), "requests"));
  m.push_back(metric("total_input_tokens", input_tokens, "tokens"));
  m.push_back(metric("total_output_tokens", output_tokens, "tokens"));
  m.push_back(metric("duration", res.duration, "s"));
  ranged(metric("request_throughput", res.request_throughput, "requests/s"),
         [](const sim::ServingResult& x) { return x.request_throughput; });
  ranged(metric("output_throughput", res.output_throughput, "tokens/s"),
         [](const sim::ServingResult& x) { return x.output_throughput; });
  ranged(metric("total_token_throughput", res.total_throughput, "tokens/s"),
         [](const sim::ServingResult& x) { return x.total_throughput; });
  if (res.slo_given)
    ranged(metric("request_goodput", res.goodput, "requests/s"), [](const sim::ServingResult& x) { return x.goodput; });
  if (r.capital) m.push_back(metric("capital_cost", r.capital->total().base(), "USD"));
  if (r.running && r.running->usd_per_million_tokens)
    m.push_back(metric("usd_per_million_output_tokens", *r.running->usd_per_million_tokens, "USD"));
  if (r.running && r.running->cloud_usd_per_million_tokens)
    m.push_back(metric("cloud_usd_per_million_output_tokens", *r.running->cloud_usd_per_million_tokens, "USD"));
  ranged(metric("per_user_tokens_per_second", per_user(res), "tokens/s"), per_user);
  m.push_back(metric("mean_decode_batch", res.mean_decode_batch, "sequences"));
  m.push_back(metric("max_queue_depth", res.max_waiting, "requests"));
  m.push_back(metric("peak_kv_usage", res.max_kv_used, "fraction"));
  m.push_back(metric("preemptions", static_cast<double>(res.preemptions), "requests"));
  m.push_back(metric("engine_steps", static_cast<double>(res.steps.size()), "steps"));
  m.push_back(metric("host_time", res.host_time, "s"));
  m.push_back(metric("weights_per_device", res.memory.weights.base(), "B"));
  m.push_back(metric("kv_capacity", static_cast<double>(res.memory.kv_tokens), "tokens"));
  if (res.cache_hit_rate >= 0) {
    m.push_back(metric("page_cache_hit_rate", res.cache_hit_rate, "fraction"));
    m.push_back(metric("layer_io", res.layer_split.io, "s"));
    m.push_back(metric("layer_gpu", res.layer_split.gpu, "s"));
    m.push_back(metric("layer_cpu", res.layer_split.cpu, "s"));
  }
  if (timing) m.push_back(metric("wall_time", r.wall_seconds, "s"));
  nlohmann::json doc = {{"metrics", m}, {"scenario", r.scenario}, {"assumptions", res.assumptions}};
  if (r.range) {
    const ServeRange& g = *r.range;
    doc["range"] = {{"runtime", g.runtime.id},
                    {"basis", g.runtime.interval_basis(g.moe)},
                    {"engine_time_scale_low", 1 + g.runtime.error_low},
                    {"engine_time_scale_high", 1 + g.runtime.error_high}};
  }
  return doc;
}

void write_requests_csv(const ServeRun& r, std::ostream& o) {
  o << "id,prompt_tokens,output_tokens,arrival_s,first_token_s,finish_s,ttft_s,tpot_s,e2el_s,max_itl_s,preemptions\n";
  for (const auto& q : r.result.requests) {
    o << q.id << ',' << q.prompt_tokens << ',' << q.output_tokens << ','
      << text::printf("%.9f,%.9f,%.9f,%.9f,%.9f,%.9f,%.9f", q.arrival, q.first_token, q.finish, q.ttft(), q.tpot(),
                      q.e2el(), q.max_itl)
      << ',' << q.preemptions << '\n';
  }
}

void write_steps_csv(const ServeRun& r, std::ostream& o) {
  o << "start_s,duration_s,decode_sequences,prefill_tokens,waiting_requests,running_requests,kv_used_fraction\n";
  for (const auto& s : r.result.steps) {
    o << text::printf("%.9f,%.9f,", s.start, s.duration) << s.decode << ',' << s.prefill_tokens << ',' << s.waiting
      << ',' << s.running << ',' << text::printf("%.6f", s.kv_used) << '\n';
  }
}

std::string write_serve_chrome_trace(const ServeRun& r, std::ostream& o, std::size_t max_steps,
                                     std::size_t max_requests) {
  // Process 0 is the server: one track of engine steps (stage 0 of the plan), counters for the queue and the
  // KV cache; process 1 holds one track per request (queued, prefill until the first token, decode until
  // the last).
  ChromeTrace trace;
  const auto us = [](double s) { return s * 1e6; };
  const auto& plan = r.result.plan;
  const auto& steps = r.result.steps;
  const auto& requests = r.result.requests;
  trace.process(0, r.model_id + " on " + std::to_string(plan.nodes) + " x " + r.hw_id + " (tp " +
                       std::to_string(plan.tp) + ", pp " + std::to_string(plan.pp) + ")");
  trace.thread(0, 0, "engine steps");
  trace.process(1, "requests");
  const std::size_t n_steps = std::min(max_steps, steps.size());
  for (std::size_t i = 0; i < n_steps; ++i) {
    const auto& st = steps[i];
    trace.complete(st.prefill_tokens > 0 ? "step (prefill + decode)" : "step (decode)", "step", 0, 0, us(st.start),
                   us(st.duration), {{"decode_sequences", st.decode}, {"prefill_tokens", st.prefill_tokens}});
    trace.counter("queue", 0, us(st.start), {{"waiting", st.waiting}, {"running", st.running}});
    trace.counter("KV cache used %", 0, us(st.start), {{"used", st.kv_used * 100}});
  }
  // With the steps cut, requests that arrive after the last traced step would have no steps beside them.
  const bool cut = n_steps < steps.size();
  const double until = cut && n_steps > 0 ? steps[n_steps - 1].start + steps[n_steps - 1].duration
                                          : std::numeric_limits<double>::infinity();
  std::size_t n_requests = 0;
  for (const auto& q : requests) {
    if (n_requests >= max_requests) break;
    if (q.arrival > until) continue;
    ++n_requests;
    const auto tid = q.id + 1;
    trace.thread(1, tid, "request " + std::to_string(q.id));
    const nlohmann::json args = {{"prompt_tokens", q.prompt_tokens}, {"output_tokens", q.output_tokens}};
    trace.complete("until first token", "request", 1, tid, us(q.arrival), us(q.first_token - q.arrival), args);
    trace.complete("decode", "request", 1, tid, us(q.first_token), us(q.finish - q.first_token), args);
  }
  std::string covers =
      (cut ? "the first " + std::to_string(n_steps) + " of " : "all ") + std::to_string(steps.size()) + " engine steps";
  if (cut && !steps.empty()) {
    covers += " (to " + text::printf("%.1f", until) + " s of " +
              text::printf("%.1f", steps.back().start + steps.back().duration) + " s; --chrome-steps)";
  }
  covers += " and " + (n_requests == requests.size() ? "all " : std::to_string(n_requests) + " of ") +
            std::to_string(requests.size()) + " requests";
  trace.note("covers", covers);
  trace.write(o);
  return covers;
}

}  // namespace moesim::scenario
