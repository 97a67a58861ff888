// `moesim serve`: the serving simulator (reports/serve.hpp, sim/serving.hpp).

#include <boost/program_options.hpp>
#include <iostream>

#include "commands.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/output_file.hpp"
#include "moesim/reports/serve.hpp"
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
  s += "\nscenario keys without a flag of their own (a serve scenario's JSON; every key is written back, resolved, "
       "in --json's \"scenario\"):\n"
       "  description       free text, printed with the results\n"
       "  model_overrides   config.json keys laid over the model's before it is read, e.g. {\"num_experts_per_tok\": "
       "4}\n"
       "  plan.nics_per_node  NICs each node drives at once (default: the node profile's nics_per_node, else 1)\n"
       "  scheduler.block_size  KV-cache block in tokens (default 16, vLLM's)\n"
       "  scheduler.gpu_memory_utilization  fraction of each device's memory the engine may use for weights, "
       "activations and KV cache, in (0, 1] (default 0.9, vLLM's)\n"
       "  kv_bytes          bytes per KV-cache element (default 2: bf16; 1 for an fp8 cache, vLLM's kv_cache_dtype)\n"
       "  activation_bytes  bytes per activation sent between devices (default 2: bf16)\n"
       "  slo               {\"ttft\": \"1s\", \"tpot\": \"50ms\", \"e2el\": \"20s\"}: goodput counts the requests "
       "meeting every bound given (the same as --goodput)\n"
       "  percentiles       the percentiles printed, e.g. [50, 90, 99] (the same as --percentiles)\n"
       "  trace             a routing trace (moesim trace --help) whose experts the batch's tokens choose\n"
       "  generate          without a trace: routing drawn as `moesim trace gen` draws it, e.g. {\"zipf_s\": 1.1}\n"
       "  streaming         experts read from storage as `moesim estimate --stream-from` reads them: "
       "{\"storage\": ID, \"readers\": N, \"page_cache\": \"8GiB\", \"mode\": \"serial\"|\"overlapped\"}\n"
       "  costs             the cost line's assumptions: {\"energy_price\": \"0.15USD/kWh\", \"amortisation\": "
       "\"3years\", \"utilisation\": \"50%\", \"source\": \"...\"}\n";
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
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("scenario", po::value<std::string>(), "serving scenario JSON file (flags given here override its keys)")
    ("model", po::value<std::string>(), "zoo id or config.json path (scenario: model; default mixtral-8x7b)")
    ("hw", po::value<std::string>(), "node profile (hw; default dgx-h100)")
    ("nic", po::value<std::string>(), "NIC profile between nodes (nic)")
    ("nodes", po::value<std::int64_t>(), "nodes (nodes; default 1)")
    ("devices-per-node", po::value<std::int64_t>(), "use this many of each node's devices, the rest idle, e.g. 2 GPUs of an 8-GPU server (plan.devices_per_node; default: all of them)")
    ("tp", po::value<std::int64_t>(), "tensor-parallel devices per stage (plan.tp; default: every device used)")
    ("pp", po::value<std::int64_t>(), "pipeline stages (plan.pp; default 1)")
    ("moe-tp", po::value<std::int64_t>(), "MoE tensor parallelism (plan.moe_tp; moe_tp × moe_ep = tp)")
    ("moe-ep", po::value<std::int64_t>(), "MoE expert parallelism (plan.moe_ep)")
    ("attention-dp", "attention data-parallel, MoE expert-parallel with all-to-all (plan.attention_dp)")
    ("attention-replicated", "attention on every device for every sequence, MoE expert-parallel, expert outputs exchanged (seed 000's decentralised design; plan.attention_replicated)")
    ("precision", po::value<std::string>(), "weight precision (precision; default checkpoint: the format the model's config.json declares in quantization_config, else bf16)")
    ("experts", po::value<std::string>(), "expert execution (experts; default fused)")
    ("runtime", po::value<std::string>(), (runtime_help() + " (scenario key runtime)").c_str());
  // clang-format on
  // The scheduler's keys (scheduler.*), declared once in its parameter table (reports/serve.hpp).
  reports::scheduler_params().add_flags(desc);
  // clang-format off
  desc.add_options()
    ("arrival", po::value<std::string>(), (choices_in(sim::arrival_kinds()) + " (workload.arrival)").c_str())
    ("rate", po::value<std::string>(), "arrival rate with its unit, e.g. 2/s (workload.rate)")
    ("burstiness", po::value<double>(), "gamma arrivals of this shape, vLLM's --burstiness: 1 is Poisson, 0.5 "
     "burstier, 2 more even (workload.burstiness; sets workload.arrival gamma unless --arrival is given)")
    ("max-concurrency", po::value<std::int64_t>(), "at most N requests in flight, vLLM's --max-concurrency: a "
     "request is sent at its arrival time or when a slot frees, whichever is later (workload.max_concurrency)")
    ("requests", po::value<std::int64_t>(), "requests in all (workload.requests)")
    ("users", po::value<std::int64_t>(), "closed loop: users (workload.users)")
    ("prompt", po::value<std::int64_t>(), "prompt tokens, fixed (workload.prompt)")
    ("output", po::value<std::int64_t>(), "output tokens, fixed (workload.output)")
    ("request-trace", po::value<std::string>(), "request trace to replay: moesim CSV, Azure LLM inference 2023/2024, "
     "BurstGPT or Mooncake JSONL, detected from its first line (workload.trace, arrival trace)")
    ("request-trace-format", po::value<std::string>(), ("read the request trace as " +
     choices_in(sim::request_trace_formats()) + " (workload.trace_format; default auto)").c_str())
    ("time-scale", po::value<double>(), "multiply every request-trace arrival time by X: 0.5 replays twice as fast, "
     "2 half as fast (workload.time_scale; default 1)")
    ("seed", po::value<std::string>(), "workload seed (workload.seed)")
    ("goodput", po::value<std::vector<std::string>>()->multitoken(),
     "SLO for goodput as vLLM's benchmark_serving takes it, in ms: e.g. --goodput ttft:1000 tpot:50 e2el:20000 "
     "(slo.ttft, slo.tpot, slo.e2el); goodput is reported only with one")
    ("find-max-rate", "the capacity question: the highest arrival rate at which --slo-attainment of the requests "
     "meet the SLO (needs an SLO and a poisson, gamma or uniform arrival; starts from the workload's rate)")
    ("slo-attainment", po::value<double>()->default_value(0.9, "0.9"),
     "with --find-max-rate: the share of requests that must meet the SLO (DistServe's 90% by default)")
    ("percentiles", po::value<std::string>(),
     "latency percentiles to report besides mean, median and std, e.g. 50,90,99 (percentiles; vLLM's "
     "--metric-percentiles; default 90,99)")
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
          "percentiles, throughput and goodput.",
          serve_help() +
              reports::scheduler_params().help("scheduler keys (a scenario's \"scheduler\" object)", "scheduler."))) {
    return 0;
  }
  reports::ServeScenario s;
  if (vm.count("scenario")) s = reports::load_serve_scenario(vm["scenario"].as<std::string>());
  auto& d = s.doc;
  // Every flag sets one scenario key (a path of object keys): flags and scenario files say the same things.
  auto set_at = [&](std::initializer_list<const char*> path, const nlohmann::json& value) {
    nlohmann::json* at = &d;
    const auto* last = std::prev(path.end());
    for (const auto* it = path.begin(); it != last; ++it) {
      if (!at->contains(*it) || !(*at)[*it].is_object()) (*at)[*it] = nlohmann::json::object();
      at = &(*at)[*it];
    }
    (*at)[*last] = value;
  };
  auto set_str = [&](const char* flag, std::initializer_list<const char*> path) {
    if (vm.count(flag)) set_at(path, vm[flag].as<std::string>());
  };
  auto set_int = [&](const char* flag, std::initializer_list<const char*> path) {
    if (vm.count(flag)) set_at(path, vm[flag].as<std::int64_t>());
  };
  set_str("model", {"model"});
  set_str("hw", {"hw"});
  set_str("nic", {"nic"});
  set_int("nodes", {"nodes"});
  set_int("devices-per-node", {"plan", "devices_per_node"});
  set_int("tp", {"plan", "tp"});
  set_int("pp", {"plan", "pp"});
  set_int("moe-tp", {"plan", "moe_tp"});
  set_int("moe-ep", {"plan", "moe_ep"});
  if (vm.count("attention-dp")) d["plan"]["attention_dp"] = true;
  if (vm.count("attention-replicated")) d["plan"]["attention_replicated"] = true;
  set_str("precision", {"precision"});
  set_str("experts", {"experts"});
  set_str("runtime", {"runtime"});
  {
    nlohmann::json flags = nlohmann::json::object();
    reports::scheduler_params().flags_to_json(vm, flags);
    for (auto& [k, v] : flags.items()) set_at({"scheduler", k.c_str()}, v);
  }
  set_str("arrival", {"workload", "arrival"});
  set_str("rate", {"workload", "rate"});
  set_int("requests", {"workload", "requests"});
  set_int("users", {"workload", "users"});
  set_int("prompt", {"workload", "prompt"});
  set_int("output", {"workload", "output"});
  if (vm.count("request-trace")) {
    d["workload"]["arrival"] = "trace";
    d["workload"]["trace"] = vm["request-trace"].as<std::string>();
  }
  set_str("request-trace-format", {"workload", "trace_format"});
  if (vm.count("time-scale")) d["workload"]["time_scale"] = vm["time-scale"].as<double>();
  if (vm.count("burstiness")) {
    d["workload"]["burstiness"] = vm["burstiness"].as<double>();
    // vLLM's --burstiness shapes the gaps of its one arrival process; here that process is "gamma".
    if (!vm.count("arrival")) d["workload"]["arrival"] = "gamma";
  }
  set_int("max-concurrency", {"workload", "max_concurrency"});
  if (vm.count("seed")) d["workload"]["seed"] = parse_seed(vm["seed"].as<std::string>(), "--seed");
  if (vm.count("goodput")) {
    // vLLM's form, KEY:VALUE in milliseconds (benchmark_serving.py parse_goodput): one key each at most.
    for (const auto& item : vm["goodput"].as<std::vector<std::string>>()) {
      const auto colon = item.find(':');
      const std::string key = item.substr(0, colon);
      if (colon == std::string::npos || (key != "ttft" && key != "tpot" && key != "e2el"))
        throw UserError("--goodput " + item + ": write KEY:MS with KEY ttft, tpot or e2el, e.g. ttft:1000 tpot:50");
      const std::string num = item.substr(colon + 1);
      const std::vector<double> v = parse_numbers(num, "--goodput " + key, key + ":50 (milliseconds)");
      if (v.size() != 1 || !(v[0] > 0))
        throw UserError("--goodput " + item + ": the bound is a positive number of milliseconds, e.g. " + key + ":50");
      d["slo"][key] = text::printf("%.17gms", v[0]);
    }
  }
  if (vm.count("percentiles")) {
    d["percentiles"] = parse_numbers(vm["percentiles"].as<std::string>(), "--percentiles", "50,90,99");
  }
  if (!vm.count("scenario")) {
    // Flags alone: a Poisson load of 200 requests of 512 in / 128 out at 4/s, each part replaced by a flag.
    auto& w = d["workload"];
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
  std::size_t chrome_steps = reports::kServeTraceSteps;
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
    const reports::MaxRate m =
        reports::find_max_rate(s, vm["slo-attainment"].as<double>(), [&](double rate, std::size_t i) {
          // A search of unknown length: each probe on its own, without a percentage.
          bar.fraction("serve --find-max-rate", -1.0,
                       "probe " + std::to_string(i + 1) + " at " + text::printf("%.3g", rate) + " requests/s");
        });
    bar.finish();
    if (vm.count("json"))
      out << reports::max_rate_to_json(m).dump(2) << "\n";
    else
      reports::print_max_rate_text(m, out);
    return 0;
  }
  const auto points = reports::expand_sweep(s);
  // Output files are opened before the run, so a bad path fails at once and nothing half-written remains.
  // All of them are committed together at the end (moesim/model/output_file.hpp).
  OutputSet outputs;
  OutputFile *requests_out = nullptr, *steps_out = nullptr, *sweep_out = nullptr, *chrome_out = nullptr;
  if (vm.count("chrome-trace")) chrome_out = &outputs.add(vm["chrome-trace"].as<std::string>(), "--chrome-trace");
  if (vm.count("requests-out")) requests_out = &outputs.add(vm["requests-out"].as<std::string>(), "--requests-out");
  if (vm.count("steps-out")) steps_out = &outputs.add(vm["steps-out"].as<std::string>(), "--steps-out");
  if (vm.count("sweep-out")) sweep_out = &outputs.add(vm["sweep-out"].as<std::string>(), "--sweep-out");
  std::vector<reports::ServeRun> runs;
  calibrate::Progress bar(quiet ? nullptr : &std::cerr, 1.0);
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::function<void(double)> progress;
    const std::string stage = "serve: point " + std::to_string(i + 1) + "/" + std::to_string(points.size());
    if (!quiet) progress = [&bar, stage](double f) { bar.fraction(stage, f, "requests done"); };
    runs.push_back(reports::run_serve(points[i].scenario, progress));
  }
  bar.finish();
  if (points.size() == 1 && points.front().values.empty()) {
    if (vm.count("json")) {
      out << reports::serve_to_json(runs.front(), vm.count("timing") > 0).dump(2) << "\n";
    } else {
      reports::print_serve_text(runs.front(), out, vm.count("timing") > 0);
    }
    if (requests_out) reports::write_requests_csv(runs.front(), requests_out->stream());
    if (steps_out) reports::write_steps_csv(runs.front(), steps_out->stream());
    if (chrome_out) {
      const std::string covers = reports::write_serve_chrome_trace(runs.front(), chrome_out->stream(), chrome_steps);
      if (!quiet && !covers.starts_with("all ")) std::cerr << "moesim serve: the Chrome trace holds " << covers << "\n";
    }
  } else {
    if (vm.count("json")) {
      nlohmann::json all = nlohmann::json::array();
      for (std::size_t i = 0; i < runs.size(); ++i) {
        nlohmann::json p = reports::serve_to_json(runs[i], vm.count("timing") > 0);
        nlohmann::json v = nlohmann::json::object();
        for (const auto& [k, x] : points[i].values) v[k] = x;
        p["sweep_values"] = v;
        all.push_back(p);
      }
      out << all.dump(2) << "\n";
    } else {
      if (s.doc.contains("description")) out << s.doc["description"].get<std::string>() << "\n\n";
      reports::print_sweep_table(points, runs, out);
    }
    if (requests_out || steps_out || chrome_out)
      throw UserError("--requests-out, --steps-out and --chrome-trace need a scenario without a sweep");
  }
  if (sweep_out) reports::write_sweep_csv(points, runs, sweep_out->stream());
  outputs.commit();
  return 0;
}

}  // namespace moesim::apps
