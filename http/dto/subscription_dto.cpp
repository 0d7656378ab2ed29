#include "http/dto/subscription_dto.hpp"

#include "base/ids.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace changeflow::http::dto {

namespace {
constexpr std::size_t max_url = 1024;
constexpr std::size_t max_subject = 128;

bool printable_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

bool valid_host_name(std::string_view h) {
  if (h.empty() || h.size() > 253 || h.front() == '.' || h.back() == '.' || h.front() == '-') return false;
  return std::all_of(h.begin(), h.end(), [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '.'; });
}

bool valid_ipv6_literal(std::string_view h) {
  // "[...]" with hex digits, colons and dots (an embedded IPv4); the resolver judges the rest.
  if (h.size() < 4 || h.front() != '[' || h.back() != ']') return false;
  auto inner = h.substr(1, h.size() - 2);
  return inner.find(':') != std::string_view::npos && std::all_of(inner.begin(), inner.end(), [](unsigned char c) {
           return std::isxdigit(c) || c == ':' || c == '.';
         });
}

nlohmann::json null_or(const std::optional<std::string>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json null_or(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
}  // namespace

std::optional<std::string> url_problem(std::string_view url) {
  if (url.empty()) return "'url' is required";
  if (url.size() > max_url) return "'url' may be at most 1024 characters";
  if (!printable_ascii(url)) return "'url' must be printable ASCII without spaces (percent-encode the rest)";
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
  } else {
    return "'url' must start with http:// or https://";
  }
  if (url.find('#') != std::string_view::npos) return "'url' must not have a fragment (#...)";
  auto end = rest.find_first_of("/?");
  auto authority = rest.substr(0, end);
  if (authority.empty()) return "'url' needs a host";
  if (authority.find('@') != std::string_view::npos) {
    return "'url' must not carry credentials; the secret signs every event instead";
  }
  std::string_view host = authority;
  std::string_view port;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return "'url' has an unterminated IPv6 address";
    host = authority.substr(0, close + 1);
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "'url' has characters after its IPv6 address";
      port = after.substr(1);
      if (port.empty()) return "'url' has an empty port";
    }
    if (!valid_ipv6_literal(host)) return "'url' has an invalid IPv6 address";
  } else {
    auto colon = authority.find(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
      if (port.empty()) return "'url' has an empty port";
    }
    if (!valid_host_name(host)) return "'url' has an invalid host";
  }
  if (!port.empty()) {
    unsigned n = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (ec != std::errc() || p != port.data() + port.size() || n == 0 || n > 65535) {
      return "'url' port must be 1-65535";
    }
  }
  return std::nullopt;
}

bool valid_secret(std::string_view secret) {
  return secret.size() >= 16 && secret.size() <= 255 && printable_ascii(secret);
}

std::variant<subscription_request, parse_error> parse_subscription(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error{"Request body must be a JSON object"};
  for (const auto& [key, value] : j.items()) {
    if (key != "subject" && key != "operationId" && key != "url" && key != "secret") {
      return parse_error{"unknown field '" + key + "' (accepted: subject, operationId, url, secret)"};
    }
  }
  subscription_request r;
  if (j.contains("subject") && !j["subject"].is_null()) {
    if (!j["subject"].is_string()) return parse_error{"'subject' must be a string"};
    auto s = j["subject"].get<std::string>();
    if (s.empty() || s.size() > max_subject ||
        !std::all_of(s.begin(), s.end(), [](unsigned char c) { return c >= 0x20; })) {
      return parse_error{"'subject' must be 1-128 characters without control characters"};
    }
    r.subject = std::move(s);
  }
  if (j.contains("operationId") && !j["operationId"].is_null()) {
    if (!j["operationId"].is_string() || !ids::is_uuid(j["operationId"].get<std::string>())) {
      return parse_error{"'operationId' must be a UUID"};
    }
    auto id = j["operationId"].get<std::string>();
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    r.operation_id = std::move(id);
  }
  if (!r.subject && !r.operation_id) return parse_error{"give 'subject', 'operationId' or both"};
  if (!j.contains("url") || !j["url"].is_string()) return parse_error{"'url' is required (string)"};
  r.url = j["url"].get<std::string>();
  if (auto problem = url_problem(r.url)) return parse_error{*problem};
  if (j.contains("secret") && !j["secret"].is_null()) {
    if (!j["secret"].is_string() || !valid_secret(j["secret"].get<std::string>())) {
      return parse_error{"'secret' must be 16-255 printable ASCII characters without spaces"};
    }
    r.secret = j["secret"].get<std::string>();
  }
  return r;
}

nlohmann::json to_json(const persistence::subscription_row& s) {
  nlohmann::json counts = nlohmann::json::object();
  for (const char* state : {"PENDING", "DELIVERED", "FAILED"}) {
    auto it = s.deliveries.find(state);
    counts[state] = it == s.deliveries.end() ? 0 : it->second;
  }
  return {{"subscriptionId", s.subscription_id},
          {"subject", null_or(s.subject_id)},
          {"operationId", null_or(s.operation_id)},
          {"url", s.url},
          {"owner", s.owner},
          {"createdAtMs", s.created_at_ms},
          {"deliveries", counts}};
}

nlohmann::json to_json(const persistence::delivery_row& d) {
  return {{"deliveryId", d.delivery_id},
          {"subscriptionId", d.subscription_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.subscription_id)},
          {"url", d.url.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.url)},
          {"operationId", d.operation_id},
          {"sequence", d.sequence},
          {"kind", d.kind},
          {"state", d.state},
          {"attempts", d.attempts},
          {"lastStatus", d.last_status ? nlohmann::json(*d.last_status) : nlohmann::json(nullptr)},
          {"lastError", null_or(d.last_error)},
          {"nextAttemptAtMs", null_or(d.next_attempt_at_ms)},
          {"claimedBy", null_or(d.claimed_by)},
          {"createdAtMs", d.created_at_ms},
          {"deliveredAtMs", null_or(d.delivered_at_ms)}};
}

}  // namespace changeflow::http::dto
