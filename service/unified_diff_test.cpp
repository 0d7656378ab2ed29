#include "service/unified_diff.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

using changeflow::service::diff_sides;
using changeflow::service::unified_diff;

namespace {
std::string numbered(int from, int to) {
  std::string out;
  for (int i = from; i <= to; ++i) out += "l" + std::to_string(i) + "\n";
  return out;
}
}  // namespace

TEST(UnifiedDiff, Table) {
  struct row {
    const char* name;
    std::optional<std::string> before;
    std::optional<std::string> after;
    std::string expected;
  };
  const std::string ten = numbered(1, 10);
  const row rows[] = {
      {"equal", "a\n", "a\n", ""},
      {"both absent", std::nullopt, std::nullopt, ""},
      {"new file", std::nullopt, "a\nb\n", "--- /dev/null\n+++ b/f.yaml\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
      {"deleted file", "a\n", std::nullopt, "--- a/f.yaml\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"},
      {"new empty file", std::nullopt, "", "--- /dev/null\n+++ b/f.yaml\n"},
      {"one line changed", "a\nb\nc\n", "a\nB\nc\n", "--- a/f.yaml\n+++ b/f.yaml\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
      {"line added in the middle", "a\nc\n", "a\nb\nc\n", "--- a/f.yaml\n+++ b/f.yaml\n@@ -1,2 +1,3 @@\n a\n+b\n c\n"},
      {"context is three lines", ten, numbered(1, 4) + "X\n" + numbered(6, 10),
       "--- a/f.yaml\n+++ b/f.yaml\n@@ -2,7 +2,7 @@\n l2\n l3\n l4\n-l5\n+X\n l6\n l7\n l8\n"},
      {"far apart changes make two hunks", numbered(1, 20), "X\n" + numbered(2, 19) + "Y\n",
       "--- a/f.yaml\n+++ b/f.yaml\n@@ -1,4 +1,4 @@\n-l1\n+X\n l2\n l3\n l4\n@@ -17,4 +17,4 @@\n l17\n l18\n "
       "l19\n-l20\n+Y\n"},
      {"close changes share a hunk", ten, "X\n" + numbered(2, 7) + "Y\n" + numbered(9, 10),
       "--- a/f.yaml\n+++ b/f.yaml\n@@ -1,10 +1,10 @@\n-l1\n+X\n l2\n l3\n l4\n l5\n l6\n l7\n-l8\n+Y\n l9\n l10\n"},
      {"newline added at the end", "a", "a\n",
       "--- a/f.yaml\n+++ b/f.yaml\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n"},
      {"no newline on both sides", "a\nb", "a\nc",
       "--- a/f.yaml\n+++ b/f.yaml\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of "
       "file\n"},
      {"replaced block: removals first", "a\nb\nc\n", "x\ny\n",
       "--- a/f.yaml\n+++ b/f.yaml\n@@ -1,3 +1,2 @@\n-a\n-b\n-c\n+x\n+y\n"},
  };
  for (const auto& r : rows) {
    diff_sides sides;
    if (r.before) sides.old_content = *r.before;
    if (r.after) sides.new_content = *r.after;
    EXPECT_EQ(unified_diff("f.yaml", sides), r.expected) << r.name;
  }
}

// Beyond the alignment budget the middle is removed and re-added: still a diff that turns the old
// side into the new one, and the common head and tail stay context.
TEST(UnifiedDiff, OverTheBudgetTheMiddleIsReplacedWhole) {
  diff_sides sides;
  std::string before = "h\na\nb\nt\n", after = "h\nb\na\nt\n";
  sides.old_content = before;
  sides.new_content = after;
  EXPECT_EQ(unified_diff("f", sides, 3), "--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n h\n-a\n-b\n+b\n+a\n t\n");
  EXPECT_EQ(unified_diff("f", sides), "--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n h\n-a\n b\n+a\n t\n");
}
