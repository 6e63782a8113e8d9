// Fuzz target: PROXY protocol headers (http::parseProxyHeader).
//
// The input is the first bytes of a connection. Properties:
//   * the verdict is well-formed: Done takes at most the input and at most
//     kMaxProxyHeader bytes (a v1 line ends with its only CRLF and is at most
//     107 bytes; a v2 header is 16 bytes plus its declared length), a source
//     is AF_INET or AF_INET6 and comes only from TCP4/TCP6 lines and v2
//     PROXY over TCP; Invalid has a reason; NeedMore has neither;
//   * feeding the input one byte more at a time changes nothing: every
//     prefix is NeedMore up to the byte that decides, and every longer one
//     has the same verdict (same length and source, or same reason);
//   * NeedMore is exact: when the whole input is NeedMore, some next byte
//     keeps it alive (so a valid prefix is never refused and no dead end is
//     waited on, given that the bounds stop every header);
//   * the verdict agrees with plain reference readings of the spec: a v1
//     line split on spaces and checked with inet_pton, a v2 header decided
//     from its four fixed bytes;
//   * a source round-trips: written back as a v1 line and as a v2 header it
//     parses to the same address and port.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "http/proxy_protocol.h"

namespace concert::fuzz {
namespace {

using http::ProxyHeader;
using http::ProxyHeaderStatus;

constexpr char kV2Signature[] = "\r\n\r\n\0\r\nQUIT\n";
constexpr size_t kV2SignatureLen = 12;

ProxyHeader parse(std::string_view bytes) {
  return http::parseProxyHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

bool sameSource(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    auto& x = reinterpret_cast<const sockaddr_in&>(a);
    auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && std::memcmp(&x.sin_addr, &y.sin_addr, 4) == 0;
  }
  auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, 16) == 0;
}

bool sameVerdict(const ProxyHeader& a, const ProxyHeader& b) {
  if (a.status != b.status || a.length != b.length || a.has_source != b.has_source) return false;
  if (a.has_source && !sameSource(a.source, b.source)) return false;
  if ((a.error == nullptr) != (b.error == nullptr)) return false;
  return a.error == nullptr || std::strcmp(a.error, b.error) == 0;
}

void checkWellFormed(std::string_view in, const ProxyHeader& h) {
  FUZZ_ASSERT((h.status == ProxyHeaderStatus::Invalid) == (h.error != nullptr));
  if (h.error) FUZZ_ASSERT(h.error[0] != '\0');
  if (h.status != ProxyHeaderStatus::Done) {
    FUZZ_ASSERT(h.length == 0 && !h.has_source);
    if (h.status == ProxyHeaderStatus::NeedMore) FUZZ_ASSERT(in.size() < http::kMaxProxyHeader);
    return;
  }
  FUZZ_ASSERT(h.length > 0 && h.length <= in.size() && h.length <= http::kMaxProxyHeader);
  if (h.has_source) FUZZ_ASSERT(h.source.ss_family == AF_INET || h.source.ss_family == AF_INET6);
  std::string_view header = in.substr(0, h.length);
  if (header.starts_with("PROXY ")) {
    FUZZ_ASSERT(h.length <= http::kMaxProxyV1Line);
    FUZZ_ASSERT(header.ends_with("\r\n"));
    FUZZ_ASSERT(header.find_first_of("\r\n") == h.length - 2);
    FUZZ_ASSERT(h.has_source == header.starts_with("PROXY TCP"));
    return;
  }
  FUZZ_ASSERT(header.starts_with(std::string_view(kV2Signature, kV2SignatureLen)));
  const size_t declared = (size_t{static_cast<uint8_t>(header[14])} << 8) | static_cast<uint8_t>(header[15]);
  FUZZ_ASSERT(h.length == 16 + declared);
  const uint8_t command = static_cast<uint8_t>(header[12]) & 0x0F, family = static_cast<uint8_t>(header[13]);
  FUZZ_ASSERT(h.has_source == (command == 1 && (family == 0x11 || family == 0x21)));
}

// Every prefix: NeedMore until the deciding byte, then the final verdict.
void checkPrefixes(std::string_view in, const ProxyHeader& whole) {
  bool decided = false;
  for (size_t n = 0; n <= in.size(); ++n) {
    ProxyHeader h = parse(in.substr(0, n));
    if (!decided && h.status == ProxyHeaderStatus::NeedMore) continue;
    decided = true;
    if (!sameVerdict(h, whole)) {
      std::fprintf(stderr, "prefix of %zu bytes: status %d, whole input: status %d\n", n, static_cast<int>(h.status),
                   static_cast<int>(whole.status));
      FUZZ_ASSERT(sameVerdict(h, whole));
    }
  }
}

// A NeedMore input can always be continued.
void checkAlive(std::string_view in) {
  std::string more(in);
  more.push_back('\0');
  for (int b = 0; b < 256; ++b) {
    more.back() = static_cast<char>(b);
    if (parse(more).status != ProxyHeaderStatus::Invalid) return;
  }
  FUZZ_ASSERT(!"a NeedMore input that no byte continues");
}

// --- reference readings ---------------------------------------------------

bool strictPort(const std::string& s, uint16_t* port) {
  if (s.empty() || s.size() > 5 || (s.size() > 1 && s[0] == '0')) return false;
  unsigned long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned long>(c - '0');
  }
  if (v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

std::vector<std::string> splitSpaces(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t sp = s.find(' ', start);
    out.emplace_back(s.substr(start, sp == std::string_view::npos ? std::string_view::npos : sp - start));
    if (sp == std::string_view::npos) return out;
    start = sp + 1;
  }
}

// A complete v1 line without its CRLF: valid? Fills `src` for TCP4 / TCP6.
bool referenceV1(std::string_view line, bool* has_source, sockaddr_storage* src) {
  *has_source = false;
  if (!line.starts_with("PROXY ") || line.size() + 2 > http::kMaxProxyV1Line) return false;
  std::string_view rest = line.substr(6);
  if (rest == "UNKNOWN" || rest.starts_with("UNKNOWN ")) return true;
  std::vector<std::string> f = splitSpaces(rest);
  if (f.size() != 5 || (f[0] != "TCP4" && f[0] != "TCP6")) return false;
  for (const std::string& s : f)
    if (s.find('\0') != std::string::npos) return false;  // inet_pton would stop there
  const int family = f[0] == "TCP4" ? AF_INET : AF_INET6;
  unsigned char a[16], b[16];
  uint16_t sport = 0, dport = 0;
  if (inet_pton(family, f[1].c_str(), a) != 1 || inet_pton(family, f[2].c_str(), b) != 1) return false;
  if (!strictPort(f[3], &sport) || !strictPort(f[4], &dport)) return false;
  *src = {};
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(src);
    sin->sin_family = AF_INET;
    std::memcpy(&sin->sin_addr, a, 4);
    sin->sin_port = htons(sport);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(src);
    sin6->sin6_family = AF_INET6;
    std::memcpy(&sin6->sin6_addr, a, 16);
    sin6->sin6_port = htons(sport);
  }
  *has_source = true;
  return true;
}

// Once the input holds a CR or LF, the first one ends the v1 line.
void checkV1Reference(std::string_view in, const ProxyHeader& h) {
  size_t end = in.find_first_of("\r\n");
  if (end == std::string_view::npos || end + 1 >= in.size()) return;
  if (in[end] != '\r' || in[end + 1] != '\n') {
    FUZZ_ASSERT(h.status == ProxyHeaderStatus::Invalid);
    return;
  }
  bool has_source = false;
  sockaddr_storage src{};
  const bool valid = referenceV1(in.substr(0, end), &has_source, &src);
  FUZZ_ASSERT(valid == (h.status == ProxyHeaderStatus::Done));
  if (!valid) return;
  FUZZ_ASSERT(h.length == end + 2 && h.has_source == has_source);
  if (has_source) FUZZ_ASSERT(sameSource(h.source, src));
}

// The four fixed bytes after the v2 signature decide everything but the wait.
void checkV2Reference(std::string_view in, const ProxyHeader& h) {
  if (in.size() < 16) return;
  const uint8_t ver_cmd = static_cast<uint8_t>(in[12]), family = static_cast<uint8_t>(in[13]);
  const size_t declared = (size_t{static_cast<uint8_t>(in[14])} << 8) | static_cast<uint8_t>(in[15]);
  bool valid = (ver_cmd == 0x20 || ver_cmd == 0x21) && declared <= http::kMaxProxyV2Length;
  if (valid && ver_cmd == 0x21) {
    size_t need = 0;
    if (family == 0x11)
      need = 12;
    else if (family == 0x21)
      need = 36;
    else if (family == 0x31 || family == 0x32)
      need = 216;
    else if (family != 0x00)
      valid = false;
    valid = valid && declared >= need;
  }
  if (!valid)
    FUZZ_ASSERT(h.status == ProxyHeaderStatus::Invalid);
  else
    FUZZ_ASSERT(h.status == (in.size() >= 16 + declared ? ProxyHeaderStatus::Done : ProxyHeaderStatus::NeedMore));
}

// The source written back in both versions parses to itself.
void checkRoundTrip(const sockaddr_storage& src) {
  const bool v6 = src.ss_family == AF_INET6;
  const void* addr = v6 ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(src).sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(src).sin_addr);
  const uint16_t port_n =
      v6 ? reinterpret_cast<const sockaddr_in6&>(src).sin6_port : reinterpret_cast<const sockaddr_in&>(src).sin_port;
  char text[INET6_ADDRSTRLEN];
  FUZZ_ASSERT(inet_ntop(src.ss_family, addr, text, sizeof(text)) != nullptr);
  const std::string port = std::to_string(ntohs(port_n));
  std::string v1 =
      std::string("PROXY ") + (v6 ? "TCP6 " : "TCP4 ") + text + " " + text + " " + port + " " + port + "\r\n";
  ProxyHeader h1 = parse(v1);
  FUZZ_ASSERT(h1.status == ProxyHeaderStatus::Done && h1.length == v1.size() && h1.has_source);
  FUZZ_ASSERT(sameSource(h1.source, src));

  const size_t alen = v6 ? 16 : 4, body = 2 * alen + 4;
  std::string v2(kV2Signature, kV2SignatureLen);
  v2 += '\x21';
  v2 += v6 ? '\x21' : '\x11';
  v2 += static_cast<char>(body >> 8);
  v2 += static_cast<char>(body & 0xff);
  v2.append(static_cast<const char*>(addr), alen);
  v2.append(static_cast<const char*>(addr), alen);
  v2.append(reinterpret_cast<const char*>(&port_n), 2);
  v2.append(reinterpret_cast<const char*>(&port_n), 2);
  ProxyHeader h2 = parse(v2);
  FUZZ_ASSERT(h2.status == ProxyHeaderStatus::Done && h2.length == v2.size() && h2.has_source);
  FUZZ_ASSERT(sameSource(h2.source, src));
}

}  // namespace

int fuzzProxyProtocol(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ProxyHeader h = parse(in);
  checkWellFormed(in, h);
  checkPrefixes(in, h);
  if (h.status == ProxyHeaderStatus::NeedMore) checkAlive(in);
  const std::string_view v2_signature(kV2Signature, kV2SignatureLen);
  if (in.size() >= 1 && in[0] != 'P' && in[0] != '\r') FUZZ_ASSERT(h.status == ProxyHeaderStatus::Invalid);
  if (in.size() >= 6 && in[0] == 'P' && !in.starts_with("PROXY ")) FUZZ_ASSERT(h.status == ProxyHeaderStatus::Invalid);
  if (in.size() >= 12 && in[0] == '\r' && !in.starts_with(v2_signature))
    FUZZ_ASSERT(h.status == ProxyHeaderStatus::Invalid);
  if (in.starts_with("PROXY ")) checkV1Reference(in, h);
  if (in.starts_with(v2_signature)) checkV2Reference(in, h);
  if (h.has_source) checkRoundTrip(h.source);
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzProxyProtocol)
