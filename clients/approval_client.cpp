#include "clients/approval_client.hpp"

#include "clients/http_client.hpp"

namespace changeflow::clients {

using json = nlohmann::json;

json to_json(const approval_submission& s) {
  json ext = json::object();
  if (s.mr_id) ext["mrId"] = std::to_string(*s.mr_id);
  return {{"requestId", s.request_id},     {"title", s.title}, {"applicant", s.applicant},
          {"callbackUrl", s.callback_url}, {"form", s.form},   {"ext", ext}};
}

approval_client::approval_client(http_client& http, circuit_breaker& breaker, const call_settings& settings,
                                 url_parts base)
    : http_(http), breaker_(breaker), settings_(settings), base_(std::move(base)) {}

result<submitted_approval> approval_client::submit(const approval_submission& s) {
  http_request req;
  req.method = "POST";
  req.target = "/api/approvals";
  req.body = to_json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  auto r = guarded_call(http_, breaker_, settings_, base_, std::move(req));
  if (!r) return r.error();
  if (r->status != 200 && r->status != 201) return status_error(r.value());
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("approvalId") || !j["approvalId"].is_string() ||
      j["approvalId"].get<std::string>().empty()) {
    call_error e;
    e.what = call_error::kind::protocol;
    e.status = r->status;
    e.message = "approval submit answered without approvalId";
    return e;
  }
  return submitted_approval{j["approvalId"].get<std::string>(), r->status == 201};
}

result<done> approval_client::withdraw(const std::string& approval_id) {
  http_request req;
  req.method = "POST";
  req.target = "/api/approvals/" + url_encode(approval_id) + "/withdraw";
  auto r = guarded_call(http_, breaker_, settings_, base_, std::move(req));
  if (!r) return r.error();
  if (r->status != 200) return status_error(r.value());
  return done{};
}

}  // namespace changeflow::clients
