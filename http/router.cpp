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
  routes_.push_back(std::move(r));
}

router::match_result router::match(std::string_view method, std::string_view path) const {
  match_result result;
  auto segments = split_path(path);
  for (const auto& r : routes_) {
    auto pattern = split_path(r.pattern);
    if (pattern.size() != segments.size()) continue;
    path_params params;
    bool ok = true;
    for (size_t i = 0; i < pattern.size() && ok; ++i) {
      auto p = pattern[i];
      if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
        params.emplace(std::string(p.substr(1, p.size() - 2)), std::string(segments[i]));
      } else if (p != segments[i]) {
        ok = false;
      }
    }
    if (!ok) continue;
    if (r.method != method) {
      result.allowed_methods.push_back(r.method);
      continue;
    }
    result.kind = match_kind::found;
    result.matched = &r;
    result.params = std::move(params);
    return result;
  }
  if (!result.allowed_methods.empty()) result.kind = match_kind::method_not_allowed;
  return result;
}

}  // namespace changeflow::http
