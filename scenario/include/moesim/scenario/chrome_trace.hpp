#pragma once
// One form of Chrome's Trace Event Format for every trace moesim writes (`simulate --chrome-trace`,
// `serve --chrome-trace`, `sweep --traces`, the report's traces): the JSON object form
//   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
// with metadata events naming processes and threads ("ph": "M"), complete events ("ph": "X") and counters
// ("ph": "C"); times in microseconds. Spec: "Trace Event Format" (Google, 2016),
// https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU. ui.perfetto.dev and
// chrome://tracing open it. "otherData" says what the trace covers when it is cut (a trace of every step of
// a long run would be hundreds of MB).

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace moesim::scenario {

class ChromeTrace {
 public:
  /// Names process `pid` (a node, the server, the requests).
  void process(std::int64_t pid, const std::string& name);
  /// Names thread `tid` of process `pid` (a track).
  void thread(std::int64_t pid, std::int64_t tid, const std::string& name);
  /// A span from `start_us` lasting `duration_us`, on track (pid, tid).
  void complete(const std::string& name, const std::string& category, std::int64_t pid, std::int64_t tid,
                double start_us, double duration_us, nlohmann::json args = nlohmann::json::object());
  /// Counter values (`values`: name → number) of process `pid` from `at_us` on.
  void counter(const std::string& name, std::int64_t pid, double at_us, nlohmann::json values);
  /// A key of "otherData": what the trace covers, the tool that wrote it.
  void note(const std::string& key, nlohmann::json value);

  [[nodiscard]] std::size_t events() const { return events_.size(); }
  void write(std::ostream& out) const;

 private:
  std::vector<nlohmann::json> metadata_;
  std::vector<nlohmann::json> events_;
  nlohmann::json other_ = nlohmann::json::object();
};

}  // namespace moesim::scenario
