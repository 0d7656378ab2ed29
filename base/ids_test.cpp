#include "base/ids.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>

using namespace changeflow;

TEST(Ids, UuidsAreWellFormedAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    auto id = ids::new_uuid();
    EXPECT_TRUE(ids::is_uuid(id)) << id;
    EXPECT_EQ(id[14], '4');
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

// The ids of changes: version 7, each later than the one before (as text, which is how the database
// orders them), their first 48 bits the time they were made.
TEST(Ids, TimeOrderedUuidsAreWellFormedIncreasingAndCarryTheirTime) {
  const auto before =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::string last;
  std::set<std::string> seen;
  for (int i = 0; i < 20000; ++i) {
    auto id = ids::new_time_ordered_uuid();
    ASSERT_TRUE(ids::is_uuid(id)) << id;
    EXPECT_EQ(id[14], '7') << id;
    EXPECT_NE(std::string("89ab").find(id[19]), std::string::npos) << id;
    EXPECT_LT(last, id) << "made after " << last;
    last = id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 20000u);
  const auto after =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto stamped = std::stoll(last.substr(0, 8) + last.substr(9, 4), nullptr, 16);
  EXPECT_GE(stamped, before);
  // 20,000 ids in one millisecond would carry the stamp past the clock by at most 20000 / 3072 ms.
  EXPECT_LE(stamped, after + 7);
}

TEST(Ids, UuidFromNameIsStableAndWellFormed) {
  auto a = ids::uuid_from_name("submit:key-1");
  EXPECT_TRUE(ids::is_uuid(a)) << a;
  EXPECT_EQ(a[14], '5');
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos) << a;
  EXPECT_EQ(a, ids::uuid_from_name("submit:key-1"));
  EXPECT_NE(a, ids::uuid_from_name("submit:key-2"));
}

TEST(Ids, IsUuidRejectsMalformed) {
  for (const char* s :
       {"", "not-a-uuid", "123e4567-e89b-12d3-a456-42661417400", "123e4567-e89b-12d3-a456-4266141740000",
        "123e4567xe89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400g"}) {
    EXPECT_FALSE(ids::is_uuid(s)) << s;
  }
  EXPECT_TRUE(ids::is_uuid("123E4567-e89b-12d3-a456-426614174000"));
}

TEST(Ids, HmacMatchesKnownVector) {
  // RFC 4231 test case 2.
  EXPECT_EQ(ids::hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(ids::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Ids, ConstantTimeEqual) {
  EXPECT_TRUE(ids::constant_time_equal("secret", "secret"));
  EXPECT_FALSE(ids::constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(ids::constant_time_equal("secret", "secret2"));
}
