#include "persistence/sql_util.hpp"

#include "workflow/status.hpp"
#include "workflow/transitions.hpp"

#include <mysql_connection.h>

#include <atomic>
#include <stdexcept>

namespace changeflow::persistence::detail {

std::string placeholders(std::size_t n) {
  std::string out;
  out.reserve(n * 3);
  for (std::size_t i = 0; i < n; ++i) out += i ? ", ?" : "?";
  return out;
}

sql_text::sql_text(sql::Connection& c) : conn_(c) {
  if (!dynamic_cast<sql::mysql::MySQL_Connection*>(&c)) throw std::logic_error("sql_text needs a MySQL connection");
}

std::string sql_text::quote(const std::string& v) const {
  // The bytes the server's escaping changes (mysql_real_escape_string: NUL, LF, CR, backslash, both
  // quotes, ^Z). A value with none of them (most: ids, names, URLs, times) is returned as it is in
  // every character set, so it is quoted here without the driver's round of copies.
  static constexpr std::string_view special("\0\n\r\\'\"\x1a", 7);
  if (v.find_first_of(special) == std::string::npos) {
    std::string out;
    out.reserve(v.size() + 2);
    out += '\'';
    out += v;
    out += '\'';
    return out;
  }
  auto& mysql = static_cast<sql::mysql::MySQL_Connection&>(conn_);
  std::string out = "'";
  out += std::string(mysql.escapeString(sql::SQLString(v)));
  out += "'";
  return out;
}

statement::statement(sql::Connection& c, std::string sql) : conn_(c), text_(c), sql_(std::move(sql)) {
  // Placeholders are the `?` outside '...', "..." and `...` (with backslash and doubled-quote escapes).
  char quote = 0;
  for (std::size_t i = 0; i < sql_.size(); ++i) {
    const char ch = sql_[i];
    if (quote) {
      if (ch == '\\' && quote != '`') {
        ++i;
      } else if (ch == quote) {
        if (i + 1 < sql_.size() && sql_[i + 1] == quote)
          ++i;
        else
          quote = 0;
      }
    } else if (ch == '\'' || ch == '"' || ch == '`') {
      quote = ch;
    } else if (ch == '?') {
      marks_.push_back(i);
    }
  }
  values_.resize(marks_.size());
}

void statement::bind(int index, std::string literal) {
  if (index < 1 || static_cast<std::size_t>(index) > values_.size()) {
    throw std::out_of_range("placeholder " + std::to_string(index) + " of " + std::to_string(values_.size()));
  }
  values_[static_cast<std::size_t>(index - 1)] = std::move(literal);
}

void statement::setString(int index, const std::string& v) {
  bind(index, text_.quote(v));
}
void statement::setInt(int index, std::int32_t v) {
  bind(index, std::to_string(v));
}
void statement::setInt64(int index, std::int64_t v) {
  bind(index, std::to_string(v));
}
void statement::setNull(int index, int) {
  bind(index, "NULL");
}

std::string statement::bound_sql() const {
  std::string out;
  std::size_t extra = 0;
  for (const auto& v : values_) extra += v ? v->size() : 0;
  out.reserve(sql_.size() + extra);
  std::size_t from = 0;
  for (std::size_t k = 0; k < marks_.size(); ++k) {
    if (!values_[k]) throw std::logic_error("placeholder " + std::to_string(k + 1) + " is not bound");
    out.append(sql_, from, marks_[k] - from);
    out += *values_[k];
    from = marks_[k] + 1;
  }
  out.append(sql_, from, std::string::npos);
  return out;
}

int statement::executeUpdate() {
  st_.reset(conn_.createStatement());
  return st_->executeUpdate(bound_sql());
}

sql::ResultSet* statement::executeQuery() {
  st_.reset(conn_.createStatement());
  return st_->executeQuery(bound_sql());
}

bool statement::execute() {
  st_.reset(conn_.createStatement());
  return st_->execute(bound_sql());
}

// Process-wide: read by persistence::scripts_sent() below.
std::atomic<std::uint64_t> script_texts{0};
std::atomic<std::uint64_t> script_statements{0};
std::atomic<std::uint64_t> compound_texts{0};
std::atomic<std::uint64_t> compound_statements{0};

void count_script(std::size_t statements) {
  script_texts.fetch_add(1, std::memory_order_relaxed);
  script_statements.fetch_add(statements, std::memory_order_relaxed);
}

namespace {
void count_compound(std::size_t statements) {
  compound_texts.fetch_add(1, std::memory_order_relaxed);
  compound_statements.fetch_add(statements, std::memory_order_relaxed);
}

std::string compound_statement(const std::vector<std::string>& statements) {
  std::string text = "BEGIN NOT ATOMIC\n";
  for (const auto& s : statements) {
    text += s;
    text += ";\n";
  }
  text += "END";
  return text;
}

/// Reads, and fetches, every result left on `st`: a result set that is reached must be fetched, or
/// the next call answers "commands out of sync".
void drain_results(sql::Statement& st) {
  while (st.getMoreResults()) rs_ptr(st.getResultSet());
}
}  // namespace

void run_script(sql::Connection& c, const std::vector<std::string>& statements,
                const std::function<void(sql::ResultSet&)>& on_rows) {
  std::unique_ptr<sql::Statement> st(c.createStatement());
  count_compound(statements.size());
  // One compound statement: the server answers it with the result sets of its SELECTs, in order,
  // and one final status, where a text of separate statements is answered statement by statement
  // (a packet the server sends and the client waits for per statement). The final status is the
  // only answer without rows, so the result sets are exactly those before it. A failing statement
  // ends the compound statement with its error, which surfaces as an exception from the call that
  // reaches it.
  for (bool has_rows = st->execute(compound_statement(statements)); has_rows; has_rows = st->getMoreResults()) {
    rs_ptr rs(st->getResultSet());
    try {
      on_rows(*rs);
    } catch (...) {
      // A reader that failed on its rows (a column it expected is missing) must not leave the
      // remaining results unread: the connection would answer "commands out of sync" to everything
      // after. The results are drained, then the error goes on.
      rs.reset();
      drain_results(*st);
      throw;
    }
  }
}

bool insert_unless_duplicate(statement& st) {
  try {
    st.executeUpdate();
    return true;
  } catch (const sql::SQLException& e) {
    if (e.getErrorCode() == 1062) return false;
    throw;
  }
}

std::string steps_into(bool (*in_phase)(workflow::phase), workflow::step to) {
  std::string s;
  for (auto st : workflow::all_steps) {
    if (!in_phase(workflow::phase_of(st)) || !workflow::is_allowed(st, to)) continue;
    if (!s.empty()) s += ", ";
    s += std::to_string(workflow::code_of(st));
  }
  return s.empty() ? std::string("NULL") : s;
}

const std::string& terminal_phase_list() {
  static const std::string list = [] {
    std::string s;
    for (auto p : workflow::all_phases) {
      if (!workflow::is_terminal(p)) continue;
      if (!s.empty()) s += ", ";
      s += "'" + std::string(workflow::to_string(p)) + "'";
    }
    return s;
  }();
  return list;
}

}  // namespace changeflow::persistence::detail

namespace changeflow::persistence {
script_counts scripts_sent() {
  return {detail::script_texts.load(std::memory_order_relaxed),
          detail::script_statements.load(std::memory_order_relaxed),
          detail::compound_texts.load(std::memory_order_relaxed),
          detail::compound_statements.load(std::memory_order_relaxed)};
}
}  // namespace changeflow::persistence
