#include "actors/registry.hpp"

namespace changeflow::actors {

bool registry::put(const std::string& id, caf::actor actor, live_summary summary) {
  std::lock_guard lock(mutex_);
  return entries_.emplace(id, entry{std::move(actor), std::move(summary)}).second;
}

void registry::update(const live_summary& summary) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(summary.operation_id);
  if (it != entries_.end()) it->second.summary = summary;
}

bool registry::remove_if_is(const std::string& id, const caf::actor_addr& who) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.actor.address() != who) return false;
  entries_.erase(it);
  return true;
}

bool registry::send_if_present(const std::string& id, const std::function<void(const caf::actor&)>& send) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  send(it->second.actor);
  return true;
}

std::optional<caf::actor> registry::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.actor;
}

std::optional<live_summary> registry::summary(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.summary;
}

std::vector<live_summary> registry::list(const std::function<bool(const live_summary&)>& keep,
                                         std::size_t limit) const {
  std::vector<live_summary> out;
  std::lock_guard lock(mutex_);
  for (const auto& [id, e] : entries_) {
    if (out.size() >= limit) break;
    if (!keep || keep(e.summary)) out.push_back(e.summary);
  }
  return out;
}

std::size_t registry::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::unordered_map<int, std::size_t> registry::count_by_step() const {
  std::unordered_map<int, std::size_t> out;
  std::lock_guard lock(mutex_);
  for (const auto& [id, e] : entries_) ++out[e.summary.step];
  return out;
}

}  // namespace changeflow::actors
