#pragma once
// What an operator action does from a step: the operator edges of the transition table, read as
// actions (pure; the console's buttons, the ops API and bulk actions all plan through here).

#include "workflow/status.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::workflow {

/// confirm: the deploy is in effect although its confirmation failed or never came (-> CALLED_BACK).
enum class ops_action { retrigger, fail, close, resend_approval, confirm };
/// Every action, in the order the console offers them.
inline constexpr std::array all_ops_actions = {ops_action::retrigger, ops_action::resend_approval, ops_action::confirm,
                                               ops_action::fail, ops_action::close};
std::string_view to_string(ops_action a);
std::optional<ops_action> parse_ops_action(std::string_view name);

/// The operator edge a re-trigger takes from `current` (the step to run again), if any.
std::optional<step> retrigger_target(step current);

struct action_plan {
  std::optional<step> target;  // set when allowed
  std::string refusal;         // actionable message when not
};
/// What `a` would do from `current`. For close the target is CLOSE_SUCCEEDED; the close use case
/// switches to HANDLE_ALREADY_MERGED when it finds the MR merged (merged wins).
action_plan plan_action(ops_action a, step current);

}  // namespace changeflow::workflow
