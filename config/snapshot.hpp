#pragma once
// An immutable, validated view of the configuration. Readers take the current snapshot once per
// request (config::store::current()) and read typed values from it; a snapshot never changes.
//
// Every key is declared in keys.cpp with the settings field it fills, its type, default, whether it
// is hot-reloadable, and its fallback rule. Code outside config/ reads the typed settings
// (`snap.poll().short_interval_ms`, config/settings.hpp), built once per snapshot with the fallbacks
// and clamps applied; the string-key getters below serve the loader, the fuzz target and the tests.

#include "config/repositories.hpp"
#include "config/settings.hpp"

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

/// Sets one settings field from a key's value: `value` is null when the key is missing or cleared;
/// `declared_default` is the key's default (see settings.hpp for how each field kind uses them).
using bind_fn = void (*)(settings& out, const nlohmann::json& value, const nlohmann::json& declared_default);

/// The settings field a key fills, and the key's type (from the field's type).
struct binding {
  value_type type;
  bind_fn apply = nullptr;  // null: read by config/ itself (the `repositories` section)
};

struct key_spec {
  key_spec(std::string_view n, binding b, nlohmann::json def, reload_kind r, std::string_view d, bool req = false)
      : name(n), type(b.type), default_value(std::move(def)), reload(r), doc(d), required(req), bind(b.apply) {}

  std::string_view name;
  value_type type;
  nlohmann::json default_value;  // null = no default (cleared)
  reload_kind reload;
  std::string_view doc;  // what it does and its fallback when missing or wrong
  /// No usable built-in value exists (secrets, tokens): changeflowd refuses to start without it.
  bool required = false;
  bind_fn bind = nullptr;
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

  // Raw values by key, as configured (no default applied, no clamp): for the loader, the fuzz target
  // and tests. Code outside config/ reads the typed settings below instead (config/keys_in_use_test).
  std::optional<std::int64_t> get_int(std::string_view key) const;
  std::optional<double> get_number(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;  // "" counts as cleared
  std::vector<std::string> get_list(std::string_view key) const;
  const nlohmann::json& get_json(std::string_view key) const;

  /// The typed settings of this snapshot, one struct per concern (config/settings.hpp).
  const config::settings& settings() const { return *settings_; }
  const http_settings& http() const { return settings_->http; }
  const instance_settings& instance() const { return settings_->instance; }
  const actors_settings& actors() const { return settings_->actors; }
  const log_settings& log() const { return settings_->log; }
  const console_settings& console() const { return settings_->console; }
  const ops_settings& ops() const { return settings_->ops; }
  const db_settings& db() const { return settings_->db; }
  const external_settings& external() const { return settings_->external; }
  const gitlab_settings& gitlab() const { return settings_->gitlab; }
  const approval_settings& approval() const { return settings_->approval; }
  const permission_settings& permission() const { return settings_->permission; }
  const callbacks_settings& callbacks() const { return settings_->callbacks; }
  const flow_settings& flow() const { return settings_->flow; }
  const poll_settings& poll() const { return settings_->poll; }
  const merge_settings& merge() const { return settings_->merge; }
  const timeouts_settings& timeouts() const { return settings_->timeouts; }
  const rehydrate_settings& rehydrate() const { return settings_->rehydrate; }
  const durability_settings& durability() const { return settings_->durability; }
  const batch_settings& batch() const { return settings_->batch; }
  const reconcile_settings& reconcile() const { return settings_->reconcile; }
  const notifications_settings& notifications() const { return settings_->notifications; }
  const rate_limit_settings& rate_limit() const { return settings_->rate_limit; }
  const access_settings& access() const { return settings_->access; }
  const auth_settings& auth() const { return settings_->auth; }
  const idempotency_settings& idempotency() const { return settings_->idempotency; }
  const faults_settings& faults() const { return settings_->faults; }
  const metrics_settings& metrics() const { return settings_->metrics; }

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
  std::shared_ptr<const config::settings> settings_;
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
