#include "http/dto/change_dto.hpp"

#include "base/ids.hpp"
#include "base/log.hpp"
#include "effects/file_actions.hpp"
#include "workflow/status.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <string_view>

namespace changeflow::http::dto {

namespace {
constexpr std::size_t max_files = 100;
constexpr std::size_t max_content = 256 * 1024;

bool valid_text(const std::string& s, std::size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  for (unsigned char c : s) {
    if (c < 0x20 && c != '\t') return false;
  }
  return true;
}

bool valid_commit_id(const std::string& id) {
  if (id.size() != 40 && id.size() != 64) return false;
  return std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

bool valid_path(const std::string& p) {
  if (!valid_text(p, 512) || p.front() == '/') return false;
  std::size_t start = 0;
  while (start <= p.size()) {
    auto slash = p.find('/', start);
    if (slash == std::string::npos) slash = p.size();
    auto seg = p.substr(start, slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = slash + 1;
  }
  return true;
}

/// The optional client-chosen operation id (a UUID, lower-cased).
std::optional<parse_error> read_operation_id(const nlohmann::json& j, std::optional<std::string>& out) {
  if (!j.contains("operationId") || j["operationId"].is_null()) return std::nullopt;
  if (!j["operationId"].is_string() || !ids::is_uuid(j["operationId"].get<std::string>())) {
    return parse_error{"'operationId' must be a UUID"};
  }
  auto id = j["operationId"].get<std::string>();
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  out = id;
  return std::nullopt;
}

}  // namespace

// Written digit by digit: every status answer carries two of these, and gmtime_r with snprintf
// cost more than the rest of the answer's text together.
std::string ms_to_iso(std::int64_t ms) {
  std::int64_t secs = ms / 1000;
  std::int64_t milli = ms % 1000;
  if (milli < 0) {  // before 1970: floor, as gmtime_r does
    milli += 1000;
    secs -= 1;
  }
  std::int64_t days = secs / 86400;
  std::int64_t day_secs = secs % 86400;
  if (day_secs < 0) {
    day_secs += 86400;
    days -= 1;
  }
  // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar, as gmtime_r).
  const std::int64_t z = days + 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const std::int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  if (year < 0 || year > 9999) {  // beyond four digits: as the C library writes it
    std::time_t t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char wide[64];
    std::snprintf(wide, sizeof wide, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(milli));
    return wide;
  }
  char buf[25] = "0000-00-00T00:00:00.000Z";
  auto put = [&buf](int at, std::int64_t value, int width) {
    for (int i = width - 1; i >= 0; --i) {
      buf[at + i] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
  };
  put(0, year, 4);
  put(5, month, 2);
  put(8, day, 2);
  put(11, day_secs / 3600, 2);
  put(14, day_secs / 60 % 60, 2);
  put(17, day_secs % 60, 2);
  put(20, milli, 3);
  return std::string(buf, 24);
}

std::variant<submit_request, parse_error> parse_submit(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error{"Request body must be a JSON object"};
  submit_request r;
  // Who asks is the server's to know (the verified identity): a body naming someone is refused
  // rather than ignored, so a client that believes it can submit on another's behalf finds out.
  for (const char* forged : {"requester", "actor", "applicant"}) {
    if (j.contains(forged)) {
      return parse_error{std::string("'") + forged + "' is not accepted: the requester is the authenticated caller"};
    }
  }
  auto str = [&](const char* key, std::string& out, std::size_t max_len) -> std::optional<parse_error> {
    if (!j.contains(key) || !j[key].is_string()) return parse_error{std::string("'") + key + "' is required (string)"};
    out = j[key].get<std::string>();
    if (!valid_text(out, max_len)) {
      return parse_error{std::string("'") + key + "' must be 1-" + std::to_string(max_len) +
                         " characters without control characters"};
    }
    return std::nullopt;
  };
  if (auto e = str("subject", r.subject, 128)) return *e;
  if (auto e = str("target", r.target, 255)) return *e;
  if (auto e = str("title", r.title, 255)) return *e;
  // Optional: the repository (GitLab project path) and target branch. Only their shape is checked
  // here; whether they are configured is the handler's question (the configuration is hot).
  auto optional_str = [&](const char* key, std::optional<std::string>& out) -> std::optional<parse_error> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_string() || !valid_text(j[key].get<std::string>(), 255)) {
      return parse_error{std::string("'") + key + "' must be 1-255 characters without control characters"};
    }
    out = j[key].get<std::string>();
    return std::nullopt;
  };
  if (auto e = optional_str("repository", r.repository)) return *e;
  if (auto e = optional_str("targetBranch", r.target_branch)) return *e;
  if (auto e = read_operation_id(j, r.operation_id)) return *e;
  if (!j.contains("files") || !j["files"].is_array() || j["files"].empty()) {
    return parse_error{"'files' is required: a non-empty array of {path, content}"};
  }
  if (j["files"].size() > max_files) return parse_error{"'files' may hold at most 100 entries"};
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string()) {
      return parse_error{"each file needs a 'path' (string)"};
    }
    file_change fc;
    fc.path = f["path"].get<std::string>();
    if (!valid_path(fc.path)) return parse_error{"file path must be relative, without '.' or '..' segments"};
    if (f.contains("action")) {
      if (!f["action"].is_string()) return parse_error{"file 'action' must be create, update, delete or upsert"};
      fc.action = f["action"].get<std::string>();
      if (fc.action != "create" && fc.action != "update" && fc.action != "delete" && fc.action != "upsert") {
        return parse_error{"file 'action' must be create, update, delete or upsert"};
      }
    }
    if (f.contains("lastCommitId") && !f["lastCommitId"].is_null()) {
      if (!f["lastCommitId"].is_string() || !valid_commit_id(f["lastCommitId"].get<std::string>())) {
        return parse_error{"file 'lastCommitId' must be a commit id (40 or 64 hexadecimal characters)"};
      }
      if (fc.action == "create") {
        return parse_error{"file 'lastCommitId' does not apply to 'create': a file being created has no last commit"};
      }
      fc.last_commit_id = f["lastCommitId"].get<std::string>();
      std::transform(fc.last_commit_id->begin(), fc.last_commit_id->end(), fc.last_commit_id->begin(),
                     [](unsigned char c) { return std::tolower(c); });
    }
    if (fc.action != "delete") {
      if (!f.contains("content") || !f["content"].is_string()) return parse_error{"each file needs 'content' (string)"};
      fc.content = f["content"].get<std::string>();
      if (fc.content.size() > max_content) return parse_error{"file content may be at most 256 KiB"};
    }
    r.files.push_back(std::move(fc));
  }
  return r;
}

std::string payload_json(const submit_request& r) {
  std::vector<clients::commit_action> actions;
  for (const auto& f : r.files) {
    clients::commit_action a;
    a.file_path = f.path;
    a.content = f.content;
    a.action = f.action;
    a.last_commit_id = f.last_commit_id.value_or("");
    actions.push_back(std::move(a));
  }
  return effects::payload_of(actions);
}

nlohmann::json to_json(const persistence::operation_row& row) {
  auto phase = row.phase;
  return {{"operationId", row.operation_id},
          {"subject", row.subject_id},
          {"requester", row.requester.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.requester)},
          {"target", row.target_key},
          {"repository", row.repository},
          {"targetBranch", row.target_branch},
          {"title", row.title},
          {"flow", row.flow},
          {"phase", workflow::to_string(phase)},
          {"step", {{"code", workflow::code_of(row.step)}, {"name", workflow::to_string(row.step)}}},
          {"hint", workflow::to_string(workflow::hint_for(phase, row.step))},
          {"hintMessage", workflow::describe(workflow::hint_for(phase, row.step))},
          {"reapplyAllowed", workflow::is_reappliable(phase)},
          {"mrIid", row.mr_iid ? nlohmann::json(*row.mr_iid) : nlohmann::json(nullptr)},
          {"mrUrl", row.mr_url ? nlohmann::json(*row.mr_url) : nlohmann::json(nullptr)},
          {"revertOf", row.revert_of ? nlohmann::json(*row.revert_of) : nlohmann::json(nullptr)},
          {"revertedBy", row.reverted_by ? nlohmann::json(*row.reverted_by) : nlohmann::json(nullptr)},
          {"version", row.version},
          {"createdAt", ms_to_iso(row.created_at_ms)},
          {"updatedAt", ms_to_iso(row.updated_at_ms)}};
}

nlohmann::json to_json(const persistence::operation_event_row& e) {
  return {{"from", e.from_step ? nlohmann::json(workflow::to_string(*e.from_step)) : nlohmann::json(nullptr)},
          {"to", workflow::to_string(e.to_step)},
          {"fromPhase", e.from_phase ? nlohmann::json(workflow::to_string(*e.from_phase)) : nlohmann::json(nullptr)},
          {"toPhase", workflow::to_string(e.to_phase)},
          {"cause", e.cause},
          {"actor", e.actor},
          {"version", e.version},
          {"at", ms_to_iso(e.at_ms)}};
}

nlohmann::json status_document(const persistence::operation_row& row, bool live) {
  auto data = to_json(row);
  data["live"] = live;
  return data;
}

nlohmann::json status_document(const persistence::operation_row& row,
                               const std::vector<persistence::operation_event_row>& events, bool live) {
  auto data = status_document(row, live);
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& e : events) timeline.push_back(to_json(e));
  data["timeline"] = std::move(timeline);
  return data;
}

namespace {
/// Appends `s` as a JSON string exactly as the envelope's dump writes it: printable ASCII without
/// quote or backslash is copied; anything else (escapes, UTF-8, invalid bytes it replaces) goes
/// through the same dump.
void append_string(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f && c != '"' && c != '\\';
  });
  if (!plain) {
    out += log::safe_dump(nlohmann::json(std::string(s)));
    return;
  }
  out.push_back('"');
  out.append(s);
  out.push_back('"');
}

/// Writes one JSON object's members in the order given, each value already in its JSON form or a
/// string to quote.
class object_writer {
 public:
  explicit object_writer(std::string& out) : out_(out) { out_.push_back('{'); }
  object_writer& raw(std::string_view key, std::string_view json) {
    name(key);
    out_.append(json);
    return *this;
  }
  object_writer& text(std::string_view key, std::string_view value) {
    name(key);
    append_string(out_, value);
    return *this;
  }
  object_writer& maybe_text(std::string_view key, const std::optional<std::string>& value) {
    return value ? text(key, *value) : raw(key, "null");
  }
  /// A member whose value is an object, written in place by the writer returned (close it first).
  object_writer object(std::string_view key) {
    name(key);
    return object_writer(out_);
  }
  void close() { out_.push_back('}'); }

 private:
  void name(std::string_view key) {
    if (!first_) out_.push_back(',');
    first_ = false;
    out_.push_back('"');
    out_.append(key);
    out_.append("\":");
  }
  std::string& out_;
  bool first_ = true;
};
}  // namespace

std::string status_body(const persistence::operation_row& row, bool live) {
  const auto phase = row.phase;
  const auto hint = workflow::hint_for(phase, row.step);
  std::string out;
  out.reserve(1024);
  // Keys in the order the envelope's dump writes them (sorted, as its object type keeps them).
  object_writer envelope(out);
  envelope.text("code", "OK");
  auto data = envelope.object("data");
  data.text("createdAt", ms_to_iso(row.created_at_ms))
      .text("flow", row.flow)
      .text("hint", workflow::to_string(hint))
      .text("hintMessage", workflow::describe(hint))
      .raw("live", live ? "true" : "false")
      .raw("mrIid", row.mr_iid ? std::to_string(*row.mr_iid) : "null")
      .maybe_text("mrUrl", row.mr_url)
      .text("operationId", row.operation_id)
      .text("phase", workflow::to_string(phase))
      .raw("reapplyAllowed", workflow::is_reappliable(phase) ? "true" : "false")
      .text("repository", row.repository)
      .maybe_text("requester", row.requester.empty() ? std::nullopt : std::optional<std::string>(row.requester))
      .maybe_text("revertOf", row.revert_of)
      .maybe_text("revertedBy", row.reverted_by);
  data.object("step")
      .raw("code", std::to_string(workflow::code_of(row.step)))
      .text("name", workflow::to_string(row.step))
      .close();
  data.text("subject", row.subject_id)
      .text("target", row.target_key)
      .text("targetBranch", row.target_branch)
      .text("title", row.title)
      .text("updatedAt", ms_to_iso(row.updated_at_ms))
      .raw("version", std::to_string(row.version))
      .close();
  envelope.text("message", "OK").close();
  return out;
}

namespace {
/// A decimal number of at most 15 digits (no sign, no spaces): nullopt otherwise.
std::optional<std::int64_t> plain_number(const std::string& s) {
  if (s.empty() || s.size() > 15) return std::nullopt;
  std::int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}
}  // namespace

std::variant<status_params, parse_error> parse_status_params(const std::optional<std::string>& include,
                                                             const std::optional<std::string>& wait,
                                                             const std::optional<std::string>& since,
                                                             std::int64_t max_wait_ms) {
  status_params p;
  if (include) {
    if (*include != "timeline") return parse_error{"'include' accepts only 'timeline'"};
    p.timeline = true;
  }
  if (wait) {
    auto ms = plain_number(*wait);
    if (!ms || *ms > max_wait_ms) {
      return parse_error{"'wait' must be a number of milliseconds from 0 to " + std::to_string(max_wait_ms)};
    }
    p.wait_ms = *ms;
  }
  if (since) {
    if (!wait) return parse_error{"'since' applies to a wait: send 'wait' with it"};
    auto v = plain_number(*since);
    if (!v) return parse_error{"'since' must be a version (a non-negative number)"};
    p.since = *v;
  }
  return p;
}

std::variant<revert_request, parse_error> parse_revert(const std::string& body) {
  revert_request r;
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return r;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error{"Request body must be empty or a JSON object"};
  for (const auto& [key, value] : j.items()) {
    if (key != "operationId") {
      return parse_error{"'" + key.substr(0, 64) +
                         "' is not accepted: a revert takes its subject, target, title and files from the change "
                         "it reverts (the body may only name the revert's operationId)"};
    }
  }
  if (auto e = read_operation_id(j, r.operation_id)) return *e;
  return r;
}

std::variant<cancel_request, parse_error> parse_cancel(const std::string& body) {
  cancel_request r;
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return r;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error{"Request body must be empty or a JSON object"};
  if (j.contains("reason") && !j["reason"].is_null()) {
    if (!j["reason"].is_string() || !valid_text(j["reason"].get<std::string>(), 500)) {
      return parse_error{"'reason' must be 1-500 characters without control characters"};
    }
    r.reason = j["reason"].get<std::string>();
  }
  return r;
}

}  // namespace changeflow::http::dto
