#pragma once
// Opening database connections. One connection per worker thread, never shared between threads
// (shared Connector/C++ connections return wrong results and hang).

#include <cppconn/connection.h>

#include <memory>
#include <string>

namespace changeflow::persistence {

struct db_settings {
  std::string host = "127.0.0.1";
  int port = 3306;
  std::string socket;  // preferred when set
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
std::unique_ptr<sql::Connection> open_connection(const db_settings& s, bool select_database = true);

}  // namespace changeflow::persistence
