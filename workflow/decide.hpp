#pragma once
// The functional core of a request: given the operation's state and one event, what is the next
// step (persisted first) and which effects follow it. No I/O, no clock reads: time is an input.
// The request actor only executes decisions: persist the transition (guarded by version), then run
// the effects (external calls, timers), then feed the replies back in as events.

#include "messages/external_call.hpp"
#include "workflow/poll_schedule.hpp"
#include "workflow/status.hpp"
#include "workflow/transitions.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace changeflow::workflow {

/// The timeline's cause of APPROVAL_APPROVED -> CREATE_STARTED, whoever writes it: the actor, or
/// the approval callback's own transaction when it goes on in the workflow's place.
inline constexpr std::string_view create_after_approval_cause = "approved: create the MR";

// -- state

struct operation_state {
  std::string operation_id;
  std::string subject_id;
  std::string target_key;
  std::string title;
  flow order = flow::approve_then_create;
  step current = step::APPROVAL_SENDING;
  std::int64_t version = 0;
  std::optional<std::int64_t> mr_iid;
  std::string mr_sha;  // head SHA last seen; merges always pass it
  std::string mr_url;
  std::string approval_id;
  std::int64_t step_entered_ms = 0;  // when `current` was entered (database clock)
  std::int64_t wake_at_ms = 0;       // stored deadline of the current wait, 0 = none
  int polls = 0;                     // polls in the current wait (in memory; resets on restart)
  int merge_attempts = 0;
  // The MR read the next step may act on instead of reading again (in memory only: none after a
  // restart, a takeover or a re-read of the row). Kept from the read that ended the pipeline wait
  // to the approvals, and from the approvals to the first merge attempt; every other reply drops it.
  messages::mr_read last_read;
};

struct settings {
  poll_schedule polls;
  int merge_max_attempts = 5;
  std::int64_t approval_wait_ms = 7LL * 24 * 3600 * 1000;
  bool batch_enabled = false;
};

// -- external calls (effects) and their replies (events) are message types; see
// messages/external_call.hpp.
using messages::call_kind;
using messages::call_reply;
using messages::call_request;

// -- events

struct resume {};  // actor (re)started, a timer fired, or an operator re-triggered the step
struct reply {
  call_reply r;
};
using event = std::variant<resume, reply>;

// -- effects

struct transition_out {
  step to;
  std::string cause;
  std::optional<std::int64_t> wake_in_ms;  // stored deadline (durable timer)
  bool clear_wake = false;
  std::optional<std::int64_t> mr_iid;
  std::string mr_url;
  std::string approval_id;
  std::string last_error;
  /// Written with the step that follows it, in one commit (persistence::transition_request::before):
  /// this step's own work is a call that is safe to repeat, and its outcome is the next write (the
  /// next step, or the failed attempt of a retry), so a crash before that commit finds the change
  /// where it was and repeats the work. Until then the actor holds the step in memory. Only a step
  /// whose every outcome is a write may be marked so (at CREATE_SUCCEEDED, the approvals' outcome
  /// is a step or a failed attempt).
  bool with_next = false;
};

struct effect {
  enum class kind { call, timer, stop };
  kind what;
  call_request call{};
  std::int64_t delay_ms = 0;
};

/// An external call answered with a failure (retryable, refused, or never run for load).
struct failed_call {
  std::string error;
  int http_status = 0;  // 0 = no HTTP answer
};

struct decision {
  std::optional<transition_out> next;  // persisted (guarded) before any effect runs
  /// Set when the event was a failed call: a failed attempt of the current step, recorded with the
  /// transition (`next`) or, when the step is retried, by a write of its own before the retry timer.
  std::optional<failed_call> failed;
  std::vector<effect> effects;
  bool refused = false;  // the event does not apply to this state (ignored, logged)
  std::string note;      // why, for logs and the console
  // Updates to in-memory state that need no transition (sha seen, poll counters).
  std::optional<std::string> sha_seen;
  // A reply's MR read the next step may act on (operation_state::last_read); after a reply without
  // it the kept read is dropped.
  std::optional<messages::mr_read> keep_read;
  bool count_poll = false;
  bool count_merge_attempt = false;
};

/// The core. `now_ms` is the caller's notion of now (the actor passes its clock).
decision decide(const operation_state& s, const event& e, const settings& cfg, std::int64_t now_ms);

/// An actor lives only while the operation can move without outside help: not terminal, not MERGED
/// (deploy confirmation arrives as a callback or through reconciliation, both in the database).
bool needs_actor(step s);

}  // namespace changeflow::workflow
