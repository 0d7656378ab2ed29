#include "clients/external_context.hpp"

#include "config/snapshot.hpp"

#include <charconv>

namespace changeflow::clients {

namespace {
call_error bad_setting(std::string key, std::string why) {
  call_error e;
  e.what = call_error::kind::invalid_argument;
  e.message = std::move(key) + ": " + std::move(why);
  return e;
}
}  // namespace

result<external_endpoints> endpoints_from(const config::snapshot& snap) {
  external_endpoints out;
  struct url_key {
    const char* key;
    url_parts* target;
  };
  for (auto [key, target] : {url_key{"gitlab.base_url", &out.gitlab_api}, url_key{"approval.base_url", &out.approval},
                             url_key{"permission.base_url", &out.permission}}) {
    auto value = snap.get_string(key);
    auto parsed = value ? parse_url(*value) : std::nullopt;
    if (!parsed) return bad_setting(key, "missing or not an http://host:port/path URL");
    *target = *parsed;
  }
  out.project = snap.string_or("gitlab.project", "");
  if (out.project.empty()) return bad_setting("gitlab.project", "missing");
  out.author_token = snap.string_or("gitlab.author_token", "");
  auto tokens = snap.get_list("gitlab.approver_tokens");
  auto ids = snap.get_list("gitlab.approver_user_ids");
  if (tokens.size() != ids.size()) {
    return bad_setting("gitlab.approver_user_ids", "must have as many entries as gitlab.approver_tokens");
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::int64_t id = 0;
    auto [end, ec] = std::from_chars(ids[i].data(), ids[i].data() + ids[i].size(), id);
    if (ec != std::errc() || end != ids[i].data() + ids[i].size()) {
      return bad_setting("gitlab.approver_user_ids", "entries must be integers");
    }
    out.approvers.push_back({tokens[i], id});
  }
  return out;
}

external_context::external_context(std::shared_ptr<external_shared> shared_state, external_endpoints eps,
                                   call_settings s)
    : shared(std::move(shared_state)),
      endpoints(std::move(eps)),
      settings(s),
      gitlab(http, shared->gitlab, settings, endpoints.gitlab_api, endpoints.project),
      approval(http, shared->approval, settings, endpoints.approval),
      permission(http, shared->permission, settings, endpoints.permission) {}

void external_context::refresh(const config::snapshot& snap) {
  settings = call_settings_from(snap);
}

std::function<std::unique_ptr<external_context>()> external_context_factory(std::shared_ptr<external_shared> shared,
                                                                            external_endpoints endpoints,
                                                                            call_settings settings) {
  return [shared = std::move(shared), endpoints = std::move(endpoints), settings] {
    return std::make_unique<external_context>(shared, endpoints, settings);
  };
}

}  // namespace changeflow::clients
