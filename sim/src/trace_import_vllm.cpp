// The vLLM importer (sim/trace_import.hpp; sources and shapes in sim/TRACES.md §2.3).
//
// vLLM started with --enable-return-routed-experts returns, per request, the expert ids each MoE layer's
// router chose for every token. Two JSON representations have been published:
//  - nested lists (vLLM v0.21, "Routed Experts Replay" docs; added to the OpenAI server by vllm PR #38939):
//    the /v1/completions response body has `prompt_routed_experts` [prompt_len][num_moe_layers][top_k] at
//    the top level (shared by the choices) and `choices[i].routed_experts` [gen_len][num_moe_layers][top_k].
//  - a base64-encoded .npy string (later vLLM: vllm/entrypoints/openai/completion/protocol.py at commit
//    002032ee2b18e1f7bd924ec47b62504ba3866063, CompletionResponseChoice.routed_experts):
//    `choices[i].routed_experts` only, shape (num_tokens - 1, num_layers, top_k), prompt and generated tokens
//    together (the last sampled token was never forwarded), dtype uint8/uint16/int32, decoded by
//    np.load(io.BytesIO(base64.b64decode(s))).
// Besides a saved response body (or an array of them), the importer keeps reading what it read before: a bare
// [tokens][layers][k] array, an object {"routed_experts", "prompt_routed_experts"}, or an array of those.

#include <array>
#include <cstring>

#include "moesim/sim/trace_input.hpp"
#include "trace_import_common.hpp"

namespace moesim::sim {
namespace {

using import_detail::TraceBuilder;

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

// ------------------------------------------------------------------------------------------------------
// base64 (RFC 4648 §4) and .npy (numpy.lib.format: "\x93NUMPY", version, header length, a Python dict
// literal {'descr', 'fortran_order', 'shape'}, then the array's bytes).

std::string base64_decode(const std::string& s, const std::string& where) {
  std::array<int, 256> v{};
  v.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(alphabet[i])] = i;
  std::string out;
  out.reserve(s.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad > 0 || v[c] < 0) {
      throw UserError(where + ": character " + std::to_string(i) + " of the string is not base64 (RFC 4648); " +
                      "routed_experts strings are base64-encoded .npy bytes");
    }
    acc = (acc << 6) | static_cast<std::uint32_t>(v[c]);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2 || (s.size() % 4) != 0) {
    throw UserError(where + ": the base64 string has " + std::to_string(s.size()) +
                    " characters, not a multiple of 4; was it cut short?");
  }
  return out;
}

struct NpyArray {
  std::int64_t dims[3] = {0, 0, 0};
  std::vector<std::int64_t> values;  // C order
};

NpyArray parse_npy(const std::string& bytes, const std::string& where) {
  const auto bad = [&](const std::string& what) {
    return UserError(where + ": the decoded .npy " + what + "; expected what np.save writes for an integer array " +
                     "(tokens, num_moe_layers, top_k)");
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) throw bad("does not start with \\x93NUMPY");
  const auto u8 = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])); };
  const std::uint32_t major = u8(6);
  std::size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = u8(8) | (u8(9) << 8);
    at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw bad("is cut short in its preamble");
    header_len = u8(8) | (u8(9) << 8) | (u8(10) << 16) | (u8(11) << 24);
    at = 12;
  } else {
    throw bad("has format version " + std::to_string(major) + " (1, 2 and 3 are known)");
  }
  if (bytes.size() < at + header_len) throw bad("is cut short in its header");
  const std::string header = bytes.substr(at, header_len);
  at += header_len;
  const auto value_of = [&](const std::string& key) {
    const auto k = header.find("'" + key + "'");
    if (k == std::string::npos) throw bad("header has no '" + key + "'");
    const auto colon = header.find(':', k);
    if (colon == std::string::npos) throw bad("header is malformed at '" + key + "'");
    return header.substr(colon + 1);
  };
  std::string descr = value_of("descr");
  const auto q1 = descr.find('\'');
  const auto q2 = q1 == std::string::npos ? q1 : descr.find('\'', q1 + 1);
  if (q2 == std::string::npos) throw bad("header's 'descr' is not a string");
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  const bool fortran = value_of("fortran_order").find("True") < value_of("fortran_order").find("False");
  const std::string shape_text = value_of("shape");
  const auto open = shape_text.find('('), close = shape_text.find(')');
  if (open == std::string::npos || close == std::string::npos) throw bad("header's 'shape' is not a tuple");
  std::vector<std::int64_t> shape;
  for (const auto& part : text::split(shape_text.substr(open + 1, close - open - 1), ',')) {
    const auto b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
    if (b == std::string::npos) continue;
    const std::string t = part.substr(b, e - b + 1);
    if (t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) throw bad("shape has '" + t + "'");
    shape.push_back(std::stoll(t));
  }
  if (shape.size() != 3) throw bad("has " + std::to_string(shape.size()) + " dimensions, not 3");
  // descr: byte order ('<' little, '>' big, '|' not applicable, '=' native: little on the hosts vLLM runs on),
  // kind ('i' signed, 'u' unsigned), item size in bytes.
  if (descr.size() != 3 || std::string("<>|=").find(descr[0]) == std::string::npos ||
      (descr[1] != 'i' && descr[1] != 'u') || std::string("1248").find(descr[2]) == std::string::npos) {
    throw bad("has dtype '" + descr + "' (integer dtypes |u1 <u2 <i2 <i4 <i8 ... are read)");
  }
  const bool big = descr[0] == '>';
  const bool is_signed = descr[1] == 'i';
  const std::size_t size = static_cast<std::size_t>(descr[2] - '0');
  NpyArray a;
  // The data must hold exactly the shape's items: count them without overflow (a product that passes the
  // data's size cannot match it, whatever the next factor, unless a dimension is 0, which is refused first).
  for (int d = 0; d < 3; ++d) a.dims[d] = shape[static_cast<std::size_t>(d)];
  if (a.dims[1] == 0 || a.dims[2] == 0) throw bad("has no MoE layers or no experts per token (shape has a 0)");
  const std::uint64_t data = bytes.size() - at;
  std::uint64_t count = 1;
  bool too_many = false;
  for (const std::int64_t dim : a.dims) {
    const auto u = static_cast<std::uint64_t>(dim);
    too_many = too_many || (u != 0 && count > data / u);
    if (!too_many) count *= u;
  }
  if (too_many || data != count * size) {
    throw bad("holds " + std::to_string(data) + " data bytes but its shape (" + std::to_string(a.dims[0]) + ", " +
              std::to_string(a.dims[1]) + ", " + std::to_string(a.dims[2]) + ") of " + std::to_string(size) +
              "-byte items needs " + (too_many ? std::string("more") : std::to_string(count * size)));
  }
  a.values.resize(static_cast<std::size_t>(count));
  const auto T = static_cast<std::size_t>(a.dims[0]), L = static_cast<std::size_t>(a.dims[1]),
             K = static_cast<std::size_t>(a.dims[2]);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t raw = 0;
    for (std::size_t b = 0; b < size; ++b) {
      const std::size_t byte = big ? b : size - 1 - b;
      raw = (raw << 8) | u8(at + i * size + byte);
    }
    std::int64_t value = static_cast<std::int64_t>(raw);
    if (is_signed && size < 8 && (raw >> (8 * size - 1)) != 0)
      value -= static_cast<std::int64_t>(std::uint64_t{1} << (8 * size));
    // Fortran order stores the first index fastest: element i is (t, l, s) with i = t + T (l + L s).
    std::size_t dst = i;
    if (fortran) {
      const std::size_t t = i % T, l = (i / T) % L, s = i / (T * L);
      dst = (t * L + l) * K + s;
    }
    a.values[dst] = value;
  }
  return a;
}

// One request's routing from a base64 .npy string: rows are tokens; the first at `first_position`.
void read_npy_tokens(const NpyArray& a, const std::string& w, std::uint32_t request, std::uint32_t first_position,
                     std::int64_t skip, TraceBuilder& b) {
  b.set_layers(a.dims[1], w, "the array's second dimension");
  if (a.dims[1] != b.layers()) {
    throw UserError(w + ": has " + std::to_string(a.dims[1]) + " layers but an earlier request has " +
                    std::to_string(b.layers()) + "; every token lists every MoE layer");
  }
  const auto L = static_cast<std::size_t>(a.dims[1]), K = static_cast<std::size_t>(a.dims[2]);
  for (std::int64_t t = skip; t < a.dims[0]; ++t) {
    for (std::size_t l = 0; l < L; ++l) {
      const std::string wl = w + "[" + std::to_string(t) + "][" + std::to_string(l) + "]";
      b.check_k(K, wl);
      for (std::size_t s = 0; s < K; ++s) {
        b.push_id(a.values[(static_cast<std::size_t>(t) * L + l) * K + s], wl + "[" + std::to_string(s) + "]");
      }
      b.check_distinct(wl);
    }
    b.add_token(request, first_position + static_cast<std::uint32_t>(t - skip));
  }
}

struct Tally {
  std::uint32_t request = 0;
  std::int64_t prompt = 0, generated = 0, unsplit = 0;  // unsplit: npy rows whose prompt/generated split is unknown
  bool response = false, npy = false;
};

std::size_t rows_of(const nlohmann::json& v) { return v.is_array() ? v.size() : 0; }

// One request's routing `re` (nested lists or a base64 .npy string) at `w`; `choice` is the choice object it
// came from (for its token ids), or null; `prompt` the response's prompt_routed_experts, or null.
void read_request(const nlohmann::json* re, const nlohmann::json* choice, const nlohmann::json* prompt,
                  const std::string& prompt_w, const std::string& path, const std::string& w, const ImportOptions& o,
                  TraceBuilder& b, Tally& t) {
  if (re == nullptr || re->is_null()) {
    throw UserError(path + ": " + w + ": is " + (re == nullptr ? "missing" : "null") +
                    "; vLLM returns routing only when the server runs with --enable-return-routed-experts, and not on "
                    "streaming responses");
  }
  if (re->is_string()) {
    // Later vLLM: prompt and generated tokens in one array of num_tokens - 1 rows. Where the prompt ends is
    // known when the choice carries both token id lists (requested with "return_token_ids": true).
    t.npy = true;
    const std::string where = path + ": " + w;
    const NpyArray a = parse_npy(base64_decode(re->get<std::string>(), where), where);
    const std::int64_t rows = a.dims[0];
    std::int64_t prompt_rows = -1, first = 0;
    if (choice != nullptr) {
      const auto p = choice->find("prompt_token_ids"), g = choice->find("token_ids");
      if (p != choice->end() && p->is_array() && g != choice->end() && g->is_array() && !g->empty()) {
        const auto P = static_cast<std::int64_t>(p->size()), G = static_cast<std::int64_t>(g->size());
        prompt_rows = rows - (G - 1);
        if (prompt_rows < 0 || prompt_rows > P) {
          throw UserError(where + ": has " + std::to_string(rows) + " rows but the choice has " + std::to_string(P) +
                          " prompt and " + std::to_string(G) +
                          " generated token ids (expected generated - 1 rows, plus at most one per prompt token)");
        }
        first = P - prompt_rows;  // the request's routed_experts_prompt_start
      }
    }
    if (!o.include_prefill && prompt_rows < 0) {
      throw UserError(where +
                      ": --decode-only needs to know where the prompt's rows end: save the response with "
                      "\"return_token_ids\": true (prompt_token_ids and token_ids), or drop --decode-only");
    }
    const std::int64_t skip = o.include_prefill ? 0 : prompt_rows;
    read_npy_tokens(a, where, t.request, static_cast<std::uint32_t>(first + skip), skip, b);
    if (prompt_rows < 0) {
      t.unsplit += rows;
    } else {
      t.prompt += o.include_prefill ? prompt_rows : 0;
      t.generated += rows - prompt_rows;
    }
    return;
  }
  std::uint32_t first = 0;
  if (prompt != nullptr && !prompt->is_null()) {
    read_vllm_tokens(*prompt, path, prompt_w, t.request, 0, o.include_prefill, b);
    first = static_cast<std::uint32_t>(rows_of(*prompt));
    if (o.include_prefill) t.prompt += static_cast<std::int64_t>(rows_of(*prompt));
  }
  read_vllm_tokens(*re, path, w, t.request, first, true, b);
  t.generated += static_cast<std::int64_t>(rows_of(*re));
}

// One request object: a saved response body ({"choices": [...], "prompt_routed_experts": ...}), or
// {"routed_experts": ..., "prompt_routed_experts": ...}. A response with n choices gives n requests.
void read_object(const nlohmann::json& r, const std::string& path, const std::string& where, const ImportOptions& o,
                 TraceBuilder& b, Tally& t) {
  if (r.contains("choices")) {
    t.response = true;
    const auto& choices = r["choices"];
    if (!choices.is_array() || choices.empty()) {
      throw UserError(path + ": " + where + ".choices: is " +
                      (choices.is_array() ? std::string("empty") : json::type_name(choices)) +
                      ", expected the response's list of choices");
    }
    const nlohmann::json* prompt = r.contains("prompt_routed_experts") ? &r["prompt_routed_experts"] : nullptr;
    if (prompt != nullptr && prompt->is_string()) {
      throw UserError(path + ": " + where +
                      ".prompt_routed_experts: is a string; the nested-list form [prompt_len][num_moe_layers][top_k] "
                      "is read here (later vLLM returns the prompt's rows inside choices[i].routed_experts)");
    }
    for (std::size_t i = 0; i < choices.size(); ++i) {
      const auto& c = choices[i];
      const std::string w = where + ".choices[" + std::to_string(i) + "]";
      if (!c.is_object())
        throw UserError(path + ": " + w + ": is " + json::type_name(c) + ", expected a choice object");
      const auto re = c.find("routed_experts");
      read_request(re == c.end() ? nullptr : &*re, &c, prompt, where + ".prompt_routed_experts", path,
                   w + ".routed_experts", o, b, t);
      ++t.request;
    }
    return;
  }
  json::Node(r, path, where).expect_only({"routed_experts", "prompt_routed_experts", "choices"});
  if (!r.contains("routed_experts")) {
    throw UserError(path + ": " + where +
                    ".routed_experts: is missing; save the whole /v1/completions response body, or the output's "
                    "routed_experts ([gen_len][num_moe_layers][top_k]) under this key");
  }
  read_request(&r["routed_experts"], nullptr,
               r.contains("prompt_routed_experts") ? &r["prompt_routed_experts"] : nullptr,
               where + ".prompt_routed_experts", path, where + ".routed_experts", o, b, t);
  ++t.request;
}

}  // namespace

RoutingTrace import_vllm(const std::vector<std::string>& paths, const ImportOptions& o) {
  import_detail::require_experts(o);
  TraceBuilder b(o, "vllm");
  Tally t;
  for (const auto& path : paths) {
    // A JSON document is held whole: 17 bytes of memory per byte of text (json_reader.cpp).
    const nlohmann::json doc = json::parse_text(read_trace_text(path, 17.0, "parsing it as JSON"), path);
    if (doc.is_array() && !doc.empty() && doc[0].is_object()) {
      for (std::size_t i = 0; i < doc.size(); ++i) {
        if (!doc[i].is_object()) {
          throw UserError(path + ": $[" + std::to_string(i) + "]: is " + json::type_name(doc[i]) +
                          " but $[0] is an object; an array of requests holds objects only");
        }
        read_object(doc[i], path, "$[" + std::to_string(i) + "]", o, b, t);
      }
    } else if (doc.is_object()) {
      read_object(doc, path, "$", o, b, t);
    } else if (doc.is_array()) {
      read_vllm_tokens(doc, path, "$", t.request, 0, true, b);  // a bare routed_experts array
      t.generated += static_cast<std::int64_t>(doc.size());
      ++t.request;
    } else {
      throw UserError(path + ": $: is " + json::type_name(doc) +
                      ", expected a saved /v1/completions response body, the routed_experts array, or an object "
                      "{\"routed_experts\": ..., \"prompt_routed_experts\": ...}");
    }
  }
  const std::string files = import_detail::files_text(paths);
  std::string what = t.response ? "vLLM /v1/completions responses" : "vLLM routed_experts JSON";
  if (t.npy) what += " (base64 .npy routed_experts)";
  std::string counts = std::to_string(t.prompt) + " prompt + " + std::to_string(t.generated) + " generated tokens";
  if (t.unsplit > 0)
    counts += " + " + std::to_string(t.unsplit) + " tokens of responses without token ids (prompt and generated)";
  return b.finish("imported from " + what + " (" + files + "): " + std::to_string(t.request) +
                      (t.request == 1 ? " request, " : " requests, ") + counts +
                      (o.include_prefill ? "" : ", prompts left out"),
                  files);
}

}  // namespace moesim::sim
