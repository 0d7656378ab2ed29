#include "persistence/connection.hpp"

#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <mysql_driver.h>

#include <atomic>
#include <charconv>
#include <optional>

namespace changeflow::persistence {

std::optional<db_endpoint> parse_endpoint(const std::string& text) {
  auto colon = text.rfind(':');
  db_endpoint e;
  e.host = text.substr(0, colon);
  if (e.host.empty()) return std::nullopt;
  if (colon == std::string::npos) return e;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  int port = 0;
  auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || port <= 0 || port > 65535) return std::nullopt;
  e.port = port;
  return e;
}

namespace {

/// One row of SHOW ... LIKE: its value, or "" when there is no such row.
std::string shown(sql::Connection& conn, const std::string& show) {
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery(show));
  return rs->next() ? std::string(rs->getString(2)) : std::string();
}

enum class node_state { single_server, ready, not_ready };

/// Galera's "ready for application use". A server that does not replicate (wsrep_on OFF, or no such
/// variable) is a single server, always ready; its wsrep_ready says OFF without meaning anything.
node_state node_ready(sql::Connection& conn) {
  if (shown(conn, "SHOW VARIABLES LIKE 'wsrep_on'") != "ON") return node_state::single_server;
  return shown(conn, "SHOW STATUS LIKE 'wsrep_ready'") == "ON" ? node_state::ready : node_state::not_ready;
}

std::atomic<std::uint64_t> skipped_unreachable{0};
std::atomic<std::uint64_t> skipped_without_quorum{0};

}  // namespace

skipped_nodes nodes_skipped() {
  return {skipped_unreachable.load(std::memory_order_relaxed), skipped_without_quorum.load(std::memory_order_relaxed)};
}

void init_driver() {
  sql::mysql::get_mysql_driver_instance();
}

std::unique_ptr<sql::Connection> open_connection(const db_settings& s, bool select_database) {
  if (!s.endpoints.empty()) {
    const auto n = s.endpoints.size();
    const auto start = s.preferred->load() % n;
    for (std::size_t i = 0; i < n; ++i) {
      auto at = (start + i) % n;
      auto one = s;
      one.endpoints.clear();
      one.socket.clear();
      one.host = s.endpoints[at].host;
      one.port = s.endpoints[at].port;
      try {
        auto conn = open_connection(one, select_database);
        const auto state = node_ready(*conn);
        if (state == node_state::not_ready) {
          skipped_without_quorum.fetch_add(1, std::memory_order_relaxed);
          if (i + 1 == n) throw sql::SQLException("WSREP has not yet prepared node for application use", "08S01", 1047);
          continue;
        }
        // Causal reads on a cluster: a read waits until this node has applied every write set the
        // cluster committed before it. Two writers that each commit and then read what the other
        // wrote (a deploy callback recorded on one node reading the members' phase, a settlement
        // committing MERGED on another and reading the recorded callbacks) would otherwise both
        // read a lagging node and both miss, leaving the change for reconciliation.
        // (Only on a node that replicates: an endpoint list may name plain servers too.)
        if (state == node_state::ready) {
          std::unique_ptr<sql::Statement> causal(conn->createStatement());
          causal->execute("SET SESSION wsrep_sync_wait = 1");
        }
        s.preferred->store(at);
        return conn;
      } catch (const sql::SQLException& e) {
        if (e.getErrorCode() != 1047) skipped_unreachable.fetch_add(1, std::memory_order_relaxed);
        if (i + 1 == n) throw;
      }
    }
  }
  sql::ConnectOptionsMap opts;
  if (!s.socket.empty()) {
    opts["hostName"] = sql::SQLString("unix://" + s.socket);
  } else {
    opts["hostName"] = sql::SQLString("tcp://" + s.host + ":" + std::to_string(s.port));
  }
  opts["userName"] = sql::SQLString(s.user);
  opts["password"] = sql::SQLString(s.password);
  // Option types are strict in Connector/C++ 1.1: bools must be bool, timeouts int.
  opts["CLIENT_FOUND_ROWS"] = true;
  // Several statements in one round trip: the group commit of transitions (transition_group) sends
  // its transaction as one text. Every value in changeflow's SQL text is escaped by the connection
  // (sql_text / detail::statement), so this opens no injection path.
  opts["CLIENT_MULTI_STATEMENTS"] = true;
  opts["OPT_CONNECT_TIMEOUT"] = s.connect_timeout_ms / 1000 > 0 ? s.connect_timeout_ms / 1000 : 1;
  opts["OPT_READ_TIMEOUT"] = s.read_timeout_ms / 1000 > 0 ? s.read_timeout_ms / 1000 : 1;
  opts["OPT_WRITE_TIMEOUT"] = s.read_timeout_ms / 1000 > 0 ? s.read_timeout_ms / 1000 : 1;
  opts["OPT_RECONNECT"] = false;  // a reconnect loses session state; a session opens a new connection
  opts["OPT_CHARSET_NAME"] = sql::SQLString("utf8mb4");
  auto* driver = sql::mysql::get_mysql_driver_instance();
  std::unique_ptr<sql::Connection> conn(driver->connect(opts));
  std::unique_ptr<sql::Statement> st(conn->createStatement());
  st->execute("SET time_zone = '+00:00'");
  st->execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  if (select_database) conn->setSchema(s.database);
  return conn;
}

}  // namespace changeflow::persistence
