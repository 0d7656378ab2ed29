#include "http/middleware/ownership.hpp"

#include <algorithm>

namespace changeflow::http::middleware {

namespace {
bool holds(const caller& who, const std::string& rule) {
  return !rule.empty() && who.granted && who.granted->count(rule) > 0;
}
}  // namespace

std::vector<std::string> subject_rules::to_ask() const {
  std::vector<std::string> out;
  auto add = [&out](const std::string& r) {
    if (!r.empty() && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  };
  add(subject_rule);
  for (const auto& r : ops_rules) add(r);
  return out;
}

subject_rules rules_for_subject(const config::snapshot& snap, std::string_view subject) {
  subject_rules rules;
  rules.ops_rules = snap.auth().ops_rules;
  const auto& pattern = snap.auth().subject_rule;
  // Cleared, or a pattern without {subject} (one code for every subject would turn a grant for one
  // team into a grant for all): nobody is permitted by subject.
  constexpr std::string_view placeholder = "{subject}";
  if (!pattern || pattern->find(placeholder) == std::string::npos || subject.empty()) return rules;
  std::string code;
  std::string_view rest = *pattern;
  for (auto at = rest.find(placeholder); at != std::string_view::npos; at = rest.find(placeholder)) {
    code.append(rest.substr(0, at)).append(subject);
    rest.remove_prefix(at + placeholder.size());
  }
  code.append(rest);
  rules.subject_rule = std::move(code);
  return rules;
}

bool is_requester(std::string_view account, const persistence::operation_row& op) {
  return !account.empty() && !op.requester.empty() && op.requester == account;
}

bool is_operator(const caller& who, const subject_rules& rules) {
  return std::any_of(rules.ops_rules.begin(), rules.ops_rules.end(),
                     [&who](const std::string& r) { return holds(who, r); });
}

bool permitted_for_subject(const caller& who, const subject_rules& rules) {
  return holds(who, rules.subject_rule) || is_operator(who, rules);
}

bool may_use(const caller& who, const persistence::operation_row& op, const subject_rules& rules, operation_use use) {
  if (is_requester(who.account, op) || is_operator(who, rules)) return true;
  switch (use) {
    case operation_use::view: return holds(who, rules.subject_rule);
    case operation_use::act: return false;
  }
  return false;
}

}  // namespace changeflow::http::middleware
