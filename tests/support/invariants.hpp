#pragma once
// The SQL invariants every fault run checks when it ends (the chaos run, the cluster runs): each is
// a query that lists the rows violating it, and none may exist. I1 one active batch per partition;
// I2 a claimed member belongs to one batch at a time; I4 each change created once and admitted to
// the batch waiting set exactly while it waits; I5 one binding per relationship, in its operation's
// phase; I6 the row's version is its last event's and no version was written twice; validation and
// the approval decision applied once.

#include "tests/support/test_db.hpp"

#include <functional>
#include <string>

namespace changeflow::testing {

/// Runs one query and returns its rows (on whatever connection or node the caller chooses).
using row_query = std::function<rows(const std::string& sql)>;

/// Checks every invariant through `run` (a gtest failure per violated one, naming its rows and SQL)
/// and prints one line per invariant, prefixed with `tag`.
void expect_invariants(const row_query& run, const std::string& tag);

/// Up to `max_rows` rows as text, one per line.
std::string describe(const rows& t, std::size_t max_rows = 10);

}  // namespace changeflow::testing
