#include "config/snapshot.hpp"

#include "base/log.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace changeflow::config {

const key_spec* find_key(std::string_view name) {
  const auto& keys = all_keys();
  auto it = std::lower_bound(keys.begin(), keys.end(), name,
                             [](const key_spec& k, std::string_view n) { return k.name < n; });
  if (it == keys.end() || it->name != name) return nullptr;
  return &*it;
}

std::string env_name(std::string_view key) {
  std::string out = "CHANGEFLOW_";
  for (char c : key) {
    out.push_back(c == '.' || c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return out;
}

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::vector<std::string> missing_required_keys(const snapshot& snap) {
  std::vector<std::string> missing;
  for (const auto& spec : all_keys()) {
    if (!spec.required) continue;
    bool set = false;
    if (spec.type == value_type::string_list) {
      auto items = snap.get_list(spec.name);
      set = std::any_of(items.begin(), items.end(), [](const std::string& i) { return !i.empty(); });
    } else {
      set = !snap.get_json(spec.name).is_null() && (spec.type != value_type::string || snap.get_string(spec.name));
    }
    if (!set) {
      missing.push_back("required key '" + std::string(spec.name) +
                        "' is not set (it has no built-in default: set it in " + "the config file or in " +
                        env_name(spec.name) + ")");
    }
  }
  return missing;
}

snapshot::snapshot(std::map<std::string, entry, std::less<>> entries) : entries_(std::move(entries)) {
  // Each declared key fills its settings field once; readers never see a key string again.
  static const nlohmann::json cleared;
  auto typed = std::make_shared<config::settings>();
  for (const auto& spec : all_keys()) {
    if (!spec.bind) continue;
    const auto* value = find(spec.name);
    spec.bind(*typed, value ? *value : cleared, spec.default_value);
  }
  finish_settings(*typed);
  settings_ = std::move(typed);
  // Parse errors are reported by load_from_json, which refuses such a snapshot; a snapshot built
  // directly keeps the repositories that did parse.
  repositories_ = std::make_shared<const repository_set>(parse_repositories(*this).set);
}

const nlohmann::json* snapshot::find(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.value.is_null()) return nullptr;
  return &it->second.value;
}

std::optional<std::int64_t> snapshot::get_int(std::string_view key) const {
  const auto* v = find(key);
  if (!v || !v->is_number_integer()) return std::nullopt;
  return v->get<std::int64_t>();
}

std::optional<double> snapshot::get_number(std::string_view key) const {
  const auto* v = find(key);
  if (!v || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::optional<bool> snapshot::get_bool(std::string_view key) const {
  const auto* v = find(key);
  if (!v || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

std::optional<std::string> snapshot::get_string(std::string_view key) const {
  const auto* v = find(key);
  if (!v || !v->is_string()) return std::nullopt;
  auto s = v->get<std::string>();
  if (s.empty()) return std::nullopt;
  return s;
}

std::vector<std::string> snapshot::get_list(std::string_view key) const {
  std::vector<std::string> out;
  const auto* v = find(key);
  if (!v || !v->is_array()) return out;
  for (const auto& item : *v) {
    if (item.is_string()) out.push_back(item.get<std::string>());
  }
  return out;
}

const nlohmann::json& snapshot::get_json(std::string_view key) const {
  static const nlohmann::json null_value;
  const auto* v = find(key);
  return v ? *v : null_value;
}

nlohmann::json snapshot::describe() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, e] : entries_) {
    const key_spec* spec = find_key(name);
    nlohmann::json item = {
        {"value", log::is_secret_key(name) && !e.value.is_null() ? nlohmann::json("***") : log::mask_secrets(e.value)},
        {"source", e.source}};
    if (spec) item["reload"] = spec->reload == reload_kind::hot ? "hot" : "restart";
    out[name] = std::move(item);
  }
  return out;
}

std::vector<std::string> snapshot::restart_keys_changed(const snapshot& other) const {
  std::vector<std::string> changed;
  for (const auto& spec : all_keys()) {
    if (spec.reload != reload_kind::restart) continue;
    const auto* a = find(spec.name);
    const auto* b = other.find(spec.name);
    bool differ = (a == nullptr) != (b == nullptr) || (a && b && *a != *b);
    if (differ) changed.emplace_back(spec.name);
  }
  return changed;
}

namespace {

const char* type_name(value_type t) {
  switch (t) {
    case value_type::integer: return "integer";
    case value_type::number: return "number";
    case value_type::boolean: return "boolean";
    case value_type::string: return "string";
    case value_type::string_list: return "list of strings";
    case value_type::object: return "object";
  }
  return "?";
}

bool type_matches(value_type t, const nlohmann::json& v) {
  if (v.is_null()) return true;  // cleared; the consumer applies the key's fallback
  switch (t) {
    case value_type::integer: return v.is_number_integer();
    case value_type::number: return v.is_number();
    case value_type::boolean: return v.is_boolean();
    case value_type::string: return v.is_string();
    case value_type::string_list:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& i) { return i.is_string(); });
    case value_type::object: return v.is_object();
  }
  return false;
}

// Flattens {"db": {"port": 1}} into "db.port" -> 1, stopping at keys declared as objects.
void flatten(const nlohmann::json& node, const std::string& prefix,
             std::vector<std::pair<std::string, nlohmann::json>>& out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string name = prefix.empty() ? it.key() : prefix + "." + it.key();
    const key_spec* spec = find_key(name);
    bool nested_section = it.value().is_object() && !it.value().empty();
    if (nested_section && (!spec || spec->type != value_type::object)) {
      flatten(it.value(), name, out);
    } else {
      out.emplace_back(name, it.value());
    }
  }
}

std::optional<nlohmann::json> parse_env_value(value_type t, const std::string& raw) {
  try {
    switch (t) {
      case value_type::integer: {
        size_t pos = 0;
        long long v = std::stoll(raw, &pos);
        if (pos != raw.size()) return std::nullopt;
        return nlohmann::json(v);
      }
      case value_type::number: {
        size_t pos = 0;
        double v = std::stod(raw, &pos);
        if (pos != raw.size()) return std::nullopt;
        return nlohmann::json(v);
      }
      case value_type::boolean:
        if (raw == "true" || raw == "1") return nlohmann::json(true);
        if (raw == "false" || raw == "0") return nlohmann::json(false);
        return std::nullopt;
      case value_type::string: return nlohmann::json(raw);
      case value_type::string_list: {
        nlohmann::json arr = nlohmann::json::array();
        std::stringstream ss(raw);
        std::string item;
        while (std::getline(ss, item, ',')) {
          if (!item.empty()) arr.push_back(item);
        }
        return arr;
      }
      case value_type::object: {
        auto j = nlohmann::json::parse(raw);
        if (!j.is_object()) return std::nullopt;
        return j;
      }
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

load_result load_from_json(const nlohmann::json& doc, const env_lookup& env) {
  load_result result;
  if (!doc.is_object()) {
    result.errors.push_back("config: the document must be a JSON object");
    return result;
  }
  std::map<std::string, snapshot::entry, std::less<>> entries;
  for (const auto& spec : all_keys()) {
    entries[std::string(spec.name)] = {spec.default_value, "default"};
  }
  std::vector<std::pair<std::string, nlohmann::json>> flat;
  flatten(doc, "", flat);
  for (auto& [name, value] : flat) {
    const key_spec* spec = find_key(name);
    if (!spec) {
      result.errors.push_back("unknown key '" + name + "'");
      continue;
    }
    if (!type_matches(spec->type, value)) {
      result.errors.push_back("key '" + name + "' must be " + type_name(spec->type) + ", got " +
                              std::string(value.type_name()));
      continue;
    }
    entries[name] = {value, "file"};
  }
  for (const auto& spec : all_keys()) {
    std::string var = env_name(spec.name);
    auto raw = env(var);
    if (!raw) continue;
    auto parsed = parse_env_value(spec.type, *raw);
    if (!parsed) {
      result.errors.push_back("environment variable " + var + " (key '" + std::string(spec.name) + "') must be " +
                              type_name(spec.type));
      continue;
    }
    entries[std::string(spec.name)] = {*parsed, "env"};
  }
  if (!result.errors.empty()) return result;
  auto snap = std::make_shared<const snapshot>(std::move(entries));
  auto repos = parse_repositories(*snap);
  if (!repos.errors.empty()) {
    result.errors = std::move(repos.errors);
    return result;
  }
  result.snap = std::move(snap);
  return result;
}

load_result load_from_file(const std::string& path, const env_lookup& env) {
  std::ifstream in(path);
  if (!in) return {nullptr, {"config: cannot read file '" + path + "'"}};
  std::stringstream buf;
  buf << in.rdbuf();
  auto doc = nlohmann::json::parse(buf.str(), nullptr, false);
  if (doc.is_discarded()) return {nullptr, {"config: file '" + path + "' is not valid JSON"}};
  return load_from_json(doc, env);
}

}  // namespace changeflow::config
