#include "persistence/connection.hpp"

#include <cppconn/statement.h>
#include <mysql_driver.h>

namespace changeflow::persistence {

void init_driver() {
  sql::mysql::get_mysql_driver_instance();
}

std::unique_ptr<sql::Connection> open_connection(const db_settings& s, bool select_database) {
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
