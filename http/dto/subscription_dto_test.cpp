#include "http/dto/subscription_dto.hpp"

#include <gtest/gtest.h>

using namespace changeflow::http::dto;

TEST(SubscriptionUrl, TableOfAddresses) {
  struct url_case {
    const char* url;
    bool ok;
  };
  const url_case cases[] = {
      {"http://127.0.0.1:8081/hook", true},
      {"http://hooks.example.com/changeflow?team=payments", true},
      {"https://hooks.example.com", true},
      {"http://[::1]:9000/x", true},
      {"http://localhost", true},
      {"", false},
      {"ftp://example.com/x", false},
      {"HTTP://example.com", false},
      {"http://", false},
      {"http:///path", false},
      {"http://user:pw@example.com/x", false},
      {"http://example.com/x#frag", false},
      {"http://example.com:0/x", false},
      {"http://example.com:65536/x", false},
      {"http://example.com:/x", false},
      {"http://example.com:80a/x", false},
      {"http://exa mple.com/x", false},
      {"http://example.com/a b", false},
      {"http://exa_mple.com/x", false},
      {"http://-example.com/x", false},
      {"http://[::1/x", false},
      {"http://[zz::1]/x", false},
      {"http://[::1]x/", false},
      {"http://example.com/\x01", false},
      {"javascript:alert(1)", false},
  };
  for (const auto& c : cases) {
    auto problem = url_problem(c.url);
    EXPECT_EQ(!problem.has_value(), c.ok) << c.url << ": " << problem.value_or("accepted");
  }
  EXPECT_TRUE(url_problem("http://example.com/" + std::string(1100, 'a')).has_value());
}

TEST(SubscriptionUrl, EveryPrefixOfAValidAddressIsJudgedWithoutCrashing) {
  const std::string url = "http://[::1]:9000/hook?x=1";
  for (std::size_t i = 0; i <= url.size(); ++i) (void)url_problem(url.substr(0, i));
  SUCCEED();
}

TEST(SubscriptionRequest, ParsesAndRefusesWithActionableMessages) {
  auto ok = parse_subscription(R"({"subject":"payments","url":"http://127.0.0.1:9/h"})");
  ASSERT_TRUE(std::holds_alternative<subscription_request>(ok));
  EXPECT_EQ(*std::get<subscription_request>(ok).subject, "payments");
  EXPECT_FALSE(std::get<subscription_request>(ok).secret.has_value());

  auto both = parse_subscription(
      R"({"subject":"p","operationId":"0F8FAD5B-D9CB-469F-A165-70867728950E","url":"http://h/x","secret":"0123456789abcdef"})");
  ASSERT_TRUE(std::holds_alternative<subscription_request>(both));
  EXPECT_EQ(*std::get<subscription_request>(both).operation_id, "0f8fad5b-d9cb-469f-a165-70867728950e");
  EXPECT_EQ(*std::get<subscription_request>(both).secret, "0123456789abcdef");

  struct bad_case {
    const char* body;
    const char* says;
  };
  const bad_case bad[] = {
      {"[]", "JSON object"},
      {"not json", "JSON object"},
      {R"({"url":"http://h/x"})", "'subject', 'operationId'"},
      {R"({"subject":"p"})", "'url' is required"},
      {R"({"subject":"p","url":"ftp://h"})", "http:// or https://"},
      {R"({"subject":"","url":"http://h"})", "'subject'"},
      {R"({"subject":7,"url":"http://h"})", "'subject'"},
      {R"({"operationId":"nope","url":"http://h"})", "UUID"},
      {R"({"subject":"p","url":"http://h","secret":"short"})", "'secret'"},
      {R"({"subject":"p","url":"http://h","secret":"has a space in it ok"})", "'secret'"},
      {R"({"subject":"p","url":"http://h","owner":"mallory"})", "unknown field 'owner'"},
  };
  for (const auto& b : bad) {
    auto r = parse_subscription(b.body);
    ASSERT_TRUE(std::holds_alternative<parse_error>(r)) << b.body;
    EXPECT_NE(std::get<parse_error>(r).message.find(b.says), std::string::npos)
        << b.body << " -> " << std::get<parse_error>(r).message;
  }
}
