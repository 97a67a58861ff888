// The vocabulary of the OpenBLAS kernel benchmark: a model's matrix shapes, the dtypes and what a call
// costs in bytes and FLOPs, OpenBLAS's build, and a sample's statistics (kernels.hpp, calibrate/BENCH.md).

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "kernels_detail.hpp"
#include "moesim/calibrate/kernels.hpp"
#include "moesim/calibrate/net_fit.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim::calibrate {

namespace kernels_detail {

std::string threads_text(int t) { return std::to_string(t) + (t == 1 ? " thread" : " threads"); }

SbgemvFn sbgemv() { return reinterpret_cast<SbgemvFn>(::dlsym(RTLD_DEFAULT, "cblas_sbgemv")); }
SbgemmFn sbgemm() { return reinterpret_cast<SbgemmFn>(::dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }

std::string sample_label(const KernelSample& s) {
  return std::string(dtype_name(s.dtype)) + " " + kernel_name(s.batch) + " " + shape_text(s.shape) + " (" +
         s.shape.roles + ") batch " + std::to_string(s.batch) + ", " + threads_text(s.threads);
}

}  // namespace kernels_detail

// ---- shapes ------------------------------------------------------------------------------------------

std::vector<MatrixShape> model_matrix_shapes(const model::Architecture& a) {
  std::vector<MatrixShape> raw;
  const auto add = [&](const std::string& role, std::int64_t rows, std::int64_t cols) {
    if (rows > 0 && cols > 0) raw.push_back({role, rows, cols});
  };
  const std::int64_t h = a.hidden;
  std::set<model::AttentionType> kinds;
  bool dense_layers = !a.is_moe();
  for (const auto& l : a.layer_specs) {
    kinds.insert(l.attention);
    if (l.ffn && !l.moe) dense_layers = true;
  }
  // Attention (models_and_routing.md §A.3, as model/src/architecture.cpp counts it).
  if (kinds.count(model::AttentionType::Gqa)) {
    const std::int64_t q_width = a.heads * a.head_dim;
    add("attn.q", a.attention_output_gate ? 2 * q_width : q_width, h);
    add("attn.k", a.kv_heads * a.head_dim, h);
    add("attn.v", a.kv_heads * a.head_dim, h);
    add("attn.o", h, q_width);
  }
  if (kinds.count(model::AttentionType::Mla)) {
    const auto& m = a.mla;
    const std::int64_t qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
    if (m.q_lora_rank > 0) {
      add("attn.q_a", m.q_lora_rank, h);
      add("attn.q_b", a.heads * qk_head, m.q_lora_rank);
    } else {
      add("attn.q", a.heads * qk_head, h);
    }
    add("attn.kv_a", m.kv_lora_rank + m.qk_rope_head_dim, h);
    add("attn.kv_b", a.heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
    add("attn.o", h, a.heads * m.v_head_dim);
  }
  if (kinds.count(model::AttentionType::GatedDeltaNet)) {
    const auto& d = a.delta;
    const std::int64_t kw = d.key_heads * d.key_head_dim;
    const std::int64_t vw = d.value_heads * d.value_head_dim;
    add("deltanet.in_proj_qkvz", 2 * kw + 2 * vw, h);
    add("deltanet.in_proj_ba", 2 * d.value_heads, h);
    add("deltanet.out_proj", h, vw);
  }
  if (kinds.count(model::AttentionType::Mamba2)) {
    // model/src/architecture.cpp mamba2_params: in_proj (z, x, B, C, dt) and out_proj.
    const auto& m = a.mamba;
    const std::int64_t inner = m.heads * m.head_dim;
    add("mamba.in_proj", 2 * inner + 2 * m.groups * m.state_size + m.heads, h);
    add("mamba.out_proj", h, inner);
  }
  if (kinds.count(model::AttentionType::Mamba1)) {
    // model/src/architecture.cpp mamba1_params: in_proj (x, z), x_proj (dt, B, C), dt_proj and out_proj.
    const auto& m = a.mamba1;
    add("mamba1.in_proj", 2 * m.inner, h);
    add("mamba1.x_proj", m.dt_rank + 2 * m.state_size, m.inner);
    add("mamba1.dt_proj", m.inner, m.dt_rank);
    add("mamba1.out_proj", h, m.inner);
  }
  // Nemotron-H's FFNs have no gate (w1): up (v1) and down (w2) only.
  const bool gate = a.gated_ffn;
  if (a.is_moe()) {
    add("router", a.routed_experts, h);  // §A.3 "Router: h·E"
    // §A.3 "Expert: 3·h·I": gate (w1) and up (v1) I×h, down (w2) h×I.
    if (gate) add("expert.w1", a.expert_ffn, h);
    add("expert.v1", a.expert_ffn, h);
    add("expert.w2", h, a.expert_ffn);
    if (a.shared_experts > 0) {
      if (gate) add("shared.w1", a.shared_ffn, h);
      add("shared.v1", a.shared_ffn, h);
      add("shared.w2", h, a.shared_ffn);
    }
  }
  if (dense_layers && a.dense_ffn > 0) {
    if (gate) add("ffn.w1", a.dense_ffn, h);
    add("ffn.v1", a.dense_ffn, h);
    add("ffn.w2", h, a.dense_ffn);
  }
  // One entry per distinct shape, in first-use order, with every role that uses it.
  std::vector<MatrixShape> out;
  for (const auto& s : raw) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const MatrixShape& o) { return o.rows == s.rows && o.cols == s.cols; });
    if (it == out.end()) {
      out.push_back(s);
    } else {
      it->roles += ", " + s.roles;
    }
  }
  return out;
}

std::string shape_text(const MatrixShape& s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

std::vector<MatrixShape> parse_matrix_shapes(const std::string& text, const std::string& flag) {
  std::vector<MatrixShape> out;
  for (const auto& item : text::split(text, ',')) {
    const auto x = item.find_first_of("xX");
    const auto number = [&](const std::string& s) -> std::int64_t {
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (s.empty() || used != s.size() || v < 1 || v > INT_MAX) return 0;
      return v;
    };
    const std::int64_t rows = x == std::string::npos ? 0 : number(item.substr(0, x));
    const std::int64_t cols = x == std::string::npos ? 0 : number(item.substr(x + 1));
    if (rows == 0 || cols == 0) {
      throw UserError(flag + ": '" + item +
                      "' is not a matrix shape; write ROWSxCOLS (outputs x inputs) with whole numbers >= 1, e.g. "
                      "6144x10752,1024x6144");
    }
    out.push_back({"grid", rows, cols});
  }
  return out;
}

// ---- dtypes and costs --------------------------------------------------------------------------------

std::string_view dtype_name(KernelDtype d) { return d == KernelDtype::F32 ? "f32" : "bf16"; }
std::string_view dtype_profile_key(KernelDtype d) { return d == KernelDtype::F32 ? "fp32" : "bf16"; }
double dtype_size(KernelDtype d) { return d == KernelDtype::F32 ? 4.0 : 2.0; }

KernelDtype parse_kernel_dtype(std::string_view name, const std::string& flag) {
  if (name == "f32" || name == "fp32") return KernelDtype::F32;
  if (name == "bf16") return KernelDtype::Bf16;
  throw UserError(flag + ": unknown dtype '" + std::string(name) + "'" + text::did_you_mean(name, {"f32", "bf16"}) +
                  "; valid: f32, bf16");
}

KernelCost kernel_cost(KernelDtype d, const MatrixShape& s, std::int64_t batch) {
  const double m = static_cast<double>(s.rows);
  const double k = static_cast<double>(s.cols);
  const double b = static_cast<double>(batch);
  KernelCost c;
  c.weight_bytes = m * k * dtype_size(d);
  c.input_bytes = b * k * dtype_size(d);
  c.output_bytes = b * m * 4.0;  // f32 output for sgemv/sgemm and for sbgemv/sbgemm alike
  c.bytes = c.weight_bytes + c.input_bytes + c.output_bytes;
  c.flops = 2.0 * m * k * b;  // one multiply-add (2 FLOPs) per weight per token
  return c;
}

const char* kernel_name(std::int64_t batch) { return batch == 1 ? "gemv" : "gemm"; }

DtypeSupport dtype_support(KernelDtype d) {
  if (d == KernelDtype::F32) return {};
  if (kernels_detail::sbgemv() && kernels_detail::sbgemm()) return {};
  return {false,
          "this OpenBLAS (" + openblas_config() +
              ") was built without BUILD_BFLOAT16: it does not export cblas_sbgemv / cblas_sbgemm; install one built "
              "with it (e.g. make BUILD_BFLOAT16=1) to measure bf16"};
}

std::string openblas_core_note() {
  const char* c = openblas_get_corename();
  std::string core = c ? c : "";
  std::string lower;
  for (const char ch : core) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // DYNAMIC_ARCH falls back to these generic kernels for a CPU it does not recognise (OpenBLAS
  // driver/others/dynamic.c, get_coretype()).
  static const std::set<std::string> kGeneric = {"prescott", "core2",      "penryn",    "dunnington", "nehalem", "atom",
                                                 "katmai",   "coppermine", "northwood", "banias",     "unknown", ""};
  if (!kGeneric.count(lower)) return "";
#if defined(__x86_64__) || defined(__i386__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2");
  if (!avx512 && !avx2) return "";
  const std::string suggest = avx512 ? "SkylakeX" : "Haswell";
  return "OpenBLAS runs its generic " + core + " kernels although this CPU has " + (avx512 ? "AVX-512" : "AVX2") +
         " (this OpenBLAS's DYNAMIC_ARCH does not recognise the CPU model), so these are the figures of the " + core +
         " kernels; to measure the kernels a tuned deployment runs, set OPENBLAS_CORETYPE=" + suggest +
         " (`OPENBLAS_CORETYPE=" + suggest + " moesim calibrate kernels ...`) or install a newer OpenBLAS";
#else
  return "";
#endif
}

std::string openblas_config() {
  const char* c = openblas_get_config();
  std::string s = c ? c : "unknown OpenBLAS";
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
}

// ---- samples -----------------------------------------------------------------------------------------

double KernelSample::best_seconds() const {
  MOESIM_CHECK(!seconds.empty(), "a kernel sample without repetitions");
  return *std::min_element(seconds.begin(), seconds.end());
}

double KernelSample::median_seconds() const {
  MOESIM_CHECK(!seconds.empty(), "a kernel sample without repetitions");
  return sample_stats(seconds).median;
}

const KernelSample* KernelResult::peak_sample(KernelDtype d) const {
  const KernelSample* best = nullptr;
  for (const auto& s : samples) {
    if (s.dtype == d && s.batch > 1 && (!best || s.flops_per_second() > best->flops_per_second())) best = &s;
  }
  return best;
}

}  // namespace moesim::calibrate
