#pragma once
// A unified diff (the `diff -u` / `git diff` text) of one file's old and new content, for the
// change preview. Line based, three lines of context, "\ No newline at end of file" where a side
// ends without one; new files diff against /dev/null and deleted files to it. Pure.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::service {

struct diff_sides {
  std::optional<std::string_view> old_content;  // nullopt: the file does not exist before
  std::optional<std::string_view> new_content;  // nullopt: the change deletes it
};

/// "" when both sides are equal (or both absent). Above `max_cells` (old lines x new lines after
/// the common head and tail are set aside) the middle is shown as removed and re-added instead of
/// being aligned line by line: still a correct diff, bounded in time and memory.
std::string unified_diff(const std::string& path, const diff_sides& sides, std::size_t max_cells = 4'000'000);

}  // namespace changeflow::service
