#include "persistence/reconcile_repo.hpp"

#include "persistence/callback_repo.hpp"
#include "persistence/callback_sql.hpp"
#include "persistence/operation_sql.hpp"

#include <optional>

#include "persistence/sql_util.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

std::string_view to_string(deploy_outcome o) {
  switch (o) {
    case deploy_outcome::APPLIED: return "APPLIED";
    case deploy_outcome::DUPLICATE: return "DUPLICATE";
    case deploy_outcome::IGNORED_STALE: return "IGNORED_STALE";
    case deploy_outcome::OUT_OF_ORDER: return "OUT_OF_ORDER";
    case deploy_outcome::DEPLOY_FAILED: return "DEPLOY_FAILED";
  }
  return "IGNORED_STALE";
}

/// A recorded deploy callback concerns an operation when it names it; one that names none can only
/// be matched by the MR iid, and MR iids repeat (a recreated project), so it counts only when it
/// arrived after the operation was created. Two placeholders, both the operation id.
constexpr const char* names_operation =
    "(JSON_CONTAINS(operation_ids, JSON_QUOTE(?)) OR ((operation_ids IS NULL OR JSON_LENGTH(operation_ids) = 0) "
    "AND received_at > (SELECT created_at FROM operation WHERE operation_id = ?)))";

std::string deploy_ledger_key(const std::string& delivery_id) {
  return "deploy:" + delivery_id;
}

db_result<std::vector<mr_operation>> operations_for_mr(session s, const std::string& repository, std::int64_t mr_iid) {
  using V = std::vector<mr_operation>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // LEFT JOIN: an operation replaced by a re-apply keeps its mr_iid but has no binding any more.
    auto st = prepare(conn,
                      "SELECT o.operation_id, o.step, b.phase AS binding_phase FROM operation o "
                      "LEFT JOIN binding b ON b.operation_id = o.operation_id "
                      "WHERE o.repository = ? AND o.mr_iid = ? ORDER BY o.created_at");
    st->setString(1, repository);
    st->setInt64(2, mr_iid);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      mr_operation m;
      m.operation_id = detail::str(*rs, "operation_id");
      auto s = workflow::step_from_code(rs->getInt("step"));
      if (!s) continue;  // unknown step code: not ours to touch
      m.step = *s;
      if (auto p = detail::opt_string(*rs, "binding_phase")) m.binding_phase = workflow::parse_phase(*p);
      out.push_back(std::move(m));
    }
    return db_result<V>::success(std::move(out));
  });
}

namespace {
/// The delivery's row in deploy_callback (its MR number feeds the watermark).
detail::stmt_ptr delivery_insert(sql::Connection& conn, const deploy_callback_in& cb) {
  auto st = prepare(conn,
                    "INSERT INTO deploy_callback (delivery_id, project, mr_iid, pipeline_id, status, "
                    "operation_ids, received_at) VALUES (?, ?, ?, ?, ?, ?, NOW(3))");
  st->setString(1, cb.delivery_id);
  st->setString(2, cb.project);
  st->setInt64(3, cb.mr_iid);
  detail::set_opt_int64(*st, 4, cb.pipeline_id);
  st->setString(5, cb.status);
  detail::set_opt_string(*st, 6, cb.operation_ids_json);
  return st;
}
}  // namespace

db_result<record_outcome> record_deploy_delivery(session s, const deploy_callback_in& cb,
                                                 const std::string& payload_json) {
  using R = db_result<record_outcome>;
  return guarded<record_outcome>(s, [&](sql::Connection& conn) -> R {
    // Was the first delivery ever applied? The ledger row and the deploy_callback row commit
    // together, so a recorded copy is answered by this one read, without a transaction; a copy
    // racing the first one's uncommitted rows is answered by the INSERT below instead.
    auto pending = prepare(conn, "SELECT outcome = 'PENDING' FROM callback_ledger WHERE delivery_id = ?");
    pending->setString(1, deploy_ledger_key(cb.delivery_id));
    auto recorded_as = [&]() -> std::optional<record_outcome> {
      rs_ptr rs(pending->executeQuery());
      if (!rs->next()) return std::nullopt;
      return rs->getBoolean(1) ? record_outcome::duplicate_unapplied : record_outcome::duplicate;
    };
    if (auto known = recorded_as()) return R::success(*known);
    detail::transaction tx(conn);
    auto st = delivery_insert(conn, cb);
    if (!detail::insert_unless_duplicate(*st)) {
      // Rolled back: nothing written; the first copy committed meanwhile.
      tx.rollback();
      return R::success(recorded_as().value_or(record_outcome::duplicate));
    }

    // Both rows or neither: the deploy_callback key already proved the delivery is new, so a ledger
    // duplicate here would be a corrupt ledger; report it as a duplicate rather than fail the sender.
    if (!detail::insert_pending_ledger(conn, deploy_ledger_key(cb.delivery_id), "deploy", payload_json))
      return R::success(record_outcome::duplicate);
    tx.commit();
    return R::success(record_outcome::inserted);
  });
}

namespace {

/// The flip to VALIDATED by a deploy (the transition trigger writes the event and moves the
/// binding), for the steps of phase MERGED the transition table lets go to CALLED_BACK.
std::string validate_update_sql(const detail::sql_text& t, const std::string& operation_id) {
  return std::string(detail::update_operation_by_key) +
         "step = " + std::to_string(workflow::code_of(workflow::step::CALLED_BACK)) +
         ", phase = 'VALIDATED', version = version + 1, next_wake_at = NULL, event_cause = 'validated via callback', "
         "event_actor = 'callback', event_instance = NULL WHERE operation_id = " +
         t.quote(operation_id) + " AND phase = 'MERGED' AND step IN (" +
         detail::steps_into([](workflow::phase p) { return p == workflow::phase::MERGED; },
                            workflow::step::CALLED_BACK) +
         ")";
}

}  // namespace

db_result<deploy_settlement> record_and_settle_deploy(session s, const deploy_callback_in& cb,
                                                      const std::string& payload_json,
                                                      const std::string& operation_id) {
  using R = db_result<deploy_settlement>;
  return detail::retry_on_deadlock<deploy_settlement>([&] {
    return guarded<deploy_settlement>(s, [&](sql::Connection& conn) -> R {
      const std::string key = deploy_ledger_key(cb.delivery_id);
      auto pending = prepare(conn, "SELECT outcome = 'PENDING' FROM callback_ledger WHERE delivery_id = ?");
      pending->setString(1, key);
      auto recorded_as = [&]() -> std::optional<record_outcome> {
        rs_ptr rs(pending->executeQuery());
        if (!rs->next()) return std::nullopt;
        return rs->getBoolean(1) ? record_outcome::duplicate_unapplied : record_outcome::duplicate;
      };
      // No read before the unit: a copy meets deploy_callback's unique key in it and is answered by
      // one read after the rollback (copies of what this process settled never get here: they are
      // answered from memory).
      deploy_settlement out;
      const detail::sql_text t(conn);
      const std::string id = t.quote(operation_id);
      auto delivery = delivery_insert(conn, cb);
      // What the ledger says, from the flip and the row as this unit left it: a MERGED row that did
      // not flip (or a missing one) stays PENDING for the general path.
      const std::string outcome =
          "(CASE WHEN @changeflow_flip = 1 THEN 'APPLIED' WHEN @changeflow_phase IS NULL OR "
          "@changeflow_phase = 'MERGED' THEN 'PENDING' WHEN @changeflow_phase IN (" +
          detail::terminal_phase_list() + ") THEN 'IGNORED_STALE' ELSE 'OUT_OF_ORDER' END)";
      auto ledger = prepare(conn,
                            "INSERT INTO callback_ledger (delivery_id, kind, operation_id, payload, outcome, "
                            "received_at, applied_at) VALUES (?, 'deploy', NULL, ?, " +
                                outcome + ", NOW(3), IF(" + outcome + " = 'PENDING', NULL, NOW(3)))");
      ledger->setString(1, key);
      detail::set_opt_string(*ledger, 2, payload_json.empty() ? std::nullopt : std::optional(payload_json));
      auto link = prepare(conn,
                          "INSERT IGNORE INTO callback_operation (ledger_id, operation_id) SELECT id, ? FROM "
                          "callback_ledger WHERE delivery_id = ? AND outcome <> 'PENDING'");
      link->setString(1, operation_id);
      link->setString(2, key);
      detail::transaction tx(conn, detail::transaction::begun_in_script{});
      std::string flip, phase;
      try {
        detail::run_script(
            conn,
            {"START TRANSACTION",
             // Operation first (the lock order of every unit that writes it), held
             // to COMMIT: see validate_if_deployed for the race this closes.
             "SELECT 1 FROM operation WHERE operation_id = " + id + " FOR UPDATE", delivery->bound_sql(),
             validate_update_sql(t, operation_id),
             // One SET, assigned in order; ROW_COUNT() is the flip's for all of it.
             "SET @changeflow_flip = ROW_COUNT(), @changeflow_phase = (SELECT phase FROM operation "
             "WHERE operation_id = " +
                 id + ")",
             // Not flipped and not ended: the report came before MERGED. Marked on the row, under its
             // lock, so the writer of MERGED knows to check the recorded reports (migration 17).
             detail::deploy_reported_mark_sql("= " + id) + " AND @changeflow_flip = 0", ledger->bound_sql(),
             link->bound_sql(), "COMMIT",
             // The answer, with the row as the flip left it (or newer) for the change's
             // status readers, in one statement.
             detail::answer_with_rows_sql("@changeflow_flip AS changeflow_flip, @changeflow_phase AS changeflow_phase",
                                          "operation_id = " + id + " AND @changeflow_flip = 1")},
            [&](sql::ResultSet& rs) {
              // The lock's SELECT 1 comes back too (one column); the answer has the row's.
              if (rs.getMetaData()->getColumnCount() <= 2 || !rs.next()) return;
              flip = rs.isNull("changeflow_flip") ? "" : rs.getString("changeflow_flip");
              phase = rs.isNull("changeflow_phase") ? "" : rs.getString("changeflow_phase");
              if (!rs.isNull("operation_id")) out.row = detail::read_operation(rs);
            });
      } catch (const sql::SQLException& e) {
        if (e.getErrorCode() != 1062) throw;
        // Nothing written: the delivery was recorded before (or by a copy that committed first).
        tx.rollback();
        out.recorded = recorded_as().value_or(record_outcome::duplicate);
        return R::success(out);
      }
      tx.ended_by_script();
      out.validated = flip == "1";
      if (out.validated) {
        out.outcome = deploy_outcome::APPLIED;
      } else if (!phase.empty() && phase != "MERGED") {
        auto p = workflow::parse_phase(phase);
        out.outcome = p && workflow::is_terminal(*p) ? deploy_outcome::IGNORED_STALE : deploy_outcome::OUT_OF_ORDER;
      }
      return R::success(out);
    });
  });
}

std::shared_ptr<group_unit> deploy_settle_unit(
    const deploy_callback_in& cb, const std::string& payload_json, const std::string& operation_id,
    std::function<void(db_context&, const db_result<deploy_settlement>&)> done) {
  // The flip first: it takes the operation's row lock before the delivery is recorded and holds it
  // to the group's COMMIT, which is the order validate_if_deployed relies on (see the header).
  // Then the delivery, the ledger row already classified and its link to the operation. A copy
  // (deploy_callback's unique key) or an operation that is not MERGED undoes the unit's writes;
  // record_and_settle_deploy then answers it alone.
  return detail::flip_unit(
      operation_id,
      [=](const detail::sql_text& t) {
        const std::string key = t.quote(deploy_ledger_key(cb.delivery_id));
        const auto opt = [&t](const std::optional<std::string>& v) { return v ? t.quote(*v) : std::string("NULL"); };
        return detail::flip_writes{
            validate_update_sql(t, operation_id),
            "INSERT INTO deploy_callback (delivery_id, project, mr_iid, pipeline_id, status, operation_ids, "
            "received_at) VALUES (" +
                t.quote(cb.delivery_id) + ", " + t.quote(cb.project) + ", " + std::to_string(cb.mr_iid) + ", " +
                (cb.pipeline_id ? std::to_string(*cb.pipeline_id) : std::string("NULL")) + ", " + t.quote(cb.status) +
                ", " + opt(cb.operation_ids_json) + ", NOW(3))",
            "INSERT INTO callback_ledger (delivery_id, kind, operation_id, payload, outcome, received_at, applied_at) "
            "VALUES (" +
                key + ", 'deploy', NULL, " + opt(payload_json.empty() ? std::nullopt : std::optional(payload_json)) +
                ", 'APPLIED', NOW(3), NOW(3)); "
                "INSERT IGNORE INTO callback_operation (ledger_id, operation_id) SELECT id, " +
                t.quote(operation_id) + " FROM callback_ledger WHERE delivery_id = " + key};
      },
      [=](db_context& ctx, std::optional<operation_row> row) {
        deploy_settlement out;
        out.recorded = record_outcome::inserted;
        out.outcome = deploy_outcome::APPLIED;
        out.validated = true;
        out.row = std::move(row);
        done(ctx, db_result<deploy_settlement>::success(std::move(out)));
      },
      [=](db_context& ctx) { done(ctx, record_and_settle_deploy(ctx, cb, payload_json, operation_id)); });
}

db_result<deploy_check> validate_if_deployed(session s, const std::string& operation_id, std::int64_t version,
                                             const std::string& project, std::int64_t mr_iid) {
  using R = db_result<deploy_check>;
  // Its statements autocommit one by one, so a deadlock victim (1213) is simply run again.
  return detail::retry_on_deadlock<deploy_check>([&] {
    return guarded<deploy_check>(s, [&](sql::Connection& conn) -> R {
      const detail::sql_text t(conn);
      const std::string id = t.quote(operation_id);
      const std::string created = "(SELECT created_at FROM operation WHERE operation_id = " + id + ")";
      const std::string recorded =
          "SELECT 1 FROM deploy_callback WHERE mr_iid = " + std::to_string(mr_iid) +
          " AND project = " + t.quote(project) + " AND (JSON_CONTAINS(operation_ids, JSON_QUOTE(" + id +
          ")) OR ((operation_ids IS NULL OR JSON_LENGTH(operation_ids) = 0) AND received_at > " + created + "))";
      deploy_check out;
      bool read = false;
      // The deliveries are read without locks (a statement of its own, reading what is committed), so
      // this check never waits on a callback's unit in progress; the race is decided by the row lock
      // that unit holds (see the header), not by this read.
      detail::run_script(
          conn,
          {"SET @changeflow_deployed = EXISTS (" + recorded + " AND status = 'success')",
           validate_update_sql(t, operation_id) + " AND version = " + std::to_string(version) +
               " AND @changeflow_deployed = 1",
           "SELECT ROW_COUNT(), (SELECT COALESCE(pipeline_id, 0) FROM deploy_callback WHERE status = 'failed' AND " +
               recorded.substr(recorded.find("mr_iid = ")) + " ORDER BY id DESC LIMIT 1)"},
          [&](sql::ResultSet& rs) {
            if (!rs.next()) return;
            read = true;
            out.validated = rs.getInt64(1) == 1;
            if (!out.validated && !rs.isNull(2)) out.failed_pipeline = rs.getInt64(2);
          });
      if (!read) return R::failure(db_outcome::fatal, "deploy check: its answer did not come back");
      return R::success(out);
    });
  });
}

db_result<done> set_deploy_outcome(session s, const std::string& delivery_id, deploy_outcome outcome,
                                   const std::vector<std::string>& operation_ids) {
  return set_ledger_outcome(s, deploy_ledger_key(delivery_id), to_string(outcome), operation_ids);
}

db_result<std::optional<std::int64_t>> deploy_watermark(session s, const std::string& project) {
  using V = std::optional<std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // One dive into idx_deploy_project_status_mr (project, status, mr_iid): the end of one range.
    auto st = prepare(conn, "SELECT MAX(mr_iid) AS m FROM deploy_callback WHERE status = 'success' AND project = ?");
    st->setString(1, project);
    rs_ptr rs(st->executeQuery());
    if (!rs->next()) return db_result<V>::success(std::nullopt);
    return db_result<V>::success(detail::opt_int64(*rs, "m"));
  });
}

db_result<bool> deploy_succeeded(session s, const std::string& project, std::int64_t mr_iid,
                                 const std::string& operation_id) {
  return guarded<bool>(s, [&](sql::Connection& conn) -> db_result<bool> {
    auto st = prepare(conn, std::string("SELECT 1 FROM deploy_callback WHERE mr_iid = ? AND status = 'success' AND "
                                        "project = ? AND ") +
                                names_operation + " LIMIT 1");
    st->setInt64(1, mr_iid);
    st->setString(2, project);
    st->setString(3, operation_id);
    st->setString(4, operation_id);
    rs_ptr rs(st->executeQuery());
    return db_result<bool>::success(rs->next());
  });
}

db_result<std::optional<std::int64_t>> deploy_failed_pipeline(session s, const std::string& project,
                                                              std::int64_t mr_iid, const std::string& operation_id) {
  using V = std::optional<std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, std::string("SELECT COALESCE(pipeline_id, 0) FROM deploy_callback WHERE mr_iid = ? AND "
                                        "status = 'failed' AND project = ? AND ") +
                                names_operation + " ORDER BY id DESC LIMIT 1");
    st->setInt64(1, mr_iid);
    st->setString(2, project);
    st->setString(3, operation_id);
    st->setString(4, operation_id);
    rs_ptr rs(st->executeQuery());
    if (!rs->next()) return db_result<V>::success(std::nullopt);
    return db_result<V>::success(rs->getInt64(1));
  });
}

}  // namespace changeflow::persistence
