#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace changeflow::ids {

/// Random RFC 4122 version-4 UUID, lower case.
std::string new_uuid();
/// Time-ordered UUID (RFC 9562 version 7), lower case: 48 bits of Unix milliseconds, then a 12-bit
/// counter and 62 random bits. Ids made later by this process sort after earlier ones (as text and
/// as bytes), so a B-tree keyed by them grows at its end instead of at random pages: the ids of
/// changes, whose rows and timeline are keyed by them.
std::string new_time_ordered_uuid();
/// A UUID (version-5 layout) derived from `name` by SHA-256: the same name always gives the same id.
std::string uuid_from_name(std::string_view name);
/// True for a canonical 36-character UUID (any version, either case).
bool is_uuid(std::string_view s);
/// `bytes` random bytes from the system's cryptographic generator, as lower-case hex (secrets).
std::string random_hex(std::size_t bytes);
/// Short random id for error references in logs and responses.
std::string new_error_id();
/// Lower-case hex SHA-256 of the input.
std::string sha256_hex(std::string_view data);
/// Lower-case hex HMAC-SHA256.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);
/// Compares in time independent of where the first difference is.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace changeflow::ids
