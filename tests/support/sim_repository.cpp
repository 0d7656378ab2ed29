#include "tests/support/sim_repository.hpp"

#include "tests/support/flow_env.hpp"

#include <gtest/gtest.h>

namespace changeflow::testing {

namespace {

const std::vector<std::pair<std::string, std::string>> author = {{"PRIVATE-TOKEN", "author-token"}};

std::string encode_path(const std::string& path) {
  std::string out;
  for (char c : path) out += c == '/' ? std::string("%2F") : std::string(1, c);
  return out;
}

std::string project_path(const std::string& project) {
  return "/api/v4/projects/" + encode_path(project);
}

}  // namespace

std::optional<repo_file> read_repo_file(flow_env& env, const std::string& path, const std::string& ref,
                                        const std::string& project) {
  auto r =
      env.sim_call("GET", project_path(project) + "/repository/files/" + encode_path(path) + "?ref=" + ref, {}, author);
  if (r.status == 404) return std::nullopt;
  EXPECT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  // The sim answers base64 like GitLab; decode the simple way (test inputs are short ASCII).
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int bits = 0, value = 0;
  for (char c : j["content"].get<std::string>()) {
    auto pos = alphabet.find(c);
    if (pos == std::string::npos) break;
    value = (value << 6) | static_cast<int>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((value >> bits) & 0xff);
    }
  }
  return repo_file{out, j["last_commit_id"].get<std::string>()};
}

std::optional<repo_file> read_repo_file(flow_env& env, const std::string& path, const sim_place& at) {
  return read_repo_file(env, path, at.branch, at.project);
}

void commit_outside(flow_env& env, const std::string& action, const std::string& path, const std::string& content,
                    const sim_place& at) {
  nlohmann::json body = {{"branch", at.branch},
                         {"commit_message", "outside edit of " + path},
                         {"actions", {{{"action", action}, {"file_path", path}, {"content", content}}}}};
  auto r = env.sim_call("POST", project_path(at.project) + "/repository/commits", body.dump(), author);
  ASSERT_EQ(r.status, 201) << r.body;
}

repo_file seed_repo_file(flow_env& env, const std::string& path, const std::string& content, const sim_place& at) {
  commit_outside(env, "create", path, content, at);
  auto f = read_repo_file(env, path, at);
  EXPECT_TRUE(f) << path;
  return f.value_or(repo_file{});
}

nlohmann::json file_change(const std::string& path, const std::string& content, const std::string& action,
                           const std::string& last_commit_id) {
  nlohmann::json f = {{"path", path}, {"content", content}};
  if (!action.empty()) f["action"] = action;
  if (!last_commit_id.empty()) f["lastCommitId"] = last_commit_id;
  return f;
}

std::string submit_files(flow_env& env, const std::string& title, const std::string& target,
                         const nlohmann::json& files, const std::optional<sim_place>& at) {
  nlohmann::json body = {{"subject", "alice"}, {"target", target}, {"title", title}, {"files", files}};
  if (at) {
    body["repository"] = at->project;
    body["targetBranch"] = at->branch;
  }
  auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump());
  EXPECT_EQ(r.status, 202) << r.body;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data")) return {};
  return j["data"]["operationId"].get<std::string>();
}

nlohmann::json wait_settled(flow_env& env, const std::string& id) {
  nlohmann::json last;
  wait_until(
      [&] {
        last = env.get_change(id);
        if (!last.contains("phase")) return false;
        auto phase = last["phase"].get<std::string>();
        return phase == "VALIDATED" || phase == "CREATE_FAILED" || phase == "HANDLE_FAILED" || phase == "CLOSED";
      },
      std::chrono::seconds(60));
  return last;
}

std::vector<std::string> commit_actions(const nlohmann::json& stats, const std::string& branch,
                                        const std::string& project) {
  std::vector<std::string> out;
  const auto key = project + ":" + branch;
  if (!stats.contains("attempts") || !stats["attempts"]["commit_actions"].contains(key)) return out;
  for (const auto& a : stats["attempts"]["commit_actions"][key]) out.push_back(a.get<std::string>());
  return out;
}

}  // namespace changeflow::testing
