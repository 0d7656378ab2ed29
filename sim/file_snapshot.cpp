#include "sim/file_snapshot.hpp"

#include <vector>

namespace changeflow::sim {

const sim_file* file_snapshot::find(const std::string& path) const {
  for (const layer* l = top_.get(); l; l = l->parent.get()) {
    if (auto it = l->changes.find(path); it != l->changes.end()) return it->second ? &*it->second : nullptr;
  }
  return nullptr;
}

file_snapshot file_snapshot::with(file_changes changes) const {
  if (changes.empty()) return *this;
  auto l = std::make_shared<layer>();
  l->parent = top_;
  l->depth = top_ ? top_->depth + 1 : 0;
  l->changes = std::move(changes);
  file_snapshot out;
  if (l->depth > max_depth) {
    out.top_ = fold(*l);
  } else {
    out.top_ = std::move(l);
  }
  return out;
}

int file_snapshot::layers() const {
  return top_ ? top_->depth + 1 : 0;
}

std::size_t file_snapshot::top_entries() const {
  return top_ ? top_->changes.size() : 0;
}

std::shared_ptr<const file_snapshot::layer> file_snapshot::fold(const layer& top) {
  std::vector<const layer*> chain;
  for (const layer* l = &top; l; l = l->parent.get()) chain.push_back(l);
  auto base = std::make_shared<layer>();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const auto& [path, file] : (*it)->changes) {
      if (file) {
        base->changes[path] = file;
      } else {
        base->changes.erase(path);
      }
    }
  }
  return base;
}

const sim_file* file_edit::find(const std::string& path) const {
  if (auto it = changes.find(path); it != changes.end()) return it->second ? &*it->second : nullptr;
  return from.find(path);
}

}  // namespace changeflow::sim
