#include "http/server/response_text.hpp"

#include <gtest/gtest.h>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <string>

using namespace changeflow::http_server;
namespace bhttp = boost::beast::http;

namespace {
/// Parses `text` as Beast's client parser would, whole: the reply a client reads.
bhttp::response<bhttp::string_body> parse(const std::string& text, bool head_only = false) {
  bhttp::response_parser<bhttp::string_body> p;
  p.eager(true);
  if (head_only) p.skip(true);
  boost::beast::error_code ec;
  auto used = p.put(boost::asio::buffer(text), ec);
  EXPECT_FALSE(ec) << ec.message() << "\n" << text;
  EXPECT_EQ(used, text.size()) << text;
  EXPECT_TRUE(p.is_done()) << text;
  return p.release();
}
}  // namespace

TEST(ResponseText, AReplyIsReadBackByAnHttpParserWithItsStatusHeadersAndBody) {
  response r;
  r.status = 409;
  r.body = R"({"code":"CONFLICT"})";
  r.set_header("Retry-After", "2").set_header("Cache-Control", "no-store");
  std::string out;
  serialize_response(r, 11, true, "changeflow", out);
  auto m = parse(out);
  EXPECT_EQ(m.result_int(), 409u);
  EXPECT_EQ(m.reason(), "Conflict");
  EXPECT_EQ(m.version(), 11u);
  EXPECT_EQ(m[bhttp::field::server], "changeflow");
  EXPECT_EQ(m[bhttp::field::content_type], "application/json");
  EXPECT_EQ(m["Retry-After"], "2");
  EXPECT_EQ(m["Cache-Control"], "no-store");
  EXPECT_EQ(m[bhttp::field::content_length], std::to_string(r.body.size()));
  EXPECT_EQ(m.body(), r.body);
  EXPECT_TRUE(m.keep_alive());
}

TEST(ResponseText, KeepAliveFollowsTheVersionsDefault) {
  response r;
  r.body = "x";
  std::string out;
  serialize_response(r, 11, false, "s", out);
  EXPECT_FALSE(parse(out).keep_alive());
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
  serialize_response(r, 10, true, "s", out);
  auto m10 = parse(out);
  EXPECT_EQ(m10.version(), 10u);
  EXPECT_TRUE(m10.keep_alive());
  serialize_response(r, 10, false, "s", out);
  EXPECT_FALSE(parse(out).keep_alive());
  EXPECT_EQ(out.find("Connection"), std::string::npos);
}

TEST(ResponseText, TheServerOwnsLengthAndConnectionAndNoHeaderCanBeInjected) {
  response r;
  r.body = "abc";
  r.set_header("Content-Length", "999").set_header("connection", "upgrade");
  r.set_header("X-Note", "a\r\nSet-Cookie: stolen=1").set_header("X-Bad\r\nName", "v");
  r.set_header("X-Controls", std::string("a\x01\x1e\x7f\tb\xc3\xa9", 8)).set_header("X-Bad Name:", "w");
  std::string out;
  serialize_response(r, 11, true, "s", out);
  auto m = parse(out);
  EXPECT_EQ(m[bhttp::field::content_length], "3");
  EXPECT_EQ(m.count(bhttp::field::connection), 0u);
  EXPECT_EQ(m.count(bhttp::field::set_cookie), 0u);
  EXPECT_EQ(m["X-Note"], "aSet-Cookie: stolen=1");
  EXPECT_EQ(m["X-BadName"], "v");
  EXPECT_EQ(m["X-Controls"], "a\tb\xc3\xa9");  // a tab and bytes above 0x7f are allowed in a value
  EXPECT_EQ(m.count("X-BadName"), 2u);         // "X-Bad Name:" keeps its token characters
  EXPECT_EQ(m.body(), "abc");
}

TEST(ResponseText, NoContentAndNotModifiedCarryNoLengthAndNoBody) {
  for (unsigned status : {204u, 304u}) {
    response r;
    r.status = status;
    r.body = "ignored";
    r.content_type.clear();
    std::string out;
    serialize_response(r, 11, true, "s", out);
    EXPECT_EQ(out.find("Content-Length"), std::string::npos) << out;
    EXPECT_EQ(out.find("ignored"), std::string::npos) << out;
    EXPECT_EQ(out.find("Content-Type"), std::string::npos) << out;
    auto m = parse(out);
    EXPECT_EQ(m.result_int(), status);
    EXPECT_TRUE(m.body().empty());
  }
}

TEST(ResponseText, AnEmptyBodyIsAZeroLength) {
  response r;
  r.status = 200;
  std::string out;
  serialize_response(r, 11, true, "s", out);
  auto m = parse(out);
  EXPECT_EQ(m[bhttp::field::content_length], "0");
  EXPECT_TRUE(m.body().empty());
}
