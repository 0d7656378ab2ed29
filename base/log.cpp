#include "base/log.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace changeflow::log {
namespace {
std::atomic<level> g_min_level{level::info};
std::mutex g_component_mutex;
std::string g_component = "changeflow";

const char* level_name(level l) {
  switch (l) {
    case level::debug: return "debug";
    case level::info: return "info";
    case level::warn: return "warn";
    case level::error: return "error";
  }
  return "info";
}

std::string now_iso8601() {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

void set_min_level(level l) {
  g_min_level = l;
}

void set_component(std::string component) {
  std::lock_guard lock(g_component_mutex);
  g_component = std::move(component);
}

bool is_secret_key(std::string_view key) {
  std::string k(key);
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* word : {"token", "secret", "password", "authorization", "cookie"}) {
    if (k.find(word) != std::string::npos) return true;
  }
  return false;
}

nlohmann::json mask_secrets(const nlohmann::json& fields) {
  if (fields.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      out[it.key()] = is_secret_key(it.key()) ? nlohmann::json("***") : mask_secrets(it.value());
    }
    return out;
  }
  if (fields.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : fields) out.push_back(mask_secrets(v));
    return out;
  }
  return fields;
}

std::string safe_dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write(level l, std::string_view event, nlohmann::json fields) {
  if (l < g_min_level.load(std::memory_order_relaxed)) return;
  nlohmann::json line = nlohmann::json::object();
  line["ts"] = now_iso8601();
  line["level"] = level_name(l);
  {
    std::lock_guard lock(g_component_mutex);
    line["component"] = g_component;
  }
  line["event"] = std::string(event);
  if (fields.is_object()) {
    auto masked = mask_secrets(fields);  // keep alive: items() only references it
    for (auto& [k, v] : masked.items()) line[k] = v;
  }
  std::string text = safe_dump(line);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace changeflow::log
