// Every configuration key the code reads is declared in config/keys.cpp: a mistyped key would read
// nothing and silently fall back. The source tree is scanned for the getters' literal keys.
#include "config/snapshot.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

using namespace changeflow;

TEST(ConfigKeys, EveryKeyTheCodeReadsIsDeclared) {
  const char* root = std::getenv("CHANGEFLOW_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "CHANGEFLOW_SOURCE_DIR is set by CTest";
  const std::regex getter(
      R"re((integer|flag|text|int_or|bool_or|string_or|get_int|get_bool|get_string|get_list|get_number|get_json|hold_for_test_hook)\(\s*(?:\*\w+\s*,\s*)?"([a-z_]+\.[a-z0-9_.]+)")re");
  std::set<std::string> seen;
  for (const char* dir : {"actors", "app", "clients", "config", "http", "persistence", "service", "workflow"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::filesystem::path(root) / dir)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      // Tests read undeclared keys on purpose (to see them refused).
      if (entry.path().stem().string().ends_with("_test")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator it(s.begin(), s.end(), getter), end; it != end; ++it) {
        const std::string key = (*it)[2];
        seen.insert(key);
        EXPECT_NE(config::find_key(key), nullptr)
            << entry.path().string() << " reads \"" << key << "\", which config/keys.cpp does not declare";
      }
    }
  }
  // The scan itself works: it finds keys that are known to be read.
  EXPECT_TRUE(seen.count("poll.short_interval_ms"));
  EXPECT_TRUE(seen.count("batch.max_attempts"));
  EXPECT_GT(seen.size(), 50u);
}
