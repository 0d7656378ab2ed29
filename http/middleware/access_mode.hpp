#pragma once
// Access switch for user writes: the fallback direction is chosen by the consequence
// of misconfiguration. Not configured -> TEST_WINDOW (restricted); a typo or unknown value ->
// CLOSED; a TEST_WINDOW without a readable window -> closed. Misconfiguration never opens the
// feature.

#include "config/snapshot.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::http::middleware {

enum class access_mode { open, test_window, closed };

std::string_view to_string(access_mode m);

/// Blank/missing -> test_window; "OPEN" | "TEST_WINDOW" | "CLOSED" (trimmed, any case); else
/// closed.
access_mode resolve_access_mode(const std::optional<std::string>& raw);

/// Minutes after local midnight; end may be smaller than start (the window wraps midnight).
struct time_window {
  int start_minute = 0;
  int end_minute = 0;
};

/// Parses "HH:MM-HH:MM" (spaces around the parts allowed); nullopt when unparsable or empty
/// (start == end is refused: "all day" and "never" are both plausible readings, so neither is
/// guessed).
std::optional<time_window> parse_time_window(std::string_view text);

/// OPEN -> true; CLOSED -> false; TEST_WINDOW -> true only inside the window, read at the fixed
/// UTC offset (never the host's zone, so every instance agrees). Missing/unparsable window or an
/// offset beyond +-14h -> false.
bool access_allowed(access_mode mode, const std::optional<std::string>& window, std::int64_t utc_offset_minutes,
                    std::chrono::system_clock::time_point now);

/// Reads access.mode, access.window and access.time_zone_offset_minutes from the snapshot.
bool access_allowed(const config::snapshot& snap, std::chrono::system_clock::time_point now);

}  // namespace changeflow::http::middleware
