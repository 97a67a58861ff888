// Importers of public routing-trace formats (sim/trace_import.hpp): the format names, the moe-selection
// importer, and the dispatch. vLLM is read in trace_import_vllm.cpp, speculative-moe in
// trace_import_specmoe.cpp, format detection in trace_detect.cpp.
#include "moesim/sim/trace_import.hpp"

#include <algorithm>

#include "moesim/model/registry.hpp"
#include "moesim/sim/trace_input.hpp"
#include "moesim/sim/trace_io.hpp"
#include "trace_import_common.hpp"

namespace moesim::sim {

using import_detail::TraceBuilder;

namespace {

std::vector<ImportFormatInfo>& import_format_registry() {
  static std::vector<ImportFormatInfo> all = {
      {ImportFormat::MoeSelection, "moe-selection",
       "per-query JSON of the HF dataset core12345/MoE_expert_selection_trace (arXiv 2510.05497): one file per "
       "request; decoder layers that are null are dense and skipped",
       import_moe_selection},
      {ImportFormat::SpeculativeMoe, "speculative-moe",
       "JSON lines {problem_id, layer, experts, gating_probs, token_idx or token_pos} of "
       "github.com/Mario928/speculative-moe, one file: tokens missing a layer's record are dropped and counted; "
       "identical repeated records are dropped",
       [](const std::vector<std::string>& paths, const ImportOptions& o) {
         if (paths.size() != 1) {
           throw UserError("--from speculative-moe reads one file (its records name their problems); give one input");
         }
         return import_speculative_moe(paths[0], o);
       }},
      {ImportFormat::Vllm, "vllm",
       "a saved /v1/completions response of vLLM --enable-return-routed-experts (prompt_routed_experts and "
       "choices[i].routed_experts, or the base64 .npy form), or routed_experts [gen_len][layers][top_k] arrays: one "
       "request per file, or an array of {\"routed_experts\", \"prompt_routed_experts\"} objects",
       import_vllm},
  };
  return all;
}

}  // namespace

const std::vector<ImportFormatInfo>& import_formats() { return import_format_registry(); }

void register_import_format(ImportFormatInfo info) {
  for (const auto& f : trace_formats())
    if (f.name == info.name) throw UserError("trace format '" + info.name + "' is moesim's own format");
  add_entry(import_format_registry(), std::move(info), "trace format");
}

std::string import_format_name(ImportFormat f) { return std::string(name_in(import_formats(), f)); }

std::optional<ImportFormat> parse_import_format(std::string_view name, const std::string& flag) {
  // moesim's own formats by their names (not the aliases --format takes: --from never did).
  std::vector<std::string> names;
  for (const auto& f : trace_formats()) {
    if (name == f.name) return std::nullopt;
    names.push_back(f.name);
  }
  for (const auto& f : import_formats()) {
    if (name == f.name) return f.value;
    names.push_back(f.name);
  }
  throw UserError(flag + ": unknown trace format '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid: " + text::join(names));
}

RoutingTrace import_moe_selection(const std::vector<std::string>& paths, const ImportOptions& o) {
  import_detail::require_experts(o);
  TraceBuilder b(o, "moe-selection");
  std::vector<std::int64_t> moe_layers;  // decoder-layer indices that are MoE layers (non-null)
  std::string moe_layers_from;
  std::int64_t prefill_tokens = 0, decode_tokens = 0;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    const auto& path = paths[f];
    // A JSON document is held whole: 17 bytes of memory per byte of text (json_reader.cpp); gzip and zstd
    // files are decompressed, with that bound (sim/trace_input.hpp).
    const nlohmann::json doc = json::parse_text(read_trace_text(path, 17.0, "parsing it as JSON"), path);
    if (!doc.is_array() || doc.empty()) {
      throw UserError(path + ": $: is " + (doc.is_array() ? std::string("an empty array") : json::type_name(doc)) +
                      ", expected the per-query array of steps (the prefill first, then one object per decode step)");
    }
    std::uint32_t position = 0;
    for (std::size_t i = 0; i < doc.size(); ++i) {
      const auto& step = doc[i];
      const std::string where = path + ": $[" + std::to_string(i) + "]";
      if (!step.is_object()) {
        throw UserError(where + ": is " + json::type_name(step) + ", expected an object keyed by decoder-layer index " +
                        "(\"0\", \"1\", ...)");
      }
      std::vector<std::pair<std::int64_t, const nlohmann::json*>> layers;
      for (const auto& [key, val] : step.items()) {
        std::int64_t idx = -1;
        if (!key.empty() && key.size() <= 6 &&
            std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          idx = std::stoll(key);
        }
        if (idx < 0) {
          throw UserError(where + ": key \"" + key +
                          "\" is not a decoder-layer index; steps are keyed \"0\", \"1\", ... " +
                          "(is this a per-query file of MoE_expert_selection_trace?)");
        }
        if (!val.is_null()) layers.emplace_back(idx, &val);
      }
      std::sort(layers.begin(), layers.end(), [](const auto& a, const auto& b2) { return a.first < b2.first; });
      std::vector<std::int64_t> idx;
      idx.reserve(layers.size());
      for (const auto& l : layers) idx.push_back(l.first);
      if (moe_layers.empty()) {
        if (idx.empty()) throw UserError(where + ": every layer is null; a step needs the experts of its MoE layers");
        moe_layers = idx;
        moe_layers_from = where;
        b.set_layers(static_cast<std::int64_t>(idx.size()), where, "the layers with experts (non-null)");
      } else if (idx != moe_layers) {
        std::int64_t differ = -1;
        for (std::size_t j = 0; j < std::max(idx.size(), moe_layers.size()); ++j) {
          if (j >= idx.size() || j >= moe_layers.size() || idx[j] != moe_layers[j]) {
            differ = j < idx.size() && (j >= moe_layers.size() || idx[j] < moe_layers[j]) ? idx[j] : moe_layers[j];
            break;
          }
        }
        const bool here = std::find(idx.begin(), idx.end(), differ) != idx.end();
        throw UserError(where + ": layer \"" + std::to_string(differ) + "\" " +
                        (here ? "has experts here but is null in " : "is null or missing here but has experts in ") +
                        moe_layers_from + "; every step must list the same MoE layers (is the file damaged?)");
      }
      const std::size_t rows = layers.front().second->is_array() ? layers.front().second->size() : 0;
      for (const auto& [li, val] : layers) {
        const std::string wl = where + "[\"" + std::to_string(li) + "\"]";
        if (!val->is_array())
          throw UserError(wl + ": is " + json::type_name(*val) + ", expected one list of expert ids per token");
        if (val->size() != rows) {
          throw UserError(wl + ": has " + std::to_string(val->size()) + " tokens but layer \"" +
                          std::to_string(layers.front().first) + "\" has " + std::to_string(rows) +
                          "; every MoE layer of a step lists the same tokens");
        }
      }
      const bool prefill = i == 0;
      if (prefill && !o.include_prefill) {
        position += static_cast<std::uint32_t>(rows);
        continue;
      }
      for (std::size_t r = 0; r < rows; ++r) {
        for (const auto& [li, val] : layers) {
          const std::string wl = where + "[\"" + std::to_string(li) + "\"][" + std::to_string(r) + "]";
          const auto& row = (*val)[r];
          if (!row.is_array())
            throw UserError(wl + ": is " + json::type_name(row) + ", expected a list of top-k expert ids");
          b.check_k(row.size(), wl);
          for (std::size_t s = 0; s < row.size(); ++s) b.push_id(row[s], wl + "[" + std::to_string(s) + "]");
          b.check_distinct(wl);
        }
        b.add_token(static_cast<std::uint32_t>(f), position++);
        (prefill ? prefill_tokens : decode_tokens) += 1;
      }
    }
  }
  std::vector<std::string> idx;
  idx.reserve(moe_layers.size());
  for (const auto l : moe_layers) idx.push_back(std::to_string(l));
  return b.finish("imported from MoE_expert_selection_trace per-query JSON (core12345, arXiv 2510.05497; " +
                      import_detail::files_text(paths) + "): " + std::to_string(paths.size()) +
                      (paths.size() == 1 ? " request, " : " requests, ") + std::to_string(prefill_tokens) +
                      " prefill + " + std::to_string(decode_tokens) + " decode tokens" +
                      (o.include_prefill ? "" : " (prefill left out)") + "; MoE layers = decoder layers " +
                      text::join(idx, ","),
                  import_detail::files_text(paths));
}

RoutingTrace import_trace(ImportFormat format, const std::vector<std::string>& paths, const ImportOptions& o) {
  MOESIM_CHECK(!paths.empty(), "import_trace needs at least one path");
  return registered(import_formats(), format, "import format").import(paths, o);
}

}  // namespace moesim::sim
