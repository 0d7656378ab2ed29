#include "persistence/notification_repo.hpp"

#include "persistence/sql_util.hpp"

#include <algorithm>

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {

const std::string subscription_columns =
    "s.id AS row_id, s.subscription_id, s.subject_id, s.operation_id, s.url, "
    "s.owner, " +
    detail::ms("s.created_at") + " AS created_at_ms";

subscription_row read_subscription(sql::ResultSet& rs) {
  subscription_row r;
  r.subscription_id = detail::str(rs, "subscription_id");
  r.subject_id = detail::opt_string(rs, "subject_id");
  r.operation_id = detail::opt_string(rs, "operation_id");
  r.url = detail::str(rs, "url");
  r.owner = detail::str(rs, "owner");
  r.created_at_ms = rs.getInt64("created_at_ms");
  return r;
}

/// Delivery counts by state for the subscriptions of `rows` (one grouped read for the whole page).
void add_delivery_counts(sql::Connection& conn, std::vector<std::int64_t> row_ids,
                         std::vector<subscription_row>& rows) {
  for (const auto& chunk : detail::chunks(row_ids)) {
    auto st = prepare(conn,
                      "SELECT s.subscription_id, d.state, COUNT(*) AS n FROM notification_delivery d "
                      "JOIN notification_subscription s ON s.id = d.subscription_id WHERE d.subscription_id IN (" +
                          detail::placeholders(chunk.size()) + ") GROUP BY s.subscription_id, d.state");
    for (std::size_t i = 0; i < chunk.size(); ++i) st->setInt64(static_cast<int>(i + 1), chunk[i]);
    rs_ptr rs(st->executeQuery());
    while (rs->next()) {
      auto id = detail::str(*rs, "subscription_id");
      auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.subscription_id == id; });
      if (it != rows.end()) it->deliveries[detail::str(*rs, "state")] = rs->getInt64("n");
    }
  }
}

}  // namespace

db_result<done> create_subscription(session s, const new_subscription& sub) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    auto st = prepare(conn,
                      "INSERT INTO notification_subscription (subscription_id, subject_id, operation_id, url, secret, "
                      "owner) VALUES (?, ?, ?, ?, ?, ?)");
    st->setString(1, sub.subscription_id);
    detail::set_opt_string(*st, 2, sub.subject_id);
    detail::set_opt_string(*st, 3, sub.operation_id);
    st->setString(4, sub.url);
    st->setString(5, sub.secret);
    st->setString(6, sub.owner.substr(0, 160));
    st->executeUpdate();
    return db_result<done>::success({});
  });
}

db_result<subscription_row> find_subscription(session s, const std::string& subscription_id) {
  using R = db_result<subscription_row>;
  return guarded<subscription_row>(s, [&](sql::Connection& conn) -> R {
    auto st = prepare(
        conn, "SELECT " + subscription_columns + " FROM notification_subscription s WHERE s.subscription_id = ?");
    st->setString(1, subscription_id);
    rs_ptr rs(st->executeQuery());
    if (!rs->next()) return R::failure(db_outcome::not_found, "no subscription " + subscription_id);
    std::vector<subscription_row> rows{read_subscription(*rs)};
    add_delivery_counts(conn, {rs->getInt64("row_id")}, rows);
    return R::success(std::move(rows.front()));
  });
}

db_result<std::vector<subscription_row>> list_subscriptions(session s, const std::string& owner, int limit) {
  using V = std::vector<subscription_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT " + subscription_columns + " FROM notification_subscription s" +
                                (owner.empty() ? std::string() : " WHERE s.owner = ?") + " ORDER BY s.id DESC LIMIT ?");
    int i = 1;
    if (!owner.empty()) st->setString(i++, owner);
    st->setInt(i, std::clamp(limit, 1, 500));
    rs_ptr rs(st->executeQuery());
    V out;
    std::vector<std::int64_t> row_ids;
    while (rs->next()) {
      out.push_back(read_subscription(*rs));
      row_ids.push_back(rs->getInt64("row_id"));
    }
    add_delivery_counts(conn, std::move(row_ids), out);
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::int64_t> delete_subscription(session s, const std::string& subscription_id) {
  using R = db_result<std::int64_t>;
  return guarded<std::int64_t>(s, [&](sql::Connection& conn) -> R {
    detail::transaction tx(conn);
    auto sel = prepare(conn, "SELECT id FROM notification_subscription WHERE subscription_id = ? FOR UPDATE");
    sel->setString(1, subscription_id);
    rs_ptr rs(sel->executeQuery());
    if (!rs->next()) return R::failure(db_outcome::not_found, "no subscription " + subscription_id);
    const auto row_id = rs->getInt64("id");
    // Given up rather than deleted: operators still see what was never sent, and why.
    auto give_up = prepare(conn,
                           "UPDATE notification_delivery SET state = 'FAILED', last_error = 'subscription deleted', "
                           "claimed_by = NULL, claim_token = NULL, claim_until = NULL "
                           "WHERE subscription_id = ? AND state = 'PENDING'");
    give_up->setInt64(1, row_id);
    const auto given_up = give_up->executeUpdate();
    auto del = prepare(conn, "DELETE FROM notification_subscription WHERE id = ?");
    del->setInt64(1, row_id);
    del->executeUpdate();
    tx.commit();
    return R::success(given_up);
  });
}

db_result<std::vector<claimed_delivery>> claim_due_deliveries(session s, const claim_request& req) {
  using V = std::vector<claimed_delivery>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // Heads of their streams only: an earlier PENDING delivery of the same (subscription, change)
    // holds the later ones back, claimed or not. PENDING never comes back once left, and later
    // events get higher sequences, so a head stays a head until it is delivered or given up.
    auto sel = prepare(conn,
                       "SELECT d.id FROM notification_delivery d "
                       "WHERE d.state = 'PENDING' AND d.next_attempt_at <= NOW(3) "
                       "AND (d.claim_until IS NULL OR d.claim_until < NOW(3)) "
                       "AND NOT EXISTS (SELECT 1 FROM notification_delivery p WHERE p.subscription_id = "
                       "d.subscription_id AND p.operation_id = d.operation_id AND p.sequence < d.sequence "
                       "AND p.state = 'PENDING') "
                       "ORDER BY d.next_attempt_at, d.id LIMIT ?");
    sel->setInt(1, std::clamp(req.limit, 1, 1000));
    rs_ptr rs(sel->executeQuery());
    std::vector<std::int64_t> candidates;
    while (rs->next()) candidates.push_back(rs->getInt64("id"));
    V out;
    if (candidates.empty()) return db_result<V>::success(std::move(out));
    // The guard re-checks state and lease: a peer that claimed a candidate first keeps it.
    auto claim = prepare(conn,
                         "UPDATE notification_delivery SET claimed_by = ?, claim_token = ?, "
                         "claim_until = NOW(3) + INTERVAL ? MICROSECOND WHERE id IN (" +
                             detail::placeholders(candidates.size()) +
                             ") AND state = 'PENDING' AND (claim_until IS NULL OR claim_until < NOW(3))");
    claim->setString(1, req.instance_id.substr(0, 128));
    claim->setString(2, req.token);
    claim->setInt64(3, std::max<std::int64_t>(1, req.lease_ms) * 1000);
    for (std::size_t i = 0; i < candidates.size(); ++i) claim->setInt64(static_cast<int>(i + 4), candidates[i]);
    if (claim->executeUpdate() == 0) return db_result<V>::success(std::move(out));
    auto got = prepare(conn,
                       "SELECT d.id, d.delivery_id, d.operation_id, d.sequence, d.kind, d.attempts, s.subscription_id, "
                       "s.url, s.secret, e.id AS event_id, e.from_step, e.to_step, e.from_phase, e.to_phase, e.cause, "
                       "e.actor, e.instance_id, e.version, " +
                           detail::ms("e.at") +
                           " AS at_ms FROM notification_delivery d "
                           "JOIN notification_subscription s ON s.id = d.subscription_id "
                           "JOIN operation_event e ON e.id = d.event_id "
                           "WHERE d.claim_token = ? AND d.state = 'PENDING' ORDER BY d.id");
    got->setString(1, req.token);
    rs_ptr grs(got->executeQuery());
    while (grs->next()) {
      claimed_delivery c;
      c.id = grs->getInt64("id");
      c.delivery_id = detail::str(*grs, "delivery_id");
      c.operation_id = detail::str(*grs, "operation_id");
      c.sequence = grs->getInt("sequence");
      c.kind = detail::str(*grs, "kind");
      c.attempts = grs->getInt("attempts");
      c.subscription_id = detail::str(*grs, "subscription_id");
      c.url = detail::str(*grs, "url");
      c.secret = detail::str(*grs, "secret");
      auto& e = c.event;
      e.id = grs->getInt64("event_id");
      e.operation_id = c.operation_id;
      if (!grs->isNull("from_step")) e.from_step = workflow::step_from_code(grs->getInt("from_step"));
      if (auto to = workflow::step_from_code(grs->getInt("to_step"))) e.to_step = *to;
      if (!grs->isNull("from_phase")) e.from_phase = workflow::parse_phase(detail::str(*grs, "from_phase"));
      if (auto p = workflow::parse_phase(detail::str(*grs, "to_phase"))) e.to_phase = *p;
      e.cause = detail::str(*grs, "cause");
      e.actor = detail::str(*grs, "actor");
      e.instance_id = detail::opt_string(*grs, "instance_id");
      e.version = grs->getInt64("version");
      e.at_ms = grs->getInt64("at_ms");
      out.push_back(std::move(c));
    }
    return db_result<V>::success(std::move(out));
  });
}

db_result<bool> mark_delivered(session s, std::int64_t id, int http_status) {
  return guarded<bool>(s, [&](sql::Connection& conn) -> db_result<bool> {
    auto st = prepare(conn,
                      "UPDATE notification_delivery SET state = 'DELIVERED', attempts = attempts + 1, "
                      "delivered_at = NOW(3), last_status = ?, last_error = NULL, claimed_by = NULL, "
                      "claim_token = NULL, claim_until = NULL WHERE id = ? AND state = 'PENDING'");
    st->setInt(1, http_status);
    st->setInt64(2, id);
    return db_result<bool>::success(st->executeUpdate() == 1);
  });
}

db_result<std::string> record_failed_attempt(session s, const failed_attempt& a) {
  return guarded<std::string>(s, [&](sql::Connection& conn) -> db_result<std::string> {
    auto st = prepare(conn,
                      "UPDATE notification_delivery SET attempts = attempts + 1, last_status = ?, last_error = ?, "
                      "state = IF(created_at < NOW(3) - INTERVAL ? SECOND, 'FAILED', 'PENDING'), "
                      "next_attempt_at = NOW(3) + INTERVAL ? MICROSECOND, "
                      "claimed_by = NULL, claim_token = NULL, claim_until = NULL "
                      "WHERE id = ? AND state = 'PENDING' AND claim_token = ?");
    detail::set_opt_int64(*st, 1, a.http_status > 0 ? std::optional<std::int64_t>(a.http_status) : std::nullopt);
    st->setString(2, a.error.substr(0, 1024));
    st->setInt64(3, std::max<std::int64_t>(0, a.max_age_s));
    st->setInt64(4, std::max<std::int64_t>(0, a.retry_in_ms) * 1000);
    st->setInt64(5, a.id);
    st->setString(6, a.token);
    if (st->executeUpdate() != 1) return db_result<std::string>::success("");
    auto state = prepare(conn, "SELECT state FROM notification_delivery WHERE id = ?");
    state->setInt64(1, a.id);
    rs_ptr rs(state->executeQuery());
    return db_result<std::string>::success(rs->next() ? detail::str(*rs, "state") : std::string());
  });
}

db_result<bool> release_claim(session s, std::int64_t id, const std::string& token) {
  return guarded<bool>(s, [&](sql::Connection& conn) -> db_result<bool> {
    auto st = prepare(conn,
                      "UPDATE notification_delivery SET claimed_by = NULL, claim_token = NULL, claim_until = NULL "
                      "WHERE id = ? AND claim_token = ?");
    st->setInt64(1, id);
    st->setString(2, token);
    return db_result<bool>::success(st->executeUpdate() == 1);
  });
}

db_result<std::vector<delivery_row>> list_deliveries(session s, const delivery_filter& f) {
  using V = std::vector<delivery_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    std::string where = "1 = 1";
    if (!f.state.empty()) where += " AND d.state = ?";
    if (!f.operation_id.empty()) where += " AND d.operation_id = ?";
    if (!f.subscription_id.empty()) where += " AND s.subscription_id = ?";
    if (f.after > 0) where += " AND d.id < ?";
    auto st = prepare(conn,
                      "SELECT d.id, d.delivery_id, s.subscription_id, s.url, d.operation_id, d.sequence, d.kind, "
                      "d.state, d.attempts, d.last_status, d.last_error, d.claimed_by, "
                      "IF(d.state = 'PENDING', " +
                          detail::ms("d.next_attempt_at") + ", NULL) AS next_attempt_at_ms, " +
                          "IF(d.claim_until > NOW(3), 1, 0) AS claim_live, " + detail::ms("d.created_at") +
                          " AS created_at_ms, " + detail::ms("d.delivered_at") +
                          " AS delivered_at_ms FROM notification_delivery d "
                          "LEFT JOIN notification_subscription s ON s.id = d.subscription_id WHERE " +
                          where + " ORDER BY d.id DESC LIMIT ?");
    int i = 1;
    if (!f.state.empty()) st->setString(i++, f.state);
    if (!f.operation_id.empty()) st->setString(i++, f.operation_id);
    if (!f.subscription_id.empty()) st->setString(i++, f.subscription_id);
    if (f.after > 0) st->setInt64(i++, f.after);
    st->setInt(i, std::clamp(f.limit, 1, 500));
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      delivery_row r;
      r.cursor = rs->getInt64("id");
      r.delivery_id = detail::str(*rs, "delivery_id");
      r.subscription_id = detail::str(*rs, "subscription_id");
      r.url = detail::str(*rs, "url");
      r.operation_id = detail::str(*rs, "operation_id");
      r.sequence = rs->getInt("sequence");
      r.kind = detail::str(*rs, "kind");
      r.state = detail::str(*rs, "state");
      r.attempts = rs->getInt("attempts");
      if (!rs->isNull("last_status")) r.last_status = rs->getInt("last_status");
      r.last_error = detail::opt_string(*rs, "last_error");
      r.next_attempt_at_ms = detail::opt_int64(*rs, "next_attempt_at_ms");
      if (rs->getInt("claim_live") == 1) r.claimed_by = detail::opt_string(*rs, "claimed_by");
      r.created_at_ms = rs->getInt64("created_at_ms");
      r.delivered_at_ms = detail::opt_int64(*rs, "delivered_at_ms");
      out.push_back(std::move(r));
    }
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::map<std::string, std::int64_t>> delivery_counts(session s) {
  using M = std::map<std::string, std::int64_t>;
  return guarded<M>(s, [&](sql::Connection& conn) -> db_result<M> {
    auto st = prepare(conn, "SELECT state, COUNT(*) AS n FROM notification_delivery GROUP BY state");
    rs_ptr rs(st->executeQuery());
    M out = {{"PENDING", 0}, {"DELIVERED", 0}, {"FAILED", 0}};
    while (rs->next()) out[detail::str(*rs, "state")] = rs->getInt64("n");
    return db_result<M>::success(std::move(out));
  });
}

}  // namespace changeflow::persistence
