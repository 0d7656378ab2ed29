#pragma once
// Database workers: a worker_pool whose per-thread context is a lazily (re)opened connection.
// Jobs run on a worker thread and report back by message; nothing here blocks an actor thread.

#include "base/worker_pool.hpp"
#include "persistence/connection.hpp"
#include "persistence/session.hpp"

#include <memory>
#include <string>

namespace changeflow::persistence {

/// Per-thread connection holder. Jobs pass it to repositories as a `session`; only the session
/// opens, checks and drops the connection, so callers never connect or reconnect themselves.
class db_context {
 public:
  explicit db_context(db_settings s);
  ~db_context();
  db_context(const db_context&) = delete;
  db_context& operator=(const db_context&) = delete;

 private:
  friend class session;
  /// (Re)connects on demand; throws sql::SQLException when the database cannot be reached.
  sql::Connection& connection();
  void drop_connection();

  db_settings settings_;
  std::unique_ptr<sql::Connection> conn_;
};

using db_pool = worker_pool<db_context>;

/// `name` names the pool's threads and its log lines.
std::unique_ptr<db_pool> make_db_pool(const db_settings& s, std::size_t threads, std::size_t queue_capacity,
                                      const std::string& name = "db");

}  // namespace changeflow::persistence
