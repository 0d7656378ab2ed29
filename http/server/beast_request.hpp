#pragma once
// Converts a parsed Beast request into the transport-neutral http_server::request. Used by the
// server session (server.cpp) and by the HTTP fuzz target (fuzz/fuzz_http_request), so the fuzzer
// runs the exact conversion the server runs. Never throws on any parsed message (bad_alloc aside).

#include "http/server/message.hpp"

#include <boost/beast/http.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace changeflow::http_server {

/// Method, target, percent-decoded path, raw query, lower-case headers (repeats joined by ", "),
/// body (moved out of `msg`) and keep-alive. The peer address is the caller's business.
inline request to_request(boost::beast::http::request<boost::beast::http::string_body>& msg) {
  request req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  auto qpos = req.target.find('?');
  req.path = percent_decode(std::string_view(req.target).substr(0, qpos));
  if (qpos != std::string::npos) req.query = req.target.substr(qpos + 1);
  for (const auto& field : msg) {
    std::string name(field.name_string().data(), field.name_string().size());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    auto [it, inserted] = req.headers.emplace(name, std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  req.body = std::move(msg.body());
  req.keep_alive = msg.keep_alive();
  return req;
}

}  // namespace changeflow::http_server
