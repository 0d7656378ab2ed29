#include "persistence/errors.hpp"

#include <cppconn/exception.h>

namespace changeflow::persistence {

std::string_view to_string(db_outcome o) {
  switch (o) {
    case db_outcome::ok: return "ok";
    case db_outcome::not_found: return "not_found";
    case db_outcome::preempted: return "preempted";
    case db_outcome::duplicate: return "duplicate";
    case db_outcome::illegal_transition: return "illegal_transition";
    case db_outcome::retryable: return "retryable";
    case db_outcome::fatal: return "fatal";
  }
  return "fatal";
}

bool is_retryable_code(int code) {
  switch (code) {
    case 1205:  // lock wait timeout
    case 1213:  // deadlock
    case 2002:  // cannot connect (socket)
    case 2003:  // cannot connect (tcp)
    case 2006:  // server has gone away
    case 2013:  // lost connection during query
    case 1927:  // connection killed (MariaDB)
    case 1053:  // server shutdown in progress
      return true;
    default: return false;
  }
}

namespace {
// Set by classify() on the thread that saw a connection-level error; read and cleared by
// db_context::get() on the same thread (one connection per worker thread).
thread_local bool connection_lost_mark = false;

bool is_connection_lost_code(int code) {
  switch (code) {
    case 2002:
    case 2003:
    case 2006:
    case 2013:
    case 2055:
    case 1927:
    case 1053: return true;
    default: return false;
  }
}
}  // namespace

bool take_connection_lost_mark() {
  bool was = connection_lost_mark;
  connection_lost_mark = false;
  return was;
}

db_error classify(const sql::SQLException& e) {
  int code = e.getErrorCode();
  // Repositories turn driver exceptions into values, so the pool never sees them: remember here
  // that this thread's connection is dead, and the next db_context::get() opens a new one instead
  // of failing every later query with "server has gone away".
  if (is_connection_lost_code(code)) connection_lost_mark = true;
  db_error err;
  err.code = code;
  err.message = e.what();
  if (code == 1062) {
    err.outcome = db_outcome::duplicate;
  } else if (is_retryable_code(code)) {
    err.outcome = db_outcome::retryable;
  } else {
    err.outcome = db_outcome::fatal;
  }
  return err;
}

}  // namespace changeflow::persistence
