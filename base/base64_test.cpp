#include "base/base64.hpp"

#include <gtest/gtest.h>

using namespace changeflow;

TEST(Base64, RoundTripsEveryLengthModuloThree) {
  const std::string cases[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar", std::string("\0\xff\x10", 3)};
  const std::string expected[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy", "AP8Q"};
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(base64::encode(cases[i]), expected[i]) << i;
    EXPECT_EQ(base64::decode(expected[i]), cases[i]) << i;
  }
}

TEST(Base64, SkipsLineBreaksAndRefusesGarbage) {
  EXPECT_EQ(base64::decode("Zm9v\nYmFy\n"), "foobar");
  for (const char* bad : {"Zm9", "Zm9v!", "Zg==Zg==", "Z===", "Zg=a"}) EXPECT_FALSE(base64::decode(bad)) << bad;
}
