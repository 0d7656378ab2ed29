#pragma once
// A bounded map that forgets its oldest entries first, one at a time.
//
// A cache that is emptied when it fills forgets everything at once, and freeing thousands of
// entries in one go stalls whoever waits on the cache's lock (the status reads' kept rows did, and
// it showed in their p99). Here every put that passes the bound drops the oldest entry, and entries
// past an age are dropped from the old end a few per call, so no call frees more than a few
// entries and the map never empties at once.
//
// "Oldest" is by the last put of a key: putting a key that is present makes it the newest. The
// entries are linked from the oldest to the newest inside the map's own nodes (a node of an
// unordered_map keeps its address until it is erased), so keeping the order costs no allocation.
//
// Not thread-safe: the owner's lock guards it. Neither copied nor moved (the links point into it).

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace changeflow {

template <class V>
class fifo_map {
  // A put links the entry before its value moves in; a move that could throw would leave a
  // default value behind.
  static_assert(std::is_nothrow_move_assignable_v<V>, "fifo_map values must move without throwing");

 public:
  explicit fifo_map(std::size_t max_entries) : max_(std::max<std::size_t>(1, max_entries)) {}
  fifo_map(const fifo_map&) = delete;
  fifo_map& operator=(const fifo_map&) = delete;

  V* find(const std::string& key) {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second.value;
  }
  const V* find(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second.value;
  }

  /// Puts `value` as the newest entry. Past the bound the oldest entries go, each handed to
  /// `dropped(key, value)` first.
  template <class Dropped>
  void put(const std::string& key, V value, Dropped&& dropped) {
    auto [it, added] = map_.try_emplace(key);
    auto& e = it->second;
    if (added) {
      e.key = &it->first;
    } else {
      unlink(e);
    }
    link_newest(e);  // linked before the value moves in, so no entry is ever outside the order
    e.value = std::move(value);
    while (map_.size() > max_) {
      dropped(*oldest_->key, oldest_->value);
      remove(*oldest_);
    }
  }
  void put(const std::string& key, V value) {
    put(key, std::move(value), [](const std::string&, const V&) {});
  }

  void erase(const std::string& key) {
    if (auto it = map_.find(key); it != map_.end()) remove(it->second);
  }

  /// Drops entries from the oldest on while `old(value)` holds, at most `limit` of them.
  template <class Old>
  void drop_oldest_while(Old&& old, std::size_t limit) {
    for (; limit > 0 && oldest_ && old(oldest_->value); --limit) remove(*oldest_);
  }

  std::size_t size() const { return map_.size(); }

 private:
  struct entry {
    V value{};
    const std::string* key = nullptr;  // the node's own key
    entry* older = nullptr;
    entry* newer = nullptr;
  };

  void link_newest(entry& e) {
    e.older = newest_;
    e.newer = nullptr;
    (newest_ ? newest_->newer : oldest_) = &e;
    newest_ = &e;
  }
  void unlink(entry& e) {
    (e.older ? e.older->newer : oldest_) = e.newer;
    (e.newer ? e.newer->older : newest_) = e.older;
  }
  void remove(entry& e) {
    unlink(e);
    map_.erase(map_.find(*e.key));
  }

  std::unordered_map<std::string, entry> map_;
  entry* oldest_ = nullptr;
  entry* newest_ = nullptr;
  std::size_t max_;
};

}  // namespace changeflow
