#include "http/identity/resolver.hpp"

#include <jwt.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

namespace changeflow::http::identity {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

/// "E12345", "e12345" or "12345" -> "12345"; anything else -> nullopt.
std::optional<std::string> employee_digits(std::string_view s) {
  if (!s.empty() && (s.front() == 'E' || s.front() == 'e')) s.remove_prefix(1);
  if (!all_digits(s)) return std::nullopt;
  return std::string(s);
}

/// Account form of a non-employee subject: local part of an email, lower-cased.
std::optional<std::string> account_of(std::string_view s) {
  s = trim(s);
  if (auto at = s.find('@'); at != std::string_view::npos) s = trim(s.substr(0, at));
  if (s.empty()) return std::nullopt;
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return std::nullopt;
  }
  return lower(s);
}

std::optional<std::string> base64url_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-' || c == '+') return 62;
    if (c == '_' || c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : in) {
    int v = value(c);
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xffu));
    }
  }
  return out;
}

bool peer_is_trusted(const config::snapshot& snap, std::string_view peer) {
  const auto& proxies = snap.auth().trusted_proxies;
  return std::find(proxies.begin(), proxies.end(), peer) != proxies.end();
}

struct jwt_deleter {
  void operator()(jwt_t* j) const { jwt_free(j); }
};
struct cstr_deleter {
  void operator()(char* s) const { std::free(s); }
};

resolve_result rejected(resolve_reason r) {
  return {std::nullopt, r};
}

resolve_result verify_bearer(std::string_view token, const config::snapshot& snap,
                             std::chrono::system_clock::time_point now) {
  const auto& secret = snap.auth().jwt_secret;
  if (!secret) return rejected(resolve_reason::no_secret_configured);

  // Check the algorithm ourselves before libjwt sees the token: only HS256 is acceptable, whatever
  // the library would do with "none" or an asymmetric alg given our shared secret as a "key".
  auto first_dot = token.find('.');
  if (first_dot == std::string_view::npos) return rejected(resolve_reason::bad_token);
  auto header_text = base64url_decode(token.substr(0, first_dot));
  if (!header_text) return rejected(resolve_reason::bad_token);
  auto header = nlohmann::json::parse(*header_text, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return rejected(resolve_reason::bad_token);
  auto alg = header.find("alg");
  if (alg == header.end() || !alg->is_string() || alg->get<std::string>() != "HS256") {
    return rejected(resolve_reason::wrong_algorithm);
  }

  std::string token_copy(token);  // libjwt wants a NUL-terminated string
  jwt_t* raw = nullptr;
  int rc = jwt_decode(&raw, token_copy.c_str(), reinterpret_cast<const unsigned char*>(secret->data()),
                      static_cast<int>(secret->size()));
  std::unique_ptr<jwt_t, jwt_deleter> jwt(raw);
  if (rc != 0 || !jwt) return rejected(resolve_reason::bad_token);
  if (jwt_get_alg(jwt.get()) != JWT_ALG_HS256) return rejected(resolve_reason::wrong_algorithm);

  std::unique_ptr<char, cstr_deleter> grants_text(jwt_get_grants_json(jwt.get(), nullptr));
  if (!grants_text) return rejected(resolve_reason::bad_token);
  auto grants = nlohmann::json::parse(grants_text.get(), nullptr, false);
  if (grants.is_discarded() || !grants.is_object()) return rejected(resolve_reason::bad_token);

  // No leeway: instances are expected to run NTP; a token at its exp second is already expired.
  auto now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  auto exp = grants.find("exp");
  if (exp == grants.end() || !exp->is_number()) return rejected(resolve_reason::missing_expiry);
  if (exp->get<double>() <= static_cast<double>(now_s)) return rejected(resolve_reason::expired);
  if (auto nbf = grants.find("nbf"); nbf != grants.end()) {
    if (!nbf->is_number()) return rejected(resolve_reason::bad_token);
    if (nbf->get<double>() > static_cast<double>(now_s)) return rejected(resolve_reason::not_yet_valid);
  }

  if (const auto& audience = snap.auth().jwt_audience) {
    auto aud = grants.find("aud");
    bool match = false;
    if (aud != grants.end() && aud->is_string()) match = aud->get<std::string>() == *audience;
    if (aud != grants.end() && aud->is_array()) {
      match = std::any_of(aud->begin(), aud->end(),
                          [&](const nlohmann::json& a) { return a.is_string() && a.get<std::string>() == *audience; });
    }
    if (!match) return rejected(resolve_reason::wrong_audience);
  }

  auto sub = grants.find("sub");
  if (sub == grants.end() || !sub->is_string()) return rejected(resolve_reason::bad_subject);
  auto account = normalize_subject(sub->get<std::string>(), snap.auth().aliases);
  if (!account) return rejected(resolve_reason::bad_subject);
  return {identity{*account, "jwt"}, resolve_reason::ok};
}

}  // namespace

std::string_view to_string(resolve_reason r) {
  switch (r) {
    case resolve_reason::ok: return "ok";
    case resolve_reason::none_presented: return "none_presented";
    case resolve_reason::bad_token: return "bad_token";
    case resolve_reason::wrong_algorithm: return "wrong_algorithm";
    case resolve_reason::expired: return "expired";
    case resolve_reason::missing_expiry: return "missing_expiry";
    case resolve_reason::not_yet_valid: return "not_yet_valid";
    case resolve_reason::wrong_audience: return "wrong_audience";
    case resolve_reason::bad_subject: return "bad_subject";
    case resolve_reason::no_secret_configured: return "no_secret_configured";
    case resolve_reason::untrusted_header: return "untrusted_header";
  }
  return "unknown";
}

std::optional<std::string> normalize_subject(std::string_view subject, const nlohmann::json& aliases) {
  subject = trim(subject);
  if (subject.empty()) return std::nullopt;
  auto digits = subject.find('@') == std::string_view::npos ? employee_digits(subject) : std::nullopt;
  if (!digits) return account_of(subject);
  if (aliases.is_object()) {
    // Alias keys may be written "E12345" or "12345": compare by digits so both spellings match.
    for (const auto& [key, value] : aliases.items()) {
      auto key_digits = employee_digits(trim(key));
      if (key_digits && *key_digits == *digits && value.is_string()) {
        auto mapped = account_of(value.get<std::string>());
        // An alias that maps to another employee id is a config error: do not chase chains.
        if (mapped && !employee_digits(*mapped)) return mapped;
      }
    }
  }
  return "emp:" + *digits;
}

bool is_unmapped_employee(const identity& id) {
  return id.account.rfind("emp:", 0) == 0;
}

resolve_result resolve_identity(const header_map& headers, std::string_view peer_address, const config::snapshot& snap,
                                std::chrono::system_clock::time_point now) {
  try {
    bool untrusted_header = false;
    if (const auto& gateway = snap.auth().gateway_header) {
      auto h = headers.find(lower(trim(*gateway)));
      if (h != headers.end()) {
        if (peer_is_trusted(snap, peer_address)) {
          auto account = normalize_subject(h->second, snap.auth().aliases);
          if (!account) return rejected(resolve_reason::bad_subject);
          return {identity{*account, "gateway"}, resolve_reason::ok};
        }
        untrusted_header = true;  // a client set it directly: ignore it entirely
      }
    }
    auto auth = headers.find("authorization");
    if (auth != headers.end()) {
      auto value = trim(auth->second);
      constexpr std::string_view scheme = "bearer ";
      if (value.size() <= scheme.size() || lower(value.substr(0, scheme.size())) != scheme) {
        return rejected(resolve_reason::bad_token);
      }
      auto token = trim(value.substr(scheme.size()));
      if (token.empty()) return rejected(resolve_reason::bad_token);
      return verify_bearer(token, snap, now);
    }
    return rejected(untrusted_header ? resolve_reason::untrusted_header : resolve_reason::none_presented);
  } catch (...) {
    // Fail closed: a resolver fault is "no identity", never an escaped exception.
    return rejected(resolve_reason::bad_token);
  }
}

}  // namespace changeflow::http::identity
