#include "persistence/errors.hpp"

#include <cppconn/connection.h>
#include <cppconn/exception.h>
#include <cppconn/statement.h>

#include <atomic>
#include <memory>

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
    case 2055:  // lost connection (a system error on the socket)
    case 2014:  // commands out of sync: the connection is dropped and the next call opens a new one
    case 1927:  // connection killed (MariaDB)
    case 1053:  // server shutdown in progress
    case 1047:  // a Galera node not ready for application use (lost its quorum): another node serves
    case 1710:  // a table instance cached with a trigger it failed to parse (evict_unparsed_triggers)
      return true;
    default: return false;
  }
}

bool is_connection_lost_code(int code) {
  switch (code) {
    case 2002:
    case 2003:
    case 2006:
    case 2013:
    case 2014:  // commands out of sync: the connection's protocol state is lost; a new one is needed
    case 2055:
    case 1927:
    case 1053:
    case 1047: return true;
    default: return false;
  }
}

namespace {
std::atomic<std::uint64_t> conflicts{0};
std::atomic<std::uint64_t> evicted{0};
}  // namespace

std::uint64_t conflicts_seen() {
  return conflicts.load(std::memory_order_relaxed);
}

std::uint64_t unparsed_triggers_evicted() {
  return evicted.load(std::memory_order_relaxed);
}

void evict_unparsed_triggers(sql::Connection& conn) {
  evicted.fetch_add(1, std::memory_order_relaxed);
  try {
    std::unique_ptr<sql::Statement> st(conn.createStatement());
    // A FLUSH commits an open transaction: whatever the failed unit left open is rolled back first.
    st->execute("ROLLBACK");
    st->execute("FLUSH LOCAL TABLES");
  } catch (const sql::SQLException&) {
    // Without the RELOAD privilege (1227) or on a lost connection the broken instance stays until
    // the server drops it from its table cache; the caller retries either way.
  }
}

db_error classify(const sql::SQLException& e) {
  int code = e.getErrorCode();
  if (code == 1213) conflicts.fetch_add(1, std::memory_order_relaxed);
  db_error err;
  err.code = code;
  err.message = e.what();
  // A table instance opened with a trigger the server could not parse answers every write with 1064
  // and the trigger's parse error (1710 when the open itself reports it): one condition, one code.
  if (code == 1064 && err.message.rfind("Trigger '", 0) == 0 &&
      err.message.find("' has an error in its body: ") != std::string::npos) {
    err.code = code = 1710;
  }
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
