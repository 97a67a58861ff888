#pragma once
// Scenario keys several commands share, declared once for every table that holds them (params.hpp):
// "streaming" (routed experts read from storage: --stream-from, --readers, --page-cache), "costs" (the
// assumptions that price a token) and the help of
// "runtime" (the runtime profiles built in).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/cost.hpp"
#include "moesim/model/expert_streaming.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/scenario/params.hpp"

namespace moesim::scenario {

/// The flags that stream routed experts from storage: --stream-from STORAGE, --readers N, --page-cache
/// SIZE; the scenario key "streaming" holds the same (cost::StreamingSpec).
void add_streaming_options(po::options_description& desc);
/// Applies the streaming flags given to `spec` (--stream-from creates it, the others change it). UserError
/// for --readers or --page-cache with no storage to read from, or a bad value.
void apply_streaming_options(const po::variables_map& vm, std::optional<cost::StreamingSpec>& spec);
/// Whether any streaming flag was given.
bool streaming_flag_given(const po::variables_map& vm);

/// The help of --runtime (estimate, simulate, serve): what a runtime profile is, and the built-in ones by
/// runtime with the node profiles each is for (model::builtin_runtimes()).
std::string runtime_help();

/// Declares "streaming" in `table`: the object cost::streaming_spec_from_json reads, and its three flags.
template <class R>
Param<R>& streaming_key(ParamTable<R>& table, std::optional<cost::StreamingSpec> R::*member) {
  return table.custom("streaming", "object")
      .describe(
          "stream the routed experts from storage: {\"storage\": a storage profile id, \"readers\": parallel "
          "pread() threads, \"page_cache\": a size} (seed 004, flash-moe)")
      .flag("stream-from")
      .reader([member](const Param<R>& p, const json::Node& n, R& r) {
        r.*member = cost::streaming_spec_from_json(n.child(p.key()));
      })
      .writer([member](const Param<R>& p, const R& r, nlohmann::json& out) {
        if (r.*member) out[p.key()] = cost::streaming_spec_to_json(*(r.*member));
      })
      .flag_adder([](const Param<R>&, po::options_description& d, const std::string&) { add_streaming_options(d); })
      .flag_given_if([](const po::variables_map& vm) { return streaming_flag_given(vm); })
      .flag_applier(
          [member](const Param<R>&, const po::variables_map& vm, R& r) { apply_streaming_options(vm, r.*member); });
}

/// A scenario's or grid's "costs" object ({"energy_price": "0.13USD/kWh", "amortisation": "3years",
/// "utilisation": "100%", "source": "..."}): the assumptions that turn capital and power into a cost per
/// token (model::running_cost). `source` receives its "source". UserError naming the key otherwise.
model::CostAssumptions read_costs(const json::Node& costs, std::string& source);

/// "5tokens/s" -> 5: the string at `key`, a positive number followed by one of `suffixes` (no other unit is
/// meaningful there). UserError naming the key, with `example`, otherwise.
double number_with_suffix(const json::Node& n, std::string_view key, const std::vector<std::string>& suffixes,
                          const std::string& example);

}  // namespace moesim::scenario
