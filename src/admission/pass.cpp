// Minting and verifying the concert_admit pass; see pass.h for the
// format. OpenSSL provides the HMAC, the RNG and the constant-time compare.
#include "admission/pass.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <pthread.h>

#include <cstring>
#include <string>

namespace concert::admission {
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

// One keyed HMAC-SHA256 context per thread, re-keyed only when the secret
// changes: the one-shot HMAC() looks the algorithm up and sets the key on
// every call, which costs more than the MAC of 24 bytes itself.
class MacContext {
 public:
  ~MacContext() {
    if (ctx_) EVP_MAC_CTX_free(ctx_);
    if (mac_) EVP_MAC_free(mac_);
  }

  bool compute(std::string_view secret, const uint8_t* data, size_t size, uint8_t* out, size_t out_size) {
    if (!ctx_ || secret != key_) {
      if (!rekey(secret)) return false;
    } else if (EVP_MAC_init(ctx_, nullptr, 0, nullptr) != 1) {  // same key, fresh state
      return false;
    }
    unsigned char full[EVP_MAX_MD_SIZE];
    size_t length = 0;
    if (EVP_MAC_update(ctx_, data, size) != 1 || EVP_MAC_final(ctx_, full, &length, sizeof full) != 1 ||
        length < out_size)
      return false;
    std::memcpy(out, full, out_size);
    return true;
  }

 private:
  bool rekey(std::string_view secret) {
    if (!mac_) mac_ = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (!mac_) return false;
    if (!ctx_) ctx_ = EVP_MAC_CTX_new(mac_);
    if (!ctx_) return false;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_END};
    // An empty key is still a key: HMAC pads it with zeros.
    static const unsigned char kEmpty[1] = {0};
    const auto* key = secret.empty() ? kEmpty : reinterpret_cast<const unsigned char*>(secret.data());
    if (EVP_MAC_init(ctx_, key, secret.size(), params) != 1) {
      key_.clear();
      EVP_MAC_CTX_free(ctx_);
      ctx_ = nullptr;
      return false;
    }
    key_.assign(secret);
    return true;
  }

  EVP_MAC* mac_ = nullptr;
  EVP_MAC_CTX* ctx_ = nullptr;
  std::string key_;
};

MacContext& macContext() {
  thread_local MacContext context;
  return context;
}

// First 16 bytes of HMAC-SHA256(secret, raw[0,24)) into mac.
bool computeMac(std::string_view secret, const uint8_t* raw, uint8_t* mac) {
  return macContext().compute(secret, raw, kSignedBytes, mac, kMacBytes);
}

// Pass ids come from the CSPRNG in blocks: one RAND_bytes call per 256 ids
// instead of one (with its fork check) per id. The block is process-local:
// a forked child starts with an empty one and never reuses its parent's ids.
class IdPool {
 public:
  IdPool() { pthread_atfork(nullptr, nullptr, &IdPool::forgetInChild); }

  bool next(uint8_t* out, size_t n) {
    if (n > sizeof block_) return RAND_bytes(out, static_cast<int>(n)) == 1;
    if (g_used + n > sizeof block_) {
      if (RAND_bytes(block_, sizeof block_) != 1) return false;
      g_used = 0;
    }
    std::memcpy(out, block_ + g_used, n);
    OPENSSL_cleanse(block_ + g_used, n);
    g_used += n;
    return true;
  }

 private:
  static void forgetInChild() { g_used = sizeof block_; }
  static inline thread_local size_t g_used = 4096;
  static inline thread_local uint8_t block_[4096];
};

}  // namespace

bool hmacSha256(std::string_view secret, const void* data, size_t size, uint8_t* out, size_t out_size) {
  if (out_size > 32) return false;
  return macContext().compute(secret, static_cast<const uint8_t*>(data), size, out, out_size);
}

bool randomBytes(uint8_t* out, size_t n) {
  static IdPool pool;
  return pool.next(out, n);
}

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

bool signBytes(std::string_view secret, const uint8_t* data, size_t size, uint8_t* mac) {
  return macContext().compute(secret, data, size, mac, kMacBytes);
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
  if (!randomBytes(id.data(), id.size())) return std::nullopt;
  std::string value = mintPass(secret, id, now + ttl_seconds);
  if (value.empty()) return std::nullopt;
  return value;
}

CheckedPass checkPass(std::string_view secret, std::string_view value, int64_t now) {
  CheckedPass out;  // Forged until proven otherwise
  if (value.size() != kPassEncodedChars) return out;
  std::optional<std::string> raw = base64UrlDecode(value);
  if (!raw || raw->size() != kPassRawBytes) return out;
  const auto* bytes = reinterpret_cast<const uint8_t*>(raw->data());
  uint8_t mac[kMacBytes];
  if (!computeMac(secret, bytes, mac)) return out;
  if (CRYPTO_memcmp(mac, bytes + kSignedBytes, kMacBytes) != 0) return out;
  uint64_t e = 0;
  for (int i = 0; i < 8; ++i) e = (e << 8) | bytes[kPassIdBytes + i];
  // Expiries beyond int64 cannot be minted by us; treat them as forged.
  if (e > static_cast<uint64_t>(INT64_MAX)) return out;
  std::memcpy(out.pass.id.data(), bytes, kPassIdBytes);
  out.pass.expiry = static_cast<int64_t>(e);
  out.check = now < out.pass.expiry ? PassCheck::Valid : PassCheck::Expired;
  return out;
}

std::optional<AdmitPass> verifyPass(std::string_view secret, std::string_view value, int64_t now) {
  CheckedPass checked = checkPass(secret, value, now);
  if (checked.check != PassCheck::Valid) return std::nullopt;
  return checked.pass;
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

}  // namespace concert::admission
