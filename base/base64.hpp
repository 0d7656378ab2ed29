#pragma once
// Standard base64 (RFC 4648, with padding): GitLab's repository files API returns file content in it.

#include <optional>
#include <string>
#include <string_view>

namespace changeflow::base64 {

std::string encode(std::string_view bytes);
/// nullopt for input that is not padded standard base64 (whitespace such as line breaks is skipped).
std::optional<std::string> decode(std::string_view text);

}  // namespace changeflow::base64
