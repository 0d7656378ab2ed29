#include "http/identity/resolver.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <chrono>
#include <cstdlib>
#include <memory>

using namespace changeflow;
using namespace changeflow::http::identity;
using nlohmann::json;
using std::chrono::seconds;

namespace {

const std::string secret = "test-secret-0123456789";
const auto now = std::chrono::system_clock::time_point(seconds(1'700'000'000));
const long now_s = 1'700'000'000;

std::shared_ptr<const config::snapshot> snap_of(json doc) {
  auto r = config::load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); });
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors.front());
  return r.snap;
}

json base_config() {
  return {{"auth.jwt_secret", secret},
          {"auth.aliases", {{"E12345", "alice@corp.example"}, {"777", "Bob"}}},
          {"auth.trusted_proxies", {"10.0.0.1"}}};
}

struct claims {
  std::string sub = "alice@corp.example";
  std::optional<long> exp = now_s + 600;
  std::optional<long> nbf = std::nullopt;
  std::optional<std::string> aud = std::nullopt;
  std::string key = secret;
  jwt_alg_t alg = JWT_ALG_HS256;
};

std::string make_token(const claims& c) {
  jwt_t* raw = nullptr;
  EXPECT_EQ(jwt_new(&raw), 0);
  std::unique_ptr<jwt_t, void (*)(jwt_t*)> jwt(raw, jwt_free);
  if (!c.sub.empty()) jwt_add_grant(jwt.get(), "sub", c.sub.c_str());
  if (c.exp) jwt_add_grant_int(jwt.get(), "exp", *c.exp);
  if (c.nbf) jwt_add_grant_int(jwt.get(), "nbf", *c.nbf);
  if (c.aud) jwt_add_grant(jwt.get(), "aud", c.aud->c_str());
  EXPECT_EQ(jwt_set_alg(jwt.get(), c.alg, reinterpret_cast<const unsigned char*>(c.key.data()),
                        static_cast<int>(c.key.size())),
            0);
  char* text = jwt_encode_str(jwt.get());
  EXPECT_NE(text, nullptr);
  std::string out = text ? text : "";
  std::free(text);
  return out;
}

std::string b64url(std::string_view in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  for (unsigned char c : in) {
    buf = (buf << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(tbl[(buf >> bits) & 63u]);
    }
  }
  if (bits > 0) out.push_back(tbl[(buf << (6 - bits)) & 63u]);
  return out;
}

/// Hand-crafted alg=none token: header {"alg":"none"}, a valid payload, empty signature.
std::string alg_none_token(const std::string& sub) {
  json payload = {{"sub", sub}, {"exp", now_s + 600}};
  return b64url(R"({"alg":"none","typ":"JWT"})") + "." + b64url(payload.dump()) + ".";
}

header_map bearer(const std::string& token) {
  return {{"authorization", "Bearer " + token}};
}

}  // namespace

TEST(IdentityResolver, BearerTokensTableDriven) {
  struct token_case {
    const char* name;
    json config_overrides;
    std::string authorization;  // full header value; empty = header absent
    resolve_reason want_reason;
    std::string want_account;
  };
  auto valid = make_token({});
  auto tampered = valid;
  tampered.back() = tampered.back() == 'A' ? 'B' : 'A';
  const token_case cases[] = {
      {"valid email subject", json::object(), "Bearer " + valid, resolve_reason::ok, "alice"},
      {"scheme is case-insensitive", json::object(), "bearer " + valid, resolve_reason::ok, "alice"},
      {"no header", json::object(), "", resolve_reason::none_presented, ""},
      {"basic scheme", json::object(), "Basic YWxpY2U6cHc=", resolve_reason::bad_token, ""},
      {"empty bearer", json::object(), "Bearer ", resolve_reason::bad_token, ""},
      {"garbage token", json::object(), "Bearer not.a.jwt", resolve_reason::bad_token, ""},
      {"alg none", json::object(), "Bearer " + alg_none_token("alice@corp.example"), resolve_reason::wrong_algorithm,
       ""},
      {"HS512 with the right secret", json::object(), "Bearer " + make_token({.alg = JWT_ALG_HS512}),
       resolve_reason::wrong_algorithm, ""},
      {"wrong signature key", json::object(), "Bearer " + make_token({.key = "another-secret-0123456789"}),
       resolve_reason::bad_token, ""},
      {"tampered signature", json::object(), "Bearer " + tampered, resolve_reason::bad_token, ""},
      {"expired", json::object(), "Bearer " + make_token({.exp = now_s - 1}), resolve_reason::expired, ""},
      {"exp exactly now", json::object(), "Bearer " + make_token({.exp = now_s}), resolve_reason::expired, ""},
      {"no exp", json::object(), "Bearer " + make_token({.exp = std::nullopt}), resolve_reason::missing_expiry, ""},
      {"nbf in the future", json::object(), "Bearer " + make_token({.nbf = now_s + 60}), resolve_reason::not_yet_valid,
       ""},
      {"nbf in the past", json::object(), "Bearer " + make_token({.nbf = now_s - 60}), resolve_reason::ok, "alice"},
      {"audience required, missing",
       {{"auth.jwt_audience", "changeflow"}},
       "Bearer " + valid,
       resolve_reason::wrong_audience,
       ""},
      {"audience required, wrong",
       {{"auth.jwt_audience", "changeflow"}},
       "Bearer " + make_token({.aud = std::string("other")}),
       resolve_reason::wrong_audience,
       ""},
      {"audience required, right",
       {{"auth.jwt_audience", "changeflow"}},
       "Bearer " + make_token({.aud = std::string("changeflow")}),
       resolve_reason::ok,
       "alice"},
      {"audience cleared -> not checked",
       {{"auth.jwt_audience", ""}},
       "Bearer " + make_token({.aud = std::string("other")}),
       resolve_reason::ok,
       "alice"},
      {"secret cleared -> nobody authenticated",
       {{"auth.jwt_secret", nullptr}},
       "Bearer " + valid,
       resolve_reason::no_secret_configured,
       ""},
      {"secret empty -> nobody authenticated",
       {{"auth.jwt_secret", ""}},
       "Bearer " + valid,
       resolve_reason::no_secret_configured,
       ""},
      {"no subject", json::object(), "Bearer " + make_token({.sub = ""}), resolve_reason::bad_subject, ""},
      {"subject with spaces only", json::object(), "Bearer " + make_token({.sub = "   "}), resolve_reason::bad_subject,
       ""},
  };
  for (const auto& c : cases) {
    auto doc = base_config();
    for (auto& [k, v] : c.config_overrides.items()) doc[k] = v;
    auto snap = snap_of(doc);
    ASSERT_TRUE(snap) << c.name;
    header_map headers;
    if (!c.authorization.empty()) headers["authorization"] = c.authorization;
    auto r = resolve_identity(headers, "192.0.2.7", *snap, now);
    EXPECT_EQ(r.reason, c.want_reason) << c.name << ": got " << to_string(r.reason);
    EXPECT_EQ(r.id.has_value(), c.want_reason == resolve_reason::ok) << c.name;
    if (r.id) {
      EXPECT_EQ(r.id->account, c.want_account) << c.name;
      EXPECT_EQ(r.id->source, "jwt") << c.name;
    }
  }
}

TEST(IdentityResolver, EmailAndEmployeeIdResolveToTheSameIdentity) {
  auto snap = snap_of(base_config());
  const char* subjects[] = {"alice@corp.example", " Alice@Corp.Example ", "ALICE", "E12345", "e12345", "12345"};
  for (const char* sub : subjects) {
    auto r = resolve_identity(bearer(make_token({.sub = sub})), "192.0.2.7", *snap, now);
    ASSERT_TRUE(r.id) << sub << ": " << to_string(r.reason);
    EXPECT_EQ(r.id->account, "alice") << sub;
  }
}

TEST(IdentityResolver, NormalizeSubjectTableDriven) {
  json aliases = {{"E12345", "alice@corp.example"}, {"777", "Bob"}, {"E1", "E2"}, {"E3", 42}};
  struct subject_case {
    const char* in;
    std::optional<std::string> want;
  };
  const subject_case cases[] = {
      {"alice@corp.example", "alice"},
      {"  ALICE@corp.example\t", "alice"},
      {"alice", "alice"},
      {"E12345", "alice"},
      {"12345", "alice"},
      {"E777", "bob"},
      {"777", "bob"},
      {"E99999", "emp:99999"},  // unknown employee id stays distinguishable, not guessed
      {"99999", "emp:99999"},
      {"E1", "emp:1"},  // alias pointing at another employee id is not chased
      {"E3", "emp:3"},  // non-string alias value ignored
      {"", std::nullopt},
      {"   ", std::nullopt},
      {"@corp.example", std::nullopt},
      {"al ice", std::nullopt},
      {"ali\x01"
       "ce",
       std::nullopt},
  };
  for (const auto& c : cases) EXPECT_EQ(normalize_subject(c.in, aliases), c.want) << "'" << c.in << "'";
  EXPECT_EQ(normalize_subject("E12345", json()), "emp:12345") << "aliases cleared";
  EXPECT_EQ(normalize_subject("E12345", json::array()), "emp:12345") << "aliases of the wrong shape";
}

TEST(IdentityResolver, GatewayHeaderOnlyFromTrustedProxy) {
  auto doc = base_config();
  doc["auth.gateway_header"] = "X-Authenticated-User";
  auto snap = snap_of(doc);
  header_map headers = {{"x-authenticated-user", "E12345"}};

  auto trusted = resolve_identity(headers, "10.0.0.1", *snap, now);
  ASSERT_TRUE(trusted.id);
  EXPECT_EQ(trusted.id->account, "alice");
  EXPECT_EQ(trusted.id->source, "gateway");

  auto spoofed = resolve_identity(headers, "192.0.2.7", *snap, now);
  EXPECT_FALSE(spoofed.id);
  EXPECT_EQ(spoofed.reason, resolve_reason::untrusted_header);

  // An untrusted header never overrides or joins a token: the token alone decides.
  headers["authorization"] = "Bearer " + make_token({.sub = "carol@corp.example"});
  auto with_token = resolve_identity(headers, "192.0.2.7", *snap, now);
  ASSERT_TRUE(with_token.id);
  EXPECT_EQ(with_token.id->account, "carol");
  EXPECT_EQ(with_token.id->source, "jwt");

  // Header mode off (key cleared): the header is ignored even from a trusted proxy.
  auto off = snap_of(base_config());
  auto r = resolve_identity({{"x-authenticated-user", "alice"}}, "10.0.0.1", *off, now);
  EXPECT_FALSE(r.id);
  EXPECT_EQ(r.reason, resolve_reason::none_presented);
}
