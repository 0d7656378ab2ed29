#include "persistence/callback_repo.hpp"

#include "base/ids.hpp"

#include "persistence/callback_sql.hpp"
#include "persistence/operation_sql.hpp"
#include "workflow/decide.hpp"

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;
using workflow::step;

std::string_view to_string(callback_kind k) {
  switch (k) {
    case callback_kind::approval: return "approval";
    case callback_kind::deploy: return "deploy";
    case callback_kind::gitlab: return "gitlab";
  }
  return "deploy";
}

std::string_view to_string(callback_outcome o) {
  switch (o) {
    case callback_outcome::APPLIED: return "APPLIED";
    case callback_outcome::DUPLICATE: return "DUPLICATE";
    case callback_outcome::IGNORED_STALE: return "IGNORED_STALE";
    case callback_outcome::OUT_OF_ORDER: return "OUT_OF_ORDER";
    case callback_outcome::PENDING: return "PENDING";
    case callback_outcome::ID_REUSED: return "ID_REUSED";
  }
  return "PENDING";
}

namespace {
detail::stmt_ptr ledger_insert(sql::Connection& conn, const std::string& delivery_id, callback_kind kind,
                               const std::string& operation_id, const std::string& payload_json) {
  auto st = prepare(conn,
                    "INSERT INTO callback_ledger (delivery_id, kind, operation_id, payload, "
                    "outcome, received_at) "
                    "VALUES (?, ?, ?, ?, 'PENDING', NOW(3))");
  st->setString(1, delivery_id);
  st->setString(2, std::string(to_string(kind)));
  detail::set_opt_string(*st, 3, operation_id.empty() ? std::nullopt : std::optional(operation_id));
  detail::set_opt_string(*st, 4, payload_json.empty() ? std::nullopt : std::optional(payload_json));
  return st;
}

step target_of(approval_result r) {
  switch (r) {
    case approval_result::APPROVED: return step::APPROVAL_APPROVED;
    case approval_result::REJECTED: return step::APPROVAL_REJECTED;
    case approval_result::WITHDRAWN: return step::APPROVAL_WITHDRAWN;
  }
  return step::APPROVAL_REJECTED;
}
/// The guarded move of an operation awaiting approval to the decision's step (any step awaiting
/// approval that the transition table lets go there; the transition trigger writes the event and
/// moves the binding).
std::string approval_move_sql(const detail::sql_text& t, const std::string& delivery_id,
                              const std::string& operation_id, step target) {
  const std::string cause = "approval callback " + delivery_id;
  return std::string(detail::update_operation_by_key) + "step = " + std::to_string(workflow::code_of(target)) +
         ", phase = " + t.quote(std::string(workflow::to_string(workflow::phase_of(target)))) +
         ", version = version + 1, attempts = 0, event_cause = " + t.quote(cause.substr(0, 255)) +
         ", event_actor = 'callback', event_instance = NULL WHERE operation_id = " + t.quote(operation_id) +
         " AND step IN (" + detail::steps_into(&workflow::is_awaiting_approval, target) + ")";
}

/// The workflow's next step after an APPROVED decision, written in the decision's transaction
/// (approved_then_create): the actor's own transition (its cause, actor and instance, no wake), but
/// guarded by what makes the actor's choice CREATE_STARTED (the decision just taken, no MR yet) and
/// by the row's owner instead of a version; batching off is the caller's part.
std::string create_after_approval_sql(const detail::sql_text& t, const std::string& operation_id,
                                      const approved_then_create& then) {
  transition_request req;
  req.operation_id = operation_id;
  req.from = step::APPROVAL_APPROVED;
  req.to = step::CREATE_STARTED;
  req.cause = std::string(workflow::create_after_approval_cause);
  req.instance_id = then.instance_id;
  req.clear_wake = true;
  return detail::transition_set_sql(t, req) + " WHERE operation_id = " + t.quote(operation_id) +
         " AND step = " + std::to_string(workflow::code_of(req.from)) +
         " AND mr_iid IS NULL AND owner_instance = " + t.quote(then.instance_id);
}

/// An APPLIED decision: the step its transaction left (CREATE_STARTED when `went_on`, the
/// workflow's step written after it), the version of the row read with the answer, and the version
/// the transaction found (one write before it, or two when it went on).
approval_applied applied_as(step target, std::optional<operation_row> row, bool went_on) {
  approval_applied a{callback_outcome::APPLIED, went_on ? step::CREATE_STARTED : target, std::nullopt, std::nullopt,
                     std::nullopt};
  if (!row) return a;  // deleted right after the commit: the version is unknown
  a.new_version = row->version;
  a.found_version = row->version - (went_on ? 2 : 1);
  a.row = std::move(row);
  return a;
}

/// The approval callback as ONE round trip and one commit: the ledger row, the guarded transition
/// (any step awaiting approval that the transition table lets go to the decision's step; the
/// transition trigger writes the event and moves the binding) and the ledger's classification,
/// decided in SQL by the rules of the unit below. nullopt when the delivery id is already in the
/// ledger (a racing copy, or an id reused for another operation): nothing was written, and the
/// unit below answers it.
std::optional<approval_applied> record_and_apply_approval(sql::Connection& conn, const std::string& delivery_id,
                                                          const std::string& operation_id, approval_result result,
                                                          const std::string& payload_json,
                                                          const std::optional<approved_then_create>& then) {
  const step target = target_of(result);
  const detail::sql_text t(conn);
  const std::string id = t.quote(operation_id);
  const std::string key = t.quote(delivery_id);
  auto ins = ledger_insert(conn, delivery_id, callback_kind::approval, operation_id, payload_json);
  const std::string move = approval_move_sql(t, delivery_id, operation_id, target);
  // No flip: OUT_OF_ORDER when a decision already took effect, IGNORED_STALE otherwise (no such
  // operation, its binding replaced by a re-apply, not yet asked, timed out). A SET of its own: the
  // flip's value is not visible to a later assignment of the same SET.
  const std::string outcome =
      "SET @changeflow_outcome = CASE WHEN @changeflow_flip = 1 THEN 'APPLIED' "
      "WHEN NOT EXISTS (SELECT 1 FROM binding WHERE operation_id = " +
      id + ") THEN 'IGNORED_STALE' WHEN EXISTS (SELECT 1 FROM operation_event WHERE operation_id = " + id +
      " AND to_step IN (" + std::to_string(workflow::code_of(step::APPROVAL_APPROVED)) + ", " +
      std::to_string(workflow::code_of(step::APPROVAL_REJECTED)) + ", " +
      std::to_string(workflow::code_of(step::APPROVAL_WITHDRAWN)) + ")) THEN 'OUT_OF_ORDER' ELSE 'IGNORED_STALE' END";
  detail::transaction tx(conn, detail::transaction::begun_in_script{});
  std::string flip, classified;
  bool went_on = false;              // the workflow's next step was written too
  std::optional<operation_row> row;  // its version is the one the decision wrote (or a later one)
  std::vector<std::string> script{"START TRANSACTION",
                                  ins->bound_sql(),
                                  move,
                                  "SET @changeflow_flip = ROW_COUNT()",
                                  outcome,
                                  "UPDATE callback_ledger SET outcome = @changeflow_outcome, applied_at = NOW(3) "
                                  "WHERE delivery_id = " +
                                      key};
  if (then && target == step::APPROVAL_APPROVED) {
    script.push_back("IF @changeflow_flip = 1 THEN " + create_after_approval_sql(t, operation_id, *then) +
                     "; SET @changeflow_then = ROW_COUNT(); ELSE SET @changeflow_then = 0; END IF");
  } else {
    script.push_back("SET @changeflow_then = 0");
  }
  script.push_back("COMMIT");
  // The answer, with the row as the decision left it (or newer) in the same result: an operation
  // whose wait was passivated gets its actor back from it without a read.
  script.push_back(detail::answer_with_rows_sql(
      "@changeflow_flip AS changeflow_flip, @changeflow_outcome AS changeflow_outcome, @changeflow_then AS "
      "changeflow_then",
      "operation_id = " + id + " AND @changeflow_flip = 1"));
  try {
    detail::run_script(conn, script, [&](sql::ResultSet& rs) {
      if (!rs.next()) return;
      flip = rs.isNull("changeflow_flip") ? "" : rs.getString("changeflow_flip");
      classified = rs.isNull("changeflow_outcome") ? "" : rs.getString("changeflow_outcome");
      went_on = !rs.isNull("changeflow_then") && rs.getInt("changeflow_then") == 1;
      if (!rs.isNull("operation_id")) row = detail::read_operation(rs);
    });
  } catch (const sql::SQLException& e) {
    if (e.getErrorCode() != 1062) throw;
    tx.rollback();
    return std::nullopt;
  }
  tx.ended_by_script();
  if (flip == "1") return applied_as(target, std::move(row), went_on);
  return approval_applied{
      classified == "OUT_OF_ORDER" ? callback_outcome::OUT_OF_ORDER : callback_outcome::IGNORED_STALE, {}, {}, {}};
}
}  // namespace

db_result<approval_applied> apply_approval_callback(session s, const std::string& delivery_id,
                                                    const std::string& operation_id, approval_result result,
                                                    const std::string& payload_json,
                                                    const std::optional<approved_then_create>& then) {
  using R = db_result<approval_applied>;
  // A deadlock, or on a cluster a certification failure against the other copy or the actor's own
  // write (1213), rolled the whole unit back: it is run again (the ledger read and the version
  // guard decide afresh), so a copy that lost is answered DUPLICATE instead of a 500 the sender
  // may give up on.
  return detail::retry_on_deadlock<approval_applied>([&] {
    return guarded<approval_applied>(s, [&](sql::Connection& conn) -> R {
      // What the ledger holds under this delivery id: nothing, this operation's approval, or another's.
      enum class recorded { none, same, other };
      auto seen = prepare(conn, "SELECT kind, operation_id FROM callback_ledger WHERE delivery_id = ?");
      seen->setString(1, delivery_id);
      auto recorded_as = [&] {
        rs_ptr rs(seen->executeQuery());
        if (!rs->next()) return recorded::none;
        return detail::str(*rs, "kind") == to_string(callback_kind::approval) &&
                       detail::opt_string(*rs, "operation_id").value_or("") == operation_id
                   ? recorded::same
                   : recorded::other;
      };
      // The first delivery goes straight to its one-text unit: no read before it. A copy (this
      // process answers the copies of what it settled from memory, so a copy here came to another
      // instance, after a restart, or raced the first) meets the ledger's unique key in that unit,
      // which rolls back; it is then answered by one read. A copy racing the first one's uncommitted
      // row waits on that key until the first commits.
      if (auto settled = record_and_apply_approval(conn, delivery_id, operation_id, result, payload_json, then)) {
        return R::success(*settled);
      }
      if (recorded_as() == recorded::same) return R::success({callback_outcome::DUPLICATE, {}, {}});
      detail::transaction tx(conn);
      auto ins = ledger_insert(conn, delivery_id, callback_kind::approval, operation_id, payload_json);
      if (!detail::insert_unless_duplicate(*ins)) {
        // A duplicate only when the first delivery with this id was for this operation. Otherwise the
        // id was reused for another one: recorded under a key of its own (so the change's page and
        // the attention view list it, and its retries stay one row) and refused.
        if (recorded_as() != recorded::other) return R::success({callback_outcome::DUPLICATE, {}, {}});
        std::string key = "reused:" + operation_id + ":" + delivery_id;
        if (key.size() > 191) key = "reused:" + ids::sha256_hex(key);
        auto reused = prepare(conn,
                              "INSERT INTO callback_ledger (delivery_id, kind, operation_id, payload, outcome, "
                              "received_at, applied_at) VALUES (?, ?, ?, ?, 'ID_REUSED', NOW(3), NULL)");
        reused->setString(1, key);
        reused->setString(2, std::string(to_string(callback_kind::approval)));
        reused->setString(3, operation_id);
        detail::set_opt_string(*reused, 4, payload_json.empty() ? std::nullopt : std::optional(payload_json));
        detail::insert_unless_duplicate(*reused);
        tx.commit();
        return R::success({callback_outcome::ID_REUSED, {}, {}});
      }

      auto finish = [&](approval_applied a) -> R {
        auto st = prepare(conn, "UPDATE callback_ledger SET outcome = ?, applied_at = NOW(3) WHERE delivery_id = ?");
        st->setString(1, std::string(to_string(a.outcome)));
        st->setString(2, delivery_id);
        st->executeUpdate();
        tx.commit();
        return R::success(std::move(a));
      };

      // Lock order: operation, then binding.
      auto so = prepare(conn, "SELECT step, version FROM operation WHERE operation_id = ? FOR UPDATE");
      so->setString(1, operation_id);
      rs_ptr ors(so->executeQuery());
      if (!ors->next()) return finish({callback_outcome::IGNORED_STALE, {}, {}});
      auto current = workflow::step_from_code(ors->getInt("step"));
      const std::int64_t version = ors->getInt64("version");

      auto sb = prepare(conn, "SELECT phase FROM binding WHERE operation_id = ? FOR UPDATE");
      sb->setString(1, operation_id);
      rs_ptr brs(sb->executeQuery());
      if (!brs->next() || !current) return finish({callback_outcome::IGNORED_STALE, {}, {}});
      auto bphase = workflow::parse_phase(detail::str(*brs, "phase"));
      const step target = target_of(result);

      if (!bphase || !workflow::is_awaiting_approval(*bphase) || !workflow::is_allowed(*current, target)) {
        // A decision already took effect (e.g. WITHDRAWN after APPROVED, APPROVED after REJECTED):
        // the event is out of order. Anything else (not yet asked, timed out) is stale.
        auto decided =
            prepare(conn, "SELECT 1 FROM operation_event WHERE operation_id = ? AND to_step IN (?, ?, ?) LIMIT 1");
        decided->setString(1, operation_id);
        decided->setInt(2, workflow::code_of(step::APPROVAL_APPROVED));
        decided->setInt(3, workflow::code_of(step::APPROVAL_REJECTED));
        decided->setInt(4, workflow::code_of(step::APPROVAL_WITHDRAWN));
        rs_ptr drs(decided->executeQuery());
        return finish({drs->next() ? callback_outcome::OUT_OF_ORDER : callback_outcome::IGNORED_STALE, {}, {}});
      }

      transition_request req;
      req.operation_id = operation_id;
      req.expected_version = version;
      req.from = *current;
      req.to = target;
      req.cause = "approval callback " + delivery_id;
      req.actor = "callback";
      auto applied = detail::apply_transition(conn, req);
      if (!applied.ok()) return R::failure(applied.error);  // cannot happen under the row lock; rolled back
      return finish({callback_outcome::APPLIED, target, applied.value});
    });
  });
}

std::shared_ptr<group_unit> approval_callback_unit(
    const std::string& delivery_id, const std::string& operation_id, approval_result result,
    const std::string& payload_json, std::function<void(db_context&, const db_result<approval_applied>&)> done,
    const std::optional<approved_then_create>& then) {
  const step target = target_of(result);
  // The flip, then the ledger row already classified: two writes where the unit alone needs three.
  // A copy (the ledger's unique key) or an operation not awaiting this decision is undone; the
  // full rules then answer it alone.
  return detail::flip_unit(
      operation_id,
      [=](const detail::sql_text& t) {
        return detail::flip_writes{
            approval_move_sql(t, delivery_id, operation_id, target),
            "INSERT INTO callback_ledger (delivery_id, kind, operation_id, payload, outcome, received_at, "
            "applied_at) VALUES (" +
                t.quote(delivery_id) + ", 'approval', " + t.quote(operation_id) + ", " +
                (payload_json.empty() ? std::string("NULL") : t.quote(payload_json)) + ", 'APPLIED', NOW(3), NOW(3))",
            then && target == step::APPROVAL_APPROVED ? create_after_approval_sql(t, operation_id, *then) : ""};
      },
      [=](db_context& ctx, std::optional<operation_row> row) {
        // The row was read in the group's transaction, under the flip's lock: CREATE_STARTED there
        // is this unit's own follow-up write.
        const bool went_on = then && row && row->step == step::CREATE_STARTED;
        done(ctx, db_result<approval_applied>::success(applied_as(target, std::move(row), went_on)));
      },
      [=](db_context& ctx) {
        done(ctx, apply_approval_callback(ctx, delivery_id, operation_id, result, payload_json, then));
      });
}

namespace {
std::string gitlab_ledger_key(const std::string& delivery_id) {
  return "gitlab:" + delivery_id;
}
}  // namespace

db_result<record_outcome> record_gitlab_delivery(session s, const std::string& delivery_id,
                                                 const std::string& payload_json,
                                                 const std::optional<merge_commit>& merged) {
  using R = db_result<record_outcome>;
  return guarded<record_outcome>(s, [&](sql::Connection& conn) -> R {
    detail::transaction tx(conn);
    auto ins = ledger_insert(conn, gitlab_ledger_key(delivery_id), callback_kind::gitlab, "", payload_json);
    if (!detail::insert_unless_duplicate(*ins)) {
      tx.rollback();
      auto pending = prepare(conn, "SELECT outcome = 'PENDING' FROM callback_ledger WHERE delivery_id = ?");
      pending->setString(1, gitlab_ledger_key(delivery_id));
      rs_ptr rs(pending->executeQuery());
      bool unapplied = rs->next() && rs->getBoolean(1);
      return R::success(unapplied ? record_outcome::duplicate_unapplied : record_outcome::duplicate);
    }
    if (merged) {
      auto mc = prepare(conn, "INSERT IGNORE INTO gitlab_merge_commit (project, sha, mr_iid) VALUES (?, ?, ?)");
      mc->setString(1, merged->project);
      mc->setString(2, merged->sha);
      mc->setInt64(3, merged->mr_iid);
      mc->executeUpdate();
    }
    tx.commit();
    return R::success(record_outcome::inserted);
  });
}

db_result<done> set_ledger_outcome(session s, const std::string& ledger_key, std::string_view outcome,
                                   const std::vector<std::string>& operation_ids) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    std::optional<detail::transaction> tx;
    if (!operation_ids.empty()) tx.emplace(conn);
    detail::settle_ledger(conn, ledger_key, outcome, operation_ids);
    if (tx) tx->commit();
    return db_result<done>::success({});
  });
}

bool detail::settle_ledger(sql::Connection& conn, const std::string& ledger_key, std::string_view outcome,
                           const std::vector<std::string>& operation_ids) {
  // First classification wins: a redelivery that applied a PENDING delivery again does not
  // overwrite the outcome its first application recorded.
  auto st = prepare(conn,
                    "UPDATE callback_ledger SET outcome = ?, applied_at = NOW(3) WHERE delivery_id = ? "
                    "AND outcome = 'PENDING'");
  st->setString(1, std::string(outcome));
  st->setString(2, ledger_key);
  const bool first = st->executeUpdate() == 1;
  if (!first) return false;
  auto link = prepare(conn,
                      "INSERT IGNORE INTO callback_operation (ledger_id, operation_id) SELECT id, ? FROM "
                      "callback_ledger WHERE delivery_id = ?");
  for (const auto& id : operation_ids) {
    link->setString(1, id);
    link->setString(2, ledger_key);
    link->executeUpdate();
  }
  return true;
}

db_result<done> set_gitlab_outcome(session s, const std::string& delivery_id, std::string_view outcome,
                                   const std::vector<std::string>& operation_ids) {
  return set_ledger_outcome(s, gitlab_ledger_key(delivery_id), outcome, operation_ids);
}

db_result<std::optional<std::int64_t>> mr_of_merge_commit(session s, const std::string& project,
                                                          const std::string& sha) {
  using V = std::optional<std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    // A prefix match serves GitLab's short_sha; the caller passes hex digits only, so LIKE has no
    // wildcard of the sender's making. Two rows: an ambiguous prefix matches nothing.
    auto st = prepare(conn, "SELECT mr_iid FROM gitlab_merge_commit WHERE project = ? AND sha LIKE ? LIMIT 2");
    st->setString(1, project);
    st->setString(2, sha + "%");
    rs_ptr rs(st->executeQuery());
    if (!rs->next()) return db_result<V>::success(std::nullopt);
    auto iid = rs->getInt64("mr_iid");
    if (rs->next()) return db_result<V>::success(std::nullopt);
    return db_result<V>::success(iid);
  });
}

namespace detail {
bool insert_pending_ledger(sql::Connection& conn, const std::string& ledger_key, const std::string& kind,
                           const std::string& payload_json) {
  auto led = prepare(conn,
                     "INSERT INTO callback_ledger (delivery_id, kind, operation_id, payload, outcome, "
                     "received_at) VALUES (?, ?, NULL, ?, 'PENDING', NOW(3))");
  led->setString(1, ledger_key);
  led->setString(2, kind);
  set_opt_string(*led, 3, payload_json.empty() ? std::nullopt : std::optional(payload_json));
  return insert_unless_duplicate(*led);
}
}  // namespace detail

}  // namespace changeflow::persistence
