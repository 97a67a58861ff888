// Routing-trace files: JSON lines <-> binary round trips are lossless (gate weights included), and every
// kind of bad input is refused with one line naming the file, the line (JSON lines) or record (binary), the
// field and the fix.

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "../test_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/error.hpp"
#include "moesim/sim/trace_io.hpp"

using moesim::test::error_of;
namespace {

namespace fs = std::filesystem;
using moesim::UserError;
using moesim::sim::RoutingTrace;

/// Two layers, 8 experts, top-2, three tokens in two requests, with weights chosen to be awkward decimals.
RoutingTrace tiny(bool weights = true) {
  RoutingTrace t;
  t.header = {"mixtral-8x7b", 2, 8, 2, "test"};
  t.request = {0, 0, 1};
  t.position = {0, 1, 0};
  t.experts = {3, 5, 0, 7, 3, 1, 7, 2, 6, 0, 2, 4};
  if (weights) t.weights = {0.7f, 0.3f, 0.1f, 1e-7f, 0.5f, 0.5f, 1.0f, 0.0f, 0.333333343f, 0.666666687f, 0.2f, 0.8f};
  return t;
}

void expect_same(const RoutingTrace& a, const RoutingTrace& b) {
  EXPECT_EQ(a.header.model, b.header.model);
  EXPECT_EQ(a.header.layers, b.header.layers);
  EXPECT_EQ(a.header.experts, b.header.experts);
  EXPECT_EQ(a.header.top_k, b.header.top_k);
  EXPECT_EQ(a.header.source, b.header.source);
  EXPECT_EQ(a.request, b.request);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.experts, b.experts);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    // Bit-identical, not merely close: 9 significant digits identify a float32.
    EXPECT_EQ(std::bit_cast<std::uint32_t>(a.weights[i]), std::bit_cast<std::uint32_t>(b.weights[i])) << i;
  }
}

std::string to_jsonl(const RoutingTrace& t) {
  std::ostringstream s;
  moesim::sim::write_trace_jsonl(t, s);
  return s.str();
}
std::string to_binary(const RoutingTrace& t) {
  std::ostringstream s;
  moesim::sim::write_trace_binary(t, s);
  return s.str();
}
RoutingTrace from_jsonl(const std::string& text, const std::string& name = "t.jsonl") {
  std::istringstream s(text);
  return moesim::sim::read_trace_jsonl(s, name);
}
RoutingTrace from_binary(const std::string& bytes, const std::string& name = "t.mtrace") {
  std::istringstream s(bytes);
  return moesim::sim::read_trace_binary(s, bytes.size(), name);
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  ASSERT_FALSE(message.empty()) << "expected an error";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "missing '" << p << "' in: " << message;
}

/// A temporary directory removed at the end of the test.
class TraceDir {
 public:
  [[nodiscard]] std::string file(const std::string& name) const { return (dir_.path() / name).string(); }
  [[nodiscard]] std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()));
  }

 private:
  moesim::test::TestDir dir_{"moesim_trace_io"};
};

// JSON lines -> memory -> binary -> memory -> JSON lines gives back the same bytes and the same weight bits.
TEST(TraceIo, RoundTripJsonlBinaryIsLossless) {
  for (const bool weights : {true, false}) {
    const auto t = tiny(weights);
    const auto text = to_jsonl(t);
    const auto a = from_jsonl(text);
    expect_same(t, a);
    const auto bytes = to_binary(a);
    const auto b = from_binary(bytes);
    expect_same(t, b);
    EXPECT_EQ(to_jsonl(b), text);
    EXPECT_EQ(to_binary(from_jsonl(to_jsonl(b))), bytes);
  }
}

// Every float32 survives the decimal form: 20,000 random non-negative finite bit patterns, denormals and
// the largest float included.
TEST(TraceIo, RandomFloatsRoundTripThroughJsonl) {
  std::mt19937 rng(7);
  RoutingTrace t;
  t.header = {"x", 1, 4, 2, ""};
  const std::size_t n = 10000;
  for (std::size_t i = 0; i < n; ++i) {
    t.request.push_back(0);
    t.position.push_back(static_cast<std::uint32_t>(i));
    t.experts.push_back(0);
    t.experts.push_back(1);
    for (int s = 0; s < 2; ++s) {
      float f = 0;
      do {
        f = std::bit_cast<float>(static_cast<std::uint32_t>(rng() & 0x7fffffffu));
      } while (!std::isfinite(f));
      t.weights.push_back(f);
    }
  }
  t.weights[0] = std::numeric_limits<float>::denorm_min();
  t.weights[1] = std::numeric_limits<float>::max();
  expect_same(t, from_jsonl(to_jsonl(t)));
}

// Binary layout, byte by byte (sim/TRACES.md): magic, u32 version 1, u32 header length, header, u64 token
// count, u8 has-weights, then records of 8 + 2*L*k + 4*L*k bytes, little-endian.
TEST(TraceIo, BinaryLayoutIsAsDocumented) {
  const auto t = tiny();
  const auto b = to_binary(t);
  ASSERT_GE(b.size(), 16u);
  EXPECT_EQ(b.substr(0, 8), "MOESIMTR");
  EXPECT_EQ(static_cast<unsigned char>(b[8]), 1);  // version, little-endian
  const std::size_t hlen = static_cast<unsigned char>(b[12]) | (static_cast<unsigned char>(b[13]) << 8);
  EXPECT_EQ(b.substr(16, 12), "{\"format\":\"m");
  const std::size_t off = 16 + hlen;
  EXPECT_EQ(static_cast<unsigned char>(b[off]), 3);      // token count
  EXPECT_EQ(static_cast<unsigned char>(b[off + 8]), 1);  // has weights
  const std::size_t rec = 8 + 2 * 4 + 4 * 4;
  EXPECT_EQ(b.size(), off + 9 + 3 * rec);
  // Record 1: request 0, position 1, ids 3 1 7 2.
  const std::size_t r1 = off + 9 + rec;
  EXPECT_EQ(static_cast<unsigned char>(b[r1 + 4]), 1);
  EXPECT_EQ(static_cast<unsigned char>(b[r1 + 8]), 3);
  EXPECT_EQ(static_cast<unsigned char>(b[r1 + 10]), 1);
}

TEST(TraceIo, ReadsTheCommittedSampleAndDetectsTheFormat) {
  const std::string dir = std::string(MOESIM_SOURCE_DIR) + "/tests/data/traces/";
  const auto t = moesim::sim::read_trace(dir + "small.jsonl");
  EXPECT_EQ(t.tokens(), 5);
  EXPECT_EQ(t.header.layers, 2);
  EXPECT_EQ(t.chosen(2, 1)[0], 2);
  EXPECT_FLOAT_EQ(t.gates(1, 1)[0], 0.9f);
  EXPECT_EQ(moesim::sim::count_requests(t), 2);
  TraceDir d;
  moesim::sim::write_trace(t, d.file("s.mtrace"));
  expect_same(t, moesim::sim::read_trace(d.file("s.mtrace")));
  moesim::sim::write_trace(t, d.file("noext"), moesim::sim::TraceFormat::Binary);
  expect_same(t, moesim::sim::read_trace(d.file("noext")));  // detected by the magic, not the name
}

const char* const kTraceHeader =
    R"({"format":"moesim-trace","version":1,"model":"m","layers":2,"experts":8,"top_k":2,"source":"s"})";

std::string with_lines(const std::vector<std::string>& records, const std::string& header = kTraceHeader) {
  std::string s = header + "\n";
  for (const auto& r : records) s += r + "\n";
  return s;
}
const std::string kGood = R"({"request":0,"position":0,"experts":[[1,2],[3,4]]})";
const std::string kGoodW = R"({"request":0,"position":0,"experts":[[1,2],[3,4]],"weights":[[0.6,0.4],[0.5,0.5]]})";

// Each bad JSON-lines input, with the line number and field its message must name.
TEST(TraceIo, BadJsonLinesNameLineAndField) {
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"expert id out of range",
       with_lines({kGood, R"({"request":0,"position":1,"experts":[[1,2],[8,4]]})"}),
       {"bad.jsonl: line 3", "$.experts[1][0]", "out of range [0, 8)"}},
      {"negative expert id",
       with_lines({R"({"request":0,"position":1,"experts":[[1,2],[-1,4]]})"}),
       {"line 2", "$.experts[1][0]", "-1"}},
      {"wrong number of layers",
       with_lines({kGood, kGood, R"({"request":0,"position":1,"experts":[[1,2]]})"}),
       {"line 4", "$.experts", "has 1 layers, the header says 2"}},
      {"wrong top-k",
       with_lines({R"({"request":0,"position":1,"experts":[[1,2,3],[3,4]]})"}),
       {"line 2", "$.experts[0]", "has 3 experts", "top_k is 2"}},
      {"duplicate expert",
       with_lines({R"({"request":0,"position":1,"experts":[[1,2],[4,4]]})"}),
       {"line 2", "$.experts[1][1]", "appears twice"}},
      {"weights count",
       with_lines({R"({"request":0,"position":0,"experts":[[1,2],[3,4]],"weights":[[1],[0.5,0.5]]})"}),
       {"line 2", "$.weights[0]", "has 1 weights"}},
      {"negative weight",
       with_lines({R"({"request":0,"position":0,"experts":[[1,2],[3,4]],"weights":[[0.6,-0.4],[0.5,0.5]]})"}),
       {"line 2", "$.weights[0][1]", "negative"}},
      {"weights all-or-none", with_lines({kGoodW, kGoodW, kGood}), {"line 4", "$.weights", "all-or-none", "line 2"}},
      {"malformed JSON",
       with_lines({kGood, kGood, R"({"request":0,"position":0,"experts":[[1,2],[3,4]})"}),
       {"line 4, column", "malformed JSON"}},
      {"missing header", kGood + "\n", {"line 1", "missing header", "--from"}},
      {"unknown header key",
       R"({"format":"moesim-trace","version":1,"model":"m","layers":2,"experts":8,"topk":2})"
       "\n" +
           kGood + "\n",
       {"line 1", "$.topk", "did you mean 'top_k'"}},
      {"unknown record key",
       with_lines({R"({"request":0,"position":0,"expert":[[1,2],[3,4]]})"}),
       {"line 2", "$.expert", "did you mean 'experts'"}},
      {"experts beyond 16 bits",
       R"({"format":"moesim-trace","version":1,"model":"m","layers":2,"experts":70000,"top_k":2})"
       "\n" +
           kGood + "\n",
       {"line 1", "$.experts", "65,535"}},
      {"newer version",
       R"({"format":"moesim-trace","version":2,"model":"m","layers":2,"experts":8,"top_k":2})"
       "\n",
       {"line 1", "$.version", "upgrade"}},
      {"token count disagrees",
       R"({"format":"moesim-trace","version":1,"model":"m","layers":2,"experts":8,"top_k":2,"tokens":3})"
       "\n" +
           kGood + "\n",
       {"line 1", "$.tokens", "says 3 tokens", "has 1"}},
      {"empty file", "", {"bad.jsonl", "is empty"}},
      {"header only", std::string(kTraceHeader) + "\n", {"no token records"}},
      {"position too large",
       with_lines({R"({"request":0,"position":4294967296,"experts":[[1,2],[3,4]]})"}),
       {"line 2", "$.position"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_mentions(error_of([&] { from_jsonl(c.text, "bad.jsonl"); }), c.mentions);
  }
}

// Binary: truncation is reported with the record where the file ends; a token count that disagrees with the
// file size, bad ids and damaged flags with their record / byte.
TEST(TraceIo, BadBinaryNamesTheRecord) {
  const auto good = to_binary(tiny());
  const std::size_t rec = 8 + 2 * 4 + 4 * 4;
  const std::size_t data = good.size() - 3 * rec;
  // Cut 10 bytes into record 2.
  expect_mentions(error_of([&] { from_binary(good.substr(0, data + 2 * rec + 10), "cut.mtrace"); }),
                  {"cut.mtrace", "truncated at record 2", "10 bytes into it"});
  // Cut exactly after record 0.
  expect_mentions(error_of([&] { from_binary(good.substr(0, data + rec), "cut.mtrace"); }),
                  {"truncated at record 1", "just before it"});
  // Cut inside the header.
  expect_mentions(error_of([&] { from_binary(good.substr(0, 40), "cut.mtrace"); }), {"truncated", "before record 0"});
  // Extra bytes after the announced records.
  expect_mentions(error_of([&] { from_binary(good + "junk", "long.mtrace"); }),
                  {"long.mtrace", "token count 3 disagrees with the file size", "4 bytes more"});
  // Record 1, layer 0, slot 1 holds id 9 (>= 8 experts).
  std::string bad = good;
  bad[data + rec + 8 + 2] = 9;
  expect_mentions(error_of([&] { from_binary(bad, "ids.mtrace"); }),
                  {"ids.mtrace: record 1, layer 0, slot 1", "out of range [0, 8)"});
  // Record 2, layer 1: a duplicate (2, 2).
  bad = good;
  bad[data + 2 * rec + 8 + 4] = 4;
  expect_mentions(error_of([&] { from_binary(bad, "dup.mtrace"); }), {"record 2, layer 1, slot 1", "appears twice"});
  // A NaN weight in record 0.
  bad = good;
  const std::uint32_t nan = std::bit_cast<std::uint32_t>(std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < 4; ++i) bad[data + 8 + 8 + i] = static_cast<char>((nan >> (8 * i)) & 0xff);
  expect_mentions(error_of([&] { from_binary(bad, "nan.mtrace"); }), {"record 0, layer 0, slot 0", "NaN"});
  // The has-weights byte must be 0 or 1.
  bad = good;
  bad[data - 1] = 7;
  expect_mentions(error_of([&] { from_binary(bad, "flag.mtrace"); }), {"has-weights", "is 7"});
}

// The model check names both shapes and says how to fix it.
TEST(TraceIo, CheckTraceMatchesNamesBothValues) {
  const auto t = tiny();
  EXPECT_NO_THROW(moesim::sim::check_trace_matches(RoutingTrace{{"m", 32, 8, 2, ""}, {}, {}, {}, {}},
                                                   moesim::model::load_model("mixtral-8x7b"), "x"));
  expect_mentions(
      error_of([&] { moesim::sim::check_trace_matches(t, moesim::model::load_model("dbrx-instruct"), "run.jsonl"); }),
      {"run.jsonl", "MoE layers 2 vs 40", "experts 8 vs 16", "top-k 2 vs 4", "--model mixtral-8x7b",
       "moesim trace gen --model dbrx-instruct"});
}

// Writing goes through a temporary file: a failure leaves nothing behind, and an unknown extension is refused
// before anything is written.
TEST(TraceIo, WritesAtomicallyAndRefusesUnknownExtensions) {
  TraceDir d;
  expect_mentions(error_of([&] { moesim::sim::write_trace(tiny(), d.file("t.txt"), std::nullopt, "--out"); }),
                  {"t.txt (--out)", ".jsonl", ".mtrace"});
  EXPECT_EQ(d.entries(), 0u);
  expect_mentions(error_of([&] { moesim::sim::write_trace(tiny(), d.file("no/such/dir/t.jsonl")); }), {"cannot write"});
  moesim::sim::write_trace(tiny(), d.file("t.jsonl"));
  EXPECT_EQ(d.entries(), 1u);  // the file itself, no temporary left
}

// validate_trace checks what importers and generators build in memory.
TEST(TraceIo, ValidateTraceNamesTokenLayerSlot) {
  auto t = tiny();
  EXPECT_NO_THROW(moesim::sim::validate_trace(t, "mem"));
  t.experts[6] = 8;
  expect_mentions(error_of([&] { moesim::sim::validate_trace(t, "mem"); }), {"mem: token 1, layer 1, slot 0"});
  t = tiny();
  t.experts[1] = 3;
  expect_mentions(error_of([&] { moesim::sim::validate_trace(t, "mem"); }), {"token 0, layer 0, slot 1", "twice"});
  t = tiny();
  t.header.top_k = 9;
  expect_mentions(error_of([&] { moesim::sim::validate_trace(t, "mem"); }), {"top_k 9"});
}

// The trace-format registry (STYLE.md practice 2), as PlacementRegistry: jsonl then binary, each with its
// extension and --help line; an unknown --format is refused naming them; a name taken is refused. A new one,
// "test-count" (.tcount: the token count as text), is chosen by --format and by the extension, writes the
// file, and the message for an unknown extension now offers it too.
TEST(TraceFormatRegistry, ListsRefusesAndWritesARegisteredFormat) {
  namespace sim = moesim::sim;
  const auto& all = sim::trace_formats();
  moesim::test::expect_builtins(all, {"jsonl", "binary"});
  EXPECT_EQ(all[0].extension, ".jsonl");
  EXPECT_EQ(all[1].extension, ".mtrace");
  EXPECT_EQ(sim::parse_trace_format("mtrace", "--format"), sim::TraceFormat::Binary);
  const auto e = error_of([] { (void)sim::parse_trace_format("json", "--format"); });
  EXPECT_NE(e.find("--format: unknown trace format 'json' (did you mean 'jsonl'?); valid formats: jsonl, binary"),
            std::string::npos)
      << e;
  const auto value = static_cast<sim::TraceFormat>(91);
  const auto count = [](const RoutingTrace& t, std::ostream& out) { out << t.tokens() << " tokens\n"; };
  EXPECT_THROW(sim::register_trace_format({value, "jsonl", "", ".j", "again", "again", false, count}), UserError);
  sim::register_trace_format({value, "test-count", "", ".tcount", "token count", "the token count", false, count});
  EXPECT_EQ(sim::parse_trace_format("test-count", "--format"), value);
  EXPECT_EQ(sim::trace_format_name(value), "test-count");
  const moesim::test::TestDir dir("moesim_format_registry");
  const std::string path = (dir.path() / "t.tcount").string();
  sim::write_trace(tiny(), path);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "3 tokens\n");
  const auto ext = error_of([] { (void)sim::trace_format_for_path("t.txt", "--out"); });
  EXPECT_NE(ext.find("name the file .jsonl (JSON lines), .mtrace (binary) or .tcount (token count), or give --format "
                     "jsonl|binary|test-count"),
            std::string::npos)
      << ext;
}

}  // namespace
