// Fuzz target: every routing-trace reader, as `moesim trace`, `simulate --trace` and `serve` read them
// (sim/trace_io.hpp, sim/trace_import.hpp) plus the request traces `serve` replays (sim/request_traces.hpp:
// moesim CSV, Azure, BurstGPT, Mooncake, the format detected from the first line), and the format detection
// of `trace convert` without --from. The first byte picks the reader; the rest is the file (gzip or zstd
// content is decompressed by every routing-trace reader):
//   0 moesim JSON lines   1 moesim binary (.mtrace)   2 moe-selection   3 speculative-moe   4 vLLM
//   5 request trace   6 format detection (byte 6 only: other bytes keep their value mod 6)
// A trace that loads must also pass validate_trace (the readers promise a consistent trace). The memory
// budget is 256 MiB unless MOESIM_MEMORY_LIMIT says otherwise, so that a decompression bomb is refused after
// 256 MiB of output rather than after the machine's whole memory (the time limit is 10 s an input).
#include <cstdlib>
#include <optional>

#include "fuzz_support.hpp"
#include "moesim/sim/request_traces.hpp"
#include "moesim/sim/trace_import.hpp"
#include "moesim/sim/trace_io.hpp"

namespace sim = moesim::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool budget = ::setenv("MOESIM_MEMORY_LIMIT", "256MiB", 0) == 0;
  (void)budget;
  const auto sel = moesim::fuzz::select(data, size, 256);
  const unsigned which = sel.which == 6 ? 6 : sel.which % 6;
  const std::string_view rest = sel.rest;
  std::optional<sim::RoutingTrace> t;
  moesim::fuzz::expect_user_errors_only([&] {
    sim::ImportOptions opt;
    opt.experts = 8;
    switch (which) {
      case 0:
        t = sim::read_trace(moesim::fuzz::write_file("trace.jsonl", rest).string());
        break;
      case 1:
        t = sim::read_trace(moesim::fuzz::write_file("trace.mtrace", rest).string());
        break;
      case 2:
        t = sim::import_moe_selection({moesim::fuzz::write_file("sel.json", rest).string()}, opt);
        break;
      case 3:
        t = sim::import_speculative_moe(moesim::fuzz::write_file("spec.jsonl", rest).string(), opt);
        break;
      case 4:
        t = sim::import_vllm({moesim::fuzz::write_file("vllm.json", rest).string()}, opt);
        break;
      case 5: {
        const auto path = moesim::fuzz::write_file("arrivals.csv", rest);
        (void)sim::load_request_trace(path, 1000);
        sim::RequestTraceOptions o;  // the time scale's arithmetic and range check too
        o.max_requests = 1000;
        o.time_scale = 37.5;
        (void)sim::read_request_trace(path, o);
        break;
      }
      default: {
        const auto d = sim::detect_trace_format(moesim::fuzz::write_file("detect.json", rest).string());
        if (d.name.empty()) __builtin_trap();  // a detection names a format or throws
        break;
      }
    }
  });
  if (!t) return 0;
  // A reader that returns a trace promises a consistent one: validate_trace refusing it is a finding.
  try {
    sim::validate_trace(*t, "fuzz");
  } catch (const moesim::UserError&) {
    __builtin_trap();
  }
  (void)sim::count_requests(*t);
  return 0;
}
