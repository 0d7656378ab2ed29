#pragma once
// Serves the built ops console (console/dist) under /console/ with the release-safe rules of seeds
// API 3.8:
//   - index.html (also for /console and /console/)          -> 200, Cache-Control: no-store
//   - hashed assets /console/assets/<name>-<hash>.<ext>      -> 200, max-age=31536000, public, immutable
//   - other existing files (favicon...)                      -> 200, Cache-Control: no-cache
//   - missing file, navigation (Accept has text/html AND the last segment has no extension)
//                                                            -> 200 app shell (index.html), no-store
//   - missing file, anything else (assets, API-ish, fetch)   -> 404 JSON envelope, no-store
//   - traversal ("..", "." segments, encoded %2e/%2f/%5c, backslash, NUL, or a path that resolves
//     outside console.dir through a symlink)                 -> 400 JSON envelope, no-store
//   - console.dir unset or missing                           -> 404 JSON envelope, no-store
// The directory is read from config on every request (console.dir is a restart key, but reading
// it per request keeps this function free of start-up state and testable with a temp dir).

#include "http/router.hpp"
#include "http/server/message.hpp"

#include <functional>
#include <string>

namespace changeflow::http {

/// The pure-ish core: answers one GET for `req` (path starting with /console) from `console_dir`.
/// Reads files; never throws.
http_server::response serve_console(const http_server::request& req, const std::string& console_dir);

/// True when `name` looks like a Vite content-hashed file: "<stem>-<hash>.<ext>" with a hash of
/// exactly 8 characters of [A-Za-z0-9_-] (Vite's default; '-' may occur inside the hash).
bool is_hashed_asset_name(std::string_view name);

/// Registers GET /console, /console/ and /console/<up to 6 segments> (open routes: the SPA shell and
/// assets carry no data; the API calls it makes are authorized on their own).
void add_console_routes(router& r, std::function<std::string()> console_dir);

}  // namespace changeflow::http
