#pragma once
// Route table: method + path template ("/api/v1/changes/{id}") -> handler and policy. Metrics use
// the template, never the raw path, so label cardinality stays bounded.

#include "http/middleware/route_policy.hpp"
#include "http/route_table.hpp"
#include "http/server/message.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace changeflow::http {

using path_params = std::map<std::string, std::string, std::less<>>;
using route_handler = std::function<void(http_server::request&, const path_params&, http_server::responder)>;

struct route {
  std::string method;
  std::string pattern;
  route_handler handler;
  /// What the middleware chain enforces before the handler runs (rate limit, authorization,
  /// metrics); the default is an open route with no limits.
  middleware::route_policy policy{};
};

class router {
 public:
  void add(route r);
  /// A route_table entry and its handler: `r.add({routes::healthz, handler})`. Its policy is set
  /// from the table by build_routes.
  struct bound_route {
    const route_spec& spec;
    route_handler handler;
  };
  void add(bound_route b) { add(route{std::string(b.spec.method), std::string(b.spec.pattern), std::move(b.handler)}); }

  enum class match_kind { found, not_found, method_not_allowed };
  struct match_result {
    match_kind kind = match_kind::not_found;
    const route* matched = nullptr;
    path_params params;
    std::vector<std::string> allowed_methods;  // for 405
  };
  match_result match(std::string_view method, std::string_view path) const;
  const std::vector<route>& routes() const { return routes_; }

 private:
  /// A pattern's segments, split once when the route is added: `param` segments ("{id}") match any
  /// segment and name it.
  struct segment {
    std::string text;  // the literal, or the parameter's name
    bool param = false;
  };
  std::vector<route> routes_;
  std::vector<std::vector<segment>> segments_;  // routes_[i]'s pattern
};

/// Splits "/a/b/" into {"a", "b"}; empty segments are dropped.
std::vector<std::string_view> split_path(std::string_view path);

}  // namespace changeflow::http
