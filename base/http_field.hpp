#pragma once
// One HTTP header line written by hand, as the server's replies and the client's requests are:
// "Name: value\r\n", with what HTTP does not allow there dropped, so no header can be injected
// (RFC 9110: a name is token characters; a value is visible characters, space, tab and bytes above
// 0x7f; control characters, CR and LF among them, never).

#include <cctype>
#include <string>
#include <string_view>

namespace changeflow {

/// Header names compare without regard to case.
inline bool same_http_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

inline void append_http_field(std::string& out, std::string_view name, std::string_view value) {
  static constexpr std::string_view symbols = "!#$%&'*+-.^_`|~";
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || symbols.find(c) != std::string_view::npos) out.push_back(c);
  }
  out += ": ";
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u != 0x7f) || c == '\t') out.push_back(c);
  }
  out += "\r\n";
}

}  // namespace changeflow
