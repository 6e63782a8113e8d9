// Minting and verifying the concert_admit pass; see admit_pass.h for the
// format. OpenSSL provides the HMAC, the RNG and the constant-time compare.
#include "common/admit_pass.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

namespace concert::common {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr size_t kSignedBytes = 24;
constexpr size_t kMacBytes = 16;

int decodeChar(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

// First 16 bytes of HMAC-SHA256(secret, raw[0,24)) into mac.
bool computeMac(std::string_view secret, const uint8_t* raw, uint8_t* mac) {
  unsigned char full[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), raw, kSignedBytes, full, &length) == nullptr ||
      length < kMacBytes)
    return false;
  std::memcpy(mac, full, kMacBytes);
  return true;
}

}  // namespace

std::string base64UrlEncode(const uint8_t* data, size_t size) {
  std::string out;
  out.reserve((size * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    uint32_t v = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8) | data[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (size - i == 1) {
    uint32_t v = uint32_t{data[i]} << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (size - i == 2) {
    uint32_t v = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

std::optional<std::string> base64UrlDecode(std::string_view text) {
  // A length of 1 mod 4 cannot come from any byte string.
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = decodeChar(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  // Canonical form: the bits left over after the last whole byte must be zero
  // (as Go's strict decoder requires), so every pass has exactly one spelling.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::string mintPass(std::string_view secret, const PassId& id, int64_t expiry) {
  uint8_t raw[kPassRawBytes];
  std::memcpy(raw, id.data(), kPassIdBytes);
  uint64_t e = static_cast<uint64_t>(expiry);
  for (int i = 0; i < 8; ++i) raw[kPassIdBytes + i] = static_cast<uint8_t>(e >> (56 - 8 * i));
  if (!computeMac(secret, raw, raw + kSignedBytes)) return std::string();
  return base64UrlEncode(raw, sizeof raw);
}

std::optional<std::string> mintNewPass(std::string_view secret, int64_t now, int64_t ttl_seconds) {
  PassId id;
  if (RAND_bytes(id.data(), static_cast<int>(id.size())) != 1) return std::nullopt;
  std::string value = mintPass(secret, id, now + ttl_seconds);
  if (value.empty()) return std::nullopt;
  return value;
}

std::optional<AdmitPass> verifyPass(std::string_view secret, std::string_view value, int64_t now) {
  if (value.size() != kPassEncodedChars) return std::nullopt;
  std::optional<std::string> raw = base64UrlDecode(value);
  if (!raw || raw->size() != kPassRawBytes) return std::nullopt;
  const auto* bytes = reinterpret_cast<const uint8_t*>(raw->data());
  uint8_t mac[kMacBytes];
  if (!computeMac(secret, bytes, mac)) return std::nullopt;
  if (CRYPTO_memcmp(mac, bytes + kSignedBytes, kMacBytes) != 0) return std::nullopt;
  uint64_t e = 0;
  for (int i = 0; i < 8; ++i) e = (e << 8) | bytes[kPassIdBytes + i];
  // Expiries beyond int64 cannot be minted by us; treat them as forged.
  if (e > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  AdmitPass pass;
  std::memcpy(pass.id.data(), bytes, kPassIdBytes);
  pass.expiry = static_cast<int64_t>(e);
  if (!(now < pass.expiry)) return std::nullopt;
  return pass;
}

std::optional<std::string> slidePass(std::string_view secret, const std::optional<AdmitPass>& current, int64_t now,
                                     int64_t ttl_seconds, bool mint_if_missing) {
  if (current) {
    int64_t remaining = current->expiry - now;
    if (remaining > ttl_seconds / 2) return std::nullopt;  // same as remaining * 2 > ttl, without overflow
    std::string value = mintPass(secret, current->id, now + ttl_seconds);
    if (value.empty()) return std::nullopt;
    return value;
  }
  if (!mint_if_missing) return std::nullopt;
  return mintNewPass(secret, now, ttl_seconds);
}

}  // namespace concert::common
