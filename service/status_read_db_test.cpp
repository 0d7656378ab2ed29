// The kept status rows against a real database: a read pool without threads (the test runs its
// jobs), so which read went to the database is visible — a row changed behind the service's back
// is only seen by a read that queried.
#include "service/status_read.hpp"

#include "actors/registry.hpp"
#include "config/snapshot.hpp"
#include "config/store.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>

#include <memory>

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

  fixture() {
    auto loaded = config::load_from_json(nlohmann::json{{"http", {{"status_cache_ms", 600000}}}},
                                         [](const std::string&) { return std::nullopt; });
    cfg = std::make_shared<config::store>(loaded.snap);
    svc.config = cfg.get();
    svc.actors = &live;
    reads = std::make_unique<service::status_reads>(svc, pool);
  }

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
