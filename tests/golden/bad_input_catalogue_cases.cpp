// The cases of the bad-input catalogue (bad_input_catalogue.hpp) and the files they read; the checks each
// case must pass are in test_bad_input_catalogue.cpp.

#include "bad_input_catalogue.hpp"

namespace moesim::test {
namespace {

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

/// `estimate`: model, hardware, NIC profiles, node counts, precisions, scenarios.
std::vector<CatalogueCase> estimate_cases() {
  return {
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
      {"runtime profile that gives no figure",
       "estimate --model tinymistral-6x248m --hw l4 --runtime {d}/runtime-empty.json",
       {"runtime-empty.json", "gives no figure", "kernel_overhead"},
       {}},
      {"runtime profile with a misspelled figure",
       "estimate --model tinymistral-6x248m --hw l4 --runtime {d}/runtime-typo.json",
       {"runtime-typo.json", "kernel_overheads", "kernel_overhead"},
       {}},
      {"NIC missing for several nodes",
       "estimate --model dbrx-instruct --hw mac-studio-m2-ultra-192 --nodes 2",
       {"--nic"},
       {}},
  };
}

/// `simulate`.
std::vector<CatalogueCase> simulate_cases() {
  return {
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
  };
}

/// `serve`.
std::vector<CatalogueCase> serve_cases() {
  return {
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
  };
}

/// `trace gen|stats|convert`.
std::vector<CatalogueCase> trace_cases() {
  return {
      {"zero tokens", "trace gen --model dbrx-instruct --tokens 0 --out {d}/z.mtrace", {"--tokens"}, {"z.mtrace"}},
      {"missing trace", "trace stats {d}/nope.mtrace", {"nope.mtrace", "no such file"}, {}},
      {"trace stats of an out-of-range expert", "trace stats {d}/expert99.jsonl", {"expert99.jsonl", "99"}, {}},
      {"unknown importer",
       "trace convert {d}/t.jsonl --from nope --model dbrx-instruct --out {d}/c.jsonl",
       {"nope"},
       {"c.jsonl"}},
  };
}

/// `cost`, `models`, unknown commands and options.
std::vector<CatalogueCase> general_cases() {
  return {
      {"cost of several nodes without a NIC", "cost --hw dgx-h100 --nodes 2", {"--nic"}, {}},
      {"unknown option", "models --bogus", {"--bogus", "--help"}, {}},
      {"unknown command", "estimat", {"estimat", "did you mean", "estimate"}, {}},
  };
}

/// `calibrate fit|kernels|memory|storage|net`.
std::vector<CatalogueCase> calibrate_cases() {
  return {
      {"missing measured runs", "calibrate fit --measured {d}/nope.json --out {d}/f.json", {"nope.json"}, {"f.json"}},
      {"measured run without a speed",
       "calibrate fit --measured {d}/measured-nospeed.json --out {d}/f2.json",
       {"measured-nospeed.json", "tokens_per_s"},
       {"f2.json"}},
      {"vLLM serving result without its request rate",
       "calibrate fit --vllm-serving {d}/vllm-norate.json --model llama-3.1-8b --hw h100-sxm --runtime vllm "
       "--out {d}/v.json",
       {"vllm-norate.json", "request_rate", "--save-result"},
       {"v.json"}},
      {"llama-bench table with a bad t/s cell",
       "calibrate fit --llama-bench {d}/bench.md --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime "
       "llama.cpp-metal --out {d}/lb.json",
       {"bench.md", "line 3", "t/s"},
       {"lb.json"}},
      {"mlx_lm.generate output with a bad Generation rate",
       "calibrate fit --mlx-lm {d}/mlx-badrate.txt --precision q4 --model llama-3.1-8b --hw mac-studio-m2-ultra-192 "
       "--runtime mlx --out {d}/mx.json",
       {"mlx-badrate.txt", "line 3", "Generation", "tokens-per-sec", "--verbose"},
       {"mx.json"}},
      {"mlx_lm.generate output cut after its Prompt line",
       "calibrate fit --mlx-lm {d}/mlx-cut.txt --precision q4 --model llama-3.1-8b --hw mac-studio-m2-ultra-192 "
       "--runtime mlx --out {d}/mx2.json",
       {"mlx-cut.txt", "line 2", "no Generation line"},
       {"mx2.json"}},
      {"mlx_lm.generate output without --precision",
       "calibrate fit --mlx-lm {d}/mlx-cut.txt --model llama-3.1-8b --hw mac-studio-m2-ultra-192 --runtime mlx "
       "--out {d}/mx3.json",
       {"--mlx-lm", "--precision", "q4"},
       {"mx3.json"}},
      {"llama-batched-bench table without its main: line",
       "calibrate fit --llama-batched-bench {d}/bb-nomain.txt --precision q8_0 --model llama-3.1-8b --hw "
       "mac-studio-m2-ultra-192 --runtime llama.cpp-metal --out {d}/bb.json",
       {"bb-nomain.txt", "line 1", "main: n_kv_max", "n_ubatch"},
       {"bb.json"}},
      {"llama-batched-bench table with a bad S_TG cell",
       "calibrate fit --llama-batched-bench {d}/bb-badcell.txt --precision q8_0 --model llama-3.1-8b --hw "
       "mac-studio-m2-ultra-192 --runtime llama.cpp-metal --out {d}/bb2.json",
       {"bb-badcell.txt", "line 5", "S_TG t/s", "-nan"},
       {"bb2.json"}},
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
  };
}

/// The reference path: `ref run` and `validate`.
std::vector<CatalogueCase> reference_cases() {
  return {
      {"missing checkpoint", "ref run --checkpoint {d}/nockpt --timing-out {d}/tm.csv", {"nockpt"}, {"tm.csv"}},
      {"truncated safetensors header", "ref run --checkpoint {d}/cut.safetensors", {"cut.safetensors"}, {}},
      {"validate without a profile", "validate --checkpoint {d}/nockpt", {"--hw"}, {}},
  };
}

/// `sweep`.
std::vector<CatalogueCase> sweep_cases() {
  return {
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
  };
}

/// `report`.
std::vector<CatalogueCase> report_cases() {
  return {
      {"report of a bad grid",
       "report -q --grid {d}/strnodes.json --out {d}/rep",
       {"strnodes.json", "models"},
       {"rep"}},
      {"report into a missing folder", "report -q --out {d}/no/such/rep", {"--out", "does not exist"}, {}},
      {"report onto a file", "report -q --out {d}/trunc.json", {"--out", "is a file"}, {}},
  };
}
}  // namespace

// Files the cases read (see bad_input_catalogue.hpp).
void write_catalogue_inputs(const Scratch& s) {
  s.write("trunc.json", R"({"model": "dbrx-instruct", "hw": "mac-studio-m2-ultra-192", "nodes": 2)");
  s.write("strnodes.json", R"({"model": "dbrx-instruct", "nodes": "2"})");
  s.write("nic-negative.json", kNicNegative);
  s.write("nic-nounit.json", kNicNoUnit);
  s.write("config-negative.json", kConfigNegativeLayers);
  s.write("runtime-empty.json", R"({"id": "r@l4", "kind": "runtime", "runtime": "r", "hw": "l4"})");
  s.write("runtime-typo.json", R"({"id": "r@l4", "kind": "runtime", "runtime": "r", "hw": "l4",
    "kernel_overheads": {"value": "5us", "source": "t"}})");
  s.write("not-json.json", "this is not JSON");
  s.write("vllm-norate.json", R"({"num_prompts": 2, "completed": 2, "duration": 1.0, "total_input_tokens": 10,
      "total_output_tokens": 10, "request_throughput": 2.0, "output_throughput": 10.0, "mean_ttft_ms": 50.0,
      "mean_tpot_ms": 8.0})");
  s.write("bench.md",
          "| model | size | params | backend | ngl | test | t/s |\n| --- | --: | --: | --- | --: | --: | --: |\n"
          "| llama 8B F16 | 1 GiB | 8 B | Metal | 99 | tg32 | many |\n");
  s.write("mlx-badrate.txt",
          "==========\nPrompt: 25 tokens, 180.302 tokens-per-sec\n"
          "Generation: 100 tokens, fast tokens-per-sec\nPeak memory: 5.123 GB\n");
  s.write("mlx-cut.txt", "==========\nPrompt: 25 tokens, 180.302 tokens-per-sec\n");
  const std::string bb_table =
      "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n"
      "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n";
  s.write("bb-nomain.txt", bb_table +
                               "|   512 |     32 |    1 |    544 |    0.337 |  1518.90 |    0.405 |    79.04 "
                               "|    0.742 |   733.22 |\n");
  s.write("bb-badcell.txt",
          "main: n_kv_max = 4096, n_batch = 2048, n_ubatch = 512, flash_attn = 0, is_pp_shared = 0, "
          "n_gpu_layers = 99, n_threads = 16, n_threads_batch = 16\n\n" +
              bb_table +
              "|   512 |     32 |    1 |    544 |    0.337 |  1518.90 |    0.405 |     -nan "
              "|    0.742 |   733.22 |\n");
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
}

/// Every case, in the order of the groups above.
std::vector<CatalogueCase> catalogue_cases() {
  std::vector<CatalogueCase> all;
  for (const auto& group : {estimate_cases(), simulate_cases(), serve_cases(), trace_cases(), general_cases(),
                            calibrate_cases(), reference_cases(), sweep_cases(), report_cases()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

}  // namespace moesim::test
