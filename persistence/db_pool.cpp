#include "persistence/db_pool.hpp"

#include <cppconn/connection.h>

namespace changeflow::persistence {

db_context::db_context(db_settings s) : settings_(std::move(s)) {}

db_context::~db_context() = default;

sql::Connection& db_context::connection() {
  if (conn_ && conn_->isClosed()) conn_.reset();
  if (!conn_) conn_ = open_connection(settings_);
  return *conn_;
}

void db_context::drop_connection() {
  conn_.reset();
}

std::unique_ptr<db_pool> make_db_pool(const db_settings& s, std::size_t threads, std::size_t queue_capacity,
                                      const std::string& name) {
  return std::make_unique<db_pool>(name, threads, queue_capacity, [s] { return std::make_unique<db_context>(s); });
}

}  // namespace changeflow::persistence
