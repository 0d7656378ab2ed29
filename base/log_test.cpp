#include "base/log.hpp"

#include <gtest/gtest.h>

using namespace changeflow;

TEST(Log, MasksSecretKeysRecursively) {
  nlohmann::json in = {{"operation_id", "op-1"},
                       {"PRIVATE-TOKEN", "glpat-123"},
                       {"nested", {{"password", "x"}, {"ok", 1}}},
                       {"list", nlohmann::json::array({{{"api_secret", "s"}}})}};
  auto out = log::mask_secrets(in);
  EXPECT_EQ(out["operation_id"], "op-1");
  EXPECT_EQ(out["PRIVATE-TOKEN"], "***");
  EXPECT_EQ(out["nested"]["password"], "***");
  EXPECT_EQ(out["nested"]["ok"], 1);
  EXPECT_EQ(out["list"][0]["api_secret"], "***");
}

TEST(Log, SafeDumpReplacesInvalidUtf8) {
  nlohmann::json j = std::string("bad \xff byte");
  EXPECT_NO_THROW({
    auto s = log::safe_dump(j);
    EXPECT_NE(s.find("bad"), std::string::npos);
  });
}
