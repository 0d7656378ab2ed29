#include "persistence/audit_repo.hpp"

#include "persistence/sql_util.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

db_result<bool> insert_audit(session s, const audit_entry& e) {
  return guarded<bool>(s, [&](sql::Connection& conn) -> db_result<bool> {
    auto st = prepare(conn,
                      "INSERT INTO audit_log (at, operator, action, target, params, outcome, dedup_key) "
                      "VALUES (NOW(3), ?, ?, ?, ?, ?, ?)");
    st->setString(1, e.operator_name.substr(0, 128));
    st->setString(2, e.action.substr(0, 64));
    st->setString(3, e.target.substr(0, 255));
    detail::set_opt_string(*st, 4, e.params_json.empty() ? std::nullopt : std::optional(e.params_json));
    st->setString(5, e.outcome.substr(0, 64));
    detail::set_opt_string(*st, 6, e.dedup_key);
    try {
      st->executeUpdate();
    } catch (const sql::SQLException& ex) {
      if (ex.getErrorCode() == 1062) return db_result<bool>::success(false);  // expected deduplication
      throw;
    }
    return db_result<bool>::success(true);
  });
}

db_result<std::vector<audit_row>> list_audit(session s, std::int64_t before_id, int limit) {
  using V = std::vector<audit_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn,
                      "SELECT id, CAST(ROUND(UNIX_TIMESTAMP(at) * 1000) AS SIGNED) AS at_ms, "
                      "operator, action, target, "
                      "params, outcome, dedup_key FROM audit_log WHERE (? = 0 OR id < ?) ORDER BY "
                      "id DESC LIMIT ?");
    st->setInt64(1, before_id);
    st->setInt64(2, before_id);
    st->setInt(3, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      audit_row r;
      r.id = rs->getInt64("id");
      r.at_ms = rs->getInt64("at_ms");
      r.entry = {detail::str(*rs, "operator"), detail::str(*rs, "action"),  detail::str(*rs, "target"),
                 detail::str(*rs, "params"),   detail::str(*rs, "outcome"), detail::opt_string(*rs, "dedup_key")};
      out.push_back(std::move(r));
    }
    return db_result<V>::success(std::move(out));
  });
}

}  // namespace changeflow::persistence
