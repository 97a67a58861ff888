#pragma once
// Named choices (STYLE.md practice 2): every policy, exchange or strategy is a value with a name and the
// one line --help prints. An unknown name is a UserError that lists the valid names and the nearest one.

#include <string>
#include <string_view>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/text.hpp"

namespace moesim {

template <class E>
struct NamedOption {
  E value;
  std::string name;
  std::string description;
};

/// The value called `name`; UserError "unknown <what> '<name>' (did you mean ...?); valid: ..." if none.
template <class E>
E by_name(const std::vector<NamedOption<E>>& all, std::string_view name, std::string_view what) {
  std::vector<std::string> names;
  for (const auto& o : all) {
    if (o.name == name) return o.value;
    names.push_back(o.name);
  }
  throw UserError("unknown " + std::string(what) + " '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid: " + text::join(names));
}

/// The name of `v` ("?" if it has none, which would be a bug in the table).
template <class E>
std::string_view name_in(const std::vector<NamedOption<E>>& all, E v) {
  for (const auto& o : all)
    if (o.value == v) return o.name;
  return "?";
}

}  // namespace moesim
