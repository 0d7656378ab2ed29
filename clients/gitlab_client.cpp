#include "clients/gitlab_client.hpp"

#include "base/base64.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>

namespace changeflow::clients {

using json = nlohmann::json;

namespace {

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::int64_t num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}
bool flag(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

gitlab_pipeline pipeline_from(const json& j) {
  return {num(j, "id"), str(j, "sha"), str(j, "status")};
}

merge_request mr_from(const json& j) {
  merge_request mr;
  mr.id = num(j, "id");
  mr.iid = num(j, "iid");
  mr.state = str(j, "state");
  mr.title = str(j, "title");
  mr.description = str(j, "description");
  mr.source_branch = str(j, "source_branch");
  mr.target_branch = str(j, "target_branch");
  mr.sha = str(j, "sha");
  mr.merge_status = str(j, "merge_status");
  mr.detailed_merge_status = str(j, "detailed_merge_status");
  mr.has_conflicts = flag(j, "has_conflicts");
  mr.merge_error = str(j, "merge_error");
  mr.rebase_in_progress = flag(j, "rebase_in_progress");
  if (auto s = str(j, "merge_commit_sha"); !s.empty()) mr.merge_commit_sha = s;
  if (auto it = j.find("head_pipeline"); it != j.end() && it->is_object()) mr.head_pipeline = pipeline_from(*it);
  mr.web_url = str(j, "web_url");
  if (auto it = j.find("diff_refs"); it != j.end() && it->is_object()) mr.base_sha = str(*it, "base_sha");
  if (mr.iid == 0) throw std::runtime_error("merge request without iid");
  return mr;
}

// A 2xx body we cannot interpret is a protocol error, never an exception.
template <class T, class F>
result<T> parse_as(const http_response& r, F&& f) {
  try {
    return f(json::parse(r.body));
  } catch (const std::exception& e) {
    call_error err;
    err.what = call_error::kind::protocol;
    err.status = r.status;
    err.message = std::string("unexpected response body: ") + e.what();
    return err;
  }
}

bool success(const http_response& r) {
  return r.status >= 200 && r.status < 300;
}

}  // namespace

bool approvals_info::has(std::int64_t user_id) const {
  return std::find(approved_by.begin(), approved_by.end(), user_id) != approved_by.end();
}

merge_refusal classify_merge_error(const call_error& e) {
  if (e.what != call_error::kind::http_status) return merge_refusal::other;
  switch (e.status) {
    case 405: return merge_refusal::not_mergeable_yet;
    case 406:
    case 422: return merge_refusal::needs_rebase;
    case 409: return merge_refusal::sha_mismatch;
    case 401: return merge_refusal::not_allowed;
    default: return merge_refusal::other;
  }
}

bool head_moved(const call_error& e) {
  return e.what == call_error::kind::http_status && e.status == 409;
}

merge_request parse_merge_request(const std::string& body) {
  return mr_from(json::parse(body));
}

std::vector<check_item> parse_check_items(const std::string& body) {
  auto j = json::parse(body);
  std::vector<check_item> items;
  for (const auto& item : j.at("check_items")) {
    check_item c;
    const auto& id = item.at("id");
    // A string or a number; anything else is not a check item (and dumping a deeply nested value
    // recursed until the stack overflowed: fuzz_gitlab, regression-check-item-id-deep-nesting).
    if (!id.is_string() && !id.is_number()) throw std::runtime_error("check item id is not a string or number");
    c.id = id.is_string() ? id.get<std::string>() : id.dump();
    c.title = str(item, "title");
    items.push_back(std::move(c));
  }
  return items;
}

gitlab_client::gitlab_client(http_client& http, circuit_breaker& breaker, const call_settings& settings,
                             url_parts api_base, std::string project)
    : http_(http), breaker_(breaker), settings_(settings), api_(std::move(api_base)), project_(std::move(project)) {}

std::string gitlab_client::project_path() const {
  return "/projects/" + url_encode(project_);
}

result<http_response> gitlab_client::send(const std::string& token, std::string method, std::string path_and_query,
                                          std::string body) {
  http_request req;
  req.method = std::move(method);
  req.target = project_path() + path_and_query;
  req.body = std::move(body);
  req.headers.emplace_back("PRIVATE-TOKEN", token);
  return guarded_call(http_, breaker_, settings_, api_, std::move(req));
}

result<std::optional<branch_info>> gitlab_client::get_branch(const std::string& token, const std::string& branch) {
  auto r = send(token, "GET", "/repository/branches/" + url_encode(branch));
  if (!r) return r.error();
  if (r->status == 404) return std::optional<branch_info>();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<std::optional<branch_info>>(r.value(), [](const json& j) {
    const auto& commit = j.at("commit");
    return std::optional<branch_info>(branch_info{str(j, "name"), str(commit, "id"), str(commit, "message")});
  });
}

result<std::optional<repository_file>> gitlab_client::get_file(const std::string& token, const std::string& path,
                                                               const std::string& ref) {
  auto r = send(token, "GET", "/repository/files/" + url_encode(path) + "?ref=" + url_encode(ref));
  if (!r) return r.error();
  if (r->status == 404) {
    auto e = status_error(r.value());
    // Only a missing file is an answer; a missing project or ref is a misconfiguration.
    if (e.message.find("File Not Found") != std::string::npos) return std::optional<repository_file>();
    return e;
  }
  if (!success(r.value())) return status_error(r.value());
  return parse_as<std::optional<repository_file>>(r.value(), [&](const json& j) {
    repository_file f;
    f.path = str(j, "file_path");
    f.last_commit_id = str(j, "last_commit_id");
    f.commit_id = str(j, "commit_id");
    auto raw = str(j, "content");
    if (str(j, "encoding") == "base64") {
      auto decoded = base64::decode(raw);
      if (!decoded) throw std::runtime_error("file content is not base64");
      raw = std::move(*decoded);
    }
    f.content = std::move(raw);
    if (f.last_commit_id.empty()) throw std::runtime_error("file without last_commit_id");
    return std::optional<repository_file>(std::move(f));
  });
}

result<commit_info> gitlab_client::create_commit(const std::string& token, const std::string& branch,
                                                 const std::optional<std::string>& start_branch,
                                                 const std::string& message,
                                                 const std::vector<commit_action>& actions) {
  json body = {{"branch", branch}, {"commit_message", message}, {"actions", json::array()}};
  if (start_branch) body["start_branch"] = *start_branch;
  for (const auto& a : actions) {
    json action = {{"action", a.action}, {"file_path", a.file_path}};
    if (a.action != "delete") {
      action["content"] = a.content;
      action["encoding"] = a.encoding;
    }
    if (!a.previous_path.empty()) action["previous_path"] = a.previous_path;
    if (!a.last_commit_id.empty()) action["last_commit_id"] = a.last_commit_id;
    body["actions"].push_back(std::move(action));
  }
  auto r = send(token, "POST", "/repository/commits", body.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());  // 201, or 200 per the route metadata
  return parse_as<commit_info>(r.value(), [](const json& j) {
    std::string parent;
    if (j.contains("parent_ids") && j["parent_ids"].is_array() && !j["parent_ids"].empty() &&
        j["parent_ids"][0].is_string())
      parent = j["parent_ids"][0].get<std::string>();
    return commit_info{str(j, "id"), str(j, "message"), std::move(parent)};
  });
}

result<branch_commit> gitlab_client::ensure_branch_with_commit(const std::string& token, const std::string& branch,
                                                               const std::string& target_branch,
                                                               const std::string& message,
                                                               const std::vector<commit_action>& actions,
                                                               const std::string& change_marker) {
  // Optimistic: a change's branch is new in the common case, so the commit that creates it comes
  // first and the branch is read only when GitLab says it exists already (400 "A branch called
  // '<b>' already exists"): an earlier attempt of this change committed it (its marker is on the
  // head: do not commit twice), or a lost race or lost response, or a leftover branch (commit onto it).
  auto commit = create_commit(token, branch, target_branch, message, actions);
  if (commit) return branch_commit{commit->id, true, commit->parent};
  if (commit.error().status != 400 || commit.error().message.find("A branch called") == std::string::npos) {
    return commit.error();
  }
  auto existing = get_branch(token, branch);
  if (!existing) return existing.error();
  if (!existing->has_value()) return commit.error();  // gone again: the caller's retry starts over
  const auto& head = existing->value();
  if (!change_marker.empty() && head.head_message.find(change_marker) != std::string::npos) {
    return branch_commit{head.head_sha, false};
  }
  auto onto = create_commit(token, branch, std::nullopt, message, actions);
  if (!onto) return onto.error();
  return branch_commit{onto->id, true, onto->parent};
}

result<mr_opened> gitlab_client::create_mr(const std::string& token, const std::string& source_branch,
                                           const std::string& target_branch, const std::string& title,
                                           const std::string& description) {
  json body = {{"source_branch", source_branch},
               {"target_branch", target_branch},
               {"title", title},
               {"description", description},
               {"remove_source_branch", true}};
  auto r = send(token, "POST", "/merge_requests", body.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!r) return r.error();
  if (success(r.value())) {
    return parse_as<mr_opened>(r.value(), [](const json& j) { return mr_opened{mr_from(j), false}; });
  }
  if (r->status != 409) return status_error(r.value());
  // 409 {"message":["Another open merge request already exists for this source branch: !<iid>"]}:
  // the open MR is looked up by source branch rather than trusting the text's iid alone.
  auto open = list_open_mrs(token, source_branch, target_branch);
  if (!open) return open.error();
  if (open->empty()) return status_error(r.value());
  return mr_opened{open->front(), true};
}

result<mr_opened> gitlab_client::ensure_mr(const std::string& token, const std::string& source_branch,
                                           const std::string& target_branch, const std::string& title,
                                           const std::string& description, bool rerun) {
  if (rerun) {
    auto open = list_open_mrs(token, source_branch, target_branch);
    if (!open) return open.error();
    if (!open->empty()) return mr_opened{open->front(), true};
  }
  return create_mr(token, source_branch, target_branch, title, description);
}

result<merge_request> gitlab_client::get_mr(const std::string& token, std::int64_t iid,
                                            bool include_rebase_in_progress) {
  std::string path = "/merge_requests/" + std::to_string(iid);
  if (include_rebase_in_progress) path += "?include_rebase_in_progress=true";
  auto r = send(token, "GET", path);
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<merge_request>(r.value(), [](const json& j) { return mr_from(j); });
}

result<std::vector<merge_request>> gitlab_client::list_open_mrs(const std::string& token,
                                                                const std::string& source_branch,
                                                                const std::string& target_branch) {
  std::string path = "/merge_requests?state=opened&source_branch=" + url_encode(source_branch);
  if (!target_branch.empty()) path += "&target_branch=" + url_encode(target_branch);
  auto r = send(token, "GET", path);
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<std::vector<merge_request>>(r.value(), [](const json& j) {
    std::vector<merge_request> out;
    for (const auto& item : j) out.push_back(mr_from(item));
    return out;
  });
}

result<std::vector<gitlab_pipeline>> gitlab_client::list_mr_pipelines(const std::string& token, std::int64_t iid) {
  auto r = send(token, "GET", "/merge_requests/" + std::to_string(iid) + "/pipelines");
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<std::vector<gitlab_pipeline>>(r.value(), [](const json& j) {
    std::vector<gitlab_pipeline> out;
    for (const auto& item : j) out.push_back(pipeline_from(item));
    return out;
  });
}

result<gitlab_pipeline> gitlab_client::get_pipeline(const std::string& token, std::int64_t pipeline_id) {
  auto r = send(token, "GET", "/pipelines/" + std::to_string(pipeline_id));
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<gitlab_pipeline>(r.value(), [](const json& j) { return pipeline_from(j); });
}

result<approvals_info> gitlab_client::get_approvals(const std::string& token, std::int64_t iid) {
  auto r = send(token, "GET", "/merge_requests/" + std::to_string(iid) + "/approvals");
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<approvals_info>(r.value(), [](const json& j) {
    approvals_info info;
    info.approved = flag(j, "approved");
    for (const auto& entry : j.at("approved_by"))
      info.approved_by.push_back(entry.at("user").at("id").get<std::int64_t>());
    return info;
  });
}

result<done> gitlab_client::approve(const std::string& token, std::int64_t iid, const std::optional<std::string>& sha,
                                    const std::optional<std::vector<check_item>>& check_items) {
  json body = json::object();
  if (sha) body["sha"] = *sha;
  if (check_items) {
    body["check_items"] = json::array();
    for (const auto& item : *check_items) body["check_items"].push_back({{"id", item.id}, {"acknowledged", true}});
  }
  auto r = send(token, "POST", "/merge_requests/" + std::to_string(iid) + "/approve", body.dump());
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return done{};
}

result<std::vector<check_item>> gitlab_client::get_check_items(const std::string& token) {
  auto r = send(token, "GET", "/approval_check_items");
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<std::vector<check_item>>(r.value(), [&](const json&) { return parse_check_items(r->body); });
}

result<merge_request> gitlab_client::merge(const std::string& token, std::int64_t iid, const std::string& sha) {
  json body = {{"sha", sha}, {"should_remove_source_branch", true}};
  auto r = send(token, "PUT", "/merge_requests/" + std::to_string(iid) + "/merge", body.dump());
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<merge_request>(r.value(), [](const json& j) { return mr_from(j); });
}

result<done> gitlab_client::rebase(const std::string& token, std::int64_t iid) {
  auto r = send(token, "PUT", "/merge_requests/" + std::to_string(iid) + "/rebase");
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return done{};
}

result<merge_request> gitlab_client::close_mr(const std::string& token, std::int64_t iid) {
  auto r = send(token, "PUT", "/merge_requests/" + std::to_string(iid), json{{"state_event", "close"}}.dump());
  if (!r) return r.error();
  if (!success(r.value())) return status_error(r.value());
  return parse_as<merge_request>(r.value(), [](const json& j) { return mr_from(j); });
}

}  // namespace changeflow::clients
