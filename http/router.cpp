#include "http/router.hpp"

namespace changeflow::http {

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

void router::add(route r) {
  std::vector<segment> parts;
  for (auto p : split_path(r.pattern)) {
    if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
      parts.push_back({std::string(p.substr(1, p.size() - 2)), true});
    } else {
      parts.push_back({std::string(p), false});
    }
  }
  segments_.push_back(std::move(parts));
  routes_.push_back(std::move(r));
}

// Runs for every request: the patterns were split when added, and a route's parameters are built
// only for the route that matches.
router::match_result router::match(std::string_view method, std::string_view path) const {
  match_result result;
  auto segments = split_path(path);
  for (std::size_t r = 0; r < routes_.size(); ++r) {
    const auto& pattern = segments_[r];
    if (pattern.size() != segments.size()) continue;
    bool ok = true;
    for (std::size_t i = 0; i < pattern.size() && ok; ++i) {
      ok = pattern[i].param || pattern[i].text == segments[i];
    }
    if (!ok) continue;
    if (routes_[r].method != method) {
      result.allowed_methods.push_back(routes_[r].method);
      continue;
    }
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i].param) result.params.emplace(pattern[i].text, std::string(segments[i]));
    }
    result.kind = match_kind::found;
    result.matched = &routes_[r];
    return result;
  }
  if (!result.allowed_methods.empty()) result.kind = match_kind::method_not_allowed;
  return result;
}

}  // namespace changeflow::http
