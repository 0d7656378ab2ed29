#include "persistence/batch_repo.hpp"

#include "persistence/batch_sql.hpp"
#include "persistence/operation_sql.hpp"
#include "persistence/sql_util.hpp"
#include "workflow/transitions.hpp"

#include <algorithm>

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

std::string_view to_string(batch_status s) {
  switch (s) {
    case batch_status::RUNNING: return "RUNNING";
    case batch_status::SUCCEEDED: return "SUCCEEDED";
    case batch_status::FAILED: return "FAILED";
    case batch_status::BLOCKED: return "BLOCKED";
  }
  return "UNKNOWN";
}

std::string_view to_string(claim_kind k) {
  switch (k) {
    case claim_kind::slot_occupied: return "slot_occupied";
    case claim_kind::empty: return "empty";
    case claim_kind::claimed: return "claimed";
    case claim_kind::preempted: return "preempted";
  }
  return "preempted";
}

namespace detail {
bool admit_operation(sql::Connection& conn, const std::string& operation_id) {
  auto adm = prepare(conn,
                     "INSERT INTO merge_batch_request (operation_id, repository, target_branch, created_at) "
                     "SELECT operation_id, repository, target_branch, NOW(3) FROM operation "
                     "WHERE operation_id = ?");
  adm->setString(1, operation_id);
  return insert_unless_duplicate(*adm);
}
}  // namespace detail

db_result<std::vector<batch_partition>> waiting_partitions(session s) {
  using V = std::vector<batch_partition>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn,
                      "SELECT DISTINCT repository, target_branch FROM merge_batch_request WHERE batch_id IS NULL "
                      "ORDER BY repository, target_branch");
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back({detail::str(*rs, "repository"), detail::str(*rs, "target_branch")});
    return db_result<V>::success(std::move(out));
  });
}

namespace {
std::int64_t last_insert_id(sql::Connection& conn) {
  std::unique_ptr<sql::Statement> st(conn.createStatement());
  rs_ptr rs(st->executeQuery("SELECT LAST_INSERT_ID()"));
  rs->next();
  return rs->getInt64(1);
}

/// Sum of affected rows of a chunked "<prefix> IN (...)" statement over request ids.
int update_requests_in(sql::Connection& conn, const std::string& prefix, const std::vector<std::int64_t>& ids,
                       const std::function<int(detail::statement&)>& bind_leading) {
  int affected = 0;
  for (const auto& chunk : detail::chunks(ids)) {
    auto st = prepare(conn, prefix + " IN (" + detail::placeholders(chunk.size()) + ")");
    int next = bind_leading(*st);
    for (auto id : chunk) st->setInt64(next++, id);
    affected += st->executeUpdate();
  }
  return affected;
}

void append_history(sql::Connection& conn, std::int64_t batch_id, const char* event, const std::string& where,
                    const std::function<void(detail::statement&, int)>& bind_where) {
  auto st = prepare(conn, std::string("INSERT INTO merge_batch_history (batch_id, operation_id, "
                                      "request_id, event, split_group, at) "
                                      "SELECT ?, operation_id, id, '") +
                              event + "', split_group, NOW(3) FROM merge_batch_request WHERE " + where);
  st->setInt64(1, batch_id);
  bind_where(*st, 2);
  st->executeUpdate();
}

bool guarded_fail(sql::Connection& conn, std::int64_t batch_id, batch_status expected, const std::string& reason) {
  auto st = prepare(conn, "UPDATE merge_batch SET status = 3, failure_reason = ? WHERE id = ? AND status = ?");
  st->setString(1, reason.substr(0, 1024));
  st->setInt64(2, batch_id);
  st->setInt(3, static_cast<int>(expected));
  return st->executeUpdate() == 1;
}

/// Claimed members of the batch (operation.batch_id is set when they are marked claimed).
std::vector<std::string> lock_claimed_members(sql::Connection& conn, std::int64_t batch_id) {
  return detail::lock_members(
      conn, "batch_id = ?",
      [&](detail::statement& st, int i) {
        st.setInt64(i, batch_id);
        return i + 1;
      },
      workflow::step::BATCH_CLAIMED);
}

detail::member_move back_to_waiting(const std::string& cause) {
  return {workflow::step::BATCH_CLAIMED,
          workflow::step::BATCH_WAITING,
          cause,
          "",
          ", batch_id = NULL, mr_iid = NULL, mr_url = NULL",
          {},
          0};
}
/// A member leaving the batch path: the same cause goes to its timeline and to last_error, so the
/// API and the console name it without reading the timeline.
detail::member_move failed_alone(const std::string& cause) {
  return {workflow::step::BATCH_CLAIMED,
          workflow::step::BATCH_FAILED,
          cause,
          "",
          ", last_error = ?",
          [cause](detail::statement& st, int i) { st.setString(i, cause.substr(0, 1024)); },
          1};
}

/// The failed batch's claimed member operations: those `waits_again` accepts go back to
/// BATCH_WAITING, the others end in BATCH_FAILED. Runs inside the settlement transaction.
void settle_member_operations(sql::Connection& conn, std::int64_t batch_id,
                              const std::function<bool(const std::string&)>& waits_again,
                              const std::string& requeue_cause, const std::string& failed_cause) {
  std::vector<std::string> back, failed;
  for (const auto& id : lock_claimed_members(conn, batch_id)) (waits_again(id) ? back : failed).push_back(id);
  detail::move_members(conn, back, back_to_waiting(requeue_cause));
  detail::move_members(conn, failed, failed_alone(failed_cause));
}

/// These members' waiting rows leave the waiting set for good (history REMOVED).
void remove_requests(sql::Connection& conn, std::int64_t batch_id, const std::vector<std::string>& operation_ids) {
  for (const auto& chunk : detail::chunks(operation_ids)) {
    const std::string in = " IN (" + detail::placeholders(chunk.size()) + ")";
    const auto bind = [&](detail::statement& st, int i) {
      st.setInt64(i++, batch_id);
      for (const auto& id : chunk) st.setString(i++, id);
    };
    append_history(conn, batch_id, "REMOVED", "batch_id = ? AND operation_id" + in, bind);
    auto del = prepare(conn, "DELETE FROM merge_batch_request WHERE batch_id = ? AND operation_id" + in);
    bind(*del, 1);
    del->executeUpdate();
  }
}

/// Waiting rows whose operation is no longer BATCH_WAITING (closed or forced to fail by an operator
/// while it waited; those paths do not know about the waiting set) leave it. Read without locks and
/// deleted by primary key, apart from the claim transaction, so admissions never wait on it (I3).
/// Not worth a history row: the operation's own timeline records why it left.
void remove_abandoned_requests(sql::Connection& conn) {
  auto sel = prepare(conn,
                     "SELECT r.id FROM merge_batch_request r JOIN operation o ON o.operation_id = "
                     "r.operation_id WHERE r.batch_id IS NULL AND o.step <> ?");
  sel->setInt(1, workflow::code_of(workflow::step::BATCH_WAITING));
  rs_ptr rs(sel->executeQuery());
  std::vector<std::int64_t> ids;
  while (rs->next()) ids.push_back(rs->getInt64(1));
  update_requests_in(conn, "DELETE FROM merge_batch_request WHERE batch_id IS NULL AND id", ids,
                     [](detail::statement&) { return 1; });
}

}  // namespace

namespace {
/// Steps 1-3 of claim_round inside its transaction: slot, waiting read, guarded claim, history.
claim_result claim_in(sql::Connection& conn, const batch_partition& where, int max_members, const claim_hook& hook,
                      const std::string& instance_id) {
  // 1. Take the partition's slot (the claimer owns the batch). A duplicate key leaves this
  // transaction usable and with nothing written.
  try {
    auto ins = prepare(conn,
                       "INSERT INTO merge_batch (status, repository, target_branch, owner_instance) "
                       "VALUES (1, ?, ?, NULLIF(?, ''))");
    ins->setString(1, where.repository);
    ins->setString(2, where.target_branch);
    ins->setString(3, instance_id);
    ins->executeUpdate();
  } catch (const sql::SQLException& e) {
    if (e.getErrorCode() == 1062) return claim_result{claim_kind::slot_occupied, 0, {}};
    // Several claimers inserting the slot while a holder is still open can deadlock on the unique
    // check (shared locks, then insert intention). The server rolled this transaction back and
    // another claimer holds or is taking the slot: that is the same answer.
    if (e.getErrorCode() == 1213) return claim_result{claim_kind::slot_occupied, 0, {}};
    throw;
  }
  const std::int64_t batch_id = last_insert_id(conn);
  if (hook) hook(claim_stage::slot_taken);

  // 2. Plain read, no FOR UPDATE: the slot keeps other claimers out, and the guarded UPDATE below
  // catches anything unexpected. A locking range read would block admissions (I3).
  // `created_at < NOW(3)`: rows admitted in this very millisecond wait for the next round (DB
  // clock).
  // Only rows whose operation still waits: one closed or forced to fail while waiting left the
  // batch path, and its row was removed before this transaction (or is skipped if that happened
  // in between; the next claim removes it). A row with no operation behind it (the batch
  // repository's tests seed the waiting set so) has nothing that could leave and stays claimable.
  auto sel = prepare(conn,
                     "SELECT r.id, r.operation_id, r.split_group FROM merge_batch_request r "
                     "LEFT JOIN operation o ON o.operation_id = r.operation_id "
                     "WHERE r.repository = ? AND r.target_branch = ? AND r.batch_id IS NULL "
                     "AND r.created_at < CURRENT_TIMESTAMP(3) "
                     "AND (o.operation_id IS NULL OR o.step = ?) ORDER BY r.created_at, r.id LIMIT ?");
  sel->setString(1, where.repository);
  sel->setString(2, where.target_branch);
  sel->setInt(3, workflow::code_of(workflow::step::BATCH_WAITING));
  sel->setInt(4, max_members);
  rs_ptr rs(sel->executeQuery());
  std::vector<batch_member> members;
  while (rs->next()) {
    members.push_back({rs->getInt64("id"), detail::str(*rs, "operation_id"), rs->getInt("split_group")});
  }
  if (hook) hook(claim_stage::waiting_read);
  if (members.empty()) return claim_result{claim_kind::empty, 0, {}};  // rollback releases the slot
  // Bisection halves are claimed one at a time: keep the split group of the oldest waiting row.
  const int group = members.front().split_group;
  members.erase(std::remove_if(members.begin(), members.end(), [&](auto& m) { return m.split_group != group; }),
                members.end());

  // 3. Guarded claim: only still-unclaimed rows, and all of them (I2).
  std::vector<std::int64_t> ids;
  for (const auto& m : members) ids.push_back(m.request_id);
  int claimed = update_requests_in(conn, "UPDATE merge_batch_request SET batch_id = ? WHERE batch_id IS NULL AND id",
                                   ids, [&](detail::statement& st) {
                                     st.setInt64(1, batch_id);
                                     return 2;
                                   });
  if (claimed != static_cast<int>(ids.size())) return claim_result{claim_kind::preempted, 0, {}};
  if (hook) hook(claim_stage::members_claimed);

  // 4. Append-only membership, one bulk statement.
  append_history(conn, batch_id, "CLAIMED", "batch_id = ?", [&](auto& st, int i) { st.setInt64(i, batch_id); });
  return claim_result{claim_kind::claimed, batch_id, std::move(members)};
}
}  // namespace

db_result<done> finish_batch(session s, std::int64_t batch_id, batch_status expected, batch_status next,
                             const std::optional<std::string>& reason) {
  return detail::retry_on_deadlock<done>([&] {
    return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
      auto st = prepare(conn,
                        "UPDATE merge_batch SET status = ?, failure_reason = COALESCE(?, failure_reason) "
                        "WHERE id = ? AND status = ?");
      st->setInt(1, static_cast<int>(next));
      detail::set_opt_string(*st, 2, reason ? std::optional(reason->substr(0, 1024)) : std::nullopt);
      st->setInt64(3, batch_id);
      st->setInt(4, static_cast<int>(expected));
      if (st->executeUpdate() != 1) {
        return db_result<done>::failure(
            db_outcome::preempted, "batch " + std::to_string(batch_id) + " is not " + std::string(to_string(expected)));
      }
      return db_result<done>::success({});
    });
  });
}

db_result<int> settle_failed_batch(session s, std::int64_t batch_id, batch_status expected, member_reset reset,
                                   const std::string& reason, const std::vector<std::string>& leaving,
                                   const std::string& leaving_cause) {
  return detail::retry_on_deadlock<int>([&] {
    return guarded<int>(s, [&](sql::Connection& conn) -> db_result<int> {
      detail::transaction tx(conn);
      // First: if another path (timeout sweep, the running task) settled it already, stop here.
      if (!guarded_fail(conn, batch_id, expected, reason)) {
        return db_result<int>::failure(db_outcome::preempted, "batch " + std::to_string(batch_id) + " already settled");
      }
      const bool requeue = reset == member_reset::requeue;
      const auto prefix = "batch " + std::to_string(batch_id) + " failed: ";
      const auto leaves = [&](const std::string& id) {
        return std::find(leaving.begin(), leaving.end(), id) != leaving.end();
      };
      // Member operations follow their processing record (no-op for rows without an operation).
      settle_member_operations(
          conn, batch_id, [&](const std::string& id) { return requeue && !leaves(id); }, prefix + reason,
          prefix + (requeue && !leaving_cause.empty() ? leaving_cause : reason));
      if (requeue) remove_requests(conn, batch_id, leaving);
      append_history(conn, batch_id, requeue ? "REQUEUED" : "REMOVED", "batch_id = ?",
                     [&](auto& st, int i) { st.setInt64(i, batch_id); });
      auto st = prepare(conn, requeue ? "UPDATE merge_batch_request SET batch_id = NULL WHERE batch_id = ?"
                                      : "DELETE FROM merge_batch_request WHERE batch_id = ?");
      st->setInt64(1, batch_id);
      int n = st->executeUpdate();
      tx.commit();
      return db_result<int>::success(n);
    });
  });
}

db_result<int> requeue_members(session s, std::int64_t batch_id, const std::vector<std::vector<std::string>>& groups,
                               const std::string& reason) {
  return detail::retry_on_deadlock<int>([&] {
    return guarded<int>(s, [&](sql::Connection& conn) -> db_result<int> {
      detail::transaction tx(conn);
      if (!guarded_fail(conn, batch_id, batch_status::RUNNING, reason)) {
        return db_result<int>::failure(db_outcome::preempted, "batch " + std::to_string(batch_id) + " is not RUNNING");
      }
      // Member operations: the ones in a group wait again, the others failed alone.
      const auto cause = "batch " + std::to_string(batch_id) + ": " + reason;
      settle_member_operations(
          conn, batch_id,
          [&](const std::string& id) {
            return std::any_of(groups.begin(), groups.end(),
                               [&](const auto& g) { return std::find(g.begin(), g.end(), id) != g.end(); });
          },
          cause, cause);
      // Fresh group numbers above every existing one of this batch's partition; only the
      // partition's slot holder requeues into it, so no race here (other partitions number their
      // groups on their own, and every claim and history read below stays inside the partition).
      auto part = prepare(conn, "SELECT repository, target_branch FROM merge_batch WHERE id = ?");
      part->setInt64(1, batch_id);
      rs_ptr prs(part->executeQuery());
      prs->next();
      const batch_partition where{detail::str(*prs, "repository"), detail::str(*prs, "target_branch")};
      auto q = prepare(conn,
                       "SELECT COALESCE(MAX(split_group), 0) FROM merge_batch_request WHERE repository = ? "
                       "AND target_branch = ?");
      q->setString(1, where.repository);
      q->setString(2, where.target_branch);
      rs_ptr rs(q->executeQuery());
      rs->next();
      const int base = rs->getInt(1);
      int requeued = 0;
      for (std::size_t g = 0; g < groups.size(); ++g) {
        for (const auto& chunk : detail::chunks(groups[g])) {
          auto st = prepare(conn,
                            "UPDATE merge_batch_request SET batch_id = NULL, split_group = ? "
                            "WHERE batch_id = ? AND operation_id IN (" +
                                detail::placeholders(chunk.size()) + ")");
          st->setInt(1, base + static_cast<int>(g) + 1);
          st->setInt64(2, batch_id);
          for (std::size_t i = 0; i < chunk.size(); ++i) st->setString(static_cast<int>(i + 3), chunk[i]);
          requeued += st->executeUpdate();
        }
      }
      append_history(conn, batch_id, "REQUEUED",
                     "batch_id IS NULL AND split_group > ? AND repository = ? AND target_branch = ?",
                     [&](auto& st, int i) {
                       st.setInt(i++, base);
                       st.setString(i++, where.repository);
                       st.setString(i, where.target_branch);
                     });
      append_history(conn, batch_id, "REMOVED", "batch_id = ?", [&](auto& st, int i) { st.setInt64(i, batch_id); });
      auto del = prepare(conn, "DELETE FROM merge_batch_request WHERE batch_id = ?");
      del->setInt64(1, batch_id);
      del->executeUpdate();
      tx.commit();
      return db_result<int>::success(requeued);
    });
  });
}

namespace {
constexpr const char* batch_columns =
    "SELECT id, status, repository, target_branch, owner_instance, mr_iid, branch, split_depth, parent_batch_id, "
    "failure_reason, "
    "CAST(ROUND(UNIX_TIMESTAMP(created_at) * 1000) AS SIGNED) AS created_at_ms, "
    "CAST(ROUND(UNIX_TIMESTAMP(updated_at) * 1000) AS SIGNED) AS updated_at_ms FROM merge_batch ";

batch_row read_batch(sql::ResultSet& rs) {
  batch_row b;
  b.id = rs.getInt64("id");
  b.status = static_cast<batch_status>(rs.getInt("status"));
  b.partition = {detail::str(rs, "repository"), detail::str(rs, "target_branch")};
  b.owner_instance = detail::opt_string(rs, "owner_instance");
  b.mr_iid = detail::opt_int64(rs, "mr_iid");
  b.branch = detail::opt_string(rs, "branch");
  b.split_depth = rs.getInt("split_depth");
  b.parent_batch_id = detail::opt_int64(rs, "parent_batch_id");
  b.failure_reason = detail::opt_string(rs, "failure_reason");
  b.created_at_ms = rs.getInt64("created_at_ms");
  b.updated_at_ms = rs.getInt64("updated_at_ms");
  return b;
}
}  // namespace

db_result<batch_row> load_batch(session s, std::int64_t batch_id) {
  return guarded<batch_row>(s, [&](sql::Connection& conn) -> db_result<batch_row> {
    auto st = prepare(conn, std::string(batch_columns) + "WHERE id = ?");
    st->setInt64(1, batch_id);
    rs_ptr rs(st->executeQuery());
    if (!rs->next())
      return db_result<batch_row>::failure(db_outcome::not_found, "no batch " + std::to_string(batch_id));
    auto b = read_batch(*rs);
    auto ms = prepare(conn,
                      "SELECT operation_id FROM merge_batch_history WHERE batch_id = ? AND event = "
                      "'CLAIMED' ORDER BY id");
    ms->setInt64(1, batch_id);
    rs_ptr mrs(ms->executeQuery());
    while (mrs->next()) b.members.push_back(detail::str(*mrs, "operation_id"));
    return db_result<batch_row>::success(std::move(b));
  });
}

db_result<std::vector<batch_row>> list_batches(session s, std::int64_t before_id, int limit) {
  using V = std::vector<batch_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, std::string(batch_columns) + "WHERE (? = 0 OR id < ?) ORDER BY id DESC LIMIT ?");
    st->setInt64(1, before_id);
    st->setInt64(2, before_id);
    st->setInt(3, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(read_batch(*rs));
    return db_result<V>::success(std::move(out));
  });
}

db_result<std::vector<std::int64_t>> sweep_running_older_than(session s, int seconds) {
  using V = std::vector<std::int64_t>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn,
                      "SELECT id FROM merge_batch WHERE status = 1 "
                      "AND created_at < DATE_SUB(CURRENT_TIMESTAMP(3), INTERVAL ? SECOND) ORDER BY "
                      "created_at, id");
    st->setInt(1, seconds);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(rs->getInt64(1));
    return db_result<V>::success(std::move(out));
  });
}

namespace {
/// Step 4: the batch's bisection depth (and parent), recorded on the batch row.
int record_lineage_in(sql::Connection& conn, std::int64_t batch_id) {
  // The batch that last requeued this batch's oldest member, when that member is a bisection half.
  auto st = prepare(conn,
                    "SELECT p.id, p.split_depth, p.failure_reason FROM merge_batch_request r "
                    "JOIN merge_batch_history h ON h.operation_id = r.operation_id AND "
                    "h.event = 'REQUEUED' AND h.batch_id <> r.batch_id "
                    "JOIN merge_batch p ON p.id = h.batch_id "
                    "WHERE r.batch_id = ? AND r.split_group <> 0 ORDER BY h.id DESC LIMIT 1");
  st->setInt64(1, batch_id);
  rs_ptr rs(st->executeQuery());
  if (!rs->next()) return 0;
  const std::int64_t parent = rs->getInt64("id");
  const auto reason = detail::str(*rs, "failure_reason");
  const int depth = rs->getInt("split_depth") + (reason.rfind("bisect", 0) == 0 ? 1 : 0);
  auto up = prepare(conn, "UPDATE merge_batch SET split_depth = ?, parent_batch_id = ? WHERE id = ?");
  up->setInt(1, depth);
  up->setInt64(2, parent);
  up->setInt64(3, batch_id);
  up->executeUpdate();
  return depth;
}

/// Step 5: these claimed members go back to the waiting set (history DEFERRED). Their operations
/// are still BATCH_WAITING (never marked claimed). Returns the rows released.
int defer_in(sql::Connection& conn, std::int64_t batch_id, const std::vector<std::string>& operation_ids) {
  int released = 0;
  for (const auto& chunk : detail::chunks(operation_ids)) {
    const std::string in = " IN (" + detail::placeholders(chunk.size()) + ")";
    append_history(conn, batch_id, "DEFERRED", "batch_id = ? AND operation_id" + in, [&](auto& st, int i) {
      st.setInt64(i++, batch_id);
      for (const auto& id : chunk) st.setString(i++, id);
    });
    auto up = prepare(conn,
                      "UPDATE merge_batch_request SET batch_id = NULL WHERE batch_id = ? "
                      "AND operation_id" +
                          in);
    up->setInt64(1, batch_id);
    for (std::size_t i = 0; i < chunk.size(); ++i) up->setString(static_cast<int>(i + 2), chunk[i]);
    released += up->executeUpdate();
  }
  return released;
}

/// Step 6: the batch's members BATCH_WAITING -> BATCH_CLAIMED, bulk, guarded by step.
int mark_claimed_in(sql::Connection& conn, std::int64_t batch_id, const std::string& instance_id) {
  auto ids = detail::lock_members(
      conn, "operation_id IN (SELECT operation_id FROM merge_batch_request WHERE batch_id = ?)",
      [&](detail::statement& st, int i) {
        st.setInt64(i, batch_id);
        return i + 1;
      },
      workflow::step::BATCH_WAITING);
  detail::member_move m{workflow::step::BATCH_WAITING, workflow::step::BATCH_CLAIMED,
                        "claimed by batch " + std::to_string(batch_id), instance_id,
                        // The one place an attempt is counted: only members really carried by this batch.
                        ", batch_id = ?, batch_attempts = batch_attempts + 1",
                        [&](detail::statement& st, int i) { st.setInt64(i, batch_id); }, 1};
  return detail::move_members(conn, ids, m);
}

/// The operation rows of `ids`, in the order of `ids` (missing ones left out).
std::vector<operation_row> rows_in_order(sql::Connection& conn, const std::vector<std::string>& ids) {
  std::vector<operation_row> rows;
  for (const auto& chunk : detail::chunks(ids)) {
    auto st = prepare(conn, std::string("SELECT ") + detail::operation_columns +
                                " FROM operation WHERE operation_id IN (" + detail::placeholders(chunk.size()) + ")");
    int i = 1;
    for (const auto& id : chunk) st->setString(i++, id);
    rs_ptr rs(st->executeQuery());
    while (rs->next()) rows.push_back(detail::read_operation(*rs));
  }
  std::vector<operation_row> out;
  for (const auto& id : ids) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.operation_id == id; });
    if (it != rows.end()) out.push_back(*it);
  }
  return out;
}
}  // namespace

db_result<claim_result> claim_round(session s, const batch_partition& where, int max_members, const claim_hook& hook,
                                    const round_planner& plan, const std::string& instance_id) {
  using R = db_result<claim_result>;
  return detail::retry_on_deadlock<claim_result>([&] {
    return guarded<claim_result>(s, [&](sql::Connection& conn) -> R {
      remove_abandoned_requests(conn);
      detail::transaction tx(conn);
      auto out = claim_in(conn, where, max_members, hook, instance_id);
      if (out.kind != claim_kind::claimed) return R::success(std::move(out));  // rollback: nothing kept
      out.depth = record_lineage_in(conn, out.batch_id);
      std::vector<std::string> ids;
      for (const auto& m : out.members) ids.push_back(m.operation_id);
      round_plan p;
      if (plan) {
        p = plan(rows_in_order(conn, ids));
      } else {
        p.included = ids;
      }
      out.deferred = static_cast<std::size_t>(defer_in(conn, out.batch_id, p.deferred));
      mark_claimed_in(conn, out.batch_id, instance_id);
      for (auto& row : rows_in_order(conn, p.included)) {
        if (row.step == workflow::step::BATCH_CLAIMED && row.batch_id == out.batch_id)
          out.carried.push_back(std::move(row));
      }
      tx.commit();
      return R::success(std::move(out));
    });
  });
}

db_result<done> record_batch_mr(session s, std::int64_t batch_id, std::int64_t mr_iid, const std::string& branch,
                                const std::string& mr_url) {
  return detail::retry_on_deadlock<done>([&] {
    return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
      detail::transaction tx(conn);
      auto st = prepare(conn, "UPDATE merge_batch SET mr_iid = ?, branch = ? WHERE id = ? AND status = 1");
      st->setInt64(1, mr_iid);
      st->setString(2, branch);
      st->setInt64(3, batch_id);
      if (st->executeUpdate() != 1) return db_result<done>::failure(db_outcome::preempted, "batch is not RUNNING");
      detail::set_claimed_members_mr(conn, batch_id, mr_iid, mr_url);
      tx.commit();
      return db_result<done>::success({});
    });
  });
}

db_result<int> settle_succeeded(session s, std::int64_t batch_id, batch_status expected, std::int64_t mr_iid,
                                const std::string& cause, const std::string& instance_id) {
  return detail::retry_on_deadlock<int>([&] {
    return guarded<int>(s, [&](sql::Connection& conn) -> db_result<int> {
      detail::transaction tx(conn);
      // Guarded write first: a second settler (sweep, operator, another instance) stops here.
      auto st = prepare(conn,
                        "UPDATE merge_batch SET status = 2, mr_iid = COALESCE(mr_iid, ?) "
                        "WHERE id = ? AND status = ?");
      st->setInt64(1, mr_iid);
      st->setInt64(2, batch_id);
      st->setInt(3, static_cast<int>(expected));
      if (st->executeUpdate() != 1) {
        return db_result<int>::failure(db_outcome::preempted, "batch " + std::to_string(batch_id) + " already settled");
      }
      detail::member_move m{workflow::step::BATCH_CLAIMED,
                            workflow::step::BATCH_MERGED,
                            cause,
                            instance_id,
                            ", mr_iid = ?",
                            [&](detail::statement& s, int i) { s.setInt64(i, mr_iid); },
                            1};
      int moved = detail::move_members(conn, lock_claimed_members(conn, batch_id), m);
      tx.commit();
      return db_result<int>::success(moved);
    });
  });
}

namespace {
/// An active batch this instance may drive: its own, one without an owner, or one whose owner's
/// lease expired (the owner died or stopped). `b` is merge_batch, `i` its owner's instance row.
constexpr const char* adoptable =
    "b.active_slot = 1 AND (b.owner_instance IS NULL OR b.owner_instance = ? OR i.instance_id IS NULL "
    "OR i.status = 'STOPPED' OR i.lease_until < NOW(3))";

/// Takes over the adoptable batches (all active ones, or only `batch_id`) that are not this
/// instance's yet; one autocommitted, guarded UPDATE, so two instances never both take one. An
/// empty `my_id` (a process without an instance identity, as in tests) owns what has no owner.
void take_over_batches(sql::Connection& conn, const std::string& my_id, std::int64_t batch_id) {
  auto st =
      prepare(conn, std::string("UPDATE merge_batch b LEFT JOIN instance i ON i.instance_id = b.owner_instance "
                                "SET b.owner_instance = NULLIF(?, '') WHERE ") +
                        adoptable + " AND (b.owner_instance IS NULL OR b.owner_instance <> ?) AND (? = 0 OR b.id = ?)");
  st->setString(1, my_id);
  st->setString(2, my_id);
  st->setString(3, my_id);
  st->setInt64(4, batch_id);
  st->setInt64(5, batch_id);
  st->executeUpdate();
}
}  // namespace

db_result<std::vector<batch_row>> own_active_batches(session s, const std::string& my_id) {
  using V = std::vector<batch_row>;
  return detail::retry_on_deadlock<V>([&] {
    return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
      take_over_batches(conn, my_id, 0);
      auto st = prepare(
          conn, std::string(batch_columns) + "WHERE active_slot = 1 AND owner_instance <=> NULLIF(?, '') ORDER BY id");
      st->setString(1, my_id);
      rs_ptr rs(st->executeQuery());
      V out;
      while (rs->next()) out.push_back(read_batch(*rs));
      return db_result<V>::success(std::move(out));
    });
  });
}

db_result<bool> own_batch(session s, std::int64_t batch_id, const std::string& my_id) {
  return detail::retry_on_deadlock<bool>([&] {
    return guarded<bool>(s, [&](sql::Connection& conn) -> db_result<bool> {
      take_over_batches(conn, my_id, batch_id);
      auto st = prepare(conn, "SELECT owner_instance FROM merge_batch WHERE id = ?");
      st->setInt64(1, batch_id);
      rs_ptr rs(st->executeQuery());
      if (!rs->next()) return db_result<bool>::failure(db_outcome::not_found, "no batch " + std::to_string(batch_id));
      return db_result<bool>::success(detail::opt_string(*rs, "owner_instance").value_or("") == my_id);
    });
  });
}

db_result<std::vector<waiting_row>> list_waiting(session s, int limit) {
  using V = std::vector<waiting_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT operation_id, repository, target_branch, split_group, " + detail::ms("created_at") +
                                " AS admitted_ms FROM merge_batch_request WHERE batch_id IS NULL "
                                "ORDER BY created_at, id LIMIT ?");
    st->setInt(1, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next())
      out.push_back({detail::str(*rs, "operation_id"),
                     {detail::str(*rs, "repository"), detail::str(*rs, "target_branch")},
                     rs->getInt("split_group"),
                     rs->getInt64("admitted_ms")});
    return db_result<V>::success(std::move(out));
  });
}

}  // namespace changeflow::persistence
