#pragma once
// Plain message structs exchanged by actors, each with a free inspect(), registered in one CAF
// type-id block. Messages never carry sockets, connections or JSON documents: only values.

#include "messages/external_call.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace changeflow::messages {

// -- timers

/// A timer fired. `generation` lets an actor ignore timers it has since replaced.
struct wake {
  std::uint64_t generation = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wake& x) {
  return f(caf::meta::type_name("wake"), x.generation);
}

// -- step results

/// Reply of an external call made on the blocking pool.
struct external_reply {
  call_reply reply;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, external_reply& x) {
  return f(caf::meta::type_name("external_reply"), x.reply);
}

/// Reply of a guarded transition written on the database pool.
struct persisted {
  int outcome = 0;  // persistence::db_outcome
  std::int64_t new_version = 0;
  int to_step = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, persisted& x) {
  return f(caf::meta::type_name("persisted"), x.outcome, x.new_version, x.to_step, x.error);
}

/// The operation's row as read from the database (after a guard miss, a callback or an operator
/// action changed it elsewhere).
struct row_loaded {
  int outcome = 0;  // persistence::db_outcome
  int step = 0;
  std::int64_t version = 0;
  std::int64_t mr_iid = 0;
  std::string mr_url;
  std::string approval_id;
  std::int64_t age_ms = 0;  // time since the last transition, database clock
  /// The row's stored next wake-up (epoch ms, 0: none); -1 when the row was not read (a nudge that
  /// named its write stands in for the read and does not know it).
  std::int64_t wake_at_ms = -1;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, row_loaded& x) {
  return f(caf::meta::type_name("row_loaded"), x.outcome, x.step, x.version, x.mr_iid, x.mr_url, x.approval_id,
           x.age_ms, x.wake_at_ms, x.error);
}

// -- nudges from outside

/// Something else (a callback, an operator, another instance) changed the row: reload it.
struct row_changed {
  std::string cause;
  /// When the writer knows what it committed and moved only the step (an approval callback): the
  /// step code and version it wrote (0: unknown), and the version it found (0: version - 1; an
  /// approval that went on to the workflow's next step wrote two). An actor that holds the version
  /// found takes them as read, without reading the row; any other actor reads it.
  int step = 0;
  std::int64_t version = 0;
  std::int64_t from_version = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, row_changed& x) {
  return f(caf::meta::type_name("row_changed"), x.cause, x.step, x.version, x.from_version);
}

/// GitLab said, through a webhook, that something this operation waits for happened: a pipeline
/// reached a status, or its MR was merged or closed. The actor decides whether its current wait
/// ends now (workflow::ends_wait); the MR is then read at once instead of at the next poll.
struct gitlab_event {
  enum kind : int { pipeline = 0, merge_request = 1 };
  int what = pipeline;
  std::string sha;     // pipeline: the commit it ran on
  std::string status;  // pipeline: success, failed, running, ...
  std::string action;  // merge request: merge, close, update, ...
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gitlab_event& x) {
  return f(caf::meta::type_name("gitlab_event"), x.what, x.sha, x.status, x.action);
}

// -- inspection

struct inspect_request {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inspect_request&) {
  return f(caf::meta::type_name("inspect_request"));
}

/// What the console shows for one live actor. JSON text keeps the actor protocol independent of
/// the wire DTO.
struct actor_snapshot {
  std::string json;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_snapshot& x) {
  return f(caf::meta::type_name("actor_snapshot"), x.json);
}

}  // namespace changeflow::messages

CAF_BEGIN_TYPE_ID_BLOCK(changeflow, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::wake))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::external_reply))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::persisted))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::row_loaded))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::row_changed))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::inspect_request))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::actor_snapshot))
CAF_ADD_TYPE_ID(changeflow, (changeflow::messages::gitlab_event))
CAF_END_TYPE_ID_BLOCK(changeflow)
