#pragma once
// Structured logging: one JSON object per line on stderr.
//   log::info("op.transition", {{"operation_id", id}, {"to", "MERGED"}});
// Values whose key looks like a secret (token, secret, password, authorization) are masked.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace changeflow::log {

enum class level { debug, info, warn, error };

void set_min_level(level l);
void set_component(std::string component);

void write(level l, std::string_view event, nlohmann::json fields = nlohmann::json::object());
inline void debug(std::string_view e, nlohmann::json f = nlohmann::json::object()) {
  write(level::debug, e, std::move(f));
}
inline void info(std::string_view e, nlohmann::json f = nlohmann::json::object()) {
  write(level::info, e, std::move(f));
}
inline void warn(std::string_view e, nlohmann::json f = nlohmann::json::object()) {
  write(level::warn, e, std::move(f));
}
inline void error(std::string_view e, nlohmann::json f = nlohmann::json::object()) {
  write(level::error, e, std::move(f));
}

/// Masks values of secret-looking keys recursively; exposed for tests and for the audit log.
nlohmann::json mask_secrets(const nlohmann::json& fields);
/// True when a field name denotes a credential.
bool is_secret_key(std::string_view key);
/// Serializes JSON without ever throwing on invalid UTF-8 (bytes are replaced).
std::string safe_dump(const nlohmann::json& j);

}  // namespace changeflow::log
