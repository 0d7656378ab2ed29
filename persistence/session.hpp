#pragma once
// What every repository call runs on. Code outside persistence/ passes sessions and never holds a
// driver connection, so connecting, reconnecting and driver exceptions stay inside this folder.
//
// A session is a pointer wrapper, passed by value, to one of:
//   - a db_context (a database worker's connection holder): the connection opens on first use,
//     inside the repository call, so a database that cannot be reached is a `retryable` result like
//     any other failure; a connection-level error (lost, gone away, killed, server shutdown) drops
//     the connection, and the next call on the context opens a new one;
//   - a connection its caller owns (tests, through the test database helper): used as it is, never
//     reopened.
// Either way it must stay on the thread that owns the connection (see connection.hpp).

namespace sql {
class Connection;
}

namespace changeflow::persistence {

class db_context;

class session {
 public:
  // Implicit on purpose: a worker's job hands its context (`load_operation(db, id)`), a test its
  // connection (`load_operation(*conn, id)`), with no wrapping at every call.
  session(db_context& ctx) : ctx_(&ctx) {}          // NOLINT: implicit on purpose
  session(sql::Connection& conn) : conn_(&conn) {}  // NOLINT

  /// For persistence/ only: the connection, opened now if the context has none (or a closed one).
  /// Throws sql::SQLException when it cannot be opened.
  sql::Connection& connection() const;
  /// For persistence/ only: the connection failed at the connection level; a context drops it so
  /// the next use opens a new one (a caller-owned connection is left alone).
  void connection_lost() const;

 private:
  db_context* ctx_ = nullptr;
  sql::Connection* conn_ = nullptr;
};

}  // namespace changeflow::persistence
