// Who goes ahead of the line: the tokens that say so, and the promotions and
// invitations they carry out.
//
//   ticket reference  {{.Ticket}} in -skip-url: names a waiting ticket to a
//                     payment page or an operator without giving the place
//                     away. 24 raw bytes, unpadded base64url (32 characters):
//                     ticket (8, big-endian) | MAC16("ticket-ref" key;
//                     ticket | nonce). Only who knows the ticket's nonce (its
//                     holder's cookie, the segment) can make one, and the
//                     nonce cannot be read back out of it, so a reference
//                     cannot be turned into the room_ticket cookie.
//   room_pass         (cookies.h kPassCookie) a VIP pass: the concert_admit format (pass.h) under
//                     its own key, so neither verifies as the other. Id byte
//                     0 bit 0 set: single use (-pass 0: one admission at the
//                     head of the line, then a session); otherwise good for
//                     every page request until its expiry (-pass).
//   invitation        `concert -invite DURATION`: 32 raw bytes, base64url
//                     (43 characters): id (8, random) | expiry (8, Unix
//                     seconds) | MAC16("invite" key; id | expiry), under
//                     CONCERT_ADMIT_SECRET so every instance sharing it
//                     honours it. Single use across workers (shm/once.h).
//   promote link      /queue/promote?ticket=<ref>&exp=<unix>&sig=<hex>, sig =
//                     hex HMAC-SHA256(CONCERT_PROMOTE_SECRET, "<ref>.<exp>"),
//                     compared in constant time; each signature once.
//
// Sub-keys are the secret, a zero byte and the token's label, so a MAC made
// for one kind of token never verifies as another.
//
// A promotion takes the ticket out of the line (promoted_total) and leaves a
// mark (shm/once.h) keyed by ticket and nonce for -token-ttl: the holder's
// next poll, event stream or page request finds the ticket gone and the mark
// there, and is handed its room_pass (the waiting page reloads into it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "admission/context.h"
#include "admission/pass.h"
#include "http/request.h"
#include "shm/types.h"

namespace concert::admission {

// ---------------------------------------------------------------- ticket references
std::string ticketRef(std::string_view secret, const shm::TicketCookie& cookie);
// The ticket a reference names, unchecked; nullopt when it is not one.
std::optional<uint64_t> refTicket(std::string_view ref);
// Does `ref` name the ticket with this nonce (constant-time)?
bool refMatches(std::string_view secret, std::string_view ref, uint64_t nonce);

// ---------------------------------------------------------------- room passes
struct RoomPass {
  PassId id{};
  int64_t expiry = 0;  // Unix seconds
  bool single_use = false;
};

std::string mintRoomPass(std::string_view secret, const RoomPass& pass);
// Genuine and unexpired; nullopt for anything else (checkRoomPass tells which).
std::optional<RoomPass> verifyRoomPass(std::string_view secret, std::string_view value, int64_t now);
PassCheck checkRoomPass(std::string_view secret, std::string_view value, int64_t now);

// The room pass a promotion grants: -pass > 0 good until now + -pass, -pass 0
// single use until now + -token-ttl. Its id is derived from the ticket, so
// granting it twice (two tabs) grants one pass, used once.
RoomPass promotedPass(const config::Config& config, uint64_t ticket, int64_t now);

// The Set-Cookie header that hands `pass` to the visitor (cookies.h
// roomPassSetCookie), good for what is left of its life.
http::Header roomPassHeader(const config::Config& config, const RoomPass& pass, bool https, int64_t now);

// ---------------------------------------------------------------- invitations
std::optional<std::string> mintInvitation(std::string_view secret, int64_t now, int64_t ttl_seconds);

struct Invitation {
  PassCheck check = PassCheck::Forged;
  uint64_t id = 0;
  int64_t expiry = 0;
};
Invitation checkInvitation(std::string_view secret, std::string_view token, int64_t now);

// ---------------------------------------------------------------- promote links
std::string promoteSignature(std::string_view secret, std::string_view ref, int64_t expiry);
// `sig` in hex (either case) over "<ref>.<exp_text>", compared in constant time.
bool promoteSignatureValid(std::string_view secret, std::string_view ref, std::string_view exp_text,
                           std::string_view sig);

// ---------------------------------------------------------------- the segment's side
// Once-mark labels (shm/once.h).
enum class OnceLabel : uint64_t { Promoted = 1, RoomPassUsed = 2, Invitation = 3, PromoteLink = 4 };
uint64_t onceKeyFor(OnceLabel label, uint64_t a, uint64_t b = 0);
uint64_t onceKeyFor(OnceLabel label, const PassId& id);

// Promote the ticket `ref` names: it leaves the line (promoted_total) and is
// marked promoted. False when the reference names no ticket holding a place.
bool promoteRef(const AdmissionContext& context, std::string_view ref, int64_t unix_now);
// The ticket `ticket` was promoted by a signed link: it leaves the line if it
// still holds a place (counted in promoted_total either way).
void promoteTicket(const AdmissionContext& context, uint64_t ticket);
// The holder of this ticket cookie was promoted and has not collected its
// room pass: the pass (promotedPass) to hand over.
std::optional<RoomPass> collectPromotion(const AdmissionContext& context, const shm::TicketCookie& cookie,
                                         int64_t unix_now);

}  // namespace concert::admission
