#include "sim/file_snapshot.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace changeflow::sim {
namespace {

// A bound on the layers below a snapshot's top, far above the about log2(files) + 1 that merging
// layers as a binary counter leaves.
constexpr int max_depth = 64;

file_snapshot commit_one(const file_snapshot& from, const std::string& path, const std::string& sha) {
  file_edit e{from, {}};
  e.put(path, {"content of " + path + " at " + sha, sha});
  return e.commit();
}

TEST(FileSnapshot, ACommitHoldsWhatItWroteNotTheWholeRepository) {
  file_snapshot main;
  for (int i = 0; i < 1000; ++i)
    main = commit_one(main, "config/f" + std::to_string(i) + ".yaml", "c" + std::to_string(i));
  // A branch forked from a 1,000-file main: its commit holds the one file it wrote.
  auto branch = commit_one(main, "config/new.yaml", "b1");
  EXPECT_EQ(branch.top_entries(), 1u);
  EXPECT_LE(branch.layers(), max_depth + 1);
  ASSERT_NE(branch.find("config/f0.yaml"), nullptr);
  EXPECT_EQ(branch.find("config/f0.yaml")->last_commit_id, "c0");
  EXPECT_EQ(branch.find("config/new.yaml")->last_commit_id, "b1");
  EXPECT_EQ(main.find("config/new.yaml"), nullptr) << "the snapshot it forked from is unchanged";
}

TEST(FileSnapshot, EveryOldSnapshotStillReadsItsOwnFilesAcrossMerges) {
  std::vector<file_snapshot> history;
  file_snapshot head;
  for (int i = 0; i < 3 * max_depth; ++i) {
    file_edit e{head, {}};
    e.put("config/same.yaml", {"v" + std::to_string(i), "c" + std::to_string(i)});
    if (i % 3 == 0) e.put("config/tmp" + std::to_string(i) + ".yaml", {"t", "c" + std::to_string(i)});
    if (i % 3 == 1) e.erase("config/tmp" + std::to_string(i - 1) + ".yaml");
    head = e.commit();
    history.push_back(head);
    EXPECT_LE(head.layers(), max_depth + 1) << "a lookup never reads more than max_depth + 1 layers";
  }
  for (int i = 0; i < static_cast<int>(history.size()); ++i) {
    const auto* same = history[static_cast<std::size_t>(i)].find("config/same.yaml");
    ASSERT_NE(same, nullptr) << i;
    EXPECT_EQ(same->content, "v" + std::to_string(i));
    // A file created at i (i % 3 == 0) exists in that commit and is gone from the next one on.
    if (i % 3 == 0) {
      const auto tmp = "config/tmp" + std::to_string(i) + ".yaml";
      EXPECT_NE(history[static_cast<std::size_t>(i)].find(tmp), nullptr) << i;
      const auto next = static_cast<std::size_t>(i + 1);
      if (next < history.size()) {
        EXPECT_EQ(history[next].find(tmp), nullptr) << i;
      }
    }
  }
}

// Layers merge as a binary counter does: a lineage of n one-file commits is read through about
// log2(n) + 1 layers, and every file stays where its commits put it.
TEST(FileSnapshot, ALongLineageIsReadThroughLogarithmicallyFewLayers) {
  file_snapshot head;
  std::vector<file_snapshot> kept;
  constexpr int commits = 5000;
  for (int i = 0; i < commits; ++i) {
    head = commit_one(head, "config/f" + std::to_string(i) + ".yaml", "c" + std::to_string(i));
    EXPECT_LE(head.layers(), 14) << "after " << i + 1 << " commits";
    if (i % 1000 == 999) kept.push_back(head);
  }
  for (int i = 0; i < commits; i += 7) {
    const auto* f = head.find("config/f" + std::to_string(i) + ".yaml");
    ASSERT_NE(f, nullptr) << i;
    EXPECT_EQ(f->last_commit_id, "c" + std::to_string(i));
  }
  // An older snapshot reads what it had, and not what came after it.
  EXPECT_NE(kept.front().find("config/f999.yaml"), nullptr);
  EXPECT_EQ(kept.front().find("config/f1000.yaml"), nullptr);
}

TEST(FileSnapshot, AnEditReadsItsOwnWritesAndDeletesOverItsStart) {
  auto base = commit_one({}, "a", "c1");
  file_edit e{base, {}};
  EXPECT_NE(e.find("a"), nullptr);
  e.erase("a");
  EXPECT_EQ(e.find("a"), nullptr);
  e.put("b", {"x", "c2"});
  ASSERT_NE(e.find("b"), nullptr);
  auto next = e.commit();
  EXPECT_EQ(next.find("a"), nullptr);
  EXPECT_NE(base.find("a"), nullptr);
  EXPECT_EQ(next.find("b")->last_commit_id, "c2");
  EXPECT_EQ(next.with({}).layers(), next.layers()) << "an empty commit adds no layer";
}

}  // namespace
}  // namespace changeflow::sim
