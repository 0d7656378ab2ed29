#pragma once
// An immutable, validated view of the configuration. Readers take the current snapshot once per
// request (config::store::current()) and read typed values from it; a snapshot never changes.
//
// Every key is declared in keys.cpp with its type, default, whether it is hot-reloadable, and its
// fallback rule. A key may be cleared (null or "") in the file: typed getters then answer nullopt
// and each consumer applies the fallback documented for that key.

#include "config/repositories.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::config {

enum class value_type { integer, number, boolean, string, string_list, object };
enum class reload_kind { restart, hot };

struct key_spec {
  std::string_view name;
  value_type type;
  nlohmann::json default_value;  // null = no default (cleared)
  reload_kind reload;
  std::string_view doc;  // what it does and its fallback when missing or wrong
  /// No usable built-in value exists (secrets, tokens): changeflowd refuses to start without it.
  bool required = false;
};

/// All known keys, sorted by name.
const std::vector<key_spec>& all_keys();
const key_spec* find_key(std::string_view name);
/// Environment variable that overrides a key: CHANGEFLOW_ + upper case, dots to underscores.
std::string env_name(std::string_view key);

class snapshot;
/// One message per required key without a value (unset, null, "" or an empty list), each naming
/// the key and its environment variable; empty when every required key is set.
std::vector<std::string> missing_required_keys(const snapshot& snap);

class snapshot {
 public:
  /// Where a value came from: "default", "file" or "env".
  struct entry {
    nlohmann::json value;
    std::string source;
  };

  explicit snapshot(std::map<std::string, entry, std::less<>> entries);

  std::optional<std::int64_t> get_int(std::string_view key) const;
  std::optional<double> get_number(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;  // "" counts as cleared
  std::vector<std::string> get_list(std::string_view key) const;
  const nlohmann::json& get_json(std::string_view key) const;

  /// The value of a key declared in config/keys.cpp with a default: the configured value, else that
  /// default (one place for it). Throws std::logic_error for a key that is not declared, is declared
  /// with another type, or has no default: a programming error, caught by the tests, never a silent
  /// fallback.
  std::int64_t integer(std::string_view key) const;
  bool flag(std::string_view key) const;
  std::string text(std::string_view key) const;

  std::int64_t int_or(std::string_view key, std::int64_t fallback) const { return get_int(key).value_or(fallback); }
  bool bool_or(std::string_view key, bool fallback) const { return get_bool(key).value_or(fallback); }
  std::string string_or(std::string_view key, std::string fallback) const {
    return get_string(key).value_or(std::move(fallback));
  }

  /// The GitLab repositories (the `repositories` section, or the global gitlab.* keys as the one
  /// repository), parsed once per snapshot: a hot reload installs a new set with the new snapshot.
  const repository_set& repositories() const { return *repositories_; }

  /// Effective configuration with sources; secrets are masked (inside sections too).
  nlohmann::json describe() const;
  /// True when `other` differs in a key that needs a restart.
  std::vector<std::string> restart_keys_changed(const snapshot& other) const;

 private:
  const nlohmann::json* find(std::string_view key) const;
  std::map<std::string, entry, std::less<>> entries_;
  std::shared_ptr<const repository_set> repositories_;
};

using env_lookup = std::function<std::optional<std::string>(const std::string&)>;
/// Reads the process environment.
std::optional<std::string> process_env(const std::string& name);

struct load_result {
  std::shared_ptr<const snapshot> snap;  // null when errors is not empty
  std::vector<std::string> errors;       // each names the key
};

/// Builds a snapshot from a JSON document (nested objects or dotted keys) and the environment.
/// Unknown keys, wrong types and unparsable environment values are errors.
load_result load_from_json(const nlohmann::json& doc, const env_lookup& env);
/// Reads and parses the file first; an unreadable file or invalid JSON is an error.
load_result load_from_file(const std::string& path, const env_lookup& env);

}  // namespace changeflow::config
