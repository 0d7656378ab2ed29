#pragma once
// Shared helpers of the libFuzzer targets. An invariant violation aborts, which libFuzzer reports
// as a crash and saves the input (scripts/fuzz prints where).

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond, what)                                                                            \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      std::fprintf(stderr, "fuzz invariant failed: %s [%s] at %s:%d\n", what, #cond, __FILE__, __LINE__); \
      std::abort();                                                                                       \
    }                                                                                                     \
  } while (0)

namespace changeflow::fuzz {

/// True when `s` is valid UTF-8 as nlohmann-json (and MariaDB utf8mb4) understand it.
inline bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();  // strict handler: throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

/// Strict dump; a string that is not valid UTF-8 aborts with `what`.
inline std::string strict_dump(const nlohmann::json& j, const char* what) {
  try {
    return j.dump();
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "fuzz invariant failed: %s: %s\n", what, e.what());
    std::abort();
  }
}

}  // namespace changeflow::fuzz
