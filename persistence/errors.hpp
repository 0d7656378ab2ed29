#pragma once
// The closed set of outcomes every repository call returns. Connector/C++ exceptions are caught at
// the edge of persistence/ and translated here; nothing above this folder sees sql::SQLException.

#include <cstdint>
#include <string>
#include <string_view>

namespace sql {
class Connection;
class SQLException;
}  // namespace sql

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
  bool unsent = false;  // the connection could not be opened: nothing reached the server
};

/// Maps a driver exception to an outcome (1062 -> duplicate; connection/lock errors -> retryable).
db_error classify(const sql::SQLException& e);

bool is_retryable_code(int code);
/// Connection-level errors (lost, gone away, cannot connect, killed, server shutdown): the
/// connection is dead, and the session drops it so the next call opens a new one. Lock errors
/// (1205, 1213) are retryable but leave the connection usable.
bool is_connection_lost_code(int code);

/// Deadlocks and, on a Galera cluster, certification failures (both 1213) this process's statements
/// met so far; every one was answered as retryable (the guarded write is re-run and re-checks the
/// row's version, so a write another node committed first makes it preempted, never a repeat).
std::uint64_t conflicts_seen();

/// MariaDB 1710, "Trigger ... has an error in its body", for a trigger that is valid: on a Galera
/// node that had just started, a table instance opened then could carry a trigger whose parse failed
/// (the syntax error named a different place each time), and the server's table cache kept handing
/// that instance to the next statement, so writes failed for seconds on end. The error is retryable;
/// the failed unit's session rolls back and sends FLUSH LOCAL TABLES, which drops the unused table
/// instances of this node only (not replicated), so the retry opens the table again.
void evict_unparsed_triggers(sql::Connection& conn);
/// How many times this process did so.
std::uint64_t unparsed_triggers_evicted();

}  // namespace changeflow::persistence
