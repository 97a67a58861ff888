#pragma once
// What the importers of sim/trace_import.hpp share (internal to sim/src): the builder that accumulates a
// trace with its shape fixed by the first token and checked against the model's, and small helpers.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"
#include "moesim/model/text.hpp"
#include "moesim/sim/trace_import.hpp"
#include "moesim/sim/trace_io.hpp"

namespace moesim::sim::import_detail {

inline std::string files_text(const std::vector<std::string>& paths) {
  std::vector<std::string> shown(paths.begin(),
                                 paths.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(paths.size(), 3)));
  std::string s = text::join(shown);
  if (paths.size() > 3) s += " and " + std::to_string(paths.size() - 3) + " more";
  return s;
}

inline void require_experts(const ImportOptions& o) {
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
    push_id(v.get<std::int64_t>(), where);
  }
  void push_id(std::int64_t id, const std::string& where) {
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

inline std::uint32_t to_u32(std::int64_t v, const std::string& where, const char* what) {
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    throw UserError(where + ": " + what + " " + std::to_string(v) + " is outside [0, 4294967295]");
  }
  return static_cast<std::uint32_t>(v);
}

/// Passes a line for the user to ImportOptions::note (the command prints it on stderr), if set.
inline void note(const ImportOptions& o, const std::string& line) {
  if (o.note) o.note(line);
}

}  // namespace moesim::sim::import_detail
