// changeflowd: assembly only. Reads the configuration, migrates the schema, starts the actor
// system, the worker pools and the HTTP server, and stops all of it on SIGINT/SIGTERM.

#include "actors/batch_coordinator.hpp"  // batch coordinator
#include "actors/idempotency_cleaner.hpp"
#include "actors/lease_keeper.hpp"  // durability
#include "actors/notification_dispatcher.hpp"
#include "actors/reconciler.hpp"  // callbacks/reconciliation
#include "actors/registry.hpp"
#include "actors/rehydrator.hpp"  // durability
#include "actors/sweeper.hpp"     // durability
#include "base/ids.hpp"
#include "base/log.hpp"
#include "clients/external_context.hpp"
#include "config/store.hpp"
#include "http/api.hpp"
#include "http/dto/change_dto.hpp"  // notifications
#include "http/handlers/batch.hpp"  // batch coordinator
#include "http/handlers/callbacks.hpp"
#include "http/handlers/changes.hpp"
#include "http/handlers/health.hpp"
#include "http/handlers/ops.hpp"           // ops area
#include "http/handlers/static_files.hpp"  // ops area
#include "http/server/server.hpp"
#include "messages/messages.hpp"
#include "metrics/registry.hpp"
#include "persistence/connection.hpp"
#include "persistence/db_pool.hpp"
#include "persistence/errors.hpp"
#include "persistence/migrations.hpp"
#include "runtime/services.hpp"
#include "service/status_read.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

using namespace changeflow;

namespace {

struct options {
  std::string config_path;
  std::string port_file;
  bool check_only = false;
  bool describe = false;
};

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "changeflowd: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--config")
      o.config_path = next();
    else if (a == "--port-file")
      o.port_file = next();
    else if (a == "--check-config")
      o.check_only = true;
    else if (a == "--describe-config")
      o.describe = true;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: changeflowd [--config FILE] [--port-file FILE] [--check-config] [--describe-config]\n";
      std::exit(0);
    } else {
      std::cerr << "changeflowd: unknown argument '" << a << "'\n";
      std::exit(2);
    }
  }
  return o;
}

/// A Markdown table cell: a '|' inside the text would end the cell.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

void describe_config() {
  std::cout << "| key | type | default | reload | meaning and fallback |\n|---|---|---|---|---|\n";
  for (const auto& k : config::all_keys()) {
    static const char* types[] = {"integer", "number", "boolean", "string", "list", "object"};
    std::cout << "| `" << k.name << "` | " << types[static_cast<int>(k.type)] << " | `"
              << (k.default_value.is_null() ? std::string("(none)") : k.default_value.dump()) << "` | "
              << (k.reload == config::reload_kind::hot ? "hot" : "restart") << " | " << cell(k.doc) << " |\n";
  }
}

persistence::db_settings db_settings_from(const config::snapshot& c) {
  const auto& db = c.db();
  persistence::db_settings s;
  s.host = db.host;
  s.port = static_cast<int>(db.port);
  s.socket = db.socket.value_or("");
  for (const auto& text : db.endpoints) {
    if (auto e = persistence::parse_endpoint(text)) s.endpoints.push_back(*e);
  }
  s.user = db.user;
  s.password = db.password;
  s.database = db.name;
  s.connect_timeout_ms = static_cast<int>(db.connect_timeout_ms);
  s.read_timeout_ms = static_cast<int>(db.read_timeout_ms);
  return s;
}

/// Takes a stop signal (SIGTERM or SIGINT, blocked for sigwait) that is pending or arrives within
/// `wait`; 0 when none did.
int take_stop_signal(const sigset_t& stop_signals, std::chrono::milliseconds wait) {
  const auto ms = wait.count();
  const timespec pause{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000 * 1000};
  siginfo_t info{};
  const int sig = sigtimedwait(&stop_signals, &info, &pause);
  return sig > 0 ? sig : 0;
}

enum class migrated { yes, failed, stop_requested };

// Connectivity problems are retried for a while (the database may still be starting); a migration
// that fails on its SQL stops start-up at once. A stop signal (blocked for sigwait, so it waits in
// `stop_signals`) ends the waiting at once instead of after the deadline.
migrated run_migrations(const persistence::db_settings& s, const config::snapshot& snap, const sigset_t& stop_signals) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    persistence::db_context db(s);
    auto r = persistence::migrate(db, persistence::all_migrations());
    if (!r.ok && !r.unreachable) {
      log::error("startup.migration_failed", {{"error", r.error}});
      return migrated::failed;
    }
    std::string error = r.error;
    int code = r.code;
    if (r.ok) {
      auto version = persistence::current_schema_version(db);
      if (version.ok()) {
        // Rows from before migration 7 belong to the one repository changeflow served then. A
        // failure here does not stop start-up: such rows are still served (their GitLab calls fall
        // back to gitlab.project and gitlab.target_branch) and the next start-up assigns them.
        // A cleared gitlab.project stops start-up right after (endpoints_from): adopt nothing then.
        auto adopted = snap.gitlab().project ? persistence::adopt_rows_without_repository(db, *snap.gitlab().project,
                                                                                          snap.gitlab().target_branch)
                                             : persistence::db_result<int>::success(0);
        if (!adopted.ok()) log::warn("startup.adoption_deferred", {{"error", adopted.error.message}});
        log::info("startup.migrated", {{"applied", r.applied},
                                       {"schema_version", version.value},
                                       {"rows_adopted", adopted.ok() ? adopted.value : 0}});
        return migrated::yes;
      }
      error = version.error.message;
      code = version.error.code;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      log::error("startup.database_unreachable", {{"error", error}, {"code", code}});
      return migrated::failed;
    }
    log::warn("startup.waiting_for_database", {{"error", error}});
    if (const int sig = take_stop_signal(stop_signals, std::chrono::milliseconds(500)); sig != 0) {
      log::info("shutdown.before_start", {{"signal", sig}});
      return migrated::stop_requested;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = parse_args(argc, argv);
  if (opts.describe) {
    describe_config();
    return 0;
  }
  log::set_component("changeflowd");

  // Block the stop signals before any thread starts, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto loaded = opts.config_path.empty() ? config::load_from_json(nlohmann::json::object(), config::process_env)
                                         : config::load_from_file(opts.config_path, config::process_env);
  if (!loaded.snap) {
    for (const auto& e : loaded.errors) std::cerr << "changeflowd: config error: " << e << "\n";
    log::error("startup.config_invalid", {{"errors", loaded.errors}});
    return 1;
  }
  // Secrets and tokens have no built-in values: a service that started with a guessable one would
  // accept forged callbacks and tokens, so a missing one stops start-up and names the key.
  if (auto missing = config::missing_required_keys(*loaded.snap); !missing.empty()) {
    for (const auto& e : missing) std::cerr << "changeflowd: config error: " << e << "\n";
    log::error("startup.config_incomplete", {{"errors", missing}});
    return 1;
  }
  for (const auto& text : loaded.snap->db().endpoints) {
    if (persistence::parse_endpoint(text)) continue;
    std::cerr << "changeflowd: config error: db.endpoints: '" << text << "' is not host:port\n";
    log::error("startup.config_invalid", {{"errors", {"db.endpoints: '" + text + "' is not host:port"}}});
    return 1;
  }
  if (opts.check_only) {
    std::cout << "config ok\n";
    return 0;
  }
  config::store cfg(loaded.snap, opts.config_path);
  auto snap = cfg.current();
  {
    const auto& level = snap->log().level;
    log::set_min_level(level == "debug"   ? log::level::debug
                       : level == "warn"  ? log::level::warn
                       : level == "error" ? log::level::error
                                          : log::level::info);
  }

  persistence::init_driver();
  auto db_settings = db_settings_from(*snap);
  switch (run_migrations(db_settings, *snap, stop_signals)) {
    case migrated::yes: break;
    case migrated::failed: return 1;
    case migrated::stop_requested: return 0;  // asked to stop: nothing had started
  }

  metrics::registry metrics;
  metrics.set("changeflow_build_info", "Build information", {{"version", "0.1.0"}}, 1);
  metrics.on_collect([&cfg](metrics::registry& m) {
    m.set("changeflow_config_reload_errors", "Failed configuration reloads", {},
          static_cast<double>(cfg.reload_error_count()));
  });

  // Declared before the pools and the actor system, so it is destroyed after them: a job or an actor
  // may still hold a request's responder (and with it the connection's session) when the server
  // stops, and the session must not outlive the server's io_context and counters.
  std::optional<http_server::server> server;

  // -- HTTP API: the address is bound first, so a start that cannot listen (the port taken, by
  // another instance for example) ends here, before this process starts a pool, an actor or a job
  // it would have to stop again, or takes the instance lease. Connections wait in the backlog until the
  // API is complete (server->start() below).
  http_server::server_options server_opts;
  const auto& http_cfg = snap->http();
  server_opts.address = http_cfg.address;
  server_opts.port = static_cast<std::uint16_t>(http_cfg.port);
  server_opts.threads = static_cast<int>(http_cfg.threads);
  server_opts.body_limit = static_cast<std::uint64_t>(http_cfg.body_limit_bytes);
  server_opts.header_limit = static_cast<std::uint32_t>(http_cfg.header_limit_bytes);
  server_opts.read_timeout = std::chrono::milliseconds(http_cfg.read_timeout_ms);
  server_opts.handler_timeout = std::chrono::milliseconds(http_cfg.handler_timeout_ms);
  auto api = std::make_shared<http_server::handler>();  // set below, before the server starts
  server.emplace(server_opts, [api](http_server::request&& req, http_server::responder reply) {
    (*api)(std::move(req), std::move(reply));
  });
  try {
    server->listen();
  } catch (const std::exception& e) {
    log::error("startup.listen_failed", {{"error", e.what()}});
    return 1;
  }

  auto db = persistence::make_db_pool(db_settings, static_cast<std::size_t>(snap->db().pool_size),
                                      static_cast<std::size_t>(snap->db().queue_capacity));
  db->reserve_slots(static_cast<std::size_t>(snap->db().reserved_for_callbacks()));
  // Transitions of the request actors that are ready together commit together, with the submissions
  // and callbacks ready at the same moment. One committer by default (db.transition_committers):
  // the next group forms while one commits, so groups are larger and commits fewer, and no two
  // groups can wait on each other's locks. Never more than half the pool's threads, so callbacks
  // and other database jobs always find a thread.
  const auto committers =
      std::clamp<std::size_t>(static_cast<std::size_t>(snap->db().transition_committers), 1,
                              std::max<std::size_t>(1, static_cast<std::size_t>(snap->db().pool_size) / 2));
  // faults.lose_group_answer_every (a test hook, hot): every Nth commit (a group, or a transition
  // alone) loses its answer after its COMMIT.
  std::atomic<std::uint64_t> groups_asked{0};
  persistence::transition_committer transitions(
      *db, static_cast<std::size_t>(snap->db().transition_group_max), committers,
      static_cast<std::size_t>(snap->db().queue_capacity), [&cfg, &groups_asked] {
        const auto every = static_cast<std::uint64_t>(cfg.current()->faults().lose_group_answer_every);
        return every > 0 && (groups_asked.fetch_add(1) + 1) % every == 0;
      });
  metrics.on_collect([&transitions](metrics::registry& m) {
    auto s = transitions.stats();
    m.set("changeflow_transition_groups",
          "Transactions that committed two or more members: transitions, submissions, callbacks (group commit)", {},
          static_cast<double>(s.groups));
    m.set("changeflow_group_units", "Submissions and callbacks handed to the group committer (in a group or alone)", {},
          static_cast<double>(s.units));
    m.set("changeflow_transition_queue", "Transitions, submissions and callbacks waiting for the group committer", {},
          static_cast<double>(s.queued));
    m.set("changeflow_transitions_grouped", "Transitions committed in a group with others", {},
          static_cast<double>(s.grouped));
    m.set("changeflow_transitions_alone", "Transitions committed alone (no other was ready)", {},
          static_cast<double>(s.alone));
    m.set("changeflow_transition_groups_failed",
          "Groups that failed as a whole (a deadlock, a lost connection, an answer lost after the COMMIT); their "
          "members ran again alone",
          {}, static_cast<double>(s.failed_groups));
    m.set("changeflow_transition_groups_recovered",
          "Groups whose answer was lost after their COMMIT and whose receipt gave every member its outcome", {},
          static_cast<double>(s.recovered_groups));
    m.set("changeflow_transition_group_largest", "Largest group committed since start", {},
          static_cast<double>(s.largest_group));
    m.set("changeflow_transition_committer_busy_seconds",
          "Wall time the group committers spent committing and running completions since start (near the elapsed "
          "time: the committer limits throughput)",
          {}, static_cast<double>(s.busy_us) / 1e6);
    m.set("changeflow_transition_committer_completion_seconds",
          "The part of the committers' busy time spent after a group's round trip, telling its actors and callers "
          "(the connection idle meanwhile)",
          {}, static_cast<double>(s.completions_us) / 1e6);
    auto sent = persistence::scripts_sent();
    m.set("changeflow_db_scripts", "Texts of several SQL statements sent in one round trip since start", {},
          static_cast<double>(sent.texts));
    m.set("changeflow_db_script_statements", "SQL statements those texts carried", {},
          static_cast<double>(sent.statements));
    m.set("changeflow_db_compound_statements",
          "Compound statements (BEGIN NOT ATOMIC ... END) sent since start, one round trip each", {},
          static_cast<double>(sent.compound_texts));
    m.set("changeflow_db_compound_inner_statements", "SQL statements those compound statements carried", {},
          static_cast<double>(sent.compound_statements));
  });
  // Status reads get their own connections so they never queue behind workflow transitions.
  auto read_db = persistence::make_db_pool(db_settings, static_cast<std::size_t>(snap->db().read_pool_size),
                                           static_cast<std::size_t>(snap->db().queue_capacity), "db-read");
  metrics.on_collect([&db, &read_db](metrics::registry& m) {
    for (auto [name, pool] : {std::pair{"db", db.get()}, std::pair{"db-read", read_db.get()}}) {
      auto s = pool->stats();
      m.set("changeflow_pool_queue_depth", "Queued jobs per worker pool", {{"pool", name}},
            static_cast<double>(s.queued));
      m.set("changeflow_pool_rejected", "Jobs rejected by a full worker pool", {{"pool", name}},
            static_cast<double>(s.rejected));
      m.set("changeflow_pool_job_failures", "Jobs that threw (logged as worker_pool.job_failed)", {{"pool", name}},
            static_cast<double>(s.failed));
    }
  });

  auto endpoints = clients::endpoints_from(*snap);
  if (!endpoints) {
    log::error("startup.external_config_invalid", {{"error", clients::describe(endpoints.error())}});
    return 1;
  }
  auto shared = std::make_shared<clients::external_shared>();
  runtime::external_pool external(
      "external", static_cast<std::size_t>(snap->external().pool_size),
      static_cast<std::size_t>(snap->external().queue_capacity),
      clients::external_context_factory(shared, endpoints.value(), clients::call_settings_from(*snap)));
  metrics.on_collect([&external, shared](metrics::registry& m) {
    auto s = external.stats();
    m.set("changeflow_pool_queue_depth", "Queued jobs per worker pool", {{"pool", "external"}},
          static_cast<double>(s.queued));
    m.set("changeflow_pool_rejected", "Jobs rejected by a full worker pool", {{"pool", "external"}},
          static_cast<double>(s.rejected));
    m.set("changeflow_pool_job_failures", "Jobs that threw (logged as worker_pool.job_failed)", {{"pool", "external"}},
          static_cast<double>(s.failed));
    for (auto* b : {&shared->gitlab, &shared->approval, &shared->permission}) {
      m.set("changeflow_breaker_state", "Circuit breaker state (0 closed, 1 open, 2 half-open)",
            {{"system", b->system()}}, static_cast<double>(b->state_value()));
    }
  });

  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", static_cast<size_t>(snap->actors().threads));
  // CAF's default work-stealing workers poll their queues and nap between polls; on a 2-core host
  // that polling measured as the largest CPU cost per change. Work sharing blocks idle workers on a
  // condition variable instead.
  caf_cfg.set("scheduler.policy",
              snap->actors().scheduler == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  caf_cfg.add_message_types<caf::id_block::changeflow>();
  caf::actor_system system{caf_cfg};

  actors::registry live_actors;
  runtime::services svc;
  svc.system = &system;
  svc.config = &cfg;
  svc.db = db.get();
  svc.transitions = &transitions;
  svc.external = &external;
  svc.metrics = &metrics;
  svc.actors = &live_actors;
  svc.instance_id = snap->instance().id.value_or("changeflowd-" + std::to_string(::getpid()) + "-" +
                                                 ids::new_error_id().substr(0, 6));
  metrics.on_collect([&live_actors](metrics::registry& m) {
    std::map<std::string, double> by_phase;
    for (auto p : workflow::all_phases) by_phase[std::string(workflow::to_string(p))] = 0;
    for (auto [code, n] : live_actors.count_by_step()) {
      if (auto s = workflow::step_from_code(code))
        by_phase[std::string(workflow::to_string(workflow::phase_of(*s)))] += n;
    }
    for (auto& [phase, n] : by_phase)
      m.set("changeflow_live_actors", "Live request actors by phase", {{"phase", phase}}, n);
  });

  // Status reads and their waits: every write of this instance that moves a row tells the waiters
  // of that change (set before any actor or pool job runs: the hook is read from their threads).
  service::status_reads status_reads(svc, *read_db);
  svc.row_written = [&status_reads](const std::string& operation_id) { status_reads.row_written(operation_id); };
  svc.row_written_as = [&status_reads](const persistence::operation_row& row, std::int64_t found_version) {
    status_reads.row_written_as(row, found_version);
  };
  svc.write_mark = [&status_reads] { return status_reads.write_mark(); };
  svc.row_created = [&status_reads](const persistence::operation_row& row, std::uint64_t mark) {
    status_reads.created(row, mark);
  };
  status_reads.start();
  metrics.on_collect([&status_reads](metrics::registry& m) {
    m.set("changeflow_status_waiters", "Status reads waiting for their change to move (?wait=)", {},
          static_cast<double>(status_reads.waiting()));
    m.set("changeflow_status_cached_rows", "Ended changes whose status is answered from memory", {},
          static_cast<double>(status_reads.cached()));
    m.set("changeflow_db_conflicts_total",
          "Deadlocks and Galera certification failures (MariaDB 1213) met by this process, each retried", {},
          static_cast<double>(persistence::conflicts_seen()));
    m.set("changeflow_db_unparsed_trigger_evictions_total",
          "Writes that met a table instance whose trigger the server failed to parse (MariaDB 1710); each "
          "flushed this node's unused table instances and was retried",
          {}, static_cast<double>(persistence::unparsed_triggers_evicted()));
    const auto skipped = persistence::nodes_skipped();
    m.set("changeflow_db_nodes_unreachable_total",
          "Connections that passed over a node of db.endpoints that did not accept them, for the next node", {},
          static_cast<double>(skipped.unreachable));
    m.set("changeflow_db_nodes_without_quorum_total",
          "Connections that passed over a node of db.endpoints without quorum (wsrep_ready OFF), for the next node", {},
          static_cast<double>(skipped.without_quorum));
    const auto batches = status_reads.batch_stats();
    m.set("changeflow_status_read_queries_total",
          "Queries sent for status reads that needed the database (reads asked together share one)", {},
          static_cast<double>(batches.queries));
    m.set("changeflow_status_read_db_reads_total", "Status reads those queries answered", {},
          static_cast<double>(batches.reads));
    m.set("changeflow_status_kept_rows",
          "Rows of changes in flight kept to answer plain status reads (http.status_cache_ms)", {},
          static_cast<double>(status_reads.kept_in_flight()));
  });

  http::service_context ctx{cfg, *db, metrics, persistence::all_migrations().back().version, nullptr, &svc};
  ctx.reads = read_db.get();
  ctx.status = &status_reads;
  // -- durability: register the instance lease, resume every owned operation (paced; /readyz
  // says "rehydrating N/M" until done), take over expired peers' operations, sweep timeouts.
  actors::rehydrator rehydrate(svc);
  actors::lease_keeper lease(svc, rehydrate);
  actors::sweeper sweeps(svc, rehydrate);
  int stop_signal = 0;
  const auto registered = lease.register_now(std::chrono::seconds(10), [&stop_signals, &stop_signal] {
    stop_signal = take_stop_signal(stop_signals, std::chrono::milliseconds(0));
    return stop_signal != 0;
  });
  if (registered != actors::lease_keeper::registration::registered) {
    const bool asked = registered == actors::lease_keeper::registration::stop_requested;
    if (asked) {
      log::info("shutdown.before_start", {{"signal", stop_signal}, {"during", "lease registration"}});
    } else {
      log::error("startup.instance_register_failed", {{"instance_id", svc.instance_id}});
    }
    // The registration may still be waiting in the database (a row lock, a slow server) on a pool
    // thread, and the pools' orderly stop would wait for it, up to db.read_timeout_ms. Nothing that
    // needs an orderly stop has started: no actor, periodic job or accepted connection. The server
    // rolls back the open registration when its connection closes, so the process ends here.
    std::_Exit(asked ? 0 : 1);
  }
  {
    auto earlier = ctx.not_ready_reason;
    ctx.not_ready_reason = [earlier, &rehydrate]() -> std::optional<std::string> {
      if (earlier) {
        if (auto r = earlier()) return r;
      }
      return rehydrate.not_ready_reason();
    };
  }
  rehydrate.start();
  lease.start();
  sweeps.start();
  metrics.on_collect([&rehydrate](metrics::registry& m) {
    m.set("changeflow_rehydrate_queue", "Operations waiting for a paced resume", {},
          static_cast<double>(rehydrate.queued()));
  });
  // Periodic jobs (actors/periodic_job.hpp); each stops when its handle does.
  actors::periodic_job idem_cleaner;
  actors::start_idempotency_cleanup(svc, idem_cleaner);
  // Reconciliation of lost deploy callbacks (reconcile.interval_ms, hot; manual trigger via ops).
  actors::periodic_job reconciler;
  actors::start_reconciler(svc, reconciler);
  // Notifications: sends the outbox the timeline trigger fills (notifications.*, hot). The status
  // document comes from http/dto so every event carries exactly what GET /api/v1/changes/{id} shows.
  actors::periodic_job notifier;
  actors::start_notification_dispatcher(
      svc,
      {[](const persistence::operation_row& row, const std::vector<persistence::operation_event_row>& events,
          bool live) { return http::dto::status_document(row, events, live); },
       [](const persistence::operation_event_row& e) { return http::dto::to_json(e); }},
      notifier);
  // One batch coordinator per instance, always running: a round is a lock-free pre-check when
  // nothing waits; batch.enabled only decides whether approved changes enter the waiting set.
  // It resumes a RUNNING batch at start.
  auto batch_coordinator = actors::spawn_batch_coordinator(svc);
  // -- HTTP API: one route table with its policies, shared with the tests (http::build_routes).
  auto routes = http::build_routes(ctx, batch_coordinator);

  *api = http::make_api(ctx, routes);
  server->start();  // already bound: accepting cannot fail here
  if (!opts.port_file.empty()) {
    std::string tmp = opts.port_file + ".tmp";
    std::ofstream(tmp) << server->port() << "\n";
    std::rename(tmp.c_str(), opts.port_file.c_str());
  }
  cfg.start_watching(std::chrono::milliseconds(500));
  log::info("startup.ready", {{"address", server_opts.address}, {"port", server->port()}});

  int sig = 0;
  sigwait(&stop_signals, &sig);
  log::info("shutdown.begin", {{"signal", sig}});
  server->stop_accepting();
  server->stop();
  cfg.stop_watching();
  idem_cleaner.stop();                                                      // api area
  status_reads.stop();                                                      // status waits
  reconciler.stop();                                                        // callbacks/reconciliation
  notifier.stop();                                                          // notifications
  caf::anon_send_exit(batch_coordinator, caf::exit_reason::user_shutdown);  // batch coordinator
  // -- durability: no new work; give in-flight steps until the deadline to finish and
  // persist (whatever is still running then resumes from its stored row at the next owner).
  sweeps.stop();
  lease.stop();
  rehydrate.stop();
  {
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg.current()->durability().shutdown_deadline_ms);
    while (std::chrono::steady_clock::now() < deadline &&
           !live_actors.list([](const actors::live_summary& a) { return a.busy; }, 1).empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Request actors are stateless beyond their rows: stop them, then the pools they use.
  for (const auto& a : live_actors.list(nullptr, SIZE_MAX)) {
    if (auto h = live_actors.find(a.operation_id)) caf::anon_send_exit(*h, caf::exit_reason::user_shutdown);
  }
  {
    // durability: each actor leaves the registry as it exits; wait for that (bounded) so no
    // actor outlives the registry and services it points to when main's locals are destroyed.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (live_actors.size() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (live_actors.size() > 0) {
      log::warn("shutdown.actors_still_live", {{"count", live_actors.size()}});
      system.await_actors_before_shutdown(false);
    }
  }
  external.stop();
  // Release the lease last (after the final fenced writes were queued) so peers take over at once.
  lease.release_now(std::chrono::seconds(3));  // durability
  db->stop();
  read_db->stop();
  log::info("shutdown.done");
  return 0;
}
