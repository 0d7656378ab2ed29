#include "http/dto/change_dto.hpp"

#include <cstdio>
#include <ctime>

#include "base/log.hpp"
#include "workflow/status.hpp"

#include <gtest/gtest.h>

using namespace changeflow::http::dto;

namespace {
std::optional<std::string> q(const char* v) {
  return v ? std::optional<std::string>(v) : std::nullopt;
}
}  // namespace

TEST(StatusParams, TableOfQueries) {
  struct query_case {
    const char* include;
    const char* wait;
    const char* since;
    bool ok;
    bool timeline;
    std::int64_t wait_ms;
    std::optional<std::int64_t> since_version;
  };
  const query_case cases[] = {
      {nullptr, nullptr, nullptr, true, false, 0, std::nullopt},
      {"timeline", nullptr, nullptr, true, true, 0, std::nullopt},
      {nullptr, "0", nullptr, true, false, 0, std::nullopt},
      {nullptr, "1500", nullptr, true, false, 1500, std::nullopt},
      {nullptr, "25000", nullptr, true, false, 25000, std::nullopt},
      {nullptr, "2000", "7", true, false, 2000, 7},
      {"timeline", "100", "0", true, true, 100, 0},
      {"events", nullptr, nullptr, false},
      {"", nullptr, nullptr, false},
      {"timeline,other", nullptr, nullptr, false},
      {nullptr, "25001", nullptr, false},
      {nullptr, "-1", nullptr, false},
      {nullptr, "", nullptr, false},
      {nullptr, "1e3", nullptr, false},
      {nullptr, " 10", nullptr, false},
      {nullptr, "10ms", nullptr, false},
      {nullptr, "99999999999999999999", nullptr, false},
      {nullptr, nullptr, "3", false},
      {nullptr, "100", "", false},
      {nullptr, "100", "-2", false},
      {nullptr, "100", "v3", false},
  };
  for (const auto& c : cases) {
    auto parsed = parse_status_params(q(c.include), q(c.wait), q(c.since), 25000);
    SCOPED_TRACE(std::string("include=") + (c.include ? c.include : "-") + " wait=" + (c.wait ? c.wait : "-") +
                 " since=" + (c.since ? c.since : "-"));
    ASSERT_EQ(std::holds_alternative<status_params>(parsed), c.ok);
    if (!c.ok) {
      EXPECT_FALSE(std::get<parse_error>(parsed).message.empty());
      continue;
    }
    const auto& p = std::get<status_params>(parsed);
    EXPECT_EQ(p.timeline, c.timeline);
    EXPECT_EQ(p.wait_ms, c.wait_ms);
    EXPECT_EQ(p.since, c.since_version);
  }
}

TEST(StatusDocument, TimelineOnlyWhenGiven) {
  changeflow::persistence::operation_row row;
  row.operation_id = "4f2c7d1e-0000-4000-8000-000000000001";
  row.version = 3;
  auto plain = status_document(row, true);
  EXPECT_FALSE(plain.contains("timeline"));
  EXPECT_EQ(plain["live"], true);
  EXPECT_EQ(plain["version"], 3);
  changeflow::persistence::operation_event_row e;
  e.version = 1;
  auto full = status_document(row, {e}, false);
  ASSERT_TRUE(full.contains("timeline"));
  EXPECT_EQ(full["timeline"].size(), 1u);
  EXPECT_EQ(full["live"], false);
  full.erase("timeline");
  full["live"] = true;
  EXPECT_EQ(full, plain);
}

// The plain status read's body is written without the JSON tree: it must be, byte for byte, what the
// envelope dumps for the same document, for every step and for text that needs escaping or repair.
TEST(StatusDocument, TheWrittenBodyIsTheEnvelopesDumpByteForByte) {
  using changeflow::persistence::operation_row;
  const auto envelope_dump = [](const operation_row& row, bool live) {
    return changeflow::log::safe_dump(
        nlohmann::json{{"code", "OK"}, {"message", "OK"}, {"data", status_document(row, live)}});
  };
  operation_row base;
  base.operation_id = "4f2c7d1e-0000-4000-8000-000000000001";
  base.subject_id = "team-a";
  base.target_key = "service/limits";
  base.repository = "config/changes";
  base.target_branch = "main";
  base.title = "raise the limit";
  base.flow = "approve_then_create";
  base.version = 7;
  base.created_at_ms = 1764800000123;
  base.updated_at_ms = 1764800004567;
  std::vector<operation_row> rows;
  for (auto s : changeflow::workflow::all_steps) {
    auto r = base;
    r.step = s;
    r.phase = changeflow::workflow::phase_of(s);
    rows.push_back(r);
  }
  auto full = base;
  full.requester = "alice";
  full.mr_iid = 42;
  full.mr_url = "http://gitlab/config/changes/-/merge_requests/42";
  full.revert_of = "4f2c7d1e-0000-4000-8000-000000000002";
  full.reverted_by = "4f2c7d1e-0000-4000-8000-000000000003";
  rows.push_back(full);
  for (const char* title :
       {"quote \" and backslash \\", "tab\tnew line\ncontrol \x01 and DEL \x7f",
        "unicode: \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80", "invalid: \xc3\x28 \xff end", ""}) {
    auto r = full;
    r.title = title;
    r.subject_id = title;
    r.requester = title;
    rows.push_back(r);
  }
  for (const auto& row : rows) {
    for (bool live : {true, false}) {
      EXPECT_EQ(status_body(row, live), envelope_dump(row, live))
          << row.title << " " << changeflow::workflow::to_string(row.step);
    }
  }
}

TEST(ChangeDto, TimesAreWrittenAsTheCLibraryWritesThemEverywhere) {
  auto reference = [](std::int64_t ms) {
    std::int64_t secs = ms / 1000, milli = ms % 1000;
    if (milli < 0) {
      milli += 1000;
      secs -= 1;
    }
    std::time_t t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(milli));
    return std::string(buf);
  };
  EXPECT_EQ(changeflow::http::dto::ms_to_iso(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(changeflow::http::dto::ms_to_iso(1796479387042), "2026-12-05T14:03:07.042Z");
  // Month and year ends, leap days (2000 is a leap year, 2100 is not), the last second of a day,
  // and a few hundred thousand steps of an odd stride through 1900-2400.
  for (std::int64_t ms : {951782399999LL, 951782400000LL, 951868800000LL, 4107542399999LL, 4107542400000LL,
                          4110134400000LL, -1LL, -86400001LL, 253402300799999LL}) {
    EXPECT_EQ(changeflow::http::dto::ms_to_iso(ms), reference(ms)) << ms;
  }
  for (std::int64_t ms = -2208988800000LL; ms < 13569465600000LL; ms += 48611777) {
    ASSERT_EQ(changeflow::http::dto::ms_to_iso(ms), reference(ms)) << ms;
  }
}
