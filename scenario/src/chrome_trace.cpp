#include "moesim/scenario/chrome_trace.hpp"

namespace moesim::scenario {

void ChromeTrace::process(std::int64_t pid, const std::string& name) {
  metadata_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
}

void ChromeTrace::thread(std::int64_t pid, std::int64_t tid, const std::string& name) {
  metadata_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
}

void ChromeTrace::complete(const std::string& name, const std::string& category, std::int64_t pid, std::int64_t tid,
                           double start_us, double duration_us, nlohmann::json args) {
  events_.push_back({{"name", name},
                     {"cat", category},
                     {"ph", "X"},
                     {"ts", start_us},
                     {"dur", duration_us},
                     {"pid", pid},
                     {"tid", tid},
                     {"args", std::move(args)}});
}

void ChromeTrace::counter(const std::string& name, std::int64_t pid, double at_us, nlohmann::json values) {
  events_.push_back({{"name", name}, {"ph", "C"}, {"ts", at_us}, {"pid", pid}, {"args", std::move(values)}});
}

void ChromeTrace::note(const std::string& key, nlohmann::json value) { other_[key] = std::move(value); }

void ChromeTrace::write(std::ostream& out) const {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& e : metadata_) all.push_back(e);
  for (const auto& e : events_) all.push_back(e);
  nlohmann::json doc = {{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}};
  if (!other_.empty()) doc["otherData"] = other_;
  out << doc.dump() << "\n";
}

}  // namespace moesim::scenario
