// Smoke test of every console serving rule over real loopback HTTP, with a temp
// console directory: status codes, Cache-Control, content types and traversal attempts.

#include "http/handlers/static_files.hpp"
#include "http/router.hpp"
#include "http/server/server.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace changeflow;
using changeflow::testing::http_call;
using changeflow::testing::http_result;

namespace {

namespace fs = std::filesystem;

constexpr const char* immutable = "max-age=31536000, public, immutable";
constexpr const char* shell_marker = "<!-- console shell -->";

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class ConsoleServing : public ::testing::Test {
 protected:
  void SetUp() override {
    base = changeflow::testing::make_temp_dir("cf-console");
    dir = fs::path(base) / "dist";
    write(dir / "index.html",
          std::string("<html>") + shell_marker + "<script src=\"/console/assets/index-AbC123xy.js\"></script></html>");
    write(dir / "assets" / "index-AbC123xy.js", "console.log('app');");
    write(dir / "assets" / "index-Zz9_8-7k.css", "body{}");
    write(dir / "favicon.svg", "<svg/>");
    write(fs::path(base) / "secret.txt", "top secret");
    // A symlink inside the console dir pointing outside it must not be followed.
    fs::create_symlink(fs::path(base) / "secret.txt", dir / "assets" / "leak-12345678.txt");
    http::router r;
    std::string d = dir.string();
    http::add_console_routes(r, [d] { return d; });
    routes = std::make_shared<http::router>(std::move(r));
    http_server::server_options o;
    o.address = "127.0.0.1";
    o.port = 0;
    o.threads = 1;
    server = std::make_unique<http_server::server>(
        o, [rt = routes](http_server::request&& req, http_server::responder reply) {
          auto m = rt->match(req.method, req.path);
          if (m.kind != http::router::match_kind::found) {
            http_server::response nf;
            nf.status = 404;
            nf.body = "{\"code\":\"NOT_FOUND\"}";
            return reply(nf);
          }
          m.matched->handler(req, m.params, reply);
        });
    server->start();
  }
  void TearDown() override {
    server->stop();
    std::error_code ec;
    fs::remove_all(base, ec);
  }

  http_result get(const std::string& target, const std::string& accept = "") {
    std::vector<std::pair<std::string, std::string>> h;
    if (!accept.empty()) h.push_back({"Accept", accept});
    return http_call("127.0.0.1", server->port(), "GET", target, "", h);
  }

  static void expect_json_error(const http_result& r, unsigned status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.header("cache-control"), "no-store");
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_EQ(j["code"], code);
    EXPECT_TRUE(j.contains("message"));
    EXPECT_EQ(r.body.find("top secret"), std::string::npos);
  }

  std::string base;
  fs::path dir;
  std::shared_ptr<http::router> routes;
  std::unique_ptr<http_server::server> server;
};

TEST_F(ConsoleServing, IndexIsNoStoreAtEverySpelling) {
  for (std::string target : {"/console", "/console/", "/console/index.html"}) {
    auto r = get(target, "text/html");
    EXPECT_EQ(r.status, 200u) << target;
    EXPECT_EQ(r.header("cache-control"), "no-store") << target;
    EXPECT_NE(r.header("content-type").find("text/html"), std::string::npos) << target;
    EXPECT_NE(r.body.find(shell_marker), std::string::npos) << target;
  }
}

TEST_F(ConsoleServing, HashedAssetsAreImmutable) {
  auto js = get("/console/assets/index-AbC123xy.js");
  EXPECT_EQ(js.status, 200u);
  EXPECT_EQ(js.header("cache-control"), immutable);
  EXPECT_NE(js.header("content-type").find("javascript"), std::string::npos);
  EXPECT_EQ(js.body, "console.log('app');");
  auto css = get("/console/assets/index-Zz9_8-7k.css");
  EXPECT_EQ(css.status, 200u);
  EXPECT_EQ(css.header("cache-control"), immutable);
  EXPECT_NE(css.header("content-type").find("text/css"), std::string::npos);
}

TEST_F(ConsoleServing, UnhashedFilesRevalidate) {
  auto r = get("/console/favicon.svg");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("cache-control"), "no-cache");
}

TEST_F(ConsoleServing, MissingAssetIsJson404NoStore) {
  // An old page asking for an asset removed by a release: JSON 404, never HTML, never a 500.
  expect_json_error(get("/console/assets/index-OLDHASH1.js", "*/*"), 404, "NOT_FOUND");
  // Even when the browser says it accepts HTML: the path has an extension, so it is not navigation.
  expect_json_error(get("/console/assets/index-OLDHASH1.js", "text/html,*/*"), 404, "NOT_FOUND");
}

TEST_F(ConsoleServing, MissingNavigationGetsAppShellNoStore) {
  for (std::string target :
       {"/console/operations", "/console/operations/4a1f0c1e-0000-4000-8000-000000000001", "/console/audit?x=1"}) {
    auto r = get(target, "text/html,application/xhtml+xml,*/*;q=0.8");
    EXPECT_EQ(r.status, 200u) << target;
    EXPECT_EQ(r.header("cache-control"), "no-store") << target;
    EXPECT_NE(r.body.find(shell_marker), std::string::npos) << target;
  }
}

TEST_F(ConsoleServing, MissingNonNavigationWithoutHtmlAcceptIs404) {
  expect_json_error(get("/console/operations", "application/json"), 404, "NOT_FOUND");
  expect_json_error(get("/console/operations"), 404, "NOT_FOUND");
}

TEST_F(ConsoleServing, TraversalAttemptsAreRefused) {
  for (std::string target :
       {"/console/../secret.txt", "/console/assets/../../secret.txt", "/console/%2e%2e/secret.txt",
        "/console/%2E%2E/secret.txt", "/console/assets/%2e%2e%2f%2e%2e%2fsecret.txt", "/console/..%2fsecret.txt",
        "/console/assets/..%5c..%5csecret.txt", "/console/./index.html", "/console/assets/%252e%252e/secret.txt"}) {
    auto r = get(target, "text/html");
    // The transport may refuse a dot segment itself (400); either way: no file, no shell, no-store.
    EXPECT_TRUE(r.status == 400 || r.status == 404) << target << " -> " << r.status;
    EXPECT_EQ(r.body.find("top secret"), std::string::npos) << target;
    EXPECT_EQ(r.body.find(shell_marker), std::string::npos) << target;
    if (r.status == 400) {
      EXPECT_EQ(r.header("cache-control"), "no-store") << target;
    }
  }
  // A symlink inside the directory resolving outside it is refused, not followed.
  expect_json_error(get("/console/assets/leak-12345678.txt"), 400, "BAD_REQUEST");
}

TEST_F(ConsoleServing, MissingConsoleDirIs404NoStore) {
  auto missing = http::serve_console(
      [] {
        http_server::request q;
        q.method = "GET";
        q.target = q.path = "/console/";
        q.headers["accept"] = "text/html";
        return q;
      }(),
      (fs::path(base) / "nope").string());
  EXPECT_EQ(missing.status, 404u);
  bool no_store = false;
  for (auto& [k, v] : missing.headers) no_store |= (k == "Cache-Control" && v == "no-store");
  EXPECT_TRUE(no_store);
}

TEST(ConsoleAssetNames, HashedPatternOnly) {
  EXPECT_TRUE(http::is_hashed_asset_name("index-AbC123xy.js"));
  EXPECT_TRUE(http::is_hashed_asset_name("vendor-a1-2c3d4.css"));  // '-' inside the hash
  EXPECT_TRUE(http::is_hashed_asset_name("config-Bt6dIMfm.js"));
  EXPECT_FALSE(http::is_hashed_asset_name("index.js"));
  EXPECT_FALSE(http::is_hashed_asset_name("index-abc.js"));
  EXPECT_FALSE(http::is_hashed_asset_name("-AbC123xy.js"));
  EXPECT_FALSE(http::is_hashed_asset_name("index-AbC123x!.js"));
}

}  // namespace
