// The catalogue of bad inputs, across every command (issue 8 part 3): each case exits 2, prints ONE line
// on stderr that names the file / field / flag / record and says how to fix it, prints nothing on stdout,
// and leaves no output file behind (neither the file it was asked to write nor a temporary one).
// The error format is documented in the README ("Errors").

#include <map>

#include "cli_support.hpp"

using namespace moesim::test;

namespace {

struct Case {
  const char* name;
  std::string args;                       ///< "{d}" is replaced by the scratch folder
  std::vector<std::string> must_mention;  ///< substrings of the one-line message ("{d}" replaced too)
  std::vector<std::string> outputs;       ///< files (in the scratch folder) that must not exist afterwards
};

std::string expand(std::string s, const std::string& dir) {
  for (auto at = s.find("{d}"); at != std::string::npos; at = s.find("{d}", at + dir.size())) s.replace(at, 3, dir);
  return s;
}

const char* const kNicNegative =
    R"({"id": "x", "kind": "nic", "name": "x", "latency": {"value": "1ms", "source": "t"},
        "bandwidth": {"value": "-10Gb/s", "source": "t"}, "price": {"value": "1USD", "source": "t"}})";
const char* const kNicNoUnit =
    R"({"id": "x", "kind": "nic", "name": "x", "latency": {"value": "1", "source": "t"},
        "bandwidth": {"value": "10Gb/s", "source": "t"}, "price": {"value": "1USD", "source": "t"}})";
const char* const kConfigNegativeLayers =
    R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": -2,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000})";

}  // namespace

TEST(BadInputCatalogue, EveryCommandRefusesWithOneLineAndLeavesNothing) {
  Scratch s("catalogue");
  const std::string d = s.path();
  s.write("trunc.json", R"({"model": "dbrx-instruct", "hw": "mac-studio-m2-ultra-192", "nodes": 2)");
  s.write("strnodes.json", R"({"model": "dbrx-instruct", "nodes": "2"})");
  s.write("nic-negative.json", kNicNegative);
  s.write("nic-nounit.json", kNicNoUnit);
  s.write("config-negative.json", kConfigNegativeLayers);
  s.write("not-json.json", "this is not JSON");
  // Found by fuzzing: a number beyond a double escaped the JSON readers as an uncaught exception (exit 1).
  s.write("huge-number.json", R"({"model": "dbrx-instruct", "nodes": 1e400})");
  s.write("empty-axis.json", R"({"models": [], "hw": ["dgx-h100"]})");
  s.write("all-removed.json", R"({"models": ["dbrx-instruct"], "hw": ["mac-studio-m2-ultra-192"], "nodes": [2, 4],
    "nics": ["10gbe-grpc"], "constraints": {"budget": "1000USD"}})");
  s.write("unitless-slo.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"],
    "constraints": {"min_tokens_per_s": "5"}})");
  s.write("grid-ok.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"]})");
  s.write("arrivals-negative.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,10\n-1,10,10\n");
  s.write("arrivals-nocolumn.csv", "time,prompt_tokens,output_tokens\n0,10,10\n");
  s.write("measured-nospeed.json", R"({"source": "t", "runs": [{"name": "a", "scenario": {"model": "dbrx-instruct"},
    "measured": {"split": {"moe": "0.1s"}}}]})");
  s.write("cut.safetensors", std::string("\xff\xff\x00\x00\x00\x00\x00\x00{\"a\":", 13));
  {
    const auto r = s.moesim("trace gen --model dbrx-instruct --tokens 3 --out " + s.path("t.jsonl"));
    ASSERT_EQ(r.code, 0) << r.err;
    std::string t = slurp(s.path("t.jsonl"));
    const auto at = t.find("\"experts\":[[");
    ASSERT_NE(at, std::string::npos);
    const auto comma = t.find(',', at + 12);
    t.replace(at + 12, comma - (at + 12), "99");  // expert 99 of a 16-expert model
    s.write("expert99.jsonl", t);
  }

  const std::vector<Case> cases = {
      // estimate: model, hardware, NIC profiles, node counts, precisions, scenarios
      {"unknown model", "estimate --model dbrx --hw dgx-h100", {"unknown model 'dbrx'", "dbrx-instruct"}, {}},
      {"unknown node profile", "estimate --model dbrx-instruct --hw dgx", {"'dgx'", "moesim hw"}, {}},
      {"zero nodes", "estimate --model dbrx-instruct --hw dgx-h100 --nodes 0", {"--nodes", "at least 1"}, {}},
      {"negative bandwidth",
       "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nodes 2 --nic {d}/nic-negative.json",
       {"nic-negative.json", "bandwidth"},
       {}},
      {"unit-less latency",
       "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nodes 2 --nic {d}/nic-nounit.json",
       {"nic-nounit.json", "$.latency", "unit"},
       {}},
      {"number beyond a double",
       "estimate --scenario {d}/huge-number.json",
       {"huge-number.json", "malformed JSON", "number overflow", "1e400"},
       {}},
      {"truncated scenario JSON", "estimate --scenario {d}/trunc.json", {"trunc.json", "malformed JSON", "line"}, {}},
      {"missing scenario", "estimate --scenario {d}/missing.json", {"missing.json", "no such file"}, {}},
      {"unknown precision", "estimate --model dbrx-instruct --hw dgx-h100 --precision bf17", {"bf17"}, {}},
      {"config.json with negative layers",
       "estimate --model {d}/config-negative.json --hw dgx-h100",
       {"config-negative.json", "num_hidden_layers"},
       {}},
      {"NIC missing for several nodes",
       "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nodes 2",
       {"--nic"},
       {}},
      // simulate
      {"string where a count belongs",
       "simulate --scenario {d}/strnodes.json --per-token {d}/pt.csv",
       {"strnodes.json", "$.nodes", "integer"},
       {"pt.csv"}},
      {"unknown strategy", "simulate --strategy P-XX --chrome-trace {d}/ct.json", {"P-XX", "P-LR-D"}, {"ct.json"}},
      {"unknown placement", "simulate --placement nope", {"'nope'", "replicated-groups"}, {}},
      {"trace with an expert id out of range",
       "simulate --trace {d}/expert99.jsonl --per-token {d}/pt2.csv",
       {"expert99.jsonl", "99"},
       {"pt2.csv"}},
      // serve
      {"tp that does not fill the devices",
       "serve --model mixtral-8x7b --hw dgx-h100 --tp 3 --requests-out {d}/r.csv",
       {"tp", "devices"},
       {"r.csv"}},
      {"unit-less request rate", "serve --rate 5", {"workload.rate", "has no unit", "2/s"}, {}},
      {"request trace going back in time",
       "serve --request-trace {d}/arrivals-negative.csv --steps-out {d}/s.csv",
       {"arrivals-negative.csv", "line 3"},
       {"s.csv"}},
      {"request trace without a time column",
       "serve --request-trace {d}/arrivals-nocolumn.csv",
       {"arrivals-nocolumn.csv", "arrival_s"},
       {}},
      {"model that does not fit",
       "serve --model llama-3.1-405b --hw dgx-h100 --chrome-trace {d}/sct.json",
       {"does not fit", "would fit"},
       {"sct.json"}},
      // trace
      {"zero tokens", "trace gen --model dbrx-instruct --tokens 0 --out {d}/z.mtrace", {"--tokens"}, {"z.mtrace"}},
      {"missing trace", "trace stats {d}/nope.mtrace", {"nope.mtrace", "no such file"}, {}},
      {"trace stats of an out-of-range expert", "trace stats {d}/expert99.jsonl", {"expert99.jsonl", "99"}, {}},
      {"unknown importer",
       "trace convert {d}/t.jsonl --from nope --model dbrx-instruct --out {d}/c.jsonl",
       {"nope"},
       {"c.jsonl"}},
      // cost, models, hw, unknown commands and options
      {"cost of several nodes without a NIC", "cost --hw dgx-h100 --nodes 2", {"--nic"}, {}},
      {"unknown option", "models --bogus", {"--bogus", "--help"}, {}},
      {"unknown command", "estimat", {"estimat", "did you mean", "estimate"}, {}},
      // calibrate
      {"missing measured runs", "calibrate fit --measured {d}/nope.json --out {d}/f.json", {"nope.json"}, {"f.json"}},
      {"measured run without a speed",
       "calibrate fit --measured {d}/measured-nospeed.json --out {d}/f2.json",
       {"measured-nospeed.json", "tokens_per_s"},
       {"f2.json"}},
      {"unknown kernel dtype", "calibrate kernels --dtypes f64 --out {d}/k.json", {"--dtypes", "f64"}, {"k.json"}},
      {"unit-less array size",
       "calibrate memory --array-size 5 --out {d}/m.json",
       {"--array-size", "unit"},
       {"m.json"}},
      {"storage directory missing",
       "calibrate storage --dir {d}/nodir --out {d}/st.json",
       {"--dir", "does not exist"},
       {"st.json"}},
      {"unresolvable ping-pong peer",
       "calibrate net --connect nohost.invalid:1 --out {d}/n.json",
       {"nohost.invalid", "resolve"},
       {"n.json"}},
      // the reference path
      {"missing checkpoint", "ref run --checkpoint {d}/nockpt --timing-out {d}/tm.csv", {"nockpt"}, {"tm.csv"}},
      {"truncated safetensors header", "ref run --checkpoint {d}/cut.safetensors", {"cut.safetensors"}, {}},
      {"validate without a profile", "validate --checkpoint {d}/nockpt", {"--hw"}, {}},
      // sweep
      {"grid that is not JSON",
       "sweep --grid {d}/not-json.json --csv {d}/p.csv",
       {"not-json.json", "malformed JSON"},
       {"p.csv"}},
      {"empty grid axis",
       "sweep --grid {d}/empty-axis.json --json-out {d}/p.json",
       {"empty-axis.json", "$.models"},
       {"p.json"}},
      {"every point removed",
       "sweep -q --grid {d}/all-removed.json --csv {d}/p2.csv",
       {"all-removed.json", "over the budget"},
       {"p2.csv"}},
      {"unit-less SLO",
       "sweep --grid {d}/unitless-slo.json",
       {"unitless-slo.json", "min_tokens_per_s", "tokens/s"},
       {}},
      {"sweep output into a missing folder",
       "sweep -q --grid {d}/grid-ok.json --csv {d}/no/such/p.csv",
       {"no/such/p.csv"},
       {}},
      {"negative simulate count", "sweep --grid {d}/grid-ok.json --simulate -3", {"--simulate"}, {}},
      // report
      {"report of a bad grid",
       "report -q --grid {d}/strnodes.json --out {d}/rep",
       {"strnodes.json", "models"},
       {"rep"}},
      {"report into a missing folder", "report -q --out {d}/no/such/rep", {"--out", "does not exist"}, {}},
      {"report onto a file", "report -q --out {d}/trunc.json", {"--out", "is a file"}, {}},
  };
  ASSERT_GE(cases.size(), 40u);
  std::map<std::string, int> commands;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto r = s.moesim(expand(c.args, d));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("moesim", 0), 0u) << "the line starts with moesim and the command: " << r.err;
    for (const auto& m : c.must_mention)
      EXPECT_NE(r.err.find(expand(m, d)), std::string::npos) << "missing '" << m << "' in: " << r.err;
    for (const auto& o : c.outputs) EXPECT_FALSE(fs::exists(s.path(o))) << o << " was left behind";
    ++commands[std::string(c.args.substr(0, c.args.find(' ')))];
  }
  for (const auto& f : s.files()) EXPECT_EQ(f.find(".tmp-"), std::string::npos) << f << " was left behind";
  // Every command with inputs is in the catalogue.
  for (const char* cmd :
       {"estimate", "simulate", "serve", "trace", "cost", "calibrate", "ref", "validate", "sweep", "report", "models"})
    EXPECT_GT(commands[cmd], 0) << cmd;
}

// Issue 18 part 5: sizes beyond the memory budget are refused before anything is allocated (one line, exit
// 2), not ended by std::bad_alloc or an internal check. MOESIM_MEMORY_LIMIT=1GiB makes the budget the same
// on every machine; every case here asks for far more than that, and is refused before any work.
TEST(BadInputCatalogue, SizesBeyondMemoryAreRefused) {
  Scratch s("catalogue_memory");
  const std::string d = s.path();
  // A Mixtral-family config.json with five million experts per layer (a tiny model otherwise).
  s.write("huge-experts.json",
          R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 5000000,
              "num_experts_per_tok": 2, "vocab_size": 100})");
  s.write("grid-nodes.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "nodes": [1000000000000000000],
    "nics": ["10gbe-grpc"]})");
  s.write("grid-nodes-float.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "nodes": [1e18],
    "nics": ["10gbe-grpc"]})");
  s.write("grid-tokens.json", R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "simulate": {"tokens": 1e12}})");
  s.write("grid-tokens-huge.json",
          R"({"models": ["dbrx-instruct"], "hw": ["dgx-h100"], "simulate": {"tokens": 1e30}})");
  const std::vector<Case> cases = {
      {"simulate: a generated trace too large",
       "simulate --tokens 30000000 --per-token {d}/pt.csv",
       {"30000000 tokens", "MOESIM_MEMORY_LIMIT", "--tokens"},
       {"pt.csv"}},
      {"simulate: a Chrome trace too large",
       "simulate --tokens 100000 --chrome-tokens 100000 --chrome-trace {d}/ct.json",
       {"--chrome-trace", "MOESIM_MEMORY_LIMIT", "--chrome-tokens"},
       {"ct.json"}},
      {"serve: outputs too long",
       "serve --output 1000000000000 --requests-out {d}/r.csv",
       {"output tokens", "MOESIM_MEMORY_LIMIT", "--output"},
       {"r.csv"}},
      {"trace gen: too many tokens",
       "trace gen --model dbrx-instruct --tokens 1000000000000 --out {d}/t.mtrace",
       {"1000000000000 tokens", "MOESIM_MEMORY_LIMIT", "--tokens"},
       {"t.mtrace"}},
      {"trace gen: too many layers",
       "trace gen --model dbrx-instruct --layers 100000000 --out {d}/l.mtrace",
       {"100000000 MoE layers", "MOESIM_MEMORY_LIMIT"},
       {"l.mtrace"}},
      {"ref init: millions of experts",
       "ref init --config {d}/huge-experts.json --out {d}/ckpt",
       {"5000000 experts", "MOESIM_MEMORY_LIMIT", "num_local_experts"},
       {"ckpt"}},
      {"sweep: a node count beyond the limit",
       "sweep -q --grid {d}/grid-nodes.json --csv {d}/p.csv",
       {"grid-nodes.json", "$.nodes[0]", "65536"},
       {"p.csv"}},
      {"sweep: a node count as a huge float", "sweep -q --grid {d}/grid-nodes-float.json", {"$.nodes[0]"}, {}},
      {"sweep: simulate.tokens too large",
       "sweep -q --grid {d}/grid-tokens.json --csv {d}/p2.csv",
       {"1000000000000 tokens", "MOESIM_MEMORY_LIMIT"},
       {"p2.csv"}},
      {"sweep: simulate.tokens beyond a 64-bit count",
       "sweep -q --grid {d}/grid-tokens-huge.json",
       {"grid-tokens-huge.json", "tokens", "too large"},
       {}},
      {"report: simulate.tokens too large",
       "report -q --grid {d}/grid-tokens.json --out {d}/rep",
       {"1000000000000 tokens", "MOESIM_MEMORY_LIMIT"},
       {"rep"}},
      {"calibrate kernels: a memory bandwidth beyond any machine",
       "calibrate kernels --memory-bandwidth 5PB/s --out {d}/k.json",
       {"--memory-bandwidth", "1PB/s"},
       {"k.json"}},
      {"calibrate kernels: a memory bandwidth near zero",
       "calibrate kernels --memory-bandwidth 20kB/s --out {d}/k2.json",
       {"--memory-bandwidth", "1MB/s"},
       {"k2.json"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto r = s.shell("MOESIM_MEMORY_LIMIT=1GiB " + std::string(MOESIM_BINARY) + " " + expand(c.args, d));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("moesim", 0), 0u) << "the line starts with moesim and the command: " << r.err;
    for (const auto& m : c.must_mention)
      EXPECT_NE(r.err.find(expand(m, d)), std::string::npos) << "missing '" << m << "' in: " << r.err;
    for (const auto& o : c.outputs) EXPECT_FALSE(fs::exists(s.path(o))) << o << " was left behind";
  }
  for (const auto& f : s.files()) EXPECT_EQ(f.find(".tmp-"), std::string::npos) << f << " was left behind";
}
