// What a reference run measured (RunResult): its step times, the routing trace and the measured split the
// simulator needs, and the timing CSV, JSON and text summary.

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "moesim/model/error.hpp"
#include "moesim/reference/run.hpp"

namespace moesim::reference {

// ---- RunResult ----

double RunResult::prefill_seconds() const { return steps.empty() ? 0 : steps.front().seconds; }
std::int64_t RunResult::decode_steps() const { return steps.empty() ? 0 : static_cast<std::int64_t>(steps.size()) - 1; }
double RunResult::decode_seconds() const {
  double s = 0;
  for (std::size_t i = 1; i < steps.size(); ++i) s += steps[i].seconds;
  return s;
}

sim::RoutingTrace decode_trace(const RunResult& r) {
  sim::RoutingTrace t;
  t.header = r.trace.header;
  const auto prompt = static_cast<std::int64_t>(r.prompt.size());
  const auto per = static_cast<std::size_t>(t.header.layers * t.header.top_k);
  for (std::int64_t i = prompt; i < r.trace.tokens(); ++i) {
    const auto at = static_cast<std::size_t>(i) * per;
    t.experts.insert(t.experts.end(), r.trace.experts.begin() + static_cast<std::ptrdiff_t>(at),
                     r.trace.experts.begin() + static_cast<std::ptrdiff_t>(at + per));
    t.weights.insert(t.weights.end(), r.trace.weights.begin() + static_cast<std::ptrdiff_t>(at),
                     r.trace.weights.begin() + static_cast<std::ptrdiff_t>(at + per));
    t.request.push_back(0);
    t.position.push_back(r.trace.position[static_cast<std::size_t>(i)]);
  }
  return t;
}

MeasuredSplit decode_split(const RunResult& r) {
  MeasuredSplit s;
  const auto n = r.decode_steps();
  if (n == 0) return s;
  double experts_run = 0;
  for (std::size_t i = 1; i < r.steps.size(); ++i) {
    const auto& st = r.steps[i];
    s.time += st.seconds;
    s.misc += st.embed + st.head;
    for (const auto& l : st.layers) {
      s.misc += l.attention + l.router + l.combine;
      s.moe += l.experts;
      s.comm += l.exchange;
      s.wait += l.wait;
      experts_run += l.routed + l.fillers;
    }
  }
  const auto& a = r.shape.arch;
  const double expert_bytes = 3.0 * static_cast<double>(a.hidden * a.expert_ffn) * sizeof(float);
  if (s.moe > 0) s.expert_bandwidth = experts_run * expert_bytes / s.moe;
  const auto d = static_cast<double>(n);
  s.time /= d;
  s.misc /= d;
  s.moe /= d;
  s.comm /= d;
  s.wait /= d;
  return s;
}

void write_timing_csv(const RunResult& r, std::ostream& out) {
  out << "phase,step,position,tokens,layer,attention_s,router_s,experts_s,exchange_s,wait_s,combine_s,"
         "embed_s,head_s,routed,fillers\n";
  out << std::setprecision(9);
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const auto& st = r.steps[i];
    const char* phase = st.prefill ? "prefill" : "decode";
    for (std::size_t l = 0; l < st.layers.size(); ++l) {
      const auto& t = st.layers[l];
      out << phase << ',' << i << ',' << st.position << ',' << st.tokens << ',' << l << ',' << t.attention << ','
          << t.router << ',' << t.experts << ',' << t.exchange << ',' << t.wait << ',' << t.combine << ",0,0,"
          << t.routed << ',' << t.fillers << '\n';
    }
    out << phase << ',' << i << ',' << st.position << ',' << st.tokens << ",head,0,0,0,0,0,0," << st.embed << ','
        << st.head << ",0,0\n";
  }
}

nlohmann::json logits_json(const RunResult& r) {
  nlohmann::json j;
  j["prompt"] = r.prompt;
  j["tokens"] = r.generated;
  // nlohmann prints floats with the shortest representation that round-trips: exact for f32.
  j["logits"] = r.logits;
  return j;
}

namespace {
nlohmann::json metric(double value, const char* unit) { return {{"value", value}, {"unit", unit}}; }
}  // namespace

nlohmann::json run_summary_json(const RunResult& r) {
  nlohmann::json j;
  j["checkpoint_config"] = r.trace.header.model;
  j["ranks"] = r.ranks;
  j["ranks_on_host"] = r.ranks_on_host;
  j["blas_threads_per_rank"] = r.threads;
  j["placement"] = r.placement.describe();
  j["attention"] = std::string(sim::name_of(r.attention));
  j["balancing"] = std::string(sim::name_of(r.balancing));
  j["prompt_tokens"] = r.prompt.size();
  j["generated"] = r.generated;
  j["load_time"] = metric(r.load_seconds, "s");
  j["prefill_time"] = metric(r.prefill_seconds(), "s");
  j["prefill_tokens_per_second"] =
      metric(r.prefill_seconds() > 0 ? static_cast<double>(r.prompt.size()) / r.prefill_seconds() : 0, "tokens/s");
  j["decode_steps"] = r.decode_steps();
  const auto s = decode_split(r);
  j["decode_time_per_token"] = metric(s.time, "s");
  j["decode_tokens_per_second"] = metric(s.time > 0 ? 1.0 / s.time : 0, "tokens/s");
  j["expert_weight_bandwidth"] = metric(s.expert_bandwidth, "B/s");
  j["decode_split"] = {{"misc", metric(s.misc, "s")},
                       {"moe", metric(s.moe, "s")},
                       {"comm", metric(s.comm, "s")},
                       {"wait", metric(s.wait, "s")}};
  j["weight_bytes_per_rank"] = nlohmann::json::array();
  for (const auto b : r.weight_bytes) j["weight_bytes_per_rank"].push_back(metric(static_cast<double>(b), "B"));
  j["peak_rss_per_rank"] = nlohmann::json::array();
  for (const auto b : r.peak_rss_bytes) j["peak_rss_per_rank"].push_back(metric(b, "B"));
  j["notes"] = r.notes;
  return j;
}

void print_run_summary(const RunResult& r, std::ostream& out) {
  const auto s = decode_split(r);
  const auto ms = [](double v) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(3) << v * 1e3 << " ms";
    return o.str();
  };
  out << "reference run: " << r.ranks << " rank(s) (" << r.ranks_on_host << " on this host), " << r.threads
      << " BLAS thread(s) each, " << sim::name_of(r.attention) << ", balancing " << sim::name_of(r.balancing) << "\n";
  out << "placement: " << r.placement.describe() << "\n";
  out << "weights held per rank (f32):";
  for (const auto b : r.weight_bytes)
    out << " " << std::fixed << std::setprecision(1) << static_cast<double>(b) / 1e6 << " MB";
  out << "\n";
  out << "prompt " << r.prompt.size() << " tokens, prefill " << ms(r.prefill_seconds()) << " (" << std::setprecision(1)
      << (r.prefill_seconds() > 0 ? static_cast<double>(r.prompt.size()) / r.prefill_seconds() : 0) << " tokens/s)\n";
  out << "decode " << r.decode_steps() << " tokens: " << ms(s.time) << " per token (" << std::setprecision(2)
      << (s.time > 0 ? 1.0 / s.time : 0) << " tokens/s)\n";
  out << "  split per token: misc " << ms(s.misc) << ", moe " << ms(s.moe) << ", comm " << ms(s.comm)
      << " (of which waiting " << ms(s.wait) << ")\n";
  out << "  experts: " << std::setprecision(2) << s.expert_bandwidth / 1e9
      << " GB/s of f32 expert weights read (rank 0, decode steps)\n";
  out << "generated:";
  for (const auto t : r.generated) out << " " << t;
  out << "\n";
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

}  // namespace moesim::reference
