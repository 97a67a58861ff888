// `moesim sweep` end to end:
// - the default grid (examples/grid-dbrx-purchase.json, seed 000's purchase question) answers as the
//   paper's Table 5 does: two Mac Studios over RoCEv2 25G give the most tokens/s per USD, two over 10 GbE
//   (gRPC) are the cheapest meeting 5 tokens/s; every metric carries its unit; the Pareto front is ordered;
// - the output bytes (stdout, CSV, JSON) are the same for 1, 2 and 4 MPI ranks and 1 or 2 threads;
// - a serving grid (workloads x plans) reports p99 TTFT and ITL from the serving simulator;
// - bad input is one line naming the file and field, exit code 2, and leaves no output file behind.

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_support.hpp"

namespace {

using namespace moesim::test;

/// A small decode grid: 3 node counts x 2 NICs x 2 strategies = 12 points, all simulated, 200 tokens.
const char* const kSmallGrid = R"({
  "description": "small test grid",
  "models": ["dbrx-instruct"],
  "hw": ["mac-studio-m2-ultra-192"],
  "nodes": [2, 3, 4],
  "nics": ["10gbe-grpc", "rocev2-25g"],
  "strategies": ["naive", "P-LR-D"],
  "costs": {"energy_price": "0.13USD/kWh"},
  "simulate": {"points": "all", "tokens": 200, "seed": 1}
})";

const nlohmann::json& point(const nlohmann::json& doc, const nlohmann::json& index) {
  return doc["points"][index.get<std::size_t>()];
}

std::map<std::string, nlohmann::json> metrics_by_name(const nlohmann::json& p) {
  std::map<std::string, nlohmann::json> m;
  for (const auto& x : p["metrics"]) m[x["name"].get<std::string>()] = x;
  return m;
}

double cost_of(const nlohmann::json& p) { return metrics_by_name(p).at("cost")["value"].get<double>(); }

/// `moesim sweep -q --json` on `grid` (written into the scratch directory): the parsed result, or null
/// (the failure reported) when the command fails.
nlohmann::json sweep_json(const Scratch& s, const std::string& grid) {
  s.write("grid.json", grid);
  const auto r = s.moesim("sweep -q --json --grid " + s.path("grid.json"));
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

/// A serving grid: Mixtral-8x7B on one 8xH100 server under one Poisson workload, over `plans` (a JSON list),
/// every point simulated.
std::string mixtral_dgx_grid(const std::string& plans) {
  return R"({"models": ["mixtral-8x7b"], "hw": ["dgx-h100"], "nodes": [1], "plans": )" + plans + R"(,
    "workloads": [{"name": "2/s", "workload": {"arrival": "poisson", "rate": "2/s", "requests": 40,
                   "prompt": 256, "output": 64}}],
    "simulate": {"points": "all", "tokens": 2048}})";
}

}  // namespace

// Seed 000 Table 5's purchase question over the built-in grid. Over the simulated points within the
// 300,000 USD budget and at 5 tokens/s or more: RoCEv2 NICs (339 USD each) buy enough communication time
// on two nodes to win tokens/s per USD; the cheapest configuration meeting the SLO is two Mac Studios
// over the 10 GbE ports they come with (no NIC price, no switch for two nodes).
TEST(GoldenSweep, DefaultStudyAnswers) {
  const auto r = run_cli("sweep --json -q");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["command"], "sweep");
  const auto& answers = doc["answers"];
  EXPECT_EQ(answers["over"], "simulated");

  const auto& best = point(doc, answers["best_tokens_per_s_per_usd"]);
  EXPECT_EQ(best["hw"], "mac-studio-m2-ultra-192");
  EXPECT_EQ(best["nodes"], 2);
  EXPECT_EQ(best["nic"], "rocev2-25g");
  EXPECT_EQ(best["status"], "ok");

  const auto& cheapest = point(doc, answers["cheapest_meeting_slo"]);
  EXPECT_EQ(cheapest["hw"], "mac-studio-m2-ultra-192");
  EXPECT_EQ(cheapest["nodes"], 2);
  EXPECT_EQ(cheapest["nic"], "10gbe-grpc");
  EXPECT_EQ(cheapest["status"], "ok");

  // Every metric of every point names its unit.
  for (const auto& p : doc["points"]) {
    for (const auto& m : p["metrics"]) {
      ASSERT_TRUE(m.contains("unit")) << m.dump();
      EXPECT_FALSE(m["unit"].get<std::string>().empty()) << "point " << p["index"] << ": " << m.dump();
    }
  }

  // The Pareto front: points that meet the constraints, by capital cost ascending, each faster than the last.
  const auto& pareto = answers["pareto"];
  ASSERT_FALSE(pareto.empty());
  double last_cost = -1, last_tps = -1;
  for (const auto& i : pareto) {
    const auto& p = point(doc, i);
    EXPECT_EQ(p["status"], "ok") << i;
    EXPECT_TRUE(p["pareto"].get<bool>()) << i;
    const double cost = cost_of(p);
    const double tps = metrics_by_name(p).at("tokens_per_second")["value"].get<double>();
    EXPECT_GE(cost, last_cost) << i;
    EXPECT_GT(tps, last_tps) << i;
    last_cost = cost;
    last_tps = tps;
  }
  // The cheapest point meeting the SLO opens the front.
  EXPECT_EQ(pareto.front(), answers["cheapest_meeting_slo"]);

  // One 8xH100 server runs the model tensor-parallel on the serving simulator, not the grid's P-LR-D: its
  // strategy, instrument and resolved scenario say what ran; the Mac clusters keep P-LR-D.
  std::size_t tp_points = 0;
  for (const auto& p : doc["points"]) {
    SCOPED_TRACE(p["index"].dump());
    if (p["hw"] == "dgx-h100" && p["nodes"] == 1) {
      ++tp_points;
      EXPECT_EQ(p["strategy"], "TP 8");
      EXPECT_EQ(p["instrument"], "serving-sim (TP 8)");
      EXPECT_EQ(p["scenario"]["plan"]["tp"], 8);
      EXPECT_EQ(p["scenario"]["runtime"], "cuda-eager");  // the grid's runtimes: the DBRX seed's 5 us per kernel
      EXPECT_FALSE(p["scenario"].contains("strategy")) << p["scenario"].dump();
    } else {
      EXPECT_EQ(p["strategy"], "P-LR-D");
    }
  }
  EXPECT_EQ(tp_points, 1u);
}

// The grid is split by point index across ranks and threads and gathered; every figure is a pure
// function of the grid, so stdout, the CSV and the JSON are byte for byte the same.
TEST(GoldenSweep, SameBytesForOneTwoFourRanks) {
  Scratch s("moesim_sweep_cli");
  s.write("grid.json", kSmallGrid);
  const std::string args =
      " sweep -q --grid " + s.path("grid.json") + " --csv " + s.path("p.csv") + " --json-out " + s.path("p.json");
  auto r = s.moesim(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string want_out = r.out, want_csv = slurp(s.path("p.csv")), want_json = slurp(s.path("p.json"));
  ASSERT_FALSE(want_out.empty());
  ASSERT_NE(want_csv.find("index,model,hw"), std::string::npos);
  const auto doc = nlohmann::json::parse(want_json);
  EXPECT_EQ(doc["points_total"], 12);
  EXPECT_EQ(doc["simulated"], 12);

  const auto same = [&](const moesim::test::Run& got, const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(got.code, 0) << got.err;
    EXPECT_EQ(got.out, want_out);
    EXPECT_EQ(slurp(s.path("p.csv")), want_csv);
    EXPECT_EQ(slurp(s.path("p.json")), want_json);
  };
  for (const char* threads : {"1", "2"})
    same(s.moesim(args + " --threads " + threads), "--threads " + std::string(threads));

  if (!have_mpirun()) GTEST_SKIP() << "no mpirun (Open MPI) on this machine";
  for (const int ranks : {1, 2, 4}) {
    for (const char* threads : {"1", "2"}) {
      fs::remove(s.path("p.csv"));
      fs::remove(s.path("p.json"));
      same(s.shell(kMpirun + std::to_string(ranks) + " " + kBin + args + " --threads " + threads),
           std::to_string(ranks) + " ranks, --threads " + threads);
    }
  }
}

// A serving grid: Mixtral-8x7B on one 8xH100 server, TP 8 against attention-DP with EP 8 (seed 002's
// plans), one Poisson workload. Every simulated point reports p99 TTFT and ITL in seconds.
TEST(GoldenSweep, ServingGrid) {
  Scratch s("moesim_sweep_cli");
  const auto doc = sweep_json(s, mixtral_dgx_grid(R"([{"name": "tp8", "plan": {"tp": 8}},
    {"name": "ep8", "plan": {"tp": 8, "moe_ep": 8, "attention_dp": true}}])"));
  ASSERT_EQ(doc["points"].size(), 2u);
  EXPECT_EQ(doc["simulated"], 2);
  std::set<std::string> plans;
  for (const auto& p : doc["points"]) {
    SCOPED_TRACE(p["plan"].dump());
    EXPECT_EQ(p["status"], "ok");
    EXPECT_EQ(p["instrument"], "serving-sim");
    EXPECT_EQ(p["workload"], "2/s");
    plans.insert(p["plan"].get<std::string>());
    const auto m = metrics_by_name(p);
    for (const char* name : {"ttft_p99", "itl_p99", "ttft_p50", "itl_p50"}) {
      ASSERT_TRUE(m.count(name)) << name << " missing in " << p["metrics"].dump();
      EXPECT_EQ(m.at(name)["unit"], "s") << name;
      EXPECT_GT(m.at(name)["value"].get<double>(), 0) << name;
    }
    EXPECT_GE(m.at("ttft_p99")["value"].get<double>(), m.at("ttft_p50")["value"].get<double>());
    EXPECT_GE(m.at("itl_p99")["value"].get<double>(), m.at("itl_p50")["value"].get<double>());
    ASSERT_TRUE(m.count("tokens_per_second"));
    EXPECT_GT(m.at("tokens_per_second")["value"].get<double>(), 0);
    // The resolved scenario is the workload's keys, then the plan's, then the point's axes.
    EXPECT_EQ(p["scenario"]["model"], "mixtral-8x7b");
    EXPECT_EQ(p["scenario"]["workload"]["rate"], "2/s");
    EXPECT_EQ(p["scenario"]["plan"]["tp"], 8);
  }
  EXPECT_EQ(plans, (std::set<std::string>{"tp8", "ep8"}));
}

// A serving grid's memory fit is the serving simulator's own plan, not the analytic model's node total.
// Mixtral-8x7B at bf16 on one 8xH100 server, TP 8: 11.7 GB of weights per GPU, 93 GB a node of 640 GB, so
// the analytic fit passes both plans. With max_num_batched_tokens 4,000,000 the engine reserves the
// activations of 4 M tokens through one layer (2h + q/k/v/o/8 + 2·top-2 FFN/8 = 16,640 values of 2 B:
// 133 GB per GPU), more than 0.9 × 80 GiB: only the serving plan refuses that point, at the screen.
TEST(GoldenSweep, ServingGridScreensWithTheServingPlan) {
  Scratch s("moesim_sweep_plan_fit");
  const auto doc = sweep_json(s, mixtral_dgx_grid(R"([{"name": "tp8", "plan": {"tp": 8}},
    {"name": "tp8-huge-batch", "plan": {"tp": 8}, "scheduler": {"max_num_batched_tokens": 4000000}}])"));
  ASSERT_EQ(doc["points"].size(), 2u);
  EXPECT_EQ(doc["screened_in"], 1);
  EXPECT_EQ(doc["simulated"], 1);
  const auto& ok = doc["points"][0];
  const auto& huge = doc["points"][1];
  ASSERT_EQ(huge["plan"], "tp8-huge-batch");
  EXPECT_EQ(ok["status"], "ok");
  EXPECT_EQ(huge["status"], "removed: does not fit in memory");
  EXPECT_EQ(huge["instrument"], "analytic");  // never run
  // The plan's figures per GPU, and its reason among the point's notes: the activations, and the token
  // budget that would leave half the room after the weights and logits to them.
  const auto m = metrics_by_name(huge);
  ASSERT_TRUE(m.count("device_memory_needed") && m.count("device_memory_usable")) << huge["metrics"].dump();
  EXPECT_GT(m.at("device_memory_needed")["value"].get<double>(), 120.0);         // GiB
  EXPECT_NEAR(m.at("device_memory_usable")["value"].get<double>(), 72.0, 1e-9);  // 0.9 × 80 GiB
  EXPECT_EQ(m.at("device_memory_usable")["unit"], "GiB");
  ASSERT_TRUE(huge.contains("notes")) << huge.dump();
  bool said = false;
  for (const auto& n : huge["notes"]) {
    const std::string text = n.get<std::string>();
    said = said || (text.find("133 GB of activations") != std::string::npos &&
                    text.find("would fit: scheduler.max_num_batched_tokens") != std::string::npos);
  }
  EXPECT_TRUE(said) << huge["notes"].dump();
  const auto fits = metrics_by_name(ok);
  EXPECT_LT(fits.at("device_memory_needed")["value"].get<double>(), 72.0);
}

TEST(GoldenSweep, BadInputs) {
  Scratch s("moesim_sweep_bad");
  const auto grid = [&](const std::string& name, const std::string& body) {
    s.write(name, body);
    return " --grid " + s.path(name);
  };
  const std::string base = R"("models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-192"], "nodes": [2, 3],
                              "nics": ["10gbe-grpc"])";
  const std::vector<BadInput> cases = {
      {"missing grid file", "sweep -q --grid " + s.path("nope.json"), {"nope.json"}},
      {"malformed JSON", "sweep -q" + grid("malformed.json", "{\"models\": [\"dbrx-instruct\",}"), {"malformed.json"}},
      {"empty axis",
       "sweep -q" + grid("empty.json", R"({"models": [], "hw": ["mac-studio-m2-ultra-192"]})"),
       {"empty.json", "models", "empty"}},
      {"unknown key", "sweep -q" + grid("unknown.json", "{" + base + R"(, "nodez": [2]})"), {"unknown.json", "nodez"}},
      {"SLO without a unit",
       "sweep -q" + grid("slo.json", "{" + base + R"(, "constraints": {"min_tokens_per_s": "5"}})"),
       {"slo.json", "min_tokens_per_s", "tokens/s"}},
      {"negative budget",
       "sweep -q" + grid("budget.json", "{" + base + R"(, "constraints": {"budget": "-5USD"}})"),
       {"budget.json", "budget"}},
      {"unknown model",
       "sweep -q" + grid("model.json", R"({"models": ["dbrx-instrukt"], "hw": ["mac-studio-m2-ultra-192"]})"),
       {"dbrx-instrukt", "dbrx-instruct"}},
      {"every point over the budget",
       "sweep -q" + grid("poor.json", "{" + base + R"(, "constraints": {"budget": "1000USD"}})"),
       {"poor.json", "no configuration meets the constraints", "2 removed: over the budget"}},
      {"TTFT SLO on a decode grid",
       "sweep -q" + grid("ttft.json", "{" + base + R"(, "constraints": {"max_ttft": "2s"}})"),
       {"ttft.json", "max_ttft", "workloads"}},
      {"CSV into a missing directory",
       "sweep -q --simulate 0 --csv " + s.path("no/such/dir/p.csv"),
       {"--csv", "no/such/dir"}},
      {"JSON into a missing directory after a good CSV path",
       "sweep -q --simulate 0 --csv " + s.path("good.csv") + " --json-out " + s.path("no/such/dir/p.json"),
       {"--json-out", "no/such/dir"}},
      {"negative --simulate", "sweep -q --simulate -3", {"--simulate"}},
  };
  for (const auto& c : cases) expect_bad_input(c);
  // Nothing half-written stays behind: only the grid files written above are in the folder.
  for (const auto& f : s.files()) EXPECT_NE(f.find(".json"), std::string::npos) << "left behind: " << f;
  EXPECT_FALSE(fs::exists(s.path("good.csv")));
  EXPECT_FALSE(fs::exists(s.path("no")));
}

// An unknown id on any axis is one line that names the grid file and the axis, like every other grid error
// (reports/sweep.hpp: "UserError with the JSON path").
TEST(GoldenSweep, UnknownIdsNameTheGridFileAndAxis) {
  Scratch s("moesim_sweep_ids");
  const auto grid = [&](const std::string& name, const std::string& body) {
    s.write(name, body);
    return "sweep -q --grid " + s.path(name);
  };
  const std::vector<BadInput> cases = {
      {"unknown model",
       grid("model.json", R"({"models": ["dbrx-instrukt"], "hw": ["mac-studio-m2-ultra-192"]})"),
       {"model.json", "models", "dbrx-instrukt"}},
      {"unknown node profile",
       grid("hw.json", R"({"models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-19"]})"),
       {"hw.json", "hw", "mac-studio-m2-ultra-19"}},
      {"unknown NIC",
       grid("nic.json",
            R"({"models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-192"], "nodes": [2], "nics": ["10gbe"]})"),
       {"nic.json", "nics", "10gbe"}},
      {"unknown precision",
       grid("prec.json", R"({"models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-192"], "precisions": ["bf17"]})"),
       {"prec.json", "precisions", "bf17"}},
      {"unknown strategy",
       grid("strat.json",
            R"({"models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-192"], "strategies": ["P-LR-X"]})"),
       {"strat.json", "strategies", "P-LR-X"}},
  };
  for (const auto& c : cases) expect_bad_input(c);
}

// A metric's name is unique within a point: "cloud_usd_per_hour" and "cloud_usd_per_million_tokens" are
// two metrics, and a reader that looks a metric up by name must find the one it asked for.
TEST(GoldenSweep, MetricNamesAreUniqueWithinAPoint) {
  const auto r = run_cli("sweep --json -q --simulate 0");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  for (const auto& p : doc["points"]) {
    std::set<std::string> seen;
    for (const auto& m : p["metrics"])
      EXPECT_TRUE(seen.insert(m["name"].get<std::string>()).second)
          << "point " << p["index"] << " (" << p["hw"] << "): metric '" << m["name"] << "' twice";
  }
}

// The serving simulator runs a dense model pipeline-parallel across nodes (`moesim serve` does); the
// sweep's analytic screen must not refuse it as "expert parallelism across nodes needs routed experts",
// a rule of the decode simulator only.
TEST(GoldenSweep, ServingGridRunsDenseModelAcrossNodes) {
  Scratch s("moesim_sweep_dense");
  const auto doc = sweep_json(s, R"({
    "models": ["llama-3.1-405b"], "hw": ["dgx-h100"], "nodes": [2], "nics": ["ib-ndr-400"], "precisions": ["fp8"],
    "plans": [{"name": "tp8pp2", "plan": {"tp": 8, "pp": 2}}],
    "workloads": [{"name": "1/s", "workload": {"arrival": "poisson", "rate": "1/s", "requests": 10, "prompt": 128,
                   "output": 16}}],
    "simulate": {"points": "all"}
  })");
  ASSERT_EQ(doc["points"].size(), 1u);
  EXPECT_EQ(doc["points"][0]["status"], "ok");
  EXPECT_EQ(doc["points"][0]["instrument"], "serving-sim");
}

namespace {

// A grid names the software on each node profile: points on it run with the runtime (here the llama.cpp
// profile fitted on the DGX Spark), slower than the bare datasheet profile; the decode simulator's figure
// is the estimate's with the same runtime; a runtime for hardware off the axis, one neither fitted on it nor
// transferred, or a name that matches several transferred runtimes, is refused naming the key.
TEST(GoldenSweep, RuntimesApplyToTheirHardware) {
  const Scratch s("moesim_sweep_runtime");
  const std::string grid = R"({"models": ["gpt-oss-120b"], "hw": ["dgx-spark"], "precisions": ["mxfp4/q8_0"],
    "simulate": {"points": "all", "tokens": 100, "seed": 1}, "runtimes": {"dgx-spark": "llama.cpp"}})";
  s.write("rt.json", grid);
  nlohmann::json bare = nlohmann::json::parse(grid);
  bare.erase("runtimes");
  s.write("bare.json", bare.dump());
  const auto with = s.moesim("sweep -q --grid " + s.path("rt.json") + " --json-out " + s.path("rt-out.json"));
  const auto without = s.moesim("sweep -q --grid " + s.path("bare.json") + " --json-out " + s.path("bare-out.json"));
  ASSERT_EQ(with.code, 0) << with.err;
  ASSERT_EQ(without.code, 0) << without.err;
  auto tokens = [&](const std::string& file) {
    std::ifstream in(s.path(file));
    const auto j = nlohmann::json::parse(in);
    for (const auto& m : j.at("points").at(0).at("metrics"))
      if (m.at("name") == "simulated_tokens_per_second") return m.at("value").get<double>();
    return 0.0;
  };
  const double fitted = tokens("rt-out.json"), datasheet = tokens("bare-out.json");
  EXPECT_GT(fitted, 0);
  EXPECT_LT(fitted, datasheet * 0.95);
  // The runtime's interval on the point's figure, as estimate gives it; none on the bare profile.
  auto range = [&](const std::string& file) {
    std::ifstream in(s.path(file));
    const auto j = nlohmann::json::parse(in);
    std::map<std::string, double> m;
    for (const auto& x : j.at("points").at(0).at("metrics")) m[x.at("name").get<std::string>()] = x.at("value");
    return m;
  };
  const auto ranged = range("rt-out.json");
  ASSERT_TRUE(ranged.count("tokens_per_second_low") && ranged.count("tokens_per_second_high"));
  EXPECT_LT(ranged.at("tokens_per_second_low"), fitted);
  EXPECT_GT(ranged.at("tokens_per_second_high"), fitted);
  EXPECT_FALSE(range("bare-out.json").count("tokens_per_second_low"));
  EXPECT_NE(with.out.find("tokens/s (range "), std::string::npos) << with.out;
  const auto est = s.moesim(
      "estimate --model gpt-oss-120b --hw dgx-spark --precision mxfp4/q8_0 --runtime llama.cpp "
      "--json");
  ASSERT_EQ(est.code, 0) << est.err;
  const auto ej = nlohmann::json::parse(est.out);  // named: a range-for keeps only the outermost temporary
  for (const auto& m : ej.at("rows").at(0).at("metrics"))
    if (m.at("name") == "tokens_per_second") {
      EXPECT_NEAR(fitted / m.at("value").get<double>(), 1.0, 0.02);
      // The same interval: each end the figure over the same 1 + error.
      EXPECT_NEAR(ranged.at("tokens_per_second_low") / fitted, m.at("low").get<double>() / m.at("value").get<double>(),
                  1e-9);
      EXPECT_NEAR(ranged.at("tokens_per_second_high") / fitted,
                  m.at("high").get<double>() / m.at("value").get<double>(), 1e-9);
    }
  s.write("off-axis.json",
          R"({"models": ["gpt-oss-120b"], "hw": ["dgx-spark"], "runtimes": {"h100-sxm": "llama.cpp"}})");
  const auto off = s.moesim("sweep -q --grid " + s.path("off-axis.json"));
  EXPECT_EQ(off.code, 2);
  EXPECT_NE(off.err.find("runtimes.h100-sxm"), std::string::npos) << off.err;
  // llama.cpp's Vulkan runtime is fitted on one machine: no profile on the H100, none transferred to it.
  s.write("unfitted.json",
          R"({"models": ["gpt-oss-120b"], "hw": ["h100-sxm"], "runtimes": {"h100-sxm": "llama.cpp-vulkan"}})");
  const auto unfitted = s.moesim("sweep -q --grid " + s.path("unfitted.json"));
  EXPECT_EQ(unfitted.code, 2);
  EXPECT_NE(unfitted.err.find("no runtime profile 'llama.cpp-vulkan' on h100-sxm"), std::string::npos) << unfitted.err;
  // llama.cpp's Metal runtime is transferred to Apple GPUs only: a grid that asks for it on the H100 is
  // refused, naming the GPUs it carries to.
  s.write("other-maker.json",
          R"({"models": ["gpt-oss-120b"], "hw": ["h100-sxm"], "runtimes": {"h100-sxm": "llama.cpp-metal"}})");
  const auto other_maker = s.moesim("sweep -q --grid " + s.path("other-maker.json"));
  EXPECT_EQ(other_maker.code, 2);
  EXPECT_NE(other_maker.err.find("carries only to apple GPUs, and h100-sxm's are nvidia"), std::string::npos)
      << other_maker.err;
}

}  // namespace
