// fuzz_gitlab: GitLab response bodies through the client's parsers (clients/gitlab_client.hpp):
// parse_merge_request, parse_check_items, and the error path every client shares (status_error,
// remote_message). Input: one mode byte, then the body:
//   'm' merge request   'c' check items   'e' error answer (first line: Retry-After value)
// The two parsers report a body that is not the expected shape by throwing std::exception, which
// the client turns into a protocol call_error (parse_as, approver.cpp); any other escape, a crash
// or a broken invariant is a bug. status_error and remote_message never throw.
// Invariants: a parsed MR has an iid; parse -> serialize -> parse gives the same MR / items.

#include "clients/gitlab_client.hpp"
#include "clients/http_client.hpp"
#include "fuzz/fuzz_support.hpp"

#include <cstddef>
#include <cstdint>

using namespace changeflow;
using nlohmann::json;

namespace {

json mr_to_json(const clients::merge_request& mr) {
  json j = {{"id", mr.id},
            {"iid", mr.iid},
            {"state", mr.state},
            {"title", mr.title},
            {"description", mr.description},
            {"source_branch", mr.source_branch},
            {"target_branch", mr.target_branch},
            {"sha", mr.sha},
            {"merge_status", mr.merge_status},
            {"detailed_merge_status", mr.detailed_merge_status},
            {"has_conflicts", mr.has_conflicts},
            {"merge_error", mr.merge_error.empty() ? json(nullptr) : json(mr.merge_error)},
            {"rebase_in_progress", mr.rebase_in_progress},
            {"merge_commit_sha", mr.merge_commit_sha ? json(*mr.merge_commit_sha) : json(nullptr)},
            {"web_url", mr.web_url}};
  if (mr.head_pipeline) {
    j["head_pipeline"] = {
        {"id", mr.head_pipeline->id}, {"sha", mr.head_pipeline->sha}, {"status", mr.head_pipeline->status}};
  } else {
    j["head_pipeline"] = nullptr;
  }
  return j;
}

bool same(const clients::merge_request& a, const clients::merge_request& b) {
  auto pipe = [](const std::optional<clients::gitlab_pipeline>& p) {
    return p ? json{p->id, p->sha, p->status} : json(nullptr);
  };
  return a.id == b.id && a.iid == b.iid && a.state == b.state && a.title == b.title && a.description == b.description &&
         a.source_branch == b.source_branch && a.target_branch == b.target_branch && a.sha == b.sha &&
         a.merge_status == b.merge_status && a.detailed_merge_status == b.detailed_merge_status &&
         a.has_conflicts == b.has_conflicts && a.merge_error == b.merge_error &&
         a.rebase_in_progress == b.rebase_in_progress && a.merge_commit_sha == b.merge_commit_sha &&
         pipe(a.head_pipeline) == pipe(b.head_pipeline) && a.web_url == b.web_url;
}

void merge_request(const std::string& body) {
  clients::merge_request mr;
  try {
    mr = clients::parse_merge_request(body);
  } catch (const std::exception&) {
    return;  // documented: the client answers a protocol error
  }
  FUZZ_CHECK(mr.iid != 0, "a parsed MR has an iid");
  auto again = clients::parse_merge_request(fuzz::strict_dump(mr_to_json(mr), "MR re-serializes"));
  FUZZ_CHECK(same(mr, again), "MR parse -> serialize -> parse is stable");
}

void check_items(const std::string& body) {
  std::vector<clients::check_item> items;
  try {
    items = clients::parse_check_items(body);
  } catch (const std::exception&) {
    return;
  }
  json list = json::array();
  for (const auto& c : items) list.push_back({{"id", c.id}, {"title", c.title}});
  auto again = clients::parse_check_items(fuzz::strict_dump(json{{"check_items", list}}, "check items re-serialize"));
  FUZZ_CHECK(again.size() == items.size(), "check items round trip keeps the count");
  for (std::size_t i = 0; i < items.size(); ++i) {
    FUZZ_CHECK(again[i].id == items[i].id && again[i].title == items[i].title, "check items round trip is stable");
  }
}

void error_answer(const std::string& rest, std::uint8_t status_byte) {
  clients::http_response r;
  r.status = 400 + status_byte % 200;
  auto nl = rest.find('\n');
  if (nl != std::string::npos) r.headers["retry-after"] = rest.substr(0, nl);
  r.body = nl == std::string::npos ? rest : rest.substr(nl + 1);
  auto e = clients::status_error(r);
  FUZZ_CHECK(e.what == clients::call_error::kind::http_status && e.status == r.status, "status error kind");
  FUZZ_CHECK(e.body.size() <= 64 * 1024, "kept body is capped");
  FUZZ_CHECK(!e.retry_after_seconds || *e.retry_after_seconds >= 0, "retry-after is non-negative");
  FUZZ_CHECK(e.message.size() <= 4 * 1024, "message is bounded");
  (void)clients::classify_merge_error(e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (data[0]) {
    case 'c': check_items(rest); break;
    case 'e': error_answer(rest, data[1]); break;
    default: merge_request(rest); break;
  }
  return 0;
}
