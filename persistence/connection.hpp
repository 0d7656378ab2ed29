#pragma once
// Opening database connections. One connection per worker thread, never shared between threads
// (shared Connector/C++ connections return wrong results and hang).

#include <cppconn/connection.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

struct db_endpoint {
  std::string host;
  int port = 3306;
};

/// "host:port" (port defaults to 3306); nullopt when the text is not one.
std::optional<db_endpoint> parse_endpoint(const std::string& text);

struct db_settings {
  std::string host = "127.0.0.1";
  int port = 3306;
  std::string socket;  // preferred when set and there are no endpoints
  // The nodes of a cluster, in order of preference (empty: host/port or socket). Every connection of
  // the process starts at the node the last successful connection used (`preferred`, shared), so
  // all workers move together once a node fails.
  std::vector<db_endpoint> endpoints;
  std::shared_ptr<std::atomic<std::size_t>> preferred = std::make_shared<std::atomic<std::size_t>>(0);
  std::string user = "changeflow";
  std::string password;
  std::string database = "changeflow";
  int connect_timeout_ms = 2000;
  int read_timeout_ms = 10000;
};

/// Must be called once in main before any thread opens a connection.
void init_driver();

/// Opens a connection with CLIENT_FOUND_ROWS (affected rows = matched rows, so a guarded UPDATE that
/// matches its row reports 1 even when no column value changed), utf8mb4, UTC session time zone and
/// READ COMMITTED (no gap locks: admission never waits on a claim's range scan). Throws sql::SQLException.
/// With endpoints: the first node, from the preferred one on, that accepts the connection and
/// reports itself ready for application use (`wsrep_ready` ON; a server without Galera has no such
/// status and is ready); throws the last node's error when none is.
std::unique_ptr<sql::Connection> open_connection(const db_settings& s, bool select_database = true);

/// Nodes of `db.endpoints` this process passed over for the next one since it started: the node did
/// not accept the connection, or accepted it without quorum (`wsrep_ready` OFF, e.g. cut off by a
/// network partition).
struct skipped_nodes {
  std::uint64_t unreachable = 0;
  std::uint64_t without_quorum = 0;
};
skipped_nodes nodes_skipped();

/// Texts of several statements this process sent in one round trip each, and the statements they
/// carried. The server counts every statement of a plain text (Questions) but a compound statement
/// (`BEGIN NOT ATOMIC ... END`: the group commit of transitions, the one-text units) once, so this
/// process's round trips are Questions - (statements - texts), and the statements it had executed
/// are Questions + (compound_statements - compound_texts).
struct script_counts {
  std::uint64_t texts = 0;
  std::uint64_t statements = 0;
  std::uint64_t compound_texts = 0;
  std::uint64_t compound_statements = 0;
};
script_counts scripts_sent();

}  // namespace changeflow::persistence
