#include "effects/file_actions.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace changeflow::effects {

std::vector<clients::commit_action> commit_actions_of(const std::string& payload_json) {
  std::vector<clients::commit_action> actions;
  auto payload = nlohmann::json::parse(payload_json, nullptr, false);
  if (payload.is_discarded() || !payload.is_object() || !payload.contains("files") || !payload["files"].is_array())
    return actions;
  for (const auto& f : payload["files"]) {
    if (!f.is_object()) continue;
    clients::commit_action a;
    a.file_path = f.value("path", "");
    a.content = f.value("content", "");
    a.action = f.value("action", "upsert");
    a.last_commit_id = f.value("lastCommitId", "");
    if (!a.file_path.empty()) actions.push_back(std::move(a));
  }
  return actions;
}

std::string payload_of(const std::vector<clients::commit_action>& actions) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& a : actions) {
    nlohmann::json file = {{"path", a.file_path}, {"content", a.content}, {"action", a.action}};
    if (!a.last_commit_id.empty()) file["lastCommitId"] = a.last_commit_id;
    files.push_back(std::move(file));
  }
  return nlohmann::json{{"files", files}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

clients::result<std::vector<clients::commit_action>> resolve_actions(clients::gitlab_client& gitlab,
                                                                     const std::string& token, const std::string& ref,
                                                                     std::vector<clients::commit_action> actions) {
  for (auto& a : actions) {
    bool needs_read =
        a.action == "upsert" || ((a.action == "update" || a.action == "delete") && a.last_commit_id.empty());
    if (!needs_read) continue;
    auto file = gitlab.get_file(token, a.file_path, ref);
    if (!file) return file.error();
    if (a.action == "upsert") a.action = file->has_value() ? "update" : "create";
    // A file that is missing for an update or delete gets no base: GitLab refuses the action
    // ("doesn't exist"), which is the conflict it is.
    if (a.action != "create" && a.last_commit_id.empty() && file->has_value()) {
      a.last_commit_id = file->value().last_commit_id;
    }
  }
  return actions;
}

bool is_content_conflict(const clients::call_error& e) {
  if (e.what != clients::call_error::kind::http_status || e.status != 400) return false;
  for (const char* text : {"has changed since you started editing it", "A file with this name already exists",
                           "A file with this name doesn't exist"}) {
    if (e.message.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string content_check::describe() const {
  std::string out = "the file changed since your change was based on it:";
  for (std::size_t i = 0; i < changed.size(); ++i) out += (i ? ", " : " ") + changed[i];
  return out;
}

clients::result<content_check> check_unchanged_since(clients::gitlab_client& gitlab, const std::string& token,
                                                     const std::string& target_branch, const std::string& base_sha,
                                                     const std::vector<std::string>& paths,
                                                     const std::vector<messages::file_base>& known_at_base) {
  content_check out;
  for (const auto& path : paths) {
    auto now = gitlab.get_file(token, path, target_branch);
    if (!now) return now.error();
    clients::result<std::optional<clients::repository_file>> then{std::optional<clients::repository_file>{}};
    const auto known = std::find_if(known_at_base.begin(), known_at_base.end(),
                                    [&path](const messages::file_base& b) { return b.path == path; });
    if (known == known_at_base.end()) {
      then = gitlab.get_file(token, path, base_sha);
      if (!then) return then.error();
    } else if (!known->last_commit_id.empty()) {
      clients::repository_file at_base;
      at_base.path = path;
      at_base.last_commit_id = known->last_commit_id;
      then = std::optional<clients::repository_file>{std::move(at_base)};
    }
    bool same = now->has_value() == then->has_value() &&
                (!now->has_value() || now->value().last_commit_id == then->value().last_commit_id);
    if (!same) out.changed.push_back(path);
  }
  return out;
}

messages::commit_base base_of(const clients::branch_commit& commit,
                              const std::vector<clients::commit_action>& actions) {
  messages::commit_base out;
  if (!commit.created || commit.parent.empty()) return out;
  out.start_sha = commit.parent;
  std::vector<std::string> seen;
  for (const auto& a : actions) {
    if (std::find(seen.begin(), seen.end(), a.file_path) != seen.end()) continue;
    seen.push_back(a.file_path);
    if (a.action == "create") {
      out.files.push_back({a.file_path, ""});
    } else if ((a.action == "update" || a.action == "delete") && !a.last_commit_id.empty()) {
      out.files.push_back({a.file_path, a.last_commit_id});
    }
  }
  return out;
}

const std::vector<messages::file_base>& known_at(const messages::commit_base& own, const std::string& fork_sha) {
  static const std::vector<messages::file_base> none;
  return own.known() && fork_sha == own.start_sha ? own.files : none;
}

std::vector<std::string> paths_of(const std::vector<clients::commit_action>& actions) {
  std::vector<std::string> out;
  for (const auto& a : actions) {
    if (std::find(out.begin(), out.end(), a.file_path) == out.end()) out.push_back(a.file_path);
  }
  return out;
}

}  // namespace changeflow::effects
