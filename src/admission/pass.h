// The concert_admit pass: a stateless,
// HMAC-signed proof that its holder was admitted to a page, checked by the
// private asset tier without touching shared memory.
//
// Wire format: 40 raw bytes, unpadded base64url (54 characters):
//   [0,16)  pass id (random)
//   [16,24) expiry, Unix seconds, unsigned 64-bit big-endian
//   [24,40) first 16 bytes of HMAC-SHA256(key = secret, msg = bytes [0,24))
// Verification is strict (exact length, alphabet, no padding, canonical last
// character), compares the MAC in constant time, and accepts only while
// now < expiry. Nothing here keeps state, so every worker (and every instance
// sharing the secret) agrees on every pass.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace concert::admission {

constexpr size_t kPassIdBytes = 16;
constexpr size_t kPassRawBytes = 40;
constexpr size_t kPassEncodedChars = 54;

using PassId = std::array<uint8_t, kPassIdBytes>;

struct AdmitPass {
  PassId id{};
  int64_t expiry = 0;  // Unix seconds
};

// The cookie value for `id` expiring at `expiry` (Unix seconds).
std::string mintPass(std::string_view secret, const PassId& id, int64_t expiry);

// A pass with a fresh random id expiring at now + ttl_seconds; nullopt when
// the RNG fails (the caller then serves without a pass).
std::optional<std::string> mintNewPass(std::string_view secret, int64_t now, int64_t ttl_seconds);

// What a presented pass is: genuine and unexpired, genuine but expired (an
// honest visitor back late), or not ours at all (malformed, tampered with, or
// signed with another key: a forgery). A forged pass is a strike against the
// client that carries it (abuse.h); an expired one is not.
enum class PassCheck { Valid, Expired, Forged };
struct CheckedPass {
  PassCheck check = PassCheck::Forged;
  AdmitPass pass;  // id and expiry: Valid and Expired
};
CheckedPass checkPass(std::string_view secret, std::string_view value, int64_t now);

// The id and expiry of a genuine, unexpired pass; nullopt for anything else.
std::optional<AdmitPass> verifyPass(std::string_view secret, std::string_view value, int64_t now);

// The sliding rule: the value to send in a Set-Cookie, or nullopt
// for "send nothing".
//   valid pass, remaining lifetime <= ttl/2   -> same id, expiry now + ttl
//   valid pass, more than half left           -> nothing
//   missing/invalid and mint_if_missing       -> a new random id (nullopt on RNG failure)
//   missing/invalid and !mint_if_missing      -> nothing
std::optional<std::string> slidePass(std::string_view secret, const std::optional<AdmitPass>& current, int64_t now,
                                     int64_t ttl_seconds, bool mint_if_missing);

// The first `out_size` (at most 32) bytes of HMAC-SHA256(secret, data): the
// MAC of every token the room signs (pass, priority cookie, room pass, ticket
// reference, invitation), each over its own domain-separated key or message.
// False when OpenSSL fails.
bool hmacSha256(std::string_view secret, const void* data, size_t size, uint8_t* out, size_t out_size);
// The first kPassMacBytes of it: the pass's MAC length (priority.h uses it too).
constexpr size_t kPassMacBytes = 16;
bool signBytes(std::string_view secret, const uint8_t* data, size_t size, uint8_t* mac);
// `n` bytes from the CSPRNG (buffered per process, as for pass ids).
bool randomBytes(uint8_t* out, size_t n);

// Unpadded base64url, strict; also used by the other signed cookies.
std::string base64UrlEncode(const uint8_t* data, size_t size);
std::optional<std::string> base64UrlDecode(std::string_view text);

}  // namespace concert::admission
