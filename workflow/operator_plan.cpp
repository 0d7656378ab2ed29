#include "workflow/operator_plan.hpp"

#include "workflow/transitions.hpp"

#include <algorithm>

namespace changeflow::workflow {

std::string_view to_string(ops_action a) {
  switch (a) {
    case ops_action::retrigger: return "retrigger";
    case ops_action::fail: return "fail";
    case ops_action::close: return "close";
    case ops_action::resend_approval: return "resend-approval";
    case ops_action::confirm: return "confirm";
  }
  return "?";
}

std::optional<ops_action> parse_ops_action(std::string_view name) {
  for (auto a : all_ops_actions) {
    if (to_string(a) == name) return a;
  }
  return std::nullopt;
}

std::optional<step> retrigger_target(step current) {
  for (const auto& r : transition_table()) {
    if (r.from != current || r.by != actor_kind::operator_only) continue;
    // The operator's closing edges are separate actions, not a re-run of the step.
    if (r.to == step::FORCED_FAILED || r.to == step::CLOSE_SUCCEEDED || r.to == step::HANDLE_ALREADY_MERGED ||
        r.to == step::CALLED_BACK || r.to == step::CANCELLED)
      continue;
    return r.to;
  }
  return std::nullopt;
}

action_plan plan_action(ops_action a, step current) {
  auto name = std::string(to_string(current));
  auto targets = allowed_targets(current, actor_kind::operator_only);
  auto allows = [&](step s) { return std::find(targets.begin(), targets.end(), s) != targets.end(); };
  switch (a) {
    case ops_action::retrigger:
      if (auto t = retrigger_target(current)) return {t, {}};
      return {std::nullopt, "Step " + name + " has no re-trigger: it is still running on its own, or final"};
    case ops_action::fail:
      if (allows(step::FORCED_FAILED)) return {step::FORCED_FAILED, {}};
      return {std::nullopt, "Step " + name + " is final: a failure can no longer be forced"};
    case ops_action::close:
      if (allows(step::CLOSE_SUCCEEDED)) return {step::CLOSE_SUCCEEDED, {}};
      return {std::nullopt, "Step " + name + " cannot be closed (final, or already merged)"};
    case ops_action::confirm:
      if (allows(step::CALLED_BACK)) return {step::CALLED_BACK, {}};
      return {std::nullopt, "Only a merged change whose deploy is unconfirmed can be confirmed (now at " + name + ")"};
    case ops_action::resend_approval:
      if (allows(step::APPROVAL_SENDING)) return {step::APPROVAL_SENDING, {}};
      return {std::nullopt, "The approval can only be resent after a failed submission (now at " + name + ")"};
  }
  return {std::nullopt, "unknown action"};
}

}  // namespace changeflow::workflow
