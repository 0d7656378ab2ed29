#pragma once
// Per-instance sliding-window-log rate limiting.
//
// Known trade-offs, accepted and stated here so nobody "fixes" them by accident:
// - Rate limiting runs BEFORE the idempotency check (it is the first link of the chain, before the
//   body is even parsed). A duplicate submission over quota therefore gets 429 RATE_LIMITED, not
//   202 DUPLICATE_SUBMIT. The client retries after Retry-After and then receives the duplicate
//   answer.
// - The limiter is per instance: the effective global quota is about limit x instances (no shared
//   cache is available for rate limiting).
// - The subject prefers the login identity, so one person on several tabs/browsers shares a quota.
//   Without identity it falls back to the client address, never to a shared bucket that any single
//   caller could exhaust for everyone else.

#include "config/snapshot.hpp"
#include "http/identity/resolver.hpp"
#include "http/middleware/route_policy.hpp"
#include "http/server/message.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace changeflow::http::middleware {

struct acquire_result {
  bool allowed = false;
  /// Milliseconds until one more request would be admitted; 0 when allowed.
  std::int64_t retry_after_ms = 0;
  /// Requests still admissible in the current window after this one.
  std::int64_t remaining = 0;
  /// Milliseconds until the oldest counted request leaves the window (quota starts to refill).
  std::int64_t reset_ms = 0;
};

class rate_limiter {
 public:
  explicit rate_limiter(std::size_t shard_count = 64);

  /// Evicts timestamps older than the window, checks, and appends — atomically per key.
  /// Time is an input (milliseconds on any monotonic-enough scale) so tests control it.
  /// limit <= 0 admits everything and records nothing; window_ms <= 0 is treated as 60000.
  acquire_result try_acquire(const std::string& key, std::int64_t limit, std::int64_t window_ms, std::int64_t now_ms);

  /// Removes every bucket whose newest timestamp has left its window. Also run incrementally by
  /// try_acquire, so keys of callers that went away (ip:...) do not accumulate.
  void evict_expired(std::int64_t now_ms);

  /// Number of live buckets (tests: empty buckets are removed).
  std::size_t bucket_count() const;

 private:
  struct bucket {
    std::deque<std::int64_t> stamps;
    std::int64_t window_ms = 0;
  };
  struct shard {
    mutable std::mutex mutex;
    std::unordered_map<std::string, bucket> buckets;
    std::uint64_t operations = 0;
  };
  shard& shard_for(const std::string& key);
  static void sweep_locked(shard& s, std::int64_t now_ms);

  std::vector<std::unique_ptr<shard>> shards_;
};

constexpr std::int64_t default_window_ms = 60000;

struct rate_limit_settings {
  std::int64_t limit = 0;
  std::int64_t window_ms = default_window_ms;
};

/// Reads the limit `limit` and rate_limit.window_ms from the snapshot (every request).
/// No limit setting, missing, cleared or <= 0 limit -> nullopt = no limiting (misconfiguration must
/// not block traffic). Window missing or <= 0 -> 60000 (config/keys.cpp).
std::optional<rate_limit_settings> rate_limit_policy(const config::snapshot& snap, limit_setting limit);

/// The client address as appended by our own trusted proxy. When the TCP peer is a trusted proxy,
/// the rightmost X-Forwarded-For entry that is not itself a trusted proxy; otherwise the TCP peer.
/// Never the first, client-supplied hop (clients can forge it).
std::string client_address(const identity::header_map& headers, std::string_view peer_address,
                           const std::vector<std::string>& trusted_proxies);

/// Identity account when resolved, else "ip:" + client address.
std::string rate_limit_subject(const std::optional<identity::identity>& who, std::string_view client_addr);

/// 429 envelope {code: RATE_LIMITED, message, data: null} with Retry-After (seconds, >= 1) and
/// RateLimit-Limit / RateLimit-Remaining / RateLimit-Reset (seconds) headers.
http_server::response rate_limited_response(const acquire_result& r, std::int64_t limit,
                                            std::string_view message = "Too many requests, please try again later");

}  // namespace changeflow::http::middleware
