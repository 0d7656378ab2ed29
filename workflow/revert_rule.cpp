#include "workflow/revert_rule.hpp"

namespace changeflow::workflow {

std::string_view to_string(earlier_revert e) {
  switch (e) {
    case earlier_revert::in_flight: return "in_flight";
    case earlier_revert::in_effect: return "in_effect";
    case earlier_revert::without_effect: return "without_effect";
  }
  return "in_flight";
}

earlier_revert classify_earlier_revert(phase p, bool reached_merged) {
  if (!is_reappliable(p)) return earlier_revert::in_flight;
  if (p == phase::VALIDATED || reached_merged) return earlier_revert::in_effect;
  return earlier_revert::without_effect;
}

revert_verdict may_revert(phase original, std::optional<earlier_revert> current_revert) {
  if (original != phase::VALIDATED) return revert_verdict::not_validated;
  if (current_revert && *current_revert != earlier_revert::without_effect) return revert_verdict::already_reverted;
  return revert_verdict::allowed;
}

}  // namespace changeflow::workflow
