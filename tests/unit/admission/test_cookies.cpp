// Cookie parsing, Concert-cookie stripping and Set-Cookie attribute strings.
#include <doctest/doctest.h>

#include "config/config.h"
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/cookies.h"
#include "http/client_address.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;

TEST_CASE("stripConcertCookies") {
  CHECK(stripConcertCookies("room_ticket=a; session=keep; room_pass=b; room_probe=1; concert_admit=z; theme=dark") ==
        std::optional<std::string>("session=keep; theme=dark"));
  CHECK(stripConcertCookies("session=keep") == std::optional<std::string>("session=keep"));
  CHECK_FALSE(stripConcertCookies("room_ticket=a; concert_admit=z"));
  CHECK_FALSE(stripConcertCookies(""));
  CHECK_FALSE(stripConcertCookies(" ; ;"));
  // spacing and empty pieces tolerated, other values kept byte for byte
  CHECK(stripConcertCookies("a=1;b=\"x y\" ;; room_probe=1 ;  c=3=4") ==
        std::optional<std::string>("a=1; b=\"x y\"; c=3=4"));
  // only exact names are Concert's
  CHECK(stripConcertCookies("room_ticket2=x; Room_Ticket=y") ==
        std::optional<std::string>("room_ticket2=x; Room_Ticket=y"));
  CHECK(stripConcertCookies("flag; room_pass=1") == std::optional<std::string>("flag"));
}

TEST_CASE("cookieValue") {
  Headers none{{"Accept", "*/*"}};
  CHECK_FALSE(cookieValue(none, "room_ticket"));

  Headers one{{"Cookie", "a=1;  room_ticket=abc ; b=2"}};
  CHECK(cookieValue(one, "room_ticket") == std::optional<std::string>("abc"));
  CHECK(cookieValue(one, "a") == std::optional<std::string>("1"));
  CHECK_FALSE(cookieValue(one, "room"));

  Headers several{{"cookie", "x=1"}, {"COOKIE", "room_ticket=second"}, {"Cookie", "room_ticket=third"}};
  CHECK(cookieValue(several, "room_ticket") == std::optional<std::string>("second"));

  Headers quoted{{"Cookie", "concert_admit=\"v\"; empty="}};
  CHECK(cookieValue(quoted, "concert_admit") == std::optional<std::string>("v"));
  CHECK(cookieValue(quoted, "empty") == std::optional<std::string>(""));

  Headers empties{{"Cookie", ";;  ; room_probe=1;"}};
  CHECK(cookieValue(empties, "room_probe") == std::optional<std::string>("1"));
}

TEST_CASE("cookieValues: several cookies in one scan, each as cookieValue finds it") {
  Headers headers{{"cookie", "x=1; room_ticket=first"},
                  {"COOKIE", "room_ticket=second; concert_admit=\"p\""},
                  {"Cookie", "room_pass=; concert_admit=later"}};
  std::optional<std::string> ticket, admit, pass, priority;
  priority = "stale";  // reset by the scan
  cookieValues(headers, {{"room_ticket", &ticket}, {"concert_admit", &admit}, {"room_pass", &pass},
                         {"concert_priority", &priority}});
  CHECK(ticket == cookieValue(headers, "room_ticket"));
  CHECK(ticket == std::optional<std::string>("first"));
  CHECK(admit == std::optional<std::string>("p"));
  CHECK(admit == cookieValue(headers, "concert_admit"));
  CHECK(pass == std::optional<std::string>(""));
  CHECK_FALSE(priority);
}

TEST_CASE("Set-Cookie attribute strings") {
  config::Config c;
  c.token_ttl = 300'000;
  c.admit_ttl = 600'000;
  CHECK(ticketSetCookie(c, "00ff", false) == "room_ticket=00ff; Path=/; Max-Age=300; HttpOnly; SameSite=Lax");
  CHECK(probeSetCookie(c, false) == "room_probe=1; Path=/; Max-Age=300; SameSite=Lax");
  CHECK(admitSetCookie(c, "PASS", false) == "concert_admit=PASS; Path=/; Max-Age=600; HttpOnly; SameSite=Lax");

  SUBCASE("https makes every cookie Secure, the pass too") {
    CHECK(ticketSetCookie(c, "v", true) == "room_ticket=v; Path=/; Max-Age=300; HttpOnly; Secure; SameSite=Lax");
    CHECK(probeSetCookie(c, true) == "room_probe=1; Path=/; Max-Age=300; Secure; SameSite=Lax");
    CHECK(admitSetCookie(c, "P", true) == "concert_admit=P; Path=/; Max-Age=600; HttpOnly; Secure; SameSite=Lax");
  }
  SUBCASE("secure-cookie, path and domain") {
    c.secure_cookie = true;
    c.cookie_path = "/shop";
    c.cookie_domain = ".example.com";
    c.token_ttl = 30'000;
    CHECK(ticketSetCookie(c, "v", false) ==
          "room_ticket=v; Path=/shop; Domain=example.com; Max-Age=30; HttpOnly; Secure; SameSite=Lax");
    CHECK(admitSetCookie(c, "P", false) ==
          "concert_admit=P; Path=/shop; Domain=example.com; Max-Age=600; HttpOnly; Secure; SameSite=Lax");
    CHECK(expiredAdmitSetCookie(c, false) ==
          "concert_admit=; Path=/shop; Domain=example.com; Max-Age=0; HttpOnly; Secure; SameSite=Lax");
  }
}

TEST_CASE("an ended session's Set-Cookie expires the pass with the pass cookie's attributes") {
  config::Config c;
  CHECK(expiredAdmitSetCookie(c, false) == "concert_admit=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax");
  CHECK(setsAdmitCookie(expiredAdmitSetCookie(c, false)));
  CHECK(setsAdmitCookie(admitSetCookie(c, "P", false)));
  CHECK(setsAdmitCookie(" concert_admit =x"));
  CHECK_FALSE(setsAdmitCookie("concert_admit_old=x"));
  CHECK_FALSE(setsAdmitCookie("room_ticket=x; Path=/"));
  CHECK_FALSE(setsAdmitCookie("concert_admit"));
  CookieAttributes a;
  a.max_age = -5;
  CHECK(formatSetCookie("x", "", a) == "x=; Max-Age=0; SameSite=Lax");
}

TEST_CASE("cookies are Secure when a trusted proxy says the client used https, never when anyone else does") {
  config::Config c;
  c.token_ttl = 300'000;
  c.trusted_proxies = config::parseCidrList("127.0.0.1/32").cidrs;
  const shm::TicketCookie ticket{1, 2};
  auto placeCookies = [&](std::string peer, Headers headers) {
    Request r;
    r.peer_ip = std::move(peer);
    r.headers = std::move(headers);
    r.client_https = identifyClient(r, c.trusted_proxies).https;
    Headers out;
    addPlaceCookies(c, r, ticket, out);
    REQUIRE(out.size() == 2);
    return out;
  };
  for (const Header& h : placeCookies("127.0.0.1", {{"X-Forwarded-For", "203.0.113.7"}, {"X-Forwarded-Proto", "https"}}))
    CHECK_MESSAGE(h.value.find("; Secure") != std::string::npos, h.value);
  for (const Header& h : placeCookies("127.0.0.1", {{"Forwarded", "for=203.0.113.7;proto=https"}}))
    CHECK_MESSAGE(h.value.find("; Secure") != std::string::npos, h.value);
  for (const Header& h : placeCookies("127.0.0.1", {{"X-Forwarded-Proto", "http"}}))
    CHECK_MESSAGE(h.value.find("Secure") == std::string::npos, h.value);
  // The same header from a peer that is not trusted changes nothing.
  for (const Header& h : placeCookies("198.51.100.1", {{"X-Forwarded-Proto", "https"}}))
    CHECK_MESSAGE(h.value.find("Secure") == std::string::npos, h.value);
}

TEST_CASE("room_ticket cookie: hex round trip and strict parsing") {
  const shm::TicketCookie c{0x0123456789abcdefull, 0xfedcba9876543210ull};
  const std::string hex = encodeTicketCookie(c);
  CHECK(hex == "0123456789abcdeffedcba9876543210");
  const auto back = decodeTicketCookie(hex);
  REQUIRE(back);
  CHECK(back->ticket == c.ticket);
  CHECK(back->nonce == c.nonce);
  CHECK(encodeTicketCookie(shm::TicketCookie{1, 2}) == "00000000000000010000000000000002");
  CHECK_FALSE(decodeTicketCookie(""));
  CHECK_FALSE(decodeTicketCookie(hex.substr(1)));
  CHECK_FALSE(decodeTicketCookie(hex + "0"));
  CHECK_FALSE(decodeTicketCookie("0123456789ABCDEFfedcba9876543210"));
  CHECK_FALSE(decodeTicketCookie("0123456789abcdefgedcba9876543210"));
  CHECK_FALSE(decodeTicketCookie(" 123456789abcdeffedcba9876543210"));
  CHECK_FALSE(decodeTicketCookie("+123456789abcdeffedcba9876543210"));
}
