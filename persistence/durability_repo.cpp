#include "persistence/durability_repo.hpp"

#include "persistence/operation_sql.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {

std::string step_list(std::initializer_list<workflow::step> steps) {
  std::string out;
  for (auto s : steps) {
    if (!out.empty()) out += ",";
    out += std::to_string(workflow::code_of(s));
  }
  return out;
}

std::vector<overdue_operation> read_overdue(detail::statement& st) {
  rs_ptr rs(st.executeQuery());
  std::vector<overdue_operation> out;
  while (rs->next()) {
    auto s = workflow::step_from_code(rs->getInt("step"));
    if (!s) continue;  // a step this build does not know: left for an operator
    out.push_back({detail::str(*rs, "operation_id"), *s, rs->getInt64("version"), detail::str(*rs, "owner_instance")});
  }
  return out;
}

}  // namespace

db_result<std::vector<owned_change>> list_owned_changed_since(session s, const std::string& owner,
                                                              std::int64_t lookback_ms, int limit) {
  using V = std::vector<owned_change>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // idx_operation_owner_phase narrows to this owner's rows; updated_at filters the few recent ones.
    auto st = prepare(conn, "SELECT operation_id, step, version, " + detail::ms("next_wake_at") +
                                " AS next_wake_at_ms FROM operation WHERE owner_instance = ? "
                                "AND phase NOT IN (" +
                                detail::terminal_phase_list() +
                                ") AND updated_at >= NOW(3) - INTERVAL ? MICROSECOND "
                                "ORDER BY updated_at LIMIT ?");
    st->setString(1, owner);
    st->setInt64(2, lookback_ms * 1000);
    st->setInt(3, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      auto s = workflow::step_from_code(rs->getInt("step"));
      if (!s) continue;
      out.push_back({detail::str(*rs, "operation_id"), *s, rs->getInt64("version"),
                     detail::opt_int64(*rs, "next_wake_at_ms").value_or(0)});
    }
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<operation_row>> list_owned_unchanged(session s, const std::string& owner, int older_than_s,
                                                           const std::string& after_operation_id, int limit) {
  using V = std::vector<operation_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, std::string("SELECT ") + detail::operation_columns +
                                " FROM operation WHERE owner_instance = ? AND phase NOT IN (" +
                                detail::terminal_phase_list() +
                                ") AND operation_id > ? AND updated_at < NOW(3) - INTERVAL ? SECOND "
                                "ORDER BY operation_id LIMIT ?");
    st->setString(1, owner);
    st->setString(2, after_operation_id);
    st->setInt(3, older_than_s);
    st->setInt(4, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(detail::read_operation(*rs));
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<overdue_operation>> list_approval_overdue(session s, int grace_s, int limit) {
  using V = std::vector<overdue_operation>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT operation_id, step, version, owner_instance FROM operation WHERE step = " +
                                step_list({workflow::step::APPROVAL_SENT}) +
                                " AND next_wake_at IS NOT NULL AND next_wake_at < NOW(3) - INTERVAL ? SECOND "
                                "ORDER BY next_wake_at LIMIT ?");
    st->setInt(1, grace_s);
    st->setInt(2, limit);
    return db_result<V>::success(read_overdue(*st));
  });
}

db_result<std::vector<overdue_operation>> list_deploy_overdue(session s, int wait_s, int limit) {
  using V = std::vector<overdue_operation>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // idx_operation_phase_updated serves (phase, updated_at); the step filter drops DEPLOY_TIMEOUT
    // rows, which are already flagged and keep waiting for the callback or reconciliation.
    auto st = prepare(conn,
                      "SELECT operation_id, step, version, owner_instance FROM operation WHERE phase = 'MERGED' "
                      "AND step IN (" +
                          step_list({workflow::step::HANDLE_MERGED, workflow::step::HANDLE_ALREADY_MERGED,
                                     workflow::step::BATCH_MERGED}) +
                          ") AND updated_at < NOW(3) - INTERVAL ? SECOND ORDER BY updated_at LIMIT ?");
    st->setInt(1, wait_s);
    st->setInt(2, limit);
    return db_result<V>::success(read_overdue(*st));
  });
}

}  // namespace changeflow::persistence
