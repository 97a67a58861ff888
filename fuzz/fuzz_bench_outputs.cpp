// Fuzz target: the runtime-benchmark outputs `moesim calibrate fit` and `moesim validate --llama-bench` read
// (issue 20): llama-bench's JSON or markdown table, mlx_lm.generate --verbose and mlx_lm.benchmark lines,
// llama-batched-bench's table or jsonl lines, vLLM's benchmark_serving.py and benchmark_latency.py JSON, and
// trtllm-bench's report (its printed text or --report_json). The first byte selects the reader; the rest is the file,
// named as a user would.
#include "fuzz_support.hpp"
#include "moesim/calibrate/bench_import.hpp"
#include "moesim/calibrate/serving_fit.hpp"
#include "moesim/calibrate/trtllm_fit.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  namespace c = moesim::calibrate;
  switch (data[0] % 6) {
    case 0: {
      const auto path = moesim::fuzz::write_file("llama-bench.out", text);
      moesim::fuzz::expect_user_errors_only([&] { (void)c::read_llama_bench(path); });
      break;
    }
    case 1: {
      const auto path = moesim::fuzz::write_file("mlx-lm.txt", text);
      moesim::fuzz::expect_user_errors_only([&] { (void)c::read_mlx_lm(path); });
      break;
    }
    case 2: {
      const auto path = moesim::fuzz::write_file("batched-bench.txt", text);
      moesim::fuzz::expect_user_errors_only([&] { (void)c::read_llama_batched_bench(path); });
      break;
    }
    case 3: {
      const auto path = moesim::fuzz::write_file("serving.json", text);
      moesim::fuzz::expect_user_errors_only([&] { (void)c::read_vllm_serving(path); });
      break;
    }
    case 4: {
      const auto path = moesim::fuzz::write_file("latency.json", text);
      moesim::fuzz::expect_user_errors_only([&] { (void)c::read_vllm_latency(path); });
      break;
    }
    default: {
      const auto path = moesim::fuzz::write_file("trtllm-report.txt", text);
      moesim::fuzz::expect_user_errors_only([&] {
        const c::TrtllmBenchReport r = c::read_trtllm_bench(path);
        (void)c::trtllm_precision(r, "");
      });
      break;
    }
  }
  return 0;
}
