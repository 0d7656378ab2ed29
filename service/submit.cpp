#include "service/submit.hpp"

#include "actors/registry.hpp"
#include "actors/request_actor.hpp"
#include "base/log.hpp"
#include "config/test_hooks.hpp"
#include "persistence/binding_repo.hpp"
#include "persistence/idempotency_repo.hpp"
#include "service/wake_actor.hpp"
#include "workflow/transitions.hpp"

namespace changeflow::service {

namespace {

/// Who holds the target (one extra read, on the refusal path only). The blocker may have ended
/// between the refusal and this read: then only its id is known, and the client retries.
submit_result blocked(persistence::session db, const persistence::new_operation& op) {
  submit_result r;
  r.status = submit_status::blocked;
  auto binding = persistence::find_binding(db, op.subject_id, op.repository, op.target_key);
  if (!binding.ok()) return r;
  r.blocking_id = binding.value.operation_id;
  auto holder = persistence::load_operation(db, binding.value.operation_id);
  if (holder.ok() && !workflow::is_reappliable(holder.value.phase)) r.blocker = std::move(holder.value);
  return r;
}

}  // namespace

submit_result start_created(persistence::session db, runtime::services& svc, const persistence::new_operation& op,
                            const persistence::db_result<persistence::create_outcome>& created) {
  submit_result r;
  r.operation_id = op.operation_id;
  if (!created.ok()) {
    r.error = created.error;
    return r;
  }
  switch (created.value) {
    case persistence::create_outcome::created: {
      auto& row = r.created;
      row.operation_id = op.operation_id;
      row.subject_id = op.subject_id;
      row.target_key = op.target_key;
      row.flow = std::string(workflow::to_string(op.flow));
      row.step = op.initial_step;
      row.phase = workflow::phase_of(op.initial_step);
      row.version = 1;
      row.title = op.title;
      row.payload_json = op.payload_json;
      row.requester = op.requester;
      row.repository = op.repository;
      row.target_branch = op.target_branch;
      if (!op.revert_of.empty()) row.revert_of = op.revert_of;
      row.updated_at_ms = svc.now_ms();
      actors::spawn_request_actor(svc, actors::seed_from_row(row, svc.now_ms()));
      svc.metrics->inc("changeflow_submissions_total", "Accepted change submissions", {{"outcome", "ACCEPTED"}});
      r.status = submit_status::accepted;
      return r;
    }
    case persistence::create_outcome::duplicate_operation:
      // The operation exists but this is not a replay of a stored answer (the idempotency record
      // expired, or another Idempotency-Key was used), or this very submission created it and its
      // answer was lost: a connection dropped after the COMMIT, and the group's members ran again
      // alone and found their rows. Then nothing carries the change yet: its actor starts from the
      // row now (when this instance owns it and its step needs one), not at the owner's next
      // changed-row poll. A live actor is left as it is: nothing changed for it.
      if (!svc.actors->find(op.operation_id)) {
        r.actor = wake_actor(db, svc, op.operation_id, std::nullopt, "submission found its change created");
        if (r.actor == "spawned") log::info("submit.actor_started_for_existing", {{"operation_id", op.operation_id}});
      }
      r.status = submit_status::duplicate;
      return r;
    case persistence::create_outcome::in_progress:
    case persistence::create_outcome::preempted: return blocked(db, op);
  }
  return r;
}

namespace {

/// Creates the operation and spawns its actor. The row the creation committed comes back in the
/// same round trip and is kept for the change's first status poll.
submit_result create_and_start(persistence::session db, runtime::services& svc, const persistence::new_operation& op) {
  const bool reads = svc.write_mark && svc.row_created;
  const auto mark = reads ? svc.write_mark() : 0;
  std::optional<persistence::operation_row> row;
  auto created = persistence::create_operation(db, op, reads ? &row : nullptr);
  // Before the actor starts: its first write then finds the row kept and replaces it.
  if (row) svc.row_created(*row, mark);
  return start_created(db, svc, op, created);
}

}  // namespace

namespace {

bool submit_unit(runtime::services& svc, const persistence::new_operation& op,
                 std::function<void(const submit_result&)> done,
                 std::shared_ptr<const persistence::keyed_creation> keyed) {
  if (!svc.transitions) return false;
  const bool reads = svc.write_mark && svc.row_created;
  const auto mark = reads ? svc.write_mark() : 0;
  auto* services = &svc;
  auto unit = persistence::create_operation_unit(
      op, reads,
      [services, op, mark, done](persistence::db_context& db,
                                 const persistence::db_result<persistence::create_outcome>& created,
                                 std::optional<persistence::operation_row> row) {
        // Before the actor starts: its first write then finds the row kept and replaces it.
        if (row) services->row_created(*row, mark);
        done(start_created(db, *services, op, created));
      },
      std::move(keyed));
  if (!unit) return false;
  return svc.transitions->submit_unit(std::move(unit));
}

}  // namespace

bool submit_grouped(runtime::services& svc, const persistence::new_operation& op,
                    std::function<void(const submit_result&)> done) {
  return submit_unit(svc, op, std::move(done), nullptr);
}

bool submit_grouped(runtime::services& svc, const persistence::new_operation& op, const idempotent_request& idem,
                    const stored_answer& accepted, std::function<void(const submit_result&)> done,
                    std::function<void(persistence::db_context&)> alone) {
  if (idem.key.empty() || svc.config->current()->faults().hold_after_idempotency_begin_ms > 0) return false;
  auto keyed = std::make_shared<persistence::keyed_creation>();
  const persistence::idem_owner owner{svc.instance_id, idem.in_flight_timeout};
  keyed->record_insert = [idem, owner, accepted](sql::Connection& conn) {
    return persistence::idem_completed_insert_sql(conn, idem.key, idem.fingerprint, static_cast<int>(idem.ttl.count()),
                                                  owner, static_cast<int>(accepted.status), accepted.body,
                                                  idem.operation_id);
  };
  auto* services = &svc;
  keyed->alone = [services, id = op.operation_id, alone = std::move(alone)](persistence::db_context& db) {
    alone(db);
    // The group may have committed this very creation and lost its answer: the gate then replays
    // the stored answer, and nothing has started the change's actor.
    if (!services->actors->find(id)) wake_actor(db, *services, id, std::nullopt, "keyed submission found its change");
  };
  return submit_unit(svc, op, std::move(done), std::move(keyed));
}

std::optional<gate_result> submit(persistence::session db, runtime::services& svc, const persistence::new_operation& op,
                                  const idempotent_request& idem, const submit_render& render) {
  if (idem.key.empty()) {
    render(create_and_start(db, svc, op));
    return std::nullopt;
  }
  // A re-run after a takeover is safe because the operation id is the same on the re-run (the
  // client's, or the one stored with the key by the request that died; a record from before
  // migration 19 names none, and its request derived the id from the key): create_operation answers
  // duplicate_operation when the dead request got as far as creating it, and simply creates it when
  // not.
  auto gate = begin_idempotent(db, svc, idem);
  if (gate.verdict != gate_verdict::run) return gate;
  config::hold_for_test_hook(svc.config->current()->faults().hold_after_idempotency_begin_ms);
  // The change the key names: this request's, or the one a request that died under the key chose.
  auto named = op;
  if (!gate.operation_id.empty()) named.operation_id = gate.operation_id;
  stored_answer answer;
  try {
    answer = render(create_and_start(db, svc, named));
  } catch (...) {
    finish_idempotent(db, idem, {500, {}});
    throw;
  }
  finish_idempotent(db, idem, answer);
  return std::nullopt;
}

}  // namespace changeflow::service
