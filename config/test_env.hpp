#pragma once
// Config tests: an environment made of the given variables only (nothing from the process).

#include "config/snapshot.hpp"

#include <map>
#include <optional>
#include <string>

namespace changeflow::config::test_support {

inline env_lookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace changeflow::config::test_support
