#include "persistence/bench_repo.hpp"

#include "persistence/sql_util.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::rs_ptr;

namespace {
using stmt = std::unique_ptr<sql::Statement>;
using prepared = std::unique_ptr<sql::PreparedStatement>;

std::vector<double> query_doubles(sql::Connection& c, const std::string& q) {
  stmt st(c.createStatement());
  rs_ptr rs(st->executeQuery(q));
  std::vector<double> out;
  while (rs->next()) out.push_back(rs->getDouble(1));
  return out;
}
}  // namespace

db_result<std::map<std::string, std::int64_t>> bench_phase_counts(session s, const std::string& tag) {
  using V = std::map<std::string, std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    stmt st(conn.createStatement());
    rs_ptr rs(
        st->executeQuery("SELECT phase, COUNT(*) FROM operation WHERE subject_id LIKE '" + tag + "-%' GROUP BY phase"));
    V out;
    while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::int64_t> bench_event_count(session s) {
  return guarded<std::int64_t>(s, [&](sql::Connection& conn) -> db_result<std::int64_t> {
    return db_result<std::int64_t>::success(
        static_cast<std::int64_t>(query_doubles(conn, "SELECT COUNT(*) FROM operation_event")[0]));
  });
}

db_result<bench_latencies> bench_flow_latencies(session s, const std::string& tag) {
  return guarded<bench_latencies>(s, [&](sql::Connection& conn) -> db_result<bench_latencies> {
    bench_latencies out;
    const std::string mine = "o.subject_id LIKE '" + tag + "-%'";
    out.e2e_ms = query_doubles(conn,
                               "SELECT TIMESTAMPDIFF(MICROSECOND, o.created_at, MIN(e.at)) / 1000 FROM operation o "
                               "JOIN operation_event e ON e.operation_id = o.operation_id AND e.to_phase = 'VALIDATED' "
                               "WHERE " +
                                   mine + " GROUP BY o.operation_id, o.created_at");
    // Approval callback: the ledger row is stamped when the handler's transaction inserts it; the
    // APPROVAL_APPROVED event is written in that same transaction (apply_approval_callback), so this
    // is the in-database part only. The HTTP-side figure comes from the route latency histogram.
    out.approval_cb_to_commit_ms =
        query_doubles(conn,
                      "SELECT TIMESTAMPDIFF(MICROSECOND, l.received_at, MIN(e.at)) / 1000 FROM callback_ledger l "
                      "JOIN operation o ON o.operation_id = l.operation_id "
                      "JOIN operation_event e ON e.operation_id = l.operation_id AND e.to_step = " +
                          std::to_string(workflow::code_of(workflow::step::APPROVAL_APPROVED)) +
                          " WHERE l.kind = 'approval' AND " + mine + " GROUP BY l.id, l.received_at");
    out.deploy_cb_to_commit_ms =
        query_doubles(conn,
                      "SELECT TIMESTAMPDIFF(MICROSECOND, d.r, MIN(e.at)) / 1000 FROM operation o "
                      "JOIN operation_event e ON e.operation_id = o.operation_id AND e.to_step = " +
                          std::to_string(workflow::code_of(workflow::step::CALLED_BACK)) +
                          " JOIN (SELECT mr_iid, MIN(received_at) r FROM deploy_callback GROUP BY mr_iid) d "
                          "ON d.mr_iid = o.mr_iid WHERE " +
                          mine + " GROUP BY o.operation_id, d.r");
    return db_result<bench_latencies>::success(std::move(out));
  });
}

db_result<std::map<std::string, std::int64_t>> bench_global_status(session s, const std::vector<std::string>& names) {
  using V = std::map<std::string, std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    std::string in;
    for (const auto& n : names) in += (in.empty() ? "'" : ",'") + n + "'";
    stmt st(conn.createStatement());
    rs_ptr rs(st->executeQuery("SHOW GLOBAL STATUS WHERE Variable_name IN (" + in + ")"));
    V out;
    while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::string> bench_variable(session s, const std::string& name) {
  return guarded<std::string>(s, [&](sql::Connection& conn) -> db_result<std::string> {
    stmt st(conn.createStatement());
    rs_ptr rs(st->executeQuery("SELECT @@" + name));
    std::string v;
    if (rs->next() && !rs->isNull(1)) v = rs->getString(1);
    return db_result<std::string>::success(std::move(v));
  });
}

db_result<done> bench_reset_raw_table(session s) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    stmt st(conn.createStatement());
    st->execute(
        "CREATE TABLE IF NOT EXISTS bench_raw (id CHAR(36) NOT NULL PRIMARY KEY, step INT NOT NULL, "
        "version BIGINT NOT NULL, updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) "
        "ON UPDATE CURRENT_TIMESTAMP(3)) ENGINE=InnoDB");
    st->execute("DELETE FROM bench_raw");
    return db_result<done>::success({});
  });
}

db_result<done> bench_insert_raw_row(session s, const std::string& id) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    prepared ins(conn.prepareStatement("INSERT INTO bench_raw (id, step, version) VALUES (?, 1, 1)"));
    ins->setString(1, id);
    ins->executeUpdate();
    return db_result<done>::success({});
  });
}

db_result<done> bench_set_step(session s, const std::string& operation_id, workflow::step step) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    prepared mv(conn.prepareStatement("UPDATE operation SET step = ? WHERE operation_id = ?"));
    mv->setInt(1, workflow::code_of(step));
    mv->setString(2, operation_id);
    mv->executeUpdate();
    return db_result<done>::success({});
  });
}

bench_loop_result bench_raw_loop(session s, const std::vector<std::string>& ids, const std::atomic<bool>& stop) {
  bench_loop_result out;
  std::vector<std::int64_t> version(ids.size(), 1);
  // The counts grow inside the guarded body, so an error keeps what ran before it.
  auto ended = guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    conn.setAutoCommit(false);
    prepared up(conn.prepareStatement(
        "UPDATE bench_raw SET step = ?, version = version + 1 WHERE id = ? AND version = ? AND step = ?"));
    for (size_t k = 0; !stop; ++k) {
      size_t i = k % ids.size();
      up->setInt(1, 1);
      up->setString(2, ids[i]);
      up->setInt64(3, version[i]);
      up->setInt(4, 1);
      if (up->executeUpdate() == 1)
        ++version[i];
      else
        ++out.guard_misses;
      conn.commit();
      ++out.transactions;
    }
    return db_result<done>::success({});
  });
  if (!ended.ok()) out.error = ended.error;
  return out;
}

db_result<std::int64_t> bench_text_loop(session s, const std::vector<std::string>& ids, bool compound, long count) {
  return guarded<std::int64_t>(s, [&](sql::Connection& conn) -> db_result<std::int64_t> {
    const detail::sql_text t(conn);
    std::int64_t landed = 0;
    for (long k = 0; k < count; ++k) {
      std::vector<std::string> parts{"START TRANSACTION"};
      std::string counts;
      for (int i = 0; i < 6; ++i) {
        const auto& id = ids[static_cast<std::size_t>(k * 6 + i) % ids.size()];
        parts.push_back("UPDATE bench_raw SET version = version + 1 WHERE id = " + t.quote(id));
        parts.push_back("SET @bench_v" + std::to_string(i) + " = ROW_COUNT()");
        counts += (i ? " + @bench_v" : "@bench_v") + std::to_string(i);
      }
      parts.push_back("SELECT " + counts);
      parts.push_back("COMMIT");
      auto read = [&](sql::ResultSet& rs) {
        if (rs.next()) landed += rs.getInt64(1);
      };
      if (compound) {
        detail::run_script(conn, parts, read);
        continue;
      }
      std::string text;
      for (const auto& part : parts) text += (text.empty() ? "" : ";\n") + part;
      stmt st(conn.createStatement());
      bool has_rows = st->execute(text);
      for (std::size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) has_rows = st->getMoreResults();
        if (has_rows) {
          rs_ptr rs(st->getResultSet());
          read(*rs);
        }
      }
    }
    return db_result<std::int64_t>::success(landed);
  });
}

db_result<done> bench_delete_repo_rows(session s) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    stmt st(conn.createStatement());
    st->execute(
        "DELETE e FROM operation_event e JOIN operation o ON o.operation_id = e.operation_id WHERE o.subject_id LIKE "
        "'rawbench-%'");
    st->execute("DELETE FROM binding WHERE subject_id LIKE 'rawbench-%'");
    st->execute("DELETE FROM operation WHERE subject_id LIKE 'rawbench-%'");
    return db_result<done>::success({});
  });
}

}  // namespace changeflow::persistence
