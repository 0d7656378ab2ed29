#include "persistence/sql_util.hpp"

#include "workflow/status.hpp"

namespace changeflow::persistence::detail {

std::string placeholders(std::size_t n) {
  std::string out;
  out.reserve(n * 3);
  for (std::size_t i = 0; i < n; ++i) out += i ? ", ?" : "?";
  return out;
}

const std::string& terminal_phase_list() {
  static const std::string list = [] {
    std::string s;
    for (auto p : workflow::all_phases) {
      if (!workflow::is_terminal(p)) continue;
      if (!s.empty()) s += ", ";
      s += "'" + std::string(workflow::to_string(p)) + "'";
    }
    return s;
  }();
  return list;
}

}  // namespace changeflow::persistence::detail
