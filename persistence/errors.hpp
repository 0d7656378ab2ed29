#pragma once
// The closed set of outcomes every repository call returns. Connector/C++ exceptions are caught at
// the edge of persistence/ and translated here; nothing above this folder sees sql::SQLException.

#include <string>
#include <string_view>

namespace sql {
class SQLException;
}

namespace changeflow::persistence {

enum class db_outcome {
  ok,
  not_found,           // the row the call needs does not exist
  preempted,           // guarded write matched 0 rows: the state changed elsewhere (I6)
  duplicate,           // unique key conflict where the caller must decide what it means
  illegal_transition,  // refused by the transition table before any SQL ran
  retryable,           // 1205, 1213, 2002, 2006, 2013: try again on a fresh transaction/connection
  fatal,               // anything else: a bug or a schema problem
};

std::string_view to_string(db_outcome o);

struct db_error {
  db_outcome outcome = db_outcome::fatal;
  int code = 0;  // server/client error number, 0 when not from the driver
  std::string message;
};

/// Maps a driver exception to an outcome (1062 -> duplicate; connection/lock errors -> retryable).
db_error classify(const sql::SQLException& e);

/// True once after classify() saw a connection-level error (lost, gone away, cannot connect,
/// killed, server shutdown) on this thread; db_context::get() uses it to reconnect.
bool take_connection_lost_mark();
bool is_retryable_code(int code);

}  // namespace changeflow::persistence
