// Client identity behind proxies (-trusted-proxies): reading X-Forwarded-For
// and Forwarded, the right-to-left walk, and the forwarding headers sent on.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <doctest/doctest.h>

#include "config/cidr.h"
#include "http/client_address.h"

using namespace concert;
using namespace concert::http;

namespace {

config::CidrList cidrs(std::string_view text) {
  config::CidrListParse p = config::parseCidrList(text);
  REQUIRE(p.errors.empty());
  return p.cidrs;
}

config::IpAddress ip(std::string_view text) {
  std::optional<config::IpAddress> a = config::parseIpAddress(text);
  REQUIRE_MESSAGE(a.has_value(), text);
  return *a;
}

std::string walk(std::vector<std::string> hops, std::string_view peer, std::string_view trusted) {
  return config::ipAddressText(walkChain(hops, ip(peer), cidrs(trusted)));
}

Request requestFrom(std::string peer, Headers headers) {
  Request r;
  r.method = "GET";
  r.peer_ip = std::move(peer);
  r.headers = std::move(headers);
  return r;
}

// identifyClient, then the fields dispatch sets from it.
Request identified(std::string peer, Headers headers, std::string_view trusted) {
  Request r = requestFrom(std::move(peer), std::move(headers));
  ClientIdentity who = identifyClient(r, cidrs(trusted));
  r.client_ip = who.ip;
  r.peer_trusted = who.peer_trusted;
  r.client_https = who.https;
  return r;
}

}  // namespace

TEST_CASE("nodes: addresses with or without port and brackets; names and junk are not addresses") {
  CHECK(parseNode("192.0.2.1") == ip("192.0.2.1"));
  CHECK(parseNode("192.0.2.1:8080") == ip("192.0.2.1"));
  CHECK(parseNode("2001:db8::1") == ip("2001:db8::1"));
  CHECK(parseNode("[2001:db8::1]") == ip("2001:db8::1"));
  CHECK(parseNode("[2001:db8::1]:4711") == ip("2001:db8::1"));
  CHECK(parseNode("::ffff:192.0.2.1") == ip("192.0.2.1"));
  CHECK(parseNode("[::ffff:192.0.2.1]:1") == ip("192.0.2.1"));
  for (const char* bad : {"", "unknown", "_hidden", "_abc:80", "[2001:db8::1", "[2001:db8::1]:", "[2001:db8::1]x",
                          "[2001:db8::1]:8a", "[192.0.2.1]", "192.0.2.1:", "192.0.2.1:http", "192.0.2.256",
                          "example.com", "example.com:443", "1.2.3.4 5.6.7.8", "2001:db8::1:port"})
    CHECK_MESSAGE(!parseNode(bad), bad);
}

TEST_CASE("reading X-Forwarded-For: every line, in order, entries trimmed, empties skipped") {
  IncomingForwarding in = readForwarding({{"X-Forwarded-For", " 1.1.1.1 ,2.2.2.2,, "},
                                          {"Accept", "*/*"},
                                          {"x-forwarded-for", "3.3.3.3"},
                                          {"X-Forwarded-Proto", "https, http"},
                                          {"X-Forwarded-Host", "shop.example"}});
  CHECK(in.hops == std::vector<std::string>{"1.1.1.1", "2.2.2.2", "3.3.3.3"});
  CHECK_FALSE(in.from_forwarded);
  CHECK(in.proto == "https");
  CHECK(in.host == "shop.example");

  IncomingForwarding none = readForwarding({{"Host", "h"}});
  CHECK(none.hops.empty());
  CHECK_FALSE(none.proto);
  CHECK_FALSE(none.host);
  CHECK_FALSE(readForwarding({{"X-Forwarded-Proto", " "}}).proto);
}

TEST_CASE("reading Forwarded: for= nodes, quoted IPv6 with ports, proto and host, X-Forwarded-For wins") {
  IncomingForwarding in = readForwarding(
      {{"Forwarded",
        "for=192.0.2.60;proto=https;host=\"shop.example:8443\";by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\""},
       {"Forwarded", "proto=http, for=unknown;host=other"},
       {"Forwarded", "for=\"_hidden, with comma\""}});
  CHECK(in.from_forwarded);
  CHECK(in.hops ==
        std::vector<std::string>{"192.0.2.60", "[2001:db8:cafe::17]:4711", "", "unknown", "_hidden, with comma"});
  CHECK(in.proto == "https");
  CHECK(in.host == "shop.example:8443");

  // X-Forwarded-For is the chain when both came; Forwarded still tells
  // proto and host when the X- headers do not.
  IncomingForwarding both =
      readForwarding({{"Forwarded", "for=9.9.9.9;proto=https;host=f.example"}, {"X-Forwarded-For", "1.1.1.1"}});
  CHECK(both.hops == std::vector<std::string>{"1.1.1.1"});
  CHECK_FALSE(both.from_forwarded);
  CHECK(both.proto == "https");
  CHECK(both.host == "f.example");
  IncomingForwarding x_wins = readForwarding({{"Forwarded", "for=9.9.9.9;proto=https"}, {"X-Forwarded-Proto", "http"}});
  CHECK(x_wins.proto == "http");

  // An escaped quote inside a quoted value; junk pairs are ignored.
  IncomingForwarding odd = readForwarding({{"Forwarded", "for=\"a\\\"b\";junk;=x;proto"}});
  CHECK(odd.hops == std::vector<std::string>{"a\"b"});
  CHECK_FALSE(odd.proto);
}

TEST_CASE("the walk: right to left past trusted addresses") {
  const char* proxies = "127.0.0.1/32,10.0.0.0/8";
  // Spoofed left-most entries are ignored: the client is the first untrusted from the right.
  CHECK(walk({"6.6.6.6", "203.0.113.7"}, "127.0.0.1", proxies) == "203.0.113.7");
  CHECK(walk({"6.6.6.6", "203.0.113.7", "10.1.1.1", "10.2.2.2"}, "127.0.0.1", proxies) == "203.0.113.7");
  // An untrusted peer is the client, whatever the chain says.
  CHECK(walk({"203.0.113.7"}, "198.51.100.1", proxies) == "198.51.100.1");
  // No chain: the peer.
  CHECK(walk({}, "127.0.0.1", proxies) == "127.0.0.1");
  // Every entry trusted: the left-most.
  CHECK(walk({"10.9.9.9", "10.1.1.1"}, "127.0.0.1", proxies) == "10.9.9.9");
  // A malformed entry ends the walk at the trusted hop that sent it.
  CHECK(walk({"203.0.113.7", "garbage"}, "127.0.0.1", proxies) == "127.0.0.1");
  CHECK(walk({"203.0.113.7", "unknown", "10.1.1.1"}, "127.0.0.1", proxies) == "10.1.1.1");
  CHECK(walk({"garbage", "203.0.113.7"}, "127.0.0.1", proxies) == "203.0.113.7");
  CHECK(walk({""}, "127.0.0.1", proxies) == "127.0.0.1");
  // Ports and brackets around entries; IPv6 proxies and clients; mapped IPv4.
  CHECK(walk({"203.0.113.7:51000", "[2001:db8::5]:443"}, "::1", "::1,2001:db8::/32") == "203.0.113.7");
  CHECK(walk({"2001:db8:1::9"}, "::ffff:127.0.0.1", proxies) == "2001:db8:1::9");
  CHECK(walk({"::ffff:203.0.113.7"}, "127.0.0.1", proxies) == "203.0.113.7");
}

TEST_CASE("identifyClient: untrusted peers and no trusted proxies keep the peer and Concert's own scheme") {
  const Headers spoof = {{"X-Forwarded-For", "6.6.6.6"}, {"X-Forwarded-Proto", "https"}};
  for (const char* trusted : {"", "10.0.0.0/8"}) {
    Request r = identified("127.0.0.1", spoof, trusted);
    CHECK(r.client_ip == "127.0.0.1");
    CHECK_FALSE(r.peer_trusted);
    CHECK_FALSE(r.client_https);
  }
  Request tls = requestFrom("127.0.0.1", spoof);
  tls.tls = true;
  CHECK(identifyClient(tls, {}).https);
  CHECK(identifyClient(tls, {}).address == ip("127.0.0.1"));
  // A peer that is no IP address (never on TCP) is kept as it is.
  ClientIdentity odd = identifyClient(requestFrom("unix", spoof), cidrs("0.0.0.0/0"));
  CHECK(odd.ip == "unix");
  CHECK_FALSE(odd.address);
  CHECK_FALSE(odd.peer_trusted);
}

TEST_CASE("identifyClient: a trusted peer names the client and its scheme") {
  Request r = identified("127.0.0.1", {{"X-Forwarded-For", "6.6.6.6, 203.0.113.7"}, {"X-Forwarded-Proto", "HTTPS"}},
                         "127.0.0.1/32");
  CHECK(r.client_ip == "203.0.113.7");
  CHECK(r.peer_trusted);
  CHECK(r.client_https);

  Request plain =
      identified("127.0.0.1", {{"X-Forwarded-For", "203.0.113.7"}, {"X-Forwarded-Proto", "http"}}, "127.0.0.1/32");
  CHECK_FALSE(plain.client_https);
  Request fwd = identified("::1", {{"Forwarded", "for=\"[2001:db8::7]:1234\";proto=https"}}, "::1");
  CHECK(fwd.client_ip == "2001:db8::7");
  CHECK(fwd.client_https);
  // Trusted, no forwarding headers: the peer itself, on http.
  Request bare = identified("127.0.0.1", {}, "127.0.0.1");
  CHECK(bare.client_ip == "127.0.0.1");
  CHECK(bare.peer_trusted);
  CHECK_FALSE(bare.client_https);
}

TEST_CASE("toward the origin from an untrusted peer: everything incoming replaced") {
  Request r = identified("10.1.2.3",
                         {{"Host", "concert.example"},
                          {"X-Forwarded-For", "6.6.6.6"},
                          {"X-Forwarded-Proto", "https"},
                          {"X-Forwarded-Host", "evil"},
                          {"Forwarded", "for=1.1.1.1;proto=https"}},
                         "127.0.0.1");
  OutgoingForwarding out = outgoingForwarding(r);
  CHECK(out.x_forwarded_for == "10.1.2.3");
  CHECK(out.x_forwarded_proto == "http");
  CHECK(out.x_forwarded_host == "concert.example");
  CHECK(out.forwarded == "for=10.1.2.3;host=concert.example;proto=http");

  Request v6 = identified("::1", {}, "");
  v6.tls = true;
  OutgoingForwarding six = outgoingForwarding(v6);
  CHECK(six.x_forwarded_for == "::1");
  CHECK(six.x_forwarded_proto == "https");
  CHECK_FALSE(six.x_forwarded_host);
  CHECK(six.forwarded == "for=\"[::1]\";proto=https");
}

TEST_CASE("toward the origin from a trusted peer: the chain carried on, the peer appended") {
  Request r = identified("127.0.0.1",
                         {{"Host", "internal:8080"},
                          {"X-Forwarded-For", "6.6.6.6, 203.0.113.7"},
                          {"X-Forwarded-For", "2001:db8::9"},
                          {"X-Forwarded-Proto", "https"},
                          {"X-Forwarded-Host", "shop.example"},
                          {"Forwarded", "for=1.1.1.1"}},
                         "127.0.0.1/32");
  OutgoingForwarding out = outgoingForwarding(r);
  CHECK(out.x_forwarded_for == "6.6.6.6, 203.0.113.7, 2001:db8::9, 127.0.0.1");
  CHECK(out.x_forwarded_proto == "https");
  CHECK(out.x_forwarded_host == "shop.example");
  CHECK(out.forwarded ==
        "for=6.6.6.6;host=shop.example;proto=https, for=203.0.113.7, for=\"[2001:db8::9]\", for=127.0.0.1");

  // Without X-Forwarded-Proto/-Host the trusted peer's request is Concert's view.
  Request thin = identified("127.0.0.1", {{"Host", "h.example"}, {"X-Forwarded-For", "203.0.113.7"}}, "127.0.0.1");
  OutgoingForwarding t = outgoingForwarding(thin);
  CHECK(t.x_forwarded_for == "203.0.113.7, 127.0.0.1");
  CHECK(t.x_forwarded_proto == "http");
  CHECK(t.x_forwarded_host == "h.example");
  CHECK(t.forwarded == "for=203.0.113.7;host=h.example;proto=http, for=127.0.0.1");

  // A Forwarded chain becomes X-Forwarded-For addresses; names stay names.
  Request f = identified(
      "127.0.0.1",
      {{"Host", "h"}, {"Forwarded", "for=\"[2001:db8::7]:1234\";proto=https;host=\"a.example:8443\", proto=x, for=_p"}},
      "127.0.0.1");
  OutgoingForwarding fo = outgoingForwarding(f);
  CHECK(fo.x_forwarded_for == "2001:db8::7, unknown, _p, 127.0.0.1");
  CHECK(fo.x_forwarded_proto == "https");
  CHECK(fo.x_forwarded_host == "a.example:8443");
  CHECK(fo.forwarded ==
        "for=\"[2001:db8::7]:1234\";host=\"a.example:8443\";proto=https, for=unknown, for=_p, for=127.0.0.1");
}

TEST_CASE("a client is an IPv4 address or an IPv6 /64") {
  auto key = [](std::string_view text) { return clientKey(ip(text)); };
  CHECK(key("192.0.2.1") == key("::ffff:192.0.2.1"));
  CHECK(key("192.0.2.1") != key("192.0.2.2"));
  const std::array<uint8_t, 16> v4 = key("192.0.2.1");
  CHECK(v4[10] == 0xff);
  CHECK(v4[11] == 0xff);
  CHECK(v4[12] == 192);
  CHECK(v4[15] == 1);
  CHECK(key("2001:db8:1:2::1") == key("2001:db8:1:2:ffff:ffff:ffff:ffff"));
  CHECK(key("2001:db8:1:2::1") == key("2001:db8:1:2:1234::"));
  CHECK(key("2001:db8:1:2::1") != key("2001:db8:1:3::1"));
  CHECK(key("2001:db8::1") != key("192.0.2.1"));
  // ::1 and the IPv4 world do not collide: ::/64 is not an IPv4-mapped key.
  CHECK(key("::1") != key("0.0.0.1"));
}

TEST_CASE("socket addresses as text") {
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  inet_pton(AF_INET, "203.0.113.9", &a4.sin_addr);
  CHECK(socketAddressText(reinterpret_cast<sockaddr*>(&a4)) == "203.0.113.9");
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "::ffff:198.51.100.4", &a6.sin6_addr);
  CHECK(socketAddressText(reinterpret_cast<sockaddr*>(&a6)) == "198.51.100.4");
  inet_pton(AF_INET6, "2001:db8::7", &a6.sin6_addr);
  CHECK(socketAddressText(reinterpret_cast<sockaddr*>(&a6)) == "2001:db8::7");
  sockaddr un{};
  un.sa_family = AF_UNIX;
  CHECK(socketAddressText(&un) == "");
}
