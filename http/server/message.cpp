#include "http/server/message.hpp"

#include <atomic>

namespace changeflow::http_server {

std::optional<std::string_view> request::header(std::string_view lower_name) const {
  auto it = headers.find(lower_name);
  if (it == headers.end()) return std::nullopt;
  return std::string_view(it->second);
}

std::optional<std::string> request::query_param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    auto eq = pair.find('=');
    std::string key = percent_decode(pair.substr(0, eq), true);
    if (key == name) {
      return eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
    }
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

response& response::set_header(std::string name, std::string value) {
  headers.emplace_back(std::move(name), std::move(value));
  return *this;
}

struct responder::state {
  sink out;
  std::atomic<bool> fired{false};
  ~state() {
    if (!fired.exchange(true) && out) {
      response r;
      r.status = 500;
      r.body = R"({"code":"INTERNAL_ERROR","message":"Internal error","data":null})";
      try {
        out(std::move(r));
      } catch (...) {
      }
    }
  }
};

responder::responder(sink s) : state_(std::make_shared<state>()) {
  state_->out = std::move(s);
}

void responder::operator()(response r) const {
  if (state_->fired.exchange(true)) return;
  state_->out(std::move(r));
}

bool responder::done() const {
  return state_->fired.load();
}

std::string percent_decode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%' && i + 2 < in.size()) {
      int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

}  // namespace changeflow::http_server
