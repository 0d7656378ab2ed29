#pragma once
// Database workers: a worker_pool whose per-thread context is a lazily (re)opened connection.
// Jobs run on a worker thread and report back by message; nothing here blocks an actor thread.

#include "base/worker_pool.hpp"
#include "persistence/connection.hpp"

#include <cppconn/connection.h>

#include <functional>
#include <memory>
#include <string>

namespace changeflow::persistence {

/// Per-thread connection holder. `get()` (re)connects on demand; `reset()` drops a broken connection.
class db_context {
 public:
  explicit db_context(db_settings s) : settings_(std::move(s)) {}
  /// Throws sql::SQLException when the database cannot be reached.
  sql::Connection& get();
  void reset() { conn_.reset(); }
  bool connected() const { return conn_ != nullptr; }

 private:
  db_settings settings_;
  std::unique_ptr<sql::Connection> conn_;
};

using db_pool = worker_pool<db_context>;

std::unique_ptr<db_pool> make_db_pool(const db_settings& s, std::size_t threads, std::size_t queue_capacity);

}  // namespace changeflow::persistence
