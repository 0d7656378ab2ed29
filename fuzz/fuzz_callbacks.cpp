// fuzz_callbacks: approval and deploy callback bodies and GitLab webhook payloads through the
// handlers' parsers (http/handlers/callback_body.hpp, gitlab_webhook_body.hpp). Input: 'A' +
// approval body, 'D' + Idempotency-Key header value + '\n' + deploy body (an empty header line
// means no header), or 'G' + X-Gitlab-Event-UUID header value + '\n' + webhook body.
// Invariants: never throws; accepted fields satisfy the documented limits; every string that the
// handler writes to the database is valid UTF-8 (utf8mb4 columns refuse anything else, and the
// sender would retry a 500 forever); accepted -> serialize -> parse gives the same value.

#include "fuzz/fuzz_support.hpp"
#include "http/handlers/callback_body.hpp"
#include "http/handlers/gitlab_webhook_body.hpp"

#include <cstddef>
#include <cstdint>

using namespace changeflow;
using nlohmann::json;

namespace {

const char* result_name(persistence::approval_result r) {
  switch (r) {
    case persistence::approval_result::APPROVED: return "APPROVED";
    case persistence::approval_result::REJECTED: return "REJECTED";
    case persistence::approval_result::WITHDRAWN: return "WITHDRAWN";
  }
  return "?";
}

void approval(const std::string& body) {
  auto parsed = http::parse_approval_callback_body(body);
  if (auto* e = std::get_if<http::callback_body_error>(&parsed)) {
    FUZZ_CHECK(!e->message.empty(), "a refusal names its reason");
    return;
  }
  const auto& a = std::get<http::approval_callback_body>(parsed);
  FUZZ_CHECK(!a.callback_id.empty() && a.callback_id.size() <= 128, "callbackId length");
  FUZZ_CHECK(ids::is_uuid(a.operation_id), "operationId is a UUID");
  FUZZ_CHECK(a.result == result_name(a.decision), "decision matches the text");
  FUZZ_CHECK(fuzz::valid_utf8(a.callback_id), "callbackId is valid UTF-8");
  json wire = {{"callbackId", a.callback_id}, {"operationId", a.operation_id}, {"result", a.result}};
  auto again = http::parse_approval_callback_body(fuzz::strict_dump(wire, "approval re-serializes"));
  FUZZ_CHECK(std::holds_alternative<http::approval_callback_body>(again), "re-serialized approval is accepted");
  const auto& b = std::get<http::approval_callback_body>(again);
  FUZZ_CHECK(b.callback_id == a.callback_id && b.operation_id == a.operation_id && b.decision == a.decision,
             "approval round trip is stable");
}

/// "<header value>\n<body>": an empty first line, or none, means no header.
struct header_and_body {
  std::optional<std::string> header;
  std::string body;
  std::optional<std::string_view> header_view() const {
    return header ? std::optional<std::string_view>(*header) : std::nullopt;
  }
};
header_and_body split_header(const std::string& rest) {
  header_and_body out{std::nullopt, rest};
  auto nl = rest.find('\n');
  if (nl != std::string::npos) {
    if (nl > 0) out.header = rest.substr(0, nl);
    out.body = rest.substr(nl + 1);
  }
  return out;
}

void deploy(const std::string& rest) {
  auto in = split_header(rest);
  auto parsed = http::parse_deploy_callback_body(in.body, in.header_view());
  if (auto* e = std::get_if<http::callback_body_error>(&parsed)) {
    FUZZ_CHECK(!e->message.empty(), "a refusal names its reason");
    return;
  }
  const auto& d = std::get<http::deploy_callback_body>(parsed);
  const auto& cb = d.cb;
  FUZZ_CHECK(!cb.delivery_id.empty() && cb.delivery_id.size() <= 128, "deliveryId length");
  FUZZ_CHECK(cb.mr_iid > 0, "mrIid positive");
  FUZZ_CHECK(cb.project.size() <= 255, "project length");
  FUZZ_CHECK(!cb.status.empty() && cb.status.size() <= 32, "status length");
  for (const auto& id : d.operation_ids) FUZZ_CHECK(ids::is_uuid(id), "operationIds are UUIDs");
  // Stored in utf8mb4 columns by record_deploy_delivery.
  FUZZ_CHECK(fuzz::valid_utf8(cb.delivery_id), "deliveryId is valid UTF-8");
  FUZZ_CHECK(fuzz::valid_utf8(cb.project) && fuzz::valid_utf8(cb.status), "project/status are valid UTF-8");
  FUZZ_CHECK(fuzz::valid_utf8(d.payload), "payload is valid UTF-8");
  auto payload = json::parse(d.payload, nullptr, false);
  FUZZ_CHECK(payload.is_object(), "payload is a JSON object");
  if (cb.operation_ids_json) {
    auto list = json::parse(*cb.operation_ids_json, nullptr, false);
    FUZZ_CHECK(list.is_array() && list.size() == d.operation_ids.size(), "operation_ids_json matches the list");
  }
  json wire = {{"deliveryId", cb.delivery_id}, {"mrIid", cb.mr_iid}, {"project", cb.project}, {"status", cb.status}};
  if (cb.pipeline_id) wire["pipelineId"] = *cb.pipeline_id;
  if (cb.operation_ids_json) wire["operationIds"] = d.operation_ids;
  auto again = http::parse_deploy_callback_body(fuzz::strict_dump(wire, "deploy re-serializes"), std::nullopt);
  FUZZ_CHECK(std::holds_alternative<http::deploy_callback_body>(again), "re-serialized deploy is accepted");
  const auto& e = std::get<http::deploy_callback_body>(again).cb;
  FUZZ_CHECK(e.delivery_id == cb.delivery_id && e.mr_iid == cb.mr_iid && e.project == cb.project &&
                 e.status == cb.status && e.pipeline_id == cb.pipeline_id &&
                 e.operation_ids_json == cb.operation_ids_json,
             "deploy round trip is stable");
}

void gitlab_hook(const std::string& rest) {
  auto in = split_header(rest);
  auto h = http::parse_gitlab_hook_body(in.body, in.header_view(), std::nullopt);
  FUZZ_CHECK(h.project.size() <= 255 && fuzz::valid_utf8(h.project), "project length and UTF-8");
  if (!h.error.empty()) return;
  FUZZ_CHECK(!h.project.empty(), "an accepted hook names its project");
  FUZZ_CHECK(http::detail::printable_id(h.delivery_id), "delivery id is printable ASCII, 1-128");
  FUZZ_CHECK(fuzz::valid_utf8(h.payload) && json::parse(h.payload, nullptr, false).is_object(), "payload");
  FUZZ_CHECK(fuzz::valid_utf8(h.status) && fuzz::valid_utf8(h.action), "status/action are valid UTF-8");
  if (h.kind == http::gitlab_hook::pipeline || h.kind == http::gitlab_hook::deployment) {
    FUZZ_CHECK(http::detail::is_hex(h.sha) && h.sha.size() <= 64, "sha is hex");
    FUZZ_CHECK(!h.status.empty() && h.status.size() <= 32, "status length");
  }
  if (h.kind == http::gitlab_hook::merge_request) FUZZ_CHECK(h.mr_iid && *h.mr_iid > 0, "MR iid positive");
  if (h.mr_iid) FUZZ_CHECK(*h.mr_iid > 0, "iid positive");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'D') {
    deploy(rest);
  } else if (data[0] == 'G') {
    gitlab_hook(rest);
  } else {
    approval(rest);
  }
  return 0;
}
