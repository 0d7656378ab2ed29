#include "config/store.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

using namespace changeflow::config;

namespace {
std::optional<std::string> no_env(const std::string&) {
  return std::nullopt;
}

std::string temp_file(const std::string& content) {
  auto path = std::filesystem::temp_directory_path() /
              ("changeflow-config-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".json");
  std::ofstream(path) << content;
  return path.string();
}

void write_file(const std::string& path, const std::string& content) {
  auto tmp = path + ".tmp";
  std::ofstream(tmp) << content;
  std::filesystem::rename(tmp, path);
  // Bump the mtime explicitly so coarse file-system clocks still register a change.
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now() + std::chrono::seconds(1));
}
}  // namespace

TEST(ConfigStore, ReloadSwapsSnapshotAndKeepsOldOnError) {
  auto path = temp_file(R"({"batch": {"enabled": false}})");
  auto initial = load_from_file(path, no_env);
  ASSERT_TRUE(initial.snap);
  store s(initial.snap, path, no_env);
  auto before = s.current();

  write_file(path, R"({"batch": {"enabled": true}})");
  EXPECT_TRUE(s.reload());
  EXPECT_EQ(s.current()->get_bool("batch.enabled"), true);
  EXPECT_EQ(before->get_bool("batch.enabled"), false);  // old snapshot is immutable

  write_file(path, R"({"batch": {"enabled": "maybe"}})");
  EXPECT_FALSE(s.reload());
  EXPECT_EQ(s.current()->get_bool("batch.enabled"), true);
  EXPECT_EQ(s.reload_error_count(), 1u);

  write_file(path, "{ not json");
  EXPECT_FALSE(s.reload());
  EXPECT_EQ(s.reload_error_count(), 2u);
  std::filesystem::remove(path);
}

TEST(ConfigStore, WatcherPicksUpChange) {
  auto path = temp_file(R"({"merge": {"max_attempts": 1}})");
  store s(load_from_file(path, no_env).snap, path, no_env);
  s.start_watching(std::chrono::milliseconds(20));
  write_file(path, R"({"merge": {"max_attempts": 7}})");
  // Wait on the condition, bounded so a broken watcher fails instead of hanging.
  for (int i = 0; i < 500 && s.reload_count() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.current()->get_int("merge.max_attempts"), 7);
  s.stop_watching();
  std::filesystem::remove(path);
}

// The repositories are part of the snapshot: a reload installs the new set, a malformed section is
// refused as a whole and the last good set stays.
TEST(ConfigStore, ReloadInstallsRepositoriesAndKeepsTheLastGoodSetOnError) {
  auto path = temp_file(R"({"repositories": {"team/a": {"branches": ["main"]}}})");
  auto initial = load_from_file(path, no_env);
  ASSERT_TRUE(initial.snap);
  store s(initial.snap, path, no_env);
  ASSERT_EQ(s.current()->repositories().all.size(), 1u);

  write_file(path, R"({"repositories": {"team/a": {"branches": ["main"]}, "team/b": {"branches": ["release"]}}})");
  ASSERT_TRUE(s.reload());
  ASSERT_EQ(s.current()->repositories().all.size(), 2u);
  ASSERT_NE(s.current()->repositories().find("team/b"), nullptr);
  EXPECT_TRUE(s.current()->repositories().find("team/b")->has_branch("release"));

  write_file(path, R"({"repositories": {"team/c": {"branches": []}}})");
  EXPECT_FALSE(s.reload());
  EXPECT_EQ(s.current()->repositories().all.size(), 2u) << "a malformed section keeps the last good set";
  EXPECT_EQ(s.reload_error_count(), 1u);
}
