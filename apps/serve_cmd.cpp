// `moesim serve`: the serving simulator (scenario/serve.hpp, sim/serving.hpp).

#include <boost/program_options.hpp>
#include <iostream>

#include "commands.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/sim/serving.hpp"

namespace po = boost::program_options;

namespace moesim::apps {
namespace {

std::string serve_help() {
  std::string s = "\nschedulers (--scheduler, scenario scheduler.kind):\n";
  for (const auto& x : sim::scheduler_kinds()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nscheduler capacity policies (--capacity, scenario scheduler.capacity; default max-utilization):\n";
  for (const auto& x : sim::capacity_policies()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nexpert execution (--experts):\n";
  for (const auto& x : sim::expert_executions()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\narrival processes (--arrival, scenario workload.arrival):\n";
  for (const auto& x : sim::arrival_kinds()) s += "  " + x.name + ": " + x.description + "\n";
  std::string arrivals;
  for (const auto& x : sim::arrival_kinds()) arrivals += (arrivals.empty() ? "" : "|") + x.name;
  s += "\nworkload (scenario \"workload\"): arrival " + arrivals +
       "; rate \"2/s\"; requests; "
       "burstiness (gamma: the gaps' shape, vLLM's --burstiness; 1 is Poisson, below 1 burstier); max_concurrency "
       "(any arrival but closed-loop: at most N requests in flight, a request waiting for a slot is sent when one "
       "frees and its TTFT counts from then, as vLLM's --max-concurrency); users, user_interval \"1s\", think_time "
       "\"0s\" (closed loop); prompt and output: a number of tokens or {\"dist\": \"uniform\"|\"normal\"|"
       "\"lognormal\", ...}; trace: a request-trace file, with trace_format (default auto) and time_scale (every "
       "arrival time multiplied by it: 0.5 replays twice as fast).\n";
  s += "\nrequest-trace formats (--request-trace-format, scenario workload.trace_format; headers matched by name, "
       "ignoring case and surrounding spaces):\n";
  for (const auto& x : sim::request_trace_formats()) s += "  " + x.name + ": " + x.description + "\n";
  s += "\nA scenario's \"sweep\" maps dotted keys to lists of values, e.g. {\"workload.rate\": [\"1/s\", \"2/s\"]}: "
       "every combination runs and one table row prints per point.\n"
       "\nMetrics are vLLM benchmark_serving's: TTFT (time to first token), TPOT (mean time per output token after "
       "the first), ITL (every gap between tokens), E2EL (end-to-end latency), goodput (requests/s meeting the SLO, "
       "only with an SLO: scenario \"slo\": {\"ttft\": \"1s\", \"tpot\": \"50ms\", \"e2el\": \"20s\"} or "
       "--goodput); --json names them as vLLM's --save-result does (mean_ttft_ms, p99_itl_ms, ..., in ms). "
       "Examples: examples/serve-*.json; their published figures side by side: examples/README.md.\n";
  return s;
}

}  // namespace

int cmd_serve(const Args& args, std::ostream& out) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("scenario", po::value<std::string>(),
                                                 "serving scenario JSON file (flags given here override its keys)");
  // Every scenario key's flag, declared once with the key (scenario/src/serve_keys.cpp).
  scenario::serve_params().add_flags(desc);
  // clang-format off
  desc.add_options()
    ("find-max-rate", "the capacity question: the highest arrival rate at which --slo-attainment of the requests "
     "meet the SLO (needs an SLO and a poisson, gamma or uniform arrival; starts from the workload's rate; with "
     "a fitted --runtime it searches twice more, the engine as much slower and faster as the runtime's held-out "
     "errors, for the answer's range)")
    ("slo-attainment", po::value<double>()->default_value(0.9, "0.9"),
     "with --find-max-rate: the share of requests that must meet the SLO (DistServe's 90% by default)")
    ("json", "print results as JSON ({name, value, unit} per metric, with the resolved scenario)")
    ("requests-out", po::value<std::string>(), "write one CSV row per request")
    ("steps-out", po::value<std::string>(), "write one CSV row per engine step (queue depth, KV usage over time)")
    ("sweep-out", po::value<std::string>(), "write the sweep's table as CSV")
    ("chrome-trace", po::value<std::string>(), "write a Chrome/Perfetto trace (engine steps, queue and KV counters, a track per request)")
    ("chrome-steps", po::value<std::int64_t>(), "engine steps the Chrome trace covers, from the start (default 5000; requests: the first 200 that arrive within them); the trace's otherData.covers says what it holds")
    ("quiet,q", "no progress on stderr")
    ("timing", "also print the simulation's wall time (left out by default so that the same inputs give "
               "byte-identical output)");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(
          args, desc, vm, out,
          "usage: moesim serve [--scenario FILE] [options]\n\n"
          "Simulates an inference server under load, step by step as vLLM's engine runs: requests arrive "
          "(Poisson, gamma, uniform, closed-loop users or a trace), a scheduler batches them (static, continuous, "
          "chunked prefill) within the KV cache left beside the weights, and each step costs what the "
          "parallel plan's slowest device spends on it (TP all-reduces, PP stages, EP/hybrid MoE with "
          "the experts the batch's tokens chose, from a routing trace). Prints TTFT, TPOT, ITL and E2EL "
          "percentiles, throughput and goodput. With a fitted --runtime every figure has a range: the same "
          "requests run again with the engine's steps and host times as much shorter and longer as the "
          "runtime's held-out errors (its interval, as `moesim hw --json` shows it), three runs in all.",
          serve_help() +
              scenario::serve_params().help("scenario keys (a serve scenario's JSON; every key is written back, "
                                            "resolved, in --json's \"scenario\")"))) {
    return 0;
  }
  scenario::ServeScenario s;
  if (vm.count("scenario")) s = scenario::load_serve_scenario(vm["scenario"].as<std::string>());
  // Every flag sets one scenario key: flags and scenario files say the same things.
  scenario::serve_params().flags_to_json(vm, s.doc);
  if (!vm.count("scenario")) {
    // Flags alone: a Poisson load of 200 requests of 512 in / 128 out at 4/s, each part replaced by a flag.
    auto& w = s.doc["workload"];
    std::vector<std::string> filled;
    auto fill = [&](const char* key, const nlohmann::json& v, const char* flag) {
      if (w.contains(key)) return;
      w[key] = v;
      filled.push_back(std::string(key) + " " + (v.is_string() ? v.get<std::string>() : v.dump()) + " (" + flag + ")");
    };
    fill("arrival", "poisson", "--arrival");
    const std::string arrival = w["arrival"].is_string() ? w["arrival"].get<std::string>() : "";
    if (arrival == "poisson" || arrival == "gamma" || arrival == "uniform") fill("rate", "4/s", "--rate");
    if (arrival != "trace") {
      fill("requests", 200, "--requests");
      fill("prompt", 512, "--prompt");
      fill("output", 128, "--output");
    }
    if (!filled.empty()) s.defaults.push_back("workload not given in full, defaults used: " + text::join(filled, ", "));
  }

  const bool quiet = vm.count("quiet") > 0;
  std::size_t chrome_steps = scenario::kServeTraceSteps;
  if (vm.count("chrome-steps")) {
    const std::int64_t n = vm["chrome-steps"].as<std::int64_t>();
    if (n < 1)
      throw UserError("--chrome-steps " + std::to_string(n) +
                      ": must be at least 1 (the engine steps the trace covers)");
    if (!vm.count("chrome-trace")) throw UserError("--chrome-steps needs --chrome-trace FILE (the trace it bounds)");
    chrome_steps = static_cast<std::size_t>(n);
  }
  if (vm.count("find-max-rate")) {
    for (const char* f : {"requests-out", "steps-out", "sweep-out", "chrome-trace"})
      if (vm.count(f))
        throw UserError(std::string("--") + f + " and --find-max-rate: run the rate it finds without it");
    calibrate::Progress bar(quiet ? nullptr : &std::cerr, 1.0);
    const scenario::MaxRate m =
        scenario::find_max_rate(s, vm["slo-attainment"].as<double>(), [&](double rate, std::size_t i) {
          // A search of unknown length: each probe on its own, without a percentage.
          bar.fraction("serve --find-max-rate", -1.0,
                       "probe " + std::to_string(i + 1) + " at " + text::printf("%.3g", rate) + " requests/s");
        });
    bar.finish();
    if (vm.count("json"))
      out << scenario::max_rate_to_json(m).dump(2) << "\n";
    else
      scenario::print_max_rate_text(m, out);
    return 0;
  }
  const auto points = scenario::expand_sweep(s);
  // Output files are opened before the run, so a bad path fails at once and nothing half-written remains.
  // All of them are committed together at the end (moesim/model/output_file.hpp).
  OutputSet outputs;
  OutputFile *requests_out = nullptr, *steps_out = nullptr, *sweep_out = nullptr, *chrome_out = nullptr;
  if (vm.count("chrome-trace")) chrome_out = &outputs.add(vm["chrome-trace"].as<std::string>(), "--chrome-trace");
  if (vm.count("requests-out")) requests_out = &outputs.add(vm["requests-out"].as<std::string>(), "--requests-out");
  if (vm.count("steps-out")) steps_out = &outputs.add(vm["steps-out"].as<std::string>(), "--steps-out");
  if (vm.count("sweep-out")) sweep_out = &outputs.add(vm["sweep-out"].as<std::string>(), "--sweep-out");
  std::vector<scenario::ServeRun> runs;
  calibrate::Progress bar(quiet ? nullptr : &std::cerr, 1.0);
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::function<void(double)> progress;
    const std::string stage = "serve: point " + std::to_string(i + 1) + "/" + std::to_string(points.size());
    if (!quiet) progress = [&bar, stage](double f) { bar.fraction(stage, f, "requests done"); };
    runs.push_back(scenario::run_serve(points[i].scenario, progress, /*range=*/true));
  }
  bar.finish();
  if (points.size() == 1 && points.front().values.empty()) {
    if (vm.count("json")) {
      out << scenario::serve_to_json(runs.front(), vm.count("timing") > 0).dump(2) << "\n";
    } else {
      scenario::print_serve_text(runs.front(), out, vm.count("timing") > 0);
    }
    if (requests_out) scenario::write_requests_csv(runs.front(), requests_out->stream());
    if (steps_out) scenario::write_steps_csv(runs.front(), steps_out->stream());
    if (chrome_out) {
      const std::string covers = scenario::write_serve_chrome_trace(runs.front(), chrome_out->stream(), chrome_steps);
      if (!quiet && !covers.starts_with("all ")) std::cerr << "moesim serve: the Chrome trace holds " << covers << "\n";
    }
  } else {
    if (vm.count("json")) {
      nlohmann::json all = nlohmann::json::array();
      for (std::size_t i = 0; i < runs.size(); ++i) {
        nlohmann::json p = scenario::serve_to_json(runs[i], vm.count("timing") > 0);
        nlohmann::json v = nlohmann::json::object();
        for (const auto& [k, x] : points[i].values) v[k] = x;
        p["sweep_values"] = v;
        all.push_back(p);
      }
      out << all.dump(2) << "\n";
    } else {
      if (s.doc.contains("description")) out << s.doc["description"].get<std::string>() << "\n\n";
      scenario::print_sweep_table(points, runs, out);
    }
    if (requests_out || steps_out || chrome_out)
      throw UserError("--requests-out, --steps-out and --chrome-trace need a scenario without a sweep");
  }
  if (sweep_out) scenario::write_sweep_csv(points, runs, sweep_out->stream());
  outputs.commit();
  return 0;
}

}  // namespace moesim::apps
