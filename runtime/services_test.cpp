// The workflow settings a change's actor is built with, from the config snapshot: the poll schedule's
// ramp, and webhooks turning it off for the repositories whose hooks end the waits.
#include "runtime/services.hpp"
#include "config/store.hpp"
#include "config/test_env.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using nlohmann::json;

namespace {

std::shared_ptr<const config::snapshot> load(const json& doc) {
  auto r = config::load_from_json(doc, config::test_support::env_of({}));
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors.front());
  return r.snap;
}

json two_repositories() {
  return json{
      {"repositories",
       {{"team/hooked", {{"branches", {"main"}}, {"webhook_secret", "s"}}}, {"team/polled", {{"branches", {"main"}}}}}},
      {"poll", {{"short_interval_ms", 2000}, {"first_interval_ms", 100}, {"webhook_interval_ms", 30000}}}};
}

}  // namespace

TEST(WorkflowSettings, ThePollRampComesFromTheConfig) {
  auto snap = load(two_repositories());
  ASSERT_TRUE(snap);
  auto polled = runtime::workflow_settings_from(*snap, "team/polled");
  EXPECT_EQ(polled.polls.first_interval_ms, 100);
  EXPECT_EQ(polled.polls.next_delay(0, 0), 100);
  EXPECT_EQ(polled.polls.next_delay(1, 100), 200);
}

TEST(WorkflowSettings, WebhooksTurnTheRampOff) {
  auto snap = load(two_repositories());
  ASSERT_TRUE(snap);
  auto hooked = runtime::workflow_settings_from(*snap, "team/hooked");
  EXPECT_EQ(hooked.polls.first_interval_ms, 0);
  EXPECT_EQ(hooked.polls.next_delay(0, 0), 30000) << "the hook ends the wait; the poll is only its fallback";
}
