// Migration 14: transitions committed in groups learn their own outcome.
//
// A group of transitions of different operations is sent as one multi-statement text (one round
// trip) and committed as one transaction (one fsync): persistence::transition_group. Connector/C++
// 1.1 reports no affected-row count for the second and later statements of a multi-statement, so
// each guarded UPDATE could not tell whether it matched. This trigger tells it instead: while the
// session variable @changeflow_ack is not NULL (only inside a group, which sets it to '' first and
// back to NULL last), every updated operation row appends its id to it, and the group's last SELECT
// reads the list. A row whose guard did not match fires no trigger, so an id is in the list exactly
// when its transition landed. Outside a group the variable is NULL and the trigger does nothing.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v14() {
  return {
      R"sql(
CREATE OR REPLACE TRIGGER operation_group_ack AFTER UPDATE ON operation FOR EACH ROW
BEGIN
  IF @changeflow_ack IS NOT NULL THEN
    SET @changeflow_ack = CONCAT(@changeflow_ack, NEW.operation_id, ',');
  END IF;
END)sql",
  };
}

}  // namespace changeflow::persistence
