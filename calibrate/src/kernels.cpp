// OpenBLAS GEMV/GEMM microbenchmarks at a model's matrix shapes, and the size-banded efficiency fit. What
// is measured and how bytes and FLOPs are counted: kernels.hpp and calibrate/BENCH.md.
// This file holds the run; the shapes, dtypes and costs are kernels_shapes.cpp, the reports kernels_output.cpp.

#include "moesim/calibrate/kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "aligned_buffer.hpp"
#include "kernels_detail.hpp"
#include "moesim/calibrate/efficiency.hpp"
#include "moesim/calibrate/memory.hpp"
#include "moesim/calibrate/progress.hpp"
#include "moesim/model/error.hpp"
#include "moesim/model/resources.hpp"
#include "moesim/model/text.hpp"
#include "moesim/model/units.hpp"

namespace moesim::calibrate {

namespace {

using Clock = std::chrono::steady_clock;
using units::kMiB;

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

/// The batch sizes of --batches, each checked (1..INT_MAX), sorted and without repeats.
std::vector<std::int64_t> checked_batches(const std::vector<std::int64_t>& requested) {
  std::vector<std::int64_t> batches = requested;
  for (const auto b : batches) {
    if (b < 1 || b > INT_MAX) throw UserError("--batches: " + std::to_string(b) + " is not a batch size >= 1");
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  if (batches.empty()) throw UserError("--batches is empty; give batch sizes, e.g. 1,16,256");
  return batches;
}

/// Which of the `requested` dtypes this OpenBLAS can run (each once); the others are reported in `r` as not
/// measured, with the reason.
std::vector<KernelDtype> runnable_dtypes(const std::vector<KernelDtype>& requested, KernelResult& r) {
  std::vector<KernelDtype> dtypes;
  for (const auto d : requested) {
    if (r.support.count(d)) continue;
    r.support[d] = dtype_support(d);
    if (r.support[d].available) {
      dtypes.push_back(d);
    } else {
      r.skipped.push_back({std::string(dtype_name(d)) + " (all shapes)", r.support[d].reason});
    }
  }
  return dtypes;
}

/// `pool` bytes of weight copies, shrunk (with a note in `r`) when they and `io_bytes` of inputs and outputs
/// would take more than 60% of the available memory; UserError when even the largest matrix (`largest`
/// bytes) does not fit.
std::uint64_t fit_pool_in_memory(std::uint64_t pool, double largest, std::uint64_t io_bytes, KernelResult& r) {
  const std::uint64_t largest_bytes = static_cast<std::uint64_t>(largest);
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
  return pool;
}

/// The configurations to measure, most important first: batch 1 (the memory fit) and the largest batch (the
/// compute fit) at the most threads; then the other batches; then fewer threads.
std::vector<Plan> make_plans(const std::vector<KernelDtype>& dtypes, std::size_t shapes,
                             const std::vector<std::int64_t>& batches, const std::vector<int>& threads) {
  std::vector<Plan> plans;
  const int tmax = threads.back();
  for (const auto d : dtypes) {
    for (std::size_t si = 0; si < shapes; ++si) {
      plans.push_back({d, si, batches.front(), tmax});
      if (batches.size() > 1) plans.push_back({d, si, batches.back(), tmax});
    }
  }
  for (const auto d : dtypes) {
    for (std::size_t si = 0; si < shapes; ++si) {
      for (std::size_t bi = 1; bi + 1 < batches.size(); ++bi) plans.push_back({d, si, batches[bi], tmax});
    }
  }
  for (auto ti = threads.rbegin() + 1; ti < threads.rend(); ++ti) {
    for (const auto d : dtypes) {
      for (std::size_t si = 0; si < shapes; ++si) {
        for (const auto b : batches) plans.push_back({d, si, b, *ti});
      }
    }
  }
  return plans;
}

/// Puts `r`'s samples in a stable order and fits them: the peak FLOP rate per dtype, and the memory and
/// compute efficiency bands from the samples at the most threads.
void sort_and_fit(KernelResult& r, const KernelOptions& options, const std::vector<KernelDtype>& dtypes) {
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
      r.memory_points.push_back(
          {s.cost.weight_bytes, s.bytes_per_second() / r.memory_bandwidth, kernels_detail::sample_label(s)});
    }
    if (s.batch == r.max_batch && s.batch > 1 && r.peak_flops.count(s.dtype)) {
      r.compute_points.push_back(
          {s.cost.weight_bytes, s.flops_per_second() / r.peak_flops[s.dtype], kernels_detail::sample_label(s)});
    }
  }
  if (r.memory_bandwidth <= 0) {
    r.notes.push_back(
        "no memory bandwidth was given, so no memory efficiency bands (run `moesim calibrate memory` "
        "first, or give --memory-bandwidth)");
  }
  r.memory_fit = fit_efficiency_bands(r.memory_points);
  r.compute_fit = fit_efficiency_bands(r.compute_points);
}

}  // namespace

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
  const std::vector<std::int64_t> batches = checked_batches(options.batches);
  const int repeats = std::max(1, options.repeats);

  const std::vector<KernelDtype> dtypes = runnable_dtypes(options.dtypes, r);

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
  pool = fit_pool_in_memory(pool, largest, io_bytes, r);
  r.pool_bytes = pool;
  if (!dtypes.empty() && pool < 2 * llc.bytes) {
    r.notes.push_back("the pool of weight copies (" + units::format_binary(units::bytes(static_cast<double>(pool))) +
                      ") is smaller than 2 x the last-level cache (" +
                      units::format_binary(units::bytes(static_cast<double>(llc.bytes))) +
                      "): small matrices may be read from cache, and their bytes/s can exceed the memory bandwidth");
  }

  const std::vector<Plan> plans = make_plans(dtypes, options.shapes.size(), batches, threads);

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
  const kernels_detail::SbgemvFn sb_gemv = kernels_detail::sbgemv();
  const kernels_detail::SbgemmFn sb_gemm = kernels_detail::sbgemm();
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
      r.skipped.push_back(
          {kernels_detail::sample_label(s), "would take about " + text::printf("%.1f", est) + " s and " +
                                                text::printf("%.1f", std::max(0.0, left)) +
                                                " s of --max-seconds are left; raise --max-seconds to measure it"});
      continue;
    }
    progress.update(static_cast<double>(pi) / static_cast<double>(plans.size()),
                    std::string(dtype_name(p.dtype)) + " " + kernel_name(p.batch) + " " + shape_text(shape) +
                        " batch " + std::to_string(p.batch) + ", " + kernels_detail::threads_text(p.threads));
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

  sort_and_fit(r, options, dtypes);
  r.seconds = secs(t_start, Clock::now());
  progress.update(1.0, "kernels done");
  return r;
}

}  // namespace moesim::calibrate
