// A key is named once, in config/keys.cpp, bound to its settings field; code outside config/ reads
// the typed settings (`snap.poll().short_interval_ms`). A string-key read outside config/ would name
// the key a second time (and a mistyped key would silently fall back), so the source tree is scanned
// for the raw getters and for reads of a literal key.
#include "config/snapshot.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace changeflow;

namespace {
// Any call of a raw getter (whatever the key expression), and any call whose first argument is a
// literal dotted key with one of the names string-key readers had (integer, flag, text, *_or, ...).
const std::regex& raw_getter() {
  static const std::regex re(R"re((\.|->)\s*(get_int|get_number|get_bool|get_string|get_list|get_json)\s*\()re");
  return re;
}
const std::regex& literal_key_read() {
  static const std::regex re(
      R"re(\b(integer|flag|text|int_or|bool_or|string_or|value_or_default|hold_for_test_hook)\(\s*(?:\*?\w+\s*,\s*)?"([a-z_]+\.[a-z0-9_.]+)")re");
  return re;
}

std::vector<std::string> string_key_reads(const std::string& source) {
  std::vector<std::string> found;
  for (const auto* re : {&raw_getter(), &literal_key_read()}) {
    for (std::sregex_iterator it(source.begin(), source.end(), *re), end; it != end; ++it) {
      found.push_back(it->str());
    }
  }
  return found;
}
}  // namespace

TEST(ConfigKeys, TheScanRecognisesStringKeyReads) {
  EXPECT_EQ(string_key_reads(R"(auto v = snap.get_int("poll.short_interval_ms");)").size(), 1u);
  EXPECT_EQ(string_key_reads(R"(auto v = svc.config->current()->get_list(key);)").size(), 1u);
  EXPECT_EQ(string_key_reads(R"(auto v = snap->integer("batch.max_attempts");)").size(), 1u);
  EXPECT_EQ(string_key_reads(R"(hold_for_test_hook(*snap, "faults.hold_after_deploy_record_ms");)").size(), 1u);
  EXPECT_TRUE(string_key_reads(R"(auto v = snap.poll().short_interval_ms; text("phase");)").empty());
}

TEST(ConfigKeys, NoStringKeyReadOutsideConfig) {
  const char* root = std::getenv("CHANGEFLOW_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "CHANGEFLOW_SOURCE_DIR is set by CTest";
  int scanned = 0;
  for (const char* dir : {"actors", "app", "base", "bench", "clients", "http", "messages", "metrics", "persistence",
                          "service", "sim", "tests", "workflow"}) {
    const auto path = std::filesystem::path(root) / dir;
    if (!std::filesystem::exists(path)) continue;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      // Tests may look at the raw values on purpose (a cleared key, a wrong type).
      if (entry.path().stem().string().ends_with("_test")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      ++scanned;
      for (const auto& read : string_key_reads(text.str())) {
        ADD_FAILURE() << entry.path().string() << " reads configuration by key string (" << read
                      << "): read its field of the typed settings instead (config/settings.hpp)";
      }
    }
  }
  EXPECT_GT(scanned, 100) << "the scan found the sources";
}

TEST(ConfigKeys, EveryKeyButTheRepositoriesSectionFillsASettingsField) {
  for (const auto& spec : config::all_keys()) {
    if (spec.name == "repositories") continue;
    EXPECT_NE(spec.bind, nullptr) << spec.name << " is declared but fills no settings field";
  }
}
