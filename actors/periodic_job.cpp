#include "actors/periodic_job.hpp"

#include "base/log.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <exception>
#include <utility>

namespace changeflow::actors {

namespace {

using tick_atom = caf::atom_constant<caf::atom("pj_tick")>;
using done_atom = caf::atom_constant<caf::atom("pj_done")>;

/// A paused job looks at its (hot) interval again this often.
constexpr auto paused_recheck = std::chrono::milliseconds(1000);

caf::behavior periodic_impl(caf::event_based_actor* self, std::shared_ptr<periodic_spec> spec) {
  auto arm = [self, spec] {
    auto every = spec->interval_ms();
    self->delayed_send(self, every > 0 ? std::chrono::milliseconds(every) : paused_recheck, tick_atom::value);
  };
  if (spec->first_at_once)
    self->send(self, tick_atom::value);
  else
    arm();
  return {
      [self, spec, arm](tick_atom) {
        if (spec->interval_ms() <= 0) return arm();
        auto me = caf::actor_cast<caf::actor>(self);
        bool started = false;
        try {
          started = spec->start_pass([me](bool again) { caf::anon_send(me, done_atom::value, again); });
        } catch (const std::exception& e) {
          log::warn("periodic.start_failed", {{"job", spec->name}, {"error", e.what()}});
        }
        if (!started) arm();
      },
      [self, arm](done_atom, bool again) {
        if (again) return self->send(self, tick_atom::value);
        arm();
      },
  };
}

}  // namespace

periodic_job::~periodic_job() {
  stop();
}

void periodic_job::start(caf::actor_system& system, periodic_spec spec) {
  if (actor_) return;
  *stopped_ = false;
  actor_ = system.spawn(periodic_impl, std::make_shared<periodic_spec>(std::move(spec)));
}

void periodic_job::stop() {
  *stopped_ = true;
  if (actor_) {
    caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
    actor_ = nullptr;
  }
}

std::function<bool(pass_done)> db_pass(persistence::db_pool& pool, std::shared_ptr<const std::atomic<bool>> stopped,
                                       std::string name, std::function<bool(persistence::db_context&)> work) {
  return [&pool, stopped = std::move(stopped), name = std::move(name), work = std::move(work)](pass_done done) {
    return pool.try_submit([stopped, name, work, done = std::move(done)](persistence::db_context& db) {
      bool again = false;
      if (!*stopped) {
        try {
          again = work(db);
        } catch (const std::exception& e) {
          log::warn("periodic.pass_failed", {{"job", name}, {"error", e.what()}});
        }
      }
      done(again && !*stopped);
    });
  };
}

}  // namespace changeflow::actors
