#pragma once
// Who may see or act on one operation. The user API and every per-operation user action (read,
// cancel, ...) ask the same question, so the answer lives here once, as pure functions over what
// the caller is (the verified account plus the rule codes the permission service granted in ONE
// round trip) and what the operation row says (its requester and subject):
//
//   view  the requester, a caller holding the subject's rule code, or an operator
//   act   the requester or an operator (holding the subject's code is not enough to cancel
//         someone else's change)
//
// Rule codes: the subject's is auth.subject_rule with {subject} replaced ("subject:payments"),
// the operators' are auth.ops_rules. A failed or timed-out permission check grants nothing, so
// only the requester keeps access while the permission service is down.

#include "config/snapshot.hpp"
#include "persistence/operation_repo.hpp"

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::http::middleware {

/// Requester recorded for a caller without a token where auth.required is false.
inline constexpr std::string_view anonymous_requester = "anonymous";

/// The rule codes that decide access to one subject, asked together in one round trip.
struct subject_rules {
  std::string subject_rule;            // "" when auth.subject_rule is cleared: nobody by subject
  std::vector<std::string> ops_rules;  // any of them makes the caller an operator
  /// Every code to ask for, without empties or repeats.
  std::vector<std::string> to_ask() const;
};

/// auth.subject_rule with every "{subject}" replaced by `subject`, and auth.ops_rules.
subject_rules rules_for_subject(const config::snapshot& snap, std::string_view subject);

/// The caller as the server knows it.
struct caller {
  std::string account;  // verified identity; "" never matches a requester
  /// Codes the permission service granted; nullopt when it was not asked or failed (grants
  /// nothing).
  std::optional<std::set<std::string>> granted;
};

enum class operation_use { view, act };

/// True when `account` submitted `op`. Needs no permission round trip, so callers check it first.
bool is_requester(std::string_view account, const persistence::operation_row& op);
/// True when the caller holds any of the operator codes.
bool is_operator(const caller& who, const subject_rules& rules);
/// True when the caller may submit for, or list, the subject: its code or an operator code.
bool permitted_for_subject(const caller& who, const subject_rules& rules);

/// The one ownership check: may `who` view or act on `op`? `rules` must be rules_for_subject(op's
/// subject); `who.granted` the answer for rules.to_ask().
bool may_use(const caller& who, const persistence::operation_row& op, const subject_rules& rules, operation_use use);

}  // namespace changeflow::http::middleware
