// PROXY protocol header (HAProxy's doc/proxy-protocol.txt, versions 1 and 2):
// the few bytes a trusted load balancer sends before the HTTP request to name
// the client it relays. parseProxyHeader() looks at the start of a
// connection's bytes and says whether they hold a complete header, a valid
// prefix of one, or something that can never become one.
//
// Rules (strict: anything the spec does not allow is Invalid):
//   * version 1 is one line of at most 107 bytes including its CRLF:
//       "PROXY TCP4 <src> <dst> <sport> <dport>\r\n"   (IPv4 addresses)
//       "PROXY TCP6 <src> <dst> <sport> <dport>\r\n"   (IPv6 addresses)
//       "PROXY UNKNOWN\r\n" or "PROXY UNKNOWN <anything but CR, LF>\r\n"
//     Keywords are case-sensitive and separated by exactly one space.
//     Addresses are what inet_pton() accepts for the line's family (IPv4:
//     four decimal octets, no leading zeros; IPv6: hex groups, one "::" at
//     most, an optional dotted IPv4 tail). Ports are decimal 0..65535 with
//     no sign and no leading zeros ("0" itself is fine). A CR or LF that is
//     not part of the final CRLF is Invalid. UNKNOWN keeps the real peer.
//   * version 2 is the 12-byte signature "\r\n\r\n\0\r\nQUIT\n", a
//     version/command byte (version 2; command LOCAL or PROXY), a
//     family/transport byte, a big-endian length, then that many bytes:
//     the addresses and TLVs (skipped unread). The length may not exceed
//     kMaxProxyV2Length.
//       - LOCAL (balancer health checks): the family byte and everything
//         after the length are ignored, as the spec says; the real peer is
//         kept.
//       - PROXY: the family byte must be one of 0x11 (TCP over IPv4, 12
//         address bytes), 0x21 (TCP over IPv6, 36), 0x00 (unspecified, the
//         real peer is kept), 0x31 / 0x32 (UNIX stream / datagram, 216; the
//         real peer is kept). UDP (0x12, 0x22) and any other value are
//         Invalid, as is a length shorter than the family's addresses.
//   * the verdict is exact and early: NeedMore exactly while the bytes can
//     still be completed into a valid header (within the length bounds), and
//     Invalid at the first byte that rules that out: "GET / HTTP/1.1" is
//     Invalid after one byte, "PROXY TCP4 1.2.3.256" at the '6'.
//
// The function keeps no state: call it again on the whole buffer when more
// bytes arrive. It allocates nothing and throws nothing.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

namespace concert::http {

// Longest version 1 line, CRLF included.
constexpr size_t kMaxProxyV1Line = 107;
// Longest version 2 address and TLV block accepted (the spec allows 65535).
constexpr size_t kMaxProxyV2Length = 2048;
// Longest header of either version.
constexpr size_t kMaxProxyHeader = 16 + kMaxProxyV2Length;

enum class ProxyHeaderStatus { NeedMore, Invalid, Done };

struct ProxyHeader {
  ProxyHeaderStatus status = ProxyHeaderStatus::NeedMore;
  size_t length = 0;            // Done: bytes the header took (the request starts after them)
  bool has_source = false;      // Done: false for v1 UNKNOWN, v2 LOCAL, UNSPEC and UNIX: keep the real peer
  sockaddr_storage source{};    // Done && has_source: the client's address and port (AF_INET or AF_INET6)
  const char* error = nullptr;  // Invalid: a short static reason for a log line
};

// Parses the first `len` bytes a connection received.
ProxyHeader parseProxyHeader(const uint8_t* data, size_t len);

}  // namespace concert::http
