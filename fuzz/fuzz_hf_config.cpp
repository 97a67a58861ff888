// Fuzz target: a Hugging Face config.json (model/architecture.hpp parse_hf_config, as `--model
// path/config.json` reads it), then the derived counts every command computes from it.
#include "fuzz_support.hpp"
#include "moesim/model/architecture.hpp"
#include "moesim/model/json_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  moesim::fuzz::expect_user_errors_only([&] {
    const auto doc = moesim::json::parse_text(text, "config.json");
    const auto a = moesim::model::parse_hf_config(doc, "config.json");
    (void)moesim::model::parameter_counts(a);
    (void)moesim::model::active_parameters(a);
    (void)moesim::model::kv_bytes_per_token(a);
    (void)moesim::model::recurrent_state_bytes(a);
  });
  return 0;
}
