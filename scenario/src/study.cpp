#include "moesim/scenario/study.hpp"

#include "moesim/model/embedded.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/scenario/table.hpp"

namespace moesim::example_data {
const std::vector<moesim::EmbeddedFile>& embedded_files();
}

namespace moesim::scenario {

Study study_from_json(const nlohmann::json& doc, const std::string& source) {
  const json::Node root(doc, source);
  root.expect_only({"description", "estimate", "cost_comparison"});
  Study s;
  s.origin = source;
  s.description = root.optional_string("description").value_or("");
  const json::Node est = root.child("estimate");
  s.estimate = scenario_from_json(est.raw(), source + " ($.estimate)");
  if (root.has("cost_comparison")) {
    for (const auto& c : root.elements("cost_comparison")) {
      c.expect_only({"label", "hw", "nic", "nodes", "tokens_per_second", "source"});
      CostPoint p;
      p.label = c.string("label");
      p.hw = c.string("hw");
      p.nic = c.optional_string("nic").value_or("");
      p.nodes = c.integer("nodes", 1);
      p.tokens_per_second = c.number("tokens_per_second");
      if (p.tokens_per_second <= 0)
        throw c.error("tokens_per_second", "must be positive (a measured throughput in tokens/s)");
      p.source = c.string("source");
      s.cost_comparison.push_back(std::move(p));
    }
  }
  return s;
}

nlohmann::json builtin_example(const std::string& file) {
  for (const auto& f : example_data::embedded_files()) {
    if (f.path == file) return json::parse_text(f.contents, "built-in examples/" + file);
  }
  MOESIM_CHECK(false, "the built-in examples/" + file + " is not compiled in");
  return {};
}

Study load_study(const std::string& path) {
  if (!path.empty()) return study_from_json(json::load_file(path), path);
  return study_from_json(builtin_example("dbrx-mac-studio.json"), "built-in examples/dbrx-mac-studio.json");
}

CostRow price_point(const CostPoint& p) {
  const model::NodeProfile node = model::load_node(p.hw);
  std::optional<model::NicProfile> nic;
  if (p.nodes > 1) {
    if (p.nic.empty())
      throw UserError("cost of " + std::to_string(p.nodes) + " nodes of " + p.hw +
                      ": give the NIC (--nic) so its price counts");
    nic = model::load_nic(p.nic);
  }
  CostRow r;
  r.point = p;
  r.cost = model::capital_cost(node, nic ? &*nic : nullptr, p.nodes);
  r.tokens_per_second_per_usd = model::tokens_per_second_per_usd(p.tokens_per_second, r.cost.total());
  return r;
}

void print_study_text(const Study& s, std::ostream& out) {
  out << "moesim study: " << s.origin << "\n";
  if (!s.description.empty()) out << s.description << "\n";
  out << "\n";
  print_estimate_text(run_estimate(s.estimate), out);
  if (!s.cost_comparison.empty()) {
    out << "\nCost efficiency of measured throughputs (capital cost = node price x nodes + NIC price x nodes + a "
           "switch for 3 or more nodes):\n\n";
    Table t({"system", "hw", "nodes", "tokens/s (measured)", "cost USD", "tok/s/USD", "throughput source"});
    for (const auto& p : s.cost_comparison) {
      const CostRow r = price_point(p);
      t.add_row({p.label, p.hw, std::to_string(p.nodes), text::printf("%.1f", p.tokens_per_second),
                 text::printf("%.0f", r.cost.total().base()), text::printf("%.6f", r.tokens_per_second_per_usd),
                 p.source});
    }
    t.print_text(out);
  }
}

nlohmann::json study_to_json(const Study& s) {
  nlohmann::json j;
  j["command"] = "study";
  j["origin"] = s.origin;
  j["description"] = s.description;
  j["estimate"] = estimate_to_json(run_estimate(s.estimate));
  j["cost_comparison"] = nlohmann::json::array();
  for (const auto& p : s.cost_comparison) {
    const CostRow r = price_point(p);
    j["cost_comparison"].push_back(
        {{"label", p.label},
         {"hw", p.hw},
         {"nic", p.nic},
         {"nodes", p.nodes},
         {"source", p.source},
         {"metrics",
          {{{"name", "tokens_per_second"}, {"value", p.tokens_per_second}, {"unit", "tokens/s"}},
           {{"name", "cost"}, {"value", r.cost.total().base()}, {"unit", "USD"}},
           {{"name", "tokens_per_second_per_usd"},
            {"value", r.tokens_per_second_per_usd},
            {"unit", "tokens/s/USD"}}}}});
  }
  return j;
}

}  // namespace moesim::scenario
