// Request workloads, trace replay: the request-trace CSV reader (moesim's columns, Azure timestamps, bad
// inputs) and a trace workload through open_loop_requests.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/sim/workload.hpp"
#include "workload_test_support.hpp"

using moesim::test::expect_user_error;

namespace {

using moesim::UserError;
using moesim::sim::ArrivalKind;
using moesim::sim::LengthKind;
using moesim::sim::Request;
using moesim::sim::SimTime;
using moesim::sim::WorkloadSpec;
using moesim::test::workload::kSecond;

/// A directory unique to the running test (and process), removed with everything in it at the end.
/// A folder of the test's own (test_support.hpp).

// ------------------------------------------------------------------------------------------------------
// Request-trace CSV.

// moesim's own columns, with an extra column (ignored), a blank line and a trailing newline: three
// requests at 0, 0.5 and 0.5 s (equal times are fine) with their token counts; ids in row order.
// The same file with CRLF line endings and a UTF-8 byte-order mark reads the same. max_rows = 2 keeps 2.
TEST(WorkloadTrace, OwnColumnsLfAndCrlf) {
  moesim::test::TestDir dir("moesim_workload");
  const std::string text = "arrival_s,note,prompt_tokens,output_tokens\n0.0,a,2000,256\n\n0.5,b,1800,300\n0.5,c,1,1\n";
  const auto reqs = moesim::sim::load_request_trace(dir.write("lf.csv", text));
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0], (Request{0, SimTime{}, 2000, 256, -1}));
  EXPECT_EQ(reqs[1], (Request{1, SimTime{500'000'000'000}, 1800, 300, -1}));
  EXPECT_EQ(reqs[2], (Request{2, SimTime{500'000'000'000}, 1, 1, -1}));

  std::string crlf = "\xEF\xBB\xBF";
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(moesim::sim::load_request_trace(dir.write("crlf.csv", crlf)), reqs);
  EXPECT_EQ(moesim::sim::load_request_trace(dir.write("lf2.csv", text), 2).size(), 2u);
}

// Azure LLM inference trace 2023 (first rows of AzureLLMInferenceTrace_conv.csv's format): times relative
// to the first row, 7 fraction digits = 100 ns. 18:15:46.6805900 -> 0; 18:15:50.9951690 -> 4.314579 s;
// a row across midnight checks the date arithmetic: 23:59:59.5 on the 16th to 00:00:00.25 on the 17th is
// 0.75 s. CRLF endings. The 2024 format has 6 digits and a UTC offset: 00:00:00.009930+00:00 ->
// 0, 00:00:01.5+00:00 -> 1.49007 s; a "+01:00" row is an hour earlier in UTC.
TEST(WorkloadTrace, AzureTimestamps) {
  moesim::test::TestDir dir("moesim_workload");
  const auto y2023 = moesim::sim::load_request_trace(dir.write("azure2023.csv",
                                                               "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                                               "2023-11-16 18:15:46.6805900,374,44\r\n"
                                                               "2023-11-16 18:15:50.9951690,396,109\r\n"
                                                               "2023-11-16 23:59:59.5000000,879,42\r\n"
                                                               "2023-11-17 00:00:00.2500000,91,22\r\n"));
  ASSERT_EQ(y2023.size(), 4u);
  EXPECT_EQ(y2023[0], (Request{0, SimTime{}, 374, 44, -1}));
  EXPECT_EQ(y2023[1].arrival, SimTime{4'314'579'000'000});
  EXPECT_EQ(y2023[1].prompt_tokens, 396);
  EXPECT_EQ(y2023[1].output_tokens, 109);
  EXPECT_EQ(y2023[3].arrival - y2023[2].arrival, SimTime{750'000'000'000});

  const auto y2024 = moesim::sim::load_request_trace(dir.write("azure2024.csv",
                                                               "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                                               "2024-05-10 00:00:00.009930+00:00,2162,5\n"
                                                               "2024-05-10 00:00:01.5+00:00,1021,12\n"
                                                               "2024-05-10 01:00:02.000000+01:00,50,3\n"));
  ASSERT_EQ(y2024.size(), 3u);
  EXPECT_EQ(y2024[0].arrival, SimTime{});
  EXPECT_EQ(y2024[1].arrival, SimTime{1'490'070'000'000});
  EXPECT_EQ(y2024[2].arrival, SimTime{1'990'070'000'000});
}

// Every bad input is one UserError line naming the file, the line and the column, with the fix.
TEST(WorkloadTrace, BadInputsNameFileLineAndFix) {
  moesim::test::TestDir dir("moesim_workload");
  const std::string h = "arrival_s,prompt_tokens,output_tokens\n";
  auto load = [&](const std::string& name, const std::string& text) {
    const auto p = dir.write(name, text);
    return [p] { (void)moesim::sim::load_request_trace(p); };
  };
  const std::string missing = (dir.path() / "nope.csv").string();
  expect_user_error([&] { (void)moesim::sim::load_request_trace(missing); }, {missing, "no such request-trace file"});
  expect_user_error(load("empty.csv", ""), {"empty.csv", "is empty", "header row"});
  expect_user_error(load("nohdr.csv", "0.0,10,10\n1.0,10,10\n"),
                    {"nohdr.csv: line 1", "matches no request-trace format", "its columns are: 0.0, 10, 10"});
  expect_user_error(load("noout.csv", "arrival_s,prompt_tokens,x\n0,1,1\n"),
                    {"noout.csv: line 1", "output-length", "arrival_s, prompt_tokens, x"});
  expect_user_error(load("neg.csv", h + "0,1,1\n-1.5,1,1\n"), {"neg.csv: line 3, column arrival_s", "negative"});
  expect_user_error(load("dec.csv", h + "0,1,1\n2.0,1,1\n1.5,1,1\n"),
                    {"dec.csv: line 4, column arrival_s", "earlier than line 3", "sort the file by time"});
  expect_user_error(load("dec_ts.csv",
                         "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,1,1\n"
                         "2023-11-16 18:15:46.4,1,1\n"),
                    {"dec_ts.csv: line 3, column TIMESTAMP", "sort the file by time"});
  expect_user_error(load("zero.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.5,100,0\r\n"),
                    {"zero.csv: line 2, column GeneratedTokens", ">= 1", "awk -F, 'NR==1 || $3 > 0'"});
  expect_user_error(load("frac.csv", h + "0,12.5,1\n"), {"frac.csv: line 2, column prompt_tokens", "whole number"});
  expect_user_error(load("zero_p.csv", h + "0,0,1\n"), {"zero_p.csv: line 2, column prompt_tokens", ">= 1"});
  expect_user_error(load("badnum.csv", h + "0,1,1\n1.2.3,1,1\n"),
                    {"badnum.csv: line 3, column arrival_s", "\"1.2.3\" is not a number"});
  expect_user_error(load("badts.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023 18:15,1,1\n"),
                    {"badts.csv: line 2, column TIMESTAMP", "not a timestamp like 2023-11-16 18:15:46.6805900"});
  expect_user_error(load("short.csv", h + "0,1\n"),
                    {"short.csv: line 2, column output_tokens", "is missing", "2 fields, the header 3"});
  expect_user_error(load("norows.csv", h), {"norows.csv", "no requests"});
  expect_user_error(load("norows_crlf.csv", "arrival_s,prompt_tokens,output_tokens\r\n\r\n"), {"no requests"});
}

// A trace workload replays the file through open_loop_requests, at most `requests` rows (0 = all).
TEST(WorkloadTrace, OpenLoopReplaysTheFile) {
  moesim::test::TestDir dir("moesim_workload");
  WorkloadSpec w;
  w.arrival = ArrivalKind::Trace;
  w.trace_path = dir.write("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,6\n1,7,8\n2,9,10\n").string();
  w.requests = 0;
  EXPECT_EQ(moesim::sim::open_loop_requests(w).size(), 3u);
  w.requests = 2;
  const auto two = moesim::sim::open_loop_requests(w);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1], (Request{1, kSecond, 7, 8, -1}));
}

}  // namespace
