// The security corpus, over real HTTP against changeflowd +
// changeflow-sim + MariaDB. One table of hostile requests, generated partly from the route list the
// server publishes (GET /api/openapi.json) so a new route is attacked without editing this file:
// forged identities (JWT alg=none / bad signature / expired / wrong audience / forged operator /
// spoofed X-Forwarded-For), callbacks without or with the wrong secret, SQL metacharacters in every
// field, path traversal on the console, oversized bodies and headers. For every case: the expected
// 4xx, a JSON envelope without internal details, and NOTHING WRITTEN (the row count and content
// checksum of every table before and after). Then the raw-socket cases (slow headers, invalid UTF-8 bytes), free text
// stored verbatim, and replayed callbacks. tests/e2e/http_policy_test.cpp covers the policies'
// positive paths; this file is the hostile side.

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

using namespace changeflow;
using namespace changeflow::testing;
using json = nlohmann::json;

namespace {

// Secrets unique to this test, so "the response leaks a secret" is a plain substring search.
constexpr const char* jwt_secret = "sec-corpus-jwt-secret-7f3a";
constexpr const char* jwt_audience = "changeflow-sec";
constexpr const char* approval_secret = "sec-corpus-approval-secret-91c2";
constexpr const char* deploy_secret = "sec-corpus-deploy-secret-44d0";
constexpr const char* console_secret_text = "TOP-SECRET-OUTSIDE-CONSOLE-DIR";
constexpr int body_limit = 64 * 1024;
constexpr int header_limit = 8 * 1024;

using headers = std::vector<std::pair<std::string, std::string>>;

std::string mint(const std::string& sub, long exp_offset = 600, jwt_alg_t alg = JWT_ALG_HS256,
                 const std::string& key = jwt_secret, const std::string& aud = jwt_audience) {
  return mint_jwt(sub, key, exp_offset, alg, aud);
}

headers bearer(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

std::string percent_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// SQL metacharacters and other hostile text. Every value is valid UTF-8 without control characters
/// unless its name says otherwise (those must be refused wherever they appear).
struct hostile_value {
  const char* name;
  std::string text;
  bool storable;  // a legitimate free-text value (no control characters, fits the column)
};

const std::vector<hostile_value>& hostile_values() {
  static const std::vector<hostile_value> v = {
      {"or-1=1", "' OR 1=1 --", true},
      {"drop-table", "\"; DROP TABLE operation; --", true},
      {"backslashes", "\\\\ \\' \\\" \\0 \\n", true},
      {"like-wildcards", "%_% _ %", true},
      {"union-select", "x' UNION SELECT password FROM mysql.user --", true},
      {"comment-semicolon", "a'); DELETE FROM callback_ledger; /*", true},
      {"unicode", "\xE6\xA0\x87\xE9\xA2\x98 \xE2\x9C\x93 \xF0\x9F\x9A\x80 caf\xC3\xA9", true},
      {"html", "<script>alert(1)</script>", true},
      {"nul-byte", std::string("abc\0' OR 1=1", 12), false},
      {"newline", "line1\nline2'", false},
      {"very-long", std::string(5000, '\''), false},
  };
  return v;
}

struct sec_case {
  std::string name;
  std::string method;
  std::string target;
  headers h;
  std::string body;
  std::set<int> expected;
};

/// Fragments that must never reach a client: driver / SQL / exception text, paths, the secrets.
const std::vector<std::string>& forbidden_fragments() {
  static const std::vector<std::string> f = {"sql",       "SQL",           "mysql",       "MariaDB",
                                             "exception", "what()",        "Exception",   "terminate",
                                             "/work/",    "/tmp/",         ".cpp",        ".hpp",
                                             "std::",     "errno",         "Traceback",   "syntax to use",
                                             jwt_secret,  approval_secret, deploy_secret, console_secret_text};
  return f;
}

/// Valid UTF-8 (the JSON parser accepts only that, but check the raw bytes explicitly).
bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n + 1;
  }
  return true;
}

/// The checks every refused request must pass; returns a description of the first violation.
std::string envelope_violation(int status, const std::string& body, bool envelope_required = true) {
  if (status >= 500) return "5xx status " + std::to_string(status);
  if (!valid_utf8(body)) return "response is not valid UTF-8";
  for (const auto& f : forbidden_fragments()) {
    if (body.find(f) != std::string::npos) return "response leaks '" + f + "': " + body.substr(0, 300);
  }
  if (!envelope_required) return {};
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "response is not a JSON object: " + body.substr(0, 200);
  if (!j.contains("code") || !j["code"].is_string()) return "response has no 'code'";
  if (!j.contains("message") || !j["message"].is_string()) return "response has no 'message'";
  return {};
}

/// Row count and content checksum of one table.
struct table_state {
  long rows = -1;
  std::string checksum;
  bool operator==(const table_state&) const = default;
};

/// The state of every table of the test schema (listed from information_schema, so a table added
/// by a later migration is included automatically). The checksum (CHECKSUM TABLE ... EXTENDED reads
/// every row) catches an UPDATE that a row count cannot see. `instance` is the exception: its
/// heartbeat rewrites the lease columns every second whatever the requests do, so only its row
/// count is compared.
std::map<std::string, table_state> table_states(flow_env& env) {
  std::map<std::string, table_state> out;
  test_connection conn(env.db());
  auto tables = conn.query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND "
      "table_type = 'BASE TABLE'");
  for (const auto& row : tables) {
    const auto& t = row[0];
    auto& state = out[t];
    auto count = conn.scalar("SELECT COUNT(*) FROM `" + t + "`");
    state.rows = count.empty() ? -1 : std::stol(count);
    if (t == "instance") continue;
    auto checksum = conn.query("CHECKSUM TABLE `" + t + "` EXTENDED");
    state.checksum = checksum.empty() ? "NULL" : checksum[0][1];
  }
  return out;
}

std::string describe_diff(const std::map<std::string, table_state>& before,
                          const std::map<std::string, table_state>& after) {
  std::string d;
  for (const auto& [t, now] : after) {
    auto it = before.find(t);
    table_state was = it == before.end() ? table_state{} : it->second;
    if (was.rows != now.rows)
      d += t + ": " + std::to_string(was.rows) + " -> " + std::to_string(now.rows) + " rows; ";
    else if (was.checksum != now.checksum)
      d += t + ": content changed (same row count); ";
  }
  if (before.size() != after.size()) d += "table set changed; ";
  return d;
}

json service_config(const std::string& console_dir) {
  return {{"auth", {{"jwt_secret", jwt_secret}, {"jwt_audience", jwt_audience}}},
          {"callbacks", {{"approval_secret", approval_secret}, {"deploy_secret", deploy_secret}}},
          {"http", {{"body_limit_bytes", body_limit}, {"header_limit_bytes", header_limit}, {"read_timeout_ms", 1000}}},
          {"rate_limit", {{"submit", 100000}, {"ops", 100000}, {"callbacks", 100000}}},
          {"console", {{"dir", console_dir}}},
          {"timeouts", {{"approval_wait_seconds", 600}}}};
}

/// A console directory with an index, plus a secret file NEXT TO it that traversal must not reach.
std::string make_console_dir() {
  auto base = make_temp_dir("cf-sec-console");
  std::filesystem::create_directories(base + "/console/assets");
  std::ofstream(base + "/console/index.html") << "<!doctype html><title>console</title>";
  std::ofstream(base + "/secret.txt") << console_secret_text;
  return base + "/console";
}

json submit_body(const std::string& title, const std::string& subject, const std::string& target,
                 const std::string& path = "config/app.yaml") {
  return {{"subject", subject},
          {"target", target},
          {"title", title},
          {"files", {{{"path", path}, {"content", "value: 1\n"}}}}};
}

const std::string unknown_uuid = "00000000-0000-4000-8000-00000000beef";

/// Fills a route template's parameters.
std::string fill(std::string pattern, const std::string& id) {
  for (;;) {
    auto open = pattern.find('{');
    if (open == std::string::npos) return pattern;
    auto close = pattern.find('}', open);
    auto name = pattern.substr(open + 1, close - open - 1);
    pattern.replace(open, close - open + 1, name == "action" ? "fail" : id);
  }
}

/// The corpus. `routes` = (method, template) pairs read from the server's OpenAPI document.
std::vector<sec_case> build_corpus(const std::vector<std::pair<std::string, std::string>>& routes) {
  std::vector<sec_case> c;
  const std::string ops_user = "sec-operator";
  // -- identity forgeries against every route that demands an identity (the ops API), and a forged
  //    operator / spoofed forwarding headers on every route: never an identity, never a 5xx.
  const std::vector<std::pair<std::string, headers>> bad_identities = {
      {"no credentials", {}},
      {"basic auth", {{"Authorization", "Basic c2VjLW9wZXJhdG9yOng="}}},
      {"alg none", bearer(mint(ops_user, 600, JWT_ALG_NONE))},
      {"bad signature", bearer(mint(ops_user, 600, JWT_ALG_HS256, "not-the-secret"))},
      {"expired", bearer(mint(ops_user, -120))},
      {"wrong audience", bearer(mint(ops_user, 600, JWT_ALG_HS256, jwt_secret, "some-other-service"))},
      {"no audience", bearer(mint(ops_user, 600, JWT_ALG_HS256, jwt_secret, ""))},
      {"HS512", bearer(mint(ops_user, 600, JWT_ALG_HS512))},
      {"truncated token", bearer(mint(ops_user).substr(0, 40))},
      {"garbage token", bearer("' OR 1=1 --")},
      {"forged operator header + spoofed XFF + gateway header",
       {{"X-Changeflow-Authenticated-Operator", ops_user},
        {"X-Forwarded-For", "127.0.0.1"},
        {"X-Real-IP", "127.0.0.1"},
        {"X-Authenticated-User", ops_user}}},
  };
  for (const auto& [method, pattern] : routes) {
    bool ops = pattern.rfind("/api/v1/ops/", 0) == 0;
    bool callback = pattern.rfind("/api/v1/callbacks/", 0) == 0;
    std::string target = fill(pattern, unknown_uuid);
    std::string body = method == "POST" ? "{}" : "";
    if (ops) {
      for (const auto& [what, h] : bad_identities) {
        c.push_back({method + " " + pattern + " / " + what,
                     method,
                     target + "?__authenticatedOperator=" + ops_user,
                     h,
                     body,
                     {401}});
      }
    } else if (callback) {
      c.push_back({method + " " + pattern + " / forged operator, no secret",
                   method,
                   target,
                   {{"X-Changeflow-Authenticated-Operator", ops_user}, {"X-Forwarded-For", "10.0.0.1"}},
                   "{}",
                   {401}});
    } else if (method != "GET") {
      // A writing route outside the ops API and the callbacks (today: submit). A hostile, unparsable
      // body with forged identity headers is refused before anything runs.
      c.push_back({method + " " + pattern + " / forged operator, unparsable body",
                   method,
                   target,
                   {{"X-Changeflow-Authenticated-Operator", ops_user}, {"X-Forwarded-For", "1.2.3.4, 10.0.0.9"}},
                   "{\"subject\": ' OR 1=1 --",
                   {400}});
    }
    // Every route: a method it does not serve is 405 (or 404 for a template that only exists for
    // another method); a hostile verb never reaches a handler.
    c.push_back({"DELETE " + pattern, "DELETE", target, {}, {}, {404, 405}});
  }

  // -- callbacks: missing / wrong secrets (nothing recorded).
  std::string approval = json{
      {"callbackId", "cb-sec-1"},
      {"approvalId", "apr-x"},
      {"operationId", unknown_uuid},
      {"result", "APPROVED"},
      {"approver",
       "mallory"}}.dump();
  auto sign = [](const std::string& secret, const std::string& body) {
    return "sha256=" + ids::hmac_sha256_hex(secret, body);
  };
  c.push_back({"approval: no signature", "POST", "/api/v1/callbacks/approval", {}, approval, {401}});
  c.push_back({"approval: wrong secret",
               "POST",
               "/api/v1/callbacks/approval",
               {{"X-Signature", sign("wrong-secret", approval)}},
               approval,
               {401}});
  c.push_back({"approval: signature of another body",
               "POST",
               "/api/v1/callbacks/approval",
               {{"X-Signature", sign(approval_secret, approval + " ")}},
               approval,
               {401}});
  c.push_back({"approval: bare hex without prefix",
               "POST",
               "/api/v1/callbacks/approval",
               {{"X-Signature", ids::hmac_sha256_hex(approval_secret, approval)}},
               approval,
               {401}});
  c.push_back({"approval: empty signature",
               "POST",
               "/api/v1/callbacks/approval",
               {{"X-Signature", "sha256="}},
               approval,
               {401}});
  c.push_back({"approval: secret sent in clear",
               "POST",
               "/api/v1/callbacks/approval",
               {{"X-Signature", std::string("sha256=") + approval_secret}, {"X-Callback-Token", "wrong"}},
               approval,
               {401}});
  c.push_back({"approval: SQL in signature",
               "POST",
               "/api/v1/callbacks/approval",
               {{"X-Signature", "sha256=' OR 1=1 --"}},
               approval,
               {401}});
  std::string deploy =
      json{{"deliveryId", "dl-sec-1"}, {"project", "config/changes"}, {"mrIid", 1}, {"status", "success"}}.dump();
  c.push_back({"deploy: no token", "POST", "/api/v1/callbacks/deploy", {}, deploy, {401}});
  c.push_back({"deploy: wrong token", "POST", "/api/v1/callbacks/deploy", {{"X-Gitlab-Token", "nope"}}, deploy, {401}});
  c.push_back({"deploy: token prefix",
               "POST",
               "/api/v1/callbacks/deploy",
               {{"X-Gitlab-Token", std::string(deploy_secret).substr(0, 10)}},
               deploy,
               {401}});
  c.push_back(
      {"deploy: SQL token", "POST", "/api/v1/callbacks/deploy", {{"X-Gitlab-Token", "' OR 1=1 --"}}, deploy, {401}});
  // Authenticated but malformed: 400, nothing recorded.
  for (const auto& v : hostile_values()) {
    std::string bad_op =
        json{{"callbackId", v.text.substr(0, 100)}, {"operationId", v.text}, {"result", "APPROVED"}}.dump(
            -1, ' ', false, json::error_handler_t::replace);
    c.push_back({std::string("approval: signed, operationId ") + v.name,
                 "POST",
                 "/api/v1/callbacks/approval",
                 {{"X-Signature", sign(approval_secret, bad_op)}},
                 bad_op,
                 {400}});
    std::string bad_result = json{{"callbackId", "cb-ok"}, {"operationId", unknown_uuid}, {"result", v.text}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
    c.push_back({std::string("approval: signed, result ") + v.name,
                 "POST",
                 "/api/v1/callbacks/approval",
                 {{"X-Signature", sign(approval_secret, bad_result)}},
                 bad_result,
                 {400}});
    std::string bad_mr = json{{"deliveryId", v.text.substr(0, 100)}, {"mrIid", v.text}, {"status", "success"}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
    c.push_back({std::string("deploy: authenticated, mrIid ") + v.name,
                 "POST",
                 "/api/v1/callbacks/deploy",
                 {{"X-Gitlab-Token", deploy_secret}},
                 bad_mr,
                 {400}});
    std::string bad_ids =
        json{{"deliveryId", "dl-x"}, {"mrIid", 3}, {"status", "success"}, {"operationIds", {v.text}}}.dump(
            -1, ' ', false, json::error_handler_t::replace);
    c.push_back({std::string("deploy: authenticated, operationIds ") + v.name,
                 "POST",
                 "/api/v1/callbacks/deploy",
                 {{"X-Gitlab-Token", deploy_secret}},
                 bad_ids,
                 {400}});
  }

  // -- submit: hostile values in the fields that are NOT free text, and non-storable values in the
  //    free-text ones. (Storable free text is accepted and round-trips: see FreeTextIsStoredVerbatim.)
  for (const auto& v : hostile_values()) {
    auto base = submit_body("t", "sec-subject", "sec-target");
    auto with = [&](const std::string& field) {
      auto b = base;
      b[field] = v.text;
      return b.dump(-1, ' ', false, json::error_handler_t::replace);
    };
    c.push_back(
        {std::string("submit: operationId ") + v.name, "POST", "/api/v1/changes", {}, with("operationId"), {400}});
    auto path_body = submit_body("t", "sec-subject", "sec-target", "../" + v.text);
    c.push_back({std::string("submit: traversal file path ") + v.name,
                 "POST",
                 "/api/v1/changes",
                 {},
                 path_body.dump(-1, ' ', false, json::error_handler_t::replace),
                 {400}});
    auto action_body = base;
    action_body["files"][0]["action"] = v.text;
    c.push_back({std::string("submit: file action ") + v.name,
                 "POST",
                 "/api/v1/changes",
                 {},
                 action_body.dump(-1, ' ', false, json::error_handler_t::replace),
                 {400}});
    if (!v.storable) {
      for (const char* field : {"subject", "target", "title"}) {
        c.push_back(
            {std::string("submit: ") + field + " " + v.name, "POST", "/api/v1/changes", {}, with(field), {400}});
      }
    }
    c.push_back({std::string("submit: Idempotency-Key ") + v.name,
                 "POST",
                 "/api/v1/changes",
                 {{"Idempotency-Key", v.text.find('\0') != std::string::npos || v.text.find('\n') != std::string::npos
                                          ? std::string(300, 'k')
                                          : v.text}},
                 // An invalid body too: if the key were accepted the body is still refused.
                 "{\"subject\": 1}",
                 {400}});
    // Query parameters and path ids. A value too long for the request line is refused with 431.
    auto enc = percent_encode(v.text);
    auto url = [&](std::set<int> s) {
      if (enc.size() > static_cast<std::size_t>(header_limit) / 2) s.insert(431);
      return s;
    };
    c.push_back({std::string("list: limit ") + v.name,
                 "GET",
                 "/api/v1/changes?subject=sec-subject&limit=" + enc,
                 {},
                 {},
                 url({400})});
    c.push_back({std::string("get: id ") + v.name, "GET", "/api/v1/changes/" + enc, {}, {}, url({404})});
    c.push_back({std::string("ops get: id ") + v.name,
                 "GET",
                 "/api/v1/ops/operations/" + enc,
                 bearer(mint(ops_user)),
                 {},
                 url({400, 404})});
    c.push_back({std::string("ops fail: id ") + v.name, "POST", "/api/v1/ops/operations/" + enc + "/fail",
                 bearer(mint(ops_user)), "{\"reason\":\"sec\"}", url({400, 404})});
    c.push_back({std::string("ops bulk: action ") + v.name, "POST", "/api/v1/ops/bulk/" + enc, bearer(mint(ops_user)),
                 "{\"operationIds\":[]}", url({400, 404})});
    c.push_back({std::string("ops batch: id ") + v.name,
                 "GET",
                 "/api/v1/ops/batches/" + enc,
                 bearer(mint(ops_user)),
                 {},
                 url({400, 404})});
    c.push_back({std::string("bearer: token ") + v.name,
                 "GET",
                 "/api/v1/ops/whoami",
                 {{"Authorization",
                   "Bearer " + (v.text.find('\0') != std::string::npos || v.text.find('\n') != std::string::npos
                                    ? std::string("x")
                                    : v.text)}},
                 {},
                 {401}});
  }
  c.push_back({"list: limit overflow", "GET", "/api/v1/changes?subject=a&limit=99999999999999999999", {}, {}, {400}});
  // Without a subject the list is the caller's own changes (anonymous here: auth.required is off).
  c.push_back({"list: no subject", "GET", "/api/v1/changes?limit=5", {}, {}, {200}});
  c.push_back({"list: empty subject", "GET", "/api/v1/changes?subject=", {}, {}, {400}});

  // -- bodies: not JSON, wrong shapes, oversized.
  c.push_back({"submit: empty body", "POST", "/api/v1/changes", {}, {}, {400}});
  c.push_back({"submit: JSON array", "POST", "/api/v1/changes", {}, "[1,2,3]", {400}});
  c.push_back(
      {"submit: deeply nested", "POST", "/api/v1/changes", {}, std::string(5000, '[') + std::string(5000, ']'), {400}});
  c.push_back({"submit: lone surrogate escape",
               "POST",
               "/api/v1/changes",
               {},
               "{\"subject\":\"\\udc00\",\"target\":\"t\",\"title\":\"t\",\"files\":[]}",
               {400}});
  c.push_back({"submit: files not an array",
               "POST",
               "/api/v1/changes",
               {},
               json{{"subject", "s"}, {"target", "t"}, {"title", "t"}, {"files", "' OR 1=1"}}.dump(),
               {400}});
  c.push_back({"submit: too many files",
               "POST",
               "/api/v1/changes",
               {},
               [] {
                 auto b = submit_body("t", "s", "t");
                 for (int i = 0; i < 101; ++i)
                   b["files"].push_back({{"path", "f" + std::to_string(i)}, {"content", ""}});
                 return b.dump();
               }(),
               {400}});
  c.push_back({"submit: oversized body",
               "POST",
               "/api/v1/changes",
               {},
               submit_body(std::string(body_limit + 10, 'x'), "s", "t").dump(),
               {413}});
  c.push_back(
      {"callback: oversized body", "POST", "/api/v1/callbacks/approval", {}, std::string(body_limit * 2, ' '), {413}});
  c.push_back(
      {"oversized header", "GET", "/healthz", {{"X-Padding", std::string(header_limit + 100, 'h')}}, {}, {431}});

  // -- static files: traversal in every spelling.
  for (const char* t :
       {"/console/../secret.txt", "/console/%2e%2e/secret.txt", "/console/..%2fsecret.txt",
        "/console/assets/%2e%2e/%2e%2e/secret.txt", "/console/..%5csecret.txt", "/console/assets/..\\..\\secret.txt",
        "/console/%00index.html", "/console/assets/../../secret.txt", "/console/./../secret.txt",
        "/console/%252e%252e/secret.txt", "/console/%c0%ae%c0%ae/secret.txt"}) {
    c.push_back({std::string("console traversal ") + t, "GET", t, {}, {}, {400, 404}});
  }
  return c;
}

http_result call(flow_env& env, const sec_case& k) {
  auto h = k.h;
  // Bodies are sent as JSON unless the case chose otherwise.
  return http_call("127.0.0.1", env.port(), k.method, k.target, k.body, h, std::chrono::seconds(20));
}

/// (method, template) of every operation the server documents.
std::vector<std::pair<std::string, std::string>> published_routes(flow_env& env) {
  std::vector<std::pair<std::string, std::string>> out;
  auto r = http_call("127.0.0.1", env.port(), "GET", "/api/openapi.json");
  auto doc = json::parse(r.body, nullptr, false);
  if (doc.is_discarded() || !doc.contains("paths")) return out;
  for (auto& [path, ops] : doc["paths"].items()) {
    for (auto& [method, _] : ops.items()) {
      std::string m = method;
      std::transform(m.begin(), m.end(), m.begin(), ::toupper);
      if (m == "GET" || m == "POST" || m == "PUT" || m == "DELETE" || m == "PATCH") out.emplace_back(m, path);
    }
  }
  return out;
}

/// One request on a raw socket; the peer's answer and whether the PEER closed before `deadline`.
struct raw_outcome {
  std::string received;
  bool closed_by_server = false;
};

raw_outcome raw_request(unsigned short port, const std::string& bytes, std::chrono::milliseconds deadline) {
  namespace net = boost::asio;
  namespace beast = boost::beast;
  raw_outcome out;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(deadline);
  std::array<char, 4096> chunk{};
  std::function<void()> read_more = [&] {
    stream.async_read_some(net::buffer(chunk), [&](beast::error_code ec, std::size_t n) {
      out.received.append(chunk.data(), n);
      if (!ec) return read_more();
      out.closed_by_server = ec == net::error::eof || ec == net::error::connection_reset;
    });
  };
  stream.async_connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port), [&](beast::error_code ec) {
    if (ec) return;
    // Read while writing: a server that refuses early (413/431) answers before the write ends.
    read_more();
    net::async_write(stream, net::buffer(bytes), [](beast::error_code, std::size_t) {});
  });
  ioc.run();
  return out;
}

int raw_status(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.substr(9, 3).c_str());
}

std::string raw_body(const std::string& response) {
  auto p = response.find("\r\n\r\n");
  return p == std::string::npos ? std::string() : response.substr(p + 4);
}

class Security : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    console_dir_ = new std::string(make_console_dir());
    // The sim never decides approvals by itself here: the test posts the decisions.
    env_ = new flow_env(service_config(*console_dir_), {"--callback-delay-ms", "600000", "--approval-secret",
                                                        approval_secret, "--deploy-secret", deploy_secret});
  }
  static void TearDownTestSuite() {
    delete env_;
    env_ = nullptr;
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(*console_dir_).parent_path(), ec);
    delete console_dir_;
  }
  static flow_env& env() { return *env_; }
  static flow_env* env_;
  static std::string* console_dir_;
};
flow_env* Security::env_ = nullptr;
std::string* Security::console_dir_ = nullptr;

std::string signed_approval_header(const std::string& body) {
  return "sha256=" + ids::hmac_sha256_hex(approval_secret, body);
}

}  // namespace

// The table: every hostile request gets its 4xx, a clean JSON envelope, and writes nothing.
TEST_F(Security, CorpusIsRefusedCleanlyAndWritesNothing) {
  auto routes = published_routes(env());
  ASSERT_GE(routes.size(), 10u) << "the OpenAPI document lists the routes";
  auto corpus = build_corpus(routes);
  // Positive control: a correct identity IS accepted, so the 401s below are about the forgeries.
  auto control = http_call("127.0.0.1", env().port(), "GET", "/api/v1/ops/whoami", {}, bearer(mint("sec-operator")));
  ASSERT_EQ(control.status, 200) << control.body;
  auto before = table_states(env());
  ASSERT_GE(before.count("operation"), 1u);
  ASSERT_GE(before.count("callback_ledger"), 1u);
  int checked = 0;
  for (const auto& k : corpus) {
    auto r = call(env(), k);
    ASSERT_NE(r.status, 0) << k.name << ": transport error " << r.error;
    EXPECT_TRUE(k.expected.count(r.status)) << k.name << ": got " << r.status << " " << r.body.substr(0, 300);
    auto v = envelope_violation(r.status, r.body);
    EXPECT_TRUE(v.empty()) << k.name << ": " << v;
    ++checked;
  }
  auto after = table_states(env());
  EXPECT_EQ(describe_diff(before, after), "") << "the corpus wrote rows";
  // The server is still healthy after all of it.
  EXPECT_EQ(http_call("127.0.0.1", env().port(), "GET", "/healthz").status, 200);
  std::cout << "[security corpus] " << checked << " cases over " << routes.size() << " published routes\n";
}

// Requests that need bytes no well-behaved client library would send.
TEST_F(Security, RawSocketCases) {
  auto port = env().port();
  auto before = table_states(env());
  // Invalid UTF-8 bytes inside a JSON string of the body: 400, and the answer is valid JSON + UTF-8.
  for (const char* field_name : {"subject", "title", "target"}) {
    std::string field = field_name;
    json b = submit_body("t", "s", "raw-target");
    std::string body = b.dump();
    auto pos = body.find("\"" + field + "\":\"") + field.size() + 4;
    body.insert(pos, "\xff\xfe\xc3(");
    auto res = raw_request(port,
                           "POST /api/v1/changes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Connection: close\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body,
                           std::chrono::seconds(10));
    EXPECT_EQ(raw_status(res.received), 400) << field << ": " << res.received;
    auto v = envelope_violation(raw_status(res.received), raw_body(res.received));
    EXPECT_TRUE(v.empty()) << field << ": " << v;
    EXPECT_FALSE(json::parse(raw_body(res.received), nullptr, false).is_discarded());
  }
  // Invalid UTF-8 bytes in the path, raw and percent-encoded, and in a query parameter that goes to
  // the database.
  for (const std::string& target :
       {std::string("/api/v1/changes/\xff\xfe"), std::string("/api/v1/changes/%FF%FE%C3%28"),
        std::string("/console/\xff\xfe.js"), std::string("/api/v1/changes?subject=%FF%FE"),
        std::string("/api/v1/changes?subject=\xff\xfe"), std::string("/api/v1/changes?subject=%00%27%20OR%201%3D1"),
        std::string("/api/v1/ops/operations/%FF%FE"), std::string("/api/v1/ops/bulk/%FF%FE")}) {
    auto res = raw_request(port,
                           "GET " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + mint("sec-operator") +
                               "\r\nConnection: close\r\n\r\n",
                           std::chrono::seconds(10));
    int status = raw_status(res.received);
    EXPECT_TRUE(status == 400 || status == 404 || status == 405 || status == 200)
        << target << ": " << res.received.substr(0, 300);
    auto v = envelope_violation(status, raw_body(res.received));
    EXPECT_TRUE(v.empty()) << target << ": " << v;
    auto j = json::parse(raw_body(res.received), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << target << ": the answer must be valid JSON";
    if (status == 200) {
      EXPECT_TRUE(j["data"]["items"].empty()) << target << ": a hostile subject matches nothing";
    }
  }
  // A hostile method token and a malformed request line: 400 or a closed connection, never a 5xx.
  for (const std::string& bytes :
       {std::string("G\xffT / HTTP/1.1\r\nHost: x\r\n\r\n"), std::string("GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"),
        std::string("POST /api/v1/changes HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
        std::string("POST /api/v1/changes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n")}) {
    auto res = raw_request(port, bytes, std::chrono::seconds(10));
    int status = raw_status(res.received);
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << res.received.substr(0, 200);
  }
  // Header flood: many small headers, together beyond http.header_limit_bytes -> 431.
  {
    std::string bytes = "GET /api/v1/changes/" + unknown_uuid + " HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 400; ++i) bytes += "X-H" + std::to_string(i) + ": " + std::string(30, 'v') + "\r\n";
    auto res = raw_request(port, bytes + "\r\n", std::chrono::seconds(10));
    EXPECT_EQ(raw_status(res.received), 431) << res.received.substr(0, 200);
    EXPECT_TRUE(envelope_violation(raw_status(res.received), raw_body(res.received)).empty());
  }
  // Slow headers: a client that never finishes its header block is disconnected by the server
  // (http.read_timeout_ms = 1 s, far inside the 15 s bound used here), and meanwhile the API answers.
  std::thread slow([&] {
    auto res = raw_request(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a", std::chrono::seconds(15));
    EXPECT_TRUE(res.closed_by_server) << "the server must drop a client that never completes its headers";
    int status = raw_status(res.received);
    EXPECT_TRUE(status == 0 || status == 408) << res.received;
  });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(http_call("127.0.0.1", port, "GET", "/healthz", {}, {}, std::chrono::seconds(5)).status, 200);
  }
  slow.join();
  EXPECT_EQ(describe_diff(before, table_states(env())), "");
}

// Free text (title, subject, target) with SQL metacharacters, wildcards and unicode is accepted and
// stored VERBATIM: it round-trips exactly through GET, a wildcard subject matches only itself, and
// every table still exists.
TEST_F(Security, FreeTextIsStoredVerbatim) {
  auto tables_before = table_states(env());
  int n = 0;
  for (const auto& v : hostile_values()) {
    if (!v.storable) continue;
    std::string target = "sec-rt-" + std::to_string(++n) + v.text;
    std::string subject = v.text + "-" + std::to_string(n);
    auto body = submit_body(v.text, subject, target);
    auto r = http_call("127.0.0.1", env().port(), "POST", "/api/v1/changes", body.dump());
    ASSERT_EQ(r.status, 202) << v.name << ": " << r.body;
    EXPECT_TRUE(envelope_violation(r.status, r.body).empty()) << v.name;
    auto id = json::parse(r.body)["data"]["operationId"].get<std::string>();
    auto got = env().get_change(id);
    EXPECT_EQ(got["title"], v.text) << v.name;
    EXPECT_EQ(got["subject"], subject) << v.name;
    EXPECT_EQ(got["target"], target) << v.name;
    auto list = http_call("127.0.0.1", env().port(), "GET", "/api/v1/changes?subject=" + percent_encode(subject));
    ASSERT_EQ(list.status, 200) << v.name << ": " << list.body;
    auto items = json::parse(list.body)["data"]["items"];
    ASSERT_EQ(items.size(), 1u) << v.name << ": the subject matches itself only";
    EXPECT_EQ(items[0]["title"], v.text);
  }
  // LIKE wildcards as a subject are literal: '%' finds nothing although every subject matches it.
  auto wild = http_call("127.0.0.1", env().port(), "GET", "/api/v1/changes?subject=%25");
  ASSERT_EQ(wild.status, 200);
  EXPECT_TRUE(json::parse(wild.body)["data"]["items"].empty());
  auto tables_after = table_states(env());
  EXPECT_EQ(tables_after.size(), tables_before.size()) << "no table was dropped or created";
  EXPECT_EQ(tables_after["operation"].rows, tables_before["operation"].rows + n) << "exactly the accepted submissions";
}

// Replayed callbacks: a valid signed approval applied twice -> the second is DUPLICATE and writes
// nothing; the same signature replayed for another operation fails the signature check.
TEST_F(Security, ReplayedCallbacksWriteNothingNew) {
  auto r = env().submit("replay", "sec-replay", "sec-replay-target");
  ASSERT_EQ(r.status, 202) << r.body;
  auto id = json::parse(r.body)["data"]["operationId"].get<std::string>();
  auto other = env().submit("replay other", "sec-replay-2", "sec-replay-target-2");
  ASSERT_EQ(other.status, 202) << other.body;
  auto other_id = json::parse(other.body)["data"]["operationId"].get<std::string>();
  env().wait_for_step(id, "APPROVAL_SENT");
  ASSERT_EQ(env().wait_for_step(other_id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");

  std::string body = json{
      {"callbackId", "cb-replay-1"},
      {"approvalId", "apr-1"},
      {"operationId", id},
      {"result", "APPROVED"},
      {"approver",
       "approver"}}.dump();
  auto post = [&](const std::string& b, const std::string& sig) {
    return http_call("127.0.0.1", env().port(), "POST", "/api/v1/callbacks/approval", b, {{"X-Signature", sig}});
  };
  auto first = post(body, signed_approval_header(body));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body)["data"]["outcome"], "APPLIED");
  // Let the operation run to its end (MR, merge, deploy callback from the sim) so nothing else writes.
  auto done = env().wait_for_phase(id, "VALIDATED", std::chrono::seconds(60));
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump();

  auto before = table_states(env());
  auto replay = post(body, signed_approval_header(body));
  ASSERT_EQ(replay.status, 200) << replay.body;
  EXPECT_EQ(json::parse(replay.body)["data"]["outcome"], "DUPLICATE");
  EXPECT_EQ(describe_diff(before, table_states(env())), "") << "a replay writes nothing";

  // The captured signature does not transfer to another operation.
  std::string swapped = body;
  swapped.replace(swapped.find(id), id.size(), other_id);
  auto moved = post(swapped, signed_approval_header(body));
  EXPECT_EQ(moved.status, 401) << moved.body;
  EXPECT_TRUE(envelope_violation(moved.status, moved.body).empty());
  // Nor does a fresh callbackId under the old signature.
  std::string renamed = body;
  renamed.replace(renamed.find("cb-replay-1"), 11, "cb-replay-2");
  EXPECT_EQ(post(renamed, signed_approval_header(body)).status, 401);
  EXPECT_EQ(describe_diff(before, table_states(env())), "");
  EXPECT_EQ(env().get_change(other_id)["step"]["name"], "APPROVAL_SENT") << "the other operation did not move";

  // Deploy callback replayed: same deliveryId -> DUPLICATE, nothing written.
  std::string deploy =
      json{{"deliveryId", "dl-replay-1"}, {"project", "config/changes"}, {"mrIid", 999999}, {"status", "success"}}
          .dump();
  auto d1 = http_call("127.0.0.1", env().port(), "POST", "/api/v1/callbacks/deploy", deploy,
                      {{"X-Gitlab-Token", deploy_secret}});
  ASSERT_EQ(d1.status, 200) << d1.body;
  auto before_deploy = table_states(env());
  auto d2 = http_call("127.0.0.1", env().port(), "POST", "/api/v1/callbacks/deploy", deploy,
                      {{"X-Gitlab-Token", deploy_secret}});
  ASSERT_EQ(d2.status, 200) << d2.body;
  EXPECT_EQ(json::parse(d2.body)["data"]["outcome"], "DUPLICATE");
  EXPECT_EQ(describe_diff(before_deploy, table_states(env())), "");
}
