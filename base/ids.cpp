#include "base/ids.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>

namespace changeflow::ids {
namespace {
std::string to_hex(const unsigned char* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 0xf]);
  }
  return out;
}

/// The 16 bytes as a canonical UUID text (8-4-4-4-12 lower-case hex digits).
std::string uuid_text(const std::array<unsigned char, 16>& b) {
  const std::string hex = to_hex(b.data(), b.size());
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" + hex.substr(16, 4) + "-" +
         hex.substr(20, 12);
}

void random_bytes(unsigned char* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    thread_local std::mt19937_64 fallback{std::random_device{}()};
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(fallback());
  }
}

// A child process must not hand out the bytes its parent already handed out: fork() bumps the
// generation, and a thread's reserve from an older generation is thrown away.
std::atomic<unsigned> fork_generation{0};
[[maybe_unused]] const bool fork_hook_installed = [] {
  return ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1, std::memory_order_relaxed); }) == 0;
}();

/// Random bytes for ids, drawn from the cryptographic generator 4 KB at a time per thread. OpenSSL
/// 3's generator costs about as much for 16 bytes as for 4 KB (it re-keys and checks the process
/// id on every call), and every submission takes an id. Secrets (`random_hex`) draw directly.
void id_random_bytes(unsigned char* out, size_t n) {
  struct reserve {
    std::array<unsigned char, 4096> bytes{};
    size_t used = 4096;
    unsigned generation = 0;
  };
  thread_local reserve r;
  const unsigned generation = fork_generation.load(std::memory_order_relaxed);
  if (n > r.bytes.size()) return random_bytes(out, n);
  if (r.generation != generation || r.bytes.size() - r.used < n) {
    random_bytes(r.bytes.data(), r.bytes.size());
    r.used = 0;
    r.generation = generation;
  }
  std::memcpy(out, r.bytes.data() + r.used, n);
  OPENSSL_cleanse(r.bytes.data() + r.used, n);
  r.used += n;
}

/// HMAC-SHA256 with the algorithm looked up once and one context per thread: OpenSSL 3's one-shot
/// HMAC() fetches the algorithm from the provider store on every call. False when OpenSSL could not
/// set one up; the caller then uses the one-shot call.
bool hmac_sha256_reused(std::string_view key, std::string_view data, unsigned char* md, size_t* len) {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) return false;
  struct context {
    EVP_MAC_CTX* ctx = nullptr;
    context() {
      ctx = EVP_MAC_CTX_new(mac);
      char digest[] = "SHA256";
      const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                   OSSL_PARAM_construct_end()};
      if (ctx && EVP_MAC_CTX_set_params(ctx, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = nullptr;
      }
    }
    ~context() { EVP_MAC_CTX_free(ctx); }
    context(const context&) = delete;
    context& operator=(const context&) = delete;
  };
  thread_local context c;
  // An empty key is a valid HMAC key, but OpenSSL reads a null key as "keep the last one".
  static const unsigned char no_key = 0;
  const auto* k = key.empty() ? &no_key : reinterpret_cast<const unsigned char*>(key.data());
  return c.ctx && EVP_MAC_init(c.ctx, k, key.size(), nullptr) == 1 &&
         EVP_MAC_update(c.ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1 &&
         EVP_MAC_final(c.ctx, md, len, EVP_MAX_MD_SIZE) == 1;
}
}  // namespace

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  random_bytes(reinterpret_cast<unsigned char*>(raw.data()), raw.size());
  return to_hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

std::string new_uuid() {
  std::array<unsigned char, 16> b{};
  id_random_bytes(b.data(), b.size());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  return uuid_text(b);
}

std::string new_time_ordered_uuid() {
  // RFC 9562, method 1 of section 6.2: a counter in rand_a orders the ids of one millisecond; it
  // starts at a random value below 0x400 each new millisecond (so it is not guessable and leaves room),
  // and when it would overflow, or the clock steps back, the timestamp is carried on from the last id.
  static std::mutex mutex;
  static std::uint64_t last_ms = 0;
  static std::uint32_t counter = 0;
  std::array<unsigned char, 16> b{};
  id_random_bytes(b.data(), b.size());
  auto ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  std::uint32_t seq = 0;
  {
    std::lock_guard lock(mutex);
    if (ms <= last_ms) {
      ms = last_ms;
      if (++counter > 0x0fff) {
        ++ms;
        counter = static_cast<std::uint32_t>(b[6] & 0x03) << 8 | b[7];
      }
    } else {
      counter = static_cast<std::uint32_t>(b[6] & 0x03) << 8 | b[7];
    }
    last_ms = ms;
    seq = counter;
  }
  for (int i = 0; i < 6; ++i) b[i] = static_cast<unsigned char>(ms >> (8 * (5 - i)));
  b[6] = static_cast<unsigned char>(0x70 | ((seq >> 8) & 0x0f));
  b[7] = static_cast<unsigned char>(seq & 0xff);
  b[8] = (b[8] & 0x3f) | 0x80;
  return uuid_text(b);
}

std::string uuid_from_name(std::string_view name) {
  auto h = sha256_hex(name).substr(0, 32);
  h[12] = '5';
  static constexpr char variant[] = "89ab";
  h[16] = variant[std::stoi(std::string(1, h[16]), nullptr, 16) & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20, 12);
}

bool is_uuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

std::string new_error_id() {
  std::array<unsigned char, 8> b{};
  id_random_bytes(b.data(), b.size());
  return to_hex(b.data(), b.size());
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up again on every digest.
  static EVP_MD* const fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_Digest(data.data(), data.size(), md, &len, fetched ? fetched : EVP_sha256(), nullptr);
  return to_hex(md, len);
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  size_t reused_len = 0;
  if (hmac_sha256_reused(key, data, md, &reused_len)) return to_hex(md, reused_len);
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), md, &len);
  return to_hex(md, len);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace changeflow::ids
