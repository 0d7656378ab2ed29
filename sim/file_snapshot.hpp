#pragma once
// The files of a commit in the simulated GitLab, and the files one commit is writing.
//
// A snapshot is never modified once made: a chain of layers (what each commit wrote) whose sizes
// at least double from the top down. A new commit's layer is merged with the layer below it while
// that one holds no more than twice as many entries (as in a binary counter), so a lookup reads
// about log2(files) + 1 layers and every entry is copied about log2(commits) times over its life.
// Every commit's snapshot stays readable (`ref=<sha>`) and shares all the layers below its own top
// with its neighbours, so the memory kept for a lineage of n commits grows as n log n. (A full copy
// of the files per commit, or a full copy every k commits, would each stay alive for `ref=<sha>`:
// memory and work quadratic in the changes run, each change slower to simulate than the one before.)

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
  /// `below`'s entries with `above`'s written over them, on `below`'s parent; a deletion is kept
  /// as a mark unless nothing lies below.
  static std::shared_ptr<layer> merged(const layer& below, const layer& above);
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
