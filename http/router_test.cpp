#include "http/router.hpp"

#include <gtest/gtest.h>

using namespace changeflow::http;

namespace {
route_handler noop() {
  return [](changeflow::http_server::request&, const path_params&, changeflow::http_server::responder) {};
}
}  // namespace

TEST(Router, MatchesTemplatesAndExtractsParams) {
  router r;
  r.add({"GET", "/api/v1/changes/{id}", noop()});
  r.add({"POST", "/api/v1/changes", noop()});
  r.add({"GET", "/healthz", noop()});

  struct tc {
    const char* method;
    const char* path;
    router::match_kind kind;
    const char* pattern;
    const char* id;
  } cases[] = {
      {"GET", "/api/v1/changes/abc", router::match_kind::found, "/api/v1/changes/{id}", "abc"},
      {"GET", "/api/v1/changes/abc/", router::match_kind::found, "/api/v1/changes/{id}", "abc"},
      {"POST", "/api/v1/changes", router::match_kind::found, "/api/v1/changes", nullptr},
      {"DELETE", "/api/v1/changes", router::match_kind::method_not_allowed, nullptr, nullptr},
      {"GET", "/api/v1/changes/abc/extra", router::match_kind::not_found, nullptr, nullptr},
      {"GET", "/nothing", router::match_kind::not_found, nullptr, nullptr},
      {"GET", "/", router::match_kind::not_found, nullptr, nullptr},
  };
  for (const auto& c : cases) {
    auto m = r.match(c.method, c.path);
    EXPECT_EQ(m.kind, c.kind) << c.method << " " << c.path;
    if (c.pattern) {
      ASSERT_NE(m.matched, nullptr);
      EXPECT_EQ(m.matched->pattern, c.pattern);
    }
    if (c.id) {
      EXPECT_EQ(m.params["id"], c.id);
    }
  }
}

TEST(Router, SplitPathAtEveryPosition) {
  std::string path = "/a/bb/ccc";
  for (size_t cut = 0; cut <= path.size(); ++cut) {
    auto head = split_path(path.substr(0, cut));
    for (auto s : head) EXPECT_FALSE(s.empty());
  }
  EXPECT_EQ(split_path("//a//b").size(), 2u);
}

TEST(Router, NamesEveryParameterOfTheMatchedRouteOnly) {
  router r;
  r.add({"POST", "/api/v1/ops/batches/{batch}/settle", noop()});
  r.add({"GET", "/api/v1/ops/{kind}/{id}/settle", noop()});
  r.add({"GET", "/api/v1/ops/batches/{id}", noop()});
  auto m = r.match("GET", "/api/v1/ops/batches/b-1/settle");
  ASSERT_EQ(m.kind, router::match_kind::found);
  EXPECT_EQ(m.matched->pattern, "/api/v1/ops/{kind}/{id}/settle");
  EXPECT_EQ(m.params, (path_params{{"kind", "batches"}, {"id", "b-1"}}));
  EXPECT_EQ(m.allowed_methods, std::vector<std::string>{"POST"});  // the first route's method
  auto one = r.match("GET", "/api/v1/ops/batches/b-2");
  ASSERT_EQ(one.kind, router::match_kind::found);
  EXPECT_EQ(one.params, (path_params{{"id", "b-2"}}));
}
