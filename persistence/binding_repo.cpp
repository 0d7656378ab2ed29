#include "persistence/binding_repo.hpp"

#include "persistence/sql_util.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {
constexpr const char* binding_columns =
    "SELECT id, subject_id, repository, target_key, operation_id, phase, "
    "CAST(ROUND(UNIX_TIMESTAMP(created_at) * 1000) AS SIGNED) AS created_at_ms, "
    "CAST(ROUND(UNIX_TIMESTAMP(updated_at) * 1000) AS SIGNED) AS updated_at_ms FROM binding ";

db_result<binding_row> read_one(detail::stmt_ptr st, const std::string& what) {
  rs_ptr rs(st->executeQuery());
  if (!rs->next()) return db_result<binding_row>::failure(db_outcome::not_found, "no binding for " + what);
  binding_row b;
  b.id = rs->getInt64("id");
  b.subject_id = detail::str(*rs, "subject_id");
  b.repository = detail::str(*rs, "repository");
  b.target_key = detail::str(*rs, "target_key");
  b.operation_id = detail::str(*rs, "operation_id");
  auto p = workflow::parse_phase(detail::str(*rs, "phase"));
  if (!p) return db_result<binding_row>::failure(db_outcome::fatal, "unknown phase " + detail::str(*rs, "phase"));
  b.phase = *p;
  b.created_at_ms = rs->getInt64("created_at_ms");
  b.updated_at_ms = rs->getInt64("updated_at_ms");
  return db_result<binding_row>::success(std::move(b));
}
}  // namespace

db_result<binding_row> find_binding(session s, const std::string& subject_id, const std::string& repository,
                                    const std::string& target_key) {
  return guarded<binding_row>(s, [&](sql::Connection& conn) {
    auto st =
        prepare(conn, std::string(binding_columns) + "WHERE subject_id = ? AND repository = ? AND target_key = ?");
    st->setString(1, subject_id);
    st->setString(2, repository);
    st->setString(3, target_key);
    return read_one(std::move(st), subject_id + "/" + repository + "/" + target_key);
  });
}

}  // namespace changeflow::persistence
