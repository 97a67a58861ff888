// OpenBLAS GEMV/GEMM microbenchmarks at a model's matrix shapes, and the size-banded efficiency fit. What
// is measured and how bytes and FLOPs are counted: kernels.hpp and calibrate/BENCH.md.

#include "moesim/calibrate/kernels.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <tuple>

#include "moesim/calibrate/memory.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/calibrate/net_fit.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"
#include "aligned_buffer.hpp"
#include "moesim/reports/table.hpp"

namespace moesim::calibrate {

namespace {

using Clock = std::chrono::steady_clock;
using units::kMiB;

std::string threads_text(int t) { return std::to_string(t) + (t == 1 ? " thread" : " threads"); }

// The bf16 entry points, resolved at run time (they are absent from an OpenBLAS built without
// BUILD_BFLOAT16, and a direct reference would not link).
using SbgemvFn = decltype(&cblas_sbgemv);
using SbgemmFn = decltype(&cblas_sbgemm);

SbgemvFn sbgemv() { return reinterpret_cast<SbgemvFn>(::dlsym(RTLD_DEFAULT, "cblas_sbgemv")); }
SbgemmFn sbgemm() { return reinterpret_cast<SbgemmFn>(::dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }

AlignedBuffer aligned_bytes(std::uint64_t bytes) {
  return aligned_buffer(bytes, 4096, "the kernel benchmark's buffers",
                        "give fewer or smaller --shapes, or a smaller --pool-size");
}

/// Fills `words` 32-bit words with xorshift32 values (Marsaglia, "Xorshift RNGs", J. Stat. Softw. 8(14),
/// 2003) whose both 16-bit halves are normal numbers of magnitude 2^-7..2^-6 as bf16, and the whole word
/// is one as f32: no denormals or NaNs whichever way a kernel reads them, and no two pages alike (a host
/// that merges identical pages, e.g. Linux KSM under a VM, would otherwise fold the copies together).
void fill_pattern(std::uint32_t* p, std::uint64_t words, std::uint32_t seed) {
  std::uint32_t x = seed | 1u;
  for (std::uint64_t i = 0; i < words; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = 0x3C003C00u | (x & 0x007F007Fu);
  }
}

/// One configuration to measure.
struct Plan {
  KernelDtype dtype;
  std::size_t shape;  // index into options.shapes
  std::int64_t batch;
  int threads;
};

std::string sample_label(const KernelSample& s) {
  return std::string(dtype_name(s.dtype)) + " " + kernel_name(s.batch) + " " + shape_text(s.shape) + " (" +
         s.shape.roles + ") batch " + std::to_string(s.batch) + ", " + threads_text(s.threads);
}

}  // namespace

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
  if (sbgemv() && sbgemm()) return {};
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

// ---- the run -----------------------------------------------------------------------------------------

KernelResult run_kernels(const KernelOptions& options, Progress& progress) {
  const auto t_start = Clock::now();
  KernelResult r;
  r.openblas = openblas_config();
  r.openblas_note = openblas_core_note();
  if (options.shapes.empty()) throw UserError("no matrix shapes to measure; give --model or --shapes");
  for (const auto& s : options.shapes) {
    if (s.rows < 1 || s.cols < 1 || s.rows > INT_MAX || s.cols > INT_MAX) {
      throw UserError("matrix shape " + shape_text(s) + " is outside 1.." + std::to_string(INT_MAX) +
                      " (OpenBLAS's 32-bit blasint); give smaller --shapes");
    }
  }
  const std::vector<int> threads = resolve_thread_counts(options.threads);
  std::vector<std::int64_t> batches = options.batches;
  for (const auto b : batches) {
    if (b < 1 || b > INT_MAX) throw UserError("--batches: " + std::to_string(b) + " is not a batch size >= 1");
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  if (batches.empty()) throw UserError("--batches is empty; give batch sizes, e.g. 1,16,256");
  const int repeats = std::max(1, options.repeats);

  // Which dtypes this OpenBLAS can run; the others are reported as not measured, with the reason.
  std::vector<KernelDtype> dtypes;
  for (const auto d : options.dtypes) {
    if (r.support.count(d)) continue;
    r.support[d] = dtype_support(d);
    if (r.support[d].available) {
      dtypes.push_back(d);
    } else {
      r.skipped.push_back({std::string(dtype_name(d)) + " (all shapes)", r.support[d].reason});
    }
  }

  // The pool of rotating weight copies, and the inputs and outputs of the largest call.
  const CacheInfo llc = last_level_cache();
  r.llc_bytes = llc.bytes;
  double largest = 0;
  std::int64_t max_rows = 0, max_cols = 0;
  for (const auto& s : options.shapes) {
    for (const auto d : dtypes) largest = std::max(largest, kernel_cost(d, s, 1).weight_bytes);
    max_rows = std::max(max_rows, s.rows);
    max_cols = std::max(max_cols, s.cols);
  }
  const std::uint64_t largest_bytes = static_cast<std::uint64_t>(largest);
  std::uint64_t pool = options.pool_bytes ? options.pool_bytes : 3 * llc.bytes;
  pool = std::max(pool, largest_bytes);
  const std::int64_t max_batch = batches.back();
  const auto io_bytes =
      static_cast<std::uint64_t>(4.0 * static_cast<double>(max_batch) * static_cast<double>(max_rows + 2 * max_cols));
  const std::uint64_t avail = available_memory_bytes();
  const auto room = static_cast<std::uint64_t>(0.6 * static_cast<double>(avail));
  if (avail > 0 && pool + io_bytes > room) {
    if (largest_bytes + io_bytes > room) {
      throw UserError("the largest matrix (" + units::format_binary(units::bytes(largest)) +
                      ") does not fit in 60% of the available memory (" +
                      units::format_binary(units::bytes(static_cast<double>(avail))) +
                      "); give smaller --shapes or measure bf16 only (--dtypes bf16)");
    }
    r.notes.push_back("the pool of rotating weight copies was shrunk from " +
                      units::format_binary(units::bytes(static_cast<double>(pool))) + " to " +
                      units::format_binary(units::bytes(static_cast<double>(room - io_bytes))) +
                      " to fit 60% of the available memory");
    pool = room - io_bytes;
  }
  r.pool_bytes = pool;
  if (!dtypes.empty() && pool < 2 * llc.bytes) {
    r.notes.push_back("the pool of weight copies (" + units::format_binary(units::bytes(static_cast<double>(pool))) +
                      ") is smaller than 2 x the last-level cache (" +
                      units::format_binary(units::bytes(static_cast<double>(llc.bytes))) +
                      "): small matrices may be read from cache, and their bytes/s can exceed the memory bandwidth");
  }

  std::vector<Plan> plans;
  const int tmax = threads.back();
  // Most important first: batch 1 (the memory fit) and the largest batch (the compute fit) at the most
  // threads; then the other batches; then fewer threads.
  for (const auto d : dtypes) {
    for (std::size_t si = 0; si < options.shapes.size(); ++si) {
      plans.push_back({d, si, batches.front(), tmax});
      if (batches.size() > 1) plans.push_back({d, si, max_batch, tmax});
    }
  }
  for (const auto d : dtypes) {
    for (std::size_t si = 0; si < options.shapes.size(); ++si) {
      for (std::size_t bi = 1; bi + 1 < batches.size(); ++bi) plans.push_back({d, si, batches[bi], tmax});
    }
  }
  for (auto ti = threads.rbegin() + 1; ti < threads.rend(); ++ti) {
    for (const auto d : dtypes) {
      for (std::size_t si = 0; si < options.shapes.size(); ++si) {
        for (const auto b : batches) plans.push_back({d, si, b, *ti});
      }
    }
  }

  AlignedBuffer pool_buf, x_buf, y_buf;
  if (!plans.empty()) {
    progress.update(0.0,
                    "filling " + units::format_binary(units::bytes(static_cast<double>(pool))) + " of weight copies");
    pool_buf = aligned_bytes(pool);
    fill_pattern(reinterpret_cast<std::uint32_t*>(pool_buf.get()), pool / 4, 12345u);
    const auto x_bytes = static_cast<std::uint64_t>(4 * max_batch * max_cols);
    x_buf = aligned_bytes(x_bytes);
    fill_pattern(reinterpret_cast<std::uint32_t*>(x_buf.get()), x_bytes / 4, 777u);
    y_buf = aligned_bytes(static_cast<std::uint64_t>(4 * max_batch * max_rows));
    std::memset(y_buf.get(), 0, static_cast<std::size_t>(4 * max_batch * max_rows));
  }

  const int saved_threads = openblas_get_num_threads();
  const SbgemvFn sb_gemv = sbgemv();
  const SbgemmFn sb_gemm = sbgemm();
  // Rates seen so far per thread count, for estimating what a measurement will cost (conservative start:
  // 2 GB/s and 10 GFLOP/s per thread).
  std::map<int, double> seen_bw, seen_fr;
  const auto estimate = [&](const Plan& p) {
    const KernelCost c = kernel_cost(p.dtype, options.shapes[p.shape], p.batch);
    const double bw = seen_bw.count(p.threads) ? 0.7 * seen_bw[p.threads] : 2e9 * p.threads;
    const double fr = seen_fr.count(p.threads) ? 0.7 * seen_fr[p.threads] : 1e10 * p.threads;
    const double call = c.bytes / bw + c.flops / fr;
    return call + repeats * std::max(call, options.min_repeat_seconds);
  };
  std::uint64_t cursor = 0;  // the rotating copy to use next
  for (std::size_t pi = 0; pi < plans.size(); ++pi) {
    const Plan& p = plans[pi];
    const MatrixShape& shape = options.shapes[p.shape];
    KernelSample s;
    s.dtype = p.dtype;
    s.shape = shape;
    s.batch = p.batch;
    s.threads = p.threads;
    s.cost = kernel_cost(p.dtype, shape, p.batch);
    const double left = options.max_seconds - secs(t_start, Clock::now());
    const double est = estimate(p);
    if (est > left) {
      r.skipped.push_back({sample_label(s), "would take about " + text::printf("%.1f", est) + " s and " +
                                                text::printf("%.1f", std::max(0.0, left)) +
                                                " s of --max-seconds are left; raise --max-seconds to measure it"});
      continue;
    }
    progress.update(static_cast<double>(pi) / static_cast<double>(plans.size()),
                    std::string(dtype_name(p.dtype)) + " " + kernel_name(p.batch) + " " + shape_text(shape) +
                        " batch " + std::to_string(p.batch) + ", " + threads_text(p.threads));
    openblas_set_num_threads(p.threads);
    const auto stride = (static_cast<std::uint64_t>(s.cost.weight_bytes) + 4095) / 4096 * 4096;
    const std::uint64_t copies = std::max<std::uint64_t>(1, pool / stride);
    const int m = static_cast<int>(shape.rows);
    const int k = static_cast<int>(shape.cols);
    const int b = static_cast<int>(p.batch);
    float* y = reinterpret_cast<float*>(y_buf.get());
    const auto call = [&] {
      const std::byte* w = pool_buf.get() + (cursor++ % copies) * stride;
      if (p.dtype == KernelDtype::F32) {
        const auto* wf = reinterpret_cast<const float*>(w);
        const auto* xf = reinterpret_cast<const float*>(x_buf.get());
        if (b == 1) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, m, k, 1.0f, wf, k, xf, 1, 0.0f, y, 1);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, m, k, 1.0f, xf, k, wf, k, 0.0f, y, m);
        }
      } else {
        const auto* wh = reinterpret_cast<const bfloat16*>(w);
        const auto* xh = reinterpret_cast<const bfloat16*>(x_buf.get());
        if (b == 1) {
          sb_gemv(CblasRowMajor, CblasNoTrans, m, k, 1.0f, wh, k, xh, 1, 0.0f, y, 1);
        } else {
          sb_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, m, k, 1.0f, xh, k, wh, k, 0.0f, y, m);
        }
      }
    };
    // Warm-up: starts OpenBLAS's threads at this count and tells how long one call takes.
    auto t0 = Clock::now();
    call();
    const double first = std::max(secs(t0, Clock::now()), 1e-9);
    s.calls_per_repeat =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(options.min_repeat_seconds / first)), 1, 1000000);
    for (int rep = 0; rep < repeats; ++rep) {
      t0 = Clock::now();
      for (std::int64_t c = 0; c < s.calls_per_repeat; ++c) call();
      s.seconds.push_back(secs(t0, Clock::now()) / static_cast<double>(s.calls_per_repeat));
    }
    if (p.batch == 1 && s.cost.weight_bytes >= kMiB) {
      seen_bw[p.threads] = std::max(seen_bw[p.threads], s.bytes_per_second());
    }
    if (p.batch > 1) seen_fr[p.threads] = std::max(seen_fr[p.threads], s.flops_per_second());
    r.samples.push_back(std::move(s));
  }
  openblas_set_num_threads(saved_threads);

  // Stable order for reports: dtype, shape (as given), threads, batch.
  const auto shape_index = [&](const MatrixShape& s) {
    for (std::size_t i = 0; i < options.shapes.size(); ++i) {
      if (options.shapes[i].rows == s.rows && options.shapes[i].cols == s.cols && options.shapes[i].roles == s.roles) {
        return i;
      }
    }
    return options.shapes.size();
  };
  std::stable_sort(r.samples.begin(), r.samples.end(), [&](const KernelSample& a, const KernelSample& b) {
    return std::tuple(static_cast<int>(a.dtype), shape_index(a.shape), a.threads, a.batch) <
           std::tuple(static_cast<int>(b.dtype), shape_index(b.shape), b.threads, b.batch);
  });

  // The fits.
  for (const auto& s : r.samples) r.max_threads = std::max(r.max_threads, s.threads);
  for (const auto& s : r.samples) {
    if (s.threads == r.max_threads && s.batch > 1) r.max_batch = std::max(r.max_batch, s.batch);
  }
  for (const auto d : dtypes) {
    if (const KernelSample* best = r.peak_sample(d))
      r.peak_flops[d] = best->flops_per_second();
    else
      r.notes.push_back(std::string(dtype_name(d)) + ": no GEMM (batch > 1) was measured, so no peak FLOP rate");
  }
  r.memory_bandwidth = options.memory_bandwidth;
  r.memory_bandwidth_source = options.memory_bandwidth_source;
  for (const auto& s : r.samples) {
    if (s.threads != r.max_threads) continue;
    if (s.batch == 1 && r.memory_bandwidth > 0) {
      r.memory_points.push_back({s.cost.weight_bytes, s.bytes_per_second() / r.memory_bandwidth, sample_label(s)});
    }
    if (s.batch == r.max_batch && s.batch > 1 && r.peak_flops.count(s.dtype)) {
      r.compute_points.push_back({s.cost.weight_bytes, s.flops_per_second() / r.peak_flops[s.dtype], sample_label(s)});
    }
  }
  if (r.memory_bandwidth <= 0) {
    r.notes.push_back(
        "no memory bandwidth was given, so no memory efficiency bands (run `moesim calibrate memory` "
        "first, or give --memory-bandwidth)");
  }
  r.memory_fit = fit_efficiency_bands(r.memory_points);
  r.compute_fit = fit_efficiency_bands(r.compute_points);
  r.seconds = secs(t_start, Clock::now());
  progress.update(1.0, "kernels done");
  return r;
}

// ---- JSON and text -----------------------------------------------------------------------------------

nlohmann::json kernels_devices_json(const KernelResult& r, const Provenance& p) {
  using units::Dimension;
  nlohmann::json devices = nlohmann::json::object();
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [d, rate] : r.peak_flops) {
    const KernelSample* s = r.peak_sample(d);
    const std::string routine = d == KernelDtype::F32 ? "cblas_sgemm" : "cblas_sbgemm";
    peaks[std::string(dtype_profile_key(d))] =
        figure_json(rate, Dimension::FlopRate,
                    measured_source(p, "best OpenBLAS " + routine +
                                           " rate over the measured shapes, batches and "
                                           "threads (" +
                                           shape_text(s->shape) + " x batch " + std::to_string(s->batch) + ", " +
                                           threads_text(s->threads) + ")"),
                    "measured, not a datasheet peak: no datasheet states this (virtual) CPU's rate, so the best "
                    "achieved rate is the roof compute efficiencies are relative to");
  }
  if (!peaks.empty()) devices["peak_flops"] = peaks;
  if (!r.memory_fit.bands.empty() || !r.compute_fit.bands.empty()) {
    nlohmann::json e = {
        {"source",
         measured_source(p, "OpenBLAS GEMV at batch 1 (memory bands: achieved bytes/s / " +
                                (r.memory_bandwidth > 0 ? units::format(r.memory_bandwidth, Dimension::Bandwidth, 4)
                                                        : std::string("-")) +
                                ") and GEMM at batch " + std::to_string(r.max_batch) +
                                " (compute bands: achieved FLOP/s / the best GEMM rate), " +
                                threads_text(r.max_threads))},
        {"note",
         "bands by weight-matrix bytes, split at the geometric midpoints between measured sizes; a kernel "
         "outside every band uses the nearest one and the simulator says so"}};
    if (!r.memory_fit.bands.empty()) e["memory"] = bands_json(r.memory_fit.bands);
    if (!r.compute_fit.bands.empty()) e["compute"] = bands_json(r.compute_fit.bands);
    devices["efficiency"] = e;
  }
  return devices;
}

nlohmann::json kernel_sample_json(const MatrixShape& shape, std::int64_t batch, std::int64_t calls_per_repeat,
                                  const std::vector<double>& seconds_per_call, const KernelCost& cost,
                                  double memory_bandwidth, double peak_flops) {
  const SampleStats t = sample_stats(seconds_per_call);
  nlohmann::json j = {{"kernel", kernel_name(batch)},
                      {"shape", {{"rows", shape.rows}, {"cols", shape.cols}, {"roles", shape.roles}}},
                      {"batch", batch},
                      {"calls_per_repeat", calls_per_repeat},
                      {"seconds_per_call", seconds_per_call},
                      {"best", quantity(t.min, "s")},
                      {"median", quantity(t.median, "s")},
                      {"weight_bytes", quantity(cost.weight_bytes, "B")},
                      {"bytes", quantity(cost.bytes, "B")},
                      {"flops", quantity(cost.flops, "FLOP")},
                      {"bandwidth", quantity(cost.bytes / t.min, "B/s")},
                      {"flop_rate", quantity(cost.flops / t.min, "FLOP/s")}};
  if (memory_bandwidth > 0) j["memory_efficiency"] = cost.bytes / t.min / memory_bandwidth;
  if (peak_flops > 0) j["compute_efficiency"] = cost.flops / t.min / peak_flops;
  return j;
}

nlohmann::json kernels_calibration_json(const KernelResult& r) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : r.samples) {
    const double peak = r.peak_flops.count(s.dtype) ? r.peak_flops.at(s.dtype) : 0.0;
    nlohmann::json j =
        kernel_sample_json(s.shape, s.batch, s.calls_per_repeat, s.seconds, s.cost, r.memory_bandwidth, peak);
    j["dtype"] = dtype_name(s.dtype);
    j["threads"] = s.threads;
    samples.push_back(j);
  }
  nlohmann::json dtypes = nlohmann::json::object();
  for (const auto& [d, sup] : r.support) {
    dtypes[std::string(dtype_name(d))] = {{"measured", sup.available}};
    if (!sup.available) dtypes[std::string(dtype_name(d))]["reason"] = sup.reason;
  }
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [d, rate] : r.peak_flops) peaks[std::string(dtype_name(d))] = quantity(rate, "FLOP/s");
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : r.skipped) skipped.push_back({{"what", s.what}, {"reason", s.reason}});
  nlohmann::json j = {
      {"benchmark",
       "OpenBLAS GEMV (batch 1) and GEMM (Y = X W^T) per dtype, shape, batch and thread count; time per call = "
       "best and median of the repetitions after a warm-up call; bytes = weights + inputs + f32 outputs, FLOPs = "
       "2 M K batch; weights read from rotating copies in a pool larger than the last-level cache"},
      {"openblas", r.openblas},
      {"openblas_note", r.openblas_note},
      {"dtypes", dtypes},
      {"last_level_cache", quantity(static_cast<double>(r.llc_bytes), "B")},
      {"pool", quantity(static_cast<double>(r.pool_bytes), "B")},
      {"samples", samples},
      {"peak_flops", peaks},
      {"fits",
       {{"memory", band_fit_json(r.memory_points, r.memory_fit)},
        {"compute", band_fit_json(r.compute_points, r.compute_fit)}}},
      {"skipped", skipped},
      {"notes", r.notes},
      {"wall_time", quantity(r.seconds, "s")}};
  if (r.memory_bandwidth > 0) {
    j["memory_bandwidth"] = {{"value", r.memory_bandwidth}, {"unit", "B/s"}, {"source", r.memory_bandwidth_source}};
  }
  return j;
}

nlohmann::json kernels_profile_json(const KernelResult& r, const Provenance& p, const std::string& id,
                                    const nlohmann::json& extra_devices, const nlohmann::json& extra_calibration) {
  nlohmann::json devices = kernels_devices_json(r, p);
  if (extra_devices.is_object()) {
    for (const auto& [k, v] : extra_devices.items()) devices[k] = v;
  }
  devices["name"] = p.cpu_model + " (" + std::to_string(p.cores) + " CPUs)";
  nlohmann::json calibration = {{"provenance", to_json(p)}, {"kernels", kernels_calibration_json(r)}};
  if (extra_calibration.is_object()) {
    for (const auto& [k, v] : extra_calibration.items()) calibration[k] = v;
  }
  std::string notes =
      "The CPU is the one device. peak_flops is the best measured OpenBLAS GEMM rate, and the efficiency bands are "
      "relative to it and to memory_bandwidth.";
  for (const auto& [d, sup] : r.support) {
    if (!sup.available) notes += " " + std::string(dtype_name(d)) + " was not measured: " + sup.reason + ".";
  }
  if (!r.openblas_note.empty()) notes += " " + r.openblas_note + ".";
  return node_profile_json(id, "This machine (" + p.host + "), measured by moesim calibrate kernels", devices,
                           calibration, notes);
}

void print_kernels_report(const KernelResult& r, std::ostream& out) {
  using units::Dimension;
  out << "OpenBLAS: " << r.openblas << "\n";
  if (!r.openblas_note.empty()) out << "note: " << r.openblas_note << "\n";
  for (const auto& [d, sup] : r.support) {
    if (!sup.available) out << dtype_name(d) << ": not measured: " << sup.reason << "\n";
  }
  out << "weights read from rotating copies in a pool of "
      << units::format_binary(units::bytes(static_cast<double>(r.pool_bytes))) << " (last-level cache "
      << units::format_binary(units::bytes(static_cast<double>(r.llc_bytes)))
      << "); time per call = best of the repetitions after a warm-up\n\n";
  const bool mem = r.memory_bandwidth > 0;
  reports::Table t({"dtype", "kernel", "shape", "roles", "batch", "threads", "best us", "median us", "GB/s", "GFLOP/s",
                    "of mem BW %", "of peak %"});
  for (const auto& s : r.samples) {
    const auto peak = r.peak_flops.find(s.dtype);
    t.add_row({std::string(dtype_name(s.dtype)), kernel_name(s.batch), shape_text(s.shape), s.shape.roles,
               std::to_string(s.batch), std::to_string(s.threads), text::printf("%.1f", s.best_seconds() * 1e6),
               text::printf("%.1f", s.median_seconds() * 1e6), text::printf("%.2f", s.bytes_per_second() / 1e9),
               text::printf("%.2f", s.flops_per_second() / 1e9),
               mem ? text::printf("%.1f", 100 * s.bytes_per_second() / r.memory_bandwidth) : "-",
               peak != r.peak_flops.end() ? text::printf("%.1f", 100 * s.flops_per_second() / peak->second) : "-"});
  }
  t.print_text(out);
  if (mem) {
    out << "\nGEMV (batch 1, " << threads_text(r.max_threads) << ") against the sustained memory bandwidth "
        << units::format(r.memory_bandwidth, Dimension::Bandwidth, 4) << " (" << r.memory_bandwidth_source << "):\n";
    for (const auto& s : r.samples) {
      if (s.batch != 1 || s.threads != r.max_threads) continue;
      out << "  " << dtype_name(s.dtype) << " " << shape_text(s.shape) << " (" << s.shape.roles << ", "
          << units::format_binary(units::bytes(s.cost.weight_bytes))
          << "): " << units::format(s.bytes_per_second(), Dimension::Bandwidth, 4) << " = "
          << text::printf("%.1f", 100 * s.bytes_per_second() / r.memory_bandwidth) << "% of it\n";
    }
  }
  for (const auto& [d, rate] : r.peak_flops) {
    const KernelSample* s = r.peak_sample(d);
    out << "best GEMM rate (" << dtype_name(d) << "): " << units::format(rate, Dimension::FlopRate, 4) << " at "
        << shape_text(s->shape) << " x batch " << s->batch << ", " << threads_text(s->threads)
        << " (the peak compute efficiencies are relative to)\n";
  }
  print_efficiency_bands(out, "memory", r.memory_fit, "GEMV bytes/s / memory bandwidth, by weight-matrix bytes");
  print_efficiency_bands(
      out, "compute", r.compute_fit,
      "GEMM FLOP/s at batch " + std::to_string(r.max_batch) + " / the best GEMM rate, by weight-matrix bytes");
  if (!r.skipped.empty()) {
    out << "\nnot measured (" << r.skipped.size() << "):\n";
    for (const auto& s : r.skipped) out << "  " << s.what << ": " << s.reason << "\n";
  }
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

}  // namespace moesim::calibrate
