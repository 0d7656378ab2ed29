#pragma once
// A private database (schema) on the test MariaDB started by scripts/test, created per test
// fixture and dropped afterwards, so test executables can run in parallel on one server.
// Connection settings come from CHANGEFLOW_TEST_DB_{HOST,PORT,SOCKET,USER,PASSWORD}.

#include "persistence/connection.hpp"

#include <memory>
#include <string>
#include <vector>

namespace changeflow::testing {

/// A query's rows, every value as text ("NULL" for SQL NULL).
using rows = std::vector<std::vector<std::string>>;

/// Settings of the test server without a database selected; fails the test when unset.
persistence::db_settings test_server_settings();

class test_database {
 public:
  /// Creates a fresh, empty database; `migrate` applies all migrations.
  explicit test_database(bool migrate = true);
  ~test_database();
  test_database(const test_database&) = delete;
  test_database& operator=(const test_database&) = delete;

  const persistence::db_settings& settings() const { return settings_; }
  const std::string& name() const { return settings_.database; }
  std::unique_ptr<sql::Connection> connect() const;
  /// Runs one statement and returns the first column of the first row as a string ("" if none).
  std::string scalar(const std::string& sql) const;
  /// Runs one query and returns all its rows.
  rows query(const std::string& sql) const;
  void exec(const std::string& sql) const;

 private:
  persistence::db_settings settings_;
};

/// One connection kept open across many checks: a sampler that polls every few milliseconds, or a
/// series of reads that should not open a connection each.
class test_connection {
 public:
  explicit test_connection(const test_database& db);
  ~test_connection();
  test_connection(const test_connection&) = delete;
  test_connection& operator=(const test_connection&) = delete;

  /// As test_database::scalar and test_database::query, on this connection.
  std::string scalar(const std::string& sql);
  rows query(const std::string& sql);

 private:
  std::unique_ptr<sql::Connection> conn_;
};

}  // namespace changeflow::testing
