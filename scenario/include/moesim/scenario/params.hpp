#pragma once
// One declaration per scenario key (issue 22): its JSON key, its command-line flag, its type, unit,
// default, valid range and one-line description, written once where the request that holds it is
// declared. A command's table gives, from those declarations alone:
//   - the scenario-file reader (wrong types, values out of range and unknown keys are errors naming the file,
//     the JSON path and the nearest known key; json_reader.hpp),
//   - the command-line flags and their --help lines, the help's "scenario keys" section and so the man page
//     (apps/docs.cpp renders --help),
//   - the resolved scenario every JSON output carries (the same keys, so it can be read back).
// The default a help line shows is the request's own member initialiser, so it is written once too.
//
//   ParamTable<SimulateRequest> t(&SimulateRequest::origins);
//   t.field("nodes", &SimulateRequest::nodes).min(1).unit("nodes").describe("number of nodes");
//   t.field("contention", &SimulateRequest::contention).describe("flows share NIC bandwidth");
//
// A key a table reads in a way the member types below do not cover (a number or a list; a flag that sets
// two members) is declared with custom() and its own reader, flag and writer, still in the one place.
// Nested objects ("generate": {...}) are groups: another request's table under a key, their keys dotted
// ("generate.seed") in the help and in error messages.

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "moesim/model/error.hpp"
#include "moesim/model/json_reader.hpp"

namespace moesim::scenario {

namespace po = boost::program_options;

/// "placement_file" -> "placement-file": a key's default flag.
std::string flag_of(std::string_view key);
/// A seed: a whole number 0 .. 2^64-1 (Boost reads "-1" into an unsigned option as 2^64-1 without a word,
/// so seeds are read as text and checked here). UserError naming `what` otherwise.
std::uint64_t parse_seed(const std::string& text, const std::string& what);
/// "50,90,99" -> {50, 90, 99}: a comma-separated list of finite numbers; UserError naming `flag`, with
/// `example`, otherwise.
std::vector<double> parse_numbers(const std::string& text, const std::string& flag, const std::string& example);
/// "on"/"true"/"yes" -> true, "off"/"false"/"no" -> false; UserError naming `flag` otherwise.
bool parse_on_off(const std::string& text, const std::string& flag);
/// A number as a help line shows it (no trailing zeros: 0.5, 1024, 1e-06).
std::string number_text(double v);

/// What --help says about one key, for the "scenario keys" section.
struct KeyDoc {
  std::string key;           ///< dotted JSON path
  std::string type;          ///< "string", "integer >= 1", "on|off", "object", ...
  std::string unit;          ///< "tokens", "nodes"; empty for none
  std::string default_text;  ///< the value a request starts with; empty when it has none
  std::string description;
  std::string flag;  ///< the flag that sets it, empty for a file-only key
};

/// The "scenario keys" section of a command's --help: one line per key with its type, unit, default and
/// flag, then its description on the next line.
std::string render_key_docs(const std::vector<KeyDoc>& keys, const std::string& title);

template <class R>
class ParamTable;

/// Whether a nested object's keys keep their flags in the parent's table (ParamTable::group): `None` where
/// they would clash with the parent's own (serve's --seed is the workload's, not the generator's).
enum class GroupFlags { Lifted, None };

/// One scenario key of request type R, as its table's field()/custom() declared it.
template <class R>
class Param {
 public:
  // Each part gets the Param itself (its key, its flag's name: they may be set after the part is made).
  using Reader = std::function<void(const Param& p, const json::Node& parent, R& r)>;
  using Writer = std::function<void(const Param& p, const R& r, nlohmann::json& parent)>;
  using FlagAdder = std::function<void(const Param& p, po::options_description& desc, const std::string& help)>;
  using FlagApplier = std::function<void(const Param& p, const po::variables_map& vm, R& r)>;
  using DefaultText = std::function<std::string(const R& r)>;

  explicit Param(std::string key) : key_(std::move(key)), flag_(flag_of(key_)) {}

  Param& describe(std::string text) {
    description_ = std::move(text);
    return *this;
  }
  Param& unit(std::string u) {
    unit_ = std::move(u);
    return *this;
  }
  /// The flag's name ("start-cold"), when not the key's; no_flag(): the key is read from files only.
  Param& flag(std::string name) {
    flag_ = std::move(name);
    return *this;
  }
  Param& no_flag() {
    flag_.clear();
    return *this;
  }
  /// The flag's help line, when it says something other than the key's description.
  Param& flag_help(std::string text) {
    flag_help_ = std::move(text);
    return *this;
  }
  /// The value shown as the default, when the member's initial value does not say it (a computed one).
  Param& default_text(std::string text) {
    default_text_ = [t = std::move(text)](const R&) { return t; };
    return *this;
  }
  /// A key every scenario file must give (its reader's own "missing" error when it does not).
  Param& required() {
    required_ = true;
    return *this;
  }
  /// A value to find a profile, a model or a file by: where a file gave it is remembered, so an error in
  /// resolving it names the file (json::Origins), and a flag that overrides it forgets that.
  Param& origin() {
    origin_ = true;
    return *this;
  }
  /// The smallest and largest values allowed (integers and numbers).
  Param& min(double v) {
    min_ = v;
    return *this;
  }
  Param& max(double v) {
    max_ = v;
    return *this;
  }
  /// Only values > 0 (a number whose zero means nothing: a concentration, a ratio).
  Param& positive() {
    positive_ = true;
    return *this;
  }
  /// A boolean key's flag as a switch without a value, which sets the key to `value` ("--lm-head": true;
  /// "--start-cold": start_wired false). Its help says what it does instead of a default.
  Param& switch_flag(std::string name, bool value, std::string help) {
    flag_ = std::move(name);
    flag_help_ = std::move(help);
    is_switch_ = true;
    add_flag_ = [](const Param& p, po::options_description& d, const std::string& h) {
      d.add_options()(p.flag_.c_str(), h.c_str());
    };
    apply_flag_ = [value](const Param& p, const po::variables_map&, R& r) { p.set_bool_(r, value); };
    return *this;
  }
  /// Written to the resolved scenario only when `when` holds (an optional part left at its default).
  Param& written_if(std::function<bool(const R&)> when) {
    written_if_ = std::move(when);
    return *this;
  }

  // The custom parts (custom() declarations; field() fills them from the member's type).
  Param& type(std::string t) {
    type_ = std::move(t);
    return *this;
  }
  Param& reader(Reader f) {
    read_ = std::move(f);
    return *this;
  }
  Param& writer(Writer f) {
    write_ = std::move(f);
    return *this;
  }
  Param& flag_adder(FlagAdder f) {
    add_flag_ = std::move(f);
    return *this;
  }
  /// The flag takes one value of type T (std::string, std::int64_t, double), as Boost reads it.
  template <class T>
  Param& flag_value() {
    add_flag_ = [](const Param& p, po::options_description& d, const std::string& help) {
      d.add_options()(p.flag_.c_str(), po::value<T>(), help.c_str());
    };
    return *this;
  }
  Param& flag_applier(FlagApplier f) {
    apply_flag_ = std::move(f);
    return *this;
  }
  /// When the flag counts as given, if not only when flag_name() is (a key with several flags).
  /// What the flags given make of the key, as JSON, for a key a command resolves from JSON only (serve's
  /// "workload", set by a dozen flags): ParamTable::flags_to_json takes it instead of the flag applied and
  /// written back.
  Param& flag_json(std::function<nlohmann::json(const po::variables_map&)> f) {
    flag_json_ = std::move(f);
    return *this;
  }
  Param& flag_given_if(std::function<bool(const po::variables_map&)> f) {
    given_ = std::move(f);
    return *this;
  }
  Param& shown_default(DefaultText f) {
    default_text_ = std::move(f);
    return *this;
  }

  [[nodiscard]] const std::string& key() const { return key_; }
  [[nodiscard]] const std::string& flag_name() const { return flag_; }
  /// "--nodes 0" for messages about a flag's value.
  [[nodiscard]] std::string shown(const std::string& value) const { return "--" + flag_ + " " + value; }
  /// "must be at least 1" when `v` is out of this key's range, else empty.
  [[nodiscard]] std::string range_error(double v) const {
    if (positive_ && !(v > 0)) return "must be a positive number";
    if (min_ && v < *min_) return "must be at least " + number_text(*min_);
    if (max_ && v > *max_) return "must be at most " + number_text(*max_);
    return {};
  }
  /// The type with its range, as the help shows it: "integer >= 1".
  [[nodiscard]] std::string type_text() const {
    if (positive_ && max_) return type_ + " in (0, " + number_text(*max_) + "]";
    if (positive_) return type_ + " > 0";
    if (min_ && max_) return type_ + " in [" + number_text(*min_) + ", " + number_text(*max_) + "]";
    if (min_) return type_ + " >= " + number_text(*min_);
    if (max_) return type_ + " <= " + number_text(*max_);
    return type_;
  }

 private:
  template <class>
  friend class ParamTable;
  template <class M>
  void bind(M R::*member);

  std::string key_;
  std::string flag_;
  std::string group_;  ///< a group's flag lifted into its parent's table: the group's key
  std::string description_;
  std::string flag_help_;
  std::string unit_;
  std::string type_;
  bool origin_ = false;
  bool positive_ = false;
  bool is_switch_ = false;
  bool is_group_ = false;  ///< a nested object declared with ParamTable::group
  bool required_ = false;
  std::optional<double> min_, max_;
  std::function<void(R&, bool)> set_bool_;  ///< a boolean member's setter (switch_flag)
  Reader read_;
  Writer write_;
  FlagAdder add_flag_;
  FlagApplier apply_flag_;
  DefaultText default_text_;
  std::function<bool(const R&)> written_if_;
  std::function<bool(const po::variables_map&)> given_;
  std::function<nlohmann::json(const po::variables_map&)> flag_json_;
};

/// The scenario keys of request type R, in the order its help and its error messages list them.
template <class R>
class ParamTable {
 public:
  ParamTable() = default;
  /// `origins`: the request's record of where a file gave each origin() key.
  explicit ParamTable(json::Origins R::*origins) : origins_(origins) {}
  ParamTable(ParamTable&&) noexcept = default;
  ParamTable& operator=(ParamTable&&) noexcept = default;
  ParamTable(const ParamTable& o) : origins_(o.origins_), groups_(o.groups_) {
    for (const auto& p : o.params_) params_.push_back(std::make_unique<Param<R>>(*p));
    for (const auto& p : o.lifted_) lifted_.push_back(std::make_unique<Param<R>>(*p));
  }
  ParamTable& operator=(const ParamTable&) = delete;

  /// A key held by a member of type std::string, std::optional<std::string>, bool, std::int64_t,
  /// std::optional<std::int64_t>, double, std::optional<double> or std::uint64_t (a seed).
  template <class M>
  Param<R>& field(std::string key, M R::*member) {
    params_.push_back(std::make_unique<Param<R>>(std::move(key)));
    params_.back()->bind(member);
    return *params_.back();
  }
  /// A key that names one of a fixed set (an enum): `by_name` turns a name into the value (UserError for
  /// an unknown one, listing the names), `name_of` the value into its name.
  template <class E, class ByName, class NameOf>
  Param<R>& choice(std::string key, E R::*member, ByName by_name, NameOf name_of) {
    auto& p = custom(std::move(key), "string");
    p.reader([member, by_name](const Param<R>& q, const json::Node& n, R& r) {
       const std::string v = n.string(q.key());
       r.*member = n.resolving(q.key(), [&] { return by_name(v); });
     })
        .writer([member, name_of](const Param<R>& q, const R& r, nlohmann::json& out) {
          out[q.key()] = std::string(name_of(r.*member));
        })
        .shown_default([member, name_of](const R& r) { return std::string(name_of(r.*member)); })
        .template flag_value<std::string>()
        .flag_applier([member, by_name](const Param<R>& q, const po::variables_map& vm, R& r) {
          const std::string v = vm[q.flag_name()].template as<std::string>();
          try {
            r.*member = by_name(v);
          } catch (const UserError& e) {
            throw UserError(q.shown(v) + ": " + e.what());
          }
        });
    return p;
  }
  /// A key whose reader, writer and flag are given by hand (Param::reader, ::writer, ::flag_adder, ...).
  Param<R>& custom(std::string key, std::string type) {
    params_.push_back(std::make_unique<Param<R>>(std::move(key)));
    params_.back()->type(std::move(type));
    return *params_.back();
  }
  /// A key read and ignored (a scenario's "description"), listed so that files may hold it.
  void ignored(std::string key, std::string description) {
    custom(std::move(key), "string")
        .describe(std::move(description))
        .no_flag()
        .reader([](const auto&, const auto&, R&) {});
  }
  /// The nested object `key` held by `member`, read with `table`: its keys appear as "key.sub" in the help,
  /// their flags among this table's. `written_if`: whether the resolved scenario holds the object (always
  /// when empty).
  template <class G>
  void group(const std::string& key, G R::*member, const ParamTable<G>& table, std::string description,
             std::function<bool(const R&)> written_if = {}, GroupFlags flags = GroupFlags::Lifted) {
    auto sub = std::make_shared<const ParamTable<G>>(table);
    custom(key, "object")
        .describe(std::move(description))
        .no_flag()
        .reader([member, sub](const Param<R>& p, const json::Node& parent, R& r) {
          sub->read(parent.child(p.key()), r.*member);
        })
        .writer([member, sub](const Param<R>& p, const R& r, nlohmann::json& out) {
          out[p.key()] = sub->to_json(r.*member);
        })
        .written_if(std::move(written_if));
    params_.back()->is_group_ = true;
    groups_.push_back({key, [sub, member](const R& defaults) { return sub->key_docs(defaults.*member); },
                       flags == GroupFlags::Lifted});
    if (flags == GroupFlags::None) return;
    for (const Param<G>* g : sub->flag_params()) {
      auto lifted = std::make_unique<Param<R>>(g->key_);
      lifted->flag_ = g->flag_;
      lifted->is_switch_ = g->is_switch_;
      lifted->group_ = key;
      lifted->unit_ = g->unit_;
      lifted->flag_help_ = g->flag_help_.empty() ? g->description_ : g->flag_help_;
      lifted->add_flag_ = [sub, g](const Param<R>&, po::options_description& d, const std::string& help) {
        g->add_flag_(*g, d, help);
      };
      if (g->given_) lifted->given_ = g->given_;
      lifted->apply_flag_ = [sub, g, member](const Param<R>&, const po::variables_map& vm, R& r) {
        g->apply_flag_(*g, vm, r.*member);
      };
      lifted->write_ = [sub, g, member](const Param<R>&, const R& r, nlohmann::json& out) {
        g->write_(*g, r.*member, out);  // the one key, as its group writes it
      };
      if (g->default_text_)
        lifted->default_text_ = [sub, g, member](const R& r) { return g->default_text_(r.*member); };
      lifted_.push_back(std::move(lifted));
    }
  }

  /// Reads every key `node` holds into `r` (keys absent keep r's values). Unknown keys, wrong types and
  /// values out of range are UserErrors naming the file and the JSON path.
  void read(const json::Node& node, R& r) const {
    std::vector<std::string> allowed;
    allowed.reserve(params_.size());
    for (const auto& p : params_) allowed.push_back(p->key_);
    node.expect_only(allowed);
    for (const auto& p : params_) {
      if (!node.has(p->key_) && !p->required_) continue;
      p->read_(*p, node, r);
      if (p->origin_ && origins_ != nullptr) (r.*origins_)[p->key_] = node.where(p->key_);
    }
  }
  /// The resolved scenario: every key whose writer says so, as a scenario file would hold it.
  [[nodiscard]] nlohmann::json to_json(const R& r) const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& p : params_)
      if (p->write_ && (!p->written_if_ || p->written_if_(r))) p->write_(*p, r, out);
    return out;
  }

  /// Adds the flag of every key that has one (a group's too) to `desc`: its help line, unit and default.
  void add_flags(po::options_description& desc) const {
    const R defaults{};
    for (const auto* p : flag_params()) {
      std::string help = p->flag_help_.empty() ? p->description_ : p->flag_help_;
      const std::string d = p->default_text_ && !p->is_switch_ ? p->default_text_(defaults) : "";
      if (!d.empty()) help += " (default " + d + (p->unit_.empty() ? "" : " " + p->unit_) + ")";
      p->add_flag_(*p, desc, help);
    }
  }
  /// Applies every flag given in `vm` to `r`; a flag given for a key forgets where a file gave the key.
  void apply_flags(const po::variables_map& vm, R& r) const {
    for (const auto* p : flag_params()) {
      if (p->given_ ? !p->given_(vm) : vm.count(p->flag_) == 0) continue;
      p->apply_flag_(*p, vm, r);
      if (origins_ != nullptr) (r.*origins_).erase(p->key_);
    }
  }

  /// The flags given in `vm` as the keys they set, into the object `obj` (a command that resolves its
  /// scenario from JSON, as `serve` does, applies flags by writing them into the file's object). Each value
  /// is what the key's writer makes of the flag applied to a default request.
  /// A group's flag sets its one key inside the group's object; an object a key's writer makes (a custom
  /// key with several flags) is merged into what `obj` holds there (RFC 7386, nlohmann's merge_patch), so
  /// a flag changes only the keys it names.
  void flags_to_json(const po::variables_map& vm, nlohmann::json& obj) const {
    if (!obj.is_object()) obj = nlohmann::json::object();
    for (const auto* p : flag_params()) {
      if (p->given_ ? !p->given_(vm) : vm.count(p->flag_) == 0) continue;
      nlohmann::json value = nlohmann::json::object();
      if (p->flag_json_) {
        value[p->key_] = p->flag_json_(vm);
      } else {
        MOESIM_CHECK(static_cast<bool>(p->write_), "flags_to_json: a key with a flag and no writer");
        R one{};
        p->apply_flag_(*p, vm, one);
        p->write_(*p, one, value);
      }
      nlohmann::json& at = p->group_.empty() ? obj : obj[p->group_];
      if (!at.is_object()) at = nlohmann::json::object();
      at.merge_patch(value);
    }
  }

  /// One entry per key (a group's as "group.key"), with the defaults of `defaults`.
  [[nodiscard]] std::vector<KeyDoc> key_docs(const R& defaults = R{}) const {
    std::vector<KeyDoc> out;
    for (const auto& p : params_) {
      if (p->is_group_) {
        for (const auto& g : groups_) {
          if (g.key != p->key_) continue;
          for (auto d : g.docs(defaults)) {
            d.key = p->key_ + "." + d.key;
            if (!g.flags) d.flag.clear();
            out.push_back(std::move(d));
          }
        }
        continue;
      }
      out.push_back({p->key_, p->type_text(), p->unit_, p->default_text_ ? p->default_text_(defaults) : "",
                     p->description_, p->flag_.empty() ? "" : "--" + p->flag_});
    }
    return out;
  }
  /// The "scenario keys" section of --help.
  /// `prefix`: what the keys sit under in a scenario file ("scheduler."), shown before each.
  [[nodiscard]] std::string help(const std::string& title, const std::string& prefix = "") const {
    auto docs = key_docs();
    for (auto& d : docs) d.key = prefix + d.key;
    return render_key_docs(docs, title);
  }

 private:
  template <class>
  friend class ParamTable;
  struct Group {
    std::string key;
    std::function<std::vector<KeyDoc>(const R&)> docs;
    bool flags = true;  ///< its keys' flags are this table's (GroupFlags::Lifted)
  };

  /// The keys that have a flag, in order: a group's flags at the group's place.
  [[nodiscard]] std::vector<const Param<R>*> flag_params() const {
    std::vector<const Param<R>*> out;
    for (const auto& p : params_) {
      if (p->is_group_) {
        for (const auto& l : lifted_)
          if (l->group_ == p->key_) out.push_back(l.get());
      } else if (!p->flag_.empty()) {
        out.push_back(p.get());
      }
    }
    return out;
  }

  json::Origins R::*origins_ = nullptr;
  std::vector<std::unique_ptr<Param<R>>> params_;
  std::vector<Group> groups_;
  std::vector<std::unique_ptr<Param<R>>> lifted_;
};

// ---- field(): a member's reader, writer, default and flag from its type ----

template <class R>
template <class M>
void Param<R>::bind(M R::*member) {
  using V = std::remove_cvref_t<M>;
  // The member's value, and whether it has one (an optional may not).
  constexpr bool kOptional = std::is_same_v<V, std::optional<std::string>> ||
                             std::is_same_v<V, std::optional<std::int64_t>> || std::is_same_v<V, std::optional<double>>;
  write_ = [member](const Param& p, const R& r, nlohmann::json& out) {
    if constexpr (kOptional) {
      if ((r.*member).has_value()) out[p.key()] = *(r.*member);
    } else {
      out[p.key()] = r.*member;
    }
  };
  if constexpr (std::is_same_v<V, std::string> || std::is_same_v<V, std::optional<std::string>>) {
    type_ = "string";
    read_ = [member](const Param& p, const json::Node& n, R& r) { r.*member = n.string(p.key()); };
    default_text_ = [member](const R& r) -> std::string {
      if constexpr (kOptional) {
        return (r.*member).value_or("");
      } else {
        return r.*member;
      }
    };
    flag_value<std::string>();
    apply_flag_ = [member](const Param& p, const po::variables_map& vm, R& r) {
      r.*member = vm[p.flag_].template as<std::string>();
    };
  } else if constexpr (std::is_same_v<V, bool>) {
    type_ = "boolean";
    set_bool_ = [member](R& r, bool v) { r.*member = v; };
    read_ = [member](const Param& p, const json::Node& n, R& r) { r.*member = n.boolean(p.key()); };
    default_text_ = [member](const R& r) -> std::string { return r.*member ? "on" : "off"; };
    add_flag_ = [](const Param& p, po::options_description& d, const std::string& help) {
      d.add_options()(p.flag_.c_str(), po::value<std::string>(), ("on|off: " + help).c_str());
    };
    apply_flag_ = [member](const Param& p, const po::variables_map& vm, R& r) {
      r.*member = parse_on_off(vm[p.flag_].template as<std::string>(), "--" + p.flag_);
    };
  } else if constexpr (std::is_same_v<V, std::int64_t> || std::is_same_v<V, std::optional<std::int64_t>>) {
    type_ = "integer";
    read_ = [member](const Param& p, const json::Node& n, R& r) {
      // The reader's own "is 0, must be >= 1" for the lower bound, as every other integer of a file.
      const std::int64_t v =
          n.integer(p.key(), p.min_ ? static_cast<std::int64_t>(*p.min_) : std::numeric_limits<std::int64_t>::min());
      if (const auto e = p.range_error(static_cast<double>(v)); !e.empty()) throw n.error(p.key(), e);
      r.*member = v;
    };
    default_text_ = [member](const R& r) -> std::string {
      if constexpr (kOptional) {
        return (r.*member) ? std::to_string(*(r.*member)) : "";
      } else {
        return std::to_string(r.*member);
      }
    };
    flag_value<std::int64_t>();
    apply_flag_ = [member](const Param& p, const po::variables_map& vm, R& r) {
      const std::int64_t v = vm[p.flag_].template as<std::int64_t>();
      if (const auto e = p.range_error(static_cast<double>(v)); !e.empty())
        throw UserError(p.shown(std::to_string(v)) + ": " + e);
      r.*member = v;
    };
  } else if constexpr (std::is_same_v<V, double> || std::is_same_v<V, std::optional<double>>) {
    type_ = "number";
    read_ = [member](const Param& p, const json::Node& n, R& r) {
      const double v = n.number(p.key());
      if (const auto e = p.range_error(v); !e.empty()) throw n.error(p.key(), e);
      r.*member = v;
    };
    default_text_ = [member](const R& r) -> std::string {
      if constexpr (kOptional) {
        return (r.*member) ? number_text(*(r.*member)) : "";
      } else {
        return number_text(r.*member);
      }
    };
    flag_value<double>();
    apply_flag_ = [member](const Param& p, const po::variables_map& vm, R& r) {
      const double v = vm[p.flag_].template as<double>();
      if (const auto e = p.range_error(v); !e.empty()) throw UserError(p.shown(number_text(v)) + ": " + e);
      r.*member = v;
    };
  } else if constexpr (std::is_same_v<V, std::uint64_t>) {
    type_ = "integer";
    read_ = [member](const Param& p, const json::Node& n, R& r) {
      r.*member = static_cast<std::uint64_t>(n.integer(p.key(), 0));
    };
    default_text_ = [member](const R& r) { return std::to_string(r.*member); };
    flag_value<std::string>();
    apply_flag_ = [member](const Param& p, const po::variables_map& vm, R& r) {
      r.*member = parse_seed(vm[p.flag_].template as<std::string>(), "--" + p.flag_);
    };
  } else {
    static_assert(sizeof(V) == 0, "field(): declare this key with custom()");
  }
}

}  // namespace moesim::scenario
