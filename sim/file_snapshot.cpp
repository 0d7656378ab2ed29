#include "sim/file_snapshot.hpp"

#include <iterator>

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
  l->changes = std::move(changes);
  while (l->parent && l->parent->changes.size() <= 2 * l->changes.size()) l = merged(*l->parent, *l);
  l->depth = l->parent ? l->parent->depth + 1 : 0;
  file_snapshot out;
  out.top_ = std::move(l);
  return out;
}

int file_snapshot::layers() const {
  return top_ ? top_->depth + 1 : 0;
}

std::size_t file_snapshot::top_entries() const {
  return top_ ? top_->changes.size() : 0;
}

std::shared_ptr<file_snapshot::layer> file_snapshot::merged(const layer& below, const layer& above) {
  auto out = std::make_shared<layer>();
  out->parent = below.parent;
  out->changes = below.changes;
  for (const auto& [path, file] : above.changes) out->changes[path] = file;
  if (!out->parent) {
    for (auto it = out->changes.begin(); it != out->changes.end();) {
      it = it->second ? std::next(it) : out->changes.erase(it);
    }
  }
  return out;
}

const sim_file* file_edit::find(const std::string& path) const {
  if (auto it = changes.find(path); it != changes.end()) return it->second ? &*it->second : nullptr;
  return from.find(path);
}

}  // namespace changeflow::sim
