#include "http/server/response_text.hpp"

#include "base/http_field.hpp"

#include <boost/beast/http/status.hpp>

namespace changeflow::http_server {

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
  if (!server_name.empty()) append_http_field(out, "Server", server_name);
  if (!r.content_type.empty()) append_http_field(out, "Content-Type", r.content_type);
  for (const auto& [name, value] : r.headers) {
    if (same_http_name(name, "content-length") || same_http_name(name, "connection")) continue;
    append_http_field(out, name, value);
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
