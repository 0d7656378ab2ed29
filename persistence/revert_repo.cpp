#include "persistence/revert_repo.hpp"

#include "persistence/operation_sql.hpp"

#include <stdexcept>

namespace changeflow::persistence {

using detail::guarded;
using detail::prepare;
using detail::rs_ptr;

namespace {

/// The revert `revert_id` as it is now; nullopt when the row is gone (never deleted in practice).
std::optional<revert_link> read_link(sql::Connection& conn, const std::string& revert_id) {
  auto st = prepare(conn,
                    "SELECT o.phase, EXISTS(SELECT 1 FROM operation_event e WHERE e.operation_id = o.operation_id "
                    "AND e.to_phase = 'MERGED') AS reached_merged FROM operation o WHERE o.operation_id = ?");
  st->setString(1, revert_id);
  rs_ptr rs(st->executeQuery());
  if (!rs->next()) return std::nullopt;
  auto p = workflow::parse_phase(detail::str(*rs, "phase"));
  if (!p) throw std::runtime_error("unknown phase in database for operation " + revert_id);
  return revert_link{revert_id, *p, rs->getInt("reached_merged") != 0};
}

}  // namespace

db_result<std::optional<revert_link>> find_revert(session s, const operation_row& original) {
  using V = std::optional<revert_link>;
  if (!original.reverted_by) return db_result<V>::success(std::nullopt);
  return guarded<V>(s, [&](sql::Connection& conn) -> db_result<V> {
    return db_result<V>::success(read_link(conn, *original.reverted_by));
  });
}

db_result<revert_created> create_revert(session s, const new_operation& revert, const std::string& actor) {
  using R = db_result<revert_created>;
  if (auto refused = detail::refuse_initial_step(revert)) return R::failure(*refused);
  // As a submission: a deadlock victim runs again from its first read (create_operation).
  return detail::retry_on_deadlock<revert_created>([&] {
    return guarded<revert_created>(s, [&](sql::Connection& conn) -> R {
      detail::transaction tx(conn);
      // The original's row first (the lock order of every path: operation rows, then the binding):
      // holding it makes the check below and the link written after the creation one decision.
      auto so = prepare(conn, "SELECT step, phase, reverted_by FROM operation WHERE operation_id = ? FOR UPDATE");
      so->setString(1, revert.revert_of);
      rs_ptr ors(so->executeQuery());
      if (!ors->next()) return R::failure(db_outcome::not_found, "no operation " + revert.revert_of);
      revert_created out;
      auto step = workflow::step_from_code(ors->getInt("step"));
      auto phase = workflow::parse_phase(detail::str(*ors, "phase"));
      if (!step || !phase) throw std::runtime_error("unknown step or phase in database: " + revert.revert_of);
      out.original_step = *step;
      auto current = detail::opt_string(*ors, "reverted_by");
      if (current && *current == revert.operation_id) {
        out.created = create_outcome::duplicate_operation;
        return R::success(out);
      }
      std::optional<workflow::earlier_revert> earlier;
      if (current) {
        // An ended revert cannot start again, so what is read here stays true until the commit; a
        // revert still in flight is refused whatever it does next.
        auto link = read_link(conn, *current);
        if (link) earlier = link->state();
      }
      out.verdict = workflow::may_revert(*phase, earlier);
      if (out.verdict != workflow::revert_verdict::allowed) {
        if (current) out.current_revert = *current;
        return R::success(out);
      }
      auto created = detail::insert_operation(conn, revert);
      if (!created.ok()) return R::failure(created.outcome, created.error.message);
      out.created = created.value;
      if (created.value != create_outcome::created) return R::success(out);
      // The original's own write carries its event (the transition trigger of migration 3): the step
      // stays, the version moves, the timeline names the revert.
      if (!detail::link_revert(conn, revert.revert_of, revert.operation_id, actor, revert.owner_instance))
        return R::failure(db_outcome::preempted, "original moved while locked");
      tx.commit();
      return R::success(out);
    });
  });
}

}  // namespace changeflow::persistence
