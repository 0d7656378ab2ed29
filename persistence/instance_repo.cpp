#include "persistence/instance_repo.hpp"

#include "persistence/operation_sql.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

db_result<std::int64_t> register_instance(session s, const std::string& instance_id, int lease_seconds,
                                          const std::string& address) {
  return guarded<std::int64_t>(s, [&](sql::Connection& conn) -> db_result<std::int64_t> {
    detail::transaction tx(conn);
    auto st = prepare(conn,
                      "INSERT INTO instance (instance_id, started_at, heartbeat_at, lease_until, epoch, address, "
                      "status) "
                      "VALUES (?, NOW(3), NOW(3), NOW(3) + INTERVAL ? SECOND, 1, ?, 'RUNNING') "
                      "ON DUPLICATE KEY UPDATE epoch = epoch + 1, started_at = NOW(3), heartbeat_at = NOW(3), "
                      "lease_until = NOW(3) + INTERVAL ? SECOND, address = ?, status = 'RUNNING'");
    st->setString(1, instance_id);
    st->setInt(2, lease_seconds);
    detail::set_opt_string(*st, 3, address.empty() ? std::nullopt : std::optional(address));
    st->setInt(4, lease_seconds);
    detail::set_opt_string(*st, 5, address.empty() ? std::nullopt : std::optional(address));
    st->executeUpdate();
    auto sel = prepare(conn, "SELECT epoch FROM instance WHERE instance_id = ?");
    sel->setString(1, instance_id);
    rs_ptr rs(sel->executeQuery());
    rs->next();
    const std::int64_t epoch = rs->getInt64(1);
    tx.commit();
    return db_result<std::int64_t>::success(epoch);
  });
}

db_result<done> heartbeat(session s, const std::string& instance_id, int lease_seconds) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    auto st = prepare(conn,
                      "UPDATE instance SET heartbeat_at = NOW(3), lease_until = NOW(3) + INTERVAL ? SECOND "
                      "WHERE instance_id = ? AND status = 'RUNNING'");
    st->setInt(1, lease_seconds);
    st->setString(2, instance_id);
    if (st->executeUpdate() != 1) return db_result<done>::failure(db_outcome::not_found, "instance not running");
    return db_result<done>::success({});
  });
}

db_result<done> mark_instance_stopped(session s, const std::string& instance_id) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    auto st = prepare(conn, "UPDATE instance SET status = 'STOPPED', lease_until = NOW(3) WHERE instance_id = ?");
    st->setString(1, instance_id);
    if (st->executeUpdate() != 1) return db_result<done>::failure(db_outcome::not_found, "no instance");
    return db_result<done>::success({});
  });
}

db_result<std::vector<taken_operation>> take_over_expired(session s, const std::string& my_id, int limit) {
  using V = std::vector<taken_operation>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    const std::string orphaned = "o.phase NOT IN (" + detail::terminal_phase_list() +
                                 ") AND (o.owner_instance IS NULL OR i.instance_id IS NULL OR i.lease_until < NOW(3))";
    detail::transaction tx(conn);
    auto sel = prepare(conn,
                       "SELECT o.operation_id FROM operation o LEFT JOIN instance i ON "
                       "i.instance_id = o.owner_instance "
                       "WHERE " +
                           orphaned +
                           " AND (o.owner_instance IS NULL OR o.owner_instance <> ?) "
                           "ORDER BY o.operation_id LIMIT ?");
    sel->setString(1, my_id);
    sel->setInt(2, limit);
    rs_ptr rs(sel->executeQuery());
    std::vector<std::string> candidates;
    while (rs->next()) candidates.push_back(detail::str(*rs, "operation_id"));
    V taken;
    for (const auto& chunk : detail::chunks(candidates)) {
      const std::string in = "(" + detail::placeholders(chunk.size()) + ")";
      // The guard re-checks the expiry: a peer that took a row first (or an owner that came back)
      // leaves it out of this UPDATE.
      if (detail::take_over_rows(conn, chunk, orphaned, my_id) == 0) continue;
      auto got = prepare(conn,
                         "SELECT operation_id, lease_epoch, version FROM operation "
                         "WHERE owner_instance = ? AND operation_id IN " +
                             in);
      got->setString(1, my_id);
      for (std::size_t k = 0; k < chunk.size(); ++k) got->setString(static_cast<int>(k + 2), chunk[k]);
      rs_ptr grs(got->executeQuery());
      while (grs->next()) {
        taken.push_back({detail::str(*grs, "operation_id"), grs->getInt64("lease_epoch"), grs->getInt64("version")});
      }
    }
    tx.commit();
    return db_result<V>::success(std::move(taken));
  });
}

db_result<std::vector<operation_row>> list_owned_nonterminal(session s, const std::string& owner,
                                                             const std::string& after_operation_id, int page_size) {
  using V = std::vector<operation_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, std::string("SELECT ") + detail::operation_columns +
                                " FROM operation WHERE owner_instance = ? AND phase NOT IN (" +
                                detail::terminal_phase_list() + ") AND operation_id > ? ORDER BY operation_id LIMIT ?");
    st->setString(1, owner);
    st->setString(2, after_operation_id);
    st->setInt(3, page_size);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(detail::read_operation(*rs));
    return db_result<V>::success(std::move(out));
  });
}

}  // namespace changeflow::persistence
