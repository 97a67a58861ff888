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

// A registry (sim's balancings, collectives, schedulers, arrival processes, trace formats) is a vector of
// entries, each with at least a `name` and a `description` (NamedOption, or a struct that adds the entry's
// implementation), in registration order: the order --help lists them. Enum-keyed entries also have a
// `value`. The helpers below are its look-ups, shared so that every registry words its errors alike.

/// The names of `all`, in order.
template <class Info>
std::vector<std::string> names_in(const std::vector<Info>& all) {
  std::vector<std::string> names;
  names.reserve(all.size());
  for (const auto& o : all) names.push_back(o.name);
  return names;
}

/// The names as a --help text lists choices: "a, b or c".
template <class Info>
std::string choices_in(const std::vector<Info>& all) {
  std::string s;
  for (std::size_t i = 0; i < all.size(); ++i) s += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i].name;
  return s;
}

/// The entry called `name`; UserError "unknown <what> '<name>' (did you mean ...?); valid: ..." if none.
template <class Info>
const Info& entry_by_name(const std::vector<Info>& all, std::string_view name, std::string_view what) {
  for (const auto& o : all)
    if (o.name == name) return o;
  const auto names = names_in(all);
  throw UserError("unknown " + std::string(what) + " '" + std::string(name) + "'" + text::did_you_mean(name, names) +
                  "; valid: " + text::join(names));
}

/// The value called `name`; UserError as entry_by_name if none.
template <class E>
E by_name(const std::vector<NamedOption<E>>& all, std::string_view name, std::string_view what) {
  return entry_by_name(all, name, what).value;
}

/// The entry whose value is `v`, or nullptr.
template <class Info, class E>
const Info* entry_of(const std::vector<Info>& all, E v) {
  for (const auto& o : all)
    if (o.value == v) return &o;
  return nullptr;
}

/// The entry whose value is `v`; InternalError if none (a value that nobody registered is a bug).
template <class Info, class E>
const Info& registered(const std::vector<Info>& all, E v, std::string_view what) {
  const Info* o = entry_of(all, v);
  MOESIM_CHECK(o != nullptr,
               std::string(what) + " " + std::to_string(static_cast<long long>(v)) + " is not registered");
  return *o;
}

/// The name of `v` ("?" if it has none, which would be a bug in the table).
template <class Info, class E>
std::string_view name_in(const std::vector<Info>& all, E v) {
  const Info* o = entry_of(all, v);
  return o ? std::string_view(o->name) : std::string_view("?");
}

/// Registers `info` at the end of `all`: UserError when its name, or its value for an enum-keyed entry, is
/// taken. Not thread-safe: register before running (a reference to an entry is valid until the next add).
template <class Info>
void add_entry(std::vector<Info>& all, Info info, std::string_view what) {
  for (const auto& o : all) {
    if (o.name == info.name) throw UserError(std::string(what) + " '" + info.name + "' is registered already");
    if constexpr (requires { o.value == info.value; }) {
      if (o.value == info.value)
        throw UserError(std::string(what) + " '" + info.name + "': its value is taken by '" + o.name + "'");
    }
  }
  all.push_back(std::move(info));
}

}  // namespace moesim
