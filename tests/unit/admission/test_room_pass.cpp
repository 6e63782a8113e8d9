// Who goes first (room_pass.h): ticket references, room passes, invitations,
// promote links, and what a promotion does to the line and the page guard.
#include <doctest/doctest.h>

#include "admission/pass.h"
#include "admission/room_pass.h"
#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using concert::test::kTestSecret;

namespace {

constexpr int64_t kNow = 1'800'000'000;

http::Request withCookie(std::string path, const std::string& cookie) {
  return test::get(std::move(path), {{"Accept", "application/json"}, {"Cookie", cookie}});
}

}  // namespace

TEST_CASE("a ticket reference names its ticket and proves its nonce without revealing it") {
  const shm::TicketCookie cookie{12345, 0x1122334455667788ull};
  const std::string ref = ticketRef(kTestSecret, cookie);
  CHECK(ref.size() == 32);
  CHECK(refTicket(ref) == 12345u);
  CHECK(refMatches(kTestSecret, ref, cookie.nonce));
  CHECK_FALSE(refMatches(kTestSecret, ref, cookie.nonce + 1));
  CHECK_FALSE(refMatches("another-secret-0123456789abcdefghij", ref, cookie.nonce));
  CHECK(ref.find(encodeTicketCookie(cookie).substr(16)) == std::string::npos);  // no nonce in it
  CHECK_FALSE(refTicket("short"));
  CHECK_FALSE(refTicket(ref + "A"));
  std::string tampered = ref;
  tampered[20] = tampered[20] == 'A' ? 'B' : 'A';
  CHECK_FALSE(refMatches(kTestSecret, tampered, cookie.nonce));
}

TEST_CASE("room passes: single use bit, expiry, and a key of their own") {
  RoomPass pass;
  pass.id[0] = 0x40;
  pass.id[5] = 7;
  pass.expiry = kNow + 60;
  pass.single_use = true;
  const std::string value = mintRoomPass(kTestSecret, pass);
  std::optional<RoomPass> back = verifyRoomPass(kTestSecret, value, kNow);
  REQUIRE(back);
  CHECK(back->single_use);
  CHECK(back->expiry == kNow + 60);
  CHECK_FALSE(verifyRoomPass(kTestSecret, value, kNow + 60));
  CHECK(checkRoomPass(kTestSecret, value, kNow + 60) == PassCheck::Expired);
  pass.single_use = false;
  CHECK_FALSE(verifyRoomPass(kTestSecret, mintRoomPass(kTestSecret, pass), kNow)->single_use);
  // A concert_admit pass is not a room pass, nor the other way round.
  CHECK(checkRoomPass(kTestSecret, mintPass(kTestSecret, pass.id, kNow + 60), kNow) == PassCheck::Forged);
  CHECK(checkPass(kTestSecret, value, kNow).check == PassCheck::Forged);
}

TEST_CASE("a promoted ticket's pass: -pass 0 single use, else -pass long; one id per ticket") {
  config::Config c = test::baseConfig(1);
  RoomPass once = promotedPass(c, 9, kNow);
  CHECK(once.single_use);
  CHECK(once.expiry == kNow + c.token_ttl / 1000);
  CHECK(promotedPass(c, 9, kNow + 5).id == once.id);
  CHECK(promotedPass(c, 10, kNow).id != once.id);
  c.pass_duration = 3600 * 1000;
  RoomPass vip = promotedPass(c, 9, kNow);
  CHECK_FALSE(vip.single_use);
  CHECK(vip.expiry == kNow + 3600);
}

TEST_CASE("invitations: signed, expiring, 43 characters") {
  std::optional<std::string> token = mintInvitation(kTestSecret, kNow, 3600);
  REQUIRE(token);
  CHECK(token->size() == 43);
  Invitation ok = checkInvitation(kTestSecret, *token, kNow + 10);
  CHECK(ok.check == PassCheck::Valid);
  CHECK(ok.expiry == kNow + 3600);
  CHECK(checkInvitation(kTestSecret, *token, kNow + 3600).check == PassCheck::Expired);
  CHECK(checkInvitation("another-secret-0123456789abcdefghij", *token, kNow).check == PassCheck::Forged);
  std::string tampered = *token;
  tampered[3] = tampered[3] == 'A' ? 'B' : 'A';
  CHECK(checkInvitation(kTestSecret, tampered, kNow).check == PassCheck::Forged);
  CHECK(checkInvitation(kTestSecret, "", kNow).check == PassCheck::Forged);
  CHECK(mintInvitation(kTestSecret, kNow, 3600) != token);
}

TEST_CASE("promote links: HMAC over ref.exp, hex in either case, constant-time compare") {
  const std::string secret = "promote-secret-0123456789abcdefghijkl";
  const std::string sig = promoteSignature(secret, "REF", 1700000000);
  CHECK(sig.size() == 64);
  CHECK(promoteSignatureValid(secret, "REF", "1700000000", sig));
  std::string upper = sig;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  CHECK(promoteSignatureValid(secret, "REF", "1700000000", upper));
  CHECK_FALSE(promoteSignatureValid(secret, "REF", "1700000001", sig));
  CHECK_FALSE(promoteSignatureValid(secret, "REG", "1700000000", sig));
  CHECK_FALSE(promoteSignatureValid("", "REF", "1700000000", sig));
  CHECK_FALSE(promoteSignatureValid(secret, "REF", "1700000000", sig.substr(2)));
  CHECK_FALSE(promoteSignatureValid(secret, "REF", "1700000000", "zz" + sig.substr(2)));
}

TEST_CASE("-skip-url: {{.Ticket}} becomes the visitor's reference, only with -rate") {
  config::Config c = test::baseConfig(1);
  c.skip_url = "/pay?t={{.Ticket}}&again={{.Ticket}}";
  CHECK(skipUrl(c, "R") == "");
  c.rate = 1;
  CHECK(skipUrl(c, "R") == "/pay?t=R&again=R");
}

TEST_CASE("a promotion takes the ticket out of the line and its holder in ahead of everyone") {
  config::Config c = test::baseConfig(1);
  test::Site room(c);
  shm::Segment& seg = *room.segment;
  // The only slot is taken; three visitors wait.
  REQUIRE(seg.pages().tryAcquire(0));
  std::vector<shm::TicketCookie> line;
  for (int i = 0; i < 3; ++i) line.push_back(seg.tickets().issue(0, 0, monotonicMs()).cookie);
  const std::string ref = ticketRef(kTestSecret, line[2]);
  CHECK_FALSE(promoteRef(room.ctx(), ticketRef("wrong-secret-0123456789abcdefghijklm", line[2]), kNow));
  REQUIRE(promoteRef(room.ctx(), ref, unixSeconds()));
  CHECK_FALSE(promoteRef(room.ctx(), ref, unixSeconds()));  // gone from the line
  CHECK(seg.tickets().liveQueueDepth() == 2);
  CHECK(seg.stats().snapshot().promoted_total == 1);
  // Its holder's poll says ready and carries the room pass.
  const std::string ticket_cookie = std::string(kTicketCookie) + "=" + encodeTicketCookie(line[2]);
  http::LocalResponse poll = handleQueueStatus(room.ctx(), withCookie("/queue/status", ticket_cookie), monotonicMs());
  CHECK(poll.body.find("\"ready\":true") != std::string::npos);
  const std::string pass = test::setCookieValue(poll.headers, kPassCookie);
  REQUIRE_FALSE(pass.empty());
  // Its page request waits ahead of the line and a session; the slot frees; it goes in.
  auto guard = makePageGuard(room.ctx());
  http::Request page = withCookie("/checkout", ticket_cookie + "; room_pass=" + pass);
  Admission first = guard->admit(page, monotonicMs());
  CHECK(first.kind == Admission::Kind::Wait);
  CHECK(seg.sessions().waitingAhead(shm::kSessionRank) == 1);
  seg.pages().release(0);
  Admission second = guard->admit(page, monotonicMs());
  CHECK(second.kind == Admission::Kind::Proceed);
  CHECK(seg.stats().snapshot().admissions_priority_total == 1);
  guard.reset();
  // Single use (-pass 0): the same pass again is no pass; the visitor is a session now instead.
  auto again = makePageGuard(room.ctx());
  REQUIRE(seg.pages().tryAcquire(0));
  Admission later = again->admit(withCookie("/again", "room_pass=" + pass), monotonicMs());
  CHECK(later.kind == Admission::Kind::Respond);  // queued like anyone
  CHECK(later.response.status == 429);
}
