// The kept status rows against a real database: a read pool without threads (the test runs its
// jobs), so which read went to the database is visible — a row changed behind the service's back
// is only seen by a read that queried.
#include "service/status_read.hpp"

#include "actors/registry.hpp"
#include "config/snapshot.hpp"
#include "config/store.hpp"
#include "http/dto/change_dto.hpp"
#include "persistence/repo_test_support.hpp"
#include "persistence/sql_util.hpp"
#include "tests/support/test_db.hpp"
#include "workflow/status.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace changeflow;
using changeflow::testing::test_database;

namespace {

struct fixture {
  test_database db;
  std::unique_ptr<sql::Connection> conn = db.connect();
  std::shared_ptr<config::store> cfg;
  actors::registry live;  // no live actors: every change is read as not driven here
  runtime::services svc;
  persistence::db_pool pool{"db-read", 0, 100,
                            [s = db.settings()] { return std::make_unique<persistence::db_context>(s); }};
  persistence::db_context ctx{db.settings()};
  std::unique_ptr<service::status_reads> reads;

  nlohmann::json db_keys;

  explicit fixture(nlohmann::json db_keys_ = nlohmann::json::object(), std::size_t max_rows = service::status_rows_max)
      : db_keys(std::move(db_keys_)) {
    cfg = std::make_shared<config::store>(snapshot_with(600000));  // ten minutes: kept rows outlive any test
    svc.config = cfg.get();
    svc.actors = &live;
    reads = std::make_unique<service::status_reads>(svc, pool, max_rows);
  }

  /// The test's configuration with `http.status_cache_ms` = cache_ms.
  std::shared_ptr<const config::snapshot> snapshot_with(std::int64_t cache_ms) const {
    nlohmann::json keys{{"http", {{"status_cache_ms", cache_ms}}}};
    if (!db_keys.empty()) keys["db"] = db_keys;
    auto loaded = config::load_from_json(keys, [](const std::string&) { return std::nullopt; });
    if (!loaded.snap) ADD_FAILURE() << "test configuration refused";
    return loaded.snap;
  }

  /// A reload that changes `http.status_cache_ms`, as an operator's configuration change does.
  void set_status_cache_ms(std::int64_t cache_ms) { cfg->replace(snapshot_with(cache_ms)); }

  /// A plain read; the pool's queued jobs (a database read, if one was needed) run here.
  persistence::operation_row read(const std::string& id) {
    std::optional<service::status_view> got;
    reads->read(
        service::status_query{id}, [](const persistence::operation_row&, auto decide) { decide(true); },
        [&](service::status_view v) { got = std::move(v); });
    pool.run_queued(ctx);
    EXPECT_TRUE(got);
    return got ? got->row : persistence::operation_row{};
  }
  /// A plain read whose answer lands in `into`; nothing runs yet.
  void ask(const std::string& id, std::optional<service::status_view>& into) {
    reads->read(
        service::status_query{id}, [](const persistence::operation_row&, auto decide) { decide(true); },
        [&into](service::status_view v) { into = std::move(v); });
  }
  /// A wait of 20 s whose answer lands in `into`, with its first read run.
  void wait_for(const std::string& id, std::optional<service::status_view>& into) {
    service::status_query q{id};
    q.wait_ms = 20000;
    reads->read(
        q, [](const persistence::operation_row&, auto decide) { decide(true); },
        [&into](service::status_view v) { into = std::move(v); });
    pool.run_queued(ctx);
  }
  /// SELECTs the read pool's connection has run so far (the worker's own session counter).
  long selects_so_far() {
    long n = -1;
    pool.try_submit([&n](persistence::db_context& db) {
      n = persistence::detail::guarded<long>(db, [](sql::Connection& c) {
            std::unique_ptr<sql::Statement> st(c.createStatement());
            std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SHOW SESSION STATUS LIKE 'Com_select'"));
            rs->next();
            return persistence::db_result<long>::success(std::stol(rs->getString(2)));
          }).value;
    });
    pool.run_queued(ctx);
    return n;
  }
  /// A new change created with its row handed back (as the submission creates one).
  std::pair<persistence::new_operation, std::optional<persistence::operation_row>> create(const std::string& subject,
                                                                                          const std::string& target) {
    auto op = persistence::test::new_operation_for(subject, target);
    std::optional<persistence::operation_row> row;
    EXPECT_EQ(persistence::create_operation(*conn, op, &row).value, persistence::create_outcome::created);
    return {op, row};
  }
  /// Keeps a change's row as a creation through this instance does, without a query.
  std::string create_kept(const std::string& subject, const std::string& target) {
    const auto mark = reads->write_mark();
    auto [op, created] = this->create(subject, target);
    if (created) reads->created(*created, mark);
    return op.operation_id;
  }
  /// Ends the change in the database only (no signal to the service), at `step` in `phase`; its row
  /// as committed.
  persistence::operation_row end_behind_its_back(const std::string& id, workflow::step step, const std::string& phase) {
    std::unique_ptr<sql::Statement> st(conn->createStatement());
    st->executeUpdate("UPDATE operation SET step = " + std::to_string(static_cast<int>(step)) + ", phase = '" + phase +
                      "', version = version + 1 WHERE operation_id = '" + id + "'");
    return persistence::load_operation(*conn, id).value;
  }
  /// Moves the row in the database only (no signal to the service), returning it as committed.
  persistence::operation_row move_behind_its_back(const std::string& id, const std::string& title) {
    std::unique_ptr<sql::Statement> st(conn->createStatement());
    st->executeUpdate("UPDATE operation SET version = version + 1, title = '" + title + "' WHERE operation_id = '" +
                      id + "'");
    return persistence::load_operation(*conn, id).value;
  }
};

}  // namespace

TEST(KeptStatusRows, ACommittedRowOneVersionOnReplacesTheKeptRowAndAnythingElseDropsIt) {
  fixture f;
  auto id = persistence::test::new_op(*f.conn, "alice", "repo/a.yaml");
  EXPECT_EQ(f.read(id).version, 1);  // read and kept

  // The write hands over its committed row (version 2): the next read is answered with it, without
  // a query (the database says otherwise: its title was changed again behind the service's back).
  auto committed = f.move_behind_its_back(id, "v2");
  f.move_behind_its_back(id, "v3 unseen");
  f.reads->row_written_as(committed);
  auto r = f.read(id);
  EXPECT_EQ(r.version, 2);
  EXPECT_EQ(r.title, "v2");
  EXPECT_EQ(f.pool.stats().completed, 1u) << "only the first read queried";

  // A committed row that is not the next version of the kept one (here 4 over kept 2: a write came
  // between) is not kept; the next read queries.
  auto v4 = f.move_behind_its_back(id, "v4");
  f.reads->row_written_as(v4);
  EXPECT_EQ(f.read(id).title, "v4");
  EXPECT_EQ(f.pool.stats().completed, 2u);

  // A write without its row drops the kept row; a committed row arriving after it (an older write
  // finishing late) is not kept either, though it is one version on from the last row read.
  auto v5 = f.move_behind_its_back(id, "v5");
  f.reads->row_written(id);
  f.reads->row_written_as(v5);
  f.move_behind_its_back(id, "v6");
  EXPECT_EQ(f.read(id).title, "v6");
  EXPECT_EQ(f.pool.stats().completed, 3u);
}

// A write of two versions in one transaction (an approval decision and the workflow's next step)
// names the version it found: its row replaces the kept row of that version. Without the version
// found, the same row claims one write over a row two behind, and the kept row is dropped.
TEST(KeptStatusRows, AWriteOfTwoVersionsThatNamesTheVersionItFoundReplacesTheKeptRow) {
  fixture f;
  auto id = persistence::test::new_op(*f.conn, "alice", "repo/a.yaml");
  EXPECT_EQ(f.read(id).version, 1);  // read and kept
  f.move_behind_its_back(id, "v2");
  auto both = f.move_behind_its_back(id, "v3");
  f.move_behind_its_back(id, "v4 unseen");
  f.reads->row_written_as(both, 1);
  auto r = f.read(id);
  EXPECT_EQ(r.version, 3);
  EXPECT_EQ(r.title, "v3");
  EXPECT_EQ(f.pool.stats().completed, 1u) << "only the first read queried";

  f.move_behind_its_back(id, "v5");
  auto two_on = f.move_behind_its_back(id, "v6");
  f.reads->row_written_as(two_on);  // two versions over the kept 3, found version not named
  EXPECT_EQ(f.read(id).title, "v6");
  EXPECT_EQ(f.pool.stats().completed, 2u) << "the kept row was dropped and the read queried";
}

TEST(BatchedStatusReads, ReadsAskedTogetherAreAnsweredByOneQueryEachWithItsOwnRow) {
  fixture f(nlohmann::json{{"read_pool_size", 3}});  // two batch jobs at most; one connection stays free
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(persistence::test::new_op(*f.conn, "alice", "repo/t" + std::to_string(i)));
  auto before = f.selects_so_far();

  // Seven reads before any job runs: five changes, one of them twice, and one that does not exist.
  std::vector<std::optional<service::status_view>> got(7);
  for (int i = 0; i < 5; ++i) f.ask(ids[i], got[i]);
  f.ask(ids[2], got[5]);
  f.ask("00000000-0000-4000-8000-000000000000", got[6]);
  EXPECT_EQ(f.pool.stats().queued, 2u) << "a job per free batch slot, not a job per read";
  f.pool.run_queued(f.ctx);

  EXPECT_EQ(f.selects_so_far() - before, 1) << "the first job took all seven reads into one query";
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(got[i]) << i;
    EXPECT_EQ(got[i]->outcome, service::status_outcome::ok);
    EXPECT_EQ(got[i]->row.operation_id, ids[i]);
    EXPECT_EQ(got[i]->row.target_key, "repo/t" + std::to_string(i));
  }
  ASSERT_TRUE(got[5]);
  EXPECT_EQ(got[5]->row.operation_id, ids[2]);
  ASSERT_TRUE(got[6]);
  EXPECT_EQ(got[6]->outcome, service::status_outcome::not_found);
  EXPECT_EQ(f.reads->batch_stats().queries, 1u);
  EXPECT_EQ(f.reads->batch_stats().reads, 7u);
}

TEST(BatchedStatusReads, MoreReadsThanOneBatchTakesAreAnsweredByTheJobsThatFollow) {
  fixture f;  // db.read_pool_size 2: one batch job
  const std::size_t n = service::status_batch_max + 6;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i)
    ids.push_back(persistence::test::new_op(*f.conn, "bob", "repo/m" + std::to_string(i)));
  auto before = f.selects_so_far();
  std::vector<std::optional<service::status_view>> got(n);
  for (std::size_t i = 0; i < n; ++i) f.ask(ids[i], got[i]);
  EXPECT_EQ(f.pool.stats().queued, 1u);
  f.pool.run_queued(f.ctx);  // runs the first job and the one it queues for the rest
  EXPECT_EQ(f.selects_so_far() - before, 2);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(got[i]) << i;
    EXPECT_EQ(got[i]->row.operation_id, ids[i]);
  }
}

TEST(BatchedStatusReads, ABatchJobThePoolDropsUnrunAnswersItsReadsOverloadedAndTheNextReadsAreServed) {
  fixture f(nlohmann::json{{"read_pool_size", 3}});
  auto a = persistence::test::new_op(*f.conn, "carol", "repo/x");
  auto b = persistence::test::new_op(*f.conn, "carol", "repo/y");
  std::optional<service::status_view> ga, gb;
  f.ask(a, ga);
  f.ask(b, gb);
  ASSERT_EQ(f.pool.stats().queued, 2u);
  ASSERT_TRUE(f.pool.drop_oldest());
  EXPECT_FALSE(ga) << "the other job still takes the queue";
  ASSERT_TRUE(f.pool.drop_oldest());
  ASSERT_TRUE(ga);
  ASSERT_TRUE(gb);
  EXPECT_EQ(ga->outcome, service::status_outcome::overloaded);
  EXPECT_EQ(gb->outcome, service::status_outcome::overloaded);
  EXPECT_EQ(f.read(b).operation_id, b) << "no job is left counted as running";
}

TEST(BatchedStatusReads, AReadPastTheQueueBoundIsAnsweredOverloadedAtOnce) {
  fixture f(nlohmann::json{{"read_pool_size", 1}, {"queue_capacity", 2}});
  auto id = persistence::test::new_op(*f.conn, "dave", "repo/q");
  std::vector<std::optional<service::status_view>> got(3);
  for (auto& g : got) f.ask(id, g);
  ASSERT_TRUE(got[2]);
  EXPECT_EQ(got[2]->outcome, service::status_outcome::overloaded);
  EXPECT_FALSE(got[0]);
  f.pool.run_queued(f.ctx);
  ASSERT_TRUE(got[0]);
  ASSERT_TRUE(got[1]);
  EXPECT_EQ(got[0]->outcome, service::status_outcome::ok);
  EXPECT_EQ(got[1]->outcome, service::status_outcome::ok);
}

TEST(BatchedStatusReads, OneReadConnectionIsLeftToThePoolsOtherReads) {
  fixture f;  // db.read_pool_size 2
  auto a = persistence::test::new_op(*f.conn, "erin", "repo/e1");
  auto b = persistence::test::new_op(*f.conn, "erin", "repo/e2");
  std::optional<service::status_view> ga, gb;
  f.ask(a, ga);
  f.ask(b, gb);
  EXPECT_EQ(f.pool.stats().queued, 1u) << "the second read waits for the one batch job, not a second connection";
  f.pool.run_queued(f.ctx);
  ASSERT_TRUE(ga && gb);
  EXPECT_EQ(gb->row.operation_id, b);
}

TEST(WaitedStatusRows, AWriteThatHandsOverItsRowAnswersTheWaitWithoutAQuery) {
  fixture f;
  auto id = persistence::test::new_op(*f.conn, "gina", "repo/g.yaml");
  std::optional<service::status_view> got;
  f.wait_for(id, got);  // its first read: version 1, nothing moved yet
  ASSERT_FALSE(got) << "the wait answered before the change moved";
  const auto completed = f.pool.stats().completed;

  // The database moves on behind the service's back (v3); the write hands over the row it
  // committed (v2), which moved past the wait's version: the wait is answered with it, no read.
  auto committed = f.move_behind_its_back(id, "v2");
  f.move_behind_its_back(id, "v3 unseen");
  f.reads->row_written_as(committed);
  ASSERT_TRUE(got) << "the handed-over row did not answer the wait";
  EXPECT_EQ(got->row.version, 2);
  EXPECT_EQ(got->row.title, "v2");
  f.pool.run_queued(f.ctx);
  EXPECT_EQ(f.pool.stats().completed, completed) << "the wake queried the database";
  EXPECT_EQ(f.reads->waiting(), 0u);
}

TEST(WaitedStatusRows, AWriteWithoutItsRowWakesTheWaitByAReadOfTheDatabase) {
  fixture f;
  auto id = persistence::test::new_op(*f.conn, "hal", "repo/h.yaml");
  std::optional<service::status_view> got;
  f.wait_for(id, got);
  ASSERT_FALSE(got);
  f.move_behind_its_back(id, "v2");
  f.reads->row_written(id);
  EXPECT_FALSE(got) << "answered before the database was read";
  f.pool.run_queued(f.ctx);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->row.title, "v2");
}

// A change created through this instance is kept for its first poll.
TEST(KeptStatusRows, ACreatedRowAnswersTheFirstPollWithoutAQuery) {
  fixture f;
  const auto mark = f.reads->write_mark();
  auto [op, created] = f.create("ida", "repo/i.yaml");
  ASSERT_TRUE(created) << "the creation did not hand back its row";
  f.reads->created(*created, mark);

  // Changed behind the service's back: only a read that queried would see the new title.
  f.move_behind_its_back(op.operation_id, "moved elsewhere");
  auto r = f.read(op.operation_id);
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(r.title, created->title);
  EXPECT_EQ(f.pool.stats().completed, 0u) << "the first poll queried";
}

TEST(KeptStatusRows, ACreatedRowIsNotKeptWhenAWriteOfThisInstanceCameAfterItsMark) {
  fixture f;
  const auto mark = f.reads->write_mark();
  auto [op, created] = f.create("jo", "repo/j.yaml");
  ASSERT_TRUE(created);
  // The actor's first write lands (and is signalled) before the creation's row is handed over: the
  // creation's row is older than what the database holds, so it must not be kept.
  auto v2 = f.move_behind_its_back(op.operation_id, "v2");
  f.reads->row_written(op.operation_id);
  f.reads->created(*created, mark);
  EXPECT_EQ(f.read(op.operation_id).version, v2.version);
  EXPECT_EQ(f.pool.stats().completed, 1u);
}

// A status read takes only the columns a status answer shows (persistence::load_operation_views):
// every field of the document, both shapes (the plain answer and the one with a timeline), is the
// full row's, and the payload (a change's files, the largest column) is not read.
TEST(StatusReadRows, AStatusReadAnswersAsTheFullRowWithoutReadingThePayload) {
  fixture f;
  auto id = persistence::test::new_op(*f.conn, "alice", "repo/a.yaml", "alice@example.com", "config/changes");
  // Every field a status document shows set, none at its default.
  std::unique_ptr<sql::Statement> st(f.conn->createStatement());
  st->executeUpdate(
      "UPDATE operation SET mr_iid = 42, mr_url = 'http://gitlab.example/mr/42', revert_of = "
      "'00000000-0000-4000-8000-000000000001', reverted_by = '00000000-0000-4000-8000-000000000002', "
      "version = version + 1 WHERE operation_id = '" +
      id + "'");
  auto full = persistence::load_operation(*f.conn, id).value;
  ASSERT_FALSE(full.payload_json.empty());

  auto read = f.read(id);
  EXPECT_EQ(http::dto::status_body(read, false), http::dto::status_body(full, false));
  EXPECT_EQ(http::dto::to_json(read), http::dto::to_json(full));
  EXPECT_EQ(read.version, full.version);
  EXPECT_TRUE(read.payload_json.empty()) << "a status read brought the change's payload";
}

// Each memory of the status reads drops its oldest entry when full, never all of them at once: an
// emptied memory stalled every reader on the lock they share while it was freed (it showed in the
// status reads' p99) and sent every kept change back to the database together.
namespace {
/// `ids` in the order they were remembered, one more than the memory holds: the newest and the
/// second are answered without a query, the oldest (forgotten) by one.
void expect_only_the_oldest_forgotten(fixture& f, const std::vector<std::string>& ids) {
  const auto queries = f.pool.stats().completed;
  f.read(ids.back());
  f.read(ids[1]);
  EXPECT_EQ(f.pool.stats().completed, queries) << "a row newer than the oldest was forgotten";
  f.read(ids[0]);
  EXPECT_EQ(f.pool.stats().completed, queries + 1) << "the oldest row was still remembered past the bound";
}
}  // namespace

TEST(KeptStatusRows, AFullMemoryOfKeptRowsForgetsItsOldestRowOnly) {
  fixture f({}, 3);
  std::vector<std::string> ids;
  for (int i = 1; i <= 4; ++i) ids.push_back(f.create_kept("kim", "repo/k" + std::to_string(i) + ".yaml"));
  EXPECT_EQ(f.reads->kept_in_flight(), 3u);
  expect_only_the_oldest_forgotten(f, ids);
}

TEST(EndedStatusRows, AFullMemoryOfEndedRowsForgetsItsOldestRowOnly) {
  ASSERT_TRUE(service::immutable_step(workflow::step::CANCELLED));
  fixture f({}, 2);
  std::vector<std::string> ids;
  for (int i = 1; i <= 3; ++i) {
    ids.push_back(persistence::test::new_op(*f.conn, "eve", "repo/e" + std::to_string(i) + ".yaml"));
    f.end_behind_its_back(ids.back(), workflow::step::CANCELLED, "CANCELLED");
  }
  for (const auto& id : ids) EXPECT_EQ(f.read(id).phase, workflow::phase::CANCELLED);
  EXPECT_EQ(f.pool.stats().completed, 3u);
  EXPECT_EQ(f.reads->cached(), 2u);
  expect_only_the_oldest_forgotten(f, ids);
}

// A forgotten write mark must not let a read that began before that write keep its older row.
TEST(KeptStatusRows, AReadThatBeganBeforeAForgottenWriteKeepsNothing) {
  fixture f({}, 2);
  auto id = persistence::test::new_op(*f.conn, "wes", "repo/w.yaml");
  std::optional<service::status_view> got;
  f.ask(id, got);  // begins now; its query runs below, after the write
  f.move_behind_its_back(id, "v2");
  f.reads->row_written(id);
  f.reads->row_written("00000000-0000-4000-8000-00000000000b");
  f.reads->row_written("00000000-0000-4000-8000-00000000000c");  // the bound of 2 forgets id's mark
  f.pool.run_queued(f.ctx);
  ASSERT_TRUE(got);
  f.move_behind_its_back(id, "v3");
  EXPECT_EQ(f.read(id).title, "v3") << "the read that began before the write kept its row";
  EXPECT_EQ(f.pool.stats().completed, 2u);
}

TEST(KeptStatusRows, RowsOlderThanTheCacheTimeAreDroppedAsNewOnesAreKept) {
  fixture f;  // a cache time of ten minutes: the first two are kept however slow the machine is
  auto first = f.create("ola", "repo/o1.yaml").second;
  auto second = f.create("ola", "repo/o2.yaml").second;
  auto third = f.create("ola", "repo/o3.yaml").second;
  ASSERT_TRUE(first && second && third);
  f.reads->created(*first, f.reads->write_mark());
  f.reads->created(*second, f.reads->write_mark());
  EXPECT_EQ(f.reads->kept_in_flight(), 2u);
  const auto kept_by = std::chrono::steady_clock::now();
  f.set_status_cache_ms(50);  // reloaded: the two were kept longer ago than the new cache time once it passes
  while (std::chrono::steady_clock::now() - kept_by <= std::chrono::milliseconds(50)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  f.reads->created(*third, f.reads->write_mark());
  EXPECT_EQ(f.reads->kept_in_flight(), 1u)
      << "rows older than http.status_cache_ms stayed, or the new one was not kept";
}

// The floor a forgotten mark raises refuses only the reads that began before it.
TEST(KeptStatusRows, AReadThatBeganAfterAForgottenWriteKeepsItsRow) {
  fixture f({}, 2);
  auto id = persistence::test::new_op(*f.conn, "fay", "repo/f.yaml");
  f.reads->row_written(id);
  f.reads->row_written("00000000-0000-4000-8000-00000000000b");
  f.reads->row_written("00000000-0000-4000-8000-00000000000c");  // id's mark is forgotten
  f.read(id);
  f.read(id);
  EXPECT_EQ(f.pool.stats().completed, 1u) << "a read that began after every write did not keep its row";
}

// A change that ended behind this instance's back: a read that goes to the database sees the end and
// drops the row kept from before, so a plain read never goes back to that older state.
TEST(KeptStatusRows, AReadThatSeesTheEndDropsTheRowKeptFromBefore) {
  fixture f;
  auto id = f.create_kept("eda", "repo/d.yaml");
  f.end_behind_its_back(id, workflow::step::CALLED_BACK, "VALIDATED");
  std::optional<service::status_view> fresh;
  service::status_query q{id};
  q.fresh = true;
  f.reads->read(
      q, [](const persistence::operation_row&, auto decide) { decide(true); },
      [&fresh](service::status_view v) { fresh = std::move(v); });
  f.pool.run_queued(f.ctx);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->row.phase, workflow::phase::VALIDATED);
  EXPECT_EQ(f.read(id).phase, workflow::phase::VALIDATED) << "a plain read went back to the row kept before the end";
}

// A client stops polling at its change's end, so a row of an ended change read from the database is
// not kept; the row committed by the ending write of this instance replaces the kept row of the
// version it moved from (it answers that client's last poll).
TEST(KeptStatusRows, AnEndedRowReadFromTheDatabaseIsNotKeptButOneHandedOverByItsWriteIs) {
  fixture f;
  auto ended = persistence::test::new_op(*f.conn, "val", "repo/v1.yaml");
  f.end_behind_its_back(ended, workflow::step::CALLED_BACK, "VALIDATED");
  EXPECT_EQ(f.read(ended).phase, workflow::phase::VALIDATED);
  EXPECT_EQ(f.read(ended).phase, workflow::phase::VALIDATED);
  EXPECT_EQ(f.pool.stats().completed, 2u) << "an ended row read from the database answered the next read";
  EXPECT_EQ(f.reads->kept_in_flight(), 0u);

  auto moving = f.create_kept("val", "repo/v2.yaml");
  f.reads->row_written_as(f.end_behind_its_back(moving, workflow::step::CALLED_BACK, "VALIDATED"));
  EXPECT_EQ(f.read(moving).phase, workflow::phase::VALIDATED);
  EXPECT_EQ(f.pool.stats().completed, 2u) << "the row the ending write handed over was not kept";
}
