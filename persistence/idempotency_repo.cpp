#include "persistence/idempotency_repo.hpp"

#include "persistence/sql_util.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {
std::optional<idem_record> find_live(sql::Connection& conn, const std::string& key) {
  auto st = prepare(conn,
                    "SELECT idem_key, fingerprint, state, status_code, response_body, "
                    "CAST(ROUND(UNIX_TIMESTAMP(created_at) * 1000) AS SIGNED) AS created_at_ms, "
                    "CAST(ROUND(UNIX_TIMESTAMP(expires_at) * 1000) AS SIGNED) AS expires_at_ms "
                    "FROM idempotency_record WHERE idem_key = ? AND expires_at >= NOW(3)");
  st->setString(1, key);
  rs_ptr rs(st->executeQuery());
  if (!rs->next()) return std::nullopt;
  idem_record r;
  r.key = detail::str(*rs, "idem_key");
  r.fingerprint = detail::str(*rs, "fingerprint");
  r.state =
      detail::str(*rs, "state") == "COMPLETED" ? idem_state::COMPLETED : idem_state::IN_FLIGHT;
  if (!rs->isNull("status_code")) r.status_code = rs->getInt("status_code");
  r.response_body = detail::opt_string(*rs, "response_body");
  r.created_at_ms = rs->getInt64("created_at_ms");
  r.expires_at_ms = rs->getInt64("expires_at_ms");
  return r;
}

bool try_insert(sql::Connection& conn, const std::string& key, const std::string& fingerprint,
                int ttl_seconds) {
  auto st = prepare(
      conn,
      "INSERT INTO idempotency_record (idem_key, fingerprint, state, created_at, expires_at) "
      "VALUES (?, ?, 'IN_FLIGHT', NOW(3), NOW(3) + INTERVAL ? SECOND)");
  st->setString(1, key);
  st->setString(2, fingerprint);
  st->setInt(3, ttl_seconds);
  return detail::insert_unless_duplicate(*st);
}
}  // namespace

db_result<idem_begin_result> idem_begin(sql::Connection& conn, const std::string& key,
                                        const std::string& fingerprint, int ttl_seconds) {
  using R = db_result<idem_begin_result>;
  return guarded<idem_begin_result>([&]() -> R {
    if (auto r = find_live(conn, key)) return R::success({false, std::move(r)});
    if (try_insert(conn, key, fingerprint, ttl_seconds)) return R::success({true, std::nullopt});
    // Conflict: either a concurrent request won, or an expired record still occupies the key.
    if (auto winner = find_live(conn, key)) return R::success({false, std::move(winner)});
    auto purge =
        prepare(conn, "DELETE FROM idempotency_record WHERE idem_key = ? AND expires_at < NOW(3)");
    purge->setString(1, key);
    purge->executeUpdate();
    if (try_insert(conn, key, fingerprint, ttl_seconds)) return R::success({true, std::nullopt});
    if (auto winner = find_live(conn, key)) return R::success({false, std::move(winner)});
    return R::failure(db_outcome::retryable, "idempotency record changed concurrently");
  });
}

db_result<done> idem_complete(sql::Connection& conn, const std::string& key, int status_code,
                              const std::string& body) {
  return guarded<done>([&]() -> db_result<done> {
    auto st = prepare(
        conn,
        "UPDATE idempotency_record SET state = 'COMPLETED', status_code = ?, response_body = ? "
        "WHERE idem_key = ? AND state = 'IN_FLIGHT'");
    st->setInt(1, status_code);
    st->setString(2, body);
    st->setString(3, key);
    if (st->executeUpdate() != 1)
      return db_result<done>::failure(db_outcome::preempted, "not IN_FLIGHT: " + key);
    return db_result<done>::success({});
  });
}

db_result<done> idem_abandon(sql::Connection& conn, const std::string& key) {
  return guarded<done>([&]() -> db_result<done> {
    auto st =
        prepare(conn, "DELETE FROM idempotency_record WHERE idem_key = ? AND state = 'IN_FLIGHT'");
    st->setString(1, key);
    if (st->executeUpdate() != 1)
      return db_result<done>::failure(db_outcome::preempted, "not IN_FLIGHT: " + key);
    return db_result<done>::success({});
  });
}

db_result<std::optional<idem_record>> idem_find(sql::Connection& conn, const std::string& key) {
  using V = std::optional<idem_record>;
  return guarded<V>([&]() -> db_result<V> { return db_result<V>::success(find_live(conn, key)); });
}

db_result<int> idem_delete_expired(sql::Connection& conn, int limit) {
  return guarded<int>([&]() -> db_result<int> {
    auto st = prepare(
        conn,
        "DELETE FROM idempotency_record WHERE expires_at < NOW(3) ORDER BY expires_at LIMIT ?");
    st->setInt(1, limit);
    return db_result<int>::success(st->executeUpdate());
  });
}

}  // namespace changeflow::persistence
