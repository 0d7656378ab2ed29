#include "http/middleware/access_mode.hpp"

#include <algorithm>
#include <cctype>

namespace changeflow::http::middleware {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

/// "HH:MM" with 1-2 digit hours 0-23 and exactly 2 digit minutes 0-59.
std::optional<int> parse_clock(std::string_view s) {
  s = trim(s);
  auto colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 2 || s.size() - colon - 1 != 2) return std::nullopt;
  int hours = 0;
  for (char c : s.substr(0, colon)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    hours = hours * 10 + (c - '0');
  }
  int minutes = 0;
  for (char c : s.substr(colon + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    minutes = minutes * 10 + (c - '0');
  }
  if (hours > 23 || minutes > 59) return std::nullopt;
  return hours * 60 + minutes;
}

constexpr std::int64_t max_offset_minutes = 14 * 60;
constexpr std::int64_t minutes_per_day = 24 * 60;

}  // namespace

std::string_view to_string(access_mode m) {
  switch (m) {
    case access_mode::open: return "OPEN";
    case access_mode::test_window: return "TEST_WINDOW";
    case access_mode::closed: return "CLOSED";
  }
  return "CLOSED";
}

access_mode resolve_access_mode(const std::optional<std::string>& raw) {
  if (!raw) return access_mode::test_window;  // not configured: restricted access, the default
  auto t = trim(*raw);
  if (t.empty()) return access_mode::test_window;
  std::string upper(t);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "OPEN") return access_mode::open;
  if (upper == "TEST_WINDOW") return access_mode::test_window;
  return access_mode::closed;  // "CLOSED", typos and anything unknown
}

std::optional<time_window> parse_time_window(std::string_view text) {
  auto dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto start = parse_clock(text.substr(0, dash));
  auto end = parse_clock(text.substr(dash + 1));
  if (!start || !end || *start == *end) return std::nullopt;
  return time_window{*start, *end};
}

bool access_allowed(access_mode mode, const std::optional<std::string>& window, std::int64_t utc_offset_minutes,
                    std::chrono::system_clock::time_point now) {
  switch (mode) {
    case access_mode::open: return true;
    case access_mode::closed: return false;
    case access_mode::test_window: break;
  }
  if (!window) return false;
  auto w = parse_time_window(*window);
  if (!w) return false;
  if (utc_offset_minutes < -max_offset_minutes || utc_offset_minutes > max_offset_minutes) return false;
  auto utc_minutes = std::chrono::duration_cast<std::chrono::minutes>(now.time_since_epoch()).count();
  auto local = ((utc_minutes + utc_offset_minutes) % minutes_per_day + minutes_per_day) % minutes_per_day;
  if (w->start_minute < w->end_minute) return local >= w->start_minute && local < w->end_minute;
  return local >= w->start_minute || local < w->end_minute;  // wraps midnight
}

bool access_allowed(const config::snapshot& snap, std::chrono::system_clock::time_point now) {
  const auto& access = snap.access();
  return access_allowed(resolve_access_mode(access.mode), access.window, access.time_zone_offset_minutes, now);
}

}  // namespace changeflow::http::middleware
