#include "tests/support/invariants.hpp"

#include <gtest/gtest.h>

#include <iostream>
#include <map>

namespace changeflow::testing {

std::string describe(const rows& t, std::size_t max_rows) {
  std::string s;
  for (std::size_t i = 0; i < t.size() && i < max_rows; ++i) {
    for (const auto& c : t[i]) s += c + " | ";
    s += "\n";
  }
  if (t.size() > max_rows) s += "... (" + std::to_string(t.size()) + " rows)\n";
  return s;
}

namespace {

/// A named SQL invariant: the query lists the violating rows; none may exist.
void no_rows(const row_query& run, const std::string& tag, const std::string& name, const std::string& sql) {
  auto t = run(sql);
  EXPECT_TRUE(t.empty()) << name << " violated by " << t.size() << " row(s):\n" << describe(t) << "SQL: " << sql;
  std::cout << "[" << tag << "] " << name << ": " << (t.empty() ? "ok" : "VIOLATED") << "\n";
}

}  // namespace

void expect_invariants(const row_query& run, const std::string& tag) {
  no_rows(run, tag, "I4 created once (one creation event per operation)",
          "SELECT operation_id, COUNT(*) FROM operation_event WHERE from_step IS NULL GROUP BY operation_id "
          "HAVING COUNT(*) <> 1 UNION ALL SELECT o.operation_id, 0 FROM operation o WHERE NOT EXISTS "
          "(SELECT 1 FROM operation_event e WHERE e.operation_id = o.operation_id AND e.from_step IS NULL)");
  // I1: at most one active (RUNNING or BLOCKED) batch.
  no_rows(run, tag, "I1 single active batch",
          "SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4) HAVING COUNT(*) > 1");
  // I2: a claimed request belongs to one batch at a time: between two CLAIMED events of an operation
  // there is a REQUEUED (bisection / retry) event.
  {
    auto hist = run("SELECT operation_id, batch_id, event FROM merge_batch_history ORDER BY operation_id, id");
    std::string bad;
    std::map<std::string, std::string> held;  // operation -> batch it is claimed by ("" = not claimed)
    for (const auto& h : hist) {
      auto& cur = held[h[0]];
      if (h[2] == "CLAIMED") {
        if (!cur.empty()) bad += h[0] + " claimed by " + h[1] + " while held by " + cur + "\n";
        cur = h[1];
      } else {
        cur.clear();
      }
    }
    EXPECT_TRUE(bad.empty()) << "I2 double claim:\n" << bad;
    std::cout << "[" << tag << "] I2 no double claim (" << hist.size()
              << " history rows): " << (bad.empty() ? "ok" : "VIOLATED") << "\n";
  }
  no_rows(run, tag, "I2 claimed members belong to their batch",
          "SELECT o.operation_id, o.batch_id, r.batch_id FROM operation o LEFT JOIN merge_batch_request r "
          "ON r.operation_id = o.operation_id WHERE o.step = 10602 AND (r.batch_id IS NULL OR "
          "(o.batch_id IS NOT NULL AND o.batch_id <> r.batch_id))");
  no_rows(run, tag, "I4 no BATCH_WAITING operation without its waiting row",
          "SELECT o.operation_id FROM operation o LEFT JOIN merge_batch_request r ON r.operation_id = "
          "o.operation_id WHERE o.step = 10601 AND (r.id IS NULL OR r.batch_id IS NOT NULL)");
  no_rows(run, tag, "I4 waiting rows only for operations still in the batch path",
          "SELECT r.operation_id, o.step FROM merge_batch_request r JOIN operation o ON o.operation_id = "
          "r.operation_id WHERE r.batch_id IS NULL AND o.step <> 10601");
  // I5: one binding per relationship; the bound operation's phase is the binding's phase.
  no_rows(run, tag, "I5 one binding per relationship",
          "SELECT subject_id, target_key, COUNT(*) FROM binding GROUP BY subject_id, target_key HAVING COUNT(*) > 1");
  no_rows(run, tag, "I5 binding phase == operation phase",
          "SELECT b.subject_id, b.target_key, b.phase, o.phase FROM binding b JOIN operation o ON "
          "o.operation_id = b.operation_id WHERE b.phase <> o.phase");
  no_rows(run, tag, "I5 every operation is bound (unique relationships in this run)",
          "SELECT o.operation_id FROM operation o LEFT JOIN binding b ON b.operation_id = o.operation_id "
          "WHERE b.id IS NULL");
  // I6: every write is guarded by the version and leaves an event carrying the new version: the
  // row's version is the last event's version, and no version was written twice (a stale writer
  // that "won" would duplicate one).
  no_rows(run, tag, "I6 operation.version == MAX(event.version)",
          "SELECT o.operation_id, o.version, MAX(e.version) FROM operation o JOIN operation_event e ON "
          "e.operation_id = o.operation_id GROUP BY o.operation_id, o.version HAVING o.version <> MAX(e.version)");
  no_rows(run, tag, "I6 no version written twice",
          "SELECT operation_id, version, COUNT(*) FROM operation_event GROUP BY operation_id, version "
          "HAVING COUNT(*) > 1");
  // Counters equal flips: validation happens exactly once per validated operation.
  no_rows(run, tag, "validated at most once",
          "SELECT operation_id, COUNT(*) FROM operation_event WHERE to_phase = 'VALIDATED' AND "
          "(from_phase IS NULL OR from_phase <> 'VALIDATED') GROUP BY operation_id HAVING COUNT(*) > 1");
  no_rows(run, tag, "every VALIDATED operation has its validation event",
          "SELECT o.operation_id FROM operation o WHERE o.phase = 'VALIDATED' AND (SELECT COUNT(*) FROM "
          "operation_event e WHERE e.operation_id = o.operation_id AND e.to_phase = 'VALIDATED' AND "
          "e.from_phase <> 'VALIDATED') <> 1");
  no_rows(run, tag, "one applied approval decision per operation",
          "SELECT operation_id, COUNT(*) FROM callback_ledger WHERE kind = 'approval' AND outcome = 'APPLIED' "
          "GROUP BY operation_id HAVING COUNT(*) > 1");
  no_rows(run, tag, "approval ledger rows all classified",
          "SELECT delivery_id, outcome FROM callback_ledger WHERE kind = 'approval' AND outcome = 'PENDING'");
}

}  // namespace changeflow::testing
