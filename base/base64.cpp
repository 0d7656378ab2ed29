#include "base/base64.hpp"

#include <array>

namespace changeflow::base64 {

namespace {
constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int value_of(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    auto n = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
             static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += alphabet[(n >> 6) & 63];
    out += alphabet[n & 63];
  }
  if (auto rest = bytes.size() - i; rest > 0) {
    auto n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += rest == 2 ? alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> decode(std::string_view text) {
  std::string out;
  std::array<int, 4> quad{};
  int have = 0;
  int padding = 0;
  for (unsigned char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      quad[have++] = 0;
    } else {
      if (padding > 0) return std::nullopt;  // data after padding
      int v = value_of(c);
      if (v < 0) return std::nullopt;
      quad[have++] = v;
    }
    if (have == 4) {
      if (padding > 2) return std::nullopt;
      auto n = (quad[0] << 18) | (quad[1] << 12) | (quad[2] << 6) | quad[3];
      out += static_cast<char>((n >> 16) & 0xff);
      if (padding < 2) out += static_cast<char>((n >> 8) & 0xff);
      if (padding < 1) out += static_cast<char>(n & 0xff);
      have = 0;
      if (padding > 0) padding = 3;  // nothing may follow a padded quad
    }
  }
  if (have != 0) return std::nullopt;
  return out;
}

}  // namespace changeflow::base64
