#pragma once
// The benchmark driver's SQL (bench/load_main.cpp; the service never calls these): progress and
// latency figures read from the service's tables, and the `raw` shape, which measures the
// database's own guarded-commit limit on a scratch table (bench_raw) to compare transition() with.
// The operations of one benchmark run are those whose subject id starts with "<tag>-".

#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/status.hpp"

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

/// Phase name -> operations of the run in that phase.
db_result<std::map<std::string, std::int64_t>> bench_phase_counts(session s, const std::string& tag);
/// Rows of operation_event, all runs (a run's transitions are the difference of two counts).
db_result<std::int64_t> bench_event_count(session s);

struct bench_latencies {
  std::vector<double> e2e_ms;                    // created -> first VALIDATED event, per operation
  std::vector<double> approval_cb_to_commit_ms;  // approval ledger row -> APPROVAL_APPROVED event
  std::vector<double> deploy_cb_to_commit_ms;    // first deploy callback of the MR -> CALLED_BACK event
};
/// Per-operation latencies of a run, in milliseconds, measured with the database's timestamps.
db_result<bench_latencies> bench_flow_latencies(session s, const std::string& tag);

/// SHOW GLOBAL STATUS values (whole server) of the named counters, e.g. Questions, Com_select,
/// Innodb_os_log_fsyncs; a name the server does not know is absent from the map.
db_result<std::map<std::string, std::int64_t>> bench_global_status(session s, const std::vector<std::string>& names);
/// A server variable (SELECT @@name) as text; empty when NULL.
db_result<std::string> bench_variable(session s, const std::string& name);

/// raw shape: creates the scratch table when missing and empties it.
db_result<done> bench_reset_raw_table(session s);
/// raw shape: a row at step 1, version 1.
db_result<done> bench_insert_raw_row(session s, const std::string& id);
/// repo shapes: puts a fresh operation on the first step of the benchmark's transition cycle
/// (setup only, not guarded and not recorded on the timeline).
db_result<done> bench_set_step(session s, const std::string& operation_id, workflow::step step);

struct bench_loop_result {
  long transactions = 0;
  long guard_misses = 0;          // guarded UPDATEs that matched no row
  std::optional<db_error> error;  // what ended the loop early
};
/// raw shape: until `stop`, over `ids` (bench_raw rows at version 1) in turn, one guarded
/// single-row UPDATE (prepared once) + COMMIT per transaction. Turns autocommit off for good: give
/// it a session of its own.
bench_loop_result bench_raw_loop(session s, const std::vector<std::string>& ids, const std::atomic<bool>& stop);

/// texts: `count` transactions over `ids` (bench_raw rows) in turn, each one text of 15 statements
/// (START TRANSACTION, six guarded UPDATEs each followed by SET @v = ROW_COUNT(), a SELECT of the
/// six counts, COMMIT), sent as separate statements of one text (`compound` false) or as one
/// compound statement (`compound` true, detail::run_script). Returns the UPDATEs that landed.
db_result<std::int64_t> bench_text_loop(session s, const std::vector<std::string>& ids, bool compound, long count);

/// repo shapes: removes the operations they created (subject 'rawbench-%'), with their events and
/// bindings, so the rehydrator never picks them up.
db_result<done> bench_delete_repo_rows(session s);

}  // namespace changeflow::persistence
