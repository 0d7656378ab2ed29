#include "http/middleware/rate_limiter.hpp"

#include "http/envelope.hpp"

#include <algorithm>
#include <functional>

namespace changeflow::http::middleware {

namespace {

// Sweep one shard every this many operations on it: bounded work per call, bounded memory overall.
constexpr std::uint64_t sweep_every = 256;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::int64_t ceil_seconds(std::int64_t ms) {
  return std::max<std::int64_t>(1, (ms + 999) / 1000);
}

}  // namespace

rate_limiter::rate_limiter(std::size_t shard_count) {
  shards_.reserve(std::max<std::size_t>(1, shard_count));
  for (std::size_t i = 0; i < std::max<std::size_t>(1, shard_count); ++i) shards_.push_back(std::make_unique<shard>());
}

rate_limiter::shard& rate_limiter::shard_for(const std::string& key) {
  return *shards_[std::hash<std::string>{}(key) % shards_.size()];
}

void rate_limiter::sweep_locked(shard& s, std::int64_t now_ms) {
  for (auto it = s.buckets.begin(); it != s.buckets.end();) {
    auto& b = it->second;
    while (!b.stamps.empty() && now_ms - b.stamps.front() >= b.window_ms) b.stamps.pop_front();
    it = b.stamps.empty() ? s.buckets.erase(it) : std::next(it);
  }
}

acquire_result rate_limiter::try_acquire(const std::string& key, std::int64_t limit, std::int64_t window_ms,
                                         std::int64_t now_ms) {
  if (limit <= 0) return {true, 0, 0, 0};
  if (window_ms <= 0) window_ms = default_window_ms;

  auto& s = shard_for(key);
  std::lock_guard lock(s.mutex);
  if (++s.operations % sweep_every == 0) sweep_locked(s, now_ms);

  auto& b = s.buckets[key];
  b.window_ms = window_ms;  // the latest configured window applies (hot reload)
  while (!b.stamps.empty() && now_ms - b.stamps.front() >= window_ms) b.stamps.pop_front();

  acquire_result r;
  if (static_cast<std::int64_t>(b.stamps.size()) < limit) {
    b.stamps.push_back(now_ms);
    r.allowed = true;
  }
  auto count = static_cast<std::int64_t>(b.stamps.size());
  r.remaining = std::max<std::int64_t>(0, limit - count);
  if (!b.stamps.empty()) {
    // Admitting one more needs the (count - limit + 1)-th oldest stamp to leave the window; after
    // a limit lowered by hot reload that may be later than the oldest one.
    std::int64_t must_expire = std::max<std::int64_t>(0, count - limit);
    auto frees_at = b.stamps[static_cast<std::size_t>(std::min<std::int64_t>(must_expire, count - 1))] + window_ms;
    r.reset_ms = std::max<std::int64_t>(0, b.stamps.front() + window_ms - now_ms);
    r.retry_after_ms = r.allowed ? 0 : std::max<std::int64_t>(1, frees_at - now_ms);
  }
  if (b.stamps.empty()) s.buckets.erase(key);
  return r;
}

void rate_limiter::evict_expired(std::int64_t now_ms) {
  for (auto& s : shards_) {
    std::lock_guard lock(s->mutex);
    sweep_locked(*s, now_ms);
  }
}

std::size_t rate_limiter::bucket_count() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s->mutex);
    n += s->buckets.size();
  }
  return n;
}

std::optional<rate_limit_settings> rate_limit_policy(const config::snapshot& snap, limit_setting limit) {
  if (!limit) return std::nullopt;
  const auto& configured = snap.rate_limit().*limit;  // cleared or <= 0: nullopt (stop limiting, don't block all)
  if (!configured) return std::nullopt;
  return rate_limit_settings{*configured, snap.rate_limit().window_ms};
}

std::string client_address(const identity::header_map& headers, std::string_view peer_address,
                           const std::vector<std::string>& trusted_proxies) {
  auto trusted = [&](std::string_view addr) {
    return std::find(trusted_proxies.begin(), trusted_proxies.end(), addr) != trusted_proxies.end();
  };
  if (!trusted(peer_address)) return std::string(peer_address);
  auto xff = headers.find("x-forwarded-for");
  if (xff == headers.end()) return std::string(peer_address);
  // Walk from the right: each trusted proxy appended the address it received the request from.
  // The first hop we do not trust is the client as our proxies saw it; anything left of it is
  // whatever the client chose to send.
  std::string_view rest = xff->second;
  while (!rest.empty()) {
    auto comma = rest.rfind(',');
    auto hop = trim(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(0, comma);
    if (hop.empty()) continue;
    if (!trusted(hop)) return std::string(hop);
  }
  return std::string(peer_address);  // every hop is a proxy of ours: the closest one is the best we know
}

std::string rate_limit_subject(const std::optional<identity::identity>& who, std::string_view client_addr) {
  if (who && !who->account.empty()) return who->account;
  return "ip:" + std::string(client_addr);
}

http_server::response rate_limited_response(const acquire_result& r, std::int64_t limit, std::string_view message) {
  auto resp = envelope(429, "RATE_LIMITED", message);
  resp.set_header("Retry-After", std::to_string(ceil_seconds(r.retry_after_ms)));
  resp.set_header("RateLimit-Limit", std::to_string(limit));
  resp.set_header("RateLimit-Remaining", std::to_string(r.remaining));
  resp.set_header("RateLimit-Reset", std::to_string(ceil_seconds(r.reset_ms)));
  return resp;
}

}  // namespace changeflow::http::middleware
