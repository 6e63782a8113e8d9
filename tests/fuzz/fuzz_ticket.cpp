// Fuzz target: the room_ticket cookie decoder (admission::decodeTicketCookie).
// A client controls the cookie completely; the decoder is the only thing
// between it and an index into the shared ticket ring.
// Properties: only exactly 32 lower-case hex digits decode; what decodes
// re-encodes to the same text; any 16 bytes round-trip through encodeTicketCookie.
#include <cstring>
#include <string>

#include "fuzz_target.h"
#include "admission/cookies.h"

namespace concert::fuzz {

int fuzzTicket(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<shm::TicketCookie> cookie = admission::decodeTicketCookie(text);
  if (cookie) {
    FUZZ_ASSERT(text.size() == 32);
    for (char c : text) FUZZ_ASSERT((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    FUZZ_ASSERT(admission::encodeTicketCookie(*cookie) == text);
  } else if (text.size() == 32) {
    bool all_hex = true;
    for (char c : text) all_hex = all_hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    FUZZ_ASSERT(!all_hex);
  }
  if (size >= 16) {
    shm::TicketCookie original;
    std::memcpy(&original.ticket, data, 8);
    std::memcpy(&original.nonce, data + 8, 8);
    std::string hex = admission::encodeTicketCookie(original);
    FUZZ_ASSERT(hex.size() == 32);
    std::optional<shm::TicketCookie> back = admission::decodeTicketCookie(hex);
    FUZZ_ASSERT(back && back->ticket == original.ticket && back->nonce == original.nonce);
  }
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzTicket)
