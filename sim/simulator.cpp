#include "sim/simulator.hpp"

#include "base/base64.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "clients/http_client.hpp"
#include "http/server/server.hpp"
#include "sim/faults.hpp"
#include "sim/file_snapshot.hpp"
#include "sim/scheduler.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace changeflow::sim {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
namespace hs = changeflow::http_server;

std::map<std::string, std::int64_t> parse_token_map(const std::string& spec) {
  std::map<std::string, std::int64_t> out;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return {};
    std::int64_t id = 0;
    auto text = item.substr(eq + 1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
    if (ec != std::errc() || end != text.data() + text.size()) return {};
    out[item.substr(0, eq)] = id;
  }
  return out;
}

std::map<std::string, std::string> parse_secret_map(const std::string& spec) {
  std::map<std::string, std::string> out;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ';')) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) return {};
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

std::map<std::string, std::vector<std::string>> parse_project_map(const std::string& spec) {
  std::map<std::string, std::vector<std::string>> out;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ';')) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) return {};
    std::vector<std::string> branches;
    std::stringstream bs(item.substr(eq + 1));
    std::string branch;
    while (std::getline(bs, branch, ',')) {
      if (branch.empty()) return {};
      branches.push_back(branch);
    }
    out[item.substr(0, eq)] = std::move(branches);
  }
  return out;
}

namespace {

// -- wire helpers

hs::response json_response(unsigned status, const json& body) {
  hs::response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}
hs::response message(unsigned status, const json& msg) {
  return json_response(status, {{"message", msg}});
}

std::vector<std::string> split_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string> out;
  std::size_t start = 1;
  while (start <= target.size()) {
    auto slash = target.find('/', start);
    auto segment = target.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    out.push_back(hs::percent_decode(segment));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

std::string iso_now() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<std::int64_t> to_int(const std::string& s) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// -- in-memory model

struct sim_pipeline {
  std::int64_t id = 0;
  std::int64_t mr_iid = 0;
  std::string sha;
  std::string ref;
  clock_type::time_point started;
  std::string outcome = "success";  // success | failed | hang
  int running_reads = 0;            // reads left that answer "running" (sim_options::pipeline_running_reads)
};

struct sim_branch {
  std::string head_sha;
  std::string head_message;
  // Its files were changed on the branch it was created from after it forked (fault
  // target_conflict): a merge cannot apply cleanly and no rebase can fix it.
  bool conflicts_with_start = false;
  file_snapshot files;
  // Every path a commit on this branch wrote since it forked (a superset of what it changed: a path
  // written back to its fork's version is in it too). What the branch changed is computed from these
  // alone, so the cost of a merge check does not grow with the repository's size.
  std::set<std::string> touched;
  // The commit of the start branch it forked from (a rebase moves it): the MR's diff_refs.base_sha,
  // and the reference a merge compares both sides against.
  std::string fork_sha;
};

struct sim_mr {
  std::int64_t id = 0;
  std::int64_t iid = 0;
  std::string title, description, source, target;
  std::string state = "opened";
  std::string sha;
  std::optional<std::string> merge_commit_sha;
  std::vector<std::int64_t> pipelines;  // oldest first; the last is the head pipeline
  std::set<std::int64_t> approved_by;
  bool needs_rebase = false;
  std::optional<clock_type::time_point> rebase_done_at;
  bool rebase_will_conflict = false;
  bool has_conflicts = false;
  std::string merge_error;
  std::string base_sha;  // diff_refs.base_sha: the target commit the source forked from
  std::string subject() const { return title + " " + source; }
};

struct sim_project {
  std::int64_t id = 0;  // GitLab's numeric project id
  std::map<std::string, sim_branch> branches;
  std::map<std::string, file_snapshot> commits;  // every commit's files, so `ref` may name a commit
  std::map<std::int64_t, sim_mr> mrs;
  // Every MR's iid by its source branch (MRs are never deleted): finding a branch's MRs does not
  // scan all of them.
  std::multimap<std::string, std::int64_t> mrs_by_source;
  std::int64_t next_iid = 1;
};

struct sim_approval {
  std::string id, request_id, title, applicant, callback_url;
  json ext = json::object();
  std::string state = "PENDING";  // PENDING | APPROVED | REJECTED | WITHDRAWN
  std::string subject() const { return request_id + " " + title; }
};

// Every mutating request received, refused ones included (by a fault, a 401, a 405, a 409): what
// the client *attempted*, not what took effect. A refusal hides a repeated side effect from the
// outcome counters above (a second merge of a merged MR is a 405, a second approve a 401), so
// "merged once" / "approved once" can only be judged here. Keys: "project!iid" for MRs,
// "project:branch" for branches, the requestId for approval submissions.
struct attempt_log {
  std::map<std::string, std::map<std::string, std::uint64_t>> approve;                 // mr -> user -> requests
  std::map<std::string, std::map<std::string, std::uint64_t>> approve_after_approved;  // the user had approved
  std::map<std::string, std::uint64_t> merge;
  std::map<std::string, std::uint64_t> merge_after_merged;  // the MR was already merged when it came
  std::map<std::string, std::uint64_t> close;               // PUT state_event=close
  std::map<std::string, std::uint64_t> create_commit;
  std::map<std::string, std::uint64_t> create_mr;
  std::map<std::string, std::uint64_t> create_mr_while_open;  // the source branch already had an open MR
  std::map<std::string, std::uint64_t> approval_submit;       // requestId -> requests
  // "project:branch" -> "<action> <file_path>[ @<last_commit_id>]" of every commit request, in order
  std::map<std::string, std::vector<std::string>> commit_actions;

  nlohmann::json to_json() const {
    return {{"approve", approve},
            {"approve_after_approved", approve_after_approved},
            {"merge", merge},
            {"merge_after_merged", merge_after_merged},
            {"close", close},
            {"create_commit", create_commit},
            {"create_mr", create_mr},
            {"create_mr_while_open", create_mr_while_open},
            {"approval_submit", approval_submit},
            {"commit_actions", commit_actions}};
  }
};

struct stats {
  attempt_log attempts;
  std::map<std::string, std::uint64_t> requests;
  std::map<std::string, std::map<std::string, std::uint64_t>> approvals;  // "project!iid" -> user -> count
  std::map<std::string, std::uint64_t> merges;                            // "project!iid" -> count
  std::map<std::string, std::uint64_t> callbacks;
  std::uint64_t check_items_422 = 0;
};

struct check_item_def {
  std::string id, title;
};

// Every GitLab request in arrival order, refused and lost ones included (status 0: the response was
// dropped by a fault): the history a test judges "two MRs were never open at once" or "every MR went
// to its project and branch" on. `mr_state` is the MR's state right after the request.
struct request_entry {
  std::uint64_t seq = 0;
  std::string endpoint, project;
  unsigned status = 0;
  std::int64_t iid = 0;  // the MR the request was about, or the one create_mr opened
  std::string source_branch, target_branch, mr_state;
  std::string head_pipeline;  // get_mr answered 200: the head pipeline's status in the answer ("" none)
  json to_json() const {
    return {{"seq", seq},
            {"endpoint", endpoint},
            {"project", project},
            {"status", status},
            {"iid", iid},
            {"sourceBranch", source_branch},
            {"targetBranch", target_branch},
            {"mrState", mr_state},
            {"headPipeline", head_pipeline}};
  }
};
constexpr std::size_t request_log_limit = 200000;

}  // namespace

struct simulator::impl {
  sim_options opts;
  std::unique_ptr<hs::server> server;
  std::uint16_t stopped_port = 0;
  scheduler tasks;
  std::mutex mutex;              // guards everything below
  std::uint64_t generation = 0;  // bumped by reset: tasks of an older generation do nothing
  std::uint64_t counter = 0;
  std::int64_t next_mr_id = 1000, next_pipeline_id = 5000, next_approval = 1, next_project_id = 1;
  std::map<std::string, sim_project> projects;
  std::vector<request_entry> request_log;
  std::uint64_t next_request_seq = 0;
  std::map<std::int64_t, sim_pipeline> pipelines;
  std::map<std::string, sim_approval> approvals;  // by approvalId
  std::map<std::string, std::string> approval_by_request;
  std::vector<check_item_def> check_items = {{"ci-1", "Change reviewed against the runbook"}};
  bool check_items_required = false;
  int check_items_version = 1;
  std::map<std::string, std::set<std::string>> permission_grants;  // subject -> rules; absent = all granted
  fault_set faults;
  stats counters;
  clients::http_client sender;  // used only on the scheduler thread
  struct send_lane {
    scheduler tasks;
    clients::http_client client;  // used only on this lane's thread
  };
  std::vector<std::unique_ptr<send_lane>> lanes;  // sim_options::callback_lanes

  explicit impl(sim_options o) : opts(std::move(o)) {
    for (int i = 0; i < opts.callback_lanes; ++i) lanes.push_back(std::make_unique<send_lane>());
    seed_projects();
  }

  /// The configured projects exist from the start, each with its branches.
  void seed_projects() {
    for (const auto& [name, branches] : opts.projects) open_project(projects[name], branches);
  }

  /// A new project: its id, its first MR number, and an initial commit on each of its branches.
  void open_project(sim_project& p, const std::vector<std::string>& branches) {
    p.id = next_project_id++;
    p.next_iid = opts.first_mr_iid;
    for (const auto& b : branches) {
      auto sha = next_sha();
      p.branches[b].head_sha = sha;
      p.branches[b].head_message = "Initial commit";
      p.commits[sha] = file_snapshot{};
    }
  }

  // ---- ids (deterministic per seed)
  std::string next_sha() {
    return ids::sha256_hex(std::to_string(opts.seed) + ":" + std::to_string(++counter)).substr(0, 40);
  }
  std::string next_uuid() {
    auto h = ids::sha256_hex("uuid:" + std::to_string(opts.seed) + ":" + std::to_string(++counter));
    return h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-a" + h.substr(17, 3) + "-" +
           h.substr(20, 12);
  }

  /// nullptr when the project does not exist (only configured projects exist when some are).
  sim_project* project(const std::string& name) {
    if (!opts.projects.empty()) {
      auto it = projects.find(name);
      return it == projects.end() ? nullptr : &it->second;
    }
    auto [it, inserted] = projects.try_emplace(name);
    if (inserted) open_project(it->second, {"main"});
    return &it->second;
  }

  // ---- files: what a branch changed since its fork, and whether its target changed them too

  /// The branch's files as of `ref`: a branch name, else a commit sha; nullptr when neither.
  const file_snapshot* files_at(const sim_project& proj, const std::string& ref) const {
    if (auto b = proj.branches.find(ref); b != proj.branches.end()) return &b->second.files;
    if (auto c = proj.commits.find(ref); c != proj.commits.end()) return &c->second;
    return nullptr;
  }

  static bool same_version(const file_snapshot& a, const file_snapshot& b, const std::string& path) {
    const auto* x = a.find(path);
    const auto* y = b.find(path);
    if (!x || !y) return (x == nullptr) == (y == nullptr);
    return x->last_commit_id == y->last_commit_id;
  }

  /// Paths the branch changed (created, updated, deleted) since it forked.
  std::vector<std::string> changed_since_fork(const sim_project& proj, const sim_branch& branch) const {
    std::vector<std::string> out;
    const auto* fork = files_at(proj, branch.fork_sha);
    if (!fork) return out;
    for (const auto& p : branch.touched) {
      if (!same_version(branch.files, *fork, p)) out.push_back(p);
    }
    return out;
  }

  /// Git's view, at file level: a file both the source (since its fork) and the target changed
  /// cannot be merged or rebased without a person. A simplification of git's line-level merge that
  /// errs on the safe side (two edits of one file never combine silently here).
  bool files_conflict(const sim_project& proj, const sim_mr& mr) const {
    auto s = proj.branches.find(mr.source);
    auto t = proj.branches.find(mr.target);
    if (s == proj.branches.end() || t == proj.branches.end()) return false;
    const auto* fork = files_at(proj, s->second.fork_sha);
    if (!fork) return false;
    for (const auto& p : changed_since_fork(proj, s->second)) {
      if (!same_version(t->second.files, *fork, p)) return true;
    }
    return false;
  }

  /// The source's changes since its fork, applied onto `onto` (a merge or a rebase).
  void apply_changes(const sim_project& proj, const sim_branch& source, file_edit& onto,
                     const std::string& commit_id) const {
    for (const auto& p : changed_since_fork(proj, source)) {
      const auto* f = source.files.find(p);
      if (!f) {
        onto.erase(p);
      } else {
        onto.put(p, {f->content, commit_id.empty() ? f->last_commit_id : commit_id});
      }
    }
  }

  /// A new head on `branch` with these files (recorded as a commit so `ref=<sha>` reads them);
  /// `written` are the paths the new commit wrote.
  void move_head(sim_project& proj, const std::string& branch, std::string sha, std::string message,
                 file_snapshot files, const std::vector<std::string>& written) {
    auto& b = proj.branches[branch];
    b.head_sha = std::move(sha);
    b.head_message = std::move(message);
    b.files = std::move(files);
    b.touched.insert(written.begin(), written.end());
    proj.commits[b.head_sha] = b.files;
  }

  // ---- lazy time
  std::string pipeline_status(const sim_pipeline& p, clock_type::time_point now) const {
    if (p.outcome == "hang" || p.running_reads > 0 || now < p.started + opts.pipeline_duration) return "running";
    return p.outcome;
  }

  std::int64_t start_pipeline(sim_mr& mr, const std::string& project_name, clock_type::time_point at) {
    sim_pipeline p;
    p.id = next_pipeline_id++;
    p.mr_iid = mr.iid;
    p.sha = mr.sha;
    p.ref = mr.source;
    p.started = at;
    p.running_reads = opts.pipeline_running_reads;
    if (faults.take("pipeline_fail", "pipeline", mr.subject()))
      p.outcome = "failed";
    else if (faults.take("pipeline_hang", "pipeline", mr.subject()))
      p.outcome = "hang";
    pipelines[p.id] = p;
    mr.pipelines.push_back(p.id);
    send_pipeline_hooks(project_name, mr, p, at);
    return p.id;
  }

  void settle(sim_project& proj, const std::string& project_name, sim_mr& mr, clock_type::time_point now) {
    // GitLab recomputes mergeability when the target moves: a file changed on both sides conflicts.
    if (mr.state == "opened" && !mr.has_conflicts && !mr.rebase_done_at && files_conflict(proj, mr))
      mr.has_conflicts = true;
    if (!mr.rebase_done_at || now < *mr.rebase_done_at) return;
    auto done_at = *mr.rebase_done_at;
    mr.rebase_done_at.reset();
    if (mr.rebase_will_conflict || files_conflict(proj, mr)) {
      mr.has_conflicts = true;
      mr.merge_error = "Rebase failed. Please rebase locally";
      return;
    }
    mr.sha = next_sha();
    mr.needs_rebase = false;
    mr.merge_error.clear();
    // The source's changes replayed on the target's head: new commits, so the files it changed get
    // the new sha as their last commit.
    const auto& source = proj.branches[mr.source];
    file_edit rebased{proj.branches[mr.target].files, {}};
    apply_changes(proj, source, rebased, mr.sha);
    move_head(proj, mr.source, mr.sha, "Rebased " + mr.source, rebased.commit(), changed_since_fork(proj, source));
    proj.branches[mr.source].fork_sha = proj.branches[mr.target].head_sha;
    mr.base_sha = proj.branches[mr.target].head_sha;
    start_pipeline(mr, project_name, done_at);
  }

  std::string detailed_status(const sim_mr& mr, clock_type::time_point now) const {
    if (mr.state != "opened") return "not_open";
    if (mr.rebase_done_at) return "checking";
    if (mr.has_conflicts) return "conflict";
    if (mr.needs_rebase) return "need_rebase";
    if (mr.pipelines.empty()) return "checking";
    auto status = pipeline_status(pipelines.at(mr.pipelines.back()), now);
    if (status == "running") return "checking";
    if (status != "success") return "ci_must_pass";
    return "mergeable";
  }

  /// A client read the pipeline's status: one of its "running" reads is used up.
  static void seen_by_read(sim_pipeline& p) {
    if (p.running_reads > 0) --p.running_reads;
  }

  json pipeline_json(const sim_pipeline& p, clock_type::time_point now) const {
    return {{"id", p.id},
            {"iid", p.id - 4999},
            {"sha", p.sha},
            {"ref", p.ref},
            {"status", pipeline_status(p, now)},
            {"source", "merge_request_event"},
            {"web_url", "http://sim/-/pipelines/" + std::to_string(p.id)}};
  }

  json mr_json(const std::string& project_name, const sim_mr& mr, clock_type::time_point now) const {
    auto detailed = detailed_status(mr, now);
    auto p = projects.find(project_name);
    json j = {{"id", mr.id},
              {"iid", mr.iid},
              {"project_id", p == projects.end() ? 0 : p->second.id},
              {"title", mr.title},
              {"description", mr.description},
              {"state", mr.state},
              {"draft", false},
              {"source_branch", mr.source},
              {"target_branch", mr.target},
              {"sha", mr.sha},
              {"merge_commit_sha", mr.merge_commit_sha ? json(*mr.merge_commit_sha) : json()},
              {"merge_status", detailed == "mergeable"  ? "can_be_merged"
                               : detailed == "checking" ? "checking"
                                                        : "cannot_be_merged"},
              {"detailed_merge_status", detailed},
              {"has_conflicts", mr.has_conflicts},
              {"merge_error", mr.merge_error.empty() ? json() : json(mr.merge_error)},
              {"rebase_in_progress", mr.rebase_done_at.has_value()},
              {"head_pipeline", mr.pipelines.empty() ? json() : pipeline_json(pipelines.at(mr.pipelines.back()), now)},
              {"diff_refs", mr.base_sha.empty()
                                ? json()
                                : json{{"base_sha", mr.base_sha}, {"head_sha", mr.sha}, {"start_sha", mr.base_sha}}},
              {"web_url", "http://sim/" + project_name + "/-/merge_requests/" + std::to_string(mr.iid)}};
    return j;
  }

  json approvals_json(const sim_mr& mr, std::int64_t user) const {
    json by = json::array();
    for (auto id : mr.approved_by) {
      by.push_back(
          {{"user", {{"id", id}, {"username", "user" + std::to_string(id)}, {"name", "User " + std::to_string(id)}}}});
    }
    return {{"id", mr.id},
            {"iid", mr.iid},
            {"approved", !mr.approved_by.empty()},
            {"approvals_required", 0},
            {"approvals_left", 0},
            {"user_has_approved", mr.approved_by.count(user) != 0},
            {"user_can_approve", mr.approved_by.count(user) == 0},
            {"approved_by", by}};
  }

  json check_items_json() const {
    json items = json::array();
    for (const auto& c : check_items) items.push_back({{"id", c.id}, {"title", c.title}});
    return items;
  }

  // ---- request handling

  struct outcome {
    hs::response res;
    ms delay{0};
    std::string endpoint;  // GitLab requests: the endpoint name of the request log and the stats
  };

  // Generic faults common to every endpoint: slow, status, garbage. Returns a response to send instead.
  std::optional<hs::response> common_faults(const std::string& endpoint, const std::string& subject, ms& delay) {
    if (auto f = faults.take("slow", endpoint, subject)) delay += ms(f->delay_ms);
    if (auto f = faults.take("status", endpoint, subject)) {
      hs::response r;
      r.status = static_cast<unsigned>(f->status);
      if (!f->body.empty()) {
        r.body = f->body;
      } else if (f->status == 429) {
        r.content_type = "text/plain";
        r.body = "Retry later";
      } else {
        r.body = json{{"message", std::to_string(f->status) + " Simulated failure"}}.dump();
      }
      if (f->retry_after) r.set_header("Retry-After", std::to_string(*f->retry_after));
      return r;
    }
    if (faults.take("garbage", endpoint, subject)) {
      hs::response r;
      r.content_type = "text/html";
      r.body = "<html>proxy error: not json";
      return r;
    }
    return std::nullopt;
  }

  // After an action took effect: maybe lose its response (status 0 closes the connection).
  void maybe_lose(hs::response& r, const std::string& endpoint, const std::string& subject) {
    if (r.status >= 200 && r.status < 300 && faults.take("lose_response", endpoint, subject)) r.status = 0;
  }

  std::optional<std::int64_t> user_of(const hs::request& req) const {
    std::string token;
    if (auto t = req.header("private-token"))
      token = std::string(*t);
    else if (auto a = req.header("authorization"); a && a->substr(0, 7) == "Bearer ")
      token = std::string(a->substr(7));
    auto it = opts.tokens.find(token);
    if (it == opts.tokens.end()) return std::nullopt;
    return it->second;
  }

  outcome route(const hs::request& req) {
    auto parts = split_path(req.target);
    outcome out;
    if (parts.size() >= 2 && parts[0] == "_sim") {
      ++counters.requests["admin"];
      out.res = admin(req, parts);
      return out;
    }
    if (parts.size() >= 5 && parts[0] == "api" && parts[1] == "v4" && parts[2] == "projects") {
      return gitlab(req, parts);
    }
    if (parts.size() >= 2 && parts[0] == "api" && parts[1] == "approvals") return approval(req, parts);
    if (parts.size() == 3 && parts[0] == "api" && parts[1] == "permissions" && parts[2] == "check" &&
        req.method == "POST") {
      return permission(req);
    }
    ++counters.requests["unknown"];
    out.res = message(404, "404 Not Found");
    return out;
  }

  /// Serves one GitLab request and appends it to the request log with its answer.
  outcome gitlab(const hs::request& req, const std::vector<std::string>& parts) {
    auto out = gitlab_call(req, parts);
    request_entry e;
    e.seq = ++next_request_seq;
    e.project = parts[3];
    e.status = out.res.status;
    e.endpoint = out.endpoint;
    std::vector<std::string> rest(parts.begin() + 4, parts.end());
    if (e.endpoint == "create_mr") {
      auto body = json::parse(req.body.empty() ? std::string("{}") : req.body, nullptr, false);
      if (body.is_object()) {
        e.source_branch = body.value("source_branch", "");
        e.target_branch = body.value("target_branch", "");
      }
      // A 201, or one whose answer a fault dropped (status 0): the MR exists either way.
      auto answer = json::parse(out.res.body, nullptr, false);
      if ((out.res.status == 201 || out.res.status == 0) && answer.is_object() && answer.contains("iid"))
        e.iid = answer.value("iid", std::int64_t{0});
    } else if (rest.size() >= 2 && rest[0] == "merge_requests") {
      e.iid = to_int(rest[1]).value_or(0);
    }
    if (e.endpoint == "get_mr" && out.res.status == 200) {
      // As answered, not as now: a pipeline may finish between the answer and this line.
      auto answer = json::parse(out.res.body, nullptr, false);
      if (answer.is_object() && answer.contains("head_pipeline") && answer["head_pipeline"].is_object())
        e.head_pipeline = answer["head_pipeline"].value("status", "");
    }
    if (e.iid) {
      auto p = projects.find(e.project);
      if (p != projects.end()) {
        auto m = p->second.mrs.find(e.iid);
        if (m != p->second.mrs.end()) {
          e.mr_state = m->second.state;
          e.source_branch = m->second.source;
          e.target_branch = m->second.target;
        }
      }
    }
    if (request_log.size() < request_log_limit) request_log.push_back(std::move(e));
    return out;
  }

  outcome gitlab_call(const hs::request& req, const std::vector<std::string>& parts) {
    const std::string& project_name = parts[3];
    std::vector<std::string> rest(parts.begin() + 4, parts.end());
    const auto& m = req.method;
    std::string endpoint = "unknown";
    std::optional<std::int64_t> iid;
    if (rest.size() == 3 && rest[0] == "repository" && rest[1] == "branches" && m == "GET")
      endpoint = "get_branch";
    else if (rest.size() == 2 && rest[0] == "repository" && rest[1] == "commits" && m == "POST")
      endpoint = "create_commit";
    else if (rest.size() == 3 && rest[0] == "repository" && rest[1] == "files" && m == "GET")
      endpoint = "get_file";
    else if (rest.size() == 1 && rest[0] == "merge_requests" && m == "POST")
      endpoint = "create_mr";
    else if (rest.size() == 1 && rest[0] == "merge_requests" && m == "GET")
      endpoint = "list_mrs";
    else if (rest.size() == 1 && rest[0] == "approval_check_items" && m == "GET")
      endpoint = "check_items";
    else if (rest.size() == 2 && rest[0] == "pipelines" && m == "GET")
      endpoint = "get_pipeline";
    else if (rest.size() >= 2 && rest[0] == "merge_requests" && (iid = to_int(rest[1]))) {
      if (rest.size() == 2 && m == "GET")
        endpoint = "get_mr";
      else if (rest.size() == 2 && m == "PUT")
        endpoint = "update_mr";
      else if (rest.size() == 3 && rest[2] == "approvals" && m == "GET")
        endpoint = "get_approvals";
      else if (rest.size() == 3 && rest[2] == "approve" && m == "POST")
        endpoint = "approve";
      else if (rest.size() == 3 && rest[2] == "merge" && m == "PUT")
        endpoint = "merge";
      else if (rest.size() == 3 && rest[2] == "rebase" && m == "PUT")
        endpoint = "rebase";
      else if (rest.size() == 3 && rest[2] == "pipelines" && m == "GET")
        endpoint = "mr_pipelines";
    }
    ++counters.requests[endpoint];
    outcome out;
    out.endpoint = endpoint;
    if (endpoint == "unknown") {
      out.res = message(404, "404 Not Found");
      return out;
    }
    auto user = user_of(req);
    if (!user) {
      out.res = message(401, "401 Unauthorized");
      return out;
    }
    auto* known = project(project_name);
    if (!known) {
      out.res = message(404, "404 Project Not Found");
      return out;
    }
    auto& proj = *known;
    auto now = clock_type::now();
    auto body = json::parse(req.body.empty() ? std::string("{}") : req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) body = json::object();

    sim_mr* mr = nullptr;
    std::string subject;
    if (iid) {
      auto it = proj.mrs.find(*iid);
      if (it != proj.mrs.end()) {
        mr = &it->second;
        settle(proj, project_name, *mr, now);
        subject = mr->subject();
      }
    } else if (endpoint == "get_branch") {
      subject = rest[2];
    } else if (endpoint == "get_file") {
      subject = req.query_param("ref").value_or("") + " " + rest[2];
    } else if (endpoint == "create_commit") {
      // The branch and every file path of the commit: a rule can target the commit of one change
      // by its file even when many changes ride in one commit.
      subject = body.value("branch", "");
      if (body.contains("actions") && body["actions"].is_array()) {
        for (const auto& a : body["actions"]) {
          if (a.is_object() && a.contains("file_path") && a["file_path"].is_string())
            subject += " " + a["file_path"].get<std::string>();
        }
      }
    } else if (endpoint == "create_mr") {
      subject = body.value("title", "") + " " + body.value("source_branch", "");
    } else if (endpoint == "list_mrs") {
      subject = req.query_param("source_branch").value_or("");
    }
    // Before any fault or refusal: an attempt counts whether or not it takes effect.
    record_attempt(endpoint, project_name, proj, iid, mr, *user, body, req);
    if (auto r = common_faults(endpoint, subject, out.delay)) {
      out.res = std::move(*r);
      return out;
    }
    if (iid && !mr) {
      out.res = message(404, "404 Not found");
      return out;
    }

    if (endpoint == "get_branch") {
      auto it = proj.branches.find(rest[2]);
      if (it == proj.branches.end()) {
        out.res = message(404, "404 Branch Not Found");
      } else {
        out.res =
            json_response(200, {{"name", it->first},
                                {"commit",
                                 {{"id", it->second.head_sha},
                                  {"message", it->second.head_message},
                                  {"title", it->second.head_message.substr(0, it->second.head_message.find('\n'))}}},
                                {"protected", it->first == "main"},
                                {"merged", false},
                                {"default", it->first == "main"}});
      }
    } else if (endpoint == "get_file") {
      out.res = get_file(proj, rest[2], req.query_param("ref").value_or(""));
    } else if (endpoint == "create_commit") {
      out.res = create_commit(proj, body, subject);
    } else if (endpoint == "create_mr") {
      out.res = create_mr(proj, project_name, body, now);
    } else if (endpoint == "list_mrs") {
      json list = json::array();
      auto state = req.query_param("state").value_or("all");
      auto source = req.query_param("source_branch");
      auto target = req.query_param("target_branch");
      for (auto it = proj.mrs.rbegin(); it != proj.mrs.rend(); ++it) {
        settle(proj, project_name, it->second, now);
        if (state != "all" && it->second.state != state) continue;
        if (source && it->second.source != *source) continue;
        if (target && it->second.target != *target) continue;
        list.push_back(mr_json(project_name, it->second, now));
      }
      out.res = json_response(200, list);
    } else if (endpoint == "check_items") {
      out.res = json_response(200, {{"check_items", check_items_json()}});
    } else if (endpoint == "get_pipeline") {
      auto id = to_int(rest[1]);
      auto it = id ? pipelines.find(*id) : pipelines.end();
      if (it == pipelines.end())
        out.res = message(404, "404 Not found");
      else
        out.res = json_response(200, pipeline_json(it->second, now));
      if (it != pipelines.end()) seen_by_read(it->second);
    } else if (endpoint == "get_mr") {
      out.res = json_response(200, mr_json(project_name, *mr, now));
      if (!mr->pipelines.empty()) seen_by_read(pipelines.at(mr->pipelines.back()));
      // Someone pushes to the source branch right after a client saw the MR ready: what it read
      // is stale by its next call.
      if (mr->state == "opened" && !mr->pipelines.empty() &&
          pipeline_status(pipelines.at(mr->pipelines.back()), now) == "success" &&
          faults.take("head_moves", "get_mr", mr->subject())) {
        push_to_source(proj, project_name, *mr, now);
      }
    } else if (endpoint == "update_mr") {
      auto state_event = body.value("state_event", req.query_param("state_event").value_or(""));
      // A merge that lands just before the close (another merger, or a merge whose answer was lost):
      // the close then finds the MR merged.
      if (state_event == "close" && mr->state == "opened" &&
          faults.take("merged_before_close", "update_mr", mr->subject())) {
        land(proj, project_name, *mr);
      }
      // GitLab ignores an impossible transition (closing a merged MR) and answers with the MR as is.
      if (state_event == "close" && mr->state == "opened") {
        mr->state = "closed";
        send_mr_hook(project_name, *mr, "close");
      }
      out.res = json_response(200, mr_json(project_name, *mr, now));
    } else if (endpoint == "get_approvals") {
      out.res = json_response(200, approvals_json(*mr, *user));
    } else if (endpoint == "approve") {
      out.res = approve(project_name, *mr, *user, body);
    } else if (endpoint == "merge") {
      out.res = merge(proj, project_name, *mr, body, now);
    } else if (endpoint == "rebase") {
      if (mr->state != "opened") {
        out.res = message(403, "403 Forbidden - Cannot push to source branch");
      } else if (mr->rebase_done_at) {
        out.res = message(409, "409 Conflict: Resource lock");
      } else {
        mr->rebase_done_at = now + opts.rebase_duration;
        mr->rebase_will_conflict = faults.take("rebase_conflict", "rebase", mr->subject()).has_value() ||
                                   proj.branches[mr->source].conflicts_with_start;
        out.res = json_response(202, {{"rebase_in_progress", true}});
      }
    } else if (endpoint == "mr_pipelines") {
      json list = json::array();
      for (auto it = mr->pipelines.rbegin(); it != mr->pipelines.rend(); ++it) {
        list.push_back(pipeline_json(pipelines.at(*it), now));
      }
      out.res = json_response(200, list);
      for (auto id : mr->pipelines) seen_by_read(pipelines.at(id));
    }
    maybe_lose(out.res, endpoint, subject);
    return out;
  }

  void record_attempt(const std::string& endpoint, const std::string& project_name, const sim_project& proj,
                      std::optional<std::int64_t> iid, const sim_mr* mr, std::int64_t user, const json& body,
                      const hs::request& req) {
    auto& a = counters.attempts;
    const auto mr_key = iid ? project_name + "!" + std::to_string(*iid) : std::string();
    if (endpoint == "approve") {
      ++a.approve[mr_key][std::to_string(user)];
      if (mr && mr->approved_by.count(user)) ++a.approve_after_approved[mr_key][std::to_string(user)];
    } else if (endpoint == "merge") {
      ++a.merge[mr_key];
      if (mr && mr->state == "merged") ++a.merge_after_merged[mr_key];
    } else if (endpoint == "update_mr") {
      if (body.value("state_event", req.query_param("state_event").value_or("")) == "close") ++a.close[mr_key];
    } else if (endpoint == "create_commit") {
      const auto key = project_name + ":" + body.value("branch", "");
      ++a.create_commit[key];
      if (body.contains("actions") && body["actions"].is_array()) {
        for (const auto& action : body["actions"]) {
          if (!action.is_object()) continue;
          auto line = action.value("action", "?") + " " + action.value("file_path", "?");
          if (action.contains("last_commit_id") && action["last_commit_id"].is_string())
            line += " @" + action["last_commit_id"].get<std::string>();
          a.commit_actions[key].push_back(std::move(line));
        }
      }
    } else if (endpoint == "create_mr") {
      auto source = body.value("source_branch", "");
      ++a.create_mr[project_name + ":" + source];
      auto [from, to] = proj.mrs_by_source.equal_range(source);
      for (auto i = from; i != to; ++i) {
        const auto& existing = proj.mrs.at(i->second);
        if (existing.state == "opened") {
          ++a.create_mr_while_open[project_name + ":" + source];
          break;
        }
      }
    }
  }

  /// GET repository/files/:file_path?ref= (GitLab's repository files API): content base64, the ref's
  /// head commit and the last commit that changed the file.
  hs::response get_file(const sim_project& proj, const std::string& path, const std::string& ref) const {
    if (ref.empty()) return json_response(400, {{"error", "ref is missing"}});
    const auto* files = files_at(proj, ref);
    if (!files) return message(404, "404 Commit Not Found");
    const auto* found = files->find(path);
    if (!found) return message(404, "404 File Not Found");
    auto b = proj.branches.find(ref);
    const auto& f = *found;
    return json_response(200, {{"file_name", path.substr(path.rfind('/') + 1)},
                               {"file_path", path},
                               {"size", f.content.size()},
                               {"encoding", "base64"},
                               {"content", base64::encode(f.content)},
                               {"content_sha256", ids::sha256_hex(f.content)},
                               {"ref", ref},
                               {"blob_id", ids::sha256_hex("blob:" + f.content).substr(0, 40)},
                               {"commit_id", b != proj.branches.end() ? b->second.head_sha : ref},
                               {"last_commit_id", f.last_commit_id},
                               {"execute_filemode", false}});
  }

  /// Applies the actions in order onto `files` as GitLab does, or answers its refusal (nothing is
  /// written then: the whole request is one commit).
  std::optional<hs::response> apply_actions(const json& actions, file_edit& files, const std::string& sha,
                                            std::vector<std::string>& written) {
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const auto& a = actions[i];
      const auto field = [&](const char* name) { return "actions[" + std::to_string(i) + "][" + name + "]"; };
      if (!a.is_object() || !a.contains("action") || !a["action"].is_string())
        return json_response(400, {{"error", field("action") + " is missing"}});
      if (!a.contains("file_path") || !a["file_path"].is_string() || a["file_path"].get<std::string>().empty())
        return json_response(400, {{"error", field("file_path") + " is missing"}});
      const auto action = a["action"].get<std::string>();
      const auto path = a["file_path"].get<std::string>();
      std::string content = a.contains("content") && a["content"].is_string() ? a["content"].get<std::string>() : "";
      if (a.value("encoding", "text") == "base64") {
        auto decoded = base64::decode(content);
        if (!decoded) return json_response(400, {{"error", field("content") + " is invalid"}});
        content = std::move(*decoded);
      }
      written.push_back(path);
      const auto* existing = files.find(path);
      if (action == "create") {
        if (existing) return message(400, "A file with this name already exists");
        files.put(path, {content, sha});
        continue;
      }
      if (action != "update" && action != "delete") {
        return json_response(400, {{"error", field("action") + " does not have a valid value"}});
      }
      if (!existing) return message(400, "A file with this name doesn't exist");
      // Optimistic locking per action: the last commit the caller saw must still be the file's.
      if (a.contains("last_commit_id") && a["last_commit_id"].is_string() &&
          a["last_commit_id"].get<std::string>() != existing->last_commit_id) {
        return message(400, "You are attempting to update a file that has changed since you started editing it.");
      }
      if (action == "delete") {
        files.erase(path);
      } else {
        files.put(path, {content, sha});
      }
    }
    return std::nullopt;
  }

  hs::response create_commit(sim_project& proj, const json& body, const std::string& subject) {
    auto branch = body.value("branch", "");
    if (branch.empty()) return json_response(400, {{"error", "branch is missing"}});
    if (!body.contains("commit_message")) return json_response(400, {{"error", "commit_message is missing"}});
    if (!body.contains("actions") || !body["actions"].is_array() || body["actions"].empty()) {
      return json_response(400, {{"error", "actions is missing"}});
    }
    auto start = body.value("start_branch", "");
    bool exists = proj.branches.count(branch) != 0;
    if (exists && !start.empty() && start != branch) {
      return message(400,
                     "A branch called '" + branch + "' already exists. Switch to that branch in order to make changes");
    }
    if (!exists && proj.branches.count(start.empty() ? branch : start) == 0) {
      return message(400, "You can only create or edit files when you are on a branch");
    }
    const auto& from = proj.branches[exists ? branch : start];
    auto sha = next_sha();
    file_edit files{from.files, {}};
    std::vector<std::string> written;
    if (auto refused = apply_actions(body["actions"], files, sha, written)) return std::move(*refused);
    auto msg = body["commit_message"].is_string() ? body["commit_message"].get<std::string>() : std::string();
    auto parent = from.head_sha;
    auto fork = exists ? from.fork_sha : from.head_sha;
    move_head(proj, branch, sha, msg, files.commit(), written);
    proj.branches[branch].fork_sha = fork;
    if (!exists && faults.take("target_conflict", "create_commit", subject)) {
      // Someone else changes the same files on the start branch right after the fork.
      auto& start_branch = proj.branches[start];
      move_head(proj, start, next_sha(), "Concurrent change to the files of " + branch, start_branch.files, {});
      proj.branches[branch].conflicts_with_start = true;
    }
    return json_response(201, {{"id", sha},
                               {"short_id", sha.substr(0, 8)},
                               {"title", msg.substr(0, msg.find('\n'))},
                               {"message", msg},
                               {"parent_ids", {parent}}});
  }

  hs::response create_mr(sim_project& proj, const std::string& project_name, const json& body,
                         clock_type::time_point now) {
    auto source = body.value("source_branch", "");
    auto target = body.value("target_branch", "");
    auto title = body.value("title", "");
    if (title.empty()) return json_response(400, {{"error", "title is missing"}});
    if (source.empty() || target.empty()) return json_response(400, {{"error", "source_branch is missing"}});
    if (source == target) return message(422, json::array({"You can't use same project/branch for source and target"}));
    if (!proj.branches.count(source)) return message(422, json::array({"Source branch does not exist"}));
    auto [same_from, same_to] = proj.mrs_by_source.equal_range(source);
    for (auto i = same_from; i != same_to; ++i) {
      const auto& existing = proj.mrs.at(i->second);
      if (existing.state == "opened" && existing.target == target) {
        return message(409, json::array({"Another open merge request already exists for this source branch: !" +
                                         std::to_string(i->second)}));
      }
    }
    sim_mr mr;
    mr.id = next_mr_id++;
    mr.iid = proj.next_iid++;
    mr.title = title;
    mr.description = body.value("description", "");
    mr.source = source;
    mr.target = target;
    mr.sha = proj.branches[source].head_sha;
    mr.base_sha = proj.branches[source].fork_sha;
    // GitLab computes conflicts against the target when the MR is created.
    mr.has_conflicts = proj.branches[source].conflicts_with_start && proj.branches.count(target) != 0;
    start_pipeline(mr, project_name, now);
    auto iid = mr.iid;
    auto& stored = proj.mrs[iid] = std::move(mr);
    proj.mrs_by_source.emplace(stored.source, iid);
    return json_response(201, mr_json(project_name, stored, now));
  }

  hs::response approve(const std::string& project_name, sim_mr& mr, std::int64_t user, const json& body) {
    auto key = project_name + "!" + std::to_string(mr.iid);
    if (faults.take("approve_not_allowed", "approve", mr.subject(), user)) return message(401, "401 Unauthorized");
    if (mr.approved_by.count(user)) return message(401, "401 Unauthorized");  // GitLab's ambiguity, on purpose
    if (body.contains("sha") && body["sha"] != mr.sha) {
      return message(409, "SHA does not match HEAD of source branch: " + mr.sha);
    }
    if (faults.take("check_items_change", "approve", mr.subject())) {
      ++check_items_version;
      check_items_required = true;
      check_items.push_back({"ci-" + std::to_string(check_items_version) + "-" + std::to_string(counter),
                             "Check item added in version " + std::to_string(check_items_version)});
    }
    if (check_items_required) {
      std::set<std::string> acknowledged;
      if (body.contains("check_items") && body["check_items"].is_array()) {
        for (const auto& item : body["check_items"]) {
          if (item.is_object() && item.value("acknowledged", false) && item.contains("id") && item["id"].is_string()) {
            acknowledged.insert(item["id"].get<std::string>());
          }
        }
      }
      std::set<std::string> required;
      for (const auto& c : check_items) required.insert(c.id);
      if (acknowledged != required) {
        ++counters.check_items_422;
        return json_response(422, {{"message", "check items changed"}, {"check_items", check_items_json()}});
      }
    }
    mr.approved_by.insert(user);
    ++counters.approvals[key][std::to_string(user)];
    return json_response(201, approvals_json(mr, user));
  }

  hs::response merge(sim_project& proj, const std::string& project_name, sim_mr& mr, const json& body,
                     clock_type::time_point now) {
    auto status = detailed_status(mr, now);
    if (mr.state != "opened" || status == "checking" || status == "ci_must_pass" || status == "not_approved") {
      return message(405, "405 Method Not Allowed");
    }
    if (!mr.needs_rebase && !mr.has_conflicts && faults.take("merge_needs_rebase", "merge", mr.subject())) {
      mr.needs_rebase = true;
    }
    if (mr.needs_rebase || mr.has_conflicts) return message(422, "Branch cannot be merged");
    if (body.contains("sha") && body["sha"] != mr.sha) {
      return message(409, "SHA does not match HEAD of source branch: " + mr.sha);
    }
    land(proj, project_name, mr);
    return json_response(200, mr_json(project_name, mr, now));
  }

  /// A commit that changes nothing lands on the MR's source branch: a new head and its pipeline.
  void push_to_source(sim_project& proj, const std::string& project_name, sim_mr& mr, clock_type::time_point now) {
    mr.sha = next_sha();
    move_head(proj, mr.source, mr.sha, "Pushed to " + mr.source, proj.branches[mr.source].files, {});
    start_pipeline(mr, project_name, now);
  }

  /// The MR merges into its target branch and the deploy pipeline is scheduled.
  void land(sim_project& proj, const std::string& project_name, sim_mr& mr) {
    mr.state = "merged";
    mr.merge_commit_sha = next_sha();
    // The files the source changed since its fork land on the target, each keeping the source
    // commit that changed it as its last commit (as `git log -1 -- <path>` reports after a merge).
    const auto& source = proj.branches[mr.source];
    file_edit merged{proj.branches[mr.target].files, {}};
    apply_changes(proj, source, merged, {});
    move_head(proj, mr.target, *mr.merge_commit_sha, "Merge branch '" + mr.source + "' into '" + mr.target + "'",
              merged.commit(), changed_since_fork(proj, source));
    ++counters.merges[project_name + "!" + std::to_string(mr.iid)];
    send_mr_hook(project_name, mr, "merge");
    schedule_deploy(project_name, mr);
  }

  // ---- GitLab's own webhooks (Pipeline, Merge Request and Deployment Hooks), per project

  json project_json(const std::string& project_name) const {
    auto p = projects.find(project_name);
    return {{"id", p == projects.end() ? 0 : p->second.id},
            {"name", project_name.substr(project_name.rfind('/') + 1)},
            {"path_with_namespace", project_name},
            {"web_url", "http://sim/" + project_name}};
  }

  /// Queues one hook with GitLab's headers, applying the gitlab_webhook fault of `endpoint`.
  /// `stale` (reorder): a body sent after the real one, as an older event arriving late.
  /// Called with the mutex held.
  void send_hook(const std::string& project_name, const std::string& endpoint, const std::string& event,
                 const std::string& subject, json body, ms delay, const json& stale = json()) {
    auto secret = opts.webhook_secrets.find(project_name);
    if (opts.webhook_url.empty() || secret == opts.webhook_secrets.end()) return;
    auto f = faults.take("gitlab_webhook", endpoint, subject);
    std::string mode = f ? f->mode : "";
    if (mode == "drop") {
      ++counters.callbacks[endpoint + "_dropped"];
      return;
    }
    auto headers_for = [&](const std::string& uuid, const std::string& token) -> headers_type {
      return {{"X-Gitlab-Event", event},
              {"X-Gitlab-Token", token},
              {"X-Gitlab-Event-UUID", uuid},
              {"Idempotency-Key", uuid}};
    };
    auto uuid = next_uuid();
    int copies = mode == "duplicate" ? f->copies : 1;
    ms step(0);
    for (int k = 0; k < copies; ++k) {
      // Same event UUID each time: a redelivery, not a new event.
      deliver(opts.webhook_url, body.dump(), headers_for(uuid, secret->second), endpoint, delay + step, 1);
      step += ms(20);
    }
    if (mode == "reorder" && !stale.is_null()) {
      deliver(opts.webhook_url, stale.dump(), headers_for(next_uuid(), secret->second), endpoint, delay + step, 1);
      step += ms(20);
    }
    if (mode == "unknown_project") {
      json other = body;
      other["project"] = project_json("unknown/" + project_name);
      deliver(opts.webhook_url, other.dump(), headers_for(next_uuid(), secret->second), endpoint + "_unknown",
              delay + step, 1);
      step += ms(20);
    }
    if (mode == "forged") {
      // One attempt only: a 401 is final for a forged sender.
      deliver(opts.webhook_url, body.dump(), headers_for(next_uuid(), secret->second + "-forged"), endpoint + "_forged",
              delay + step, opts.callback_attempts);
    }
  }

  /// The MR as a pipeline hook's `merge_request` and a merge request hook's `object_attributes` show it.
  static json mr_hook_attributes(const std::string& project_name, const sim_mr& mr) {
    return {{"id", mr.id},
            {"iid", mr.iid},
            {"title", mr.title},
            {"source_branch", mr.source},
            {"target_branch", mr.target},
            {"state", mr.state},
            {"url", "http://sim/" + project_name + "/-/merge_requests/" + std::to_string(mr.iid)}};
  }

  json pipeline_hook_body(const std::string& project_name, const sim_mr& mr, const sim_pipeline& p,
                          const std::string& status) const {
    return {{"object_kind", "pipeline"},
            {"object_attributes",
             {{"id", p.id},
              {"iid", p.id - 4999},
              {"ref", p.ref},
              {"sha", p.sha},
              {"source", "merge_request_event"},
              {"status", status},
              {"detailed_status", status},
              {"finished_at", status == "running" ? json() : json(iso_now())}}},
            {"merge_request", mr_hook_attributes(project_name, mr)},
            {"project", project_json(project_name)}};
  }

  /// A pipeline's hooks: "running" when it starts, its final status when it finishes (never, for
  /// a hanging one). Called with the mutex held.
  void send_pipeline_hooks(const std::string& project_name, const sim_mr& mr, const sim_pipeline& p,
                           clock_type::time_point started) {
    if (opts.webhook_url.empty() || !opts.webhook_secrets.count(project_name)) return;
    auto now = clock_type::now();
    auto running = pipeline_hook_body(project_name, mr, p, "running");
    send_hook(project_name, "pipeline_hook", "Pipeline Hook", mr.subject(), running, ms(0));
    if (p.outcome == "hang") return;
    auto finish = std::chrono::duration_cast<ms>(started + opts.pipeline_duration - now);
    // The hook leaves once the pipeline reads as finished (GitLab sends it after the status changed).
    send_hook(project_name, "pipeline_hook", "Pipeline Hook", mr.subject(),
              pipeline_hook_body(project_name, mr, p, p.outcome), std::max(ms(0), finish) + ms(5), running);
  }

  json mr_hook_body(const std::string& project_name, const sim_mr& mr, const std::string& action) const {
    return {{"object_kind", "merge_request"},
            {"event_type", "merge_request"},
            {"project", project_json(project_name)},
            {"object_attributes", [&] {
               auto a = mr_hook_attributes(project_name, mr);
               a["action"] = action;
               a["merge_commit_sha"] = mr.merge_commit_sha ? json(*mr.merge_commit_sha) : json();
               a["last_commit"] = {{"id", mr.sha}};
               return a;
             }()}};
  }

  void send_mr_hook(const std::string& project_name, const sim_mr& mr, const std::string& action) {
    send_hook(project_name, "merge_request_hook", "Merge Request Hook", mr.subject(),
              mr_hook_body(project_name, mr, action), ms(0));
  }

  /// The deploy pipeline's Deployment Hook for a merged MR: it names the deployed commit (the merge
  /// commit), never the MR, as GitLab's does.
  void send_deployment_hook(const std::string& project_name, const sim_mr& mr, const std::string& status) {
    if (!mr.merge_commit_sha) return;
    const auto& sha = *mr.merge_commit_sha;
    json body = {{"object_kind", "deployment"},
                 {"status", status},
                 {"status_changed_at", iso_now()},
                 {"deployment_id", next_pipeline_id++},
                 {"deployable_id", next_pipeline_id++},
                 {"environment", "production"},
                 {"environment_tier", "production"},
                 {"project", project_json(project_name)},
                 {"short_sha", sha.substr(0, 8)},
                 {"commit_url", "http://sim/" + project_name + "/-/commit/" + sha},
                 {"commit_title", "Merge branch '" + mr.source + "' into '" + mr.target + "'"},
                 {"ref", mr.target}};
    send_hook(project_name, "deployment_hook", "Deployment Hook", mr.subject(), body, opts.pipeline_duration);
  }

  // ---- approval system

  outcome approval(const hs::request& req, const std::vector<std::string>& parts) {
    outcome out;
    if (parts.size() == 2 && req.method == "POST") {
      ++counters.requests["approval_submit"];
      auto body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) {
        out.res = message(400, "body must be a JSON object");
        return out;
      }
      auto request_id = body.value("requestId", "");
      ++counters.attempts.approval_submit[request_id];
      auto callback_url = body.value("callbackUrl", "");
      auto title = body.value("title", "");
      std::string subject = request_id + " " + title;
      if (auto r = common_faults("approval_submit", subject, out.delay)) {
        out.res = std::move(*r);
        return out;
      }
      if (request_id.empty() || callback_url.empty() || !clients::parse_url(callback_url)) {
        out.res = message(400, "requestId and an http callbackUrl are required");
        return out;
      }
      if (auto it = approval_by_request.find(request_id); it != approval_by_request.end()) {
        out.res = json_response(200, {{"approvalId", it->second}});
      } else {
        sim_approval a;
        a.id = "apr-" + std::to_string(next_approval++);
        a.request_id = request_id;
        a.title = title;
        a.applicant = body.value("applicant", "");
        a.callback_url = callback_url;
        if (body.contains("ext") && body["ext"].is_object()) a.ext = body["ext"];
        approval_by_request[request_id] = a.id;
        approvals[a.id] = a;
        schedule_decision(a.id, opts.callback_delay);
        out.res = json_response(201, {{"approvalId", a.id}});
      }
      maybe_lose(out.res, "approval_submit", subject);
      return out;
    }
    if (parts.size() == 4 && parts[3] == "withdraw" && req.method == "POST") {
      ++counters.requests["approval_withdraw"];
      auto it = approvals.find(parts[2]);
      std::string subject = it == approvals.end() ? std::string() : it->second.subject();
      if (auto r = common_faults("approval_withdraw", subject, out.delay)) {
        out.res = std::move(*r);
        return out;
      }
      if (it == approvals.end()) {
        out.res = message(404, "approval not found");
      } else if (it->second.state == "PENDING" || it->second.state == "WITHDRAWN") {
        if (it->second.state == "PENDING") {
          it->second.state = "WITHDRAWN";
          send_approval_callbacks(it->second, "WITHDRAWN", ms(0));
        }
        out.res = json_response(200, {{"approvalId", it->first}, {"state", "WITHDRAWN"}});
      } else {
        out.res = message(409, "approval already decided: " + it->second.state);
      }
      return out;
    }
    ++counters.requests["unknown"];
    out.res = message(404, "404 Not Found");
    return out;
  }

  void schedule_decision(const std::string& approval_id, ms delay) {
    auto gen = generation;
    tasks.after(delay, [this, gen, approval_id] {
      std::lock_guard lock(mutex);
      if (gen != generation) return;
      auto it = approvals.find(approval_id);
      if (it == approvals.end() || it->second.state != "PENDING") return;
      auto result = it->second.title.find("[reject]") != std::string::npos ? "REJECTED" : "APPROVED";
      it->second.state = result;
      send_approval_callbacks(it->second, result, ms(0));
    });
  }

  json callback_body(const sim_approval& a, const std::string& result, const std::string& operation_id) {
    return {{"callbackId", next_uuid()},  {"approvalId", a.id}, {"operationId", operation_id}, {"result", result},
            {"approver", "sim-approver"}, {"ext", a.ext},       {"decidedAt", iso_now()}};
  }

  // Called with the mutex held. Applies the approval_callback fault, then queues deliveries.
  void send_approval_callbacks(const sim_approval& a, const std::string& result, ms delay) {
    auto f = faults.take("approval_callback", "approval_callback", a.subject());
    std::string mode = f ? f->mode : "";
    if (mode == "drop") return;
    if (mode == "delay") delay += ms(f->delay_ms);
    std::vector<std::string> bodies;
    if (mode == "reorder") {
      // The stale opposite decision arrives first, the real one after it.
      bodies.push_back(callback_body(a, result == "APPROVED" ? "REJECTED" : "APPROVED", a.request_id).dump());
    }
    if (mode == "old_operation") {
      auto old_id = f->operation_id.empty() ? next_uuid() : f->operation_id;
      bodies.push_back(callback_body(a, result, old_id).dump());
    }
    auto real = callback_body(a, result, a.request_id).dump();
    auto signature = [&](const std::string& body) -> headers_type {
      return {{"X-Signature", "sha256=" + ids::hmac_sha256_hex(opts.approval_secret, body)}};
    };
    ms step(0);
    for (auto& body : bodies) {
      deliver(a.callback_url, body, signature(body), "approval", delay + step, 1);
      step += ms(20);  // keeps the intended arrival order on the single scheduler thread
    }
    // The same delivery (same callbackId) several times: one after the other, or all at once.
    int copies = mode == "duplicate" ? f->copies : opts.callback_copies;
    if (mode == "duplicate" && f->concurrent) {
      deliver_concurrently(a.callback_url, real, signature(real), "approval", delay + step, copies, ms(f->gap_ms));
      return;
    }
    for (int k = 0; k < copies; ++k) {
      deliver(copy_url(a.callback_url, k), real, signature(real), "approval", delay + step, 1);
      step += mode == "duplicate" ? ms(20) : opts.callback_copy_gap;
    }
  }

  /// Where copy `k` of a delivery to `url` goes: `url` itself, or for k >= 1 the same path on
  /// callback_copy_base when set.
  std::string copy_url(const std::string& url, int k) const {
    if (k == 0 || opts.callback_copy_base.empty()) return url;
    auto scheme = url.find("://");
    auto path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    return opts.callback_copy_base + (path == std::string::npos ? std::string("/") : url.substr(path));
  }

  // ---- deploy pipeline

  static std::vector<std::string> operation_ids_in(const std::string& description) {
    std::vector<std::string> out;
    std::stringstream in(description);
    std::string line;
    constexpr std::string_view marker = "changeflow-operation:";
    while (std::getline(in, line)) {
      auto pos = line.find(marker);
      if (pos == std::string::npos) continue;
      auto id = line.substr(pos + marker.size());
      id.erase(0, id.find_first_not_of(" \t"));
      id.erase(id.find_last_not_of(" \t\r") + 1);
      if (!id.empty()) out.push_back(id);
    }
    return out;
  }

  void schedule_deploy(const std::string& project_name, const sim_mr& mr) {
    // The deploy fault `failed` fails the deploy pipeline itself: both its reports say so.
    auto f = faults.take("deploy_callback", "deploy", mr.subject());
    std::string mode = f ? f->mode : "";
    send_deployment_hook(project_name, mr, mode == "failed" ? "failed" : "success");
    if (opts.deploy_callback_url.empty()) return;
    if (mode == "drop") return;
    json body = {{"deliveryId", next_uuid()},
                 {"project", project_name},
                 {"mrIid", mr.iid},
                 {"pipelineId", next_pipeline_id++},
                 {"status", mode == "failed" ? "failed" : "success"}};
    if (mode != "no_operation_ids") body["operationIds"] = operation_ids_in(mr.description);
    headers_type headers = {{"X-Gitlab-Token", opts.deploy_secret}, {"X-Gitlab-Event", "Deployment Hook"}};
    if (mode == "duplicate" && f->concurrent) {
      deliver_concurrently(opts.deploy_callback_url, body.dump(), headers, "deploy", opts.pipeline_duration, f->copies,
                           ms(f->gap_ms));
      return;
    }
    int copies = mode == "duplicate" ? f->copies : opts.callback_copies;
    auto gap = mode == "duplicate" ? ms(20) : opts.callback_copy_gap;
    for (int k = 0; k < copies; ++k) {
      // Same deliveryId each time: a redelivery, not a new deploy.
      deliver(copy_url(opts.deploy_callback_url, k), body.dump(), headers, "deploy", opts.pipeline_duration + gap * k,
              1);
    }
  }

  // ---- outbound callbacks (scheduler thread), retried with backoff until 2xx or attempts run out

  using headers_type = std::vector<std::pair<std::string, std::string>>;

  /// How late the sim's own threads ran their tasks: the scheduler (decisions, delayed replies, and
  /// callbacks when there are no lanes) and the callback lanes summed. Deltas over a run say whether
  /// the sim kept up: a lane still busy with one delivery when the next is due delays it.
  json task_lag() {
    auto as_json = [](const scheduler_stats& s) {
      return json{{"tasks", s.tasks}, {"lag_us", s.lag_us}, {"late", s.late}, {"busy_us", s.busy_us}};
    };
    scheduler_stats lanes_sum;
    for (auto& lane : lanes) lanes_sum += lane->tasks.stats();
    return {{"scheduler", as_json(tasks.stats())}, {"lanes", as_json(lanes_sum)}, {"lane_count", lanes.size()}};
  }

  /// One delivery attempt; true on a 2xx.
  bool send_once(clients::http_client& client, const std::string& url, const std::string& body,
                 const headers_type& headers) {
    auto target = clients::parse_url(url);
    if (!target) return false;
    clients::http_request req;
    req.method = "POST";
    req.target = target->base_path.empty() ? "/" : target->base_path;
    req.body = body;
    req.headers = headers;
    clients::transport_limits limits;
    limits.connect_timeout = opts.callback_timeout;
    limits.request_timeout = opts.callback_timeout;
    auto r = client.call(*target, req, limits);
    return r && r->status >= 200 && r->status < 300;
  }

  /// Counts an attempt's result, or queues the next attempt. Called with the mutex held.
  void after_attempt(bool ok, const std::string& url, const std::string& body, const headers_type& headers,
                     const std::string& kind, int attempt) {
    if (ok) {
      ++counters.callbacks[kind + "_sent"];
    } else if (attempt < opts.callback_attempts) {
      ++counters.callbacks[kind + "_retried"];
      // Exponential backoff capped at 2 s, as senders that retry for a long time do.
      deliver(url, body, headers, kind, std::min(ms(2000), ms(100) * (1 << std::min(attempt - 1, 5))), attempt + 1);
    } else {
      ++counters.callbacks[kind + "_failed"];
      log::warn("sim.callback_gave_up", {{"kind", kind}, {"attempts", attempt}});
    }
  }

  void deliver(std::string url, std::string body, headers_type headers, std::string kind, ms delay, int attempt) {
    auto gen = generation;
    // With lanes, the copies and retries of one delivery (same body) go to the same lane, in order.
    send_lane* lane = lanes.empty() ? nullptr : lanes[std::hash<std::string>{}(body) % lanes.size()].get();
    (lane ? lane->tasks : tasks)
        .after(delay, [this, gen, lane, url = std::move(url), body = std::move(body), headers = std::move(headers),
                       kind = std::move(kind), attempt]() mutable {
          {
            std::lock_guard lock(mutex);
            if (gen != generation) return;
          }
          bool ok = send_once(lane ? lane->client : sender, url, body, headers);
          std::lock_guard lock(mutex);
          if (gen != generation) return;
          after_attempt(ok, url, body, headers, kind, attempt);
        });
  }

  /// `copies` first attempts of one delivery, each from its own thread with its own connection, all
  /// started together (copy k waits k * gap first) so they reach the receiver at the same time. The
  /// scheduler thread waits for all of them; each copy then retries on its own like any delivery.
  void deliver_concurrently(std::string url, std::string body, headers_type headers, std::string kind, ms delay,
                            int copies, ms gap) {
    auto gen = generation;
    tasks.after(delay, [this, gen, url = std::move(url), body = std::move(body), headers = std::move(headers),
                        kind = std::move(kind), copies, gap] {
      {
        std::lock_guard lock(mutex);
        if (gen != generation) return;
      }
      std::vector<char> ok(static_cast<std::size_t>(copies), 0);
      {
        std::vector<std::jthread> senders;
        for (int k = 0; k < copies; ++k) {
          senders.emplace_back([&, k] {
            std::this_thread::sleep_for(gap * k);
            clients::http_client client;
            ok[static_cast<std::size_t>(k)] = send_once(client, copy_url(url, k), body, headers);
          });
        }
      }  // jthreads join here
      std::lock_guard lock(mutex);
      if (gen != generation) return;
      ++counters.callbacks[kind + "_concurrent_bursts"];
      for (int k = 0; k < copies; ++k) after_attempt(ok[static_cast<std::size_t>(k)], url, body, headers, kind, 1);
    });
  }

  // ---- permission service

  outcome permission(const hs::request& req) {
    ++counters.requests["permission_check"];
    outcome out;
    auto body = json::parse(req.body, nullptr, false);
    std::string subject = !body.is_discarded() && body.is_object() ? body.value("subject", "") : "";
    if (auto r = common_faults("permission_check", subject, out.delay)) {
      out.res = std::move(*r);
      return out;
    }
    if (subject.empty() || !body.contains("rules") || !body["rules"].is_array()) {
      out.res = message(400, "subject and rules are required");
      return out;
    }
    json granted = json::array();
    auto configured = permission_grants.find(subject);
    for (const auto& rule : body["rules"]) {
      if (!rule.is_string()) continue;
      if (configured == permission_grants.end() || configured->second.count(rule.get<std::string>())) {
        granted.push_back(rule);
      }
    }
    out.res = json_response(200, {{"granted", granted}});
    return out;
  }

  // ---- admin

  hs::response admin(const hs::request& req, const std::vector<std::string>& parts) {
    if (req.peer_address != "127.0.0.1" && req.peer_address != "::1") return message(403, "admin is loopback only");
    const auto& what = parts[1];
    auto body = json::parse(req.body.empty() ? std::string("{}") : req.body, nullptr, false);
    // POST adds rules; PUT replaces the whole set in one step, so no request sees the set between
    // a clear and the additions (a rule that must hold throughout is never briefly absent).
    if (what == "faults" && (req.method == "POST" || req.method == "PUT")) {
      if (body.is_discarded()) return message(400, "invalid JSON");
      json list = body.is_array() ? body : body.contains("faults") ? body["faults"] : json::array({body});
      std::vector<fault> parsed;
      for (const auto& item : list) {
        std::string error;
        auto f = parse_fault(item, error);
        if (!f) return message(400, error);
        parsed.push_back(*f);
      }
      if (req.method == "PUT") faults.clear();
      for (auto& f : parsed) faults.add(std::move(f));
      return json_response(200, {{"faults", faults.describe()}});
    }
    if (what == "faults" && req.method == "DELETE") {
      faults.clear();
      return json_response(200, {{"faults", json::array()}});
    }
    if (what == "faults" && req.method == "GET") return json_response(200, {{"faults", faults.describe()}});
    if (what == "requests" && req.method == "GET") {
      json list = json::array();
      for (const auto& e : request_log) list.push_back(e.to_json());
      return json_response(200, {{"requests", list}, {"truncated", request_log.size() >= request_log_limit}});
    }
    if (what == "stats" && req.method == "GET") {
      json fired = json::object();
      for (const auto& [k, v] : faults.fired()) fired[k] = v;
      return json_response(200, {{"attempts", counters.attempts.to_json()},
                                 {"requests", counters.requests},
                                 {"approvals", counters.approvals},
                                 {"merges", counters.merges},
                                 {"callbacks", counters.callbacks},
                                 {"check_items_422", counters.check_items_422},
                                 {"faults_fired", fired},
                                 {"task_lag", task_lag()}});
    }
    if (what == "approvals" && req.method == "GET") {
      // What the approval system was told, for tests that check who is named as the applicant.
      json list = json::array();
      for (const auto& [id, a] : approvals) {
        list.push_back(
            {{"approvalId", id}, {"requestId", a.request_id}, {"applicant", a.applicant}, {"state", a.state}});
      }
      return json_response(200, {{"approvals", list}});
    }
    if (what == "reset" && req.method == "POST") {
      ++generation;
      projects.clear();
      request_log.clear();
      seed_projects();
      pipelines.clear();
      approvals.clear();
      approval_by_request.clear();
      permission_grants.clear();
      check_items = {{"ci-1", "Change reviewed against the runbook"}};
      check_items_required = false;
      faults.clear();
      faults.reset_counters();
      counters = {};
      return json_response(200, {{"reset", true}});
    }
    if (what == "check_items" && (req.method == "PUT" || req.method == "POST")) {
      if (body.is_discarded() || !body.is_object()) return message(400, "invalid JSON");
      check_items_required = body.value("required", true);
      if (body.contains("items") && body["items"].is_array()) {
        check_items.clear();
        for (const auto& item : body["items"]) {
          if (!item.is_object() || !item.contains("id") || !item["id"].is_string())
            return message(400, "items need string ids");
          check_items.push_back({item["id"].get<std::string>(), item.value("title", "")});
        }
      }
      return json_response(200, {{"required", check_items_required}, {"check_items", check_items_json()}});
    }
    if (what == "permissions" && req.method == "POST") {
      if (body.is_discarded() || !body.is_object() || !body.contains("subject") || !body["subject"].is_string() ||
          !body.contains("granted") || !body["granted"].is_array()) {
        return message(400, "subject and granted are required");
      }
      auto& rules = permission_grants[body["subject"].get<std::string>()];
      rules.clear();
      for (const auto& r : body["granted"]) {
        if (r.is_string()) rules.insert(r.get<std::string>());
      }
      return json_response(200, {{"subject", body["subject"]}, {"granted", body["granted"]}});
    }
    return message(404, "unknown admin endpoint");
  }

  void handle(hs::request&& req, hs::responder reply) {
    outcome out;
    {
      std::lock_guard lock(mutex);
      try {
        out = route(req);
      } catch (const std::exception& e) {
        log::error("sim.handler_failed", {{"what", e.what()}, {"target", req.target}});
        out.res = message(500, "500 Internal Server Error");
      }
    }
    if (out.delay.count() > 0) {
      tasks.after(out.delay, [reply, res = std::move(out.res)]() mutable { reply(std::move(res)); });
    } else {
      reply(std::move(out.res));
    }
  }
};

simulator::simulator(sim_options options) : impl_(std::make_unique<impl>(std::move(options))) {}
simulator::~simulator() {
  stop();
}

void simulator::start() {
  hs::server_options so;
  so.address = impl_->opts.address;
  so.port = impl_->opts.port;
  so.threads = impl_->opts.threads;
  so.server_name = "changeflow-sim";
  impl_->server = std::make_unique<hs::server>(
      so, [this](hs::request&& req, hs::responder reply) { impl_->handle(std::move(req), std::move(reply)); });
  impl_->server->start();
}

void simulator::stop() {
  if (!impl_) return;
  impl_->tasks.stop();
  for (auto& lane : impl_->lanes) lane->tasks.stop();
  if (impl_->server) {
    impl_->server->stop();
    // Destroying the server closes its listening socket for sure (server::stop may leave the
    // acceptor open until destruction), so "sim stopped" really means "connection refused".
    impl_->stopped_port = impl_->server->port();
    impl_->server.reset();
  }
}

std::uint16_t simulator::port() const {
  return impl_->server ? impl_->server->port() : impl_->stopped_port;
}
std::string simulator::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port());
}

}  // namespace changeflow::sim
