// fuzz_submit_dto: POST /api/v1/changes bodies through http::dto::parse_submit (the handler's exact
// parser) and payload_json. Invariants: never throws; an accepted request satisfies the documented
// limits; accepted -> serialize -> parse gives the same request; the stored payload is valid JSON.

#include "base/ids.hpp"
#include "fuzz/fuzz_support.hpp"
#include "http/dto/change_dto.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

using namespace changeflow;
using nlohmann::json;

namespace {

json to_wire(const http::dto::submit_request& r) {
  json files = json::array();
  for (const auto& f : r.files) {
    json one = {{"path", f.path}, {"action", f.action}};
    if (f.action != "delete") one["content"] = f.content;
    if (f.last_commit_id) one["lastCommitId"] = *f.last_commit_id;
    files.push_back(one);
  }
  json j = {{"subject", r.subject}, {"target", r.target}, {"title", r.title}, {"files", files}};
  if (r.operation_id) j["operationId"] = *r.operation_id;
  return j;
}

bool same(const http::dto::submit_request& a, const http::dto::submit_request& b) {
  if (a.operation_id != b.operation_id || a.subject != b.subject || a.target != b.target || a.title != b.title ||
      a.files.size() != b.files.size())
    return false;
  for (std::size_t i = 0; i < a.files.size(); ++i) {
    const auto &x = a.files[i], &y = b.files[i];
    if (x.path != y.path || x.action != y.action || x.content != y.content || x.last_commit_id != y.last_commit_id)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  auto parsed = http::dto::parse_submit(body);
  if (auto* e = std::get_if<http::dto::parse_error>(&parsed)) {
    FUZZ_CHECK(!e->message.empty(), "a refusal names its reason");
    return 0;
  }
  const auto& r = std::get<http::dto::submit_request>(parsed);
  FUZZ_CHECK(!r.subject.empty() && r.subject.size() <= 128, "subject length");
  FUZZ_CHECK(!r.target.empty() && r.target.size() <= 255, "target length");
  FUZZ_CHECK(!r.title.empty() && r.title.size() <= 255, "title length");
  FUZZ_CHECK(!r.files.empty() && r.files.size() <= 100, "file count");
  if (r.operation_id) FUZZ_CHECK(ids::is_uuid(*r.operation_id), "operationId is a UUID");
  for (const auto& f : r.files) {
    FUZZ_CHECK(!f.path.empty() && f.path.front() != '/', "relative path");
    for (std::size_t start = 0; start <= f.path.size();) {
      auto slash = std::min(f.path.find('/', start), f.path.size());
      auto seg = f.path.substr(start, slash - start);
      FUZZ_CHECK(!seg.empty() && seg != "." && seg != "..", "no empty, '.' or '..' path segment");
      start = slash + 1;
    }
    FUZZ_CHECK(f.action == "create" || f.action == "update" || f.action == "delete" || f.action == "upsert",
               "known action");
    if (f.last_commit_id) {
      FUZZ_CHECK(f.action != "create", "a create carries no base");
      FUZZ_CHECK(f.last_commit_id->size() == 40 || f.last_commit_id->size() == 64, "base is a commit id");
    }
    FUZZ_CHECK(f.content.size() <= 256 * 1024, "content size");
  }
  // Round trip: what we accepted, re-sent, is accepted as the same request.
  auto again = http::dto::parse_submit(fuzz::strict_dump(to_wire(r), "accepted request re-serializes"));
  FUZZ_CHECK(std::holds_alternative<http::dto::submit_request>(again), "re-serialized request is accepted");
  FUZZ_CHECK(same(r, std::get<http::dto::submit_request>(again)), "parse -> serialize -> parse is stable");
  // The stored payload (what the MR carries) is valid JSON with every file.
  auto payload = json::parse(http::dto::payload_json(r), nullptr, false);
  FUZZ_CHECK(!payload.is_discarded() && payload["files"].size() == r.files.size(), "payload_json is valid JSON");
  return 0;
}
