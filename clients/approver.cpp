#include "clients/approver.hpp"

#include "base/log.hpp"
#include "config/snapshot.hpp"

#include <thread>

namespace changeflow::clients {

std::optional<std::vector<check_item>> check_items_cache::get(const std::string& project) const {
  std::lock_guard lock(mutex_);
  auto it = items_.find(project);
  if (it == items_.end()) return std::nullopt;
  return it->second;
}

void check_items_cache::put(const std::string& project, std::vector<check_item> items) {
  std::lock_guard lock(mutex_);
  items_[project] = std::move(items);
}

void check_items_cache::clear() {
  std::lock_guard lock(mutex_);
  items_.clear();
}

result<done> plain_approver::approve(gitlab_client& gitlab, check_items_cache&, const std::string& token,
                                     std::int64_t iid, const std::optional<std::string>& sha) const {
  return gitlab.approve(token, iid, sha);
}

result<done> check_items_approver::approve(gitlab_client& gitlab, check_items_cache& cache, const std::string& token,
                                           std::int64_t iid, const std::optional<std::string>& sha) const {
  auto items = cache.get(gitlab.project());
  if (!items) {
    auto fetched = gitlab.get_check_items(token);
    if (!fetched) return fetched.error();
    cache.put(gitlab.project(), fetched.value());
    items = std::move(fetched.value());
  }
  auto first = gitlab.approve(token, iid, sha, items);
  if (first || first.error().what != call_error::kind::http_status || first.error().status != 422) return first;

  // The project's check items changed since we cached them; the 422 body carries the list in
  // effect, which saves a read round trip. A 422 without a list is some other refusal: report it.
  std::vector<check_item> in_effect;
  try {
    in_effect = parse_check_items(first.error().body);
  } catch (const std::exception&) {
    return first;
  }
  log::info("gitlab.check_items_refreshed",
            {{"project", gitlab.project()}, {"mr_iid", iid}, {"items", static_cast<int>(in_effect.size())}});
  cache.put(gitlab.project(), in_effect);
  return gitlab.approve(token, iid, sha, in_effect);  // exactly one retry
}

const approver& approver_for(const config::snapshot& snap) {
  static const plain_approver plain;
  static const check_items_approver with_check_items;
  if (snap.gitlab().use_check_items) return with_check_items;
  return plain;
}

approval_retry_policy approval_retry_policy_from(const config::snapshot& snap) {
  approval_retry_policy p;
  p.max_retries = static_cast<int>(snap.approval().max_retries);
  p.backoff_base = std::chrono::milliseconds(snap.approval().backoff_base_ms);
  return p;
}

namespace {

// Fail-open: when the list cannot be read we act as before the check existed (go ahead and
// approve), so the check itself never becomes a new source of failure.
bool has_approval_from(gitlab_client& gitlab, const reviewer& bot, std::int64_t iid) {
  auto approvals = gitlab.get_approvals(bot.token, iid);
  if (!approvals) {
    log::warn("gitlab.approvals_unreadable",
              {{"mr_iid", iid}, {"user_id", bot.user_id}, {"error", describe(approvals.error())}});
    return false;
  }
  return approvals->has(bot.user_id);
}

}  // namespace

result<approval_outcome> approve_as_reviewer(gitlab_client& gitlab, check_items_cache& cache, const reviewer& bot,
                                             std::int64_t iid, const std::optional<std::string>& sha,
                                             const config::snapshot& snap, const sleep_function& sleep,
                                             const approvals_info* first_read) {
  const auto policy = approval_retry_policy_from(snap);
  std::optional<call_error> last;
  for (int attempt = 1; attempt <= policy.max_retries + 1; ++attempt) {
    const bool approved =
        attempt == 1 && first_read ? first_read->has(bot.user_id) : has_approval_from(gitlab, bot, iid);
    if (approved) return approval_outcome::already_approved;
    // The implementation is chosen per call from the snapshot the caller took for this job.
    auto r = approver_for(snap).approve(gitlab, cache, bot.token, iid, sha);
    if (r) return approval_outcome::approved;
    last = r.error();
    log::warn("gitlab.approve_failed",
              {{"mr_iid", iid}, {"user_id", bot.user_id}, {"attempt", attempt}, {"error", describe(r.error())}});
    // The head moved past `sha`: every retry with it is refused the same way; the caller reads the
    // MR for its head instead.
    if (head_moved(r.error())) return *last;
    if (attempt > policy.max_retries) break;
    auto delay = policy.backoff_base * (1LL << std::min(attempt - 1, 20));
    if (sleep) {
      sleep(delay);
    } else {
      std::this_thread::sleep_for(delay);
    }
  }
  // A duplicate approval and a refused one both answer 401; after the last attempt no later
  // attempt can correct us, so one more read decides.
  if (has_approval_from(gitlab, bot, iid)) return approval_outcome::already_approved;
  return *last;
}

result<done> approve_as_reviewers(gitlab_client& gitlab, check_items_cache& cache, const std::vector<reviewer>& bots,
                                  std::int64_t iid, const std::optional<std::string>& sha, const config::snapshot& snap,
                                  const sleep_function& sleep) {
  if (bots.empty()) return done{};
  // One read of the list serves every bot's first attempt: it names every account that approved,
  // and between it and a bot's first approve only this call's own approves of the other bots
  // come. Unreadable: each bot reads for itself, as alone (fail-open either way).
  std::optional<approvals_info> list;
  if (bots.size() > 1) {
    auto read = gitlab.get_approvals(bots.front().token, iid);
    if (read) {
      list = std::move(read.value());
    } else {
      log::warn("gitlab.approvals_unreadable", {{"mr_iid", iid}, {"error", describe(read.error())}});
    }
  }
  for (const auto& bot : bots) {
    auto res = approve_as_reviewer(gitlab, cache, bot, iid, sha, snap, sleep, list ? &*list : nullptr);
    if (!res) return res.error();
  }
  return done{};
}

}  // namespace changeflow::clients
