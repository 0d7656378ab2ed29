#pragma once
// Internal helpers shared by the repositories (not part of the public API): the transaction guard,
// statement helpers, epoch-ms conversion and IN-list chunking.

#include "persistence/connection.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/status.hpp"

#include <cppconn/connection.h>
#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::persistence::detail {

/// RAII transaction: START TRANSACTION on construction, rollback in the destructor unless committed.
/// Autocommit stays on for the session: an explicit transaction suspends it until COMMIT/ROLLBACK,
/// so no `SET autocommit` round trip is needed before or after (the previous shape toggled it twice
/// per transaction). Rollback errors are swallowed: the connection may be the very thing that failed
/// (killed, server gone), and the caller already has the real error.
class transaction {
 public:
  // COMMIT and ROLLBACK are sent as statements: the driver's commit()/rollback() refuse to run
  // while the session's autocommit flag is on.
  explicit transaction(sql::Connection& c) : conn_(c) { run("START TRANSACTION"); }
  /// For a transaction whose START TRANSACTION travelled inside a script (`run_script`): nothing is
  /// sent now; the guard only ends it (rollback unless committed).
  struct begun_in_script {};
  transaction(sql::Connection& c, begun_in_script) : conn_(c) {}
  /// The script itself ended the transaction (its own COMMIT ran): nothing left to end.
  void ended_by_script() { committed_ = true; }
  ~transaction() {
    if (!committed_) {
      try {
        run("ROLLBACK");
      } catch (...) {
      }
    }
  }
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  void commit() {
    run("COMMIT");
    committed_ = true;
  }
  /// Ends the transaction now (the destructor then does nothing), so the connection can go on.
  void rollback() {
    run("ROLLBACK");
    committed_ = true;
  }

 private:
  void run(const char* sql) {
    std::unique_ptr<sql::Statement> st(conn_.createStatement());
    st->execute(sql);
  }
  sql::Connection& conn_;
  bool committed_ = false;
};

using rs_ptr = std::unique_ptr<sql::ResultSet>;

/// Literal quoting for statements sent as text: the connection's own escaping
/// (mysql_real_escape_string), which knows its character set.
class sql_text {
 public:
  explicit sql_text(sql::Connection& c);
  /// 'escaped' — safe for any bytes, including quotes, backslashes and NUL.
  std::string quote(const std::string& v) const;

 private:
  sql::Connection& conn_;
};

/// A statement with `?` placeholders, bound on the client and sent as ONE text query.
///
/// Why not the driver's server-side prepared statements: Connector/C++ prepares, executes and
/// closes a statement per use (the repositories run each statement once per transaction), which is
/// three messages and two round trips where a text query is one. On this workload the round trips,
/// not the server's parse time, were the cost (docs/performance.md). Values never enter the SQL
/// text unescaped: strings go through `sql_text::quote`, numbers are formatted here, and a `?`
/// inside a quoted literal or identifier of the statement text is left alone.
class statement {
 public:
  statement(sql::Connection& c, std::string sql);
  void setString(int index, const std::string& v);
  void setInt(int index, std::int32_t v);
  void setInt64(int index, std::int64_t v);
  void setNull(int index, int sql_type = 0);
  int executeUpdate();
  sql::ResultSet* executeQuery();
  bool execute();
  /// The SQL text as it will be sent; throws std::logic_error when a placeholder is unbound.
  std::string bound_sql() const;

 private:
  void bind(int index, std::string literal);

  sql::Connection& conn_;
  sql_text text_;
  std::string sql_;
  std::vector<std::size_t> marks_;  // offsets of the placeholders in sql_
  std::vector<std::optional<std::string>> values_;
  std::unique_ptr<sql::Statement> st_;  // kept so an open ResultSet's parent outlives it
};

using stmt_ptr = std::unique_ptr<statement>;

/// Sends `statements` as ONE compound statement (`BEGIN NOT ATOMIC ... END`: one round trip, and
/// one answer from the server instead of one per statement) and hands each result set, in statement
/// order, to `on_rows`. A failing statement throws the driver's exception from here, and the
/// statements after it did not run: a script that began a transaction leaves it open then, for the
/// caller's guard to roll back.
void run_script(sql::Connection& c, const std::vector<std::string>& statements,
                const std::function<void(sql::ResultSet&)>& on_rows);

/// Counts one text of `statements` statements for persistence::scripts_sent().
void count_script(std::size_t statements);

/// Runs an INSERT; false when it hit a unique key (1062, "already there"), any other error throws.
bool insert_unless_duplicate(statement& st);

inline stmt_ptr prepare(sql::Connection& c, const std::string& q) {
  return std::make_unique<statement>(c, q);
}

inline void set_opt_string(statement& st, int i, const std::optional<std::string>& v) {
  if (v)
    st.setString(i, *v);
  else
    st.setNull(i, 0);
}
inline void set_opt_int64(statement& st, int i, const std::optional<std::int64_t>& v) {
  if (v)
    st.setInt64(i, *v);
  else
    st.setNull(i, 0);
}
inline std::optional<std::string> opt_string(sql::ResultSet& rs, const char* col) {
  if (rs.isNull(col)) return std::nullopt;
  return std::string(rs.getString(col));
}
inline std::optional<std::int64_t> opt_int64(sql::ResultSet& rs, const char* col) {
  if (rs.isNull(col)) return std::nullopt;
  return static_cast<std::int64_t>(rs.getInt64(col));
}
inline std::string str(sql::ResultSet& rs, const char* col) {
  return rs.isNull(col) ? std::string() : std::string(rs.getString(col));
}
// The same by column index (1-based): a lookup by name upper-cases the name and searches the
// result's columns, per column and per row.
inline std::optional<std::string> opt_string(sql::ResultSet& rs, std::uint32_t col) {
  if (rs.isNull(col)) return std::nullopt;
  return std::string(rs.getString(col));
}
inline std::optional<std::int64_t> opt_int64(sql::ResultSet& rs, std::uint32_t col) {
  if (rs.isNull(col)) return std::nullopt;
  return static_cast<std::int64_t>(rs.getInt64(col));
}
inline std::string str(sql::ResultSet& rs, std::uint32_t col) {
  return rs.isNull(col) ? std::string() : std::string(rs.getString(col));
}

/// SQL expression turning a DATETIME(3) column into epoch milliseconds (sessions run in UTC).
inline std::string ms(std::string_view column) {
  return "CAST(ROUND(UNIX_TIMESTAMP(" + std::string(column) + ") * 1000) AS SIGNED)";
}

/// "?, ?, ?" for n placeholders.
std::string placeholders(std::size_t n);

/// IN lists stay far below the 65,535 placeholder limit (error 1390).
inline constexpr std::size_t in_chunk = 1000;

template <class T>
std::vector<std::vector<T>> chunks(const std::vector<T>& all, std::size_t size = in_chunk) {
  std::vector<std::vector<T>> out;
  for (std::size_t i = 0; i < all.size(); i += size) {
    out.emplace_back(all.begin() + i, all.begin() + std::min(all.size(), i + size));
  }
  return out;
}

/// Runs `body(sql::Connection&)` (which returns db_result<T>) on the session's connection and turns
/// driver exceptions into an error value: every repository call goes through here.
///
/// A connection that cannot be opened is `retryable` whatever the driver's code: the database may be
/// starting, restarting or out of connections (1040), and the caller tries again later as it does
/// after a lost connection. A connection-level error drops the connection, so the next call opens a
/// new one instead of failing with "server has gone away" until the process restarts.
template <class T, class F>
db_result<T> guarded(session s, F&& body) {
  sql::Connection* conn = nullptr;
  try {
    conn = &s.connection();
  } catch (const sql::SQLException& e) {
    return db_result<T>::failure(db_error{db_outcome::retryable, e.getErrorCode(), e.what(), true});
  } catch (const std::exception& e) {
    return db_result<T>::failure(db_outcome::fatal, e.what());
  }
  try {
    return body(*conn);
  } catch (const sql::SQLException& e) {
    auto err = classify(e);
    if (is_connection_lost_code(err.code)) s.connection_lost();
    if (err.code == 1710) evict_unparsed_triggers(*conn);
    return db_result<T>::failure(std::move(err));
  } catch (const std::exception& e) {
    return db_result<T>::failure(db_outcome::fatal, e.what());
  }
}

/// Re-runs a whole guarded write (its own transaction) when InnoDB chose it as a deadlock victim:
/// the server already rolled it back, and its guard makes a re-run safe. Writes that free the batch
/// slot (active_slot 1 -> NULL) meet claimers' unique-check locks on that key and deadlock by
/// design now and then; other errors are returned at once.
template <class T, class F>
db_result<T> retry_on_deadlock(F&& attempt, int attempts = 4) {
  db_result<T> r = attempt();
  for (int i = 1; i < attempts && r.outcome == db_outcome::retryable && r.error.code == 1213; ++i) r = attempt();
  return r;
}

/// The codes of the steps whose phase `in_phase` accepts and that the transition table lets go to
/// `to`, as the inside of an `IN (...)` list (constants, never user input; "NULL" when none).
std::string steps_into(bool (*in_phase)(workflow::phase), workflow::step to);

/// `IN (...)` literal list of the terminal phase names (constants, never user input).
const std::string& terminal_phase_list();

}  // namespace changeflow::persistence::detail
