#include "config/repositories.hpp"

#include "config/snapshot.hpp"

#include <algorithm>
#include <charconv>
#include <set>

namespace changeflow::config {

bool repository::has_branch(std::string_view branch) const {
  return std::find(branches.begin(), branches.end(), branch) != branches.end();
}

const repository* repository_set::find(std::string_view project) const {
  auto it = std::find_if(all.begin(), all.end(), [&](const repository& r) { return r.project == project; });
  return it == all.end() ? nullptr : &*it;
}

namespace {

const std::set<std::string, std::less<>> known_fields = {"branches", "author_token", "approver_tokens",
                                                         "approver_user_ids", "webhook_secret"};

std::optional<std::int64_t> user_id_of(const std::string& text) {
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return id;
}

/// Pairs tokens with user ids; an error text when they do not pair.
std::optional<std::string> pair_approvers(const std::vector<std::string>& tokens, const std::vector<std::string>& ids,
                                          std::vector<approver_bot>& out) {
  if (tokens.size() != ids.size()) return "must have as many entries as the approver tokens";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    auto id = user_id_of(ids[i]);
    if (!id) return "entries must be integers";
    out.push_back({tokens[i], *id});
  }
  return std::nullopt;
}

std::optional<std::vector<std::string>> string_list(const nlohmann::json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& item : v) {
    if (!item.is_string() || item.get<std::string>().empty()) return std::nullopt;
    out.push_back(item.get<std::string>());
  }
  return out;
}

/// The one repository of a configuration without the section: the global keys. Their own
/// consistency (the two approver lists) is checked where it always was, at start-up
/// (clients::endpoints_from), so a configuration that loaded before still loads.
repositories_parse from_global_keys(const snapshot& snap) {
  repositories_parse out;
  const auto& project = snap.gitlab().project;
  if (!project) return out;
  out.set.all.push_back(global_repository(snap, *project));
  return out;
}

}  // namespace

repository global_repository(const snapshot& snap, const std::string& project) {
  repository r;
  r.project = project;
  const auto& gitlab = snap.gitlab();
  r.branches = {gitlab.target_branch};
  r.author_token = gitlab.author_token.value_or("");
  // Mismatched lists stop start-up (clients::endpoints_from); pairs that do fit are used here.
  (void)pair_approvers(gitlab.approver_tokens, gitlab.approver_user_ids, r.approvers);
  return r;
}

repositories_parse parse_repositories(const snapshot& snap) {
  const auto& section = snap.get_json("repositories");
  if (section.is_null() || (section.is_object() && section.empty())) return from_global_keys(snap);
  repositories_parse out;
  out.set.from_section = true;
  if (!section.is_object()) {
    out.errors.push_back("repositories: must be an object of project path -> settings");
    return out;
  }
  const auto global_branch = snap.gitlab().target_branch;
  const auto global_author = snap.gitlab().author_token.value_or("");
  for (auto it = section.begin(); it != section.end(); ++it) {
    const std::string where = "repositories." + it.key();
    const auto& v = it.value();
    if (it.key().empty() || it.key().front() == '/' || it.key().back() == '/') {
      out.errors.push_back("repositories: '" + it.key() + "' is not a project path (group/project)");
      continue;
    }
    if (!v.is_object()) {
      out.errors.push_back(where + ": must be an object");
      continue;
    }
    repository r;
    r.project = it.key();
    bool ok = true;
    for (auto f = v.begin(); f != v.end(); ++f) {
      if (!known_fields.count(f.key())) {
        out.errors.push_back(where + ": unknown field '" + f.key() + "'");
        ok = false;
      }
    }
    if (v.contains("branches")) {
      auto branches = string_list(v["branches"]);
      if (!branches || branches->empty()) {
        out.errors.push_back(where + ".branches: must be a non-empty list of branch names");
        ok = false;
      } else {
        r.branches = *branches;
      }
    } else {
      r.branches = {global_branch};
    }
    for (const char* text_field : {"author_token", "webhook_secret"}) {
      if (v.contains(text_field) && !v[text_field].is_string()) {
        out.errors.push_back(where + "." + text_field + ": must be a string");
        ok = false;
      }
    }
    r.author_token =
        v.contains("author_token") && v["author_token"].is_string() && !v["author_token"].get<std::string>().empty()
            ? v["author_token"].get<std::string>()
            : global_author;
    if (v.contains("webhook_secret") && v["webhook_secret"].is_string())
      r.webhook_secret = v["webhook_secret"].get<std::string>();
    const bool own_tokens = v.contains("approver_tokens");
    if (own_tokens != v.contains("approver_user_ids")) {
      out.errors.push_back(where + ": approver_tokens and approver_user_ids are set together");
      ok = false;
    } else if (own_tokens) {
      auto tokens = string_list(v["approver_tokens"]);
      auto ids = string_list(v["approver_user_ids"]);
      if (!tokens || !ids) {
        out.errors.push_back(where + ": approver_tokens and approver_user_ids must be lists of non-empty strings");
        ok = false;
      } else if (auto e = pair_approvers(*tokens, *ids, r.approvers)) {
        out.errors.push_back(where + ".approver_user_ids: " + *e);
        ok = false;
      }
    } else {
      r.approvers = global_repository(snap, r.project).approvers;
    }
    if (ok) out.set.all.push_back(std::move(r));
  }
  std::sort(out.set.all.begin(), out.set.all.end(),
            [](const repository& a, const repository& b) { return a.project < b.project; });
  return out;
}

namespace {
std::string list_of(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "'" : ", '") + i + "'";
  return out;
}
std::string configured(const repository_set& repos) {
  std::string out;
  for (const auto& r : repos.all)
    out += (out.empty() ? "" : "; ") + r.project + " (branches " + list_of(r.branches) + ")";
  return out;
}
}  // namespace

std::variant<resolved_target, target_refusal> resolve_target(const repository_set& repos, const target_request& req) {
  if (repos.all.empty()) return target_refusal{"No repository is configured: changes cannot be accepted"};
  const repository* repo = nullptr;
  if (req.repository) {
    repo = repos.find(*req.repository);
    if (!repo) {
      return target_refusal{"'repository' '" + *req.repository +
                            "' is not configured; configured: " + configured(repos)};
    }
  } else if (repos.all.size() == 1) {
    repo = &repos.all.front();
  } else {
    return target_refusal{"'repository' is required: several repositories are configured: " + configured(repos)};
  }
  if (req.target_branch) {
    if (!repo->has_branch(*req.target_branch)) {
      return target_refusal{"'targetBranch' '" + *req.target_branch + "' is not configured for repository '" +
                            repo->project + "'; its branches: " + list_of(repo->branches)};
    }
    return resolved_target{repo->project, *req.target_branch};
  }
  if (repo->branches.size() != 1) {
    return target_refusal{"'targetBranch' is required: repository '" + repo->project +
                          "' has several branches: " + list_of(repo->branches)};
  }
  return resolved_target{repo->project, repo->branches.front()};
}

}  // namespace changeflow::config
