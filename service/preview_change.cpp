#include "service/preview_change.hpp"

#include "base/log.hpp"
#include "service/unified_diff.hpp"

#include <memory>

namespace changeflow::service {

file_preview preview_file(const preview_input& in, const std::optional<clients::repository_file>& current) {
  file_preview out;
  out.path = in.path;
  out.exists = current.has_value();
  if (current) out.last_commit_id = current->last_commit_id;
  out.action = in.action == "upsert" ? (current ? "update" : "create") : in.action;
  if (out.action == "create" && current) out.problem = "the file exists already: use update or upsert";
  if ((out.action == "update" || out.action == "delete") && !current) out.problem = "the file does not exist";
  if (current && in.last_commit_id && *in.last_commit_id != current->last_commit_id) {
    out.problem =
        "the file changed since your change was based on it: rebase your change on " + current->last_commit_id;
  }
  diff_sides sides;
  if (current) sides.old_content = current->content;
  if (out.action != "delete") sides.new_content = in.content;
  out.diff = unified_diff(in.path, sides);
  return out;
}

void preview_change(runtime::services& svc, const std::string& repository, const std::string& target_branch,
                    std::vector<preview_input> files, std::function<void(preview_result)> done) {
  auto snap = svc.config->current();
  auto answer = std::make_shared<std::function<void(preview_result)>>(std::move(done));
  auto unavailable = [answer](std::string reason) {
    preview_result r;
    r.available = false;
    r.reason = std::move(reason);
    (*answer)(std::move(r));
  };
  bool queued = svc.external->try_submit(
      [snap, repository, target_branch, files = std::move(files), answer, unavailable](clients::external_context& ec) {
        try {
          ec.refresh(*snap);
          auto repo = ec.repository(*snap, repository);
          const auto target = repo.target_branch(target_branch);
          preview_result r;
          for (const auto& f : files) {
            auto current = repo.gitlab.get_file(repo.author_token, f.path, target);
            if (!current) {
              log::info("preview.read_failed", {{"path", f.path}, {"error", clients::describe(current.error())}});
              return unavailable("GitLab could not be read (" + clients::describe(current.error()) +
                                 "); the preview is empty, submitting still works");
            }
            r.files.push_back(preview_file(f, current.value()));
          }
          (*answer)(std::move(r));
        } catch (const std::exception& e) {
          log::error("preview.failed", {{"what", e.what()}});
          unavailable("the preview failed; submitting still works");
        }
      });
  if (!queued) unavailable("the service is busy; the preview is empty, submitting still works");
}

}  // namespace changeflow::service
