// fuzz_ops_actions: ops action and bulk bodies through the handlers' parsers
// (http/handlers/ops_body.hpp). Input: one mode byte, then the body:
//   'a' action (retrigger/close/resend-approval)   'f' fail (reason required)
//   'b' bulk retrigger                               'B' bulk fail
// The batch routes (http/handlers/batch.cpp) take no body; their path ids go through the router in
// fuzz_http_request.
// Invariants: never throws; the stored reason is at most 200 bytes of valid UTF-8 (the audit row,
// the event cause and last_error are utf8mb4 columns); accepted -> serialize -> parse is stable.

#include "fuzz/fuzz_support.hpp"
#include "http/handlers/ops_body.hpp"

#include <cstddef>
#include <cstdint>

using namespace changeflow;
using nlohmann::json;

namespace {

json filter_to_json(const persistence::ops_operation_filter& f) {
  json j = json::object();
  if (f.phase) j["phase"] = std::string(workflow::to_string(*f.phase));
  if (f.step) j["step"] = std::string(workflow::to_string(*f.step));
  for (auto [k, v] : {std::pair{"flow", &f.flow},
                      {"owner", &f.owner},
                      {"subject", &f.subject},
                      {"target", &f.target},
                      {"after", &f.after}}) {
    if (!v->empty()) j[k] = *v;
  }
  if (f.older_than_s != 0) j["older_than_s"] = f.older_than_s;
  j["limit"] = f.limit;
  if (f.only_nonterminal) j["active"] = "true";
  return j;
}

bool same(const persistence::ops_operation_filter& a, const persistence::ops_operation_filter& b) {
  return a.phase == b.phase && a.step == b.step && a.flow == b.flow && a.owner == b.owner && a.subject == b.subject &&
         a.target == b.target && a.after == b.after && a.older_than_s == b.older_than_s && a.limit == b.limit &&
         a.only_nonterminal == b.only_nonterminal;
}

void check_reason(const std::string& reason) {
  FUZZ_CHECK(reason.size() <= http::max_ops_reason_bytes, "reason is capped");
  FUZZ_CHECK(fuzz::valid_utf8(reason), "stored reason is valid UTF-8");
}

void action(const std::string& body, bool reason_required) {
  auto parsed = http::parse_ops_action_body(body, reason_required);
  if (auto* e = std::get_if<std::string>(&parsed)) {
    FUZZ_CHECK(!e->empty(), "a refusal names its reason");
    return;
  }
  const auto& a = std::get<http::ops_action_body>(parsed);
  FUZZ_CHECK(a.body.is_object(), "params are an object");
  if (reason_required) FUZZ_CHECK(!a.reason.empty(), "fail needs a reason");
  check_reason(a.reason);
  (void)fuzz::strict_dump(a.body, "audit params re-serialize");
  json wire = json::object();
  if (!a.reason.empty()) wire["reason"] = a.reason;
  if (a.expected_version) wire["expectedVersion"] = *a.expected_version;
  auto again = http::parse_ops_action_body(fuzz::strict_dump(wire, "action re-serializes"), reason_required);
  FUZZ_CHECK(std::holds_alternative<http::ops_action_body>(again), "re-serialized action is accepted");
  const auto& b = std::get<http::ops_action_body>(again);
  FUZZ_CHECK(b.reason == a.reason && b.expected_version == a.expected_version, "action round trip is stable");
}

void bulk(const std::string& body, bool reason_required) {
  auto parsed = http::parse_ops_bulk_body(body, reason_required);
  if (auto* e = std::get_if<std::string>(&parsed)) {
    FUZZ_CHECK(!e->empty(), "a refusal names its reason");
    return;
  }
  const auto& a = std::get<http::ops_bulk_body>(parsed);
  FUZZ_CHECK(a.filter.limit >= 1 && a.filter.limit <= 500, "limit clamped");
  FUZZ_CHECK(a.filter.older_than_s >= 0, "older_than_s non-negative");
  if (reason_required && !a.dry_run) FUZZ_CHECK(!a.reason.empty(), "acting bulk fail needs a reason");
  check_reason(a.reason);
  json wire = {{"filter", filter_to_json(a.filter)}};
  if (!a.dry_run) wire["dryRun"] = false;
  if (!a.reason.empty()) wire["reason"] = a.reason;
  auto again = http::parse_ops_bulk_body(fuzz::strict_dump(wire, "bulk re-serializes"), reason_required);
  FUZZ_CHECK(std::holds_alternative<http::ops_bulk_body>(again), "re-serialized bulk is accepted");
  const auto& b = std::get<http::ops_bulk_body>(again);
  FUZZ_CHECK(same(a.filter, b.filter) && a.dry_run == b.dry_run && a.reason == b.reason, "bulk round trip is stable");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0]) {
    case 'f': action(body, true); break;
    case 'b': bulk(body, false); break;
    case 'B': bulk(body, true); break;
    default: action(body, false); break;
  }
  return 0;
}
