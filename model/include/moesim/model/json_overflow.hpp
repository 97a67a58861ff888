#pragma once
// nlohmann's parser reports a number beyond a double ("1E400") as out_of_range.406, not as a parse_error, so
// a reader that catches only parse_error lets it escape (found by fuzz_hw_profile and fuzz_hf_config).

#include <nlohmann/json.hpp>
#include <string>

namespace moesim::json {

/// "malformed JSON: number overflow parsing '1E400'", for the readers that call nlohmann::json::parse.
std::string number_overflow(const nlohmann::json::exception& e);

}  // namespace moesim::json
