#include "service/preview_change.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using service::preview_input;

namespace {
std::optional<clients::repository_file> file(std::string content, std::string last) {
  clients::repository_file f;
  f.path = "a.yaml";
  f.content = std::move(content);
  f.last_commit_id = std::move(last);
  return f;
}
}  // namespace

TEST(PreviewFile, ResolvesTheActionAndNamesWhatWouldBeRefused) {
  struct row {
    const char* name;
    preview_input in;
    std::optional<clients::repository_file> current;
    std::string action;
    bool problem;
    std::string diff;
  };
  const row rows[] = {
      {"upsert of a new file creates it",
       {"a.yaml", "x\n", "upsert", {}},
       std::nullopt,
       "create",
       false,
       "--- /dev/null\n+++ b/a.yaml\n@@ -0,0 +1 @@\n+x\n"},
      {"upsert of an existing file updates it",
       {"a.yaml", "y\n", "upsert", {}},
       file("x\n", "c1"),
       "update",
       false,
       "--- a/a.yaml\n+++ b/a.yaml\n@@ -1 +1 @@\n-x\n+y\n"},
      {"create of an existing file",
       {"a.yaml", "y\n", "create", {}},
       file("x\n", "c1"),
       "create",
       true,
       "--- a/a.yaml\n+++ b/a.yaml\n@@ -1 +1 @@\n-x\n+y\n"},
      {"update of a missing file",
       {"a.yaml", "y\n", "update", {}},
       std::nullopt,
       "update",
       true,
       "--- /dev/null\n+++ b/a.yaml\n@@ -0,0 +1 @@\n+y\n"},
      {"delete",
       {"a.yaml", "", "delete", {}},
       file("x\n", "c1"),
       "delete",
       false,
       "--- a/a.yaml\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"},
      {"stale base",
       {"a.yaml", "y\n", "update", std::string("c0")},
       file("x\n", "c1"),
       "update",
       true,
       "--- a/a.yaml\n+++ b/a.yaml\n@@ -1 +1 @@\n-x\n+y\n"},
      {"current base, nothing changes",
       {"a.yaml", "x\n", "update", std::string("c1")},
       file("x\n", "c1"),
       "update",
       false,
       ""},
  };
  for (const auto& r : rows) {
    auto p = service::preview_file(r.in, r.current);
    EXPECT_EQ(p.action, r.action) << r.name;
    EXPECT_EQ(!p.problem.empty(), r.problem) << r.name << ": " << p.problem;
    EXPECT_EQ(p.diff, r.diff) << r.name;
    EXPECT_EQ(p.exists, r.current.has_value()) << r.name;
    EXPECT_EQ(p.last_commit_id, r.current ? r.current->last_commit_id : "") << r.name;
  }
}
