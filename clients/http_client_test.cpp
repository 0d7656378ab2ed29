#include "clients/http_client.hpp"

#include <gtest/gtest.h>

using namespace changeflow::clients;

TEST(ParseUrl, SplitsHostPortAndBasePath) {
  auto u = parse_url("http://127.0.0.1:9090/api/v4/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9090);
  EXPECT_EQ(u->base_path, "/api/v4");

  auto no_port = parse_url("http://gitlab.local");
  ASSERT_TRUE(no_port);
  EXPECT_EQ(no_port->port, 80);
  EXPECT_EQ(no_port->base_path, "");
}

TEST(ParseUrl, RejectsWhatItCannotCall) {
  for (const char* bad :
       {"", "https://x:1/", "http://", "http://:80", "http://h:0", "http://h:70000", "http://h:1x", "ftp://h"}) {
    EXPECT_FALSE(parse_url(bad)) << bad;
  }
}

TEST(UrlEncode, EncodesSlashesAndSpaces) {
  EXPECT_EQ(url_encode("config/changes"), "config%2Fchanges");
  EXPECT_EQ(url_encode("a b~c.d-e_f"), "a%20b~c.d-e_f");
}

TEST(RemoteMessage, ReadsMessageThenErrorInEveryShape) {
  struct row {
    const char* body;
    const char* expected;
  };
  for (auto [body, expected] : std::initializer_list<row>{
           {R"({"message":"404 Branch Not Found"})", "404 Branch Not Found"},
           {R"({"message":["Another open merge request already exists for this source branch: !7"]})",
            "Another open merge request already exists for this source branch: !7"},
           {R"({"message":{"title":["is too long"],"branch":["bad"]}})", "branch: bad; title: is too long"},
           {R"({"error":"title is missing"})", "title is missing"},
           {R"({"message":{"error":"rate limited"}})", "error: rate limited"},
           {"Retry later\n", "Retry later"},
           {R"({"other":1})", R"({"other":1})"},
       }) {
    EXPECT_EQ(remote_message(body), expected) << body;
  }
}

TEST(StatusError, RetryableForServerErrorsAndRateLimitsWithRetryAfter) {
  http_response r;
  r.status = 429;
  r.body = "Retry later";
  r.headers["retry-after"] = "7";
  auto e = status_error(r);
  EXPECT_EQ(e.what, call_error::kind::http_status);
  EXPECT_TRUE(e.retryable);
  ASSERT_TRUE(e.retry_after_seconds);
  EXPECT_EQ(*e.retry_after_seconds, 7);

  r.status = 503;
  r.headers["retry-after"] = "Wed, 21 Oct 2015 07:28:00 GMT";
  e = status_error(r);
  EXPECT_TRUE(e.retryable);
  EXPECT_FALSE(e.retry_after_seconds);

  r.status = 401;
  r.headers.clear();
  r.body = R"({"message":"401 Unauthorized"})";
  e = status_error(r);
  EXPECT_FALSE(e.retryable);
  EXPECT_EQ(e.status, 401);
  EXPECT_EQ(e.message, "401 Unauthorized");
}

TEST(HttpClient, RefusedConnectionIsARetryableValue) {
  http_client client;
  // Port 1 on loopback is closed on any sane test machine.
  auto r = client.call(url_parts{"127.0.0.1", 1, ""}, http_request{}, transport_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::refused);
  EXPECT_TRUE(r.error().retryable);
}
