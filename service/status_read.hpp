#pragma once
// Status reads of one change (GET /api/v1/changes/{id}), served cheaply, and the blocking wait.
//
// A read is ONE primary-key query on the status read pool (the row, with only the columns a status
// answer shows: persistence::load_operation_views, never the payload); the timeline is a second
// query, made only when asked for. Rows no one can move any more (a step without an outgoing edge in the
// transition table, VALIDATED excepted: a revert still links it) are kept in a small cache and
// answered without a query; such a row is immutable, so the cache is correct across instances.
// The row of a change still in flight, once read, answers further plain reads of it for
// `http.status_cache_ms`: a write of this instance (`row_written`) drops it at once, so this
// instance's own moves are always seen; a move made through another instance is seen within that
// bound (the same bound a wait's re-check gives); a caller that must see such a move at once asks
// for a fresh read (`fresh`, HTTP `Cache-Control: no-cache`). A read that began before a write of
// its change never keeps its (possibly older) row.
// A write that hands over the row it committed (the request actors' group commits) refreshes a kept
// row instead of dropping it, when the kept row is the version that write moved from, so a client
// polling a change the actor moves step by step is answered without a query after each step.
// A row of an ended change read from the database is not kept (a client stops polling at the end),
// and drops the row kept from before that end. Each memory here is bounded and forgets its oldest
// entries first, a few per call (base/fifo_map.hpp).
//
// A wait (`wait_ms` > 0) answers as soon as the change's version passes `since` (or the version it
// had when the wait began), or it has ended, or the wait ran out (then with the unchanged state). No
// thread blocks: the waiter holds the answer callback. It wakes:
//   - at once when a write of THIS instance moved the row (`row_written`, called from the commit
//     paths through runtime::services::row_written): one primary-key read of that change;
//   - through the re-check, for a change moved by another instance (or by a writer of this one that
//     does not call row_written): one bulk query for every waited change every
//     `http.status_wait_recheck_ms`, so such a move is seen within that bound.
// A waiter is registered before its first read, so a write that lands between that read and the
// registration cannot be missed.
//
// Reads that need the database and arrive together share one query: a first read (plain or the
// start of a wait, without the timeline) joins a queue, and at most `db.read_pool_size` - 1 batch jobs
// (at least one; the last connection stays free for the pool's other reads)
// drain it, each taking up to `status_batch_max` reads into one `operation_id IN (...)` query. A read
// that finds a batch job free is queried at once, alone; under load the reads that arrive while the
// jobs are busy wait for the next one together, so the queries per read fall as the load rises, and
// no read waits for a timer. The queue is bounded by `db.queue_capacity` (past it: overloaded), and
// a batch job the pool drops unrun answers its reads as overloaded instead of leaving them waiting.

#include "actors/periodic_job.hpp"
#include "base/fifo_map.hpp"
#include "persistence/db_pool.hpp"
#include "persistence/operation_repo.hpp"
#include "runtime/services.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace changeflow::service {

/// The longest wait a caller may ask for; it stays under the server's default handler timeout (30 s).
inline constexpr std::int64_t max_status_wait_ms = 25000;
/// Reads one batch job answers with one query at most.
inline constexpr std::size_t status_batch_max = 64;
/// Rows of ended changes, rows of changes in flight, and write marks each kept at most (past it, the
/// oldest goes: a change is read a few times, by its requester, soon after it moved, and then rarely).
inline constexpr std::size_t status_rows_max = 20000;

/// Database reads made for first reads: queries sent and the reads they answered.
struct status_batch_stats {
  std::uint64_t queries = 0;
  std::uint64_t reads = 0;
};

struct status_query {
  std::string operation_id;
  bool timeline = false;
  std::int64_t wait_ms = 0;           // 0: answer at once
  std::optional<std::int64_t> since;  // with a wait: answer once the version is past it (default: the first read's)
  bool fresh = false;                 // the database's state, never a kept in-flight row (Cache-Control: no-cache)
};

enum class status_outcome { ok, not_found, overloaded, failed };

struct status_view {
  status_outcome outcome = status_outcome::ok;
  persistence::operation_row row;
  std::optional<std::vector<persistence::operation_event_row>> timeline;  // when asked for
  bool live = false;                                                      // an actor drives it on this instance
  persistence::db_error error;
};

/// Whether the caller may see this change; calls `decide` exactly once, possibly later (a permission
/// round trip). A hidden change is answered as not found.
using view_check = std::function<void(const persistence::operation_row&, std::function<void(bool)> decide)>;
using status_answer = std::function<void(status_view)>;

class status_reads {
 public:
  /// `max_rows`: the bound of each of the three memories (ended rows, kept rows, write marks).
  status_reads(runtime::services& svc, persistence::db_pool& reads, std::size_t max_rows = status_rows_max);
  ~status_reads();
  status_reads(const status_reads&) = delete;
  status_reads& operator=(const status_reads&) = delete;

  /// One status read, or a wait. `answer` is called exactly once, from any thread.
  void read(status_query q, view_check may_view, status_answer answer);
  /// A write of this instance moved the row of `operation_id`; any thread.
  void row_written(const std::string& operation_id);
  /// As row_written, with the row that write committed: a kept row of the version the write found
  /// (`found_version`; 0: the one just before `row`'s, a write of one version), so no other write of
  /// this instance came between, is replaced by `row` instead of dropped. Any other kept state is
  /// dropped as by row_written, so an older row never replaces a newer one.
  void row_written_as(const persistence::operation_row& row, std::int64_t found_version = 0);
  /// This instance's writes so far; taken before a creation and handed back with its row.
  std::uint64_t write_mark() const;
  /// A change this instance just created, as the creation committed it: kept for its first polls
  /// unless a write of this instance to it came after `mark` (then that write's row is newer).
  void created(const persistence::operation_row& row, std::uint64_t mark);

  /// Starts and stops the re-check job (the waits' deadlines and changes moved elsewhere).
  void start();
  void stop();

  std::size_t waiting() const;
  std::size_t cached() const;
  std::size_t kept_in_flight() const;
  status_batch_stats batch_stats() const;

 private:
  struct waiter;
  using waiter_ptr = std::shared_ptr<waiter>;

  void written(const std::string& operation_id, const persistence::operation_row* committed,
               std::int64_t found_version = 0);
  void first_read(const waiter_ptr& w, view_check may_view);
  /// The part of a first read after its row was read: visibility, then the answer or the armed wait.
  void after_first_read(const waiter_ptr& w, const view_check& may_view, status_view first);
  /// Queues a batch job for the first reads; on a refusal, drain_lost() runs. Called with a job
  /// already counted in drains_.
  void submit_drain();
  /// One batch job's work: up to status_batch_max queued reads in one query, then the next job.
  void drain(persistence::db_context& db);
  /// One query for `batch`, then each read's answer (or its armed wait).
  struct pending_read;
  void answer_batch(persistence::db_context& db, std::vector<pending_read>& batch);
  /// A counted batch job will not run: uncount it, and when none is left, answer the queue overloaded.
  void drain_lost();
  /// A row held in memory, shared by the memory and the answers (not copied for each).
  using row_ptr = std::shared_ptr<const persistence::operation_row>;
  void answer_from_memory(row_ptr row, const view_check& may_view, status_answer answer);
  void reread(const waiter_ptr& w);
  /// Answers `w` from `row` when it moved or ended (or `deadline_passed`); true when it answered.
  bool settle(const waiter_ptr& w, persistence::session db, const persistence::operation_row& row,
              bool deadline_passed);
  void finish(const waiter_ptr& w, status_view view);
  /// Remembers a row no one can move any more (immutable_step); `shared`: the same row already shared.
  void remember(const persistence::operation_row& row, row_ptr shared = nullptr);
  row_ptr cached_row(const std::string& operation_id) const;
  bool recheck_pass(persistence::db_context& db);
  std::int64_t next_tick_ms() const;
  status_view view_of(persistence::session db, const persistence::operation_row& row, bool timeline) const;

  runtime::services& svc_;
  persistence::db_pool& reads_;
  actors::periodic_job job_;

  mutable std::mutex mutex_;
  std::unordered_multimap<std::string, waiter_ptr> waiters_;
  fifo_map<row_ptr> ended_;

  /// First reads waiting for a batch job; `began` is the write count when each was asked.
  struct pending_read {
    waiter_ptr w;
    view_check may_view;
    std::uint64_t began = 0;
  };
  std::deque<pending_read> pending_;
  std::size_t drains_ = 0;  // batch jobs queued or running
  status_batch_stats batch_stats_;

  /// In-flight rows kept for `http.status_cache_ms`. Shared, not copied: a batch's row is kept and
  /// answered from one allocation, and the memory's nodes stay small for its lookups.
  struct kept_row {
    row_ptr row;
    std::chrono::steady_clock::time_point read_at;
  };
  row_ptr kept(const std::string& operation_id) const;
  /// Keeps `row`, read by a read that began at write count `began` (or created then), unless the
  /// change was written since or a write mark newer than `began` was forgotten (`kept_floor_`). A
  /// row of an ended change is not kept, and drops a kept row of that change. `shared`: the same
  /// row already shared (a batch's), else it is copied when kept.
  void keep(const persistence::operation_row& row, std::uint64_t began, row_ptr shared = nullptr);
  /// Under mutex_: keeps `row` as read at `now`, first dropping the kept rows older than
  /// http.status_cache_ms (from the oldest on), so rows kept for changes nobody polls (every
  /// created change is kept) do not pile up to the bound.
  void keep_row(row_ptr row, std::chrono::steady_clock::time_point now, std::chrono::milliseconds ttl);
  fifo_map<kept_row> kept_;
  /// The write count when this instance last wrote each change: a read that began before it keeps
  /// nothing. Apart from the rows, so a change written and never read costs a key and a number, not
  /// a row (a passivated wait has no actor, and this map is what it leaves here).
  fifo_map<std::uint64_t> written_at_;
  std::uint64_t writes_ = 0;  // writes of this instance signalled so far (row_written, row_written_as)
  /// Reads that began before this count keep nothing: a write mark this new was forgotten.
  std::uint64_t kept_floor_ = 0;
  std::chrono::steady_clock::time_point last_recheck_ = std::chrono::steady_clock::now();
};

/// True when no one can move a row at `s` any more: the change has ended (REJECTED, CLOSED,
/// CANCELLED) and no edge leaves `s` for anyone, so such a row may be cached on every instance.
/// VALIDATED has ended too, but a revert still links it (reverted_by, version + 1): never cached.
bool immutable_step(workflow::step s);

}  // namespace changeflow::service
