#include "http/middleware/rate_limiter.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

using namespace changeflow;
using namespace changeflow::http::middleware;
using nlohmann::json;

namespace {
std::shared_ptr<const config::snapshot> snap_of(json doc) {
  auto r = config::load_from_json(doc, [](const std::string&) { return std::optional<std::string>(); });
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors.front());
  return r.snap;
}
}  // namespace

TEST(RateLimiter, SlidingWindowAdmitsLimitPerWindow) {
  rate_limiter limiter;
  const std::string key = "submit:alice";
  for (int i = 0; i < 3; ++i) {
    auto r = limiter.try_acquire(key, 3, 1000, 100 + i);
    EXPECT_TRUE(r.allowed) << i;
    EXPECT_EQ(r.remaining, 2 - i);
  }
  auto denied = limiter.try_acquire(key, 3, 1000, 500);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.remaining, 0);
  EXPECT_EQ(denied.retry_after_ms, 600) << "oldest stamp (100) leaves the window at 1100";
  EXPECT_TRUE(limiter.try_acquire("submit:bob", 3, 1000, 500).allowed) << "other keys are independent";
  EXPECT_FALSE(limiter.try_acquire(key, 3, 1000, 1099).allowed);
  EXPECT_TRUE(limiter.try_acquire(key, 3, 1000, 1100).allowed) << "sliding: the first stamp expired";
  EXPECT_FALSE(limiter.try_acquire(key, 3, 1000, 1100).allowed);
}

TEST(RateLimiter, NonPositiveLimitAdmitsAndRecordsNothing) {
  rate_limiter limiter;
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(limiter.try_acquire("k", 0, 1000, i).allowed);
    EXPECT_TRUE(limiter.try_acquire("k", -5, 1000, i).allowed);
  }
  EXPECT_EQ(limiter.bucket_count(), 0u);
}

TEST(RateLimiter, NonPositiveWindowFallsBackTo60s) {
  rate_limiter limiter;
  EXPECT_TRUE(limiter.try_acquire("k", 1, 0, 0).allowed);
  EXPECT_FALSE(limiter.try_acquire("k", 1, -1, 59'999).allowed);
  EXPECT_TRUE(limiter.try_acquire("k", 1, 0, 60'000).allowed);
}

TEST(RateLimiter, EmptyBucketsAreRemoved) {
  rate_limiter limiter(4);
  for (int i = 0; i < 50; ++i) limiter.try_acquire("ip:198.51.100." + std::to_string(i), 5, 1000, 0);
  EXPECT_EQ(limiter.bucket_count(), 50u);
  limiter.evict_expired(999);
  EXPECT_EQ(limiter.bucket_count(), 50u);
  limiter.evict_expired(1000);
  EXPECT_EQ(limiter.bucket_count(), 0u);

  // Incremental sweep: traffic on other keys of the shard clears idle ones without an explicit
  // call.
  rate_limiter one_shard(1);
  for (int i = 0; i < 50; ++i) one_shard.try_acquire("old:" + std::to_string(i), 5, 1000, 0);
  for (int i = 0; i < 2000; ++i) one_shard.try_acquire("live:" + std::to_string(i % 4), 1'000'000, 1000, 5000);
  EXPECT_EQ(one_shard.bucket_count(), 4u);
}

TEST(RateLimiter, ConcurrentSameKeyAdmitsExactlyLimit) {
  rate_limiter limiter;
  constexpr int threads = 8, attempts = 500, limit = 137;
  std::atomic<int> admitted{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < attempts; ++i) {
        if (limiter.try_acquire("submit:alice", limit, 60'000, 1000).allowed) admitted.fetch_add(1);
      }
    });
  }
  go = true;
  for (auto& th : pool) th.join();
  EXPECT_EQ(admitted.load(), limit);
}

TEST(RateLimitPolicy, FallbacksTableDriven) {
  struct policy_case {
    const char* name;
    json doc;
    limit_setting limit;
    std::optional<std::pair<std::int64_t, std::int64_t>> want;  // limit, window
  };
  const policy_case cases[] = {
      {"defaults", json::object(), &config::rate_limit_settings::submit, std::pair{600, 60000}},
      {"configured",
       {{"rate_limit.submit", 5}, {"rate_limit.window_ms", 1000}},
       &config::rate_limit_settings::submit,
       std::pair{5, 1000}},
      {"cleared limit", {{"rate_limit.submit", nullptr}}, &config::rate_limit_settings::submit, std::nullopt},
      {"zero limit", {{"rate_limit.submit", 0}}, &config::rate_limit_settings::submit, std::nullopt},
      {"negative limit", {{"rate_limit.submit", -3}}, &config::rate_limit_settings::submit, std::nullopt},
      {"no default (callbacks)", json::object(), &config::rate_limit_settings::callbacks, std::nullopt},
      {"no limit setting", json::object(), nullptr, std::nullopt},
      {"zero window", {{"rate_limit.window_ms", 0}}, &config::rate_limit_settings::submit, std::pair{600, 60000}},
      {"negative window", {{"rate_limit.window_ms", -10}}, &config::rate_limit_settings::submit, std::pair{600, 60000}},
      {"cleared window",
       {{"rate_limit.window_ms", nullptr}},
       &config::rate_limit_settings::submit,
       std::pair{600, 60000}},
  };
  for (const auto& c : cases) {
    auto snap = snap_of(c.doc);
    ASSERT_TRUE(snap) << c.name;
    auto p = rate_limit_policy(*snap, c.limit);
    ASSERT_EQ(p.has_value(), c.want.has_value()) << c.name;
    if (p) {
      EXPECT_EQ(p->limit, c.want->first) << c.name;
      EXPECT_EQ(p->window_ms, c.want->second) << c.name;
    }
  }
  // A wrong type never reaches us through the loader, but a snapshot holding one must not limit.
  config::snapshot odd({{"rate_limit.submit", {json("ten"), "file"}}});
  EXPECT_FALSE(rate_limit_policy(odd, &config::rate_limit_settings::submit));
}

TEST(ClientAddress, TrustedProxyHopTableDriven) {
  const std::vector<std::string> proxies = {"10.0.0.1", "10.0.0.2"};
  struct address_case {
    const char* name;
    const char* peer;
    std::optional<std::string> xff;
    std::string want;
  };
  const address_case cases[] = {
      {"direct client, no header", "192.0.2.7", std::nullopt, "192.0.2.7"},
      {"spoofed XFF from untrusted peer ignored", "192.0.2.7", "6.6.6.6", "192.0.2.7"},
      {"trusted proxy appends the client", "10.0.0.1", "192.0.2.9", "192.0.2.9"},
      {"client-supplied first hop ignored", "10.0.0.1", "6.6.6.6, 192.0.2.9", "192.0.2.9"},
      {"two trusted proxies", "10.0.0.1", "6.6.6.6, 192.0.2.9, 10.0.0.2", "192.0.2.9"},
      {"spaces and empty entries", "10.0.0.1", " 6.6.6.6 ,, 192.0.2.9 ,", "192.0.2.9"},
      {"trusted peer without header", "10.0.0.1", std::nullopt, "10.0.0.1"},
      {"only proxies in the chain", "10.0.0.1", "10.0.0.2", "10.0.0.1"},
  };
  for (const auto& c : cases) {
    http::identity::header_map headers;
    if (c.xff) headers["x-forwarded-for"] = *c.xff;
    EXPECT_EQ(client_address(headers, c.peer, proxies), c.want) << c.name;
  }
  EXPECT_EQ(client_address({{"x-forwarded-for", "6.6.6.6"}}, "10.0.0.1", {}), "10.0.0.1")
      << "no trusted proxies configured: the TCP peer";
}

TEST(RateLimitSubject, IdentityElseAddress) {
  EXPECT_EQ(rate_limit_subject(http::identity::identity{"alice", "jwt"}, "192.0.2.7"), "alice");
  EXPECT_EQ(rate_limit_subject(std::nullopt, "192.0.2.7"), "ip:192.0.2.7");
}

TEST(RateLimitedResponse, EnvelopeAndHeaders) {
  acquire_result r{false, 1500, 0, 2500};
  auto resp = rate_limited_response(r, 10, "Too many submissions, please try again later");
  EXPECT_EQ(resp.status, 429u);
  auto body = json::parse(resp.body);
  EXPECT_EQ(body["code"], "RATE_LIMITED");
  EXPECT_EQ(body["message"], "Too many submissions, please try again later");
  EXPECT_TRUE(body["data"].is_null());
  auto header = [&](const std::string& name) {
    for (auto& [k, v] : resp.headers)
      if (k == name) return v;
    return std::string("<absent>");
  };
  EXPECT_EQ(header("Retry-After"), "2") << "rounded up to whole seconds";
  EXPECT_EQ(header("RateLimit-Limit"), "10");
  EXPECT_EQ(header("RateLimit-Remaining"), "0");
  EXPECT_EQ(header("RateLimit-Reset"), "3");
  auto tiny = rate_limited_response({false, 1, 0, 0}, 10);
  for (auto& [k, v] : tiny.headers) {
    if (k == "Retry-After" || k == "RateLimit-Reset") {
      EXPECT_EQ(v, "1") << k << " is at least 1";
    }
  }
}
