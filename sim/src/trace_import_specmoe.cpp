// The speculative-moe importer (sim/trace_import.hpp; the format and its sources are in sim/TRACES.md §2.2).
//
// github.com/Mario928/speculative-moe records Mixtral's routing with a vLLM patch: RoutingProfiler.record()
// (profiling_moe_code/custom_profiling/routing_profiler.py) appends, for every forward pass and MoE layer,
// one JSON line per token of the pass: {"dataset", "problem_id", "layer", "token_pos", "experts",
// "gating_probs"}, token_pos being the token's position in the pass, and it skips any record whose two gate
// weights are exactly 0.5 (taking it for padding). collect_data.py's process_raw_data() then keeps, per
// problem and layer, the first run of decode records (token_pos 0) and renames their running count
// token_idx. Both forms are read here:
//  - processed (token_idx): the published files. token_idx counts each layer's records separately, so a
//    layer that lost a record to the 0.5 filter has fewer tokens than the others: a token is kept when every
//    layer has a record with its token_idx, the others (the last ones of a problem) are dropped and counted.
//  - raw (token_pos): the profiler's own output. Records are in file order; a new forward pass starts where
//    the layer goes back, or stays the same without token_pos going up. A token is kept when every layer of
//    its pass has it; the others are dropped and counted. Passes of more than one token are prefill.

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "moesim/model/fd_io.hpp"
#include "moesim/model/json_overflow.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/units.hpp"
#include "moesim/sim/trace_input.hpp"
#include "trace_import_common.hpp"

namespace moesim::sim {
namespace {

using import_detail::TraceBuilder;

struct Rec {
  std::int64_t problem = 0;
  std::int64_t index = 0;  // token_idx (processed) or token_pos (raw)
  std::int64_t layer = 0;
  std::int64_t line = 0;
};

enum class Form { Unknown, Processed, Raw };

const char* form_key(Form f) { return f == Form::Raw ? "token_pos" : "token_idx"; }

// The records of one file, with their ids and gate weights in flat arrays (k per record).
struct Records {
  std::vector<Rec> recs;
  std::vector<std::uint16_t> ids;
  std::vector<float> probs;
  std::size_t k = 0;
  bool has_probs = false;
  Form form = Form::Unknown;
  std::int64_t lines = 0;
  std::int64_t max_layer = -1;
  std::set<std::string> datasets;
};

Records read_records(const std::string& path, const ImportOptions& o) {
  TraceInput file(path);  // a regular file (no FIFO or device), decompressed when it is gzip or zstd
  std::istream& in = file.stream();
  Records r;
  std::optional<bool> probs_first;
  std::int64_t probs_line = 0, k_line = 0, form_line = 0;
  std::string line;
  const LineBound max_line = line_bound(17.0);  // each line is parsed as JSON (json_reader.cpp)
  while (read_line(in, line, max_line, path, r.lines + 1)) {
    const std::int64_t lineno = ++r.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ": line " + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = json::parse_strict(line, where);
    } catch (const nlohmann::json::parse_error& e) {
      throw UserError(where + ", column " + std::to_string(e.byte == 0 ? 1 : e.byte) +
                      ": malformed JSON; every line is one record {\"problem_id\", \"layer\", \"experts\", "
                      "\"gating_probs\", \"token_idx\" or \"token_pos\"} (was the file cut short?)");
    } catch (const nlohmann::json::out_of_range& e) {
      throw UserError(where + ": " + json::number_overflow(e) + "; write numbers within a double's range");
    }
    if (!j.is_object()) throw UserError(where + ": is " + json::type_name(j) + ", expected a record object {...}");
    const json::Node n(j, where);
    n.expect_only({"problem_id", "layer", "experts", "gating_probs", "token_idx", "token_pos", "dataset"});
    const bool idx = n.has("token_idx"), pos = n.has("token_pos");
    if (idx == pos) {
      throw UserError(where + ": " +
                      (idx ? std::string("has both token_idx and token_pos; a record has one of them")
                           : std::string("$.token_idx: is missing; records number their token with token_idx "
                                         "(collect_data.py's files) or token_pos (the profiler's raw output)")));
    }
    const Form form = idx ? Form::Processed : Form::Raw;
    if (r.form == Form::Unknown) {
      r.form = form;
      form_line = lineno;
    } else if (form != r.form) {
      throw UserError(where + ": has " + form_key(form) + " but line " + std::to_string(form_line) + " has " +
                      form_key(r.form) +
                      "; a file is either the profiler's raw output (token_pos) or collect_data.py's processed "
                      "file (token_idx), not both");
    }
    Rec rec;
    rec.line = lineno;
    rec.problem = n.integer("problem_id", 0);
    rec.index = n.integer(form_key(form), 0);
    rec.layer = n.integer("layer", 0);
    import_detail::to_u32(rec.problem, where + ": $.problem_id", "problem id");
    import_detail::to_u32(rec.index, where + ": $." + form_key(form), "token index");
    if (rec.layer > 65535)
      throw UserError(where + ": $.layer: " + std::to_string(rec.layer) + " is not a plausible layer index");
    if (const auto d = j.find("dataset"); d != j.end() && d->is_string() && r.datasets.size() < 4)
      r.datasets.insert(d->get<std::string>());
    const auto ex = n.elements("experts");
    if (r.k == 0) {
      r.k = ex.size();
      k_line = lineno;
      if (r.k == 0) throw UserError(where + ": $.experts: is empty; a record lists the token's top-k experts");
      if (o.top_k && static_cast<std::int64_t>(r.k) != *o.top_k) {
        throw UserError(where + ": $.experts: lists " + std::to_string(r.k) + " experts but --model's top-k is " +
                        std::to_string(*o.top_k) + "; give the model the trace was recorded with");
      }
      if (static_cast<std::int64_t>(r.k) > o.experts) {
        throw UserError(where + ": $.experts: lists " + std::to_string(r.k) + " experts, more than the " +
                        std::to_string(o.experts) + " given; check --experts or --model");
      }
    } else if (ex.size() != r.k) {
      throw UserError(where + ": $.experts: lists " + std::to_string(ex.size()) + " experts but line " +
                      std::to_string(k_line) + " lists " + std::to_string(r.k) + "; every record has the same top-k");
    }
    const std::size_t at = r.ids.size();
    for (std::size_t s = 0; s < ex.size(); ++s) {
      const auto& v = ex[s].raw();
      if (!v.is_number_integer()) throw ex[s].error("is " + json::type_name(v) + ", expected an integer expert id");
      const auto id = v.get<std::int64_t>();
      if (id < 0 || id >= o.experts) {
        throw ex[s].error("expert id " + std::to_string(id) + " is out of range [0, " + std::to_string(o.experts) +
                          "); give the model's expert count with --model or --experts");
      }
      for (std::size_t q = 0; q < s; ++q) {
        if (r.ids[at + q] == id) {
          throw ex[s].error("expert " + std::to_string(id) + " appears twice in one record (also at [" +
                            std::to_string(q) + "]); a router picks distinct experts: the file is damaged");
        }
      }
      r.ids.push_back(static_cast<std::uint16_t>(id));
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
      if (pr.size() != r.k) {
        throw n.error("gating_probs", "has " + std::to_string(pr.size()) + " values but \"experts\" has " +
                                          std::to_string(r.k) + "; give one probability per chosen expert");
      }
      for (const auto& p : pr) {
        if (!p.raw().is_number()) throw p.error("is " + json::type_name(p.raw()) + ", expected a number");
        const double x = p.raw().get<double>();
        if (!std::isfinite(x) || x < 0) throw p.error("gate probability " + text::printf("%g", x) + " is negative");
        // The profiler wrote float32 values through Python floats: the nearest float is the original.
        r.probs.push_back(static_cast<float>(x));
      }
    }
    r.max_layer = std::max(r.max_layer, rec.layer);
    r.recs.push_back(rec);
    // Check before the arrays double: a file far larger than memory is refused, not killed by the kernel.
    if ((r.recs.size() & 0xFFFF) == 0) {
      model::require_memory(
          units::bytes(2.0 * static_cast<double>(r.recs.size()) * static_cast<double>(sizeof(Rec) + 6 * r.k)),
          path + ": holding " + std::to_string(2 * r.recs.size()) + " records",
          "split the file by problem, or use a machine with more memory");
    }
  }
  if (in.bad()) throw UserError(path + ": reading failed; check the file is readable");
  if (r.recs.empty()) throw UserError(path + ": contains no records to import");
  r.has_probs = probs_first.value_or(false);
  return r;
}

// Emits one token: its records, one per layer 0..L-1 (`by_layer[l]` indexes r.recs).
void emit(TraceBuilder& b, const Records& r, const std::vector<std::size_t>& by_layer, std::uint32_t request,
          std::uint32_t position, const std::string& path) {
  for (const std::size_t i : by_layer) {
    const std::string wl = path + ": line " + std::to_string(r.recs[i].line) + ": $.experts";
    for (std::size_t s = 0; s < r.k; ++s)
      b.push_id(std::int64_t{r.ids[i * r.k + s]}, wl + "[" + std::to_string(s) + "]");
    if (r.has_probs) {
      for (std::size_t s = 0; s < r.k; ++s) b.weights().push_back(r.probs[i * r.k + s]);
    }
  }
  b.add_token(request, position);
}

struct Counts {
  std::set<std::int64_t> problems;
  std::int64_t tokens = 0, prefill = 0, decode = 0, incomplete = 0, incomplete_inside = 0, duplicates = 0, passes = 0;
};

// Both forms hold, per token, at most one record per layer once identical repeats are dropped, so a token is
// complete when it has L records (layers are < L): groups are compared by size, with no L-wide array per
// token (a record may claim layer 65,535).

// Processed form: tokens keyed (problem, token_idx); a token is complete when layers 0..L-1 all have it.
void build_processed(TraceBuilder& b, const Records& r, std::int64_t L, const std::string& path, Counts& c) {
  std::vector<std::size_t> order(r.recs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto key = [&](std::size_t i) { return std::make_tuple(r.recs[i].problem, r.recs[i].index, r.recs[i].layer); };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
  const auto same_record = [&](std::size_t x, std::size_t y) {
    const auto at = [&](std::size_t i) { return static_cast<std::ptrdiff_t>(i * r.k); };
    return std::equal(r.ids.begin() + at(x), r.ids.begin() + at(x + 1), r.ids.begin() + at(y)) &&
           (!r.has_probs || std::equal(r.probs.begin() + at(x), r.probs.begin() + at(x + 1), r.probs.begin() + at(y)));
  };
  std::vector<std::size_t> by_layer;
  std::int64_t last_complete = -1, problem = -1;
  std::vector<std::int64_t> incomplete_of_problem;
  const auto close_problem = [&] {
    for (const auto t : incomplete_of_problem) c.incomplete_inside += t < last_complete ? 1 : 0;
    incomplete_of_problem.clear();
    last_complete = -1;
  };
  for (std::size_t a = 0; a < order.size();) {
    const std::int64_t p = r.recs[order[a]].problem, t = r.recs[order[a]].index;
    if (p != problem) {
      close_problem();
      problem = p;
    }
    by_layer.clear();
    std::size_t e = a;
    for (; e < order.size() && r.recs[order[e]].problem == p && r.recs[order[e]].index == t; ++e) {
      const std::size_t i = order[e];
      if (!by_layer.empty() && r.recs[by_layer.back()].layer == r.recs[i].layer) {
        const std::size_t first = by_layer.back();
        if (!same_record(i, first)) {
          throw UserError(path + ": line " + std::to_string(r.recs[i].line) + ": conflicts with line " +
                          std::to_string(r.recs[first].line) + ": both are problem " + std::to_string(p) + ", token " +
                          std::to_string(t) + ", layer " + std::to_string(r.recs[i].layer) +
                          " but give different experts or gating_probs; the file mixes two runs: keep one of them");
        }
        ++c.duplicates;  // the same record written twice: keep one
        continue;
      }
      by_layer.push_back(i);
    }
    a = e;
    if (static_cast<std::int64_t>(by_layer.size()) != L) {
      ++c.incomplete;
      incomplete_of_problem.push_back(t);
      continue;
    }
    emit(b, r, by_layer, static_cast<std::uint32_t>(p), static_cast<std::uint32_t>(t), path);
    last_complete = t;
    c.problems.insert(p);
    ++c.tokens;
    ++c.decode;
  }
  close_problem();
}

// Raw form: per problem in file order, split into forward passes; a token of a pass is complete when every
// layer recorded it. Positions count every token of every pass, dropped ones included.
void build_raw(TraceBuilder& b, const Records& r, std::int64_t L, bool keep_prefill, const std::string& path,
               Counts& c) {
  std::map<std::int64_t, std::vector<std::size_t>> per_problem;  // record indices in file order
  for (std::size_t i = 0; i < r.recs.size(); ++i) per_problem[r.recs[i].problem].push_back(i);
  std::vector<std::size_t> pass, by_layer;
  for (const auto& [p, idx] : per_problem) {
    std::int64_t base = 0;
    for (std::size_t a = 0; a < idx.size();) {
      std::size_t e = a + 1;
      while (e < idx.size()) {
        const Rec& prev = r.recs[idx[e - 1]];
        const Rec& cur = r.recs[idx[e]];
        if (cur.layer < prev.layer || (cur.layer == prev.layer && cur.index <= prev.index)) break;
        ++e;
      }
      // Within a pass (layer, token_pos) is unique: a layer's records have increasing token_pos.
      pass.assign(idx.begin() + static_cast<std::ptrdiff_t>(a), idx.begin() + static_cast<std::ptrdiff_t>(e));
      std::sort(pass.begin(), pass.end(), [&](std::size_t x, std::size_t y) {
        return std::make_pair(r.recs[x].index, r.recs[x].layer) < std::make_pair(r.recs[y].index, r.recs[y].layer);
      });
      const std::int64_t n = r.recs[pass.back()].index + 1;  // the pass's tokens, 0 .. n-1
      const bool prefill = n > 1;
      ++c.passes;
      std::int64_t complete = 0;
      for (std::size_t q = 0; q < pass.size();) {
        const std::int64_t t = r.recs[pass[q]].index;
        std::size_t f = q;
        while (f < pass.size() && r.recs[pass[f]].index == t) ++f;
        by_layer.assign(pass.begin() + static_cast<std::ptrdiff_t>(q), pass.begin() + static_cast<std::ptrdiff_t>(f));
        q = f;
        if (static_cast<std::int64_t>(by_layer.size()) != L) continue;
        ++complete;
        if (prefill && !keep_prefill) continue;
        emit(b, r, by_layer, static_cast<std::uint32_t>(p), import_detail::to_u32(base + t, path, "position"), path);
        c.problems.insert(p);
        ++c.tokens;
        ++(prefill ? c.prefill : c.decode);
      }
      c.incomplete += n - complete;  // tokens missing some layers, or (skipped positions) all of them
      base += n;
      a = e;
    }
  }
}

}  // namespace

RoutingTrace import_speculative_moe(const std::string& path, const ImportOptions& o) {
  import_detail::require_experts(o);
  const Records r = read_records(path, o);
  TraceBuilder b(o, "speculative-moe");
  const std::int64_t L = o.layers ? *o.layers : r.max_layer + 1;
  if (r.max_layer >= L) {
    for (const auto& rec : r.recs) {
      if (rec.layer >= L) {
        throw UserError(path + ": line " + std::to_string(rec.line) + ": $.layer: " + std::to_string(rec.layer) +
                        " but --model has " + std::to_string(L) +
                        " MoE layers; give the model the trace was recorded with");
      }
    }
  }
  b.set_layers(L, path, "the records");
  b.check_k(r.k, path + ": line " + std::to_string(r.recs.front().line));
  if (!o.include_prefill && r.form == Form::Processed) {
    throw UserError(path + ": --decode-only: this file (token_idx) holds decode tokens only already; drop the flag");
  }
  Counts c;
  if (r.form == Form::Processed) {
    build_processed(b, r, L, path, c);
  } else {
    build_raw(b, r, L, o.include_prefill, path, c);
  }
  std::string datasets;
  for (const auto& d : r.datasets) datasets += (datasets.empty() ? "" : ",") + d;
  std::string dropped;
  if (c.incomplete > 0) {
    dropped = std::to_string(c.incomplete) + " incomplete token" + (c.incomplete == 1 ? "" : "s") +
              " dropped (no record at some of the " + std::to_string(L) + " layers" +
              (r.form == Form::Processed
                   ? std::string("; token_idx counts each layer's records separately, so these are the last tokens "
                                 "of layers that recorded more than others") +
                         (c.incomplete_inside > 0 ? ", " + std::to_string(c.incomplete_inside) +
                                                        " of them before a problem's last complete token"
                                                  : std::string(", all after each problem's last complete token"))
                   : std::string("; the profiler skips records whose gate weights are exactly 0.5, 0.5")) +
              ")";
    import_detail::note(o, path + ": " + dropped);
  }
  if (c.tokens == 0) {
    throw UserError(path + ": no token has a record at every one of the " + std::to_string(L) + " layers (" +
                    std::to_string(c.incomplete) + " incomplete tokens" +
                    (o.include_prefill ? std::string() : ", prefill left out") + "); nothing to import");
  }
  const std::string form =
      r.form == Form::Processed ? "collect_data.py's token_idx records" : "the profiler's raw token_pos records";
  std::string source = "imported from speculative-moe routing JSON lines (github.com/Mario928/speculative-moe, " +
                       form + "; " + path + (datasets.empty() ? "" : ", dataset " + datasets) +
                       "): " + std::to_string(c.problems.size()) +
                       (c.problems.size() == 1 ? " problem, " : " problems, ") + std::to_string(c.tokens) + " tokens";
  if (r.form == Form::Raw) {
    source += " (" + std::to_string(c.prefill) + " prefill + " + std::to_string(c.decode) + " decode, " +
              std::to_string(c.passes) + " forward passes" + (o.include_prefill ? "" : ", prefill left out") + ")";
  }
  source += " from " + std::to_string(r.recs.size()) + " records";
  if (c.duplicates > 0) source += ", " + std::to_string(c.duplicates) + " identical duplicate records dropped";
  if (!dropped.empty()) source += "; " + dropped;
  return b.finish(source, path);
}

}  // namespace moesim::sim
