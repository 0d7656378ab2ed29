#include "base/fifo_map.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

using changeflow::fifo_map;

namespace {

std::vector<std::string> keys_present(const fifo_map<int>& m, const std::vector<std::string>& asked) {
  std::vector<std::string> out;
  for (const auto& k : asked) {
    if (m.find(k)) out.push_back(k);
  }
  return out;
}

}  // namespace

TEST(FifoMap, PastTheBoundOnlyTheOldestEntryGoes) {
  fifo_map<int> m(3);
  std::vector<std::pair<std::string, int>> dropped;
  auto note = [&](const std::string& k, const int& v) { dropped.emplace_back(k, v); };
  m.put("a", 1, note);
  m.put("b", 2, note);
  m.put("c", 3, note);
  EXPECT_TRUE(dropped.empty());
  m.put("d", 4, note);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(keys_present(m, {"a", "b", "c", "d"}), (std::vector<std::string>{"b", "c", "d"}));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], (std::pair<std::string, int>{"a", 1}));
}

TEST(FifoMap, APutOfAPresentKeyMakesItTheNewest) {
  fifo_map<int> m(3);
  m.put("a", 1);
  m.put("b", 2);
  m.put("c", 3);
  m.put("a", 10);  // a is now newer than b and c
  m.put("d", 4);
  EXPECT_EQ(keys_present(m, {"a", "b", "c", "d"}), (std::vector<std::string>{"a", "c", "d"}));
  ASSERT_NE(m.find("a"), nullptr);
  EXPECT_EQ(*m.find("a"), 10);
}

TEST(FifoMap, DropOldestWhileStopsAtTheFirstEntryThatIsNotOld) {
  fifo_map<int> m(10);
  for (int i = 1; i <= 5; ++i) m.put("k" + std::to_string(i), i);
  m.erase("k2");                                         // an erased entry leaves the order
  m.drop_oldest_while([](int v) { return v < 4; }, 10);  // k1, k3 old; k4 is not
  EXPECT_EQ(keys_present(m, {"k1", "k2", "k3", "k4", "k5"}), (std::vector<std::string>{"k4", "k5"}));
  m.put("k1", 1);                                        // newest now, though its value is small
  m.drop_oldest_while([](int v) { return v < 5; }, 10);  // k4 goes; k5 stops the walk before k1
  EXPECT_EQ(keys_present(m, {"k1", "k4", "k5"}), (std::vector<std::string>{"k1", "k5"}));
}

// A call drops at most its limit, however many entries are old: expiry never frees the map at once.
TEST(FifoMap, DropOldestWhileDropsNoMoreThanItsLimit) {
  fifo_map<int> m(10);
  for (int i = 1; i <= 5; ++i) m.put("k" + std::to_string(i), i);
  m.drop_oldest_while([](int) { return true; }, 2);
  EXPECT_EQ(keys_present(m, {"k1", "k2", "k3", "k4", "k5"}), (std::vector<std::string>{"k3", "k4", "k5"}));
}

TEST(FifoMap, ABoundOfZeroHoldsOneEntry) {
  fifo_map<int> m(0);
  m.put("a", 1);
  m.put("b", 2);
  EXPECT_EQ(keys_present(m, {"a", "b"}), (std::vector<std::string>{"b"}));
  m.erase("b");  // the newest erased: the order is empty, and the next put starts it again
  m.put("c", 3);
  m.put("d", 4);
  EXPECT_EQ(keys_present(m, {"a", "b", "c", "d"}), (std::vector<std::string>{"d"}));
}

// Puts of the same few keys over and over move them to the newest end; at the bound, no entry goes.
TEST(FifoMap, RepeatedPutsOfTheSameKeysDropNoEntry) {
  fifo_map<int> m(2);
  int dropped = 0;
  for (int i = 0; i < 1000; ++i) m.put(i % 2 == 0 ? "x" : "y", i, [&](const std::string&, const int&) { ++dropped; });
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(dropped, 0) << "a key put again is not an entry to drop";
  ASSERT_NE(m.find("x"), nullptr);
  ASSERT_NE(m.find("y"), nullptr);
  EXPECT_EQ(*m.find("x"), 998);
  EXPECT_EQ(*m.find("y"), 999);
}
