#include "persistence/idempotency_repo.hpp"

#include "persistence/sql_util.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {
// The owner is alive while its instance row is RUNNING, under lease, and still in the epoch the
// record was begun in (a restart under the same instance id bumps the epoch). Records without a
// deadline predate migration 4 and only expire (schema_v4.cpp says why).
std::optional<idem_record> find_live(sql::Connection& conn, const std::string& key) {
  auto st = prepare(conn,
                    "SELECT r.idem_key, r.fingerprint, r.state, r.status_code, r.response_body, "
                    "r.owner_instance, r.takeovers, r.operation_id, " +
                        detail::ms("r.created_at") + " AS created_at_ms, " + detail::ms("r.expires_at") +
                        " AS expires_at_ms, "
                        "(r.state = 'IN_FLIGHT' AND r.in_flight_until IS NOT NULL AND "
                        " (r.in_flight_until < NOW(3) OR (r.owner_instance IS NOT NULL AND "
                        "  (i.instance_id IS NULL OR i.lease_until < NOW(3) OR i.status <> 'RUNNING' OR "
                        "   NOT (i.epoch <=> r.owner_epoch))))) AS reclaimable "
                        "FROM idempotency_record r LEFT JOIN instance i ON i.instance_id = r.owner_instance "
                        "WHERE r.idem_key = ? AND r.expires_at >= NOW(3)");
  st->setString(1, key);
  rs_ptr rs(st->executeQuery());
  if (!rs->next()) return std::nullopt;
  idem_record r;
  r.key = detail::str(*rs, "idem_key");
  r.fingerprint = detail::str(*rs, "fingerprint");
  r.state = detail::str(*rs, "state") == "COMPLETED" ? idem_state::COMPLETED : idem_state::IN_FLIGHT;
  if (!rs->isNull("status_code")) r.status_code = rs->getInt("status_code");
  r.response_body = detail::opt_string(*rs, "response_body");
  r.created_at_ms = rs->getInt64("created_at_ms");
  r.expires_at_ms = rs->getInt64("expires_at_ms");
  r.owner_instance = detail::opt_string(*rs, "owner_instance");
  r.takeovers = rs->getInt("takeovers");
  r.reclaimable = rs->getInt("reclaimable") == 1;
  r.operation_id = detail::opt_string(*rs, "operation_id");
  return r;
}

std::int64_t micros(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

bool try_insert(sql::Connection& conn, const std::string& key, const std::string& fingerprint, int ttl_seconds,
                const idem_owner& owner, const std::string& operation_id) {
  auto st = prepare(conn,
                    "INSERT INTO idempotency_record (idem_key, fingerprint, state, created_at, "
                    "expires_at, owner_instance, owner_epoch, in_flight_until, operation_id) "
                    "VALUES (?, ?, 'IN_FLIGHT', NOW(3), NOW(3) + INTERVAL ? SECOND, NULLIF(?, ''), "
                    "(SELECT epoch FROM instance WHERE instance_id = ?), "
                    "NOW(3) + INTERVAL ? MICROSECOND, NULLIF(?, ''))");
  st->setString(1, key);
  st->setString(2, fingerprint);
  st->setInt(3, ttl_seconds);
  st->setString(4, owner.instance_id);
  st->setString(5, owner.instance_id);
  st->setInt64(6, micros(owner.in_flight_timeout));
  st->setString(7, operation_id);
  return detail::insert_unless_duplicate(*st);
}

/// Claims a reclaimable record for `owner`. Pinned to the takeover count read (and to the state and
/// fingerprint): of several retries racing for the same dead record, the row lock serialises their
/// UPDATEs and only the first still matches. The lifetime restarts, as for a new record.
bool take_over(sql::Connection& conn, const idem_record& dead, const std::string& fingerprint, int ttl_seconds,
               const idem_owner& owner) {
  auto st = prepare(conn,
                    "UPDATE idempotency_record SET owner_instance = NULLIF(?, ''), "
                    "owner_epoch = (SELECT epoch FROM instance WHERE instance_id = ?), "
                    "in_flight_until = NOW(3) + INTERVAL ? MICROSECOND, "
                    "expires_at = NOW(3) + INTERVAL ? SECOND, takeovers = takeovers + 1 "
                    "WHERE idem_key = ? AND state = 'IN_FLIGHT' AND fingerprint = ? AND takeovers = ?");
  st->setString(1, owner.instance_id);
  st->setString(2, owner.instance_id);
  st->setInt64(3, micros(owner.in_flight_timeout));
  st->setInt(4, ttl_seconds);
  st->setString(5, dead.key);
  st->setString(6, fingerprint);
  st->setInt(7, dead.takeovers);
  return st->executeUpdate() == 1;
}
}  // namespace

db_result<idem_begin_result> idem_begin(session s, const std::string& key, const std::string& fingerprint,
                                        int ttl_seconds, const idem_owner& owner, const std::string& operation_id) {
  using R = db_result<idem_begin_result>;
  const auto ours = operation_id.empty() ? std::nullopt : std::optional<std::string>(operation_id);
  return guarded<idem_begin_result>(s, [&](sql::Connection& conn) -> R {
    // A live record is the answer, unless its request died: then a retry of the SAME request takes
    // it over and runs again. A different request (other fingerprint) never does; it gets the
    // record and with it "key reused".
    auto settle = [&](idem_record found) -> R {
      if (!found.reclaimable || found.fingerprint != fingerprint) {
        return R::success({false, false, std::move(found), std::nullopt});
      }
      if (take_over(conn, found, fingerprint, ttl_seconds, owner)) {
        return R::success({true, true, std::nullopt, found.operation_id});
      }
      if (auto winner = find_live(conn, key)) return R::success({false, false, std::move(winner), std::nullopt});
      return R::failure(db_outcome::retryable, "idempotency record taken over concurrently");
    };
    if (auto r = find_live(conn, key)) return settle(std::move(*r));
    if (try_insert(conn, key, fingerprint, ttl_seconds, owner, operation_id)) {
      return R::success({true, false, std::nullopt, ours});
    }
    // Conflict: either a concurrent request won, or an expired record still occupies the key.
    if (auto winner = find_live(conn, key)) return settle(std::move(*winner));
    auto purge = prepare(conn, "DELETE FROM idempotency_record WHERE idem_key = ? AND expires_at < NOW(3)");
    purge->setString(1, key);
    purge->executeUpdate();
    if (try_insert(conn, key, fingerprint, ttl_seconds, owner, operation_id)) {
      return R::success({true, false, std::nullopt, ours});
    }
    if (auto winner = find_live(conn, key)) return settle(std::move(*winner));
    return R::failure(db_outcome::retryable, "idempotency record changed concurrently");
  });
}

std::string idem_completed_insert_sql(sql::Connection& conn, const std::string& key, const std::string& fingerprint,
                                      int ttl_seconds, const idem_owner& owner, int status_code,
                                      const std::string& body, const std::string& operation_id) {
  auto st = prepare(conn,
                    "INSERT INTO idempotency_record (idem_key, fingerprint, state, status_code, response_body, "
                    "created_at, expires_at, owner_instance, owner_epoch, operation_id) "
                    "VALUES (?, ?, 'COMPLETED', ?, ?, NOW(3), NOW(3) + INTERVAL ? SECOND, NULLIF(?, ''), "
                    "(SELECT epoch FROM instance WHERE instance_id = ?), NULLIF(?, ''))");
  st->setString(1, key);
  st->setString(2, fingerprint);
  st->setInt(3, status_code);
  st->setString(4, body);
  st->setInt(5, ttl_seconds);
  st->setString(6, owner.instance_id);
  st->setString(7, owner.instance_id);
  st->setString(8, operation_id);
  return st->bound_sql();
}

db_result<done> idem_complete(session s, const std::string& key, int status_code, const std::string& body) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    auto st = prepare(conn,
                      "UPDATE idempotency_record SET state = 'COMPLETED', status_code = ?, response_body = ? "
                      "WHERE idem_key = ? AND state = 'IN_FLIGHT'");
    st->setInt(1, status_code);
    st->setString(2, body);
    st->setString(3, key);
    if (st->executeUpdate() != 1) return db_result<done>::failure(db_outcome::preempted, "not IN_FLIGHT: " + key);
    return db_result<done>::success({});
  });
}

db_result<done> idem_abandon(session s, const std::string& key) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    auto st = prepare(conn, "DELETE FROM idempotency_record WHERE idem_key = ? AND state = 'IN_FLIGHT'");
    st->setString(1, key);
    if (st->executeUpdate() != 1) return db_result<done>::failure(db_outcome::preempted, "not IN_FLIGHT: " + key);
    return db_result<done>::success({});
  });
}

db_result<int> idem_delete_expired(session s, int limit) {
  return guarded<int>(s, [&](sql::Connection& conn) -> db_result<int> {
    auto st = prepare(conn, "DELETE FROM idempotency_record WHERE expires_at < NOW(3) ORDER BY expires_at LIMIT ?");
    st->setInt(1, limit);
    return db_result<int>::success(st->executeUpdate());
  });
}

}  // namespace changeflow::persistence
