// Database endpoints: "host:port" parsing, and a connection that moves past a node that does not
// answer to the next one, with every later connection of the process starting at the node that served.

#include "persistence/connection.hpp"
#include "persistence/errors.hpp"

#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

using namespace changeflow;

TEST(Endpoints, HostPortIsParsedAndAnythingElseIsRefused) {
  auto e = persistence::parse_endpoint("db-2.internal:3307");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->host, "db-2.internal");
  EXPECT_EQ(e->port, 3307);
  auto bare = persistence::parse_endpoint("db-3");
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->port, 3306);
  EXPECT_FALSE(persistence::parse_endpoint(""));
  EXPECT_FALSE(persistence::parse_endpoint(":3306"));
  EXPECT_FALSE(persistence::parse_endpoint("db:"));
  EXPECT_FALSE(persistence::parse_endpoint("db:http"));
  EXPECT_FALSE(persistence::parse_endpoint("db:70000"));
}

TEST(Endpoints, AConnectionSkipsANodeThatDoesNotAnswerAndLaterOnesStartAtTheNodeThatServed) {
  auto s = changeflow::testing::test_server_settings();
  const auto live = persistence::db_endpoint{s.host, s.port};
  const auto dead = persistence::db_endpoint{"127.0.0.1", static_cast<int>(changeflow::testing::free_port())};
  s.socket.clear();
  s.endpoints = {dead, live};
  auto conn = persistence::open_connection(s, false);
  std::unique_ptr<sql::Statement> st(conn->createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT 1"));
  ASSERT_TRUE(rs->next());
  EXPECT_EQ(rs->getInt(1), 1);
  EXPECT_EQ(s.preferred->load(), 1u) << "the node that served is where the next connection starts";

  // Every copy of the settings shares the preference (one per worker thread in a pool).
  auto copy = s;
  EXPECT_EQ(copy.preferred->load(), 1u);

  // No node answers: the last node's error, never a connection.
  auto none = s;
  none.endpoints = {dead, persistence::db_endpoint{"127.0.0.1", static_cast<int>(changeflow::testing::free_port())}};
  none.preferred = std::make_shared<std::atomic<std::size_t>>(0);
  EXPECT_THROW(persistence::open_connection(none, false), sql::SQLException);
}

TEST(Endpoints, ANodeNotReadyForApplicationUseCountsAsALostConnection) {
  // What a Galera node that lost its quorum answers (1047): the session drops the connection and
  // the retry opens a new one, which starts at the next node.
  EXPECT_TRUE(persistence::is_connection_lost_code(1047));
  EXPECT_TRUE(persistence::is_retryable_code(1047));
}
