#include "persistence/session.hpp"

#include "persistence/db_pool.hpp"

namespace changeflow::persistence {

sql::Connection& session::connection() const {
  return ctx_ ? ctx_->connection() : *conn_;
}

void session::connection_lost() const {
  if (ctx_) ctx_->drop_connection();
}

}  // namespace changeflow::persistence
