#include "base/ids.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

TEST(Ids, HmacTakesEachCallsOwnKey) {
  // RFC 4231 test cases 1 and 2 in turn on one thread, whose context is reused, then an empty key.
  const std::string key1(20, '\x0b');
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ids::hmac_sha256_hex(key1, "Hi There"),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    EXPECT_EQ(ids::hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  }
  EXPECT_EQ(ids::hmac_sha256_hex("", ""), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  EXPECT_EQ(ids::hmac_sha256_hex(key1, "Hi There"), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Ids, HmacIsRightOnManyThreadsAtOnce) {
  const std::string key1(20, '\x0b');
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        if (ids::hmac_sha256_hex(key1, "Hi There") !=
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
          ++wrong[t];
        if (ids::hmac_sha256_hex("Jefe", "what do ya want for nothing?") !=
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
          ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST(Ids, AChildProcessDoesNotRepeatItsParentsIds) {
  // Ids come from a per-thread reserve of random bytes; after fork() the child must not hand out the
  // bytes the parent hands out next.
  (void)ids::new_uuid();  // the reserve now holds bytes for the next ids
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string id = ids::new_uuid() + ids::new_error_id();
    const auto written = ::write(fds[1], id.data(), id.size());
    ::_exit(written == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  const std::string parent = ids::new_uuid() + ids::new_error_id();
  std::string from_child(parent.size(), '\0');
  std::size_t got = 0;
  while (got < from_child.size()) {
    const auto n = ::read(fds[0], from_child.data() + got, from_child.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(got, parent.size());
  EXPECT_NE(from_child.substr(0, 36), parent.substr(0, 36));
  EXPECT_NE(from_child.substr(36), parent.substr(36));
}

TEST(Ids, ConstantTimeEqual) {
  EXPECT_TRUE(ids::constant_time_equal("secret", "secret"));
  EXPECT_FALSE(ids::constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(ids::constant_time_equal("secret", "secret2"));
}
