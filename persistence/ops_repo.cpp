#include "persistence/ops_repo.hpp"

#include "persistence/operation_sql.hpp"
#include "persistence/sql_util.hpp"

#include <algorithm>
#include <functional>

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {

using binder = std::function<void(detail::statement&, int)>;

struct where_clause {
  std::string sql;
  std::vector<std::pair<binder, int>> binds;  // each binder fills `int` placeholders from its index
  void add(const std::string& cond, binder b = nullptr, int placeholders = 1) {
    sql += sql.empty() ? " WHERE " : " AND ";
    sql += cond;
    if (b) binds.emplace_back(std::move(b), placeholders);
  }
  /// Binds every value from placeholder 1; returns the next free placeholder.
  int bind(detail::statement& st) const {
    int i = 1;
    for (const auto& [b, n] : binds) {
      b(st, i);
      i += n;
    }
    return i;
  }
};

/// LIKE pattern text: the user's %, _ and \ match themselves.
std::string like_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '%' || c == '_' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// "<ms>:<id>" -> (ms, id); nullopt when malformed (the caller answers 400 before this runs).
std::optional<std::pair<std::int64_t, std::string>> parse_cursor(const std::string& c) {
  auto colon = c.find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  try {
    std::size_t used = 0;
    auto ms = std::stoll(c.substr(0, colon), &used);
    if (used != colon) return std::nullopt;
    return std::make_pair(ms, c.substr(colon + 1));
  } catch (...) {
    return std::nullopt;
  }
}

where_clause build_where(const ops_operation_filter& f) {
  where_clause w;
  if (f.phase) {
    std::string p(workflow::to_string(*f.phase));
    w.add("phase = ?", [p](auto& st, int i) { st.setString(i, p); });
  }
  if (f.step) {
    int code = workflow::code_of(*f.step);
    w.add("step = ?", [code](auto& st, int i) { st.setInt(i, code); });
  }
  if (!f.steps_in.empty()) {
    std::string list;
    for (auto s : f.steps_in) list += (list.empty() ? "" : ", ") + std::to_string(workflow::code_of(s));
    w.add("step IN (" + list + ")");  // integer codes from the enum, never user text
  }
  if (!f.flow.empty()) w.add("flow = ?", [v = f.flow](auto& st, int i) { st.setString(i, v); });
  if (!f.owner.empty()) w.add("owner_instance = ?", [v = f.owner](auto& st, int i) { st.setString(i, v); });
  if (!f.subject.empty()) w.add("subject_id = ?", [v = f.subject](auto& st, int i) { st.setString(i, v); });
  if (!f.target.empty()) w.add("target_key = ?", [v = f.target](auto& st, int i) { st.setString(i, v); });
  if (f.older_than_s > 0) {
    int s = f.older_than_s;
    w.add("updated_at < NOW(3) - INTERVAL ? SECOND", [s](auto& st, int i) { st.setInt(i, s); });
  }
  if (f.only_nonterminal) w.add("phase NOT IN (" + detail::terminal_phase_list() + ")");
  if (!f.search.empty()) {
    const auto text = f.search.substr(0, 200);
    const bool number =
        text.size() <= 18 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    // An id by any part of 8 characters or more (new ids are time-ordered, so their start is shared
    // by every change of the same minute, and the console shows their random last 8), by its start
    // when shorter: a short number is an MR number far more often than a piece of an id.
    const auto anywhere = "%" + like_escaped(text) + "%";
    const auto id_part = text.size() >= 8 ? anywhere : like_escaped(text) + "%";
    if (number) {
      const auto mr = std::stoll(text);
      w.add(
          "(mr_iid = ? OR operation_id LIKE ? OR title LIKE ?)",
          [mr, id_part, anywhere](auto& st, int i) {
            st.setInt64(i, mr);
            st.setString(i + 1, id_part);
            st.setString(i + 2, anywhere);
          },
          3);
    } else {
      w.add(
          "(operation_id LIKE ? OR title LIKE ?)",
          [id_part, anywhere](auto& st, int i) {
            st.setString(i, id_part);
            st.setString(i + 1, anywhere);
          },
          2);
    }
  }
  return w;
}

callback_ledger_row read_callback(sql::ResultSet& rs) {
  callback_ledger_row r;
  r.id = rs.getInt64("id");
  r.delivery_id = detail::str(rs, "delivery_id");
  r.kind = detail::str(rs, "kind");
  r.operation_id = detail::opt_string(rs, "operation_id");
  r.outcome = detail::str(rs, "outcome");
  r.received_at_ms = rs.getInt64("received_at_ms");
  r.applied_at_ms = detail::opt_int64(rs, "applied_at_ms");
  return r;
}

const std::string& callback_columns() {
  static const std::string cols = "id, delivery_id, kind, operation_id, outcome, " + detail::ms("received_at") +
                                  " AS received_at_ms, " + detail::ms("applied_at") + " AS applied_at_ms";
  return cols;
}

}  // namespace

db_result<ops_operation_page> list_ops_operations(session s, const ops_operation_filter& f) {
  using V = ops_operation_page;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto w = build_where(f);
    if (!f.after.empty()) {
      auto cursor = parse_cursor(f.after);
      if (!cursor) return db_result<V>::failure(db_outcome::not_found, "malformed cursor");
      // Row-value comparison on the epoch-ms form of updated_at: the cursor carries milliseconds.
      auto [ms, id] = *cursor;
      const char* beyond = f.newest_first ? " < " : " > ";
      w.add(
          "(" + detail::ms("updated_at") + beyond + "? OR (" + detail::ms("updated_at") + " = ? AND operation_id" +
              beyond + "?))",
          [ms, id](auto& st, int i) {
            st.setInt64(i, ms);
            st.setInt64(i + 1, ms);
            st.setString(i + 2, id);
          },
          3);
    }
    int limit = std::clamp(f.limit, 1, 500);
    auto st = prepare(conn, std::string("SELECT ") + detail::operation_columns + " FROM operation" + w.sql +
                                (f.newest_first ? " ORDER BY updated_at DESC, operation_id DESC LIMIT ?"
                                                : " ORDER BY updated_at, operation_id LIMIT ?"));
    st->setInt(w.bind(*st), limit + 1);
    rs_ptr rs(st->executeQuery());
    V page;
    while (rs->next()) page.items.push_back(detail::read_operation(*rs));
    if (static_cast<int>(page.items.size()) > limit) {
      page.items.resize(static_cast<std::size_t>(limit));
      const auto& last = page.items.back();
      page.next_after = std::to_string(last.updated_at_ms) + ":" + last.operation_id;
    }
    return db_result<V>::success(std::move(page));
  });
}

db_result<std::int64_t> count_ops_operations(session s, const ops_operation_filter& f) {
  return guarded<std::int64_t>(s, [&](sql::Connection& conn) -> db_result<std::int64_t> {
    auto w = build_where(f);
    auto st = prepare(conn, "SELECT COUNT(*) AS n FROM operation" + w.sql);
    w.bind(*st);
    rs_ptr rs(st->executeQuery());
    return db_result<std::int64_t>::success(rs->next() ? rs->getInt64("n") : 0);
  });
}

db_result<std::vector<operation_row>> select_ops_operations(session s, ops_operation_filter f, int cap) {
  using V = std::vector<operation_row>;
  V out;
  f.limit = 500;
  f.after.clear();
  for (;;) {
    auto page = list_ops_operations(s, f);
    if (!page.ok()) return db_result<V>::failure(page.error);
    for (auto& r : page.value.items) {
      if (static_cast<int>(out.size()) >= cap) return db_result<V>::success(std::move(out));
      out.push_back(std::move(r));
    }
    if (page.value.next_after.empty()) return db_result<V>::success(std::move(out));
    f.after = page.value.next_after;
  }
}

db_result<std::map<std::string, std::int64_t>> count_operations_by_phase(session s) {
  using V = std::map<std::string, std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT phase, COUNT(*) AS n FROM operation GROUP BY phase");
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out[detail::str(*rs, "phase")] = rs->getInt64("n");
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<callback_ledger_row>> list_callbacks_for_operation(session s, const std::string& operation_id) {
  using V = std::vector<callback_ledger_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // Approval deliveries name their operation; deploy deliveries are linked to the operations they
    // were matched to (callback_operation).
    auto st = prepare(conn, "SELECT " + callback_columns() +
                                " FROM callback_ledger WHERE operation_id = ? UNION SELECT " + callback_columns() +
                                " FROM callback_ledger WHERE id IN (SELECT ledger_id FROM callback_operation WHERE "
                                "operation_id = ?) ORDER BY id LIMIT 200");
    st->setString(1, operation_id);
    st->setString(2, operation_id);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(read_callback(*rs));
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::map<std::string, std::int64_t>> callback_outcome_counts(session s) {
  using V = std::map<std::string, std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT outcome, COUNT(*) AS n FROM callback_ledger GROUP BY outcome");
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out[detail::str(*rs, "outcome")] = rs->getInt64("n");
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<callback_ledger_row>> recent_callbacks(session s, const std::vector<std::string>& outcomes,
                                                             int limit) {
  using V = std::vector<callback_ledger_row>;
  if (outcomes.empty()) return db_result<V>::success({});
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT " + callback_columns() + " FROM callback_ledger WHERE outcome IN (" +
                                detail::placeholders(outcomes.size()) + ") ORDER BY id DESC LIMIT ?");
    int i = 1;
    for (const auto& o : outcomes) st->setString(i++, o);
    st->setInt(i, std::clamp(limit, 1, 500));
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(read_callback(*rs));
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<step_attempt_row>> list_step_attempts(session s, const std::string& operation_id) {
  using V = std::vector<step_attempt_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st =
        prepare(conn, "SELECT step, failed_attempts, last_error, last_error_status, " + detail::ms("first_error_at") +
                          " AS first_ms, " + detail::ms("last_error_at") +
                          " AS last_ms FROM operation_step_attempt WHERE operation_id = ? ORDER BY first_error_at");
    st->setString(1, operation_id);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      auto step = workflow::step_from_code(rs->getInt("step"));
      if (!step) continue;  // a code this build does not know: nothing to show it as
      step_attempt_row r;
      r.step = *step;
      r.failed_attempts = rs->getInt("failed_attempts");
      r.last_error = detail::opt_string(*rs, "last_error");
      if (auto status = detail::opt_int64(*rs, "last_error_status")) r.last_error_status = static_cast<int>(*status);
      r.first_error_at_ms = rs->getInt64("first_ms");
      r.last_error_at_ms = rs->getInt64("last_ms");
      out.push_back(std::move(r));
    }
    return db_result<V>::success(std::move(out));
  });
}

namespace {
std::int64_t read_now_ms(sql::Connection& conn) {
  auto st = prepare(conn, "SELECT " + detail::ms("NOW(3)") + " AS now_ms");
  rs_ptr rs(st->executeQuery());
  return rs->next() ? rs->getInt64("now_ms") : 0;
}

std::vector<operation_row> read_operations(sql::Connection& conn, const std::string& where, int limit,
                                           const std::function<void(detail::statement&)>& bind = nullptr) {
  auto st = prepare(conn, std::string("SELECT ") + detail::operation_columns + " FROM operation WHERE " + where +
                              " ORDER BY updated_at, operation_id LIMIT " + std::to_string(std::clamp(limit, 1, 500)));
  if (bind) bind(*st);
  rs_ptr rs(st->executeQuery());
  std::vector<operation_row> out;
  while (rs->next()) out.push_back(detail::read_operation(*rs));
  return out;
}
}  // namespace

db_result<std::int64_t> database_now_ms(session s) {
  return guarded<std::int64_t>(s, [&](sql::Connection& conn) -> db_result<std::int64_t> {
    return db_result<std::int64_t>::success(read_now_ms(conn));
  });
}

db_result<attention_rows> read_attention(session s, const attention_query& q) {
  using V = attention_rows;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    V out;
    out.now_ms = read_now_ms(conn);
    if (!q.decision_steps.empty()) {
      std::string list;
      for (auto st : q.decision_steps) list += (list.empty() ? "" : ", ") + std::to_string(workflow::code_of(st));
      out.decisions = read_operations(conn, "step IN (" + list + ")", q.limit);  // enum codes, never user text
    }
    // A stored wake well in the past on a row that still waits: its timer did not run (no live actor,
    // an owner that died, a wedged actor). idx_operation_wake.
    out.late_waits = read_operations(
        conn, "next_wake_at < NOW(3) - INTERVAL ? SECOND AND phase NOT IN (" + detail::terminal_phase_list() + ")",
        q.limit, [&](detail::statement& st) { st.setInt(1, std::max(0, q.late_after_s)); });
    out.overdue_approvals = read_operations(conn, "step = ? AND updated_at < NOW(3) - INTERVAL ? SECOND", q.limit,
                                            [&](detail::statement& st) {
                                              st.setInt(1, workflow::code_of(workflow::step::APPROVAL_SENT));
                                              st.setInt(2, std::max(0, q.approval_after_s));
                                            });
    std::string outcomes;
    for (std::size_t i = 0; i < q.callback_outcomes.size(); ++i) outcomes += i ? ", ?" : "?";
    std::string where = "received_at > NOW(3) - INTERVAL ? SECOND AND (";
    if (!outcomes.empty()) where += "outcome IN (" + outcomes + ") OR ";
    where += "(outcome = 'PENDING' AND received_at < NOW(3) - INTERVAL ? SECOND))";
    auto st = prepare(conn, "SELECT " + callback_columns() + " FROM callback_ledger WHERE " + where +
                                " ORDER BY id DESC LIMIT " + std::to_string(std::clamp(q.limit, 1, 500)));
    int i = 1;
    st->setInt(i++, std::max(0, q.callback_window_s));
    for (const auto& o : q.callback_outcomes) st->setString(i++, o);
    st->setInt(i, std::max(0, q.pending_callback_after_s));
    rs_ptr rs(st->executeQuery());
    while (rs->next()) out.callbacks.push_back(read_callback(*rs));
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<instance_row>> list_instances(session s) {
  using V = std::vector<instance_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT i.instance_id, " + detail::ms("i.started_at") + " AS started_at_ms, " +
                                detail::ms("i.heartbeat_at") + " AS heartbeat_at_ms, " + detail::ms("i.lease_until") +
                                " AS lease_until_ms, i.epoch, i.address, i.status, (i.lease_until > NOW(3)) AS live, "
                                "(SELECT COUNT(*) FROM operation o WHERE o.owner_instance = i.instance_id AND "
                                "o.phase NOT IN (" +
                                detail::terminal_phase_list() + ")) AS owned FROM instance i ORDER BY i.instance_id");
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      instance_row r;
      r.instance_id = detail::str(*rs, "instance_id");
      r.started_at_ms = rs->getInt64("started_at_ms");
      r.heartbeat_at_ms = rs->getInt64("heartbeat_at_ms");
      r.lease_until_ms = rs->getInt64("lease_until_ms");
      r.epoch = rs->getInt64("epoch");
      r.address = detail::str(*rs, "address");
      r.status = detail::str(*rs, "status");
      r.lease_live = rs->getInt("live") != 0;
      r.owned_nonterminal = rs->getInt64("owned");
      out.push_back(std::move(r));
    }
    return db_result<V>::success(std::move(out));
  });
}

}  // namespace changeflow::persistence
