#include "service/revert_change.hpp"

#include "effects/file_actions.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using service::file_versions;

namespace {

clients::repository_file version(std::string content, std::string last_commit) {
  clients::repository_file f;
  f.content = std::move(content);
  f.last_commit_id = std::move(last_commit);
  return f;
}

std::string line(const clients::commit_action& a) {
  return a.action + " " + a.file_path + (a.last_commit_id.empty() ? "" : " @" + a.last_commit_id) + " [" + a.content +
         "]";
}

std::vector<std::string> lines(const std::vector<clients::commit_action>& actions) {
  std::vector<std::string> out;
  for (const auto& a : actions) out.push_back(line(a));
  return out;
}

}  // namespace

// Every combination of "was there at the base" x "is there on the target now", in the original's
// order: updates and deletes are pinned to the target's current version, a file already back to
// its base content is left out.
TEST(RevertActions, EachFileGoesBackToItsContentAtTheBase) {
  std::vector<file_versions> files = {
      {"updated.yaml", version("v: 1\n", "base1"), version("v: 2\n", "head1")},
      {"created.yaml", std::nullopt, version("new: 1\n", "head2")},
      {"deleted.yaml", version("old: 1\n", "base3"), std::nullopt},
      {"unchanged.yaml", version("same\n", "base4"), version("same\n", "head4")},
      {"created-then-gone.yaml", std::nullopt, std::nullopt},
  };
  EXPECT_EQ(lines(service::revert_actions(files)), (std::vector<std::string>{
                                                       "update updated.yaml @head1 [v: 1\n]",
                                                       "delete created.yaml @head2 []",
                                                       "create deleted.yaml [old: 1\n]",
                                                   }));
}

TEST(RevertActions, NothingToRevertWhenTheTargetIsAsItWas) {
  EXPECT_TRUE(service::revert_actions({{"a.yaml", version("x\n", "b"), version("x\n", "c")}}).empty());
  EXPECT_TRUE(service::revert_actions({}).empty());
}

// The revert's files are stored in the payload format the request actor reads back: the pinned
// base travels as lastCommitId, a create carries none.
TEST(RevertActions, PayloadRoundTripsThroughTheActorsReader) {
  auto actions = service::revert_actions({
      {"a.yaml", version("a: 1\n", "b1"), version("a: 2\n", std::string(40, 'c'))},
      {"b.yaml", std::nullopt, version("b\n", std::string(40, 'd'))},
      {"c.yaml", version("c\n", "b3"), std::nullopt},
  });
  auto back = effects::commit_actions_of(effects::payload_of(actions));
  EXPECT_EQ(lines(back), lines(actions));
}

TEST(RevertTitle, NamesTheOriginal) {
  EXPECT_EQ(service::revert_title("raise the limit"), "Revert: raise the limit");
}
