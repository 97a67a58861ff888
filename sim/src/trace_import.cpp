#include "moesim/model/fd_io.hpp"
#include "moesim/sim/trace_import.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "moesim/model/error.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_io.hpp"

namespace moesim::sim {
namespace {

std::string files_text(const std::vector<std::string>& paths) {
  std::vector<std::string> shown(paths.begin(),
                                 paths.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(paths.size(), 3)));
  std::string s = text::join(shown);
  if (paths.size() > 3) s += " and " + std::to_string(paths.size() - 3) + " more";
  return s;
}

void require_experts(const ImportOptions& o) {
  if (o.experts < 1 || o.experts > kMaxTraceExperts) {
    throw UserError(
        "the routed-expert count is needed to import this format (its files do not state it): give "
        "--model ID or --experts N (1 to 65,535)");
  }
}

/// Accumulates tokens with a shape fixed by the first one and checked against the model's.
class TraceBuilder {
 public:
  TraceBuilder(const ImportOptions& o, std::string format) : o_(o), format_(std::move(format)) {
    t_.header.model = o.model.empty() ? "unknown" : o.model;
    t_.header.experts = o.experts;
  }

  /// Fixes the MoE layer count on first use; `where` and `what` describe where it was read.
  void set_layers(std::int64_t layers, const std::string& where, const std::string& what) {
    if (t_.header.layers != 0) return;
    if (o_.layers && *o_.layers != layers) {
      throw UserError(where + ": " + what + " gives " + std::to_string(layers) + " MoE layers but --model has " +
                      std::to_string(*o_.layers) +
                      "; give the model the trace was recorded with (or --experts N instead of --model)");
    }
    t_.header.layers = layers;
  }
  /// Fixes top-k on first use, else checks it.
  void check_k(std::size_t k, const std::string& where) {
    const auto kk = static_cast<std::int64_t>(k);
    if (t_.header.top_k == 0) {
      if (kk < 1) throw UserError(where + ": lists no experts; every token-layer lists its top-k expert ids");
      if (o_.top_k && *o_.top_k != kk) {
        throw UserError(where + ": lists " + std::to_string(kk) + " experts per token and layer but --model's top-k " +
                        "is " + std::to_string(*o_.top_k) +
                        "; give the model the trace was recorded with (or --experts N instead of --model)");
      }
      if (kk > o_.experts) {
        throw UserError(where + ": lists " + std::to_string(kk) + " experts per token-layer, more than the " +
                        std::to_string(o_.experts) + " experts given; check --experts or --model");
      }
      t_.header.top_k = kk;
      first_k_where_ = where;
      return;
    }
    if (kk != t_.header.top_k) {
      throw UserError(where + ": lists " + std::to_string(kk) + " experts but " + first_k_where_ + " lists " +
                      std::to_string(t_.header.top_k) + "; every token-layer of a trace has the same top-k");
    }
  }
  /// One expert id read at `where`: must be an integer in [0, experts).
  void push_id(const nlohmann::json& v, const std::string& where) {
    if (!v.is_number_integer())
      throw UserError(where + ": is " + json::type_name(v) + ", expected an integer expert id");
    const auto id = v.get<std::int64_t>();
    if (id < 0 || id >= o_.experts) {
      throw UserError(where + ": expert id " + std::to_string(id) + " is out of range [0, " +
                      std::to_string(o_.experts) + ")" +
                      (id < 0 ? " (negative ids mark tokens the engine did not route; drop those tokens)"
                              : "; give the model's expert count with --model or --experts (the files do not "
                                "state it)"));
    }
    t_.experts.push_back(static_cast<std::uint16_t>(id));
  }
  /// After the k ids of one token-layer: refuse a repeated expert.
  void check_distinct(const std::string& where) {
    const auto k = static_cast<std::size_t>(t_.header.top_k);
    const std::uint16_t* ids = t_.experts.data() + t_.experts.size() - k;
    for (std::size_t i = 1; i < k; ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (ids[i] == ids[j]) {
          throw UserError(where + "[" + std::to_string(i) + "]: expert " + std::to_string(ids[i]) +
                          " appears twice in one token-layer (also at [" + std::to_string(j) +
                          "]); a router picks distinct experts: the file is damaged");
        }
      }
    }
  }
  void add_token(std::uint32_t request, std::uint32_t position) {
    t_.request.push_back(request);
    t_.position.push_back(position);
  }
  std::vector<float>& weights() { return t_.weights; }
  [[nodiscard]] std::int64_t layers() const { return t_.header.layers; }

  RoutingTrace finish(const std::string& source, const std::string& where) {
    t_.header.source = source;
    if (t_.tokens() == 0) {
      throw UserError(where + ": contains no tokens to import" +
                      (o_.include_prefill ? std::string() : " (the prefill was left out; drop --decode-only?)"));
    }
    validate_trace(t_, where);  // a safety net: everything was checked with its file position already
    return std::move(t_);
  }

 private:
  const ImportOptions& o_;
  std::string format_;
  std::string first_k_where_;
  RoutingTrace t_;
};

std::uint32_t to_u32(std::int64_t v, const std::string& where, const char* what) {
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    throw UserError(where + ": " + what + " " + std::to_string(v) + " is outside [0, 4294967295]");
  }
  return static_cast<std::uint32_t>(v);
}

// ------------------------------------------------------------------------------------------------------
// vLLM: [tokens][layers][k] arrays.

void read_vllm_tokens(const nlohmann::json& arr, const std::string& path, const std::string& where,
                      std::uint32_t request, std::uint32_t first_position, bool keep, TraceBuilder& b) {
  if (!arr.is_array()) {
    throw UserError(path + ": " + where + ": is " + json::type_name(arr) +
                    ", expected [tokens][num_moe_layers][top_k] expert ids");
  }
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const auto& tok = arr[i];
    const std::string w = path + ": " + where + "[" + std::to_string(i) + "]";
    if (!tok.is_array())
      throw UserError(w + ": is " + json::type_name(tok) + ", expected one list of expert ids per MoE layer");
    b.set_layers(static_cast<std::int64_t>(tok.size()), w, "the first token");
    if (!keep) continue;
    if (static_cast<std::int64_t>(tok.size()) != b.layers()) {
      throw UserError(w + ": has " + std::to_string(tok.size()) + " layers but the first token has " +
                      std::to_string(b.layers()) + "; every token lists every MoE layer");
    }
    for (std::size_t l = 0; l < tok.size(); ++l) {
      const auto& row = tok[l];
      const std::string wl = w + "[" + std::to_string(l) + "]";
      if (!row.is_array())
        throw UserError(wl + ": is " + json::type_name(row) + ", expected a list of top-k expert ids");
      b.check_k(row.size(), wl);
      for (std::size_t s = 0; s < row.size(); ++s) b.push_id(row[s], wl + "[" + std::to_string(s) + "]");
      b.check_distinct(wl);
    }
    b.add_token(request, first_position + static_cast<std::uint32_t>(i));
  }
}

}  // namespace

std::string import_format_name(ImportFormat f) {
  switch (f) {
    case ImportFormat::MoeSelection:
      return "moe-selection";
    case ImportFormat::SpeculativeMoe:
      return "speculative-moe";
    case ImportFormat::Vllm:
      return "vllm";
  }
  return "?";
}

std::optional<ImportFormat> parse_import_format(std::string_view name, const std::string& flag) {
  if (name == "jsonl" || name == "binary") return std::nullopt;
  if (name == "moe-selection") return ImportFormat::MoeSelection;
  if (name == "speculative-moe") return ImportFormat::SpeculativeMoe;
  if (name == "vllm") return ImportFormat::Vllm;
  const std::vector<std::string> names = {"jsonl", "binary", "moe-selection", "speculative-moe", "vllm"};
  throw UserError(flag + ": unknown trace format '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid: " + text::join(names));
}

RoutingTrace import_vllm(const std::vector<std::string>& paths, const ImportOptions& o) {
  require_experts(o);
  TraceBuilder b(o, "vllm");
  std::uint32_t request = 0;
  std::int64_t prompt_tokens = 0, generated = 0;
  for (const auto& path : paths) {
    const nlohmann::json doc = json::load_file(path);
    // A request is a bare [tokens][layers][k] array, or {"routed_experts": ..., "prompt_routed_experts": ...}.
    const auto one = [&](const nlohmann::json& r, const std::string& where) {
      if (r.is_array()) {
        read_vllm_tokens(r, path, where, request, 0, true, b);
        generated += static_cast<std::int64_t>(r.size());
      } else if (r.is_object()) {
        json::Node(r, path, where).expect_only({"routed_experts", "prompt_routed_experts"});
        if (!r.contains("routed_experts")) {
          throw UserError(path + ": " + where +
                          ".routed_experts: is missing; save the output's routed_experts "
                          "([gen_len][num_moe_layers][top_k]) under this key");
        }
        std::uint32_t first = 0;
        if (r.contains("prompt_routed_experts") && !r["prompt_routed_experts"].is_null()) {
          const auto& p = r["prompt_routed_experts"];
          read_vllm_tokens(p, path, where + ".prompt_routed_experts", request, 0, o.include_prefill, b);
          first = static_cast<std::uint32_t>(p.size());
          if (o.include_prefill) prompt_tokens += static_cast<std::int64_t>(p.size());
        }
        read_vllm_tokens(r["routed_experts"], path, where + ".routed_experts", request, first, true, b);
        generated += static_cast<std::int64_t>(r["routed_experts"].size());
      } else {
        throw UserError(path + ": " + where + ": is " + json::type_name(r) +
                        ", expected the routed_experts array or an object {\"routed_experts\": ..., "
                        "\"prompt_routed_experts\": ...}");
      }
      ++request;
    };
    if (doc.is_array() && !doc.empty() && doc[0].is_object()) {
      for (std::size_t i = 0; i < doc.size(); ++i) one(doc[i], "$[" + std::to_string(i) + "]");
    } else {
      one(doc, "$");
    }
  }
  return b.finish("imported from vLLM routed_experts JSON (" + files_text(paths) + "): " + std::to_string(request) +
                      (request == 1 ? " request, " : " requests, ") + std::to_string(prompt_tokens) + " prompt + " +
                      std::to_string(generated) + " generated tokens" + (o.include_prefill ? "" : ", prompts left out"),
                  files_text(paths));
}

RoutingTrace import_moe_selection(const std::vector<std::string>& paths, const ImportOptions& o) {
  require_experts(o);
  TraceBuilder b(o, "moe-selection");
  std::vector<std::int64_t> moe_layers;  // decoder-layer indices that are MoE layers (non-null)
  std::string moe_layers_from;
  std::int64_t prefill_tokens = 0, decode_tokens = 0;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    const auto& path = paths[f];
    const nlohmann::json doc = json::load_file(path);
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
  for (const auto l : moe_layers) idx.push_back(std::to_string(l));
  return b.finish(
      "imported from MoE_expert_selection_trace per-query JSON (core12345, arXiv 2510.05497; " + files_text(paths) +
          "): " + std::to_string(paths.size()) + (paths.size() == 1 ? " request, " : " requests, ") +
          std::to_string(prefill_tokens) + " prefill + " + std::to_string(decode_tokens) + " decode tokens" +
          (o.include_prefill ? "" : " (prefill left out)") + "; MoE layers = decoder layers " + text::join(idx, ","),
      files_text(paths));
}

RoutingTrace import_speculative_moe(const std::string& path, const ImportOptions& o) {
  require_experts(o);
  InputFile file(path);  // a regular file, or a one-line refusal (no FIFO, device or directory)
  std::istream& in = file.stream();

  struct Rec {
    std::int64_t line = 0;
    std::vector<std::int64_t> experts;
    std::vector<double> probs;
  };
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, Rec> recs;  // (problem, token, layer)
  std::int64_t lineno = 0, duplicates = 0, max_layer = -1;
  std::optional<bool> probs_first;
  std::int64_t probs_line = 0;
  std::size_t k = 0;
  std::int64_t k_line = 0;
  std::string line;
  const LineBound max_line = line_bound(17.0);  // each line is parsed as JSON (json_reader.cpp)
  while (read_line(in, line, max_line, path, lineno + 1)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ": line " + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = json::parse_strict(line, where);
    } catch (const nlohmann::json::parse_error& e) {
      throw UserError(where + ", column " + std::to_string(e.byte == 0 ? 1 : e.byte) +
                      ": malformed JSON; every line is one record {\"problem_id\", \"layer\", \"experts\", "
                      "\"gating_probs\", \"token_idx\"} (was the file cut short?)");
    } catch (const nlohmann::json::out_of_range& e) {
      throw UserError(where + ": " + json::number_overflow(e) + "; write numbers within a double's range");
    }
    if (!j.is_object()) throw UserError(where + ": is " + json::type_name(j) + ", expected a record object {...}");
    const json::Node n(j, where);
    n.expect_only({"problem_id", "layer", "experts", "gating_probs", "token_idx", "dataset"});
    const std::int64_t problem = n.integer("problem_id", 0);
    const std::int64_t token = n.integer("token_idx", 0);
    const std::int64_t layer = n.integer("layer", 0);
    to_u32(problem, where + ": $.problem_id", "problem id");
    to_u32(token, where + ": $.token_idx", "token index");
    if (layer > 65535)
      throw UserError(where + ": $.layer: " + std::to_string(layer) + " is not a plausible layer index");
    Rec r;
    r.line = lineno;
    const auto ex = n.elements("experts");
    if (k == 0) {
      k = ex.size();
      k_line = lineno;
      if (k == 0) throw UserError(where + ": $.experts: is empty; a record lists the token's top-k experts");
      if (o.top_k && static_cast<std::int64_t>(k) != *o.top_k) {
        throw UserError(where + ": $.experts: lists " + std::to_string(k) + " experts but --model's top-k is " +
                        std::to_string(*o.top_k) + "; give the model the trace was recorded with");
      }
      if (static_cast<std::int64_t>(k) > o.experts) {
        throw UserError(where + ": $.experts: lists " + std::to_string(k) + " experts, more than the " +
                        std::to_string(o.experts) + " given; check --experts or --model");
      }
    } else if (ex.size() != k) {
      throw UserError(where + ": $.experts: lists " + std::to_string(ex.size()) + " experts but line " +
                      std::to_string(k_line) + " lists " + std::to_string(k) + "; every record has the same top-k");
    }
    for (std::size_t s = 0; s < ex.size(); ++s) {
      const auto& v = ex[s].raw();
      if (!v.is_number_integer()) throw ex[s].error("is " + json::type_name(v) + ", expected an integer expert id");
      const auto id = v.get<std::int64_t>();
      if (id < 0 || id >= o.experts) {
        throw ex[s].error("expert id " + std::to_string(id) + " is out of range [0, " + std::to_string(o.experts) +
                          "); give the model's expert count with --model or --experts");
      }
      for (std::size_t q = 0; q < s; ++q) {
        if (r.experts[q] == id) {
          throw ex[s].error("expert " + std::to_string(id) + " appears twice in one record (also at [" +
                            std::to_string(q) + "]); a router picks distinct experts: the file is damaged");
        }
      }
      r.experts.push_back(id);
    }
    const bool has_probs = n.has("gating_probs") && !n.is_null("gating_probs");
    if (!probs_first) {
      probs_first = has_probs;
      probs_line = lineno;
    } else if (*probs_first != has_probs) {
      throw UserError(where + ": $.gating_probs: " + (has_probs ? "is present" : "is missing") + " but line " +
                      std::to_string(probs_line) + (has_probs ? " has none" : " has them") +
                      "; gate weights are all-or-none");
    }
    if (has_probs) {
      const auto pr = n.elements("gating_probs");
      if (pr.size() != k) {
        throw n.error("gating_probs", "has " + std::to_string(pr.size()) + " values but \"experts\" has " +
                                          std::to_string(k) + "; give one probability per chosen expert");
      }
      for (const auto& p : pr) {
        if (!p.raw().is_number()) throw p.error("is " + json::type_name(p.raw()) + ", expected a number");
        const double x = p.raw().get<double>();
        if (!std::isfinite(x) || x < 0) throw p.error("gate probability " + text::printf("%g", x) + " is negative");
        r.probs.push_back(x);
      }
    }
    max_layer = std::max(max_layer, layer);
    const auto key = std::make_tuple(problem, token, layer);
    const auto it = recs.find(key);
    if (it != recs.end()) {
      if (it->second.experts == r.experts && it->second.probs == r.probs) {
        ++duplicates;  // the same record written twice (seen in the project's sample): keep one
        continue;
      }
      throw UserError(where + ": conflicts with line " + std::to_string(it->second.line) + ": both are problem " +
                      std::to_string(problem) + ", token " + std::to_string(token) + ", layer " +
                      std::to_string(layer) + " but give different experts or gating_probs; the file mixes two " +
                      "runs: keep one of them");
    }
    recs.emplace(key, std::move(r));
  }
  if (recs.empty()) throw UserError(path + ": contains no records to import");

  TraceBuilder b(o, "speculative-moe");
  const std::int64_t layers = o.layers ? *o.layers : max_layer + 1;
  if (max_layer >= layers) {
    for (const auto& [key, r] : recs) {
      if (std::get<2>(key) >= layers) {
        throw UserError(path + ": line " + std::to_string(r.line) + ": $.layer: " + std::to_string(std::get<2>(key)) +
                        " but --model has " + std::to_string(layers) +
                        " MoE layers; give the model the trace was recorded with");
      }
    }
  }
  b.set_layers(layers, path, "the records");
  b.check_k(k, path + ": line " + std::to_string(k_line));
  std::int64_t tokens = 0;
  std::set<std::int64_t> problems;
  for (auto it = recs.begin(); it != recs.end();) {
    const auto [problem, token, first_layer] = it->first;
    const std::int64_t first_line = it->second.line;
    for (std::int64_t l = 0; l < layers; ++l, ++it) {
      if (it == recs.end() || std::get<0>(it->first) != problem || std::get<1>(it->first) != token ||
          std::get<2>(it->first) != l) {
        throw UserError(path + ": problem " + std::to_string(problem) + ", token " + std::to_string(token) +
                        ": no record for layer " + std::to_string(l) + " (its first record is line " +
                        std::to_string(first_line) + "; every token needs one record per layer 0-" +
                        std::to_string(layers - 1) + "); the file is incomplete");
      }
      const auto& r = it->second;
      const std::string wl = path + ": line " + std::to_string(r.line) + ": $.experts";
      for (std::size_t s = 0; s < r.experts.size(); ++s) {
        b.push_id(nlohmann::json(r.experts[s]), wl + "[" + std::to_string(s) + "]");
      }
      for (const auto p : r.probs) b.weights().push_back(static_cast<float>(p));
    }
    b.add_token(static_cast<std::uint32_t>(problem), static_cast<std::uint32_t>(token));
    problems.insert(problem);
    ++tokens;
  }
  return b.finish("imported from speculative-moe JSON lines (github.com/Mario928/speculative-moe; " + path +
                      "): " + std::to_string(problems.size()) + " problems, " + std::to_string(tokens) + " tokens, " +
                      std::to_string(lineno) + " lines, " + std::to_string(duplicates) +
                      " identical duplicate records dropped",
                  path);
}

RoutingTrace import_trace(ImportFormat format, const std::vector<std::string>& paths, const ImportOptions& o) {
  MOESIM_CHECK(!paths.empty(), "import_trace needs at least one path");
  switch (format) {
    case ImportFormat::MoeSelection:
      return import_moe_selection(paths, o);
    case ImportFormat::Vllm:
      return import_vllm(paths, o);
    case ImportFormat::SpeculativeMoe:
      if (paths.size() != 1) {
        throw UserError("--from speculative-moe reads one file (its records name their problems); give one input");
      }
      return import_speculative_moe(paths[0], o);
  }
  return {};
}

}  // namespace moesim::sim
