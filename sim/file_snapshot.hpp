#pragma once
// The files of a commit in the simulated GitLab, and the files one commit is writing.
//
// A snapshot is never modified once made: a chain of small layers (what each commit wrote) over a
// full map. A commit costs what it wrote, not the size of the repository. (Copying the whole map per
// commit, and keeping every commit's copy so `ref=<sha>` can read it, made the sim's work and memory
// grow with every change merged: quadratic over a long run, 1.7 GB after a few thousand changes, and
// each change slower to simulate than the one before.) A chain longer than `max_depth` is folded
// into one full map, so a lookup reads at most `max_depth` + 1 small maps and a lineage pays one full
// copy per `max_depth` commits.

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace changeflow::sim {

// A file as a branch (or a commit) holds it: its content and the last commit that changed it
// (GitLab's `last_commit_id`).
struct sim_file {
  std::string content;
  std::string last_commit_id;
};

// What one commit wrote: a path's new version, or nullopt for a path it deleted.
using file_changes = std::map<std::string, std::optional<sim_file>>;

class file_snapshot {
 public:
  static constexpr int max_depth = 64;

  /// The file at `path`, or nullptr when these files do not have it.
  const sim_file* find(const std::string& path) const;
  /// These files with `changes` on top (a new snapshot; this one is unchanged).
  file_snapshot with(file_changes changes) const;
  /// Layers a lookup may read (1 for a folded or a first commit's snapshot).
  int layers() const;
  /// Entries held by the top layer alone: what the last commit wrote, or everything after a fold.
  std::size_t top_entries() const;

 private:
  struct layer {
    std::shared_ptr<const layer> parent;
    int depth = 0;  // layers below this one
    file_changes changes;
  };
  static std::shared_ptr<const layer> fold(const layer& top);
  std::shared_ptr<const layer> top_;
};

// Files being written by one commit: reads see its own writes over the snapshot it starts from.
struct file_edit {
  const file_snapshot& from;
  file_changes changes;

  const sim_file* find(const std::string& path) const;
  void put(const std::string& path, sim_file f) { changes[path] = std::move(f); }
  void erase(const std::string& path) { changes[path] = std::nullopt; }
  file_snapshot commit() { return from.with(std::move(changes)); }
};

}  // namespace changeflow::sim
