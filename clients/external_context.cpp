#include "clients/external_context.hpp"

#include "config/snapshot.hpp"

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
    const char* key;  // named in the error only
    const std::optional<std::string>* value;
    url_parts* target;
  };
  for (auto [key, value, target] : {url_key{"gitlab.base_url", &snap.gitlab().base_url, &out.gitlab_api},
                                    url_key{"approval.base_url", &snap.approval().base_url, &out.approval},
                                    url_key{"permission.base_url", &snap.permission().base_url, &out.permission}}) {
    auto parsed = *value ? parse_url(**value) : std::nullopt;
    if (!parsed) return bad_setting(key, "missing or not an http(s)://host:port/path URL");
    *target = *parsed;
  }
  const auto& gitlab = snap.gitlab();
  if (!gitlab.project) return bad_setting("gitlab.project", "missing");
  out.ca_file = snap.external().ca_file;
  if (gitlab.approver_tokens.size() != gitlab.approver_user_ids.size()) {
    return bad_setting("gitlab.approver_user_ids", "must have as many entries as gitlab.approver_tokens");
  }
  return out;
}

external_context::external_context(std::shared_ptr<external_shared> shared_state, external_endpoints eps,
                                   call_settings s)
    : shared(std::move(shared_state)),
      endpoints(std::move(eps)),
      settings(s),
      http(endpoints.ca_file),
      approval(http, shared->approval, settings, endpoints.approval),
      permission(http, shared->permission, settings, endpoints.permission) {}

void external_context::refresh(const config::snapshot& snap) {
  settings = call_settings_from(snap);
}

gitlab_client external_context::gitlab_for(const std::string& project) {
  return gitlab_client(http, shared->gitlab, settings, endpoints.gitlab_api, project);
}

repository_access external_context::repository(const config::snapshot& snap, const std::string& project) {
  const std::string name = project.empty() ? snap.gitlab().project.value_or("") : project;
  const auto* configured = snap.repositories().find(name);
  const auto repo = configured ? *configured : config::global_repository(snap, name);
  repository_access out{gitlab_for(name), repo.author_token, {}, snap.gitlab().target_branch};
  for (const auto& bot : repo.approvers) out.approvers.push_back({bot.token, bot.user_id});
  return out;
}

std::function<std::unique_ptr<external_context>()> external_context_factory(std::shared_ptr<external_shared> shared,
                                                                            external_endpoints endpoints,
                                                                            call_settings settings) {
  return [shared = std::move(shared), endpoints = std::move(endpoints), settings] {
    return std::make_unique<external_context>(shared, endpoints, settings);
  };
}

}  // namespace changeflow::clients
