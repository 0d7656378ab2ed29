#include "persistence/db_pool.hpp"

#include "persistence/errors.hpp"

#include <cppconn/exception.h>

namespace changeflow::persistence {

sql::Connection& db_context::get() {
  if (take_connection_lost_mark() || (conn_ && conn_->isClosed())) conn_.reset();
  if (!conn_) conn_ = open_connection(settings_);
  return *conn_;
}

std::unique_ptr<db_pool> make_db_pool(const db_settings& s, std::size_t threads, std::size_t queue_capacity) {
  return std::make_unique<db_pool>("db", threads, queue_capacity, [s] { return std::make_unique<db_context>(s); });
}

}  // namespace changeflow::persistence
