#include "persistence/operation_repo.hpp"

#include "base/log.hpp"

#include "persistence/batch_sql.hpp"
#include "persistence/callback_sql.hpp"
#include "persistence/operation_sql.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;
using workflow::phase;
using workflow::step;

namespace detail {

const char* const operation_columns =
    "operation_id, subject_id, target_key, flow, step, phase, version, title, payload, mr_iid, "
    "mr_url, "
    "approval_id, batch_id, attempts, batch_attempts, "
    "CAST(ROUND(UNIX_TIMESTAMP(next_wake_at) * 1000) AS SIGNED) AS next_wake_at_ms, "
    "owner_instance, "
    "lease_epoch, last_error, CAST(ROUND(UNIX_TIMESTAMP(created_at) * 1000) AS SIGNED) AS "
    "created_at_ms, "
    "CAST(ROUND(UNIX_TIMESTAMP(updated_at) * 1000) AS SIGNED) AS updated_at_ms, requester, repository, "
    "target_branch, revert_of, reverted_by, last_error_status, "
    "CAST(ROUND(UNIX_TIMESTAMP(last_error_at) * 1000) AS SIGNED) AS last_error_at_ms, deploy_reported";

namespace {
step step_or_throw(int code) {
  auto s = workflow::step_from_code(code);
  if (!s) throw std::runtime_error("unknown step code in database: " + std::to_string(code));
  return *s;
}
phase phase_or_throw(const std::string& name) {
  auto p = workflow::parse_phase(name);
  if (!p) throw std::runtime_error("unknown phase in database: " + name);
  return *p;
}
}  // namespace

std::string deploy_reported_mark_sql(const std::string& where_id) {
  return std::string(update_operation_by_key) + "deploy_reported = 1, updated_at = updated_at WHERE operation_id " +
         where_id + " AND deploy_reported = 0 AND phase NOT IN (" + terminal_phase_list() + ")";
}

std::string answer_with_rows_sql(const std::string& answer, const std::string& rows_on) {
  // operation_columns name the operation's columns unqualified; the derived table's one column is
  // named so that nothing collides with them.
  return "SELECT " + answer + ", " + operation_columns +
         " FROM (SELECT 1 AS changeflow_one) AS changeflow_answer LEFT JOIN operation ON " + rows_on;
}

std::shared_ptr<group_unit> flip_unit(std::string operation_id, std::function<flip_writes(const sql_text&)> writes,
                                      std::function<void(db_context&, std::optional<operation_row>)> carried,
                                      std::function<void(db_context&)> alone) {
  struct answer {
    bool flipped = false;
    std::optional<operation_row> row;
  };
  auto got = std::make_shared<answer>();
  auto unit = std::make_shared<group_unit>();
  unit->operation_id = operation_id;
  unit->callback = true;
  unit->statements = [operation_id, writes](sql::Connection& conn) {
    const sql_text t(conn);
    const auto w = writes(t);
    std::vector<std::string> out{
        "SET @changeflow_dup = 0",
        "SAVEPOINT changeflow_unit",
        w.flip,
        "SET @changeflow_flip = ROW_COUNT()",
        "IF @changeflow_flip = 1 THEN BEGIN DECLARE CONTINUE HANDLER FOR 1062 SET @changeflow_dup = 1; " + w.record +
            "; END; END IF",
        "IF @changeflow_flip <> 1 OR @changeflow_dup = 1 THEN ROLLBACK TO SAVEPOINT changeflow_unit; "
        "SET @changeflow_flip = 0; END IF"};
    if (!w.then.empty()) out.push_back("IF @changeflow_flip = 1 THEN " + w.then + "; END IF");
    return out;
  };
  // The verdict only: the row comes with the group's read of rows (take_row).
  unit->verdict = "@changeflow_flip";
  unit->decided = [got](bool flipped) { got->flipped = flipped; };
  unit->take_row = [got](const operation_row& row) { got->row = row; };
  unit->settled = [got] { return got->flipped; };
  unit->finish = [got, carried, alone](db_context& ctx, bool joined) {
    if (joined && got->flipped) return carried(ctx, std::move(got->row));
    alone(ctx);
  };
  return unit;
}

operation_row read_operation(sql::ResultSet& rs) {
  // Every query selects operation_columns in their order, after its own columns (none of them named
  // operation_id): the first is found by name, the rest read by index.
  const std::uint32_t at = rs.findColumn("operation_id");
  auto col = [at](std::uint32_t i) { return at + i; };
  operation_row r;
  r.operation_id = str(rs, col(0));
  r.subject_id = str(rs, col(1));
  r.target_key = str(rs, col(2));
  r.flow = str(rs, col(3));
  r.step = step_or_throw(rs.getInt(col(4)));
  r.phase = phase_or_throw(str(rs, col(5)));
  r.version = rs.getInt64(col(6));
  r.title = str(rs, col(7));
  r.payload_json = str(rs, col(8));
  r.mr_iid = opt_int64(rs, col(9));
  r.mr_url = opt_string(rs, col(10));
  r.approval_id = opt_string(rs, col(11));
  r.batch_id = opt_int64(rs, col(12));
  r.attempts = rs.getInt(col(13));
  r.batch_attempts = rs.getInt(col(14));
  r.next_wake_at_ms = opt_int64(rs, col(15));
  r.owner_instance = opt_string(rs, col(16));
  r.lease_epoch = rs.getInt64(col(17));
  r.last_error = opt_string(rs, col(18));
  r.created_at_ms = rs.getInt64(col(19));
  r.updated_at_ms = rs.getInt64(col(20));
  r.requester = str(rs, col(21));
  r.repository = str(rs, col(22));
  r.target_branch = str(rs, col(23));
  r.revert_of = opt_string(rs, col(24));
  r.reverted_by = opt_string(rs, col(25));
  if (auto status = opt_int64(rs, col(26))) r.last_error_status = static_cast<int>(*status);
  r.last_error_at_ms = opt_int64(rs, col(27));
  r.deploy_reported = rs.getInt(col(28)) != 0;
  return r;
}

namespace {

/// Where a transition's values go: into its own text, or into the row it brings to a group's
/// shared UPDATE. There the text names that row's columns instead, so two transitions that set the
/// same columns the same way have the same text and can share one statement.
struct transition_values {
  std::vector<std::string>* row = nullptr;
  std::string operator()(std::string literal) const {
    if (!row) return literal;
    row->push_back(std::move(literal));
    return "changeflow_t.c" + std::to_string(row->size());
  }
};

/// A transition's assignments, "step = ..., ...": the columns of its step, attempts, wake-up, error
/// and event (migration 3: the trigger writes the event and the binding's phase from them).
std::string transition_assignments(const sql_text& t, const transition_request& req, const transition_values& value) {
  const std::string to_phase(workflow::to_string(workflow::phase_of(req.to)));
  std::string q;
  q.reserve(384);
  if (req.retry_in_step) {
    // Same step, no event: the failed attempt, its error and the next try. updated_at keeps the
    // time of the last step change (the poll schedule and "unchanged since" are measured from it).
    q += "version = version + 1, attempts = attempts + 1, updated_at = updated_at";
  } else {
    q += "step = " + value(std::to_string(workflow::code_of(req.to)));
    q += ", phase = " + value(t.quote(to_phase)) + ", version = version + 1";
    // Attempts count the tries of the current step; a new step starts from none.
    if (!req.attempts && req.to != req.from) q += ", attempts = 0";
  }
  if (req.mr_iid) q += ", mr_iid = " + value(std::to_string(*req.mr_iid));
  if (req.mr_url) q += ", mr_url = " + value(t.quote(*req.mr_url));
  if (req.approval_id) q += ", approval_id = " + value(t.quote(*req.approval_id));
  if (req.batch_id) {
    q += ", batch_id = " + value(std::to_string(*req.batch_id));
  } else if (req.clear_batch) {
    q += ", batch_id = NULL";
  }
  if (req.wake_in_ms) {
    // DB clock: application hosts may disagree about the time, the database does not.
    q += ", next_wake_at = NOW(3) + INTERVAL " + value(std::to_string(*req.wake_in_ms * 1000)) + " MICROSECOND";
  } else if (req.clear_wake) {
    q += ", next_wake_at = NULL";
  }
  if (req.attempts && !req.retry_in_step) q += ", attempts = " + value(std::to_string(*req.attempts));
  if (req.last_error) {
    q += ", last_error = " + value(t.quote(req.last_error->substr(0, 1024)));
  } else if (req.clear_last_error) {
    q += ", last_error = NULL";
  }
  if (req.failed_attempt || req.retry_in_step) {
    // errors_recorded + 1 is what the trigger of migration 13 counts for the step left or retried.
    const int status = req.last_error_status.value_or(0);
    q += ", last_error_status = " + value(status > 0 ? std::to_string(status) : std::string("NULL"));
    q += ", last_error_at = NOW(3), errors_recorded = errors_recorded + 1";
  }
  if (!req.retry_in_step) {
    q += ", event_cause = " + value(t.quote(req.cause.substr(0, 255)));
    q += ", event_actor = " + value(t.quote(req.actor.substr(0, 160)));
    q += ", event_instance = " + value(req.instance_id.empty() ? std::string("NULL") : t.quote(req.instance_id));
  }
  return q;
}

}  // namespace

std::string transition_set_sql(const sql_text& t, const transition_request& req) {
  // One text statement. Text rather than a prepared statement because prepare + execute + close
  // costs three round trips and the column list varies per call; every string goes through the
  // connection's own escaping (mysql_real_escape_string, charset-aware), every number is formatted
  // here.
  return update_operation_by_key + transition_assignments(t, req, {});
}

std::string transition_update_sql(const sql_text& t, const transition_request& req) {
  std::string q = transition_set_sql(t, req);
  q += " WHERE operation_id = " + t.quote(req.operation_id);
  q += " AND version = " + std::to_string(req.expected_version);
  q += " AND step = " + std::to_string(workflow::code_of(req.from));
  if (req.fence) {
    q += " AND owner_instance = " + t.quote(req.fence->instance_id);
    q += " AND lease_epoch = " + std::to_string(req.fence->lease_epoch);
  }
  return q;
}

std::vector<std::string> transition_updates(const sql_text& t, const std::vector<const transition_request*>& reqs,
                                            const std::string& also_where) {
  struct shape {
    std::string assignments;
    bool fenced = false;
    std::vector<const transition_request*> members;
    std::vector<std::vector<std::string>> values;
  };
  std::vector<shape> shapes;
  for (const auto* req : reqs) {
    std::vector<std::string> values;
    auto assignments = transition_assignments(t, *req, transition_values{&values});
    const bool fenced = req->fence.has_value();
    auto same = std::find_if(shapes.begin(), shapes.end(),
                             [&](const shape& s) { return s.fenced == fenced && s.assignments == assignments; });
    if (same == shapes.end()) same = shapes.insert(shapes.end(), shape{std::move(assignments), fenced, {}, {}});
    same->members.push_back(req);
    same->values.push_back(std::move(values));
  }
  std::vector<std::string> out;
  for (const auto& s : shapes) {
    if (s.members.size() == 1) {
      out.push_back(transition_update_sql(t, *s.members.front()) + also_where);
      continue;
    }
    // The rows of keys first (STRAIGHT_JOIN), each operation row then read by its key: left to
    // itself, the optimizer drives a join from a small `operation` table and would read it whole.
    std::string q = "UPDATE (";
    for (std::size_t i = 0; i < s.members.size(); ++i) {
      const auto& req = *s.members[i];
      const bool first = i == 0;
      const auto as = [first](const char* name) { return first ? std::string(" AS ") + name : std::string(); };
      q += first ? "SELECT " : " UNION ALL SELECT ";
      q += t.quote(req.operation_id) + as("changeflow_id");
      q += ", " + std::to_string(req.expected_version) + as("changeflow_version");
      q += ", " + std::to_string(workflow::code_of(req.from)) + as("changeflow_step");
      if (s.fenced) {
        q += ", " + t.quote(req.fence->instance_id) + as("changeflow_owner");
        q += ", " + std::to_string(req.fence->lease_epoch) + as("changeflow_epoch");
      }
      for (std::size_t c = 0; c < s.values[i].size(); ++c) {
        q += ", " + s.values[i][c] + (first ? " AS c" + std::to_string(c + 1) : std::string());
      }
    }
    q += ") AS changeflow_t STRAIGHT_JOIN operation FORCE INDEX (PRIMARY) ON operation.operation_id = "
         "changeflow_t.changeflow_id SET ";
    q += s.assignments;
    q += " WHERE operation.version = changeflow_t.changeflow_version AND operation.step = changeflow_t.changeflow_step";
    if (s.fenced) {
      q += " AND operation.owner_instance = changeflow_t.changeflow_owner AND operation.lease_epoch = "
           "changeflow_t.changeflow_epoch";
    }
    out.push_back(std::move(q) + also_where);
  }
  return out;
}

std::string not_where_expected(const transition_request& req) {
  // A pair is guarded first by where its first transition expects the row.
  const auto& first = req.before ? *req.before : req;
  return "operation " + req.operation_id + " is not at version " + std::to_string(first.expected_version) +
         " and step " + std::string(workflow::to_string(first.from));
}

namespace {
/// A pair (`req.before`, then `req` as `second`): one transaction in one compound statement. The
/// second UPDATE runs only when the first landed, and the text commits only when both did; true
/// when they did (with `committed`, the row they left is read beside the answer).
bool pair_landed(sql::Connection& conn, const sql_text& t, const transition_request& req, const std::string& second,
                 std::optional<operation_row>* committed, bool lose_answer_after_commit) {
  std::vector<std::string> parts{"START TRANSACTION", transition_update_sql(t, *req.before),
                                 "SET @changeflow_pair = ROW_COUNT()", second + " AND @changeflow_pair = 1",
                                 "SET @changeflow_pair = IF(@changeflow_pair = 1, ROW_COUNT(), 0)"};
  const std::string answer = "@changeflow_pair AS changeflow_answer";
  parts.push_back(committed
                      ? answer_with_rows_sql(answer, "operation_id = " + t.quote(req.operation_id) +
                                                         " AND version = " + std::to_string(req.expected_version + 1))
                      : "SELECT " + answer);
  // Both or neither: a first UPDATE whose second missed is undone, not committed alone.
  parts.push_back("IF @changeflow_pair = 1 THEN COMMIT; ELSE ROLLBACK; END IF");
  if (lose_answer_after_commit) parts.push_back("KILL CONNECTION CONNECTION_ID()");
  bool landed = false;
  transaction tx(conn, transaction::begun_in_script{});
  try {
    run_script(conn, parts, [&](sql::ResultSet& rs) {
      if (!rs.next() || rs.isNull("changeflow_answer")) return;
      landed = rs.getInt("changeflow_answer") == 1;
      if (landed && committed && !rs.isNull("operation_id")) *committed = read_operation(rs);
    });
  } catch (const sql::SQLException& e) {
    // Under the fault only the KILL's own error is expected; anything else is a real failure, and
    // the guard rolls back what the text left open.
    if (!lose_answer_after_commit || !is_connection_lost_code(e.getErrorCode())) throw;
  }
  tx.ended_by_script();
  if (lose_answer_after_commit) {
    // The fault (tests), as for one statement: committed, and the answer taken for lost.
    throw sql::SQLException("the answer was lost after the commit (test fault)", "08S01", 2013);
  }
  return landed;
}
}  // namespace

db_result<std::int64_t> apply_transition(sql::Connection& conn, const transition_request& req,
                                         std::optional<operation_row>* committed, bool lose_answer_after_commit) {
  // One round trip: the statement is autocommitted.
  const sql_text t(conn);
  const std::string q = transition_update_sql(t, req);
  std::unique_ptr<sql::Statement> upd(conn.createStatement());
  bool landed = false;
  if (req.before) {
    landed = pair_landed(conn, t, req, q, committed, lose_answer_after_commit);
  } else if (lose_answer_after_commit) {
    // The fault (tests): the UPDATE commits, then the connection dies before its answer is read. The
    // KILL's error ends this call; should the driver not report it, the answer is lost all the same.
    count_script(2);
    upd->execute(q + ";\nKILL CONNECTION CONNECTION_ID()");
    while (upd->getMoreResults()) {
    }
    throw sql::SQLException("the answer was lost after the commit (test fault)", "08S01", 2013);
  } else if (!committed) {
    landed = upd->executeUpdate(q) == 1;
  } else {
    // The same statement, then the row at the version it wrote, in one text: the UPDATE's own count
    // (the first result of a multi-statement is reported) says whether it landed, and only then is
    // the row read what it committed (another writer's row at that version would mean it did not).
    count_script(2);
    upd->execute(q + ";\nSELECT " + operation_columns + " FROM operation WHERE operation_id = " +
                 t.quote(req.operation_id) + " AND version = " + std::to_string(req.expected_version + 1));
    landed = upd->getUpdateCount() == 1;
    if (upd->getMoreResults()) {
      rs_ptr rs(upd->getResultSet());
      if (landed && rs->next()) *committed = read_operation(*rs);
    }
    while (upd->getMoreResults()) {
    }
  }
  if (!landed) {
    // Only on the failure path: tell "gone" from "moved on" for the caller.
    auto probe = prepare(conn, "SELECT 1 FROM operation WHERE operation_id = ?");
    probe->setString(1, req.operation_id);
    rs_ptr rs(probe->executeQuery());
    return db_result<std::int64_t>::failure(rs->next() ? db_outcome::preempted : db_outcome::not_found,
                                            not_where_expected(req));
  }
  return db_result<std::int64_t>::success(req.expected_version + 1);
}

std::optional<db_error> refuse_initial_step(const new_operation& op) {
  if (workflow::is_initial_step(op.initial_step)) return std::nullopt;
  return db_error{db_outcome::illegal_transition, 0,
                  std::string(workflow::to_string(op.initial_step)) + " is not an initial step"};
}

/// The statements of a submission (see insert_operation), each its own entry.
struct creation_sql {
  std::string reset;           // the binding variables cleared
  std::string read_binding;    // the binding as it stands, locked, into the variables
  std::string insert;          // the operation row, carrying its first event
  std::string bind_first;      // a first apply takes the target
  std::string bind;            // a re-apply takes the target over; @changeflow_bound: 1 when bound now
  std::string history;         // the binding's history row, when bound
  std::string answer_columns;  // what the answer reports
};

/// The phases whose change gives its target up to a new one (workflow::is_reappliable), each name
/// between `quote`s, joined by `separator`: an SQL list for the written-out creation, a
/// FIND_IN_SET list for its procedure.
std::string reappliable_phases(std::string_view quote, std::string_view separator) {
  std::string out;
  for (auto p : workflow::all_phases) {
    if (!workflow::is_reappliable(p)) continue;
    if (!out.empty()) out += separator;
    out.append(quote).append(workflow::to_string(p)).append(quote);
  }
  return out;
}

/// A new change's values as the creation's INSERT and its procedure (migration 21) both take them
/// first, in this order: placeholders 1 to 14.
void bind_creation_values(statement& st, const new_operation& op) {
  st.setString(1, op.operation_id);
  st.setString(2, op.subject_id);
  st.setString(3, op.target_key);
  st.setString(4, std::string(workflow::to_string(op.flow)));
  st.setInt(5, workflow::code_of(op.initial_step));
  st.setString(6, std::string(workflow::to_string(workflow::phase_of(op.initial_step))));
  st.setString(7, op.title.substr(0, 512));
  set_opt_string(st, 8, op.payload_json.empty() ? std::nullopt : std::optional(op.payload_json));
  set_opt_string(st, 9, op.owner_instance.empty() ? std::nullopt : std::optional(op.owner_instance));
  st.setInt64(10, op.lease_epoch);
  set_opt_string(st, 11, op.requester.empty() ? std::nullopt : std::optional(op.requester.substr(0, 160)));
  st.setString(12, op.repository);
  st.setString(13, op.target_branch);
  st.setString(14, op.actor.substr(0, 160));
}

/// `conditional`: the operation row is written only when the change takes the target (or its id
/// exists, so the primary key still answers "duplicate"), so a text that commits itself writes
/// nothing for a held target.
creation_sql creation_statements(sql::Connection& conn, const new_operation& op, bool conditional) {
  const sql_text t(conn);
  const std::string initial_phase(workflow::to_string(workflow::phase_of(op.initial_step)));
  const std::string target = "subject_id = " + t.quote(op.subject_id) + " AND repository = " + t.quote(op.repository) +
                             " AND target_key = " + t.quote(op.target_key);
  creation_sql out;
  out.reset = "SET @changeflow_bound_op = NULL, @changeflow_bound_phase = NULL";
  // The binding as it stands, locked (a concurrent first apply has no row to lock and is caught by
  // the binding's unique key instead); the writes below pin exactly what was read.
  out.read_binding =
      "SELECT operation_id, phase INTO @changeflow_bound_op, @changeflow_bound_phase FROM binding WHERE " + target +
      " FOR UPDATE";
  const std::string reappliable = reappliable_phases("'", ", ");
  // The operation's INSERT carries its first event (created or re-applied) to the creation trigger.
  std::string cause = "IF(@changeflow_bound_op IS NULL, 'created', 're-applied')";
  if (!op.revert_of.empty()) cause = "CONCAT(" + cause + ", " + t.quote("; revert of " + op.revert_of) + ")";
  auto ins = prepare(conn,
                     "INSERT INTO operation (operation_id, subject_id, target_key, flow, step, phase, version, "
                     "title, payload, owner_instance, lease_epoch, requester, repository, target_branch, "
                     "event_cause, event_actor, event_instance, revert_of) "
                     "SELECT ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, " +
                         cause + ", ?, ?, ? FROM DUAL" +
                         (conditional ? " WHERE @changeflow_bound_op IS NULL OR @changeflow_bound_phase IN (" +
                                            reappliable + ") OR EXISTS (SELECT 1 FROM operation WHERE operation_id = " +
                                            t.quote(op.operation_id) + ")"
                                      : std::string()));
  bind_creation_values(*ins, op);
  set_opt_string(*ins, 15, op.owner_instance.empty() ? std::nullopt : std::optional(op.owner_instance));
  set_opt_string(*ins, 16, op.revert_of.empty() ? std::nullopt : std::optional(op.revert_of));
  out.insert = ins->bound_sql();
  const std::string id = t.quote(op.operation_id);
  const std::string phase = t.quote(initial_phase);
  out.bind_first = "INSERT INTO binding (subject_id, repository, target_key, operation_id, phase) SELECT " +
                   t.quote(op.subject_id) + ", " + t.quote(op.repository) + ", " + t.quote(op.target_key) + ", " + id +
                   ", " + phase + " FROM DUAL WHERE @changeflow_bound_op IS NULL";
  // Pinned to the exact operation AND phase read (with several re-appliable phases, and with
  // REJECTED -> re-apply -> REJECTED round trips, either alone could match a row that moved).
  // Through the relationship key, as the read above locked it. Left to itself the optimizer picks
  // the operation key (the shorter one, from `operation_id = @changeflow_bound_op`): a refused
  // submit then waits for that key's entry while the bound change's transition trigger, holding it,
  // waits for the row this text already holds: a deadlock.
  const std::string bind_over = "UPDATE binding FORCE INDEX (uk_binding_relationship) SET operation_id = " + id +
                                ", phase = " + phase + " WHERE " + target +
                                " AND operation_id = @changeflow_bound_op AND phase = "
                                "@changeflow_bound_phase AND phase IN (" +
                                reappliable + ")";
  // A first apply that got this far inserted the operation and its binding (a duplicate key stops
  // the text, or the unit's handler, before): it holds the target, with no statement to say so.
  // Only a re-apply runs the take-over and reads whether this operation holds the target now.
  out.bind = "IF @changeflow_bound_op IS NULL THEN SET @changeflow_bound = 1; ELSE " + bind_over +
             "; SET @changeflow_bound = (SELECT COUNT(*) FROM binding WHERE " + target + " AND operation_id = " + id +
             "); END IF";
  out.history =
      "INSERT INTO binding_history (subject_id, repository, target_key, operation_id, "
      "replaced_operation_id, replaced_phase, applied_at) SELECT " +
      t.quote(op.subject_id) + ", " + t.quote(op.repository) + ", " + t.quote(op.target_key) + ", " + id +
      ", @changeflow_bound_op, @changeflow_bound_phase, NOW(3) FROM DUAL WHERE @changeflow_bound = 1";
  out.answer_columns =
      "@changeflow_bound AS changeflow_bound, @changeflow_bound_op IS NULL AS changeflow_first_apply, "
      "@changeflow_bound_phase AS changeflow_held_phase";
  return out;
}

/// The creation of `creation_statements(conn, op, true)` as one CALL of the procedure of migration 21,
/// which runs the same statements and leaves the same session variables: in a group commit the text
/// to parse shrinks from about 2.5 KB to the change's values, and the body is compiled once per
/// connection.
std::string creation_call(sql::Connection& conn, const new_operation& op) {
  auto call = prepare(conn, "CALL changeflow_create_operation(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  bind_creation_values(*call, op);
  set_opt_string(*call, 15, op.revert_of.empty() ? std::nullopt : std::optional(op.revert_of));
  call->setString(16, reappliable_phases("", ","));
  return call->bound_sql();
}

db_result<create_outcome> insert_operation(sql::Connection& conn, const new_operation& op, bool begin_transaction,
                                           bool commit_in_text, std::optional<operation_row>* created) {
  using R = db_result<create_outcome>;
  const sql_text t(conn);
  const auto c = creation_statements(conn, op, commit_in_text);
  const std::string id = t.quote(op.operation_id);
  std::vector<std::string> script;
  if (begin_transaction) script.push_back("START TRANSACTION");
  script.insert(script.end(), {c.reset, c.read_binding, c.insert, c.bind_first, c.bind, c.history});
  if (commit_in_text) script.push_back("COMMIT");
  // The answer; with the row as the creation committed it in the same statement (nothing when the
  // change did not take the target), so the first status read of a new change needs no query.
  const bool read_row = commit_in_text && created;
  script.push_back(read_row
                       ? answer_with_rows_sql(c.answer_columns, "operation_id = " + id + " AND @changeflow_bound = 1")
                       : "SELECT " + c.answer_columns);
  bool bound = false, first_apply = true;
  std::optional<std::string> held_phase;
  std::optional<operation_row> row;
  try {
    detail::run_script(conn, script, [&](sql::ResultSet& rs) {
      if (!rs.next()) return;
      bound = rs.getInt(1) == 1;
      first_apply = rs.getInt(2) == 1;
      if (!rs.isNull(3)) held_phase = rs.getString(3);
      if (read_row && !rs.isNull("operation_id")) row = read_operation(rs);
    });
  } catch (const sql::SQLException& e) {
    if (e.getErrorCode() != 1062) throw;
    // The text stopped before its COMMIT: nothing of it stays.
    if (commit_in_text) {
      std::unique_ptr<sql::Statement> rb(conn.createStatement());
      rb->execute("ROLLBACK");
    }
    // The operation id exists (its INSERT is the first write that can collide), or a concurrent
    // first apply took the target between the read and the binding's INSERT.
    auto known = prepare(conn, "SELECT 1 FROM operation WHERE operation_id = ?");
    known->setString(1, op.operation_id);
    rs_ptr rs(known->executeQuery());
    return R::success(rs->next() ? create_outcome::duplicate_operation : create_outcome::preempted);
  }
  if (bound) {
    if (created) *created = std::move(row);
    return R::success(create_outcome::created);
  }
  if (first_apply) return R::success(create_outcome::preempted);
  auto p = held_phase ? workflow::parse_phase(*held_phase) : std::nullopt;
  return R::success(!p || !workflow::is_reappliable(*p) ? create_outcome::in_progress : create_outcome::preempted);
}

}  // namespace detail

std::string_view to_string(create_outcome o) {
  switch (o) {
    case create_outcome::created: return "created";
    case create_outcome::duplicate_operation: return "duplicate_operation";
    case create_outcome::in_progress: return "in_progress";
    case create_outcome::preempted: return "preempted";
  }
  return "preempted";
}

db_result<create_outcome> create_operation(session s, const new_operation& op, std::optional<operation_row>* created) {
  using R = db_result<create_outcome>;
  if (auto refused = detail::refuse_initial_step(op)) return R::failure(*refused);
  // A deadlock victim is rolled back whole by the server: the submission runs again (its reads and
  // pins are redone), so a lock cycle with another writer of the binding never reaches the client.
  return detail::retry_on_deadlock<create_outcome>([&] {
    return guarded<create_outcome>(s, [&](sql::Connection& conn) -> R {
      detail::transaction tx(conn, detail::transaction::begun_in_script{});
      auto r = detail::insert_operation(conn, op, true, true, created);
      // Every answer comes with the transaction ended: committed by the text (what it wrote, or
      // nothing), or rolled back after a duplicate key stopped it. Anything else threw, and the
      // guard rolls back.
      if (r.ok()) tx.ended_by_script();
      return r;
    });
  });
}

std::shared_ptr<group_unit> create_operation_unit(
    const new_operation& op, bool want_row,
    std::function<void(db_context&, const db_result<create_outcome>&, std::optional<operation_row>)> done,
    std::shared_ptr<const keyed_creation> keyed) {
  if (detail::refuse_initial_step(op)) return nullptr;
  struct answer {
    bool bound = false;
    std::optional<operation_row> row;
  };
  auto got = std::make_shared<answer>();
  auto unit = std::make_shared<group_unit>();
  unit->operation_id = op.operation_id;
  unit->statements = [op, keyed](sql::Connection& conn) {
    // The submission's statements as alone (one CALL of them), with its writes undone unless the
    // change took the target: a held target, an id that exists and a racing first apply (the unique
    // keys, caught by the procedure's handler) are all answered alone afterwards.
    // The answer is the verdict only: with want_row, the row comes with the group's read of rows
    // (take_row).
    const std::vector<std::string> create = {detail::creation_call(conn, op)};
    std::vector<std::string> out{"SAVEPOINT changeflow_unit"};
    if (!keyed) {
      out.insert(out.end(), create.begin(), create.end());
    } else {
      // Keyed: the key's record first (its primary key is the claim: any record under the key leaves
      // the creation unrun), then the same creation as one statement under the claim.
      std::string claimed;
      for (const auto& part : create) claimed += part + "; ";
      out.push_back("SET @changeflow_claimed = 0, @changeflow_bound = 0");
      out.push_back("BEGIN DECLARE EXIT HANDLER FOR 1062 SET @changeflow_claimed = 0; " + keyed->record_insert(conn) +
                    "; SET @changeflow_claimed = 1; END");
      out.push_back("IF @changeflow_claimed = 1 THEN " + claimed + "END IF");
    }
    // One rollback undoes whatever the unit wrote unless the change took its target.
    out.push_back("IF @changeflow_bound <> 1 THEN ROLLBACK TO SAVEPOINT changeflow_unit; END IF");
    return out;
  };
  unit->verdict = "@changeflow_bound";
  unit->decided = [got](bool bound) { got->bound = bound; };
  if (want_row) unit->take_row = [got](const operation_row& row) { got->row = row; };
  unit->settled = [got] { return got->bound; };
  unit->finish = [op, want_row, got, done, keyed](db_context& ctx, bool joined) {
    if (joined && got->bound) {
      return done(ctx, db_result<create_outcome>::success(create_outcome::created), std::move(got->row));
    }
    if (keyed) return keyed->alone(ctx);
    std::optional<operation_row> row;
    auto r = create_operation(ctx, op, want_row ? &row : nullptr);
    done(ctx, r, std::move(row));
  };
  return unit;
}

db_result<done> mark_deploy_reported(session s, const std::vector<std::string>& operation_ids) {
  return guarded<done>(s, [&](sql::Connection& conn) -> db_result<done> {
    if (operation_ids.empty()) return db_result<done>::success({});
    const detail::sql_text t(conn);
    std::string ids;
    for (const auto& id : operation_ids) ids += (ids.empty() ? "" : ", ") + t.quote(id);
    std::unique_ptr<sql::Statement> st(conn.createStatement());
    st->executeUpdate(detail::deploy_reported_mark_sql("IN (" + ids + ")"));
    return db_result<done>::success({});
  });
}

db_result<operation_row> load_operation(session s, const std::string& operation_id) {
  using R = db_result<operation_row>;
  return guarded<operation_row>(s, [&](sql::Connection& conn) -> R {
    auto st =
        prepare(conn, std::string("SELECT ") + detail::operation_columns + " FROM operation WHERE operation_id = ?");
    st->setString(1, operation_id);
    rs_ptr rs(st->executeQuery());
    if (!rs->next()) return R::failure(db_outcome::not_found, "no operation " + operation_id);
    return R::success(detail::read_operation(*rs));
  });
}

namespace {
/// The rows of `ids` (chunked IN lists), each SELECT naming `columns` and each row read by `read`.
db_result<std::vector<operation_row>> load_by_ids(session s, const std::vector<std::string>& ids, const char* columns,
                                                  operation_row (*read)(sql::ResultSet&)) {
  using V = std::vector<operation_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    V out;
    for (const auto& chunk : detail::chunks(ids)) {
      auto st = prepare(conn, std::string("SELECT ") + columns + " FROM operation WHERE operation_id IN (" +
                                  detail::placeholders(chunk.size()) + ")");
      for (std::size_t i = 0; i < chunk.size(); ++i) st->setString(static_cast<int>(i + 1), chunk[i]);
      rs_ptr rs(st->executeQuery());
      while (rs->next()) out.push_back(read(*rs));
    }
    return db_result<V>::success(std::move(out));
  });
}

/// The columns of load_operation_views, in read_operation_view's order.
constexpr const char* operation_view_columns =
    "operation_id, subject_id, target_key, flow, step, phase, version, title, mr_iid, mr_url, "
    "CAST(ROUND(UNIX_TIMESTAMP(created_at) * 1000) AS SIGNED), CAST(ROUND(UNIX_TIMESTAMP(updated_at) * 1000) AS "
    "SIGNED), requester, repository, target_branch, revert_of, reverted_by";

operation_row read_operation_view(sql::ResultSet& rs) {
  operation_row r;
  r.operation_id = detail::str(rs, 1);
  r.subject_id = detail::str(rs, 2);
  r.target_key = detail::str(rs, 3);
  r.flow = detail::str(rs, 4);
  r.step = detail::step_or_throw(rs.getInt(5));
  r.phase = detail::phase_or_throw(detail::str(rs, 6));
  r.version = rs.getInt64(7);
  r.title = detail::str(rs, 8);
  r.mr_iid = detail::opt_int64(rs, 9);
  r.mr_url = detail::opt_string(rs, 10);
  r.created_at_ms = rs.getInt64(11);
  r.updated_at_ms = rs.getInt64(12);
  r.requester = detail::str(rs, 13);
  r.repository = detail::str(rs, 14);
  r.target_branch = detail::str(rs, 15);
  r.revert_of = detail::opt_string(rs, 16);
  r.reverted_by = detail::opt_string(rs, 17);
  return r;
}
}  // namespace

db_result<std::vector<operation_row>> load_operations(session s, const std::vector<std::string>& ids) {
  return load_by_ids(s, ids, detail::operation_columns, &detail::read_operation);
}

db_result<std::vector<operation_row>> load_operation_views(session s, const std::vector<std::string>& ids) {
  return load_by_ids(s, ids, operation_view_columns, &read_operation_view);
}

namespace {
/// Newest first by one indexed column; `column` is one of the fixed names below, never input.
db_result<std::vector<operation_row>> list_newest_by(session s, std::string_view column, const std::string& value,
                                                     int limit) {
  using V = std::vector<operation_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, std::string("SELECT ") + detail::operation_columns + " FROM operation WHERE " +
                                std::string(column) + " = ? ORDER BY created_at DESC LIMIT ?");
    st->setString(1, value);
    st->setInt(2, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back(detail::read_operation(*rs));
    return db_result<V>::success(std::move(out));
  });
}
}  // namespace

db_result<std::vector<operation_row>> list_operations_by_subject(session s, const std::string& subject_id, int limit) {
  return list_newest_by(s, "subject_id", subject_id, limit);
}

db_result<std::vector<operation_row>> list_operations_by_requester(session s, const std::string& requester, int limit) {
  return list_newest_by(s, "requester", requester, limit);
}

db_result<std::vector<operation_event_row>> list_events(session s, const std::string& operation_id) {
  using V = std::vector<operation_event_row>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn,
                      "SELECT id, operation_id, from_step, to_step, from_phase, to_phase, cause, "
                      "actor, instance_id, "
                      "version, CAST(ROUND(UNIX_TIMESTAMP(at) * 1000) AS SIGNED) AS at_ms "
                      "FROM operation_event WHERE operation_id = ? ORDER BY id");
    st->setString(1, operation_id);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) {
      operation_event_row e;
      e.id = rs->getInt64("id");
      e.operation_id = detail::str(*rs, "operation_id");
      if (!rs->isNull("from_step")) e.from_step = workflow::step_from_code(rs->getInt("from_step"));
      e.to_step = detail::step_or_throw(rs->getInt("to_step"));
      if (!rs->isNull("from_phase")) e.from_phase = workflow::parse_phase(detail::str(*rs, "from_phase"));
      e.to_phase = detail::phase_or_throw(detail::str(*rs, "to_phase"));
      e.cause = detail::str(*rs, "cause");
      e.actor = detail::str(*rs, "actor");
      e.instance_id = detail::opt_string(*rs, "instance_id");
      e.version = rs->getInt64("version");
      e.at_ms = rs->getInt64("at_ms");
      out.push_back(std::move(e));
    }
    return db_result<V>::success(std::move(out));
  });
}

namespace {

std::optional<db_error> refuse_transition(const transition_request& req) {
  if (const auto& b = req.before) {
    // A pair: the step passed through is an ordinary transition the table allows, and this one
    // goes on from exactly where it leaves the row, under the same fence, so the second guard holds
    // exactly when the first did (a group reports the pair landed when its row moved). Admission to
    // the batch waiting set writes a second table and is never part of a pair.
    const auto fence_of = [](const transition_request& r) {
      return r.fence ? std::optional(std::pair(r.fence->instance_id, r.fence->lease_epoch)) : std::nullopt;
    };
    if (b->before || b->retry_in_step || b->to == step::BATCH_WAITING || req.to == step::BATCH_WAITING ||
        b->operation_id != req.operation_id || b->to != req.from || b->expected_version + 1 != req.expected_version ||
        fence_of(*b) != fence_of(req)) {
      return db_error{db_outcome::illegal_transition, 0, "a pair of transitions must follow one another"};
    }
    if (auto refused = refuse_transition(*b)) return refused;
  }
  if (req.retry_in_step && req.from != req.to) {
    return db_error{db_outcome::illegal_transition, 0, "a retry stays in its step"};
  }
  if (!req.retry_in_step && !workflow::is_allowed(req.from, req.to, req.by)) {
    return db_error{db_outcome::illegal_transition, 0,
                    std::string(workflow::to_string(req.from)) + " -> " + std::string(workflow::to_string(req.to)) +
                        " is not in the transition table"};
  }
  return std::nullopt;
}

}  // namespace

namespace {

/// A transition whose answer was lost with its connection (it may have committed or not): whether
/// it landed, read on a new connection from the event its version wrote. That event is this
/// request's when it names the same version, steps, cause, actor and instance: no other writer
/// moves this row from the same version with this actor's own cause on this instance. Landed: the
/// new version (and, with `committed`, the row while it still stands at that version). Another
/// writer's event: preempted. No event yet, or the read failed too: `lost` as it was (a retry's
/// guard then tells).
db_result<std::int64_t> find_landed(session s, const transition_request& req, std::optional<operation_row>* committed,
                                    db_result<std::int64_t> lost) {
  using R = db_result<std::int64_t>;
  const std::int64_t version = req.expected_version + 1;
  auto found = guarded<std::int64_t>(s, [&](sql::Connection& conn) -> R {
    auto st = prepare(conn,
                      "SELECT from_step, to_step, cause, actor, COALESCE(instance_id, '') FROM operation_event "
                      "WHERE operation_id = ? AND version = ?");
    st->setString(1, req.operation_id);
    st->setInt64(2, version);
    rs_ptr rs(st->executeQuery());
    if (!rs->next()) return lost;
    const bool ours = !rs->isNull(1) && rs->getInt(1) == workflow::code_of(req.from) &&
                      rs->getInt(2) == workflow::code_of(req.to) && detail::str(*rs, 3) == req.cause.substr(0, 255) &&
                      detail::str(*rs, 4) == req.actor.substr(0, 160) && detail::str(*rs, 5) == req.instance_id;
    if (!ours) {
      return R::failure(db_outcome::preempted, "operation " + req.operation_id + " was moved to version " +
                                                   std::to_string(version) + " by another writer");
    }
    if (committed) {
      auto row = prepare(conn, std::string("SELECT ") + detail::operation_columns +
                                   " FROM operation WHERE operation_id = ? AND version = ?");
      row->setString(1, req.operation_id);
      row->setInt64(2, version);
      rs_ptr rows(row->executeQuery());
      if (rows->next()) *committed = detail::read_operation(*rows);
    }
    return R::success(version);
  });
  log::warn("transition.answer_lost", {{"operation_id", req.operation_id},
                                       {"version", req.expected_version},
                                       {"error", lost.error.message},
                                       {"landed", found.ok()}});
  return found.ok() || found.outcome == db_outcome::preempted ? found : lost;
}

}  // namespace

db_result<std::int64_t> transition(session s, const transition_request& req, std::optional<operation_row>* committed,
                                   bool lose_answer_after_commit) {
  using R = db_result<std::int64_t>;
  if (auto refused = refuse_transition(req)) return R::failure(*refused);
  auto r = guarded<std::int64_t>(s, [&](sql::Connection& conn) -> R {
    // The common case is one autocommitted statement (see apply_transition); only an admission to
    // the batch waiting set needs a second statement and therefore a transaction.
    if (req.to != step::BATCH_WAITING) return detail::apply_transition(conn, req, committed, lose_answer_after_commit);
    detail::transaction tx(conn);
    auto r = detail::apply_transition(conn, req);
    if (!r.ok()) return r;  // rolled back by the guard
    // Batch admission: entering BATCH_WAITING admits the operation to the waiting set in
    // the SAME transaction, so no operation can sit in BATCH_WAITING without a merge_batch_request
    // row (a crash between two transactions would strand it: no actor runs for BATCH_WAITING).
    // Chosen over "the coordinator admits pending BATCH_WAITING operations at round start" because
    // that needs a scan of operation by step every round. A duplicate key means "already admitted"
    // (I4: a requeued member keeps its row, an operator re-trigger after BATCH_FAILED re-inserts).
    // The waiting row carries the operation's partition (repository, target branch): a claim
    // reads one partition's waiting set through its index.
    detail::admit_operation(conn, req.operation_id);  // false = already admitted
    if (req.from == step::BATCH_FAILED) {
      // An operator sends a member that ran out of batch attempts back: it gets a fresh budget
      // (the timeline and the batch history keep the earlier attempts).
      auto reset = prepare(conn, "UPDATE operation SET batch_attempts = 0 WHERE operation_id = ?");
      reset->setString(1, req.operation_id);
      reset->executeUpdate();
    }
    tx.commit();
    return r;
  });
  // A retry within its step writes no event to tell by; its lost answer is left to the guard. A
  // connection that could not be opened sent nothing, whatever code the driver gave (a handshake
  // can end in 2013, no ready cluster node in 1047): there is nothing to find.
  if (r.ok() || !is_connection_lost_code(r.error.code) || r.error.unsent) return r;
  if (!req.retry_in_step) return find_landed(s, req, committed, r);
  if (req.before) {
    // A retry written with the step before it: that step's event tells, since the two committed
    // together or not at all.
    auto first = find_landed(s, *req.before, nullptr, r);
    return first.ok() ? R::success(req.expected_version + 1) : first;
  }
  return r;
}

namespace {

/// The ids the group's trigger listed ("id,id,"), as a set.
std::set<std::string> split_ack(const std::string& list) {
  std::set<std::string> out;
  std::size_t from = 0;
  for (auto comma = list.find(',', from); comma != std::string::npos; comma = list.find(',', from)) {
    out.insert(list.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

struct group_outcome {
  std::set<std::string> landed;               // ids whose UPDATE matched its guard
  std::string verdicts;                       // one digit per unit, in the group's order: 1 = carried out
  std::map<std::string, operation_row> rows;  // with `want_rows`: every row as the group left it
};

/// One member of a group, in the group's lock order: a transition or a unit.
struct group_member {
  const transition_request* req = nullptr;
  group_unit* unit = nullptr;
  const std::string& operation_id() const { return req ? req->operation_id : unit->operation_id; }
};

/// The group's answer as its final SELECT returns it and as its receipt stores it: the landed
/// transitions' ids ("id,id,"), a bar, then one verdict digit per unit. The ids are the trigger's
/// list as the transitions left it (@changeflow_landed, taken before the units in a group that has
/// any): a unit's own UPDATE adds its operation to the list too, and may write an operation a
/// transition of the group moved.
std::string answer_sql() {
  return "CONCAT(COALESCE(@changeflow_landed, @changeflow_ack), '|', @changeflow_verdicts)";
}

/// Ends a group's session variables (after its COMMIT, or after a failed group's ROLLBACK): the
/// trigger lists only while @changeflow_ack is set.
constexpr const char* clear_group_variables =
    "SET @changeflow_ack = NULL, @changeflow_landed = NULL, @changeflow_verdicts = NULL";

std::optional<group_outcome> parse_answer(const std::string& answer, std::size_t units) {
  const auto bar = answer.rfind('|');
  if (bar == std::string::npos || answer.size() - bar - 1 != units) return std::nullopt;
  group_outcome out;
  out.landed = split_ack(answer.substr(0, bar));
  out.verdicts = answer.substr(bar + 1);
  return out;
}

/// Runs the group's one multi-statement and returns the ids whose UPDATE landed, each unit's
/// verdict (and, with `want_rows`, the rows read inside the same transaction after the UPDATEs, so
/// each landed row is exactly what its transition committed). With a receipt slot, the group writes
/// its answer to its receipt in the same transaction. Throws the driver's exception when any
/// statement failed; the caller rolls back and reads the receipt or runs the members alone.
group_outcome commit_group(sql::Connection& conn, const std::vector<group_member>& group, bool want_rows,
                           const group_run& run) {
  const detail::sql_text t(conn);
  std::vector<std::string> parts{"SET @changeflow_ack = '', @changeflow_landed = NULL, @changeflow_verdicts = ''",
                                 "START TRANSACTION"};
  std::string row_ids;  // the operations whose rows the group reads at its end
  std::size_t units = 0;
  const auto add = [&t](std::string& list, const std::string& id) { list += (list.empty() ? "" : ", ") + t.quote(id); };
  // The transitions first, shared by shape; then the units, each with its verdict.
  // A pair's first transition runs with the others, its second after all of them (the second's
  // guard is the row as the first left it, so it lands exactly when the first did).
  std::vector<const transition_request*> transitions, seconds;
  for (const auto& m : group) {
    if (!m.req) continue;
    transitions.push_back(m.req->before ? m.req->before.get() : m.req);
    if (m.req->before) seconds.push_back(m.req);
    if (want_rows) add(row_ids, m.req->operation_id);
  }
  for (auto& update : detail::transition_updates(t, transitions)) parts.push_back(std::move(update));
  // A second UPDATE lands only where its first one did: the trigger has listed that row's id by
  // then (a group holds one transition per operation, so the id in the list is the pair's own). The
  // ids are compared as bytes: no collation of the list's can clash with the column's.
  for (auto& update : detail::transition_updates(
           t, seconds, " AND FIND_IN_SET(CAST(operation.operation_id AS BINARY), CAST(@changeflow_ack AS BINARY)) > 0"))
    parts.push_back(std::move(update));
  if (std::any_of(group.begin(), group.end(), [](const group_member& m) { return m.unit != nullptr; })) {
    parts.push_back("SET @changeflow_landed = @changeflow_ack");
  }
  for (const auto& m : group) {
    if (!m.unit) continue;
    auto unit_parts = m.unit->statements(conn);
    ++units;
    if (m.unit->take_row) add(row_ids, m.unit->operation_id);
    parts.insert(parts.end(), std::make_move_iterator(unit_parts.begin()), std::make_move_iterator(unit_parts.end()));
    parts.push_back("SET @changeflow_verdicts = CONCAT(@changeflow_verdicts, IF(" + m.unit->verdict +
                    " = 1, '1', '0'))");
  }
  // The acknowledgement list was taken once the transitions' UPDATEs ran (the trigger of migration
  // 14 adds each row a transition moved), before the units wrote. It is written to the receipt and
  // read before the COMMIT, in the same statement as the rows (one row per operation, each carrying
  // the answer; one row with the answer alone when none is found). A COMMIT that fails throws.
  if (!run.receipt_slot.empty()) {
    parts.push_back("INSERT INTO group_receipt (slot, seq, answer, written_at) VALUES (" + t.quote(run.receipt_slot) +
                    ", " + std::to_string(run.receipt_seq) + ", " + answer_sql() +
                    ", NOW(3)) ON DUPLICATE KEY UPDATE seq = VALUES(seq), answer = VALUES(answer), "
                    "written_at = VALUES(written_at)");
  }
  const std::string answer = answer_sql() + " AS changeflow_answer";
  if (row_ids.empty()) {
    parts.push_back("SELECT " + answer);
  } else {
    parts.push_back(detail::answer_with_rows_sql(answer, "operation_id IN (" + row_ids + ")"));
  }
  parts.push_back("COMMIT");
  if (run.lose_answer_after_commit) parts.push_back("KILL CONNECTION CONNECTION_ID()");
  parts.push_back(clear_group_variables);
  // One compound statement through detail::run_script (one answer; every result read, also when
  // a row cannot be read here).
  std::optional<std::string> text;
  std::map<std::string, operation_row> rows;
  detail::run_script(conn, parts, [&](sql::ResultSet& rs) {
    if (rs.getMetaData()->getColumnLabel(1) != "changeflow_answer") return;
    while (rs.next()) {
      if (!rs.isNull("changeflow_answer")) text = rs.getString("changeflow_answer");
      if (row_ids.empty() || rs.isNull("operation_id")) continue;
      auto row = detail::read_operation(rs);
      auto id = row.operation_id;
      rows.emplace(std::move(id), std::move(row));
    }
  });
  auto out = text ? parse_answer(*text, units) : std::nullopt;
  if (!out) throw std::runtime_error("group commit: the group's answer did not come back whole");
  out->rows = std::move(rows);
  return std::move(*out);
}

/// After a group whose answer did not come back: its receipt, read with a lock that waits until
/// the group's transaction has ended (committed or rolled back), so what it says is final. The
/// group's answer when it committed; nullopt when it did not (the slot holds an earlier group, or
/// none); an error when the receipt cannot be read.
db_result<std::optional<std::string>> read_receipt(session s, const group_run& run) {
  using V = std::optional<std::string>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn, "SELECT seq, answer FROM group_receipt WHERE slot = ? LOCK IN SHARE MODE");
    st->setString(1, run.receipt_slot);
    rs_ptr rs(st->executeQuery());
    if (!rs->next() || static_cast<std::uint64_t>(rs->getInt64("seq")) != run.receipt_seq) {
      return db_result<V>::success(std::nullopt);
    }
    return db_result<V>::success(detail::str(*rs, "answer"));
  });
}

/// The outcome of a committed group whose answer was lost, from its receipt; with `want_rows`, the
/// rows read now: a landed transition's row only while it is still at the version that transition
/// wrote, a unit's row as it is now (as the unit left it, or as a writer after the group left it).
/// nullopt when the group did not commit or the receipt cannot be read: the members run alone.
std::optional<group_outcome> recovered_outcome(session s, const group_run& run, const std::vector<group_member>& group,
                                               std::size_t units, bool want_rows) {
  auto receipt = read_receipt(s, run);
  if (!receipt.ok()) {
    log::warn("transition_group.receipt_unreadable", {{"slot", run.receipt_slot}, {"error", receipt.error.message}});
    return std::nullopt;
  }
  if (!receipt.value) return std::nullopt;  // rolled back: the members run alone
  auto out = parse_answer(*receipt.value, units);
  if (!out) return std::nullopt;
  std::vector<std::string> ids;
  for (const auto& m : group) {
    if (m.req ? want_rows && out->landed.count(m.req->operation_id) : static_cast<bool>(m.unit->take_row)) {
      ids.push_back(m.operation_id());
    }
  }
  if (ids.empty()) return out;
  auto read = load_operations(s, ids);
  if (!read.ok()) return out;  // the rows are a convenience; the outcomes are what matter
  for (auto& row : read.value) {
    // Kept for a unit of its operation, or for a transition whose version it still is (a transition
    // that shared its operation with a unit is handed the row only in that case, in run_group).
    const bool wanted = std::any_of(group.begin(), group.end(), [&row](const group_member& m) {
      return m.operation_id() == row.operation_id && (m.unit || row.version == m.req->expected_version + 1);
    });
    if (!wanted) continue;
    auto id = row.operation_id;
    out->rows.emplace(std::move(id), std::move(row));
  }
  return out;
}

/// transition_group's work; `run` takes the fault and the receipt slot in and says which units
/// committed in the group (`run.joined`), why the group failed as a whole (`run.failed`) and
/// whether a lost answer was recovered from the receipt (`run.recovered`).
std::vector<db_result<std::int64_t>> run_group(session s, const std::vector<transition_request>& reqs,
                                               std::vector<std::optional<operation_row>>* rows,
                                               const std::vector<group_unit*>& units, group_run& run) {
  using R = db_result<std::int64_t>;
  auto& joined = run.joined;
  std::vector<R> out(reqs.size(), R::failure(db_outcome::fatal, "not run"));
  if (rows) rows->assign(reqs.size(), std::nullopt);
  std::vector<std::size_t> grouped, alone;
  std::set<std::string> ids, doubled;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    if (auto refused = refuse_transition(reqs[i])) {
      out[i] = R::failure(*refused);
    } else if (reqs[i].to == step::BATCH_WAITING) {
      alone.push_back(i);
    } else if (!ids.insert(reqs[i].operation_id).second) {
      doubled.insert(reqs[i].operation_id);
      alone.push_back(i);
    } else {
      grouped.push_back(i);
    }
  }
  // A unit joins unless another unit of the group writes its operation, or a second transition of
  // its operation runs alone after the group. It may share the group with a transition of its
  // operation: the units write after the transitions, so a callback that came while its change's
  // transition waited for the committer (the approval behind APPROVAL_SENT, the deploy report
  // behind MERGED) is applied on top of it in the same commit instead of in a commit of its own.
  // The rows the group reads are then as the unit left them.
  std::vector<group_unit*> joining, left_out;
  std::set<std::string> unit_ids;
  for (auto* u : units) {
    if (!doubled.count(u->operation_id) && unit_ids.insert(u->operation_id).second) {
      joining.push_back(u);
    } else {
      left_out.push_back(u);
    }
  }
  if (grouped.size() + joining.size() < 2) {
    if (grouped.size() == 1) alone.push_back(grouped.front());
    grouped.clear();
    left_out.insert(left_out.end(), joining.begin(), joining.end());
    joining.clear();
  }
  joined.assign(units.size(), false);
  bool committed = false;
  if (!grouped.empty() || !joining.empty()) {
    // Members in operation id order. The transitions' UPDATEs take their rows in that order within
    // each statement they share (one per shape, transition_updates), then the units take theirs in
    // that order. Two groups in flight at once (several committers, or instances on one database)
    // can therefore wait on each other in a cycle when one holds a change's transition and the
    // other a callback for it; InnoDB ends such a cycle at once, and the group it rolls back runs
    // its members alone below, as every failed group does.
    std::vector<group_member> group;
    for (auto i : grouped) group.push_back({&reqs[i], nullptr});
    for (auto* u : joining) group.push_back({nullptr, u});
    std::sort(group.begin(), group.end(),
              [](const group_member& a, const group_member& b) { return a.operation_id() < b.operation_id(); });
    std::vector<group_unit*> ordered;  // the units in the group's order: the order of their verdicts
    for (const auto& m : group) {
      if (m.unit) ordered.push_back(m.unit);
    }
    auto landed = guarded<group_outcome>(s, [&](sql::Connection& conn) -> db_result<group_outcome> {
      try {
        return db_result<group_outcome>::success(commit_group(conn, group, rows != nullptr, run));
      } catch (...) {
        // The transaction may still be open (a statement failed before COMMIT): end it before the
        // requests run alone on this connection. A lost connection fails here too; the session
        // then opens a new one.
        try {
          std::unique_ptr<sql::Statement> rb(conn.createStatement());
          rb->execute("ROLLBACK");
          rb->execute(clear_group_variables);
        } catch (...) {
        }
        throw;
      }
    });
    // A group whose answer did not come back may have committed: its receipt says, and then gives
    // each member the outcome the answer would have given it.
    if (!landed.ok() && !run.receipt_slot.empty()) {
      if (auto recovered = recovered_outcome(s, run, group, ordered.size(), rows != nullptr)) {
        run.failed = landed.error;
        run.recovered = true;
        landed = db_result<group_outcome>::success(std::move(*recovered));
      }
    }
    if (!landed.ok()) {
      run.failed = landed.error;
      alone.insert(alone.end(), grouped.begin(), grouped.end());
      left_out.insert(left_out.end(), joining.begin(), joining.end());
    } else {
      committed = true;
      for (std::size_t i = 0; i < ordered.size(); ++i) {
        auto* u = ordered[i];
        u->decided(landed.value.verdicts[i] == '1');
        if (!u->take_row) continue;
        if (auto row = landed.value.rows.find(u->operation_id); row != landed.value.rows.end())
          u->take_row(row->second);
      }
      std::vector<std::size_t> missed;
      for (auto i : grouped) {
        if (landed.value.landed.count(reqs[i].operation_id)) {
          out[i] = R::success(reqs[i].expected_version + 1);
          // The row as the group left it (a unit of the same operation may have written it after
          // the transition); after a recovered answer, only while it is at the transition's version.
          if (auto row = landed.value.rows.find(reqs[i].operation_id);
              rows && row != landed.value.rows.end() &&
              (!run.recovered || row->second.version == reqs[i].expected_version + 1)) {
            (*rows)[i] = row->second;
          }
        } else {
          missed.push_back(i);
        }
      }
      // Only on the failure path, as for one transition: "gone" or "moved on". The rows the group
      // read already say which exist; without them (or after a recovered answer, whose rows are
      // the landed ones), one query for all the missed ids.
      std::set<std::string> existing;
      if (rows && !run.recovered) {
        for (const auto& [id, row] : landed.value.rows) existing.insert(id);
      } else if (!missed.empty()) {
        std::vector<std::string> missed_ids;
        for (auto i : missed) missed_ids.push_back(reqs[i].operation_id);
        auto found = load_operations(s, missed_ids);
        if (!found.ok()) {
          for (auto i : missed) out[i] = R::failure(found.error);
          missed.clear();
        }
        for (const auto& row : found.value) existing.insert(row.operation_id);
      }
      for (auto i : missed) {
        out[i] = R::failure(existing.count(reqs[i].operation_id) ? db_outcome::preempted : db_outcome::not_found,
                            detail::not_where_expected(reqs[i]));
      }
    }
  }
  std::sort(alone.begin(), alone.end());
  // A request that runs alone and wants its row gets it from its own round trip, as it would had it
  // been queued alone: its writer relies on it (the MERGED write reads whether a deploy report came
  // before it, and without the row pays a query to ask).
  for (auto i : alone) {
    out[i] = transition(s, reqs[i], rows && reqs[i].want_row ? &(*rows)[i] : nullptr);
  }
  if (committed) {
    for (std::size_t i = 0; i < units.size(); ++i)
      joined[i] = std::find(joining.begin(), joining.end(), units[i]) != joining.end();
  }
  return out;
}

}  // namespace

std::vector<db_result<std::int64_t>> transition_group(session s, const std::vector<transition_request>& reqs,
                                                      std::vector<std::optional<operation_row>>* rows) {
  group_run run;
  return run_group(s, reqs, rows, {}, run);
}

std::vector<db_result<std::int64_t>> transition_group(session s, const std::vector<transition_request>& reqs,
                                                      std::vector<std::optional<operation_row>>* rows,
                                                      const std::vector<group_unit*>& units, group_run& run) {
  return run_group(s, reqs, rows, units, run);
}

db_result<std::int64_t> sweep_group_receipts(session s) {
  return guarded<std::int64_t>(s, [](sql::Connection& conn) -> db_result<std::int64_t> {
    std::unique_ptr<sql::Statement> st(conn.createStatement());
    return db_result<std::int64_t>::success(
        st->executeUpdate("DELETE FROM group_receipt WHERE written_at < NOW(3) - INTERVAL 1 DAY"));
  });
}

db_result<std::optional<validated_flip>> mark_validated(session s, const std::string& operation_id,
                                                        const std::string& via, const ledger_settlement* settle) {
  using V = std::optional<validated_flip>;
  using R = db_result<V>;
  return guarded<V>(s, [&](sql::Connection& conn) -> R {
    detail::transaction tx(conn);
    // Fixed lock order: operation first, then binding (every path that writes both does the same).
    auto so = prepare(conn, "SELECT step, version FROM operation WHERE operation_id = ? FOR UPDATE");
    so->setString(1, operation_id);
    rs_ptr ors(so->executeQuery());
    if (!ors->next()) return R::failure(db_outcome::not_found, "no operation " + operation_id);
    const step current = detail::step_or_throw(ors->getInt("step"));
    const std::int64_t version = ors->getInt64("version");

    auto sb = prepare(conn, "SELECT subject_id, phase FROM binding WHERE operation_id = ? FOR UPDATE");
    sb->setString(1, operation_id);
    rs_ptr brs(sb->executeQuery());
    if (!brs->next()) return R::success(std::nullopt);  // replaced by a re-apply: idempotent no-op
    const std::string subject = detail::str(*brs, "subject_id");
    const auto bphase = workflow::parse_phase(detail::str(*brs, "phase"));
    if (bphase != phase::MERGED && bphase != phase::VALIDATED) return R::success(std::nullopt);

    const bool repair = current != step::CALLED_BACK;
    const bool flip = bphase == phase::MERGED;
    if (!repair && !flip) return R::success(std::nullopt);
    if (repair && !workflow::is_allowed(current, step::CALLED_BACK)) {
      return R::failure(db_outcome::illegal_transition,
                        std::string(workflow::to_string(current)) + " -> CALLED_BACK is not in the transition table");
    }
    // The operation's own write carries the event (the transition trigger writes it and moves the
    // binding when the phase changes); a binding left at MERGED under an operation already at
    // CALLED_BACK is repaired by the explicit write after it.
    auto uo = prepare(conn, std::string(detail::update_operation_by_key) +
                                "step = ?, phase = 'VALIDATED', version = version + 1, next_wake_at = NULL, "
                                "event_cause = ?, event_actor = ?, event_instance = NULL "
                                "WHERE operation_id = ? AND version = ?");
    uo->setInt(1, workflow::code_of(step::CALLED_BACK));
    uo->setString(2, "validated via " + via);
    uo->setString(3, via == "callback" ? "callback" : "reconciler");
    uo->setString(4, operation_id);
    uo->setInt64(5, version);
    if (uo->executeUpdate() != 1) return R::failure(db_outcome::preempted, "operation moved while locked");
    const std::int64_t new_version = version + 1;
    if (flip && workflow::phase_of(current) == phase::VALIDATED) {
      // The operation's phase did not change (its step was CALLED_BACK already), so the trigger
      // left the binding at MERGED; when the phase changed, the trigger moved it.
      auto ub = prepare(conn, "UPDATE binding SET phase = 'VALIDATED' WHERE operation_id = ? AND phase = 'MERGED'");
      ub->setString(1, operation_id);
      ub->executeUpdate();
    }
    const bool settled =
        flip && settle && detail::settle_ledger(conn, settle->ledger_key, settle->outcome, settle->operation_ids);
    tx.commit();
    if (!flip) return R::success(std::nullopt);
    return R::success(validated_flip{operation_id, subject, new_version, settled});
  });
}

db_result<std::vector<merged_candidate>> merged_in_window(session s, const std::string& repository, int min_age_s,
                                                          int max_age_s, int limit) {
  using V = std::vector<merged_candidate>;
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    auto st = prepare(conn,
                      "SELECT operation_id, mr_iid FROM operation WHERE phase = 'MERGED' "
                      "AND updated_at > NOW(3) - INTERVAL ? SECOND AND updated_at < NOW(3) - INTERVAL ? SECOND "
                      "AND mr_iid IS NOT NULL AND repository = ? ORDER BY updated_at LIMIT ?");
    st->setInt(1, max_age_s);
    st->setInt(2, min_age_s);
    st->setString(3, repository);
    st->setInt(4, limit);
    rs_ptr rs(st->executeQuery());
    V out;
    while (rs->next()) out.push_back({detail::str(*rs, "operation_id"), rs->getInt64("mr_iid")});
    return db_result<V>::success(std::move(out));
  });
}

namespace detail {

std::vector<std::string> lock_members(sql::Connection& conn, const std::string& where,
                                      const std::function<int(statement&, int)>& bind, workflow::step from) {
  auto st = prepare(
      conn, "SELECT operation_id FROM operation WHERE step = ? AND " + where + " ORDER BY operation_id FOR UPDATE");
  st->setInt(1, workflow::code_of(from));
  bind(*st, 2);
  rs_ptr rs(st->executeQuery());
  std::vector<std::string> ids;
  while (rs->next()) ids.push_back(str(*rs, "operation_id"));
  return ids;
}

int move_members(sql::Connection& conn, const std::vector<std::string>& ids, const member_move& m) {
  if (!workflow::is_allowed(m.from, m.to)) return 0;  // never write an edge the table forbids
  const std::string to_phase(workflow::to_string(workflow::phase_of(m.to)));
  int moved = 0;
  for (const auto& chunk : chunks(ids)) {
    const std::string in = " IN (" + placeholders(chunk.size()) + ")";
    // One statement: the transition trigger writes each row's event and moves its binding's phase.
    auto up = prepare(conn, std::string(update_operation_by_key) +
                                "step = ?, phase = ?, version = version + 1, next_wake_at = NULL, "
                                "event_cause = ?, event_actor = 'batch', event_instance = ?" +
                                m.extra_set + " WHERE step = ? AND operation_id" + in);
    int i = 1;
    up->setInt(i++, workflow::code_of(m.to));
    up->setString(i++, to_phase);
    up->setString(i++, m.cause.substr(0, 255));
    set_opt_string(*up, i++, m.instance_id.empty() ? std::nullopt : std::optional(m.instance_id));
    if (m.bind_extra) m.bind_extra(*up, i);
    i += m.extra_params;
    up->setInt(i++, workflow::code_of(m.from));
    for (const auto& id : chunk) up->setString(i++, id);
    moved += up->executeUpdate();
  }
  return moved;
}

void set_claimed_members_mr(sql::Connection& conn, std::int64_t batch_id, std::int64_t mr_iid,
                            const std::string& mr_url) {
  auto ops = prepare(conn, "UPDATE operation SET mr_iid = ?, mr_url = ? WHERE batch_id = ? AND step = ?");
  ops->setInt64(1, mr_iid);
  ops->setString(2, mr_url);
  ops->setInt64(3, batch_id);
  ops->setInt(4, workflow::code_of(step::BATCH_CLAIMED));
  ops->executeUpdate();
}

bool link_revert(sql::Connection& conn, const std::string& original_id, const std::string& revert_id,
                 const std::string& actor, const std::string& instance_id) {
  auto link = prepare(conn, std::string(update_operation_by_key) +
                                "reverted_by = ?, version = version + 1, event_cause = ?, "
                                "event_actor = ?, event_instance = ? WHERE operation_id = ?");
  link->setString(1, revert_id);
  link->setString(2, "reverted by " + revert_id);
  link->setString(3, actor.substr(0, 160));
  set_opt_string(*link, 4, instance_id.empty() ? std::nullopt : std::optional(instance_id));
  link->setString(5, original_id);
  return link->executeUpdate() == 1;
}

int take_over_rows(sql::Connection& conn, const std::vector<std::string>& ids, const std::string& orphaned,
                   const std::string& my_id) {
  const std::string in = "(" + placeholders(ids.size()) + ")";
  auto upd = prepare(conn,
                     "UPDATE operation o LEFT JOIN instance i ON i.instance_id = o.owner_instance "
                     "SET o.owner_instance = ?, o.lease_epoch = o.lease_epoch + 1, o.version = o.version + 1, "
                     "o.event_cause = 'owner lease expired: taken over', o.event_actor = 'reconciler', "
                     "o.event_instance = ? "
                     "WHERE o.operation_id IN " +
                         in + " AND " + orphaned);
  upd->setString(1, my_id);
  upd->setString(2, my_id);
  for (std::size_t k = 0; k < ids.size(); ++k) upd->setString(static_cast<int>(k + 3), ids[k]);
  return upd->executeUpdate();
}

}  // namespace detail

}  // namespace changeflow::persistence
