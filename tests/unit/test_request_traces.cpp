// Request traces (sim/request_traces.hpp): the committed excerpts of the real Azure 2024, BurstGPT and
// Mooncake files (tests/data/request_traces/README.md gives each source), format detection and forcing,
// header matching that ignores case and surrounding spaces, BurstGPT's failed requests, the time scale,
// and the bad inputs of each format. Expected times are worked out by hand in each test's comment.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/sim/request_traces.hpp"

using moesim::test::expect_user_error;

namespace {

namespace fs = std::filesystem;
using moesim::UserError;
using moesim::sim::read_request_trace;
using moesim::sim::Request;
using moesim::sim::RequestTraceFormat;
using moesim::sim::RequestTraceOptions;
using moesim::sim::SimTime;

constexpr SimTime kSecond{moesim::sim::kPicosecondsPerSecond};
constexpr SimTime kMillisecond{moesim::sim::kPicosecondsPerMillisecond};
constexpr SimTime kMicrosecond{moesim::sim::kPicosecondsPerMicrosecond};

fs::path data(const std::string& name) {
  return fs::path(MOESIM_SOURCE_DIR) / "tests" / "data" / "request_traces" / name;
}

/// A directory unique to the running test (and process), removed at the end.
/// A folder of the test's own (test_support.hpp).

RequestTraceOptions as(RequestTraceFormat f, double time_scale = 1.0, std::int64_t max_requests = 0) {
  RequestTraceOptions o;
  o.format = f;
  o.time_scale = time_scale;
  o.max_requests = max_requests;
  return o;
}

// ------------------------------------------------------------------------------------------------------
// The real excerpts.

// Azure LLM inference trace 2024, code: the first 5 rows of AzureLLMInferenceTrace_code_1week.csv. Times
// relative to the first row, 00:00:00.009930: 0.017335 - 0.009930 = 7.405 ms, 12.384 ms, 27.915 ms,
// 73.960 ms. Detected as azure from its TIMESTAMP column.
TEST(RequestTraces, Azure2024CodeExcerpt) {
  const auto t = read_request_trace(data("azure_code_1week_head.csv"));
  EXPECT_EQ(t.format, RequestTraceFormat::Azure);
  EXPECT_TRUE(t.detected);
  ASSERT_EQ(t.requests.size(), 5u);
  EXPECT_EQ(t.requests[0], (Request{0, SimTime{}, 2162, 5, -1}));
  EXPECT_EQ(t.requests[1], (Request{1, 7405 * kMicrosecond, 2399, 6, -1}));
  EXPECT_EQ(t.requests[2], (Request{2, 12384 * kMicrosecond, 76, 15, -1}));
  EXPECT_EQ(t.requests[3], (Request{3, 27915 * kMicrosecond, 2376, 1, -1}));
  EXPECT_EQ(t.requests[4], (Request{4, 73960 * kMicrosecond, 7670, 8, -1}));
  EXPECT_EQ(t.failed, 0);
}

// Azure 2024, conversation: first row 00:00:00.001163, last 00:00:00.248279: 247.116 ms apart.
TEST(RequestTraces, Azure2024ConversationExcerpt) {
  const auto t = read_request_trace(data("azure_conv_1week_head.csv"));
  EXPECT_EQ(t.format, RequestTraceFormat::Azure);
  ASSERT_EQ(t.requests.size(), 5u);
  EXPECT_EQ(t.requests[4], (Request{4, 247116 * kMicrosecond, 617, 104, -1}));
  EXPECT_EQ(t.requests[2].output_tokens, 38);
}

// BurstGPT_1.csv's first rows, at 5, 45 and 118 s from midnight: relative to the first, 0, 40 and 113 s.
// Model, Total tokens and Log Type are read past. None failed.
TEST(RequestTraces, BurstGptExcerpt) {
  const auto t = read_request_trace(data("burstgpt_1_head.csv"));
  EXPECT_EQ(t.format, RequestTraceFormat::BurstGpt);
  EXPECT_TRUE(t.detected);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0], (Request{0, SimTime{}, 472, 18, -1}));
  EXPECT_EQ(t.requests[1], (Request{1, 40 * kSecond, 1087, 230, -1}));
  EXPECT_EQ(t.requests[2], (Request{2, 113 * kSecond, 417, 276, -1}));
  EXPECT_EQ(t.failed, 0);
}

// Mooncake's conversation trace, first 20 lines: 10 requests at 0 ms and 10 at 3000 ms (3 s); lengths as
// written (line 12 has the 87,169-token prompt). hash_ids are read past. Forced as mooncake it reads the
// same; with time scale 0.5 the second group arrives at 1.5 s.
TEST(RequestTraces, MooncakeExcerpt) {
  const auto t = read_request_trace(data("mooncake_conversation_head.jsonl"));
  EXPECT_EQ(t.format, RequestTraceFormat::Mooncake);
  EXPECT_TRUE(t.detected);
  ASSERT_EQ(t.requests.size(), 20u);
  EXPECT_EQ(t.requests[0], (Request{0, SimTime{}, 6758, 500, -1}));
  EXPECT_EQ(t.requests[9], (Request{9, SimTime{}, 17450, 610, -1}));
  EXPECT_EQ(t.requests[10], (Request{10, 3 * kSecond, 13544, 71, -1}));
  EXPECT_EQ(t.requests[11], (Request{11, 3 * kSecond, 87169, 402, -1}));
  EXPECT_EQ(t.requests[19], (Request{19, 3 * kSecond, 16609, 349, -1}));
  const auto forced = read_request_trace(data("mooncake_conversation_head.jsonl"), as(RequestTraceFormat::Mooncake));
  EXPECT_FALSE(forced.detected);
  EXPECT_EQ(forced.requests, t.requests);
  const auto fast = read_request_trace(data("mooncake_conversation_head.jsonl"), as(RequestTraceFormat::Auto, 0.5));
  EXPECT_EQ(fast.requests[10].arrival, 1500 * kMillisecond);
  const auto first5 = read_request_trace(data("mooncake_conversation_head.jsonl"), as(RequestTraceFormat::Auto, 1, 5));
  EXPECT_EQ(first5.requests.size(), 5u);
}

// ------------------------------------------------------------------------------------------------------
// BurstGPT's failed requests (hand-written rows; the real excerpt has none).

// Header names in other case and with spaces around them. Rows at 10 s (Response tokens 0: failed), 12 s
// (0 and 0: failed), 15 s and 15.5 s: the two failures are left out and counted, times are relative to
// the first request kept (15 s): 0 and 0.5 s. max_requests 1 keeps the first request; the failures read
// before it are still counted.
TEST(RequestTraces, BurstGptFailuresAreLeftOutAndCounted) {
  moesim::test::TestDir dir("moesim_rtrace");
  const auto p = dir.write("b.csv",
                           " timestamp , MODEL,request TOKENS, Response Tokens ,Total tokens,Log Type\r\n"
                           "10,GPT-4,300,0,300,API log\r\n"
                           "12,ChatGPT,0,0,0,Conversation log\r\n"
                           "15,ChatGPT,100,20,120,Conversation log\r\n"
                           "15.5,GPT-4,50,5,55,API log\r\n");
  const auto t = read_request_trace(p);
  EXPECT_EQ(t.format, RequestTraceFormat::BurstGpt);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0], (Request{0, SimTime{}, 100, 20, -1}));
  EXPECT_EQ(t.requests[1], (Request{1, 500 * kMillisecond, 50, 5, -1}));
  EXPECT_EQ(t.failed, 2);
  const std::string line = t.summary("b.csv", 1.0);
  EXPECT_NE(line.find("2 failed requests (Response tokens 0) left out"), std::string::npos) << line;
  EXPECT_NE(line.find("burstgpt (detected"), std::string::npos) << line;
  const auto one = read_request_trace(p, as(RequestTraceFormat::Auto, 1, 1));
  EXPECT_EQ(one.requests.size(), 1u);
  EXPECT_EQ(one.failed, 2);
}

// BurstGPT_3 puts Session ID and Elapsed time after Timestamp; columns are found by name, so they are read
// past (a positional reader would take Session ID for the model). Times start 5e6 s into the trace, past
// what a run can hold as absolute times: relative to the first row they are 0 and 2 s.
TEST(RequestTraces, BurstGptThirdFileLayout) {
  moesim::test::TestDir dir("moesim_rtrace");
  const auto t = read_request_trace(
      dir.write("b3.csv",
                "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "5270414,abc,1.5,ChatGPT,300,40,340,Conversation log\n"
                "5270416,,2.0,GPT-4,20,10,30,API log\n"));
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[1], (Request{1, 2 * kSecond, 20, 10, -1}));
}

// ------------------------------------------------------------------------------------------------------
// Detection, forcing and the time scale.

// moesim's own header in other case with spaces: read as moesim. Times 0, 0.5 and 2 s; scaled by 0.5 they
// are 0, 0.25 and 1 s; by 3, 0, 1.5 and 6 s.
TEST(RequestTraces, HeaderCaseAndSpacesAndTimeScale) {
  moesim::test::TestDir dir("moesim_rtrace");
  const auto p = dir.write("m.csv", "  Arrival_S , PROMPT_TOKENS,Output_Tokens \n0,10,2\n0.5,11,3\n2,12,4\n");
  const auto t = read_request_trace(p);
  EXPECT_EQ(t.format, RequestTraceFormat::Moesim);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[2], (Request{2, 2 * kSecond, 12, 4, -1}));
  const auto half = read_request_trace(p, as(RequestTraceFormat::Auto, 0.5));
  EXPECT_EQ(half.requests[1].arrival, 250 * kMillisecond);
  EXPECT_EQ(half.requests[2].arrival, kSecond);
  const auto slow = read_request_trace(p, as(RequestTraceFormat::Moesim, 3.0));
  EXPECT_EQ(slow.requests[1].arrival, 1500 * kMillisecond);
  EXPECT_EQ(slow.requests[2].arrival, 6 * kSecond);
  const std::string line = slow.summary("m.csv", 3.0);
  EXPECT_NE(line.find("moesim (as asked)"), std::string::npos) << line;
  EXPECT_NE(line.find("multiplied by 3"), std::string::npos) << line;
}

// A header no format has is one line listing the formats; a forced format names the column it lacks.
TEST(RequestTraces, UnknownHeaderListsTheFormats) {
  moesim::test::TestDir dir("moesim_rtrace");
  expect_user_error([&] { (void)read_request_trace(dir.write("u.csv", "time,in,out\n0,1,1\n")); },
                    {"u.csv: line 1", "matches no request-trace format", "its columns are: time, in, out", "moesim (",
                     "azure (", "burstgpt (", "mooncake (", "--request-trace-format"});
  const auto azure = data("azure_code_1week_head.csv");
  expect_user_error([&] { (void)read_request_trace(azure, as(RequestTraceFormat::BurstGpt)); },
                    {"line 1", "no Request tokens column", "TIMESTAMP, ContextTokens, GeneratedTokens"});
  expect_user_error([&] { (void)read_request_trace(azure, as(RequestTraceFormat::Moesim)); },
                    {"no arrival-time (arrival_s) column"});
  expect_user_error([&] { (void)read_request_trace(azure, as(RequestTraceFormat::Mooncake)); },
                    {"azure_code_1week_head.csv: line 1, column", "malformed JSON", "Mooncake"});
  expect_user_error(
      [&] { (void)read_request_trace(data("mooncake_conversation_head.jsonl"), as(RequestTraceFormat::Azure)); },
      {"line 1", "is a JSON line", "mooncake"});
  expect_user_error([] { (void)moesim::sim::request_trace_format_by_name("burst-gpt"); },
                    {"unknown request-trace format 'burst-gpt'", "did you mean 'burstgpt'", "auto, moesim, azure"});
  EXPECT_EQ(moesim::sim::request_trace_format_by_name("mooncake"), RequestTraceFormat::Mooncake);
}

// ------------------------------------------------------------------------------------------------------
// Bad inputs, one line each with the file, the line, the column or key, and the fix.

TEST(RequestTraces, BadInputsOfEachFormat) {
  moesim::test::TestDir dir("moesim_rtrace");
  auto load = [&](const std::string& name, const std::string& text, RequestTraceOptions o = {}) {
    const auto p = dir.write(name, text);
    return [p, o] { (void)read_request_trace(p, o); };
  };
  // Mooncake.
  expect_user_error(
      load("m1.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n{\"timestamp\": 1,\n"),
      {"m1.jsonl: line 2, column", "malformed JSON"});
  expect_user_error(load("m2.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n[1, 2]\n"),
                    {"m2.jsonl: line 2", "expected a JSON object"});
  expect_user_error(load("m3.jsonl", "{\"timestamp\": 0, \"output_length\": 2}\n"),
                    {"m3.jsonl: line 1", "input_length"});
  expect_user_error(load("m4.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 0}\n"),
                    {"m4.jsonl: line 1", "output_length", "grep -v"});
  expect_user_error(load("m5.jsonl", "{\"timestamp\": -3, \"input_length\": 5, \"output_length\": 1}\n"),
                    {"m5.jsonl: line 1", "timestamp"});
  expect_user_error(load("m6.jsonl",
                         "{\"timestamp\": 3000, \"input_length\": 5, \"output_length\": 1}\n\n"
                         "{\"timestamp\": 2999, \"input_length\": 5, \"output_length\": 1}\n"),
                    {"m6.jsonl: line 3", "$.timestamp", "earlier than line 1", "sort the file by time"});
  expect_user_error(
      load("m7.jsonl", "{\"timestamp\": 0, \"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}\n"),
      {"m7.jsonl: line 1", "timestamp"});
  expect_user_error(load("m9.jsonl", "{\"timestamp\": 1e300, \"input_length\": 5, \"output_length\": 1}\n"),
                    {"m9.jsonl: line 1", "$.timestamp", "check its unit"});
  // A fractional millisecond is kept: 1500.5 ms is 1.5005 s after the first line's 0.
  const auto frac = dir.write("m8.jsonl",
                              "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                              "{\"timestamp\": 1500.5, \"input_length\": 5, \"output_length\": 1}\n");
  EXPECT_EQ(read_request_trace(frac).requests[1].arrival, SimTime{1'500'500'000'000});
  // BurstGPT.
  const std::string bh = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
  expect_user_error(load("b1.csv", bh + "5,ChatGPT,0,18,18,Conversation log\n"),
                    {"b1.csv: line 2, column Request tokens", "awk -F, 'NR==1 || $3 > 0'"});
  expect_user_error(load("b2.csv", bh + "5,ChatGPT,10,0,10,API log\n6,ChatGPT,10,0,10,API log\n"),
                    {"b2.csv", "no requests but 2 failed ones"});
  expect_user_error(load("b3.csv", bh + "45,ChatGPT,10,5,15,API log\n5,ChatGPT,10,5,15,API log\n"),
                    {"b3.csv: line 3, column Timestamp", "earlier than line 2"});
  expect_user_error(load("b4.csv", bh + "x,ChatGPT,10,5,15,API log\n"),
                    {"b4.csv: line 2, column Timestamp", "not a number"});
  expect_user_error(load("b7.csv", bh + "1e300,ChatGPT,10,5,15,API log\n"),
                    {"b7.csv: line 2, column Timestamp", "check the column's unit"});
  expect_user_error(load("b5.csv", bh + "5,ChatGPT,10,-1,9,API log\n"), {"b5.csv: line 2, column Response tokens"});
  expect_user_error(load("b6.csv", bh + "5,ChatGPT,10\n"), {"b6.csv: line 2, column Response tokens", "is missing"});
  // CSV headers: a column named twice, in any case.
  expect_user_error(load("d.csv", "arrival_s,prompt_tokens,output_tokens,ARRIVAL_S\n0,1,1,0\n"),
                    {"d.csv: line 1", "names the column ARRIVAL_S twice"});
  // The time scale pushes a time past what a run holds: 3e6 s times 2.
  RequestTraceOptions twice;
  twice.time_scale = 2;
  expect_user_error(load("s.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n3000000,1,1\n", twice),
                    {"s.csv: line 3, column arrival_s", "time_scale 2", "lower the time scale"});
}

}  // namespace
