// The parameter table (scenario/params.hpp): one declaration per key gives the file reader, the flags, the
// help and the resolved scenario; and a key added by one declaration (the scheduler's max_model_len) reaches
// the file, the flags and the engine.

#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/hardware.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/scenario/estimate.hpp"
#include "moesim/scenario/params.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/simulate.hpp"

using namespace moesim;
using moesim::test::error_of;
namespace po = boost::program_options;

namespace {

struct Toy {
  json::Origins origins;
  std::string model = "dbrx-instruct";
  std::int64_t nodes = 2;
  std::optional<double> ratio;
  bool contention = true;
  bool lm_head = false;
  std::uint64_t seed = 1;
};

scenario::ParamTable<Toy> toy_table() {
  scenario::ParamTable<Toy> t(&Toy::origins);
  t.field("model", &Toy::model).origin().describe("zoo id");
  t.field("nodes", &Toy::nodes).min(1).max(64).unit("nodes").describe("number of nodes");
  t.field("ratio", &Toy::ratio).positive().describe("a ratio");
  t.field("contention", &Toy::contention).describe("flows share bandwidth");
  t.field("lm_head", &Toy::lm_head).describe("count the LM head").switch_flag("lm-head", true, "count it");
  t.field("seed", &Toy::seed).describe("seed");
  return t;
}

po::variables_map parse(const scenario::ParamTable<Toy>& t, const std::vector<std::string>& args) {
  po::options_description desc;
  t.add_flags(desc);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  return vm;
}

}  // namespace

// A file's keys land in their members and come back out unchanged; keys absent keep the defaults, and an
// optional left unset is not written.
TEST(ParamTable, ReadsAFileAndWritesItBack) {
  const auto t = toy_table();
  Toy r;
  const nlohmann::json doc = {{"model", "mixtral-8x7b"}, {"nodes", 4}, {"contention", false}, {"seed", 7}};
  t.read(json::Node(doc, "toy.json"), r);
  EXPECT_EQ(r.model, "mixtral-8x7b");
  EXPECT_EQ(r.nodes, 4);
  EXPECT_FALSE(r.contention);
  EXPECT_EQ(r.seed, 7U);
  EXPECT_EQ(r.origins.at("model"), "toy.json: $.model");
  const nlohmann::json back = t.to_json(r);
  EXPECT_EQ(back,
            (nlohmann::json{
                {"model", "mixtral-8x7b"}, {"nodes", 4}, {"contention", false}, {"lm_head", false}, {"seed", 7}}));
}

// Unknown keys name the nearest known one; out-of-range values name the file, the path and the bound.
TEST(ParamTable, RefusesUnknownKeysAndValuesOutOfRange) {
  const auto t = toy_table();
  Toy r;
  auto read = [&](const nlohmann::json& doc) { return error_of([&] { t.read(json::Node(doc, "toy.json"), r); }); };
  EXPECT_NE(read({{"node", 2}}).find("did you mean 'nodes'?"), std::string::npos) << read({{"node", 2}});
  EXPECT_NE(read({{"nodes", 0}}).find("toy.json: $.nodes"), std::string::npos);
  EXPECT_NE(read({{"nodes", 65}}).find("must be at most 64"), std::string::npos) << read({{"nodes", 65}});
  EXPECT_NE(read({{"ratio", 0.0}}).find("must be a positive number"), std::string::npos);
  EXPECT_NE(read({{"contention", "yes"}}).find("$.contention"), std::string::npos);
}

// Flags set the same members, forget where a file gave a key, and are checked against the same range.
TEST(ParamTable, FlagsSetTheKeysTheyNameAndOverrideTheFile) {
  const auto t = toy_table();
  Toy r;
  t.read(json::Node(nlohmann::json{{"model", "dbrx-instruct"}}, "toy.json"), r);
  t.apply_flags(parse(t, {"--model", "mixtral-8x7b", "--contention", "off", "--lm-head", "--seed", "42"}), r);
  EXPECT_EQ(r.model, "mixtral-8x7b");
  EXPECT_EQ(r.origins.count("model"), 0U) << "a flag's value is not the file's";
  EXPECT_FALSE(r.contention);
  EXPECT_TRUE(r.lm_head);
  EXPECT_EQ(r.seed, 42U);
  EXPECT_EQ(error_of([&] { t.apply_flags(parse(t, {"--nodes", "0"}), r); }), "--nodes 0: must be at least 1");
  EXPECT_EQ(error_of([&] {
              t.apply_flags(parse(t, {"--contention", "maybe"}), r);
            }),
            "--contention maybe: write on or off");
  nlohmann::json obj = nlohmann::json::object();
  t.flags_to_json(parse(t, {"--nodes", "3", "--lm-head"}), obj);
  EXPECT_EQ(obj, (nlohmann::json{{"nodes", 3}, {"lm_head", true}}));
}

// The help lists every key with its type, range, unit, default (the member's initialiser) and flag.
TEST(ParamTable, HelpListsEveryKeyWithItsDefault) {
  const std::string help = toy_table().help("keys");
  EXPECT_NE(help.find("nodes (integer in [1, 64], nodes; default 2; --nodes)"), std::string::npos) << help;
  EXPECT_NE(help.find("ratio (number > 0; --ratio)"), std::string::npos) << help;
  EXPECT_NE(help.find("lm_head (boolean; default off; --lm-head)"), std::string::npos) << help;
  po::options_description desc;
  toy_table().add_flags(desc);
  std::ostringstream flags;
  flags << desc;
  EXPECT_NE(flags.str().find("number of nodes (default 2 nodes)"), std::string::npos) << flags.str();
  EXPECT_NE(flags.str().find("on|off: flows share bandwidth (default on)"), std::string::npos) << flags.str();
}

// simulate's table covers its nested "generate" object: dotted keys in the help, flags among simulate's,
// and "generate" with "trace" refused.
TEST(ParamTable, SimulateGroupsTheGenerator) {
  const auto& t = scenario::simulate_params();
  const std::string help = t.help("keys");
  EXPECT_NE(help.find("generate.seed (integer; default 1; --seed)"), std::string::npos) << help;
  EXPECT_NE(help.find("generate.lru_hit (number; file only)"), std::string::npos) << help;
  const nlohmann::json doc = {{"generate", {{"seed", 5}, {"tokens", 10}}}, {"nodes", 3}};
  const auto r = scenario::load_simulate_scenario(json::Node(doc, "s.json"));
  EXPECT_EQ(r.generate.seed, 5U);
  EXPECT_EQ(r.generate.tokens, 10);
  EXPECT_EQ(scenario::simulate_request_to_json(r)["generate"]["seed"], 5);
  const nlohmann::json both = {{"generate", {{"seed", 5}}}, {"trace", "t.jsonl"}};
  EXPECT_NE(error_of([&] { (void)scenario::load_simulate_scenario(json::Node(both, "s.json")); }).find("keep one"),
            std::string::npos);
}

// vLLM's max_model_len, added as one declaration in the scheduler's table: a request longer than it is
// refused with its lengths, and so is a KV cache that cannot hold one request of that length (vLLM's
// start-up check). Mixtral 8x7B in bf16 on a DGX H100 has millions of tokens of KV cache.
TEST(ParamTable, MaxModelLenRefusesLongerRequestsAndTooSmallACache) {
  auto run = [](std::int64_t max_model_len) {
    scenario::ServeScenario s;
    s.doc = {
        {"model", "mixtral-8x7b"},
        {"hw", "dgx-h100"},
        {"scheduler", {{"max_model_len", max_model_len}}},
        {"workload", {{"arrival", "uniform"}, {"rate", "10/s"}, {"requests", 4}, {"prompt", 1000}, {"output", 100}}},
        {"generate", {{"tokens", 256}, {"seed", 1}}}};
    return error_of([&] { (void)scenario::run_serve(s); });
  };
  EXPECT_EQ(run(1100), "") << "prompt + output = 1100 fits";
  EXPECT_NE(run(1099).find("asks for 1000 prompt + 100 output tokens, more than max_model_len 1099"), std::string::npos)
      << run(1099);
  EXPECT_NE(run(1'000'000'000).find("fewer than one request of max_model_len 1000000000"), std::string::npos)
      << run(1'000'000'000);
}

// The engines' names (issue 21): vLLM's data_parallel_size + enable_expert_parallel, enable_chunked_prefill
// and kv_cache_dtype, TensorRT-LLM's moe_ep_size and enable_attention_dp, each mapped onto moesim's key,
// and refused beside a key of moesim's it contradicts.
TEST(ParamTable, EngineNamedKeysMeanWhatTheEnginesDo) {
  const auto scenario_of = [](const nlohmann::json& keys) {
    scenario::ServeScenario s;
    s.doc = {{"model", "mixtral-8x7b"},
             {"hw", "dgx-h100"},
             {"workload", {{"arrival", "uniform"}, {"rate", "10/s"}, {"requests", 2}, {"prompt", 64}, {"output", 4}}},
             {"generate", {{"tokens", 64}, {"seed", 1}}}};
    s.doc.merge_patch(keys);
    return s;
  };
  const auto resolved = [&](const nlohmann::json& keys) { return scenario::run_serve(scenario_of(keys)).scenario; };
  const nlohmann::json wide_ep =
      resolved({{"plan", {{"data_parallel_size", 8}, {"tp", 1}, {"enable_expert_parallel", true}}}}).at("plan");
  EXPECT_EQ(wide_ep, resolved({{"plan", {{"tp", 8}, {"attention_dp", true}}}}).at("plan"));
  EXPECT_EQ(wide_ep.at("moe_ep"), 8);
  EXPECT_EQ(resolved({{"plan", {{"moe_ep_size", 8}, {"enable_attention_dp", true}}}}).at("plan"), wide_ep);
  const auto ep_only = resolved({{"plan", {{"enable_expert_parallel", true}}}}).at("plan");
  EXPECT_EQ(ep_only.at("moe_ep"), 8);
  EXPECT_EQ(ep_only.at("attention_dp"), false);
  EXPECT_EQ(resolved({{"scheduler", {{"enable_chunked_prefill", false}}}}).at("scheduler").at("kind"), "continuous");

  // An fp8 cache holds twice the tokens of a bf16 one in the same memory.
  const auto kv_tokens = [&](const nlohmann::json& keys) {
    return static_cast<double>(scenario::serve_memory_plan(scenario_of(keys)).kv_tokens);
  };
  EXPECT_NEAR(kv_tokens({{"kv_cache_dtype", "fp8"}}) / kv_tokens({{"kv_cache_dtype", "auto"}}), 2.0, 0.01);

  const auto refused = [&](const nlohmann::json& keys) {
    return error_of([&] { (void)scenario::serve_memory_plan(scenario_of(keys)); });
  };
  EXPECT_NE(refused({{"plan", {{"moe_ep", 8}, {"moe_ep_size", 8}}}}).find("keep one"), std::string::npos);
  EXPECT_NE(refused({{"plan", {{"data_parallel_size", 8}, {"tp", 1}}}}).find("enable_expert_parallel"),
            std::string::npos);
  EXPECT_NE(
      refused({{"plan", {{"data_parallel_size", 2}, {"tp", 4}, {"enable_expert_parallel", true}}}}).find("$.plan.tp"),
      std::string::npos);
  EXPECT_NE(refused({{"plan", {{"enable_expert_parallel", true}, {"moe_tp", 8}}}}).find("one engine's terms"),
            std::string::npos);
  EXPECT_NE(refused({{"scheduler", {{"kind", "chunked"}, {"enable_chunked_prefill", false}}}}).find("keep one"),
            std::string::npos);
  EXPECT_NE(refused({{"kv_cache_dtype", "fp8"}, {"kv_bytes", 2}}).find("keep one"), std::string::npos);
  EXPECT_NE(refused({{"kv_cache_dtype", "fp9"}}).find("did you mean 'fp8'"), std::string::npos);
  EXPECT_EQ(refused({{"kv_cache_dtype", "fp8"}, {"kv_bytes", 1}}), "");  // agreeing keys, as a resolved scenario has
}

// scheduler_defaults vllm: vLLM's batch defaults for the node's GPU (EngineArgs.get_batch_defaults), for the
// scheduler keys the scenario leaves out.
TEST(ParamTable, VllmSchedulerDefaultsFollowTheGpu) {
  const auto on = [](const char* hw) { return scenario::vllm_batch_defaults(model::load_node(hw).devices); };
  EXPECT_EQ(on("h100-sxm").max_num_batched_tokens, 8192);
  EXPECT_EQ(on("h100-sxm").max_num_seqs, 1024);
  EXPECT_EQ(on("a100-80g").max_num_batched_tokens, 2048);  // 80 GB, but an A100
  EXPECT_EQ(on("l40s").max_num_seqs, 256);                 // under 70 GiB
  EXPECT_EQ(on("l40s").kind, sim::SchedulerKind::Chunked);
  scenario::ServeScenario s;
  s.doc = {{"model", "mixtral-8x7b"},
           {"hw", "dgx-h100"},
           {"scheduler_defaults", "vllm"},
           {"scheduler", {{"max_num_seqs", 8}}},
           {"workload", {{"arrival", "uniform"}, {"rate", "10/s"}, {"requests", 2}, {"prompt", 64}, {"output", 4}}},
           {"generate", {{"tokens", 64}, {"seed", 1}}}};
  const auto sc = scenario::run_serve(s).scenario.at("scheduler");
  EXPECT_EQ(sc.at("max_num_seqs"), 8);  // given: kept
  EXPECT_EQ(sc.at("max_num_batched_tokens"), 8192);
}

// estimate's table: model, hw and nodes are required in a file; "nic" is one id or a list of them, and its
// flag a comma-separated list; --nodes takes ranges; the help lists the keys with the request's defaults.
TEST(ParamTable, EstimateReadsNicListsAndRequiresItsKeys) {
  const auto& t = scenario::estimate_params();
  const auto r = scenario::scenario_from_json(
      {{"model", "dbrx-instruct"}, {"hw", "mac-studio-m2-ultra-192"}, {"nic", "10gbe-grpc"}, {"nodes", {2, 3}}},
      "e.json");
  EXPECT_EQ(r.nics, std::vector<std::string>{"10gbe-grpc"});
  EXPECT_EQ(r.nodes, (std::vector<std::int64_t>{2, 3}));
  EXPECT_NE(
      error_of([] {
        (void)scenario::scenario_from_json({{"model", "dbrx-instruct"}, {"hw", "mac-studio-m2-ultra-192"}}, "e.json");
      }).find("e.json: $"),
      std::string::npos)
      << "nodes is required in a file";
  po::options_description desc;
  t.add_flags(desc);
  po::variables_map vm;
  po::store(po::command_line_parser(std::vector<std::string>{"--nic", "a,b", "--nodes", "2-4"}).options(desc).run(),
            vm);
  scenario::EstimateRequest f;
  t.apply_flags(vm, f);
  EXPECT_EQ(f.nics, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.nodes, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_NE(t.help("keys").find("nodes (list of integers >= 1; default 1; --nodes)"), std::string::npos);
}
