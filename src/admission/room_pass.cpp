// Ticket references, room passes, invitations and promote links; see room_pass.h.
#include "admission/room_pass.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>

#include "admission/cookies.h"
#include "shm/once.h"
#include "shm/segment.h"

namespace concert::admission {
namespace {

constexpr size_t kMac = 16;
constexpr size_t kRefBytes = 8 + kMac;
constexpr size_t kInviteBytes = 8 + 8 + kMac;

std::string subKey(std::string_view secret, std::string_view label) {
  std::string key(secret);
  key += '\0';
  key += label;
  return key;
}

void putBig(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

uint64_t getBig(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | in[i];
  return v;
}

std::optional<std::string> decodeExact(std::string_view text, size_t bytes) {
  if (text.size() != (bytes * 4 + 2) / 3) return std::nullopt;
  std::optional<std::string> raw = base64UrlDecode(text);
  if (!raw || raw->size() != bytes) return std::nullopt;
  return raw;
}

bool refMac(std::string_view secret, uint64_t ticket, uint64_t nonce, uint8_t* mac) {
  uint8_t msg[16];
  putBig(msg, ticket);
  putBig(msg + 8, nonce);
  return hmacSha256(subKey(secret, "ticket-ref"), msg, sizeof msg, mac, kMac);
}

std::string roomPassKey(std::string_view secret) { return subKey(secret, "room_pass"); }

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// ---------------------------------------------------------------- ticket references

std::string ticketRef(std::string_view secret, const shm::TicketCookie& cookie) {
  uint8_t raw[kRefBytes];
  putBig(raw, cookie.ticket);
  if (!refMac(secret, cookie.ticket, cookie.nonce, raw + 8)) return std::string();
  return base64UrlEncode(raw, sizeof raw);
}

std::optional<uint64_t> refTicket(std::string_view ref) {
  std::optional<std::string> raw = decodeExact(ref, kRefBytes);
  if (!raw) return std::nullopt;
  const uint64_t ticket = getBig(reinterpret_cast<const uint8_t*>(raw->data()));
  if (ticket == 0) return std::nullopt;
  return ticket;
}

bool refMatches(std::string_view secret, std::string_view ref, uint64_t nonce) {
  std::optional<std::string> raw = decodeExact(ref, kRefBytes);
  if (!raw) return false;
  const auto* bytes = reinterpret_cast<const uint8_t*>(raw->data());
  uint8_t mac[kMac];
  if (!refMac(secret, getBig(bytes), nonce, mac)) return false;
  return CRYPTO_memcmp(mac, bytes + 8, kMac) == 0;
}

// ---------------------------------------------------------------- room passes

std::string mintRoomPass(std::string_view secret, const RoomPass& pass) {
  PassId id = pass.id;
  id[0] = static_cast<uint8_t>((id[0] & ~1u) | (pass.single_use ? 1u : 0u));
  return mintPass(roomPassKey(secret), id, pass.expiry);
}

PassCheck checkRoomPass(std::string_view secret, std::string_view value, int64_t now) {
  return checkPass(roomPassKey(secret), value, now).check;
}

std::optional<RoomPass> verifyRoomPass(std::string_view secret, std::string_view value, int64_t now) {
  CheckedPass checked = checkPass(roomPassKey(secret), value, now);
  if (checked.check != PassCheck::Valid) return std::nullopt;
  RoomPass pass;
  pass.id = checked.pass.id;
  pass.expiry = checked.pass.expiry;
  pass.single_use = (pass.id[0] & 1u) != 0;
  return pass;
}

RoomPass promotedPass(const config::Config& config, uint64_t ticket, int64_t now) {
  RoomPass pass;
  uint8_t msg[8];
  putBig(msg, ticket);
  hmacSha256(subKey(config.admit_secret, "room_pass-id"), msg, sizeof msg, pass.id.data(), pass.id.size());
  pass.single_use = config.pass_duration <= 0;
  pass.expiry = now + (pass.single_use ? config.token_ttl : config.pass_duration) / 1000;
  return pass;
}

http::Header roomPassHeader(const config::Config& config, const RoomPass& pass, bool https, int64_t now) {
  const std::string value = mintRoomPass(config.admit_secret, pass);
  return http::Header{"Set-Cookie", roomPassSetCookie(config, value, std::max<int64_t>(1, pass.expiry - now), https)};
}

// ---------------------------------------------------------------- invitations

std::optional<std::string> mintInvitation(std::string_view secret, int64_t now, int64_t ttl_seconds) {
  uint8_t raw[kInviteBytes];
  if (!randomBytes(raw, 8)) return std::nullopt;
  putBig(raw + 8, static_cast<uint64_t>(now + ttl_seconds));
  if (!hmacSha256(subKey(secret, "invite"), raw, 16, raw + 16, kMac)) return std::nullopt;
  return base64UrlEncode(raw, sizeof raw);
}

Invitation checkInvitation(std::string_view secret, std::string_view token, int64_t now) {
  Invitation out;  // Forged until proven otherwise
  std::optional<std::string> raw = decodeExact(token, kInviteBytes);
  if (!raw) return out;
  const auto* bytes = reinterpret_cast<const uint8_t*>(raw->data());
  uint8_t mac[kMac];
  if (!hmacSha256(subKey(secret, "invite"), bytes, 16, mac, kMac)) return out;
  if (CRYPTO_memcmp(mac, bytes + 16, kMac) != 0) return out;
  const uint64_t expiry = getBig(bytes + 8);
  if (expiry > static_cast<uint64_t>(INT64_MAX)) return out;
  out.id = getBig(bytes);
  out.expiry = static_cast<int64_t>(expiry);
  out.check = now < out.expiry ? PassCheck::Valid : PassCheck::Expired;
  return out;
}

// ---------------------------------------------------------------- promote links

std::string promoteSignature(std::string_view secret, std::string_view ref, int64_t expiry) {
  const std::string msg = std::string(ref) + "." + std::to_string(expiry);
  uint8_t mac[32];
  if (secret.empty() || !hmacSha256(secret, msg.data(), msg.size(), mac, sizeof mac)) return std::string();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : mac) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool promoteSignatureValid(std::string_view secret, std::string_view ref, std::string_view exp_text,
                           std::string_view sig) {
  if (secret.empty() || sig.size() != 64) return false;
  uint8_t given[32];
  for (size_t i = 0; i < 32; ++i) {
    const int hi = hexValue(sig[2 * i]), lo = hexValue(sig[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    given[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  const std::string msg = std::string(ref) + "." + std::string(exp_text);
  uint8_t mac[32];
  if (!hmacSha256(secret, msg.data(), msg.size(), mac, sizeof mac)) return false;
  return CRYPTO_memcmp(mac, given, sizeof mac) == 0;
}

// ---------------------------------------------------------------- the segment's side

uint64_t onceKeyFor(OnceLabel label, uint64_t a, uint64_t b) {
  return shm::onceKey(static_cast<uint64_t>(label), a, b);
}

uint64_t onceKeyFor(OnceLabel label, const PassId& id) {
  uint64_t a = 0, b = 0;
  std::memcpy(&a, id.data(), 8);
  std::memcpy(&b, id.data() + 8, 8);
  return onceKeyFor(label, a, b);
}

bool promoteRef(const AdmissionContext& context, std::string_view ref, int64_t unix_now) {
  std::optional<uint64_t> ticket = refTicket(ref);
  if (!ticket) return false;
  shm::Line& tickets = context.segment->line();
  std::optional<uint64_t> nonce = tickets.nonceOf(*ticket);
  if (!nonce || !refMatches(context.config->admit_secret, ref, *nonce)) return false;
  // The mark first, so the holder's next look finds it as soon as the ticket is gone.
  const int64_t until = unix_now + context.config->token_ttl / 1000;
  context.segment->once().claim(onceKeyFor(OnceLabel::Promoted, *ticket, *nonce), until, unix_now);
  if (tickets.remove(*ticket, shm::Counter::PromotedTotal)) {
    context.segment->cluster().promote(*ticket, *nonce, until);  // -cluster: for every host
    return true;
  }
  context.segment->once().forget(onceKeyFor(OnceLabel::Promoted, *ticket, *nonce), unix_now);
  return false;
}

void promoteTicket(const AdmissionContext& context, uint64_t ticket) {
  if (!context.segment->line().remove(ticket, shm::Counter::PromotedTotal))
    context.segment->stats().count(shm::Counter::PromotedTotal);
}

std::optional<RoomPass> collectPromotion(const AdmissionContext& context, const shm::TicketCookie& cookie,
                                         int64_t unix_now) {
  if (!context.segment->once().marked(onceKeyFor(OnceLabel::Promoted, cookie.ticket, cookie.nonce), unix_now) &&
      !context.segment->cluster().promotedElsewhere(cookie.ticket, cookie.nonce, unix_now))
    return std::nullopt;
  return promotedPass(*context.config, cookie.ticket, unix_now);
}

}  // namespace concert::admission
