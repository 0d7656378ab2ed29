#include "service/unified_diff.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace changeflow::service {

namespace {

constexpr std::size_t context = 3;

/// Lines with their terminator, so "x\n" and a last "x" without one differ as they must.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    auto end = nl == std::string_view::npos ? text.size() : nl + 1;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

struct edit {
  char kind;             // ' ' same, '-' removed, '+' added
  std::size_t old_line;  // 0-based index into the old lines (for ' ' and '-')
  std::size_t new_line;  // 0-based index into the new lines (for ' ' and '+')
};

/// The edit script: common head and tail, and in between a longest-common-subsequence alignment
/// (removals before additions in each changed block, as diff prints them).
std::vector<edit> edits_of(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b,
                           std::size_t max_cells) {
  std::size_t head = 0;
  while (head < a.size() && head < b.size() && a[head] == b[head]) ++head;
  std::size_t tail = 0;
  while (tail < a.size() - head && tail < b.size() - head && a[a.size() - 1 - tail] == b[b.size() - 1 - tail]) ++tail;
  const std::size_t n = a.size() - head - tail;
  const std::size_t m = b.size() - head - tail;
  std::vector<edit> out;
  for (std::size_t i = 0; i < head; ++i) out.push_back({' ', i, i});
  if (n * m > max_cells) {
    for (std::size_t i = 0; i < n; ++i) out.push_back({'-', head + i, head});
    for (std::size_t j = 0; j < m; ++j) out.push_back({'+', head + n, head + j});
  } else {
    // lcs[i][j]: longest common subsequence of a[head+i..] and b[head+j..].
    std::vector<std::vector<std::uint32_t>> lcs(n + 1, std::vector<std::uint32_t>(m + 1, 0));
    for (std::size_t i = n; i-- > 0;) {
      for (std::size_t j = m; j-- > 0;) {
        lcs[i][j] = a[head + i] == b[head + j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    std::size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[head + i] == b[head + j]) {
        out.push_back({' ', head + i++, head + j++});
      } else if (j == m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1])) {
        out.push_back({'-', head + i++, head + j});
      } else {
        out.push_back({'+', head + i, head + j++});
      }
    }
  }
  for (std::size_t k = 0; k < tail; ++k) out.push_back({' ', a.size() - tail + k, b.size() - tail + k});
  return out;
}

std::string range(std::size_t first, std::size_t count) {
  // diff's convention: an empty range names the line before it; a single line has no count.
  if (count == 0) return std::to_string(first) + ",0";
  if (count == 1) return std::to_string(first + 1);
  return std::to_string(first + 1) + "," + std::to_string(count);
}

void print_line(std::string& out, char kind, std::string_view line) {
  out += kind;
  if (!line.empty() && line.back() == '\n') {
    out.append(line.data(), line.size());
  } else {
    out.append(line.data(), line.size());
    out += "\n\\ No newline at end of file\n";
  }
}

}  // namespace

std::string unified_diff(const std::string& path, const diff_sides& sides, std::size_t max_cells) {
  if (sides.old_content == sides.new_content) return {};
  const auto a = lines_of(sides.old_content.value_or(std::string_view()));
  const auto b = lines_of(sides.new_content.value_or(std::string_view()));
  const auto edits = edits_of(a, b, max_cells);
  std::string out = std::string("--- ") + (sides.old_content ? "a/" + path : std::string("/dev/null")) + "\n" + "+++ " +
                    (sides.new_content ? "b/" + path : std::string("/dev/null")) + "\n";
  std::size_t k = 0;
  while (k < edits.size()) {
    // The next change, and the hunk around it: changes closer than twice the context share one.
    while (k < edits.size() && edits[k].kind == ' ') ++k;
    if (k == edits.size()) break;
    std::size_t start = k >= context ? k - context : 0;
    std::size_t end = k;  // one past the last change of the hunk
    std::size_t scan = k;
    while (scan < edits.size()) {
      if (edits[scan].kind != ' ') {
        end = scan + 1;
        ++scan;
        continue;
      }
      std::size_t same = 0;
      while (scan + same < edits.size() && edits[scan + same].kind == ' ') ++same;
      if (scan + same == edits.size() || same > 2 * context) break;
      scan += same;
    }
    const std::size_t stop = std::min(edits.size(), end + context);
    std::size_t old_count = 0, new_count = 0;
    for (std::size_t x = start; x < stop; ++x) {
      if (edits[x].kind != '+') ++old_count;
      if (edits[x].kind != '-') ++new_count;
    }
    out += "@@ -" + range(edits[start].old_line, old_count) + " +" + range(edits[start].new_line, new_count) + " @@\n";
    for (std::size_t x = start; x < stop; ++x) {
      const auto& e = edits[x];
      print_line(out, e.kind, e.kind == '+' ? b[e.new_line] : a[e.old_line]);
    }
    k = stop;
  }
  return out;
}

}  // namespace changeflow::service
