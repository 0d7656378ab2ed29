#include "http/server/response_text.hpp"

#include <boost/beast/http/status.hpp>

#include <cctype>

namespace changeflow::http_server {

namespace {

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

/// A field value keeps visible characters, spaces, tabs and bytes above 0x7f (RFC 9110 field-value);
/// control characters, CR and LF among them, are dropped.
void append_value(std::string& out, std::string_view text) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u != 0x7f) || c == '\t') out.push_back(c);
  }
}

/// A field name keeps its token characters (RFC 9110 tchar) only.
void append_name(std::string& out, std::string_view text) {
  static constexpr std::string_view symbols = "!#$%&'*+-.^_`|~";
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || symbols.find(c) != std::string_view::npos) out.push_back(c);
  }
}

void append_header(std::string& out, std::string_view name, std::string_view value) {
  append_name(out, name);
  out += ": ";
  append_value(out, value);
  out += "\r\n";
}

}  // namespace

void serialize_response(const response& r, unsigned version, bool keep_alive, std::string_view server_name,
                        std::string& out) {
  const bool bodiless = r.status < 200 || r.status == 204 || r.status == 304;
  out.clear();
  out.reserve(160 + r.body.size());
  out += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(r.status);
  out += ' ';
  auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(r.status));
  out.append(reason.data(), reason.size());
  out += "\r\n";
  if (!server_name.empty()) append_header(out, "Server", server_name);
  if (!r.content_type.empty()) append_header(out, "Content-Type", r.content_type);
  for (const auto& [name, value] : r.headers) {
    if (same_name(name, "content-length") || same_name(name, "connection")) continue;
    append_header(out, name, value);
  }
  if (!keep_alive && version != 10) out += "Connection: close\r\n";
  if (keep_alive && version == 10) out += "Connection: keep-alive\r\n";
  if (!bodiless) {
    out += "Content-Length: ";
    out += std::to_string(r.body.size());
    out += "\r\n";
  }
  out += "\r\n";
  if (!bodiless) out += r.body;
}

}  // namespace changeflow::http_server
