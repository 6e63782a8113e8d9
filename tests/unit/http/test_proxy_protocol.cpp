// PROXY protocol v1 / v2 headers (http/proxy_protocol.h): valid headers give
// the client's address and the header's length, every prefix of one is
// NeedMore, and anything else is Invalid at the first byte that rules it out.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>

#include <cstdio>
#include <random>
#include <string>
#include <string_view>

#include "http/proxy_protocol.h"

using namespace concert::http;

namespace {

ProxyHeader parse(std::string_view s) {
  return parseProxyHeader(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// "1.2.3.4:80", "[::1]:80", or "-" without a source.
std::string source(const ProxyHeader& h) {
  if (!h.has_source) return "-";
  char text[INET6_ADDRSTRLEN] = "?";
  if (h.source.ss_family == AF_INET) {
    auto& sin = reinterpret_cast<const sockaddr_in&>(h.source);
    inet_ntop(AF_INET, &sin.sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(sin.sin_port));
  }
  auto& sin6 = reinterpret_cast<const sockaddr_in6&>(h.source);
  REQUIRE(h.source.ss_family == AF_INET6);
  inet_ntop(AF_INET6, &sin6.sin6_addr, text, sizeof(text));
  return "[" + std::string(text) + "]:" + std::to_string(ntohs(sin6.sin6_port));
}

// Done with `length` bytes; returns the source.
std::string doneWith(std::string_view s, size_t length) {
  ProxyHeader h = parse(s);
  REQUIRE_MESSAGE(h.status == ProxyHeaderStatus::Done, (h.error ? h.error : "NeedMore"));
  CHECK(h.length == length);
  CHECK(h.error == nullptr);
  return source(h);
}

// Every proper prefix of `header` is NeedMore.
void checkPrefixesNeedMore(std::string_view header) {
  for (size_t n = 0; n < header.size(); ++n) {
    ProxyHeader h = parse(header.substr(0, n));
    CHECK_MESSAGE(h.status == ProxyHeaderStatus::NeedMore, "prefix of " << n << " bytes: " << (h.error ? h.error : ""));
  }
}

// The length of the shortest Invalid prefix (0 when there is none); every
// shorter prefix must be NeedMore.
size_t invalidAt(std::string_view s, const char** error = nullptr) {
  for (size_t n = 1; n <= s.size(); ++n) {
    ProxyHeader h = parse(s.substr(0, n));
    if (h.status == ProxyHeaderStatus::Invalid) {
      if (error) *error = h.error;
      return n;
    }
    REQUIRE(h.status == ProxyHeaderStatus::NeedMore);
  }
  return 0;
}

// A v2 header: signature, version/command, family, length, body.
std::string v2(uint8_t ver_cmd, uint8_t family, std::string_view body, size_t declared = std::string::npos) {
  if (declared == std::string::npos) declared = body.size();
  std::string s("\r\n\r\n\0\r\nQUIT\n", 12);
  s += static_cast<char>(ver_cmd);
  s += static_cast<char>(family);
  s += static_cast<char>(declared >> 8);
  s += static_cast<char>(declared & 0xff);
  s.append(body);
  return s;
}

std::string bigEndian16(uint16_t v) {
  return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
}

// Source and destination addresses and ports of a v2 INET / INET6 block.
std::string v2Addresses(int family, const char* src, const char* dst, uint16_t sport, uint16_t dport) {
  unsigned char a[16], b[16];
  REQUIRE(inet_pton(family, src, a) == 1);
  REQUIRE(inet_pton(family, dst, b) == 1);
  const size_t n = family == AF_INET ? 4 : 16;
  return std::string(reinterpret_cast<char*>(a), n) + std::string(reinterpret_cast<char*>(b), n) + bigEndian16(sport) +
         bigEndian16(dport);
}

std::string tcp6Line(const std::string& src, const std::string& dst, const char* ports = "1 2") {
  return "PROXY TCP6 " + src + " " + dst + " " + ports + "\r\n";
}

}  // namespace

TEST_CASE("proxy v1: TCP4, TCP6 and UNKNOWN lines") {
  const std::string tcp4 = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
  CHECK(doneWith(tcp4, tcp4.size()) == "192.168.0.1:56324");
  const std::string tcp4_max = "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
  CHECK(tcp4_max.size() == 56);
  CHECK(doneWith(tcp4_max, 56) == "255.255.255.255:65535");
  CHECK(doneWith("PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n", 32) == "0.0.0.0:0");

  CHECK(doneWith(tcp6Line("2001:db8::1", "2001:db8::2", "1234 443"), 45) == "[2001:db8::1]:1234");
  CHECK(doneWith(tcp6Line("::1", "::", "0 1"), 23) == "[::1]:0");
  CHECK(doneWith(tcp6Line("ABCD:ef01:2345:6789:aBcD:EF01:0:0", "::1"), 54) == "[abcd:ef01:2345:6789:abcd:ef01::]:1");
  CHECK(doneWith(tcp6Line("::ffff:10.0.0.1", "::1"), 36) == "[::ffff:10.0.0.1]:1");
  CHECK(doneWith(tcp6Line("1:2:3:4:5:6:7::", "1::2:3:4:5:6:7"), 47) == "[1:2:3:4:5:6:7:0]:1");

  CHECK(doneWith("PROXY UNKNOWN\r\n", 15) == "-");
  CHECK(doneWith("PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n", 35) == "-");
  CHECK(doneWith("PROXY UNKNOWN whatever\x01\xff \r\n", 27) == "-");
  // The spec's worst case: 107 bytes.
  const std::string ffff = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
  const std::string worst = "PROXY UNKNOWN " + ffff + " " + ffff + " 65535 65535\r\n";
  CHECK(worst.size() == kMaxProxyV1Line);
  CHECK(doneWith(worst, kMaxProxyV1Line) == "-");
  CHECK(doneWith(tcp6Line(ffff, ffff, "65535 65535"), 104) == "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
}

TEST_CASE("proxy v1: the request after the line is not part of the header") {
  const std::string line = "PROXY TCP4 10.1.2.3 10.0.0.1 40000 80\r\n";
  const std::string request = "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
  CHECK(doneWith(line + request, line.size()) == "10.1.2.3:40000");
  CHECK(doneWith("PROXY UNKNOWN\r\n" + request, 15) == "-");
  CHECK(doneWith(line + "\r\n", line.size()) == "10.1.2.3:40000");
  CHECK(doneWith(line + "\n", line.size()) == "10.1.2.3:40000");
}

TEST_CASE("proxy v1: every prefix of a valid line is NeedMore") {
  for (const char* line : {
           "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
           "PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n",
           "PROXY TCP6 2001:db8::1 2001:db8::2 1234 443\r\n",
           "PROXY TCP6 ::ffff:10.0.0.1 1:2:3:4:5:6:7:8 1 2\r\n",
           "PROXY TCP6 1:2:3:4:5:6:1.2.3.4 :: 1 2\r\n",
           "PROXY UNKNOWN\r\n",
           "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 "
           "65535\r\n",
       }) {
    INFO(std::string(line));
    checkPrefixesNeedMore(line);
    CHECK(parse(line).status == ProxyHeaderStatus::Done);
  }
}

TEST_CASE("proxy v1: malformed lines are Invalid at the first byte that rules them out") {
  struct Case {
    const char* input;
    size_t at;  // bytes read when it became Invalid
    const char* error;
  };
  const Case cases[] = {
      // Keywords and spaces.
      {"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", 1, "not a PROXY header"},
      {"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", 7, "bad v1 protocol"},
      {"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", 7, "bad v1 protocol"},
      {"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", 10, "bad v1 protocol"},
      {"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", 12, "bad v1 address"},
      {"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", 20, "bad v1 address"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8  1 2\r\n", 28, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1  2\r\n", 30, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", 31, "bad v1 port"},
      {"PROXY TCP4\r\n", 11, "bad v1 protocol"},
      {"PROXY UNKNOWNX\r\n", 14, "bad v1 protocol"},
      {"PROXY TCP4\t1.2.3.4 5.6.7.8 1 2\r\n", 11, "bad v1 protocol"},
      // Addresses.
      {"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", 20, "bad v1 address"},
      {"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", 17, "bad v1 address"},
      {"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n", 19, "bad v1 address"},
      {"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", 13, "bad v1 address"},
      {"PROXY TCP4 1..2.3 5.6.7.8 1 2\r\n", 14, "bad v1 address"},
      {"PROXY TCP4 1.2.3.4 5.6.7.a 1 2\r\n", 26, "bad v1 address"},
      {"PROXY TCP4 ::1 ::1 1 2\r\n", 12, "bad v1 address"},      // family mismatch
      {"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", 13, "bad v1 address"},  // family mismatch
      {"PROXY TCP6 ::1 1.2.3.4 1 2\r\n", 17, "bad v1 address"},  // family mismatch
      {"PROXY TCP6 :1 ::1 1 2\r\n", 13, "bad v1 address"},       // a single leading ':'
      {"PROXY TCP6 1::2::3 ::1 1 2\r\n", 17, "bad v1 address"},  // two "::"
      {"PROXY TCP6 ::: ::1 1 2\r\n", 14, "bad v1 address"},
      {"PROXY TCP6 12345::1 ::1 1 2\r\n", 16, "bad v1 address"},           // five hex digits
      {"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n", 27, "bad v1 address"},  // nine groups
      {"PROXY TCP6 1:2:3:4:5:6:7:8:: ::1 1 2\r\n", 27, "bad v1 address"},
      {"PROXY TCP6 1:2:3:4:5:6:7::8 ::1 1 2\r\n", 27, "bad v1 address"},   // "::" for no group
      {"PROXY TCP6 1:2:3 ::1 1 2\r\n", 17, "bad v1 address"},              // too few groups
      {"PROXY TCP6 1:2: ::1 1 2\r\n", 16, "bad v1 address"},               // ends with ':'
      {"PROXY TCP6 1:2:3:4:5:1.2.3.4 ::1 1 2\r\n", 23, "bad v1 address"},  // IPv4 tail too early
      {"PROXY TCP6 ::ffff:1.2.3 ::1 1 2\r\n", 24, "bad v1 address"},
      {"PROXY TCP6 ::ffff:1.2.3.04 ::1 1 2\r\n", 26, "bad v1 address"},
      {"PROXY TCP6 ::ffff:a.2.3.4 ::1 1 2\r\n", 20, "bad v1 address"},
      {"PROXY TCP6 ::1.2.3.4:1 ::1 1 2\r\n", 21, "bad v1 address"},
      {"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", 19, "bad v1 address"},  // no zone index
      // Ports.
      {"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", 32, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", 34, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", 28, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", 28, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", 29, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1 0x1\r\n", 31, "bad v1 port"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", 29, "bad v1 line ending"},  // a field missing
      // Line endings.
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", 31, "bad v1 line ending"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", 32, "bad v1 line ending"},
      {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", 32, "bad v1 line ending"},
      {"PROXY UNKNOWN\n", 14, "bad v1 line ending"},
      {"PROXY UNKNOWN abc\rdef\r\n", 19, "bad v1 line ending"},
      {"PROXY UNKNOWN abc\ndef\r\n", 18, "bad v1 line ending"},
      {"PROXY TCP4 1.2.3.4\r\n", 19, "bad v1 line ending"},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.input));
    const char* error = nullptr;
    CHECK(invalidAt(c.input, &error) == c.at);
    CHECK(std::string(error ? error : "") == c.error);
  }
}

TEST_CASE("proxy v1: a line must end within 107 bytes") {
  // UNKNOWN: anything up to 105 bytes, then CRLF.
  const std::string unknown = "PROXY UNKNOWN " + std::string(91, 'x');
  CHECK(unknown.size() == 105);
  CHECK(doneWith(unknown + "\r\n", 107) == "-");
  const char* error = nullptr;
  CHECK(invalidAt(unknown + "x\r\n", &error) == 106);
  CHECK(std::string(error) == "v1 line too long");
  CHECK(invalidAt("PROXY UNKNOWN " + std::string(300, 'x'), &error) == 106);

  // TCP6: the longest spellings do not fit twice. A 45-byte source leaves
  // 107 - 11 - 45 = 51 bytes for " <dst> 65535 65535\r\n": 36 for the destination.
  const std::string longest = "0000:0000:0000:0000:0000:ffff:255.255.255.255";
  CHECK(longest.size() == 45);
  const std::string fits = tcp6Line(longest, "0000:0000:0000:0000:0:0:255.255.10.1", "65535 65535");
  CHECK(fits.size() == 107);
  CHECK(doneWith(fits, 107) == "[::ffff:255.255.255.255]:65535");
  checkPrefixesNeedMore(fits);
  // One byte more is refused as soon as the line cannot end in time: at the
  // last digit of the last port, which leaves no room for the CRLF.
  const std::string over = tcp6Line(longest, "0000:0000:0000:0000:0:0:255.255.100.1", "65535 65535");
  CHECK(over.size() == 108);
  CHECK(invalidAt(over, &error) == 106);
  CHECK(std::string(error) == "v1 line too long");
  // Two longest spellings: the destination's last byte leaves no room for " 0 0\r\n".
  CHECK(invalidAt(tcp6Line(longest, longest), &error) == 11 + 45 + 1 + 45);
  CHECK(std::string(error) == "v1 line too long");
  // ... and with shorter ports that would not help either: "1 2" still needs 6 bytes.
  CHECK(invalidAt(tcp6Line(longest, longest, "1 2"), &error) == 11 + 45 + 1 + 45);
}

TEST_CASE("proxy v1: addresses are exactly what inet_pton reads") {
  std::mt19937 rng(20240611);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int i = 0; i < 2000; ++i) {
    // Random groups with runs of zeros, spelled several ways.
    uint16_t g[8];
    for (uint16_t& x : g) x = pick(3) == 0 ? 0 : static_cast<uint16_t>(rng() >> pick(16));
    unsigned char bytes[16];
    for (int k = 0; k < 8; ++k) {
      bytes[2 * k] = static_cast<unsigned char>(g[k] >> 8);
      bytes[2 * k + 1] = static_cast<unsigned char>(g[k] & 0xff);
    }
    char buf[64];
    std::string spellings[4];
    inet_ntop(AF_INET6, bytes, buf, sizeof(buf));
    spellings[0] = buf;  // compressed
    for (int k = 0; k < 8; ++k) {
      std::snprintf(buf, sizeof(buf), k ? ":%x" : "%x", g[k]);
      spellings[1] += buf;
      std::snprintf(buf, sizeof(buf), k ? ":%04X" : "%04X", g[k]);
      spellings[2] += buf;
    }
    std::snprintf(buf, sizeof(buf), "%x:%x:%x:%x:%x:%x:%d.%d.%d.%d", g[0], g[1], g[2], g[3], g[4], g[5], bytes[12],
                  bytes[13], bytes[14], bytes[15]);
    spellings[3] = buf;  // IPv4 tail
    std::string expected = "[";
    expected += inet_ntop(AF_INET6, bytes, buf, sizeof(buf));
    expected += "]:1";
    for (const std::string& s : spellings) {
      INFO(s);
      const std::string line = tcp6Line(s, "::");
      CHECK(doneWith(line, line.size()) == expected);
      if (i % 50 == 0) checkPrefixesNeedMore(line);
    }
  }
}

TEST_CASE("proxy v1: NeedMore always has a way on") {
  // Random walks through live prefixes: at every step some byte keeps the
  // prefix alive (NeedMore or Done), and a Done line's address is what
  // inet_pton reads from it. Lines end within 107 bytes, so walks end.
  std::mt19937 rng(7);
  const std::string alphabet = "0123456789abcdefABCDEF:.:.:: \r\n";
  int done = 0;
  for (int walk = 0; walk < 600; ++walk) {
    std::string s = walk % 3 == 0 ? "PROXY TCP4 " : walk % 3 == 1 ? "PROXY TCP6 " : "PROXY UNKNOWN";
    while (true) {
      ProxyHeader h = parse(s);
      if (h.status == ProxyHeaderStatus::Done) {
        ++done;
        break;
      }
      REQUIRE_MESSAGE(h.status == ProxyHeaderStatus::NeedMore, s);
      bool moved = false;
      const size_t first = rng() % alphabet.size();
      for (size_t k = 0; k < alphabet.size() && !moved; ++k) {
        s.push_back(alphabet[(first + k) % alphabet.size()]);
        if (parse(s).status != ProxyHeaderStatus::Invalid)
          moved = true;
        else
          s.pop_back();
      }
      for (int b = 0; b < 256 && !moved; ++b) {
        s.push_back(static_cast<char>(b));
        if (parse(s).status != ProxyHeaderStatus::Invalid)
          moved = true;
        else
          s.pop_back();
      }
      REQUIRE_MESSAGE(moved, "no byte continues " << s);
      REQUIRE(s.size() <= kMaxProxyV1Line);
    }
    if (s.starts_with("PROXY TCP")) {
      const size_t start = 11, end = s.find(' ', start);
      const std::string addr = s.substr(start, end - start);
      unsigned char bytes[16];
      INFO(s);
      CHECK(inet_pton(s[9] == '4' ? AF_INET : AF_INET6, addr.c_str(), bytes) == 1);
    }
  }
  CHECK(done == 600);
}

TEST_CASE("proxy v2: PROXY over IPv4 and IPv6, with and without TLVs") {
  const std::string inet = v2Addresses(AF_INET, "203.0.113.7", "192.0.2.1", 51234, 443);
  CHECK(doneWith(v2(0x21, 0x11, inet), 28) == "203.0.113.7:51234");
  const std::string inet6 = v2Addresses(AF_INET6, "2001:db8::7", "2001:db8::1", 65535, 80);
  CHECK(doneWith(v2(0x21, 0x21, inet6), 52) == "[2001:db8::7]:65535");

  // TLVs (here ALPN "h2" and an authority) are skipped with the length.
  const std::string tlvs = std::string("\x01\x00\x02h2", 5) + std::string("\x02\x00\x0bexample.com", 14);
  CHECK(doneWith(v2(0x21, 0x11, inet + tlvs), 16 + 12 + 19) == "203.0.113.7:51234");
  CHECK(doneWith(v2(0x21, 0x21, inet6 + tlvs), 16 + 36 + 19) == "[2001:db8::7]:65535");
  // TLV contents are not read: garbage inside the declared length is fine.
  CHECK(doneWith(v2(0x21, 0x11, inet + std::string(100, '\xff')), 128) == "203.0.113.7:51234");
  // The request follows.
  const std::string request = "GET / HTTP/1.1\r\n\r\n";
  CHECK(doneWith(v2(0x21, 0x11, inet + tlvs) + request, 47) == "203.0.113.7:51234");
  // The largest block accepted.
  const std::string largest = v2(0x21, 0x21, inet6 + std::string(kMaxProxyV2Length - 36, '\0'));
  CHECK(largest.size() == kMaxProxyHeader);
  CHECK(doneWith(largest, kMaxProxyHeader) == "[2001:db8::7]:65535");
  CHECK(parse(std::string_view(largest).substr(0, kMaxProxyHeader - 1)).status == ProxyHeaderStatus::NeedMore);
}

TEST_CASE("proxy v2: LOCAL, UNSPEC and UNIX keep the real peer") {
  // LOCAL: health checks from the balancer; family and block are ignored.
  CHECK(doneWith(v2(0x20, 0x00, ""), 16) == "-");
  CHECK(doneWith(v2(0x20, 0x11, v2Addresses(AF_INET, "1.2.3.4", "5.6.7.8", 1, 2)), 28) == "-");
  CHECK(doneWith(v2(0x20, 0x11, ""), 16) == "-");
  CHECK(doneWith(v2(0x20, 0xff, "xyz"), 19) == "-");
  CHECK(doneWith(v2(0x20, 0x00, "") + "GET / HTTP/1.1\r\n", 16) == "-");
  // PROXY with an unspecified family: addresses (if any) ignored.
  CHECK(doneWith(v2(0x21, 0x00, ""), 16) == "-");
  CHECK(doneWith(v2(0x21, 0x00, "abcdef"), 22) == "-");
  // UNIX stream and datagram: 216 bytes of paths.
  CHECK(doneWith(v2(0x21, 0x31, std::string(216, '\0')), 232) == "-");
  CHECK(doneWith(v2(0x21, 0x32, std::string(220, 'p')), 236) == "-");
}

TEST_CASE("proxy v2: every prefix of a valid header is NeedMore") {
  const std::string inet = v2Addresses(AF_INET, "203.0.113.7", "192.0.2.1", 51234, 443);
  const std::string inet6 = v2Addresses(AF_INET6, "2001:db8::7", "2001:db8::1", 1, 80);
  for (const std::string& header : {v2(0x21, 0x11, inet), v2(0x21, 0x21, inet6 + "\x04\x00\x01z"), v2(0x20, 0x00, ""),
                                    v2(0x21, 0x31, std::string(216, 'u'))}) {
    checkPrefixesNeedMore(header);
    CHECK(parse(header).status == ProxyHeaderStatus::Done);
  }
}

TEST_CASE("proxy v2: bad version, command, family and length") {
  const std::string inet = v2Addresses(AF_INET, "203.0.113.7", "192.0.2.1", 51234, 443);
  struct Case {
    std::string input;
    size_t at;
    const char* error;
  };
  const Case cases[] = {
      {v2(0x11, 0x11, inet), 13, "bad v2 version"},
      {v2(0x31, 0x11, inet), 13, "bad v2 version"},
      {v2(0x01, 0x11, inet), 13, "bad v2 version"},
      {v2(0x22, 0x11, inet), 13, "bad v2 command"},
      {v2(0x2f, 0x11, inet), 13, "bad v2 command"},
      {v2(0x21, 0x12, inet), 14, "v2 not TCP"},  // UDP over IPv4
      {v2(0x21, 0x22, inet), 14, "v2 not TCP"},  // UDP over IPv6
      {v2(0x21, 0x10, inet), 14, "bad v2 address family"},
      {v2(0x21, 0x13, inet), 14, "bad v2 address family"},
      {v2(0x21, 0x41, inet), 14, "bad v2 address family"},
      {v2(0x21, 0x01, inet), 14, "bad v2 address family"},
      {v2(0x21, 0x30, inet), 14, "bad v2 address family"},
      {v2(0x21, 0x11, inet.substr(0, 11)), 16, "v2 header too short for its addresses"},
      {v2(0x21, 0x21, inet), 16, "v2 header too short for its addresses"},
      {v2(0x21, 0x31, std::string(215, 'u')), 16, "v2 header too short for its addresses"},
      // Too long: refused from the length alone, without waiting for the bytes.
      {v2(0x21, 0x11, inet, kMaxProxyV2Length + 1), 16, "v2 header too long"},
      {v2(0x20, 0x00, "", 0x0801), 16, "v2 header too long"},
      {v2(0x20, 0x00, "", 0x0900), 15, "v2 header too long"},  // the high byte is enough
      {v2(0x20, 0x00, "", 0xffff), 15, "v2 header too long"},
      // A broken signature.
      {std::string("\r\n\r\n\0\r\nQUIT\r", 12), 12, "not a PROXY header"},
      {std::string("\r\n\r\n\x01", 5), 5, "not a PROXY header"},
      {"\r\nGET", 3, "not a PROXY header"},
  };
  for (const Case& c : cases) {
    INFO(c.error << " at " << c.at);
    const char* error = nullptr;
    CHECK(invalidAt(c.input, &error) == c.at);
    CHECK(std::string(error ? error : "") == c.error);
  }
  // Declared length exactly the block: fine, and nothing more is waited for.
  CHECK(doneWith(v2(0x21, 0x11, inet, 12) + "GET", 28) == "203.0.113.7:51234");
}

TEST_CASE("proxy: anything else is Invalid at once") {
  const char* error = nullptr;
  CHECK(invalidAt("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &error) == 1);
  CHECK(std::string(error) == "not a PROXY header");
  CHECK(invalidAt("\x16\x03\x01\x02\x00", &error) == 1);  // a TLS ClientHello
  CHECK(invalidAt("POST / HTTP/1.1\r\n", &error) == 2);
  CHECK(invalidAt("PRI * HTTP/2.0\r\n", &error) == 3);
  CHECK(invalidAt("PROXY", &error) == 0);  // still a prefix
  CHECK(parse("").status == ProxyHeaderStatus::NeedMore);
  CHECK(invalidAt(std::string("\0", 1), &error) == 1);
  CHECK(invalidAt("\n", &error) == 1);
}
