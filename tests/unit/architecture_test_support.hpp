#pragma once
// Helpers shared by the architecture tests (test_architecture*.cpp): how a computed parameter count meets
// a published figure, and a small valid Mixtral config for the parser tests.

#include <cmath>
#include <nlohmann/json.hpp>

namespace moesim::model::arch_test {

/// How a computed count meets a published figure.
enum class Match {
  Within1Pct,  ///< |computed − published| <= 1% of published
  Rounds,      ///< computed rounded at the printed precision equals the figure ("36B" for 36.47B)
  Truncates,   ///< computed truncated at the printed precision equals the figure ("37B" for 37.55B)
  None,
};

/// The first rule that holds, tried in the order above.
inline Match classify(double computed, double published, int digits) {
  if (std::abs(computed - published) <= 0.01 * published) return Match::Within1Pct;
  // One unit in the last printed digit: "3.3B" (2 digits) -> 1e8; "1T" (1 digit) -> 1e12.
  const double step = std::pow(10.0, std::floor(std::log10(published)) - digits + 1);
  const auto same = [&](double x) { return std::abs(x - published) <= 1e-9 * published; };
  if (same(std::round(computed / step) * step)) return Match::Rounds;
  if (same(std::floor(computed / step) * step)) return Match::Truncates;
  return Match::None;
}

inline const char* name(Match m) {
  switch (m) {
    case Match::Within1Pct:
      return "within 1%";
    case Match::Rounds:
      return "rounds to it";
    case Match::Truncates:
      return "truncates to it";
    case Match::None:
      return "no match";
  }
  return "?";
}

/// A small valid Mixtral config (TinyMistral's dimensions) for the parser tests.
inline nlohmann::json tiny_mixtral() {
  return {{"model_type", "mixtral"},   {"hidden_size", 1024},         {"num_hidden_layers", 12},
          {"num_attention_heads", 32}, {"num_key_value_heads", 8},    {"intermediate_size", 4096},
          {"num_local_experts", 6},    {"num_experts_per_tok", 2},    {"vocab_size", 32005},
          {"sliding_window", nullptr}, {"tie_word_embeddings", false}};
}

}  // namespace moesim::model::arch_test
