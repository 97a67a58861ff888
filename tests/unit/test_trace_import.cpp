// Importers of public routing traces on real excerpts (tests/data/traces/README.md gives each one's source
// and selection), compressed inputs and their bound, and format detection. The expectations are counted from
// the excerpts by hand (the README lists the complete and incomplete tokens of each).

#include <gtest/gtest.h>

#include <boost/iostreams/copy.hpp>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filter/zstd.hpp>
#include <boost/iostreams/filtering_stream.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../compress_support.hpp"
#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/sim/trace_import.hpp"
#include "moesim/sim/trace_input.hpp"
#include "moesim/sim/trace_io.hpp"
#include "moesim/sim/trace_stats.hpp"

namespace {

namespace fs = std::filesystem;
namespace sim = moesim::sim;
using moesim::test::error_of;
using moesim::test::slurp;

const std::string kImportTraces = std::string(MOESIM_SOURCE_DIR) + "/tests/data/traces/";

/// A scratch folder for one test (test::TestDir: made new by mkdtemp), removed at its end.
class ImportScratch {
 public:
  explicit ImportScratch(const std::string& name) : dir_("moesim_import_" + name) {}
  [[nodiscard]] std::string path(const std::string& f) const { return (dir_.path() / f).string(); }
  /// Writes `bytes` compressed with gzip ("gz") or zstd ("zst") to `f`; returns its path.
  [[nodiscard]] std::string compressed(const std::string& f, const std::string& bytes, const std::string& kind) const {
    moesim::test::write_compressed(path(f), bytes, kind);
    return path(f);
  }

 private:
  moesim::test::TestDir dir_;
};

/// Mixtral-8x7B's shape, as --model mixtral-8x7b gives it: 32 MoE layers, 8 experts, top-2.
sim::ImportOptions mixtral(std::vector<std::string>* notes = nullptr) {
  sim::ImportOptions o;
  o.experts = 8;
  o.layers = 32;
  o.top_k = 2;
  o.model = "mixtral-8x7b";
  if (notes) o.note = [notes](const std::string& s) { notes->push_back(s); };
  return o;
}

std::vector<std::uint32_t> positions_of(const sim::RoutingTrace& t, std::uint32_t request) {
  std::vector<std::uint32_t> p;
  for (std::size_t i = 0; i < t.request.size(); ++i)
    if (t.request[i] == request) p.push_back(t.position[i]);
  return p;
}

// The published file (collect_data.py's token_idx): problem 0 has records for tokens 78-82 at some layers,
// but only 78-80 at all 32; problem 1 has 251 at all, 252-254 at some. Keep the 4 complete tokens, with their
// token_idx as position, drop 5 and say so (the note and the source). First record of the file: problem 0,
// token 78, layer 0, experts [7, 0], gating_probs [0.8558511734008789, 0.14414885640144348].
TEST(TraceImport, SpeculativeMoePublishedFileKeepsCompleteTokens) {
  std::vector<std::string> notes;
  const auto t = sim::import_speculative_moe(kImportTraces + "speculative_moe_humaneval_2_tail.jsonl", mixtral(&notes));
  ASSERT_EQ(t.tokens(), 4);
  EXPECT_EQ(positions_of(t, 0), (std::vector<std::uint32_t>{78, 79, 80}));
  EXPECT_EQ(positions_of(t, 1), (std::vector<std::uint32_t>{251}));
  EXPECT_EQ(t.header.layers, 32);
  EXPECT_EQ(t.header.top_k, 2);
  ASSERT_TRUE(t.has_weights());
  EXPECT_EQ(t.chosen(0, 0)[0], 7);
  EXPECT_EQ(t.chosen(0, 0)[1], 0);
  EXPECT_EQ(t.gates(0, 0)[0], static_cast<float>(0.8558511734008789));
  // Problem 0, token 80, layer 31: experts [0, 1]; problem 1, token 251, layer 5: [0, 1] at 0.501953125.
  EXPECT_EQ(t.chosen(2, 31)[0], 0);
  EXPECT_EQ(t.chosen(2, 31)[1], 1);
  EXPECT_EQ(t.gates(3, 5)[0], 0.501953125f);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("5 incomplete tokens dropped"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("all after each problem's last complete token"), std::string::npos) << notes[0];
  EXPECT_NE(t.header.source.find("5 incomplete tokens dropped"), std::string::npos) << t.header.source;
  EXPECT_NE(t.header.source.find("2 problems, 4 tokens"), std::string::npos) << t.header.source;
  EXPECT_NE(t.header.source.find("dataset humaneval"), std::string::npos) << t.header.source;
  // The file holds decode tokens only: --decode-only has nothing to leave out and is refused.
  auto o = mixtral();
  o.include_prefill = false;
  EXPECT_NE(error_of([&] {
              (void)sim::import_speculative_moe(kImportTraces + "speculative_moe_humaneval_2_tail.jsonl", o);
            }).find("decode tokens only"),
            std::string::npos);
}

// The profiler's raw output (token_pos), excerpt: a prefill pass of tokens 0-2 (token 1 lacks a layer),
// then five decode passes (the 1st and 3rd lack layer 31). Positions count every token of every pass:
// prefill 0, 1, 2; decode 3, 4, 5, 6, 7. Kept: 0, 2, 4, 6, 7; dropped: 1, 3, 5. The token at position 4
// (decode pass 2) is the published file's token_idx 1: layer 0 experts [5, 3], 0.8019357919692993.
TEST(TraceImport, SpeculativeMoeRawOutputIsAlignedByForwardPass) {
  std::vector<std::string> notes;
  const auto t = sim::import_speculative_moe(kImportTraces + "speculative_moe_raw_excerpt.jsonl", mixtral(&notes));
  EXPECT_EQ(positions_of(t, 0), (std::vector<std::uint32_t>{0, 2, 4, 6, 7}));
  ASSERT_EQ(t.tokens(), 5);
  EXPECT_EQ(t.chosen(2, 0)[0], 5);
  EXPECT_EQ(t.chosen(2, 0)[1], 3);
  EXPECT_EQ(t.gates(2, 0)[0], static_cast<float>(0.8019357919692993));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("3 incomplete tokens dropped"), std::string::npos) << notes[0];
  EXPECT_NE(t.header.source.find("2 prefill + 3 decode, 6 forward passes"), std::string::npos) << t.header.source;
  auto o = mixtral();
  o.include_prefill = false;
  const auto d = sim::import_speculative_moe(kImportTraces + "speculative_moe_raw_excerpt.jsonl", o);
  EXPECT_EQ(positions_of(d, 0), (std::vector<std::uint32_t>{4, 6, 7}));
}

// The hand-written sample of the older form: identical duplicate records dropped, 3 tokens of 2 layers.
TEST(TraceImport, SpeculativeMoeDuplicatesAndMixedForms) {
  sim::ImportOptions o;
  o.experts = 8;
  const auto t = sim::import_speculative_moe(kImportTraces + "speculative_moe.jsonl", o);
  EXPECT_EQ(t.tokens(), 3);
  EXPECT_NE(t.header.source.find("2 identical duplicate records dropped"), std::string::npos) << t.header.source;
  ImportScratch s("mixed");
  std::ofstream(s.path("mixed.jsonl")) << R"({"problem_id": 0, "layer": 0, "experts": [1, 2], "token_idx": 0})"
                                       << "\n"
                                       << R"({"problem_id": 0, "layer": 0, "experts": [1, 2], "token_pos": 0})"
                                       << "\n";
  const auto e = error_of([&] { (void)sim::import_speculative_moe(s.path("mixed.jsonl"), o); });
  EXPECT_NE(e.find("mixed.jsonl: line 2: has token_pos but line 1 has token_idx"), std::string::npos) << e;
  std::ofstream(s.path("none.jsonl")) << R"({"problem_id": 0, "layer": 0, "experts": [1, 2]})"
                                      << "\n";
  EXPECT_NE(error_of([&] { (void)sim::import_speculative_moe(s.path("none.jsonl"), o); }).find("token_pos"),
            std::string::npos);
  // A record claiming layer 65,535 makes every token lack layers (no array of that width is built per token).
  std::ofstream(s.path("wide.jsonl")) << R"({"problem_id": 0, "layer": 65535, "experts": [1, 2], "token_pos": 0})"
                                      << "\n"
                                      << R"({"problem_id": 0, "layer": 0, "experts": [1, 2], "token_pos": 4000000000})"
                                      << "\n";
  EXPECT_NE(error_of([&] {
              (void)sim::import_speculative_moe(s.path("wide.jsonl"), o);
            }).find("no token has a record at every one of the 65536 layers"),
            std::string::npos);
  // Every token lacks a layer: nothing to import, said in one line.
  std::ofstream(s.path("partial.jsonl")) << R"({"problem_id": 0, "layer": 1, "experts": [1, 2], "token_idx": 0})"
                                         << "\n";
  EXPECT_NE(error_of([&] {
              (void)sim::import_speculative_moe(s.path("partial.jsonl"), o);
            }).find("no token has a record at every one of the 2 layers"),
            std::string::npos);
}

// A vLLM v0.21 /v1/completions body with n = 2: the prompt's 2 tokens (top-level prompt_routed_experts) start
// each choice's request, then its own routed_experts (3 and 2 tokens): 5 + 4 tokens, positions from 0.
TEST(TraceImport, VllmResponseBodyWithNestedLists) {
  sim::ImportOptions o;
  o.experts = 8;
  const auto t = sim::import_vllm({kImportTraces + "vllm_completion_lists.json"}, o);
  ASSERT_EQ(t.tokens(), 9);
  EXPECT_EQ(positions_of(t, 0), (std::vector<std::uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(positions_of(t, 1), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.chosen(0, 1)[0], 2);  // prompt token 0, layer 1: [2, 3]
  EXPECT_EQ(t.chosen(5, 0)[0], 0);  // request 1 starts with the same prompt
  EXPECT_EQ(t.chosen(7, 0)[0], 2);  // then its first generated token: [[2, 3], [4, 5]]
  EXPECT_NE(t.header.source.find("/v1/completions responses"), std::string::npos) << t.header.source;
  EXPECT_NE(t.header.source.find("2 requests, 4 prompt + 5 generated tokens"), std::string::npos) << t.header.source;
  o.include_prefill = false;
  const auto d = sim::import_vllm({kImportTraces + "vllm_completion_lists.json"}, o);
  EXPECT_EQ(positions_of(d, 0), (std::vector<std::uint32_t>{2, 3, 4}));
  EXPECT_EQ(positions_of(d, 1), (std::vector<std::uint32_t>{2, 3}));
}

// The later form: one base64 .npy array of 3 + 3 - 1 = 5 rows (<i4, shape (5, 2, 2)); the choice's 3 prompt and
// 3 generated token ids say the first 3 rows are the prompt's.
TEST(TraceImport, VllmResponseBodyWithBase64Npy) {
  sim::ImportOptions o;
  o.experts = 8;
  const auto t = sim::import_vllm({kImportTraces + "vllm_completion_npy.json"}, o);
  ASSERT_EQ(t.tokens(), 5);
  EXPECT_EQ(t.chosen(0, 0)[0], 0);
  EXPECT_EQ(t.chosen(0, 0)[1], 1);
  EXPECT_EQ(t.chosen(4, 1)[0], 1);  // row 4: [[0, 7], [1, 6]]
  EXPECT_EQ(t.chosen(4, 1)[1], 6);
  EXPECT_NE(t.header.source.find("3 prompt + 2 generated"), std::string::npos) << t.header.source;
  o.include_prefill = false;
  const auto d = sim::import_vllm({kImportTraces + "vllm_completion_npy.json"}, o);
  EXPECT_EQ(positions_of(d, 0), (std::vector<std::uint32_t>{3, 4}));

  // Damaged payloads are refused with the JSON path.
  ImportScratch s("npy");
  auto doc = nlohmann::json::parse(slurp(kImportTraces + "vllm_completion_npy.json"));
  const auto write = [&](const std::string& f, const nlohmann::json& re) {
    auto d2 = doc;
    d2["choices"][0]["routed_experts"] = re;
    std::ofstream(s.path(f)) << d2.dump();
    return error_of([&] { (void)sim::import_vllm({s.path(f)}, o); });
  };
  o.include_prefill = true;
  EXPECT_NE(write("b64.json", "k05V*").find("$.choices[0].routed_experts: character 4"), std::string::npos);
  EXPECT_NE(write("null.json", nullptr).find("--enable-return-routed-experts"), std::string::npos);
  EXPECT_NE(write("notnpy.json", "AAAAAAAAAAAAAAAA").find("\\x93NUMPY"), std::string::npos);
  // Hostile headers: a shape whose product wraps 64 bits with no data, a shape with 0 layers and a billion
  // rows, a float dtype. Each is refused from the header, before any row is read or allocated.
  EXPECT_NE(write("wrap.json",
                  "k05VTVBZAQB2AHsnZGVzY3InOiAnPGk0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDQyOTQ5NjcyOTYsIDQy"
                  "OTQ5NjcyOTYsIDEpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAo=")
                .find("(4294967296, 4294967296, 1) of 4-byte items needs more"),
            std::string::npos);
  EXPECT_NE(write("zero.json",
                  "k05VTVBZAQB2AHsnZGVzY3InOiAnPGk0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDEwMDAwMDAwMDAsIDAs"
                  "IDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAo=")
                .find("no MoE layers"),
            std::string::npos);
  EXPECT_NE(write("float.json",
                  "k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDEsIDIsIDIpLCB9ICAg"
                  "ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAAAAAAAAAAAAAAAA")
                .find("dtype '<f4'"),
            std::string::npos);
}

std::string compress_check(const ImportScratch& s, const std::string& name, const std::string& kind) {
  return s.compressed(name, slurp(kImportTraces + "small.jsonl"), kind);
}

// gzip and zstd inputs read like the plain file: the same trace from .jsonl.gz, .jsonl.zst and a compressed
// .mtrace (whose reader needs the decompressed size).
TEST(TraceImport, CompressedTracesReadLikePlainOnes) {
  ImportScratch s("compressed");
  const auto plain = sim::read_trace(kImportTraces + "small.jsonl");
  for (const char* kind : {"gz", "zst"}) {
    SCOPED_TRACE(kind);
    const auto t = sim::read_trace(compress_check(s, std::string("s.jsonl.") + kind, kind));
    EXPECT_EQ(t.experts, plain.experts);
    EXPECT_EQ(t.weights, plain.weights);
    sim::write_trace(plain, s.path("b.mtrace"));
    const auto b = sim::read_trace(s.compressed(std::string("b.mtrace.") + kind, slurp(s.path("b.mtrace")), kind));
    EXPECT_EQ(b.experts, plain.experts);
    EXPECT_EQ(b.position, plain.position);
  }
  // The importers too: speculative-moe lines and a vLLM document.
  const auto spec = sim::import_speculative_moe(
      s.compressed("spec.jsonl.zst", slurp(kImportTraces + "speculative_moe_humaneval_2_tail.jsonl"), "zst"),
      mixtral());
  EXPECT_EQ(spec.tokens(), 4);
  sim::ImportOptions o;
  o.experts = 8;
  EXPECT_EQ(sim::import_vllm({s.compressed("v.json.gz", slurp(kImportTraces + "vllm_completion_lists.json"), "gz")}, o)
                .tokens(),
            9);
  // A cut-short gzip file is refused as damaged, not read as a shorter trace.
  const std::string gz = slurp(compress_check(s, "cut.jsonl.gz", "gz"));
  std::ofstream(s.path("cut2.jsonl.gz"), std::ios::binary) << gz.substr(0, gz.size() / 2);
  const auto e = error_of([&] { (void)sim::read_trace(s.path("cut2.jsonl.gz")); });
  EXPECT_NE(e.find("cut2.jsonl.gz: is not valid gzip data"), std::string::npos) << e;
}

// A decompression bomb: 8 MiB of spaces compress to a few hundred bytes of zstd; with a memory budget of
// 1 MiB (MOESIM_MEMORY_LIMIT) the reader refuses it after decompressing just past 1 MiB, before parsing.
TEST(TraceImport, DecompressionBombIsRefused) {
  ImportScratch s("bomb");
  const std::string f = s.compressed("bomb.jsonl.zst", std::string(8 << 20, ' '), "zst");
  EXPECT_LT(fs::file_size(f), 4096u);
  ::setenv("MOESIM_MEMORY_LIMIT", "1MiB", 1);
  const auto e = error_of([&] { (void)sim::read_trace(f); });
  sim::ImportOptions o;
  o.experts = 8;
  const auto j = error_of([&] { (void)sim::import_vllm({f}, o); });
  ::unsetenv("MOESIM_MEMORY_LIMIT");
  EXPECT_NE(e.find("bomb.jsonl.zst: zstd data that decompresses to more than 1.00 MiB"), std::string::npos) << e;
  EXPECT_NE(e.find("decompression bomb"), std::string::npos) << e;
  EXPECT_NE(e.find("MOESIM_MEMORY_LIMIT"), std::string::npos) << e;
  // A JSON document takes 17 bytes per byte once parsed: its bound is 1 MiB / 17.
  EXPECT_NE(j.find("decompression bomb"), std::string::npos) << j;
}

// Without --from: every sample is recognised, and a file that is none of the formats is refused with what it
// starts with and the list of formats.
TEST(TraceImport, DetectsTheFormat) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"small.jsonl", "jsonl"},
      {"moe_selection_q0.json", "moe-selection"},
      {"moe_selection_maverick_q0_steps0-12.json", "moe-selection"},
      {"speculative_moe.jsonl", "speculative-moe"},
      {"speculative_moe_humaneval_2_tail.jsonl", "speculative-moe"},
      {"speculative_moe_raw_excerpt.jsonl", "speculative-moe"},
      {"vllm_request.json", "vllm"},
      {"vllm_bare.json", "vllm"},
      {"vllm_completion_lists.json", "vllm"},
      {"vllm_completion_npy.json", "vllm"},
  };
  for (const auto& [file, name] : cases) {
    SCOPED_TRACE(file);
    EXPECT_EQ(sim::detect_trace_format(kImportTraces + file).name, name);
  }
  ImportScratch s("detect");
  sim::write_trace(sim::read_trace(kImportTraces + "small.jsonl"), s.path("t.mtrace"));
  EXPECT_EQ(sim::detect_trace_format(s.path("t.mtrace")).name, "binary");
  EXPECT_EQ(sim::detect_trace_format(s.compressed("t.mtrace.zst", slurp(s.path("t.mtrace")), "zst")).name, "binary");
  std::ofstream(s.path("other.json")) << R"({"tokens": [1, 2, 3]})";
  const auto e = error_of([&] { (void)sim::detect_trace_format(s.path("other.json")); });
  EXPECT_NE(e.find("other.json: cannot tell the trace format: it starts with an object with keys tokens"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("speculative-moe"), std::string::npos) << e;
  std::ofstream(s.path("csv.txt")) << "time,tokens\n1,2\n";
  EXPECT_NE(error_of([&] { (void)sim::detect_trace_format(s.path("csv.txt")); }).find("it is not JSON"),
            std::string::npos);
}

// The Llama-4-Maverick excerpt (moe-selection, top-1, 128 experts, 24 MoE layers): 25 prefill + 12 decode
// tokens. Its decode steps send every token of decoder layer 45 (MoE layer 22) to expert 40; with the
// prefill, 35 of 37 tokens do (2 prefill tokens chose 39 and 35), so only the decode-only trace is degenerate.
TEST(TraceImport, MaverickExcerptHasADegenerateLayer) {
  sim::ImportOptions o;
  o.experts = 128;
  const auto all = sim::import_moe_selection({kImportTraces + "moe_selection_maverick_q0_steps0-12.json"}, o);
  EXPECT_EQ(all.tokens(), 37);
  EXPECT_EQ(all.header.layers, 24);
  sim::TraceStatsOptions so;
  so.cache_sizes = {};
  const auto st_all = sim::compute_trace_stats(all, so);
  EXPECT_TRUE(st_all.degenerate_layers.empty());
  EXPECT_EQ(st_all.layers[22].top_expert, 40);
  EXPECT_NEAR(st_all.layers[22].top_expert_share, 35.0 / 37.0, 1e-12);
  o.include_prefill = false;
  const auto decode = sim::import_moe_selection({kImportTraces + "moe_selection_maverick_q0_steps0-12.json"}, o);
  EXPECT_EQ(decode.tokens(), 12);
  const auto st = sim::compute_trace_stats(decode, so);
  EXPECT_EQ(st.degenerate_layers, (std::vector<std::int64_t>{22}));
  EXPECT_TRUE(st.layers[22].degenerate);
  EXPECT_EQ(st.layers[22].top_expert, 40);
}

// The importer registry (STYLE.md practice 2), as PlacementRegistry: the built-in ones in order with their
// --help lines; --from refuses an unknown name listing moesim's own formats and the importers; a name taken,
// by an importer or by one of moesim's own formats, is refused. A new one, "test-moe-selection", reads with
// the moe-selection importer under its own value: --from takes it and it imports the same 5 tokens.
TEST(ImportRegistry, ListsRefusesAndRunsARegisteredImporter) {
  moesim::test::expect_builtins(sim::import_formats(), {"moe-selection", "speculative-moe", "vllm"});
  for (const auto& f : sim::import_formats()) EXPECT_NE(f.import, nullptr) << f.name;
  EXPECT_EQ(sim::parse_import_format("jsonl", "--from"), std::nullopt);
  EXPECT_EQ(sim::parse_import_format("vllm", "--from"), sim::ImportFormat::Vllm);
  moesim::test::expect_user_error([] { (void)sim::parse_import_format("vlm", "--from"); },
                                  {"--from: unknown trace format 'vlm' (did you mean 'vllm'?); valid: jsonl, binary, "
                                   "moe-selection, speculative-moe, vllm"});
  const auto value = static_cast<sim::ImportFormat>(91);
  EXPECT_THROW(sim::register_import_format({value, "vllm", "again", sim::import_vllm}), moesim::UserError);
  EXPECT_THROW(sim::register_import_format({value, "binary", "again", sim::import_vllm}), moesim::UserError);
  sim::register_import_format(
      {value, "test-moe-selection", "moe-selection, registered again", sim::import_moe_selection});
  EXPECT_EQ(sim::parse_import_format("test-moe-selection", "--from"), value);
  EXPECT_EQ(sim::import_format_name(value), "test-moe-selection");
  sim::ImportOptions o;
  o.experts = 8;
  const std::vector<std::string> paths = {kImportTraces + "moe_selection_q0.json"};
  EXPECT_EQ(sim::import_trace(value, paths, o).experts,
            sim::import_trace(sim::ImportFormat::MoeSelection, paths, o).experts);
  EXPECT_EQ(sim::import_trace(value, paths, o).tokens(), 5);
}

}  // namespace
