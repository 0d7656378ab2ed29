// Parsing of GitLab's webhook payloads (http/handlers/gitlab_webhook_body.hpp): every field of the
// three hooks, each refusal, and every truncation of a valid body (never a crash, never accepted
// as a different event).

#include "http/handlers/gitlab_webhook_body.hpp"

#include <gtest/gtest.h>

using namespace changeflow::http;

namespace {
const std::string sha = "9f2c4e1a7b3d5f60718293a4b5c6d7e8f9012345";

std::string pipeline_body() {
  return R"({"object_kind":"pipeline","object_attributes":{"id":5012,"iid":13,"ref":"changeflow/x","sha":")" + sha +
         R"(","source":"merge_request_event","status":"success","finished_at":"2026-01-01 12:00:00 UTC"},)"
         R"("merge_request":{"id":1001,"iid":42,"source_branch":"changeflow/x","target_branch":"main","state":"opened"},)"
         R"("project":{"id":7,"path_with_namespace":"team/payments"}})";
}
std::string mr_body() {
  return R"({"object_kind":"merge_request","event_type":"merge_request","project":{"id":7,"path_with_namespace":"team/payments"},)"
         R"("object_attributes":{"id":1001,"iid":42,"action":"merge","state":"merged","merge_commit_sha":")" +
         sha + R"(","last_commit":{"id":"0123456789abcdef0123456789abcdef01234567"}}})";
}
std::string deployment_body() {
  return R"({"object_kind":"deployment","status":"success","deployment_id":15,"deployable_id":796,"environment":"production",)"
         R"("project":{"id":7,"path_with_namespace":"team/payments"},"short_sha":"9f2c4e1a","commit_url":"http://gitlab/team/payments/-/commit/)" +
         sha + R"(","ref":"main"})";
}
}  // namespace

TEST(GitlabHookBody, PipelineHookEveryField) {
  auto h = parse_gitlab_hook_body(pipeline_body(), "uuid-1", std::nullopt);
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.kind, gitlab_hook::pipeline);
  EXPECT_EQ(h.object_kind, "pipeline");
  EXPECT_EQ(h.project, "team/payments");
  EXPECT_EQ(h.delivery_id, "uuid-1");
  EXPECT_EQ(h.pipeline_id, 5012);
  EXPECT_EQ(h.sha, sha);
  EXPECT_EQ(h.status, "success");
  ASSERT_TRUE(h.mr_iid);
  EXPECT_EQ(*h.mr_iid, 42);
  EXPECT_FALSE(h.payload.empty());
}

TEST(GitlabHookBody, BranchPipelineHasNoMergeRequest) {
  auto body = pipeline_body();
  auto from = body.find("\"merge_request\":");
  auto to = body.find("},", from);
  body.replace(from, to + 1 - from, "\"merge_request\":null");
  auto h = parse_gitlab_hook_body(body, "uuid-1", std::nullopt);
  EXPECT_EQ(h.error, "");
  EXPECT_FALSE(h.mr_iid);
}

TEST(GitlabHookBody, MergeRequestHookEveryField) {
  auto h = parse_gitlab_hook_body(mr_body(), std::nullopt, "idem-7");
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.kind, gitlab_hook::merge_request);
  EXPECT_EQ(h.delivery_id, "idem-7");  // Idempotency-Key when the UUID header is absent
  ASSERT_TRUE(h.mr_iid);
  EXPECT_EQ(*h.mr_iid, 42);
  EXPECT_EQ(h.action, "merge");
  EXPECT_EQ(h.state, "merged");
  EXPECT_EQ(h.merge_commit_sha, sha);
  EXPECT_EQ(h.head_sha, "0123456789abcdef0123456789abcdef01234567");
}

TEST(GitlabHookBody, DeploymentHookTakesTheFullShaFromCommitUrl) {
  auto h = parse_gitlab_hook_body(deployment_body(), "uuid-2", "idem-2");
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.kind, gitlab_hook::deployment);
  EXPECT_EQ(h.delivery_id, "uuid-2");  // the UUID header wins
  EXPECT_EQ(h.status, "success");
  EXPECT_EQ(h.deployment_id, 15);
  EXPECT_EQ(h.sha, sha);
  auto no_url = deployment_body();
  no_url.replace(no_url.find("http://gitlab"), std::string("http://gitlab/team/payments/-/commit/").size() + sha.size(),
                 "");
  auto s = parse_gitlab_hook_body(no_url, "uuid-3", std::nullopt);
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.sha, "9f2c4e1a");  // short_sha when commit_url names no commit
}

TEST(GitlabHookBody, OtherKindsParseAsOther) {
  auto h =
      parse_gitlab_hook_body(R"({"object_kind":"push","project":{"path_with_namespace":"a/b"}})", "u", std::nullopt);
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.kind, gitlab_hook::other);
}

TEST(GitlabHookBody, RefusalsTable) {
  struct row {
    std::string body;
    std::optional<std::string_view> uuid;
    bool project_known;
    const char* why;
  };
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const row rows[] = {
      {"not json", "u", false, "not JSON"},
      {"[1]", "u", false, "not an object"},
      {R"({"object_kind":"pipeline"})", "u", false, "no project"},
      {replace(pipeline_body(), "\"team/payments\"", "7"), "u", false, "path not a string"},
      {pipeline_body(), std::nullopt, true, "no delivery id"},
      {pipeline_body(), std::string_view("bad id"), true, "delivery id with a space"},
      {replace(pipeline_body(), "\"id\":5012", "\"id\":\"5012\""), "u", true, "pipeline id not an integer"},
      {replace(pipeline_body(), sha, "not-a-sha"), "u", true, "pipeline sha not hex"},
      {replace(pipeline_body(), "\"status\":\"success\"", "\"status\":\"\""), "u", true, "empty status"},
      {replace(pipeline_body(), "\"iid\":42", "\"iid\":0"), "u", true, "merge_request.iid zero"},
      {replace(mr_body(), "\"iid\":42", "\"iid\":-1"), "u", true, "MR iid negative"},
      {replace(mr_body(), sha, "zz"), "u", true, "merge_commit_sha not hex"},
      {replace(deployment_body(), "\"status\":\"success\"", "\"status\":1"), "u", true, "deployment status"},
      {replace(deployment_body(), "\"deployment_id\":15", "\"deployment_id\":0"), "u", true, "deployment id"},
  };
  for (const auto& r : rows) {
    auto h = parse_gitlab_hook_body(r.body, r.uuid, std::nullopt);
    EXPECT_NE(h.error, "") << r.why;
    EXPECT_EQ(!h.project.empty(), r.project_known) << r.why;
  }
}

TEST(GitlabHookBody, EveryTruncationIsRefusedOrParsedAsTheSameEvent) {
  for (const auto& body : {pipeline_body(), mr_body(), deployment_body()}) {
    auto whole = parse_gitlab_hook_body(body, "u", std::nullopt);
    ASSERT_EQ(whole.error, "");
    for (std::size_t cut = 0; cut < body.size(); ++cut) {
      auto h = parse_gitlab_hook_body(body.substr(0, cut), "u", std::nullopt);
      // A prefix of a JSON object is never a complete object: always a 400.
      EXPECT_NE(h.error, "") << "cut at " << cut;
      // The rest split off and sent alone is not a hook either.
      auto rest = parse_gitlab_hook_body(body.substr(cut), "u", std::nullopt);
      if (cut > 0) {
        EXPECT_NE(rest.error, "") << "rest from " << cut;
      }
    }
  }
}
