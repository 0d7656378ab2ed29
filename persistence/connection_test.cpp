// Database endpoints: "host:port" parsing, and a connection that moves past a node that does not
// answer to the next one, with every later connection of the process starting at the node that served.
// A table instance the server cached with a trigger it could not parse is dropped by the write that
// meets it, so the retry succeeds.

#include "persistence/connection.hpp"
#include "persistence/db_pool.hpp"
#include "persistence/errors.hpp"
#include "persistence/sql_util.hpp"

#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

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

TEST(Endpoints, EveryLostConnectionIsRetriedOnANewOne) {
  // A connection-level error drops the connection; the call is worth running again on a new one.
  int lost = 0;
  for (int code = 1000; code < 5000; ++code) {
    if (!persistence::is_connection_lost_code(code)) continue;
    ++lost;
    EXPECT_TRUE(persistence::is_retryable_code(code)) << code;
  }
  EXPECT_GE(lost, 9);
}

TEST(Endpoints, AConnectionThatCouldNotBeOpenedSentNothingAndALostOneMayHaveSentIt) {
  // What a lost write's caller needs to know: whether its statement may have reached the server.
  auto s = changeflow::testing::test_server_settings();
  s.socket.clear();
  s.endpoints = {persistence::db_endpoint{"127.0.0.1", static_cast<int>(changeflow::testing::free_port())}};
  s.preferred = std::make_shared<std::atomic<std::size_t>>(0);
  persistence::db_context closed(s);
  bool ran = false;
  auto never = persistence::detail::guarded<int>(closed, [&](sql::Connection&) {
    ran = true;
    return persistence::db_result<int>::success(1);
  });
  EXPECT_FALSE(ran);
  EXPECT_EQ(never.outcome, persistence::db_outcome::retryable);
  EXPECT_TRUE(never.error.unsent) << never.error.code << " " << never.error.message;

  changeflow::testing::test_database db(false);
  persistence::db_context open(db.settings());
  auto lost = persistence::detail::guarded<int>(open, [](sql::Connection& conn) {
    std::unique_ptr<sql::Statement> st(conn.createStatement());
    std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT CONNECTION_ID()"));
    rs->next();
    try {
      st->execute("KILL " + std::to_string(rs->getInt64(1)));
    } catch (const sql::SQLException&) {
      // The server may answer the KILL of one's own connection with the kill itself.
    }
    std::unique_ptr<sql::ResultSet> after(st->executeQuery("SELECT 1"));
    return persistence::db_result<int>::success(1);
  });
  ASSERT_FALSE(lost.ok());
  EXPECT_TRUE(persistence::is_connection_lost_code(lost.error.code)) << lost.error.code << " " << lost.error.message;
  EXPECT_FALSE(lost.error.unsent) << lost.error.message;
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

persistence::db_result<bool> insert_row(persistence::session s, int id) {
  return persistence::detail::guarded<bool>(s, [&](sql::Connection& conn) {
    std::unique_ptr<sql::Statement> st(conn.createStatement());
    st->execute("INSERT INTO t VALUES (" + std::to_string(id) + ")");
    return persistence::db_result<bool>::success(true);
  });
}

}  // namespace

TEST(UnparsedTrigger, AWriteThatMeetsACachedTableWithAnUnparsedTriggerFlushesItAndItsRetrySucceeds) {
  // What a Galera node that had just started did now and then: a table instance opened with a
  // trigger whose parse failed stayed in the table cache, and every write given that instance failed
  // with 1710 although the trigger is valid. Made here by opening the table while its trigger file
  // holds a broken body and putting the valid body back while the instance stays cached.
  changeflow::testing::test_database db(false);
  db.exec("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB");
  db.exec("CREATE TABLE seen (id INT PRIMARY KEY) ENGINE=InnoDB");
  db.exec("CREATE TRIGGER t_seen AFTER INSERT ON t FOR EACH ROW INSERT INTO seen VALUES (NEW.id)");
  const auto trg = db.scalar("SELECT @@datadir") + "/" + db.name() + "/t.TRG";
  const auto valid = read_file(trg);
  const std::string body = "VALUES (NEW.id)";
  const auto at = valid.find(body);
  ASSERT_NE(at, std::string::npos) << "trigger file " << trg << " does not hold the body: " << valid;
  auto broken = valid;
  broken.replace(at, body.size(), "VALUES (NEW.id");

  auto conn = db.connect();
  write_file(trg, broken);
  db.exec("FLUSH LOCAL TABLES");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM t"), "0");  // opens the table: its trigger fails to parse
  write_file(trg, valid);

  const auto evicted_before = persistence::unparsed_triggers_evicted();
  auto first = insert_row(*conn, 1);
  ASSERT_FALSE(first.ok()) << "the cached instance did not carry the broken trigger: the test made nothing";
  EXPECT_EQ(first.error.code, 1710) << first.error.message;
  EXPECT_EQ(first.outcome, persistence::db_outcome::retryable);
  EXPECT_EQ(persistence::unparsed_triggers_evicted(), evicted_before + 1);

  auto retry = insert_row(*conn, 1);
  ASSERT_TRUE(retry.ok()) << retry.error.message;
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM seen"), "1") << "the trigger ran on the retry";
}

// A script is one compound statement: every SELECT's rows reach the reader in order, whatever the
// statement looks like (lower case, a literal that reads like INTO), and a reader that throws leaves
// the connection ready for the next statement (its remaining results are read and fetched).
TEST(Scripts, EveryResultSetReachesTheReaderAndAThrowingReaderLeavesTheConnectionReady) {
  changeflow::testing::test_database db(false);
  auto conn = db.connect();
  std::vector<std::string> seen;
  auto collect = [&](sql::ResultSet& rs) {
    while (rs.next()) seen.push_back(rs.getString(1));
  };
  persistence::detail::run_script(*conn,
                                  {"SET @a = 1", "SELECT 'one'", "select 'two'", "SELECT 'three INTO @x'", "DO 1",
                                   "  (SELECT 'four')", "SET @a = 2"},
                                  collect);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two", "three INTO @x", "four"}));

  int calls = 0;
  EXPECT_THROW(persistence::detail::run_script(*conn, {"SELECT 1", "SELECT 2", "SELECT 3", "SELECT 4"},
                                               [&](sql::ResultSet&) {
                                                 ++calls;
                                                 throw std::runtime_error("reader failed");
                                               }),
               std::runtime_error);
  EXPECT_EQ(calls, 1);
  std::unique_ptr<sql::Statement> st(conn->createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT 5"));
  ASSERT_TRUE(rs->next());
  EXPECT_EQ(rs->getInt(1), 5);
}
