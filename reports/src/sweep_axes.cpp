// A grid's "axes": any key of the instrument's parameter table as an axis, by its dotted name
// ({"scheduler.max_num_seqs": [64, 256]}). The table is the one the instrument reads its scenario with
// (scenario::serve_params for a serving grid, scenario::simulate_params for a decode grid), so an axis key
// is checked, named in errors and documented exactly as the scenario file's own key is.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/reports/sweep.hpp"
#include "moesim/scenario/params.hpp"
#include "moesim/scenario/serve.hpp"
#include "moesim/scenario/simulate.hpp"
#include "moesim/sim/workload.hpp"
#include "sweep_detail.hpp"

namespace moesim::reports::sweep_detail {

namespace {

/// The keys an axis may name: every key of the table (a group's as "group.key"), and the keys inside an
/// object-valued key the table reads whole ("workload.rate": sim::parse_workload checks those).
struct AxisKeys {
  std::vector<std::string> keys;
  std::vector<std::string> objects;
  [[nodiscard]] bool knows(const std::string& key) const {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return true;
    const auto dot = key.find('.');
    return dot != std::string::npos && dot + 1 < key.size() &&
           std::find(objects.begin(), objects.end(), key.substr(0, dot)) != objects.end();
  }
};

template <class R>
AxisKeys axis_keys(const scenario::ParamTable<R>& table) {
  AxisKeys a;
  for (const auto& d : table.key_docs()) {
    a.keys.push_back(d.key);
    if (d.type == "object") a.objects.push_back(d.key);
  }
  return a;
}

const AxisKeys& serve_keys() {
  static const AxisKeys k = axis_keys(scenario::serve_params());
  return k;
}

const AxisKeys& simulate_keys() {
  static const AxisKeys k = axis_keys(scenario::simulate_params());
  return k;
}

/// The scenario keys the grid gives a list of its own (an axis of them would clash with that list).
const std::map<std::string, std::string>& own_lists() {
  static const std::map<std::string, std::string> m = {{"model", "models"},         {"hw", "hw"},
                                                       {"nodes", "nodes"},          {"nic", "nics"},
                                                       {"precision", "precisions"}, {"runtime", "runtimes"},
                                                       {"placement", "placements"}, {"strategy", "strategies"}};
  return m;
}

/// The object at `key`'s parent in `doc`, made where absent ("a.b.c": doc["a"]["b"]).
nlohmann::json& parent_of(nlohmann::json& doc, const std::string& key, std::string& leaf) {
  nlohmann::json* at = &doc;
  std::size_t from = 0;
  for (auto dot = key.find('.'); dot != std::string::npos; dot = key.find('.', from)) {
    nlohmann::json& next = (*at)[key.substr(from, dot - from)];
    if (!next.is_object()) next = nlohmann::json::object();
    at = &next;
    from = dot + 1;
  }
  leaf = key.substr(from);
  return *at;
}

}  // namespace

void read_axes(const json::Node& root, Grid& g) {
  const auto a = root.optional_child("axes");
  if (!a) return;
  if (!a->raw().is_object() || a->raw().empty())
    throw a->error(
        "give an object of {\"dotted scenario key\": [values]}, e.g. {\"scheduler.max_num_seqs\": [64, 256]}");
  const char* instrument = g.serving() ? "serve" : "simulate";
  const AxisKeys& known = g.serving() ? serve_keys() : simulate_keys();
  for (const auto& [key, values] : a->raw().items()) {
    if (const auto own = own_lists().find(key); own != own_lists().end() && known.knows(key))
      throw a->error(key, "has a list of its own in a grid: give its values in \"" + own->second + "\" instead");
    if (!known.knows(key))
      throw a->error(key, std::string("is not a key of a ") + instrument + " scenario" +
                              text::did_you_mean(key, known.keys) + " (`moesim " + instrument +
                              " --help` lists them under \"scenario keys\"; a " + (g.serving() ? "serving" : "decode") +
                              " grid's axes are its keys)");
    if (!values.is_array() || values.empty())
      throw a->error(key, "must be a list of at least one value, e.g. [64, 256]");
    for (std::size_t i = 0; i < values.size(); ++i)
      if (values[i].is_null())
        throw a->error(key, "[" + std::to_string(i) + "] is null: give a value (leave a key out with its default)");
    g.axes.emplace_back(key, values.get<std::vector<nlohmann::json>>());
  }
}

void check_axes(const Grid& g, const GridPoint& first) {
  for (const auto& [key, values] : g.axes) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::vector<std::pair<std::string, nlohmann::json>> one = {{key, values[i]}};
      const std::string source = g.origin + " ($.axes[\"" + key + "\"][" + std::to_string(i) + "])";
      // The value alone, read as the instrument reads its scenario: the same types, units, ranges, names.
      const nlohmann::json alone = settings_object(one);
      const json::Node node(alone, source);
      if (!g.serving()) {
        scenario::SimulateRequest request;
        scenario::simulate_params().read(node, request);
        continue;
      }
      scenario::ServeRequest request;
      scenario::serve_params().read(node, request);
      if (key.rfind("workload.", 0) != 0) continue;
      // A key inside the workload is checked in the first point's workload, when that one reads on its own
      // (a workload that does not is the point's own error, reported when it runs).
      nlohmann::json doc = serve_doc(g, first);
      if (!doc.contains("workload")) continue;
      try {
        (void)sim::parse_workload(json::Node(doc.at("workload"), source), g.base_dir);
      } catch (const UserError&) {
        continue;
      }
      apply_settings(doc, one);
      (void)sim::parse_workload(json::Node(doc.at("workload"), source, "$.workload"), g.base_dir);
    }
  }
}

nlohmann::json settings_object(const std::vector<std::pair<std::string, nlohmann::json>>& settings) {
  nlohmann::json doc = nlohmann::json::object();
  apply_settings(doc, settings);
  return doc;
}

void apply_settings(nlohmann::json& doc, const std::vector<std::pair<std::string, nlohmann::json>>& settings,
                    bool serve_keys_only) {
  for (const auto& [key, value] : settings) {
    if (serve_keys_only && !serve_keys().knows(key)) continue;
    std::string leaf;
    parent_of(doc, key, leaf)[leaf] = value;
  }
}

std::string decode_only_axis(const GridPoint& p) {
  for (const auto& s : p.settings)
    if (!serve_keys().knows(s.first)) return s.first;
  return "";
}

}  // namespace moesim::reports::sweep_detail
