#pragma once
// A request as the Beast message the TLS path writes (the plain path writes request_text, the same
// bytes). The method must be one Beast knows (http_client::call checks it first).

#include "clients/http_client.hpp"

#include <boost/beast/http.hpp>

#include <string>

namespace changeflow::clients {

boost::beast::http::request<boost::beast::http::string_body> request_message(const http_request& req,
                                                                             const std::string& host_port);

}  // namespace changeflow::clients
