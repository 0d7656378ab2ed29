#include "http/middleware/access_mode.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::http::middleware;
using nlohmann::json;
using std::chrono::hours;
using std::chrono::minutes;

namespace {
// 2023-11-14 00:00:00 UTC
const auto utc_midnight = std::chrono::system_clock::time_point(std::chrono::seconds(1'699'920'000));
auto at_utc(int h, int m) {
  return utc_midnight + hours(h) + minutes(m);
}
}  // namespace

TEST(AccessMode, ResolveTableDriven) {
  struct mode_case {
    std::optional<std::string> raw;
    access_mode want;
  };
  const mode_case cases[] = {
      {std::nullopt, access_mode::test_window},  // missing: restricted by default
      {"", access_mode::test_window},            // cleared
      {"   \t", access_mode::test_window},       // blank
      {"OPEN", access_mode::open},
      {" open ", access_mode::open},
      {"Open", access_mode::open},
      {"TEST_WINDOW", access_mode::test_window},
      {"test_window", access_mode::test_window},
      {"CLOSED", access_mode::closed},
      {"closed", access_mode::closed},
      {"OPNE", access_mode::closed},  // misspelt: closed, never open
      {"OPEN!", access_mode::closed},
      {"TEST-WINDOW", access_mode::closed},
      {"yes", access_mode::closed},
      {"1", access_mode::closed},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(resolve_access_mode(c.raw), c.want) << "'" << c.raw.value_or("<missing>") << "'";
  }
}

TEST(AccessMode, WindowParsingTableDriven) {
  struct window_case {
    const char* text;
    std::optional<std::pair<int, int>> want;
  };
  const window_case cases[] = {
      {"09:00-18:00", std::pair{540, 1080}},
      {" 9:30 - 17:45 ", std::pair{570, 1065}},
      {"22:00-06:00", std::pair{1320, 360}},
      {"00:00-23:59", std::pair{0, 1439}},
      {"09:00-09:00", std::nullopt},  // empty/ambiguous: closed
      {"24:00-06:00", std::nullopt},
      {"09:60-10:00", std::nullopt},
      {"9-17", std::nullopt},
      {"09:00", std::nullopt},
      {"09:00-", std::nullopt},
      {"ab:cd-ef:gh", std::nullopt},
      {"09:0-10:00", std::nullopt},
      {"", std::nullopt},
  };
  for (const auto& c : cases) {
    auto w = parse_time_window(c.text);
    ASSERT_EQ(w.has_value(), c.want.has_value()) << c.text;
    if (w) {
      EXPECT_EQ(w->start_minute, c.want->first) << c.text;
      EXPECT_EQ(w->end_minute, c.want->second) << c.text;
    }
  }
}

TEST(AccessMode, AllowedTableDriven) {
  struct allowed_case {
    const char* name;
    access_mode mode;
    std::optional<std::string> window;
    std::int64_t offset;
    std::chrono::system_clock::time_point now;
    bool want;
  };
  const allowed_case cases[] = {
      {"open ignores window", access_mode::open, std::nullopt, 0, at_utc(3, 0), true},
      {"closed ignores window", access_mode::closed, "00:00-23:59", 0, at_utc(12, 0), false},
      {"inside", access_mode::test_window, "09:00-18:00", 0, at_utc(9, 0), true},
      {"end is exclusive", access_mode::test_window, "09:00-18:00", 0, at_utc(18, 0), false},
      {"before", access_mode::test_window, "09:00-18:00", 0, at_utc(8, 59), false},
      {"missing window", access_mode::test_window, std::nullopt, 0, at_utc(12, 0), false},
      {"unparsable window", access_mode::test_window, "nine to five", 0, at_utc(12, 0), false},
      {"wrap: late evening", access_mode::test_window, "22:00-06:00", 0, at_utc(23, 30), true},
      {"wrap: early morning", access_mode::test_window, "22:00-06:00", 0, at_utc(5, 59), true},
      {"wrap: midday", access_mode::test_window, "22:00-06:00", 0, at_utc(12, 0), false},
      // 01:00 UTC is 09:00 at UTC+8: inside a 09-18 window read at +480 minutes.
      {"offset +8h inside", access_mode::test_window, "09:00-18:00", 480, at_utc(1, 0), true},
      {"offset +8h outside", access_mode::test_window, "09:00-18:00", 480, at_utc(11, 0), false},
      // 13:00 UTC is 08:00 at UTC-5.
      {"offset -5h outside", access_mode::test_window, "09:00-18:00", -300, at_utc(13, 0), false},
      {"offset -5h inside", access_mode::test_window, "09:00-18:00", -300, at_utc(14, 0), true},
      {"offset beyond 14h", access_mode::test_window, "00:00-23:59", 100000, at_utc(12, 0), false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(access_allowed(c.mode, c.window, c.offset, c.now), c.want) << c.name;
  }
}

TEST(AccessMode, FromSnapshot) {
  auto env = [](const std::string&) { return std::optional<std::string>(); };
  auto snap = [&](json doc) { return config::load_from_json(doc, env).snap; };
  EXPECT_TRUE(access_allowed(*snap({{"access.mode", "OPEN"}}), at_utc(3, 0)));
  EXPECT_FALSE(access_allowed(*snap({{"access.mode", ""}}), at_utc(3, 0))) << "cleared -> TEST_WINDOW, no window";
  EXPECT_FALSE(access_allowed(*snap({{"access.mode", nullptr}}), at_utc(3, 0)));
  EXPECT_FALSE(access_allowed(*snap({{"access.mode", "OPNE"}}), at_utc(3, 0)));
  auto windowed = snap(
      {{"access.mode", "test_window"}, {"access.window", "09:00-18:00"}, {"access.time_zone_offset_minutes", 480}});
  EXPECT_TRUE(access_allowed(*windowed, at_utc(1, 0)));
  EXPECT_FALSE(access_allowed(*windowed, at_utc(12, 0)));
}
