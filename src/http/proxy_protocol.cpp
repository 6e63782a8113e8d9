// PROXY protocol v1 / v2 header parsing; see proxy_protocol.h for the rules.
//
// Version 1 fields are checked byte by byte with small state machines that
// reject a byte as soon as no completion of the field could be valid, and
// that know the fewest bytes still needed to finish it: with those, a line
// that could no longer end within 107 bytes is Invalid at once too. The
// complete addresses are then converted with inet_pton().
#include "http/proxy_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace concert::http {

namespace {

constexpr char kV1Signature[] = "PROXY ";
constexpr size_t kV1SignatureLen = 6;
constexpr uint8_t kV2Signature[] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
constexpr size_t kV2SignatureLen = sizeof(kV2Signature);
constexpr size_t kV2FixedLen = 16;  // signature, version/command, family, length

ProxyHeader needMore() {
  return {};
}

ProxyHeader invalid(const char* why) {
  ProxyHeader h;
  h.status = ProxyHeaderStatus::Invalid;
  h.error = why;
  return h;
}

ProxyHeader done(size_t length) {
  ProxyHeader h;
  h.status = ProxyHeaderStatus::Done;
  h.length = length;
  return h;
}

enum class Match { Mismatch, Partial, Full };

// Whether the available bytes agree with `literal`, and whether all of it is there.
Match matchLiteral(const uint8_t* data, size_t len, const void* literal, size_t literal_len) {
  size_t n = len < literal_len ? len : literal_len;
  if (std::memcmp(data, literal, n) != 0) return Match::Mismatch;
  return n == literal_len ? Match::Full : Match::Partial;
}

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

bool isHexDigit(char c) {
  return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// A decimal number up to `max`, no sign, no leading zero: an IPv4 octet or a port.
class Decimal {
 public:
  explicit Decimal(uint32_t max) : max_(max) {}
  bool feed(char c) {
    if (!isDigit(c) || (digits_ > 0 && value_ == 0)) return false;
    value_ = value_ * 10 + static_cast<uint32_t>(c - '0');
    ++digits_;
    return value_ <= max_;
  }
  bool empty() const { return digits_ == 0; }
  uint32_t value() const { return value_; }

 private:
  uint32_t max_;
  uint32_t value_ = 0;
  int digits_ = 0;
};

// Dotted-quad IPv4 address, as inet_pton(AF_INET) reads it.
class Ipv4Field {
 public:
  bool feed(char c) {
    if (c != '.') return octet_.feed(c);
    if (octet_.empty() || dots_ == 3) return false;
    ++dots_;
    octet_ = Decimal(255);
    return true;
  }
  bool complete() const { return dots_ == 3 && !octet_.empty(); }
  // Shortest completion: "0" for an empty octet, ".0" per missing one.
  size_t minToEnd() const { return (octet_.empty() ? 1 : 0) + 2 * static_cast<size_t>(3 - dots_); }

 private:
  int dots_ = 0;
  Decimal octet_{255};
};

// IPv6 address, as inet_pton(AF_INET6) reads it: eight groups of 1-4 hex
// digits, or fewer with one "::" standing for at least one zero group; the
// last two groups may be written as a dotted IPv4 address.
class Ipv6Field {
 public:
  bool feed(char c) {
    if (in_tail_) return tail_.feed(c);
    if (isHexDigit(c)) return feedHexDigit(c);
    if (c == ':') return feedColon();
    if (c == '.') return startTail();
    return false;
  }
  bool complete() const {
    if (in_tail_) return tail_.complete();
    if (colons_ == 2) return true;   // ends with "::"
    if (digits_ == 0) return false;  // empty, or ends with a single ':'
    return compressed_ || groups_ + 1 == 8;
  }
  size_t minToEnd() const {
    if (in_tail_) return tail_.minToEnd();
    if (colons_ == 1) return 1;                  // "::", or a group after "::"
    if (colons_ == 0 && digits_ == 0) return 2;  // empty: "::"
    return complete() ? 0 : 2;                   // a group: "::" after it
  }

 private:
  // Most groups the address can still spell out: a "::" stands for one at least.
  int capacity() const { return compressed_ ? 7 : 8; }

  bool feedHexDigit(char c) {
    if (colons_ == 1 && leading_colon_) return false;  // ":1"
    if (digits_ == 0) {
      if (groups_ + 1 > capacity()) return false;
      group_as_octet_ = Ipv4Field();
      octet_ok_ = true;
    }
    if (++digits_ > 4) return false;
    if (octet_ok_) octet_ok_ = group_as_octet_.feed(c);
    colons_ = 0;
    return true;
  }

  bool feedColon() {
    if (digits_ > 0) {  // ends a group: another one or a "::" must follow
      ++groups_;
      digits_ = 0;
      colons_ = 1;
      return groups_ < capacity();
    }
    if (colons_ == 1) {  // "::"
      if (compressed_) return false;
      compressed_ = true;
      leading_colon_ = false;
      colons_ = 2;
      return true;
    }
    if (colons_ == 2) return false;  // ":::"
    colons_ = 1;                     // the first byte: must become "::"
    leading_colon_ = true;
    return true;
  }

  // A '.' turns the group being read into the first octet of an IPv4 tail,
  // which takes the last two groups.
  bool startTail() {
    if (digits_ == 0 || !octet_ok_) return false;
    if (compressed_ ? groups_ > 5 : groups_ != 6) return false;
    in_tail_ = true;
    tail_ = group_as_octet_;
    return tail_.feed('.');
  }

  int groups_ = 0;  // groups ended by ':'
  int digits_ = 0;  // hex digits of the group being read
  int colons_ = 0;  // ':' just read: 0, 1 or 2
  bool leading_colon_ = false;
  bool compressed_ = false;   // "::" seen
  Ipv4Field group_as_octet_;  // the group being read, read as a decimal octet
  bool octet_ok_ = false;     // ... and it is one so far
  bool in_tail_ = false;
  Ipv4Field tail_;
};

// One space-separated field of a TCP4 / TCP6 line.
class V1Field {
 public:
  enum Kind { Ipv4, Ipv6, Port };
  explicit V1Field(Kind kind) : kind_(kind) {}
  bool feed(char c) {
    switch (kind_) {
      case Ipv4: return ipv4_.feed(c);
      case Ipv6: return ipv6_.feed(c);
      case Port: return port_.feed(c);
    }
    return false;
  }
  bool complete() const {
    switch (kind_) {
      case Ipv4: return ipv4_.complete();
      case Ipv6: return ipv6_.complete();
      case Port: return !port_.empty();
    }
    return false;
  }
  size_t minToEnd() const {
    switch (kind_) {
      case Ipv4: return ipv4_.minToEnd();
      case Ipv6: return ipv6_.minToEnd();
      case Port: return port_.empty() ? 1 : 0;
    }
    return 0;
  }
  uint16_t port() const { return static_cast<uint16_t>(port_.value()); }

 private:
  Kind kind_;
  Ipv4Field ipv4_;
  Ipv6Field ipv6_;
  Decimal port_{65535};
};

// inet_pton() on a complete address field; fills `out` when it is not null.
bool convertAddress(const uint8_t* text, size_t len, bool v6, sockaddr_storage* out) {
  char buf[64];  // the field machines stop IPv6 at 45 bytes, IPv4 at 15
  if (len >= sizeof(buf)) return false;
  std::memcpy(buf, text, len);
  buf[len] = '\0';
  sockaddr_storage ss{};
  if (v6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    if (::inet_pton(AF_INET6, buf, &sin6->sin6_addr) != 1) return false;
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    if (::inet_pton(AF_INET, buf, &sin->sin_addr) != 1) return false;
  }
  if (out) *out = ss;
  return true;
}

void setPort(sockaddr_storage& ss, uint16_t port) {
  if (ss.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
}

// "PROXY UNKNOWN" read: optionally a space and anything up to the CRLF.
ProxyHeader parseV1Unknown(const uint8_t* data, size_t len, size_t pos) {
  for (; pos < len; ++pos) {
    const uint8_t c = data[pos];
    if (c == '\r') {
      if (pos + 2 > kMaxProxyV1Line) return invalid("v1 line too long");
      if (pos + 1 == len) return needMore();
      if (data[pos + 1] != '\n') return invalid("bad v1 line ending");
      return done(pos + 2);
    }
    if (c == '\n') return invalid("bad v1 line ending");
    if (c != ' ' && pos == sizeof("PROXY UNKNOWN") - 1) return invalid("bad v1 protocol");
    if (pos + 1 + 2 > kMaxProxyV1Line) return invalid("v1 line too long");
  }
  return needMore();
}

// "PROXY TCP4 " or "PROXY TCP6 " read: the four fields and the CRLF.
ProxyHeader parseV1Tcp(const uint8_t* data, size_t len, size_t pos, bool v6) {
  // Fewest bytes after each field, its separator and the CRLF included:
  // " :: 0 0\r\n" or " 0.0.0.0 0 0\r\n", " 0 0\r\n", " 0\r\n", "\r\n".
  const size_t rest[4] = {v6 ? 9u : 14u, 6, 4, 2};
  const V1Field::Kind address = v6 ? V1Field::Ipv6 : V1Field::Ipv4;
  sockaddr_storage source{};
  for (int f = 0; f < 4; ++f) {
    const bool is_address = f < 2;
    const char* bad_field = is_address ? "bad v1 address" : "bad v1 port";
    const char end = f < 3 ? ' ' : '\r';
    V1Field field(is_address ? address : V1Field::Port);
    const size_t start = pos;
    for (;; ++pos) {
      if (pos == len) return needMore();
      const char c = static_cast<char>(data[pos]);
      if (c == end) break;
      if (c == '\r' || c == '\n') return invalid("bad v1 line ending");
      if (!field.feed(c)) return invalid(bad_field);
      if (pos + 1 + field.minToEnd() + rest[f] > kMaxProxyV1Line) return invalid("v1 line too long");
    }
    if (!field.complete()) return invalid(bad_field);
    if (is_address && !convertAddress(data + start, pos - start, v6, f == 0 ? &source : nullptr))
      return invalid(bad_field);
    if (f == 2) setPort(source, field.port());
    ++pos;  // the separator, or the CR
  }
  if (pos == len) return needMore();
  if (data[pos] != '\n') return invalid("bad v1 line ending");
  ProxyHeader h = done(pos + 1);
  h.has_source = true;
  h.source = source;
  return h;
}

// "PROXY " read: the protocol keyword decides the rest.
ProxyHeader parseV1(const uint8_t* data, size_t len) {
  static constexpr const char* kProtocols[] = {"TCP4 ", "TCP6 ", "UNKNOWN"};
  const uint8_t* p = data + kV1SignatureLen;
  const size_t n = len - kV1SignatureLen;
  bool partial = false;
  for (int i = 0; i < 3; ++i) {
    const size_t keyword_len = std::strlen(kProtocols[i]);
    switch (matchLiteral(p, n, kProtocols[i], keyword_len)) {
      case Match::Mismatch: break;
      case Match::Partial: partial = true; break;
      case Match::Full:
        if (i == 2) return parseV1Unknown(data, len, kV1SignatureLen + keyword_len);
        return parseV1Tcp(data, len, kV1SignatureLen + keyword_len, i == 1);
    }
  }
  return partial ? needMore() : invalid("bad v1 protocol");
}

// Bytes of addresses a PROXY command's family byte needs; -1 when refused.
int v2AddressLength(uint8_t family) {
  switch (family) {
    case 0x00: return 0;   // unspecified
    case 0x11: return 12;  // TCP over IPv4
    case 0x21: return 36;  // TCP over IPv6
    case 0x31:
    case 0x32: return 216;  // UNIX stream, datagram
    default: return -1;
  }
}

const char* v2FamilyError(uint8_t family) {
  if (family == 0x12 || family == 0x22) return "v2 not TCP";
  return "bad v2 address family";
}

// The client address of a complete PROXY header over TCP.
void v2Source(const uint8_t* data, uint8_t family, sockaddr_storage& out) {
  const uint8_t* addresses = data + kV2FixedLen;
  if (family == 0x11) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out);
    sin->sin_family = AF_INET;
    std::memcpy(&sin->sin_addr, addresses, 4);
    std::memcpy(&sin->sin_port, addresses + 8, 2);  // already in network order
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out);
    sin6->sin6_family = AF_INET6;
    std::memcpy(&sin6->sin6_addr, addresses, 16);
    std::memcpy(&sin6->sin6_port, addresses + 32, 2);
  }
}

// The v2 signature read.
ProxyHeader parseV2(const uint8_t* data, size_t len) {
  if (len <= 12) return needMore();
  if ((data[12] >> 4) != 2) return invalid("bad v2 version");
  const uint8_t command = data[12] & 0x0F;
  if (command > 1) return invalid("bad v2 command");
  const bool local = command == 0;
  if (len <= 13) return needMore();
  const uint8_t family = data[13];
  const int address_len = local ? 0 : v2AddressLength(family);
  if (address_len < 0) return invalid(v2FamilyError(family));
  if (len <= 14) return needMore();
  // The high byte of the length alone can rule out every length.
  if ((size_t{data[14]} << 8) > kMaxProxyV2Length) return invalid("v2 header too long");
  if (len < kV2FixedLen) return needMore();
  const size_t body = (size_t{data[14]} << 8) | data[15];
  if (body > kMaxProxyV2Length) return invalid("v2 header too long");
  if (body < static_cast<size_t>(address_len)) return invalid("v2 header too short for its addresses");
  if (len < kV2FixedLen + body) return needMore();
  ProxyHeader h = done(kV2FixedLen + body);
  if (!local && (family == 0x11 || family == 0x21)) {
    h.has_source = true;
    v2Source(data, family, h.source);
  }
  return h;
}

}  // namespace

ProxyHeader parseProxyHeader(const uint8_t* data, size_t len) {
  if (len == 0) return needMore();
  if (data[0] == kV1Signature[0]) {
    switch (matchLiteral(data, len, kV1Signature, kV1SignatureLen)) {
      case Match::Mismatch: return invalid("not a PROXY header");
      case Match::Partial: return needMore();
      case Match::Full: return parseV1(data, len);
    }
  }
  if (data[0] == kV2Signature[0]) {
    switch (matchLiteral(data, len, kV2Signature, kV2SignatureLen)) {
      case Match::Mismatch: return invalid("not a PROXY header");
      case Match::Partial: return needMore();
      case Match::Full: return parseV2(data, len);
    }
  }
  return invalid("not a PROXY header");
}

}  // namespace concert::http
