// Expert streaming from storage: the read-time formula and the "streaming" scenario object
// (moesim/model/expert_streaming.hpp, where the model and its calibration are written down).

#include "moesim/model/expert_streaming.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "moesim/model/error.hpp"

namespace moesim::cost {

void validate_streaming_params(const StreamingParams& p) {
  const auto positive = [](double v, const char* what, const char* fix) {
    if (!(v > 0) || !std::isfinite(v)) {
      throw UserError(std::string("expert streaming: ") + what + " is " + std::to_string(v) + "; " + fix);
    }
  };
  positive(p.ssd_bytes_per_s, "the SSD read bandwidth", "give the storage profile a positive read_bandwidth");
  positive(p.cached_bytes_per_s, "the page-cache copy bandwidth",
           "give the storage profile a positive cached_read_bandwidth");
  positive(p.expert_bytes, "the bytes of one expert", "the model must have routed experts of non-zero size");
  if (!(p.read_latency_s >= 0) || !std::isfinite(p.read_latency_s)) {
    throw UserError("expert streaming: the per-read latency is " + std::to_string(p.read_latency_s) +
                    " s; give the storage profile a read_latency >= 0");
  }
  if (!(p.cache_capacity_bytes >= 0) || !std::isfinite(p.cache_capacity_bytes)) {
    throw UserError("expert streaming: the page-cache capacity is " + std::to_string(p.cache_capacity_bytes) +
                    " bytes; give a page_cache >= 0 (0 = every read goes to the SSD)");
  }
  if (p.readers < 1) {
    throw UserError("expert streaming: " + std::to_string(p.readers) +
                    " parallel readers; use at least 1 (flash-moe uses 4, one pread() thread per chosen expert)");
  }
}

StreamingParams streaming_params(const model::StorageProfile& storage, units::Bytes expert_bytes, std::int32_t readers,
                                 bool overlapped) {
  const auto missing = [&](const char* field, const char* example) {
    return UserError(storage.origin + ": $." + field + " is missing and expert streaming needs it; add {\"value\": \"" +
                     example +
                     "\", \"source\": \"...\"} (hwprofiles/storage/apple-ssd-m3-max.json shows how it "
                     "was calibrated there)");
  };
  if (!storage.read_latency) throw missing("read_latency", "100us");
  if (!storage.cached_read_bandwidth) throw missing("cached_read_bandwidth", "28GB/s");
  if (!storage.page_cache) throw missing("page_cache", "35GB");
  StreamingParams p;
  p.ssd_bytes_per_s = storage.read_bandwidth.value.base();
  p.read_latency_s = storage.read_latency->value.base();
  p.cached_bytes_per_s = storage.cached_read_bandwidth->value.base();
  p.cache_capacity_bytes = storage.page_cache->value.base();
  p.readers = readers;
  p.expert_bytes = expert_bytes.base();
  p.overlapped = overlapped;
  validate_streaming_params(p);
  return p;
}

double read_seconds(const StreamingParams& p, double hits, double misses) {
  MOESIM_CHECK(hits >= 0 && misses >= 0, "negative hit or miss count");
  const double n = hits + misses;
  if (n <= 0) return 0;
  // The formula and its calibration are in streaming.hpp: latencies overlap over min(N, n) readers in
  // flight; device transfers (misses) and page-cache copies (every expert) share their paths, so they add.
  const double c = std::min(static_cast<double>(p.readers), n);
  const double s = p.expert_bytes;
  const double m = misses;
  return m * p.read_latency_s / c + m * s / p.ssd_bytes_per_s + n * s / p.cached_bytes_per_s;
}

double expected_hit_rate(const StreamingParams& p, std::int64_t moe_layers, std::int64_t experts) {
  MOESIM_CHECK(p.expert_bytes > 0, "expected_hit_rate needs the bytes of one expert");
  const double all = static_cast<double>(moe_layers) * static_cast<double>(experts);
  if (all <= 0) return 0;
  // The cache holds whole experts: floor(capacity / expert bytes), as sim::ExpertStreamer counts them.
  const double held = std::floor(p.cache_capacity_bytes / p.expert_bytes);
  return std::clamp(held / all, 0.0, 1.0);
}

StreamingSpec streaming_spec_from_json(const json::Node& node) {
  if (!node.raw().is_object())
    throw node.error(
        "is not an object; write {\"storage\": \"apple-ssd-m3-max\", \"readers\": 4, \"mode\": \"serial\"}");
  node.expect_only({"storage", "readers", "page_cache", "mode"});
  StreamingSpec s;
  s.storage = node.string("storage");
  if (auto v = node.optional_integer("readers", 1)) {
    if (*v > 1024) throw node.error("readers", std::to_string(*v) + " parallel readers; use at most 1024");
    s.readers = static_cast<std::int32_t>(*v);
  }
  s.page_cache = node.optional_quantity<units::Dimension::Bytes>("page_cache", true);
  if (auto v = node.optional_string("mode")) s.mode = *v;
  if (s.mode != "serial" && s.mode != "overlapped")
    throw node.error("mode", "\"" + s.mode + "\" is not serial or overlapped");
  return s;
}

nlohmann::json streaming_spec_to_json(const StreamingSpec& s) {
  nlohmann::json j = {{"storage", s.storage}, {"readers", s.readers}, {"mode", s.mode}};
  if (s.page_cache) j["page_cache"] = std::to_string(std::llround(s.page_cache->base())) + "B";
  return j;
}

StreamingParams resolve_streaming(const StreamingSpec& spec, const model::Architecture& arch,
                                  const model::Precision& weights) {
  if (!arch.is_moe()) throw UserError(arch.id + " is dense: it has no experts to stream");
  if (spec.mode != "serial" && spec.mode != "overlapped")
    throw UserError("streaming mode \"" + spec.mode + "\" is not serial or overlapped");
  const model::StorageProfile storage = model::load_storage(spec.storage);
  StreamingParams p =
      streaming_params(storage, model::routed_expert_bytes(arch, weights), spec.readers, spec.mode == "overlapped");
  if (spec.page_cache) {
    p.cache_capacity_bytes = spec.page_cache->base();
    validate_streaming_params(p);
  }
  return p;
}

}  // namespace moesim::cost
