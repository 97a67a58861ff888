// Serving scenarios run as a series: a scenario's "sweep" expanded into points and tabulated (text, CSV),
// and the search for the highest arrival rate that meets the SLO (find_max_rate).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/json_out.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/table.hpp"
#include "moesim/sim/workload.hpp"
#include "serve_detail.hpp"

namespace moesim::scenario {

namespace {

/// Sets `value` at a dotted key ("workload.rate") of `doc`, creating objects on the way.
void set_dotted(nlohmann::json& doc, const std::string& key, const nlohmann::json& value, const std::string& where) {
  nlohmann::json* at = &doc;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      throw UserError(where + ": sweep key \"" + key + "\" has an empty part; write e.g. \"workload.rate\"");
    if (dot == std::string::npos) {
      (*at)[part] = value;
      return;
    }
    if (!at->contains(part)) (*at)[part] = nlohmann::json::object();
    at = &(*at)[part];
    if (!at->is_object()) throw UserError(where + ": sweep key \"" + key + "\": \"" + part + "\" is not an object");
    start = dot + 1;
  }
}

std::string label_of(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

/// One search for the highest rate meeting the SLO: from `start`, doubled or halved until bracketed, then
/// bisected to 2%; every probe's engine time × `scale` (run_serve). `best` is the probe at the highest rate
/// that met the target (none: not even the lowest rate tried, whose rate is then `failing`).
struct MaxRateSearch {
  std::vector<RateProbe> probes;
  std::optional<std::size_t> best;
  std::optional<double> failing;
};

MaxRateSearch search_max_rate(const ServeScenario& s, double attainment, double start, double window, double scale,
                              const std::function<void(double, std::size_t)>& progress, std::size_t probes_before) {
  constexpr std::int64_t kMaxProbeRequests = 200000;
  MaxRateSearch m;
  auto probe = [&](double rate) -> const RateProbe& {
    ServeScenario at = s;
    at.doc["workload"]["rate"] = text::printf("%.9g/s", rate);
    const auto count = static_cast<std::int64_t>(std::llround(rate * window));
    if (count > kMaxProbeRequests)
      throw UserError("--find-max-rate: " + text::printf("%.3g", rate) + " requests/s over the workload's " +
                      text::printf("%.3g", window) + " s window is " + std::to_string(count) + " requests, above the " +
                      std::to_string(kMaxProbeRequests) + " a probe may run; give fewer workload requests");
    at.doc["workload"]["requests"] = std::max<std::int64_t>(count, 1);
    if (progress) progress(rate, probes_before + m.probes.size());
    RateProbe p;
    p.rate = rate;
    p.run = run_serve(at, {}, false, scale);
    const auto n = static_cast<double>(p.run.result.requests.size());
    p.attainment = n > 0 ? static_cast<double>(p.run.result.good_requests) / n : 0.0;
    m.probes.push_back(std::move(p));
    return m.probes.back();
  };
  auto meets = [&](const RateProbe& p) { return p.attainment >= attainment; };
  double lo = 0, hi = 0;  // lo meets, hi does not
  double r = start;
  if (meets(probe(r))) {
    lo = r;
    for (int i = 0; i < 24 && hi == 0; ++i) {
      r *= 2;
      if (meets(probe(r)))
        lo = r;
      else
        hi = r;
    }
  } else {
    hi = r;
    for (int i = 0; i < 24 && lo == 0; ++i) {
      r /= 2;
      if (meets(probe(r)))
        lo = r;
      else
        hi = r;
    }
    if (lo == 0) {
      m.failing = hi;
      return m;
    }
  }
  for (int i = 0; i < 16 && hi > 0 && hi / lo > 1.02; ++i) {
    const double mid = std::sqrt(lo * hi);
    if (meets(probe(mid)))
      lo = mid;
    else
      hi = mid;
  }
  for (std::size_t i = 0; i < m.probes.size(); ++i)
    if (m.probes[i].rate == lo) m.best = i;
  if (hi > 0) m.failing = hi;
  return m;
}

}  // namespace

std::vector<SweepPoint> expand_sweep(const ServeScenario& s) {
  std::vector<SweepPoint> points;
  if (!s.doc.contains("sweep")) {
    points.push_back({s, {}});
    return points;
  }
  const json::Node root(s.doc, s.source);
  const json::Node sweep = root.child("sweep");
  if (!sweep.raw().is_object() || sweep.raw().empty()) {
    throw sweep.error(
        "must be an object of dotted keys to lists of values, e.g. {\"workload.rate\": [\"1/s\", \"2/s\"]}");
  }
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes;
  for (const auto& [key, values] : sweep.raw().items()) {
    if (!values.is_array() || values.empty()) throw sweep.error(key, "must be a non-empty list of values");
    axes.emplace_back(key, std::vector<nlohmann::json>(values.begin(), values.end()));
  }
  std::size_t total = 1;
  for (const auto& a : axes) total *= a.second.size();
  if (total > 10000)
    throw sweep.error("has " + std::to_string(total) + " points; keep a serve sweep to 10,000 or fewer");
  for (std::size_t i = 0; i < total; ++i) {
    SweepPoint p{s, {}};
    p.scenario.doc.erase("sweep");
    std::size_t rest = i;
    // The first key varies slowest (row-major), so tables group by it.
    std::vector<std::size_t> idx(axes.size());
    for (std::size_t a = axes.size(); a-- > 0;) {
      idx[a] = rest % axes[a].second.size();
      rest /= axes[a].second.size();
    }
    for (std::size_t a = 0; a < axes.size(); ++a) {
      const auto& v = axes[a].second[idx[a]];
      set_dotted(p.scenario.doc, axes[a].first, v, s.source + ": $.sweep");
      p.values.emplace_back(axes[a].first, v);
    }
    points.push_back(std::move(p));
  }
  return points;
}

MaxRate find_max_rate(const ServeScenario& s, double attainment,
                      const std::function<void(double, std::size_t)>& progress) {
  if (!(attainment > 0 && attainment <= 1))
    throw UserError("--slo-attainment " + text::printf("%g", attainment) + ": give a share in (0, 1], e.g. 0.9");
  if (!s.doc.contains("slo"))
    throw UserError(s.source +
                    ": $.slo: --find-max-rate needs an SLO to meet: give \"slo\" (e.g. {\"ttft\": \"2s\", "
                    "\"tpot\": \"100ms\"}) or --goodput ttft:2000 tpot:100");
  if (s.doc.contains("sweep"))
    throw UserError(s.source + ": $.sweep: --find-max-rate varies the rate itself; drop \"sweep\"");
  const nlohmann::json* w = s.doc.contains("workload") ? &s.doc.at("workload") : nullptr;
  const std::string arrival =
      w && w->contains("arrival") && w->at("arrival").is_string() ? w->at("arrival").get<std::string>() : "";
  if (arrival != "poisson" && arrival != "gamma" && arrival != "uniform")
    throw UserError(s.source +
                    ": $.workload.arrival: --find-max-rate needs requests arriving at a rate (poisson, "
                    "gamma or uniform), not \"" +
                    arrival + "\"");
  // The scenario's own rate starts the search (read as the workload reader reads it).
  const sim::WorkloadSpec parsed = sim::parse_workload(json::Node(*w, s.source, "$.workload"), s.base_dir);
  // Every probe offers load for the same time, the scenario's own arrival window (its requests at its
  // rate): a fixed count of requests at a rate beyond capacity is a burst the queue drains after the last
  // arrival, which a finite test passes at any rate; a fixed window makes an overload build its queue for
  // the whole window, as a server in steady state would (DistServe's traces, like vLLM's benchmark at a
  // rate, are long against the latencies they bound).
  const double window = static_cast<double>(parsed.requests) / parsed.rate;
  MaxRate m;
  m.attainment_target = attainment;
  m.window_s = window;
  MaxRateSearch main = search_max_rate(s, attainment, parsed.rate, window, 1.0, progress, 0);
  if (!main.best)
    throw UserError(s.source + ": even " + text::printf("%.3g", *main.failing) +
                    " requests/s does not meet the SLO for " + text::printf("%g", attainment * 100) +
                    "% of the requests: the SLO is out of reach of this " +
                    "hardware at any load (loosen it, or look at the single-request TTFT and TPOT)");
  m.probes = std::move(main.probes);
  m.best = *main.best;
  m.failing_rate = main.failing;
  // The range: the search again with the engine as much slower and faster as the runtime's held-out errors
  // (ServeRange), from the rate found.
  const std::unique_ptr<PreparedServe> prepared = prepare_serve(s, false);
  if (const auto& rt = prepared->runtime; rt && !rt->interval_source.empty()) {
    m.engine_time_scale_low = 1 + rt->error_low;
    m.engine_time_scale_high = 1 + rt->error_high;
    const double found = m.probes[m.best].rate;
    std::size_t probes = m.probes.size();
    const auto again = [&](double scale) {
      const MaxRateSearch r = search_max_rate(s, attainment, found, window, scale, progress, probes);
      probes += r.probes.size();
      return r.best ? r.probes[*r.best].rate : 0.0;
    };
    const double slow = again(m.engine_time_scale_high), fast = again(m.engine_time_scale_low);
    m.max_rate_range = std::make_pair(std::min(slow, fast), std::max(slow, fast));
    m.range_basis = rt->interval_basis(prepared->arch.is_moe());
  }
  return m;
}

void print_max_rate_text(const MaxRate& m, std::ostream& out) {
  Table t({"rate req/s", "met SLO", "output tok/s", "median TTFT ms", "median TPOT ms"});
  std::vector<std::size_t> order(m.probes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return m.probes[a].rate < m.probes[b].rate; });
  for (std::size_t i : order) {
    const auto& p = m.probes[i];
    t.add_row({text::printf("%.3f", p.rate), text::printf("%.1f%%", p.attainment * 100),
               fixed(p.run.result.output_throughput, 1), serve_detail::ms(p.run.result.ttft.median),
               serve_detail::ms(p.run.result.tpot.median)});
  }
  t.print_text(out);
  const RateProbe& b = m.probes[m.best];
  out << "\neach probe offers load for " << text::printf("%.1f", m.window_s)
      << " s (the workload's requests at its rate); the rate is bracketed, then bisected to 2%\n";
  out << "max rate    " << text::printf("%.3f", b.rate) << " requests/s"
      << (m.max_rate_range ? " (range " + text::printf("%.3f", m.max_rate_range->first) + "-" +
                                 text::printf("%.3f", m.max_rate_range->second) + ")"
                           : std::string())
      << " with " << text::printf("%.1f", b.attainment * 100) << "% of requests meeting the SLO (target "
      << text::printf("%g", m.attainment_target * 100) << "%)";
  if (m.failing_rate) out << "; " << text::printf("%.3f", *m.failing_rate) << " requests/s misses it";
  out << "\nthere       " << fixed(b.run.result.output_throughput, 1) << " output tokens/s";
  if (b.run.running && b.run.running->usd_per_million_tokens)
    out << ", " << text::printf("%.3f", *b.run.running->usd_per_million_tokens) << " USD per million output tokens";
  if (m.max_rate_range)
    out << "\nrange       the search again with every engine step and host time "
        << text::printf("%.2f", m.engine_time_scale_low) << "x and " << text::printf("%.2f", m.engine_time_scale_high)
        << "x as long (0: the SLO out of reach that slow): " << m.range_basis;
  out << "\n\nAt the max rate:\n";
  print_serve_text(b.run, out);
}

nlohmann::json max_rate_to_json(const MaxRate& m) {
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& p : m.probes)
    probes.push_back({{"rate", {{"value", p.rate}, {"unit", "requests/s"}}},
                      {"slo_attainment", {{"value", p.attainment}, {"unit", "fraction"}}},
                      {"output_throughput", {{"value", p.run.result.output_throughput}, {"unit", "tokens/s"}}}});
  nlohmann::json j = {{"slo_attainment_target", m.attainment_target},
                      {"window", {{"value", m.window_s}, {"unit", "s"}}},
                      {"max_rate", {{"value", m.probes[m.best].rate}, {"unit", "requests/s"}}},
                      {"probes", probes},
                      {"at_max_rate", serve_to_json(m.probes[m.best].run)}};
  if (m.failing_rate) j["failing_rate"] = {{"value", *m.failing_rate}, {"unit", "requests/s"}};
  if (m.max_rate_range) {
    j["max_rate"]["low"] = m.max_rate_range->first;
    j["max_rate"]["high"] = m.max_rate_range->second;
    j["range"] = {{"basis", m.range_basis},
                  {"engine_time_scale_low", m.engine_time_scale_low},
                  {"engine_time_scale_high", m.engine_time_scale_high}};
  }
  return j;
}

namespace {

/// Whether any point has a range (ServeRange): then the table and the CSV give output throughput's.
bool any_range(const std::vector<ServeRun>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ServeRun& r) { return r.range.has_value(); });
}

/// Output throughput's interval over a point's range (its fast and slow runs), lower first.
std::pair<double, double> output_range(const ServeRun& r) {
  return r.range->interval([](const sim::ServingResult& x) { return x.output_throughput; });
}

std::vector<std::string> sweep_headers(const std::vector<SweepPoint>& points, bool ranged) {
  std::vector<std::string> h;
  if (!points.empty())
    for (const auto& [k, v] : points.front().values) h.push_back(k);
  h.emplace_back("req/s");
  h.emplace_back("out tok/s");
  if (ranged) h.emplace_back("range out tok/s");
  for (const char* x : {"per-user tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "E2EL p50 s",
                        "goodput req/s", "decode batch seqs"})
    h.emplace_back(x);
  return h;
}

std::vector<std::string> sweep_cells(const SweepPoint& p, const ServeRun& r, bool ranged) {
  std::vector<std::string> c;
  for (const auto& [k, v] : p.values) c.push_back(label_of(v));
  const auto& s = r.result;
  c.push_back(fixed(s.request_throughput, 3));
  c.push_back(fixed(s.output_throughput, 1));
  if (ranged) {
    c.push_back(r.range ? fixed(output_range(r).first, 1) + "-" + fixed(output_range(r).second, 1) : std::string("-"));
  }
  c.push_back(fixed(s.tpot.mean > 0 ? 1.0 / s.tpot.mean : 0.0, 1));
  c.push_back(serve_detail::ms(s.ttft.median));
  c.push_back(serve_detail::ms(s.ttft.p99));
  c.push_back(serve_detail::ms(s.itl.median));
  c.push_back(serve_detail::ms(s.itl.p99));
  c.push_back(fixed(s.e2el.median, 2));
  c.push_back(fixed(s.goodput, 3));
  c.push_back(fixed(s.mean_decode_batch, 1));
  return c;
}

}  // namespace

void print_sweep_table(const std::vector<SweepPoint>& points, const std::vector<ServeRun>& runs, std::ostream& out,
                       bool markdown) {
  const bool ranged = any_range(runs);
  Table t(sweep_headers(points, ranged));
  for (std::size_t i = 0; i < runs.size(); ++i) t.add_row(sweep_cells(points[i], runs[i], ranged));
  if (markdown) {
    t.print_markdown(out);
  } else {
    t.print_text(out);
  }
}

void write_sweep_csv(const std::vector<SweepPoint>& points, const std::vector<ServeRun>& runs, std::ostream& out) {
  auto csv = [](std::string s) {
    for (char& ch : s)
      if (ch == ',') ch = ';';
    return s;
  };
  std::vector<std::string> h;
  if (!points.empty())
    for (const auto& [k, v] : points.front().values) h.push_back(k);
  for (const char* x :
       {"request_throughput_per_s", "output_tokens_per_s", "per_user_tokens_per_s", "ttft_median_s", "ttft_p99_s",
        "itl_median_s", "itl_p99_s", "e2el_median_s", "goodput_per_s", "mean_decode_batch"})
    h.emplace_back(x);
  // The interval's ends last, so the columns before them stay where they were; empty for a point without.
  const bool ranged = any_range(runs);
  if (ranged) {
    h.emplace_back("output_tokens_per_s_low");
    h.emplace_back("output_tokens_per_s_high");
  }
  out << text::join(h, ",") << "\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::string> c;
    for (const auto& [k, v] : points[i].values) c.push_back(csv(label_of(v)));
    const auto& s = runs[i].result;
    for (double x : {s.request_throughput, s.output_throughput, s.tpot.mean > 0 ? 1.0 / s.tpot.mean : 0.0,
                     s.ttft.median, s.ttft.p99, s.itl.median, s.itl.p99, s.e2el.median, s.goodput, s.mean_decode_batch})
      c.push_back(text::printf("%.9g", x));
    if (ranged) {
      const bool has = runs[i].range.has_value();
      c.push_back(has ? text::printf("%.9g", output_range(runs[i]).first) : std::string());
      c.push_back(has ? text::printf("%.9g", output_range(runs[i]).second) : std::string());
    }
    out << text::join(c, ",") << "\n";
  }
}

}  // namespace moesim::scenario
