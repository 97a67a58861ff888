// `moesim trace gen|stats|convert` end to end through the built binary: results compared field by field,
// conversions byte for byte, and the bad traces of issue 3 ("expert id out of range, wrong number of layers or
// top-k for the model, truncated binary, malformed line N"): each exits 2 with ONE line on stderr naming the
// file and the line/record, prints nothing on stdout, and leaves no output file (or temporary) behind.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../compress_support.hpp"
#include "cli_support.hpp"

namespace {

namespace fs = std::filesystem;
using moesim::test::expect_json_near;
using moesim::test::Run;
using moesim::test::Scratch;
using moesim::test::slurp;

const std::string kTraceData = std::string(MOESIM_SOURCE_DIR) + "/tests/data/traces/";

// gen writes a trace whose statistics are what was asked for: 20,000 uniform DBRX tokens with --reuse 0.3
// (exact solution; standard error of the measured reuse about 0.002 on 40 layers, so 0.01).
TEST(TraceCli, GenThenStatsJson) {
  Scratch s("moesim_trace_cli");
  const auto g =
      s.moesim("trace gen --model dbrx-instruct --tokens 20000 --reuse 0.3 --seed 3 --out " + s.path("d.mtrace"));
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_NE(g.out.find("20000 tokens"), std::string::npos) << g.out;
  const auto st = s.moesim("trace stats " + s.path("d.mtrace") + " --nodes 2 --json");
  ASSERT_EQ(st.code, 0) << st.err;
  const auto j = nlohmann::json::parse(st.out);
  EXPECT_EQ(j["trace"]["layers"], 40);
  EXPECT_EQ(j["trace"]["experts"], 16);
  EXPECT_EQ(j["trace"]["tokens"], 20000);
  EXPECT_NEAR(j["overall"]["reuse"]["value"].get<double>(), 0.3, 0.01);
  EXPECT_EQ(j["overall"]["reuse"]["unit"], "fraction");
  EXPECT_EQ(j["layers"].size(), 40u);
  // Temporal locality lowers nothing in Equation 1's per-token expectation: still 4816/1820 on two halves.
  EXPECT_NEAR(j["placement"]["max_active_per_node"]["value"].get<double>(), 2.646, 0.02);
  EXPECT_NEAR(j["placement"]["max_active_per_node_uniform_exact"]["value"].get<double>(), 4816.0 / 1820.0, 1e-9);
  // Same command, same bytes.
  ASSERT_EQ(
      s.moesim("trace gen --model dbrx-instruct --tokens 20000 --reuse 0.3 --seed 3 --out " + s.path("e.mtrace")).code,
      0);
  EXPECT_EQ(slurp(s.path("d.mtrace")), slurp(s.path("e.mtrace")));
  // The text table carries units in its headers.
  const auto text = s.moesim("trace stats " + s.path("d.mtrace"));
  ASSERT_EQ(text.code, 0) << text.err;
  for (const char* h : {"load max/mean", "reuse %", "LRU16 hit %", "distinct/batch experts"}) {
    EXPECT_NE(text.out.find(h), std::string::npos) << h;
  }
}

// jsonl -> mtrace -> jsonl gives back the committed sample byte for byte.
TEST(TraceCli, ConvertRoundTripIsByteIdentical) {
  Scratch s("moesim_trace_cli");
  ASSERT_EQ(s.moesim("trace convert " + kTraceData + "small.jsonl --out " + s.path("a.mtrace")).code, 0);
  ASSERT_EQ(s.moesim("trace convert " + s.path("a.mtrace") + " --out " + s.path("b.jsonl")).code, 0);
  EXPECT_EQ(slurp(s.path("b.jsonl")), slurp(kTraceData + "small.jsonl"));
  EXPECT_EQ(s.files(), (std::vector<std::string>{"a.mtrace", "b.jsonl"}));
}

// The three importers on their committed samples (tests/data/traces/README.md describes each).
TEST(TraceCli, ImportsThePublicFormats) {
  Scratch s("moesim_trace_cli");
  // Two per-query files: 3 prefill + 2 decode tokens, then 2 + 1; decoder layers 1 and 3 are the MoE ones.
  auto r = s.moesim("trace convert " + kTraceData + "moe_selection_q0.json " + kTraceData +
                    "moe_selection_q1.json --from moe-selection --experts 8 --out " + s.path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 tokens, 2 requests, 2 MoE layers"), std::string::npos) << r.out;
  r = s.moesim("trace convert " + kTraceData + "moe_selection_q0.json --from moe-selection --experts 8 --decode-only " +
               "--out " + s.path("md.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 tokens"), std::string::npos) << r.out;
  // 8 records, 2 identical repeats dropped: 3 tokens of 2 layers, with weights.
  r = s.moesim("trace convert " + kTraceData + "speculative_moe.jsonl --from speculative-moe --experts 8 --out " +
               s.path("sp.mtrace"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("3 tokens, 2 requests, 2 MoE layers, 8 experts, top-2, gate weights"), std::string::npos)
      << r.out;
  // vLLM: 2 prompt + 3 generated tokens in one file, 2 generated in a bare array.
  r = s.moesim("trace convert " + kTraceData + "vllm_request.json " + kTraceData +
               "vllm_bare.json --from vllm --experts 8 " + "--out " + s.path("v.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("7 tokens, 2 requests"), std::string::npos) << r.out;
  const auto st = s.moesim("trace stats " + s.path("v.jsonl") + " --json --cache-sizes 2,4");
  ASSERT_EQ(st.code, 0) << st.err;
  EXPECT_EQ(nlohmann::json::parse(st.out)["trace"]["tokens"], 7);
}

struct BadTrace {
  const char* name;
  std::string args;
  std::vector<std::string> must_mention;
};

void expect_refused(const Scratch& s, const BadTrace& c) {
  SCOPED_TRACE(c.name);
  const auto before = s.files();
  const auto r = s.moesim(c.args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& m : c.must_mention)
    EXPECT_NE(r.err.find(m), std::string::npos) << "missing '" << m << "' in: " << r.err;
  EXPECT_EQ(s.files(), before) << "an output file or temporary was left behind";
}

using moesim::test::write_compressed;

// A real excerpt end to end (tests/data/traces/README.md): speculative-moe's published Mixtral routing is
// imported without --from (the format is told from the file, and said on stderr, with the 5 incomplete tokens
// dropped), and the 4 tokens drive `moesim simulate --trace` for Mixtral-8x7B, from the .mtrace and from a
// zstd-compressed copy of it, giving the same results.
TEST(TraceCli, RealExcerptDrivesSimulate) {
  Scratch s("moesim_trace_cli");
  auto r = s.moesim("trace convert " + kTraceData +
                    "speculative_moe_humaneval_2_tail.jsonl --model mixtral-8x7b --out " + s.path("sp.mtrace"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4 tokens, 2 requests, 32 MoE layers, 8 experts, top-2, gate weights"), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("reading it as speculative-moe"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("5 incomplete tokens dropped"), std::string::npos) << r.err;
  const auto st = s.moesim("trace stats " + s.path("sp.mtrace") + " --json --cache-sizes 2,4");
  ASSERT_EQ(st.code, 0) << st.err;
  const auto sj = nlohmann::json::parse(st.out);
  EXPECT_EQ(sj["trace"]["tokens"], 4);
  EXPECT_NE(sj["trace"]["source"].get<std::string>().find("5 incomplete tokens dropped"), std::string::npos);

  write_compressed(s.path("sp.mtrace.zst"), slurp(s.path("sp.mtrace")), "zst");
  const auto a = s.moesim("simulate --model mixtral-8x7b --trace " + s.path("sp.mtrace") + " --json");
  ASSERT_EQ(a.code, 0) << a.err;
  const auto b = s.moesim("simulate --model mixtral-8x7b --trace " + s.path("sp.mtrace.zst") + " --json");
  ASSERT_EQ(b.code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  expect_json_near(jb["metrics"], ja["metrics"], "$.metrics");
  EXPECT_EQ(ja["resolved"]["trace"]["tokens"], 4) << a.out;
  EXPECT_NE(ja["resolved"]["trace"]["source"].get<std::string>().find("speculative-moe"), std::string::npos);
  bool tokens_per_s = false;
  for (const auto& m : ja["metrics"]) {
    if (m["name"] == "tokens_per_second") {
      tokens_per_s = true;
      EXPECT_GT(m["value"].get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(tokens_per_s) << a.out;

  // The same real routing in a vLLM response body (2 prompt + 3 generated tokens) drives simulate too.
  r = s.moesim("trace convert " + kTraceData + "vllm_completion_mixtral.json --model mixtral-8x7b --out " +
               s.path("v.mtrace"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("5 tokens, 1 request, 32 MoE layers, 8 experts, top-2"), std::string::npos) << r.out;
  const auto v = s.moesim("simulate --model mixtral-8x7b --trace " + s.path("v.mtrace") + " --json");
  ASSERT_EQ(v.code, 0) << v.err;
  const auto vt = nlohmann::json::parse(v.out)["resolved"]["trace"];
  EXPECT_EQ(vt["tokens"], 5) << v.out;
  EXPECT_NE(vt["source"].get<std::string>().find("vLLM /v1/completions responses"), std::string::npos) << v.out;
}

// The Llama-4-Maverick excerpt (moe-selection) drives simulate with Maverick's own config.json
// (tests/data/hf_configs): the importer checks the trace's 24 MoE layers, 128 experts and top-1 against it.
TEST(TraceCli, MaverickExcerptDrivesSimulate) {
  Scratch s("moesim_trace_cli");
  const std::string config =
      std::string(MOESIM_SOURCE_DIR) + "/tests/data/hf_configs/llama-4-maverick-17b-128e/config.json";
  auto r = s.moesim("trace convert " + kTraceData + "moe_selection_maverick_q0_steps0-12.json --model " + config +
                    " --out " + s.path("m.mtrace"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("37 tokens, 1 request, 24 MoE layers, 128 experts, top-1"), std::string::npos) << r.out;
  const auto sim = s.moesim("simulate --model " + config + " --trace " + s.path("m.mtrace") + " --json");
  ASSERT_EQ(sim.code, 0) << sim.err;
  const auto j = nlohmann::json::parse(sim.out);
  EXPECT_EQ(j["resolved"]["trace"]["tokens"], 37) << sim.out;
  EXPECT_NE(j["resolved"]["trace"]["source"].get<std::string>().find("MoE_expert_selection_trace"), std::string::npos);
}

// The other public formats without --from: the raw profiler output, a vLLM response body, the Maverick
// excerpt (whose decode-only trace has one degenerate layer, flagged by `trace stats` in text and JSON), and
// moesim's own formats gzip-compressed.
TEST(TraceCli, DetectsFormatsAndFlagsDegenerateLayers) {
  Scratch s("moesim_trace_cli");
  auto r = s.moesim("trace convert " + kTraceData + "speculative_moe_raw_excerpt.jsonl --experts 8 --out " +
                    s.path("raw.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("5 tokens, 1 request"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("3 incomplete tokens dropped"), std::string::npos) << r.err;
  r = s.moesim("trace convert " + kTraceData + "vllm_completion_lists.json --experts 8 --out " + s.path("v.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("9 tokens, 2 requests"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("reading it as vllm"), std::string::npos) << r.err;

  r = s.moesim("trace convert " + kTraceData +
               "moe_selection_maverick_q0_steps0-12.json --experts 128 --decode-only --out " + s.path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("12 tokens, 1 request, 24 MoE layers, 128 experts, top-1"), std::string::npos) << r.out;
  write_compressed(s.path("m.jsonl.gz"), slurp(s.path("m.jsonl")), "gz");
  const auto text = s.moesim("trace stats " + s.path("m.jsonl.gz") + " --cache-sizes 16");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("degenerate layers: 1 of 24 layers send every token to one expert: layer 22 (expert 40)"),
            std::string::npos)
      << text.out;
  const auto js = s.moesim("trace stats " + s.path("m.jsonl.gz") + " --cache-sizes 16 --json");
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["degenerate_layers"], nlohmann::json::array({22}));
  EXPECT_EQ(j["layers"][22]["degenerate"], true);
  EXPECT_EQ(j["layers"][22]["top_expert"], 40);
  EXPECT_EQ(j["layers"][22]["top_expert_share"]["value"], 1.0);
  EXPECT_EQ(j["layers"][21]["degenerate"], false);

  // moesim's own formats, compressed, convert without --from and back to the same bytes.
  write_compressed(s.path("small.jsonl.zst"), slurp(kTraceData + "small.jsonl"), "zst");
  ASSERT_EQ(s.moesim("trace convert " + s.path("small.jsonl.zst") + " --out " + s.path("back.jsonl")).code, 0);
  EXPECT_EQ(slurp(s.path("back.jsonl")), slurp(kTraceData + "small.jsonl"));
}

// Refusals of the new inputs, each one line: a file of no known format (instead of a JSON syntax error), a
// decompression bomb (budget 1 MiB through MOESIM_MEMORY_LIMIT), a damaged gzip file.
TEST(TraceCli, BadCompressedAndUnknownInputsAreRefused) {
  Scratch s("moesim_trace_cli");
  s.write("other.json", R"({"tokens": [1, 2, 3]})");
  write_compressed(s.path("bomb.jsonl.zst"), std::string(8 << 20, '\n'), "zst");
  write_compressed(s.path("good.jsonl.gz"), slurp(kTraceData + "small.jsonl"), "gz");
  const std::string gz = slurp(s.path("good.jsonl.gz"));
  s.write("cut.jsonl.gz", gz.substr(0, gz.size() - 12));
  const std::string out = " --out " + s.path("result.mtrace");
  ::setenv("MOESIM_MEMORY_LIMIT", "1MiB", 1);
  expect_refused(s, {"decompression bomb",
                     "trace stats " + s.path("bomb.jsonl.zst"),
                     {"bomb.jsonl.zst", "zstd data that decompresses to more than 1.00 MiB", "decompression bomb"}});
  expect_refused(s, {"decompression bomb (simulate)",
                     "simulate --trace " + s.path("bomb.jsonl.zst"),
                     {"bomb.jsonl.zst", "decompression bomb"}});
  ::unsetenv("MOESIM_MEMORY_LIMIT");
  expect_refused(s, {"unknown format without --from",
                     "trace convert " + s.path("other.json") + " --experts 8" + out,
                     {"other.json: cannot tell the trace format", "keys tokens", "--from", "speculative-moe"}});
  expect_refused(s, {"damaged gzip", "trace stats " + s.path("cut.jsonl.gz"), {"cut.jsonl.gz", "not valid gzip"}});
}

TEST(TraceCli, HelpListsOptionsAndPresets) {
  Scratch s("moesim_trace_cli");
  const auto g = s.moesim("trace gen --help");
  EXPECT_EQ(g.code, 0);
  for (const char* w : {"--reuse", "--max-mean-load", "--lru-hit", "--rho", "--zipf-s", "mixtral-reuse",
                        "flash-moe-qwen3.5", "deepseek-eplb"}) {
    EXPECT_NE(g.out.find(w), std::string::npos) << w;
  }
  EXPECT_EQ(s.moesim("trace stats --help").code, 0);
  EXPECT_EQ(s.moesim("trace convert --help").code, 0);
  EXPECT_EQ(s.moesim("trace --help").code, 0);
}

TEST(TraceCli, BadTracesAreRefused) {
  Scratch s("moesim_trace_cli");
  const std::string good = slurp(kTraceData + "small.jsonl");
  auto lines = [&] {
    std::vector<std::string> v;
    std::istringstream in(good);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }();
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& l : v) out += l + "\n";
    return out;
  };
  auto bad_id = lines;
  bad_id[2].replace(bad_id[2].find("[3,1]"), 5, "[3,9]");
  s.write("bad_id.jsonl", join(bad_id));
  auto malformed = lines;
  malformed[3].pop_back();
  s.write("malformed.jsonl", join(malformed));
  auto topk = lines;
  topk[1].replace(topk[1].find("[3,5]"), 5, "[3,5,1]");
  s.write("topk.jsonl", join(topk));
  ASSERT_EQ(s.moesim("trace convert " + kTraceData + "small.jsonl --out " + s.path("good.mtrace")).code, 0);
  const std::string bin = slurp(s.path("good.mtrace"));
  s.write("cut.mtrace", bin.substr(0, bin.size() - 40));  // records are 32 bytes: ends 24 bytes into record 3
  s.write("conflict.jsonl",
          R"({"problem_id": 0, "layer": 0, "experts": [1, 2], "gating_probs": [0.5, 0.5], "token_idx": 0})"
          "\n"
          R"({"problem_id": 0, "layer": 0, "experts": [1, 3], "gating_probs": [0.5, 0.5], "token_idx": 0})"
          "\n");

  const std::string out = " --out " + s.path("result.mtrace");
  const std::vector<BadTrace> cases = {
      {"expert id out of range",
       "trace convert " + s.path("bad_id.jsonl") + out,
       {"bad_id.jsonl: line 3", "$.experts[0][1]", "out of range [0, 8)"}},
      {"expert id out of range (stats)", "trace stats " + s.path("bad_id.jsonl"), {"bad_id.jsonl: line 3"}},
      {"malformed line",
       "trace convert " + s.path("malformed.jsonl") + out,
       {"malformed.jsonl: line 4, column", "malformed JSON"}},
      {"top-k of the line", "trace convert " + s.path("topk.jsonl") + out, {"topk.jsonl: line 2", "top_k is 2"}},
      {"wrong layers and top-k for the model",
       "trace convert " + kTraceData + "small.jsonl --model dbrx-instruct" + out,
       {"small.jsonl", "MoE layers 2 vs 40", "top-k 2 vs 4", "--model mixtral-8x7b"}},
      {"truncated binary",
       "trace convert " + s.path("cut.mtrace") + " --out " + s.path("result.jsonl"),
       {"cut.mtrace", "truncated at record 3", "24 bytes into it"}},
      {"truncated binary (stats)", "trace stats " + s.path("cut.mtrace"), {"cut.mtrace", "record 3"}},
      {"conflicting duplicate records",
       "trace convert " + s.path("conflict.jsonl") +
           " --from speculative-moe "
           "--experts 8" +
           out,
       {"conflict.jsonl: line 2", "conflicts with line 1"}},
      {"importer without an expert count",
       "trace convert " + kTraceData + "vllm_bare.json --from vllm" + out,
       {"--model", "--experts"}},
      {"importer id beyond the experts given",
       "trace convert " + kTraceData + "vllm_bare.json --from vllm --experts 3" + out,
       {"vllm_bare.json: $[0][0][0]", "out of range [0, 3)"}},
      {"unknown input format",
       "trace convert " + kTraceData + "small.jsonl --from parquet" + out,
       {"--from", "moe-selection"}},
      {"missing file", "trace stats " + s.path("nope.jsonl"), {"nope.jsonl", "no such file"}},
      {"unreachable reuse", "trace gen --model mixtral-8x7b --tokens 100 --reuse 0.1" + out, {"--reuse", "[0.25, 1]"}},
      {"unknown preset", "trace gen --preset mixtral --tokens 100" + out, {"did you mean 'mixtral-reuse'"}},
      {"dense model", "trace gen --model llama-3.1-8b --tokens 100" + out, {"dense"}},
      {"output directory missing",
       "trace gen --model mixtral-8x7b --tokens 100 --out " + s.path("no/dir/t.jsonl"),
       {"no/dir/t.jsonl", "cannot write"}},
      {"unknown extension",
       "trace gen --model mixtral-8x7b --tokens 100 --out " + s.path("t.txt"),
       {"t.txt", ".mtrace"}},
      {"cache smaller than top-k",
       "trace stats " + kTraceData + "small.jsonl --cache-sizes 1",
       {"--cache-sizes", "top_k"}},
      {"unknown subcommand", "trace generate", {"did you mean 'gen'"}},
  };
  for (const auto& c : cases) expect_refused(s, c);
}

}  // namespace
