#pragma once
// The bytes of a reply, written by the server in one buffer: the status line, the server's own
// headers (Server, Content-Type, Content-Length, Connection), the handler's headers and the body.
// Built by hand instead of through Beast's serializer, which costs several times the work for a
// reply that is one small string (a status poll is most of the service's requests).

#include "http/server/message.hpp"

#include <string>
#include <string_view>

namespace changeflow::http_server {

/// Replaces `out` with `r` as HTTP/1.x (`version` 10 or 11) text. Content-Length and Connection
/// are the server's: a handler's copies are dropped. A 1xx, 204 or 304 reply carries neither a
/// Content-Length nor a body. A header value loses its control characters (CR and LF among them: no
/// header can be injected), a name whatever is not a token character.
/// `keep_alive` false writes `Connection: close` (HTTP/1.1); true writes `Connection: keep-alive`
/// for HTTP/1.0 only.
void serialize_response(const response& r, unsigned version, bool keep_alive, std::string_view server_name,
                        std::string& out);

}  // namespace changeflow::http_server
