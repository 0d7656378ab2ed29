#include "http/handlers/static_files.hpp"

#include "base/log.hpp"
#include "http/envelope.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace changeflow::http {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view prefix = "/console";
constexpr std::string_view no_store = "no-store";
constexpr std::string_view immutable = "max-age=31536000, public, immutable";
// Non-hashed files (favicon, robots) may change with a release: revalidate every time.
constexpr std::string_view revalidate = "no-cache";
constexpr std::uintmax_t max_file_bytes = 16u << 20;

http_server::response json_no_store(unsigned status, std::string_view code, std::string_view message) {
  auto r = client_error(status, code, message);
  r.set_header("Cache-Control", std::string(no_store));
  return r;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view content_type_for(std::string_view ext) {
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json" || ext == ".map") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".woff2") return "font/woff2";
  if (ext == ".txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

std::optional<std::string> read_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec) || ec) return std::nullopt;
  auto size = fs::file_size(p, ec);
  if (ec || size > max_file_bytes) return std::nullopt;
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buf;
  buf << in.rdbuf();
  if (!in.good() && !in.eof()) return std::nullopt;
  return buf.str();
}

http_server::response file_response(std::string body, std::string_view ext, std::string_view cache) {
  http_server::response r;
  r.status = 200;
  r.content_type = std::string(content_type_for(ext));
  r.body = std::move(body);
  r.set_header("Cache-Control", std::string(cache));
  r.set_header("X-Content-Type-Options", "nosniff");
  return r;
}

/// Raw (still encoded) path of the request target, for checks the decoded path cannot express.
std::string_view raw_path(const http_server::request& req) {
  std::string_view t = req.target;
  auto q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

/// Traversal in any spelling: encoded dots/slashes/backslashes in the raw target, and dot segments,
/// backslashes or NULs in the decoded one. Legit console URLs never contain any of these.
bool looks_like_traversal(const http_server::request& req, const std::vector<std::string_view>& segments) {
  auto raw = lower(raw_path(req));
  for (std::string_view bad : {"%2e", "%2f", "%5c", "%00", "\\"}) {
    if (raw.find(bad) != std::string::npos) return true;
  }
  for (auto s : segments) {
    if (s == ".." || s == ".") return true;
    if (s.find('\\') != std::string_view::npos || s.find('\0') != std::string_view::npos) return true;
  }
  return false;
}

bool is_navigation(const http_server::request& req, std::string_view last_segment) {
  auto accept = req.header("accept");
  if (!accept || accept->find("text/html") == std::string_view::npos) return false;
  return last_segment.find('.') == std::string_view::npos;
}

}  // namespace

bool is_hashed_asset_name(std::string_view name) {
  // Vite's form: "<stem>-<8 chars of [A-Za-z0-9_-]>.<ext>". The hash alphabet includes '-', so the
  // hash is the LAST 8 characters of the stem, not whatever follows the last dash.
  constexpr std::size_t hash_len = 8;
  auto dot = name.rfind('.');
  if (dot == std::string_view::npos) return false;
  auto stem = name.substr(0, dot);
  if (stem.size() < hash_len + 2 || stem[stem.size() - hash_len - 1] != '-') return false;
  auto hash = stem.substr(stem.size() - hash_len);
  return std::all_of(hash.begin(), hash.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
}

http_server::response serve_console(const http_server::request& req, const std::string& console_dir) {
  try {
    std::string_view path = req.path;
    if (path.substr(0, prefix.size()) != prefix) return json_no_store(404, "NOT_FOUND", "No such endpoint");
    auto segments = split_path(path.substr(prefix.size()));
    if (looks_like_traversal(req, segments)) {
      return json_no_store(400, "BAD_REQUEST", "Invalid path");
    }
    if (console_dir.empty()) return json_no_store(404, "NOT_FOUND", "The console is not installed on this server");
    std::error_code ec;
    auto root = fs::canonical(console_dir, ec);
    if (ec || !fs::is_directory(root, ec)) {
      return json_no_store(404, "NOT_FOUND", "The console is not installed on this server");
    }
    auto index = root / "index.html";
    auto shell = [&]() -> http_server::response {
      auto body = read_file(index);
      if (!body) return json_no_store(404, "NOT_FOUND", "The console is not installed on this server");
      return file_response(std::move(*body), ".html", no_store);
    };
    if (segments.empty()) return shell();

    fs::path rel;
    for (auto s : segments) rel /= std::string(s);
    auto candidate = fs::weakly_canonical(root / rel, ec);
    if (ec) candidate = root / rel;
    // Symlinks (or anything else) resolving outside the console directory are refused outright.
    auto root_text = root.string() + "/";
    if (candidate.string().compare(0, root_text.size(), root_text) != 0) {
      return json_no_store(400, "BAD_REQUEST", "Invalid path");
    }
    auto last = segments.back();
    if (candidate == index) return shell();
    if (auto body = read_file(candidate)) {
      auto ext = lower(candidate.extension().string());
      bool hashed = segments.size() == 2 && segments.front() == "assets" && is_hashed_asset_name(last);
      return file_response(std::move(*body), ext, hashed ? immutable : revalidate);
    }
    // Missing: a page navigation (deep link, or an old tab after a release) gets the shell; an asset
    // or programmatic request gets a JSON 404 so a script never parses HTML as JavaScript.
    if (is_navigation(req, last)) return shell();
    return json_no_store(404, "NOT_FOUND", "No such file");
  } catch (const std::exception& e) {
    auto r = internal_error(std::string("console serving failed: ") + e.what());
    r.set_header("Cache-Control", std::string(no_store));
    return r;
  }
}

void add_console_routes(router& r, std::function<std::string()> console_dir) {
  auto handler = [console_dir](http_server::request& req, const path_params&, http_server::responder reply) {
    reply(serve_console(req, console_dir ? console_dir() : std::string()));
  };
  for (const route_spec* spec : routes::console) r.add({*spec, handler});
}

}  // namespace changeflow::http
