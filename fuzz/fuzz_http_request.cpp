// fuzz_http_request: raw bytes through what the server does with a connection's first request:
// Beast's request_parser with the server's default body/header limits (http/server/server.hpp),
// the same conversion to http_server::request (http/server/beast_request.hpp), then route matching
// on the service's route table (http/router.hpp) and, for /console paths, the static file handler
// against a temporary console directory with a file OUTSIDE it that must never be served.
// Invariants: never throws; the router's answer agrees with the pattern it names; query/header
// accessors never throw; the console never serves a file outside its directory; a reply carrying
// the request's path in a header and its body as body is one well-formed message with nothing added.
//
// The routes are those of http/route_table.hpp, with handlers that do nothing.

#include "base/log.hpp"
#include "fuzz/fuzz_support.hpp"
#include "http/handlers/static_files.hpp"
#include "http/router.hpp"
#include "http/server/beast_request.hpp"
#include "http/server/response_text.hpp"
#include "http/server/server.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include <unistd.h>

using namespace changeflow;
namespace bhttp = boost::beast::http;

namespace {

const std::string secret_text = "FUZZ-SECRET-OUTSIDE-CONSOLE";

struct fixture {
  http::router routes;
  std::string console_dir;
  fixture() {
    log::set_min_level(log::level::error);
    // The service's own route table (http/route_table.hpp): the real handlers need the service.
    for (const http::route_spec* spec : http::all_routes) {
      routes.add({*spec, [](http_server::request&, const http::path_params&, http_server::responder) {}});
    }
    // <tmp>/cf-fuzz-console-<pid>/{secret.txt, dist/{index.html, favicon.ico, assets/app-AbCd1234.js}}
    auto base = std::filesystem::temp_directory_path() / ("cf-fuzz-console-" + std::to_string(::getpid()));
    std::filesystem::create_directories(base / "dist" / "assets");
    std::ofstream(base / "secret.txt") << secret_text;
    std::ofstream(base / "dist" / "index.html") << "<!doctype html><title>console</title>";
    std::ofstream(base / "dist" / "favicon.ico") << "icon";
    std::ofstream(base / "dist" / "assets" / "app-AbCd1234.js") << "console.log(1)";
    std::error_code ec;
    std::filesystem::create_symlink(base / "secret.txt", base / "dist" / "link.txt", ec);
    console_dir = (base / "dist").string();
    base_dir = base;
  }
  ~fixture() {
    std::error_code ec;
    std::filesystem::remove_all(base_dir, ec);
  }
  std::filesystem::path base_dir;
};

fixture& fx() {
  static fixture f;
  return f;
}

std::size_t placeholders(std::string_view pattern) {
  std::size_t n = 0;
  for (auto seg : http::split_path(pattern)) n += seg.size() >= 2 && seg.front() == '{' && seg.back() == '}';
  return n;
}

void check_route(const http_server::request& req) {
  auto& f = fx();
  auto m = f.routes.match(req.method, req.path);
  auto segments = http::split_path(req.path);
  switch (m.kind) {
    case http::router::match_kind::found:
      FUZZ_CHECK(m.matched != nullptr && m.matched->method == req.method, "found route has the method");
      FUZZ_CHECK(http::split_path(m.matched->pattern).size() == segments.size(), "pattern length matches");
      FUZZ_CHECK(m.params.size() == placeholders(m.matched->pattern), "one param per placeholder");
      for (const auto& [k, v] : m.params)
        FUZZ_CHECK(!v.empty() && v.find('/') == std::string::npos, "param is a segment");
      break;
    case http::router::match_kind::method_not_allowed:
      FUZZ_CHECK(!m.allowed_methods.empty(), "405 lists the allowed methods");
      for (const auto& a : m.allowed_methods) FUZZ_CHECK(a != req.method, "405 never lists the method used");
      break;
    case http::router::match_kind::not_found:
      FUZZ_CHECK(m.matched == nullptr && m.allowed_methods.empty(), "404 is empty");
      break;
  }
  if (m.kind == http::router::match_kind::found && req.path.rfind("/console", 0) == 0) {
    auto res = http::serve_console(req, f.console_dir);
    FUZZ_CHECK(res.status == 200 || res.status == 400 || res.status == 404, "console answers 200/400/404");
    FUZZ_CHECK(res.body.find(secret_text) == std::string::npos, "console never serves a file outside its directory");
  }
}

/// A reply built from what the request carried (its decoded path, which may hold any byte: %0d%0a,
/// as a header value; its body as the body) must come out as one well-formed HTTP message that a
/// client's parser reads back whole, with nothing added: no header can be injected.
void check_reply(const http_server::request& req, unsigned status, bool keep_alive) {
  http_server::response r;
  r.status = status;
  r.body = req.body;
  r.set_header("Location", req.path);
  std::string text;
  http_server::serialize_response(r, 11, keep_alive, "changeflow", text);
  bhttp::response_parser<bhttp::string_body> reader;
  reader.eager(true);
  reader.body_limit(text.size() + 1);
  boost::beast::error_code ec;
  auto used = reader.put(boost::asio::buffer(text), ec);
  FUZZ_CHECK(!ec && reader.is_done() && used == text.size(), "the reply is one complete message");
  const auto& m = reader.get();
  FUZZ_CHECK(m.result_int() == status, "the reply carries its status");
  std::string location;
  for (char c : req.path) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u != 0x7f) || c == '\t') location.push_back(c);
  }
  // A field value loses its surrounding blanks in parsing.
  auto trim = [](std::string v) {
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
    std::size_t i = 0;
    while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) ++i;
    return v.substr(i);
  };
  FUZZ_CHECK(std::string(m["Location"]) == trim(location),
             "the header carries the value without its control characters");
  std::size_t fields = 0;
  for (auto it = m.begin(); it != m.end(); ++it) ++fields;
  const bool bodiless = status < 200 || status == 204 || status == 304;
  const std::size_t expected = 3 + (bodiless ? 0 : 1) + (keep_alive ? 0 : 1);  // Server, Content-Type, Location
  FUZZ_CHECK(fields == expected, "no header beyond those written");
  FUZZ_CHECK(bodiless ? m.body().empty() : m.body() == req.body, "the reply carries its body");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)fx();
  http_server::server_options opts;  // the limits changeflowd runs with unless configured
  bhttp::request_parser<bhttp::string_body> parser;
  parser.body_limit(opts.body_limit);
  parser.header_limit(opts.header_limit);
  parser.eager(true);
  boost::beast::error_code ec;
  const char* p = reinterpret_cast<const char*>(data);
  std::size_t left = size;
  while (left > 0 && !ec && !parser.is_done()) {
    auto used = parser.put(boost::asio::const_buffer(p, left), ec);
    if (ec == bhttp::error::need_more) {
      ec = {};
      break;
    }
    if (used == 0) break;
    p += used;
    left -= used;
  }
  // The peer closed the connection after these bytes: like Beast's async_read, no bytes at all is
  // end_of_stream (the server just closes), otherwise put_eof finishes or refuses the message.
  if (!parser.got_some()) return 0;
  if (!ec && !parser.is_done()) parser.put_eof(ec);
  if (ec || !parser.is_done()) return 0;  // the server answers 400/413/431 and closes

  auto req = http_server::to_request(parser.get());
  FUZZ_CHECK(!req.method.empty(), "a parsed request has a method");
  FUZZ_CHECK(req.path.size() <= req.target.size(), "decoding never grows the path");
  for (const auto& [name, value] : req.headers) {
    for (unsigned char c : name) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "header names are lower case");
    FUZZ_CHECK(req.header(name).has_value(), "every header is found by its name");
  }
  for (const char* q : {"limit", "before", "after", "phase", "step", "id"}) {
    if (auto v = req.query_param(q)) FUZZ_CHECK(v->size() <= req.query.size(), "query value within the query");
  }
  check_route(req);
  const unsigned status = 100 + static_cast<unsigned>(size % 500);
  check_reply(req, status, size % 2 == 0);
  return 0;
}
