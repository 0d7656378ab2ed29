// When a GitLab webhook ends a request actor's wait (workflow/webhook_rule.hpp).

#include "workflow/webhook_rule.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using messages::gitlab_event;
using workflow::step;

namespace {
gitlab_event pipeline(std::string sha, std::string status) {
  return gitlab_event{gitlab_event::pipeline, std::move(sha), std::move(status), ""};
}
gitlab_event mr(std::string action) {
  return gitlab_event{gitlab_event::merge_request, "", "", std::move(action)};
}
}  // namespace

TEST(WebhookRule, FinalPipelineStatusesAreGitLabsCompletedOnes) {
  for (auto s : {"success", "failed", "canceled", "skipped"}) EXPECT_TRUE(workflow::is_final_pipeline_status(s)) << s;
  for (auto s :
       {"created", "waiting_for_resource", "preparing", "pending", "running", "manual", "scheduled", "", "SUCCESS"}) {
    EXPECT_FALSE(workflow::is_final_pipeline_status(s)) << s;
  }
}

TEST(WebhookRule, TableOfStepsHeadsAndEvents) {
  struct row {
    step current;
    const char* head;
    gitlab_event e;
    bool ends;
    const char* why;
  };
  const row rows[] = {
      {step::CREATE_MR_OPENED, "abc1", pipeline("abc1", "success"), true, "head pipeline passed"},
      {step::CREATE_MR_OPENED, "abc1", pipeline("abc1", "failed"), true, "head pipeline failed"},
      {step::CREATE_PIPELINE_PENDING, "abc1", pipeline("abc1", "canceled"), true, "pending wait, final"},
      {step::HANDLE_MERGING, "abc1", pipeline("abc1", "success"), true, "merge wait"},
      {step::HANDLE_PIPELINE_PENDING, "abc1", pipeline("abc1", "success"), true, "merge pending wait"},
      {step::CREATE_MR_OPENED, "", pipeline("abc1", "success"), true, "head not read yet"},
      {step::CREATE_MR_OPENED, "abc1", pipeline("abc1", "running"), false, "running after success: no move"},
      {step::CREATE_MR_OPENED, "abc1", pipeline("old0", "success"), false, "pipeline of an old sha"},
      {step::HANDLE_MERGING, "abc1", pipeline("old0", "failed"), false, "old sha failed"},
      {step::APPROVAL_SENT, "abc1", pipeline("abc1", "success"), false, "not a pipeline wait"},
      {step::HANDLE_STARTED, "abc1", pipeline("abc1", "success"), false, "approving: no wait"},
      {step::REBASE_PENDING, "abc1", pipeline("abc1", "success"), false, "rebase wait: pipeline of the old head"},
      {step::CREATE_MR_OPENED, "abc1", mr("merge"), true, "merged elsewhere"},
      {step::HANDLE_MERGING, "abc1", mr("close"), true, "closed elsewhere"},
      {step::REBASE_PENDING, "abc1", mr("merge"), true, "merged during a rebase"},
      {step::HANDLE_REBASING, "abc1", mr("close"), true, "closed during a rebase"},
      {step::HANDLE_MERGING, "abc1", mr("update"), false, "an edit says nothing"},
      {step::HANDLE_MERGING, "abc1", mr("open"), false, "opened"},
      {step::HANDLE_MERGING, "abc1", mr("approved"), false, "approved"},
      {step::HANDLE_MERGED, "abc1", mr("merge"), false, "we merged it: no wait"},
      {step::CALLED_BACK, "abc1", mr("merge"), false, "ended"},
      {step::BATCH_WAITING, "abc1", mr("merge"), false, "batch steps have no actor wait"},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(workflow::ends_wait(r.current, r.head, r.e), r.ends) << r.why;
  }
}

TEST(WebhookRule, OnlyFinishedPipelinesAndMergesOrClosesAreWorthDelivering) {
  EXPECT_TRUE(workflow::worth_delivering(pipeline("a", "success")));
  EXPECT_FALSE(workflow::worth_delivering(pipeline("a", "pending")));
  EXPECT_TRUE(workflow::worth_delivering(mr("merge")));
  EXPECT_TRUE(workflow::worth_delivering(mr("close")));
  EXPECT_FALSE(workflow::worth_delivering(mr("reopen")));
  EXPECT_FALSE(workflow::worth_delivering(mr("")));
}

TEST(WebhookRule, AnEventThatContradictsTheKeptMrReadOutdatesIt) {
  messages::mr_read read;
  read.read_at_ms = 10;
  read.state = "opened";
  read.sha = read.pipeline_sha = "abc1";
  read.pipeline_status = "success";
  EXPECT_FALSE(workflow::outdates(read, pipeline("abc1", "success"))) << "what the read already said";
  EXPECT_TRUE(workflow::outdates(read, pipeline("abc1", "failed"))) << "the head's pipeline ran again and failed";
  EXPECT_TRUE(workflow::outdates(read, pipeline("def2", "success"))) << "a pipeline of another head: it moved";
  EXPECT_TRUE(workflow::outdates(read, mr("merge")));
  EXPECT_TRUE(workflow::outdates(read, mr("close")));
  EXPECT_FALSE(workflow::outdates(messages::mr_read{}, mr("close"))) << "no read kept";
}
