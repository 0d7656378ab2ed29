#pragma once
// The value every repository call returns. Exceptions from the driver never leave persistence/:
// a call either succeeds (outcome ok, value set) or reports one of the closed outcomes of
// errors.hpp.

#include "persistence/errors.hpp"

#include <utility>

namespace changeflow::persistence {

template <class T>
struct db_result {
  db_outcome outcome = db_outcome::ok;
  T value{};
  db_error error;  // set when outcome != ok

  bool ok() const { return outcome == db_outcome::ok; }

  static db_result success(T v) { return db_result{db_outcome::ok, std::move(v), {}}; }
  static db_result failure(db_error e) {
    db_result r;
    r.outcome = e.outcome;
    r.error = std::move(e);
    return r;
  }
  static db_result failure(db_outcome o, std::string message = {}) {
    return failure(db_error{o, 0, std::move(message)});
  }
};

/// For calls whose only answer is the outcome.
struct done {};

}  // namespace changeflow::persistence
