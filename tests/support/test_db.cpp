#include "tests/support/test_db.hpp"

#include "base/ids.hpp"
#include "persistence/migrations.hpp"

#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace changeflow::testing {

namespace {
std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}

std::string scalar_on(sql::Connection& conn, const std::string& sql) {
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery(sql));
  if (!rs->next()) return {};
  if (rs->isNull(1)) return {};
  return rs->getString(1);
}

rows query_on(sql::Connection& conn, const std::string& sql) {
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery(sql));
  int cols = static_cast<int>(rs->getMetaData()->getColumnCount());
  rows out;
  while (rs->next()) {
    std::vector<std::string> row;
    for (int c = 1; c <= cols; ++c) row.push_back(rs->isNull(c) ? std::string("NULL") : std::string(rs->getString(c)));
    out.push_back(std::move(row));
  }
  return out;
}
}  // namespace

persistence::db_settings test_server_settings() {
  static std::once_flag once;
  std::call_once(once, [] { persistence::init_driver(); });
  if (!std::getenv("CHANGEFLOW_TEST_DB_PORT") && !std::getenv("CHANGEFLOW_TEST_DB_SOCKET")) {
    throw std::runtime_error(
        "CHANGEFLOW_TEST_DB_PORT is not set: run the suite through scripts/test, which starts the test database");
  }
  persistence::db_settings s;
  s.host = env_or("CHANGEFLOW_TEST_DB_HOST", "127.0.0.1");
  s.port = std::stoi(env_or("CHANGEFLOW_TEST_DB_PORT", "3306"));
  s.socket = env_or("CHANGEFLOW_TEST_DB_SOCKET", "");
  s.user = env_or("CHANGEFLOW_TEST_DB_USER", "changeflow");
  s.password = env_or("CHANGEFLOW_TEST_DB_PASSWORD", "changeflow");
  s.database.clear();
  return s;
}

test_database::test_database(bool migrate) {
  settings_ = test_server_settings();
  auto id = ids::new_uuid();
  settings_.database = "cft_" + id.substr(0, 8) + id.substr(9, 4);
  auto conn = persistence::open_connection(settings_, false);
  std::unique_ptr<sql::Statement> st(conn->createStatement());
  st->execute("CREATE DATABASE " + settings_.database + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
  if (migrate) {
    conn->setSchema(settings_.database);
    auto r = persistence::migrate(*conn, persistence::all_migrations());
    if (!r.ok) throw std::runtime_error("test database migration failed: " + r.error);
  }
}

test_database::~test_database() {
  try {
    auto conn = persistence::open_connection(settings_, false);
    std::unique_ptr<sql::Statement> st(conn->createStatement());
    st->execute("DROP DATABASE IF EXISTS " + settings_.database);
  } catch (...) {
  }
}

std::unique_ptr<sql::Connection> test_database::connect() const {
  return persistence::open_connection(settings_);
}

std::string test_database::scalar(const std::string& sql) const {
  return scalar_on(*connect(), sql);
}

rows test_database::query(const std::string& sql) const {
  return query_on(*connect(), sql);
}

void test_database::exec(const std::string& sql) const {
  auto conn = connect();
  std::unique_ptr<sql::Statement> st(conn->createStatement());
  st->execute(sql);
}

test_connection::test_connection(const test_database& db) : conn_(db.connect()) {}

test_connection::~test_connection() = default;

std::string test_connection::scalar(const std::string& sql) {
  return scalar_on(*conn_, sql);
}

rows test_connection::query(const std::string& sql) {
  return query_on(*conn_, sql);
}

}  // namespace changeflow::testing
