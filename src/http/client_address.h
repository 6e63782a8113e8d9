// Who sent a request when Concert stands behind other proxies
// (-trusted-proxies), and the forwarding headers Concert sends on to the
// origin. Pure functions over a parsed head.
//
// The chain. A proxy appends the address it got a request from to
// X-Forwarded-For (or adds a `Forwarded: for=` element, RFC 7239), so the
// list reads client first, nearest proxy last; only the entries added by
// proxies Concert trusts can be believed, anything to their left may have
// been typed by the client. The walk therefore starts at the TCP peer and
// goes right to left while the address in hand is trusted:
//   - the peer is not trusted: the peer is the client, headers ignored;
//   - the first entry that is not trusted is the client;
//   - an entry that is not an address (garbage, "unknown", an obfuscated
//     Forwarded node) ends the walk: the client is the last trusted address
//     reached, the hop that reported the garbage;
//   - every entry trusted: the left-most one.
// X-Forwarded-For wins when present; `Forwarded: for=` is read only without
// it. Several header lines of one name are one list, in order (RFC 9110,
// section 5.3).
//
// Scheme and host. From a trusted peer X-Forwarded-Proto and -Host (else the
// Forwarded proto= and host= parameters) are taken as the client's, the
// left-most value when a list came: that is what the first proxy saw. From
// any other peer they are Concert's own view: https only on a TLS
// connection, the Host header.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/cidr.h"
#include "http/request.h"

namespace concert::http {

// One X-Forwarded-For entry or Forwarded node (already unquoted) as an
// address: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:443". nullopt for anything else ("unknown", "_hidden", junk).
std::optional<config::IpAddress> parseNode(std::string_view node);

// The forwarding headers of a request as its sender states them.
struct IncomingForwarding {
  std::vector<std::string> hops;     // client first: XFF entries (trimmed) or Forwarded for= nodes
  bool from_forwarded = false;       // hops came from Forwarded (no X-Forwarded-For)
  std::optional<std::string> proto;  // X-Forwarded-Proto, else Forwarded proto=
  std::optional<std::string> host;   // X-Forwarded-Host, else Forwarded host=
};
IncomingForwarding readForwarding(const Headers& headers);

// The right-to-left walk described above; `peer` is the TCP peer.
config::IpAddress walkChain(const std::vector<std::string>& hops, const config::IpAddress& peer,
                            const config::CidrList& trusted);

struct ClientIdentity {
  std::string ip;                            // the client's address as text
  std::optional<config::IpAddress> address;  // nullopt only when the peer is not an IP address
  bool peer_trusted = false;
  bool https = false;
};
// Without trusted proxies: the peer, https only on TLS, no header read.
ClientIdentity identifyClient(const Request& request, const config::CidrList& trusted);

// The client as one party for the per-client limits, strikes and bans
// (admission/abuse.h): an IPv4 address (as its IPv4-mapped IPv6 form), or the
// /64 of an IPv6 address (the low 64 bits zero), since one IPv6 host is
// commonly handed a whole /64 and can pick any address in it.
std::array<uint8_t, 16> clientKey(const config::IpAddress& address);

// A client key as text, for operators: the IPv4 address, or the IPv6
// network as "2001:db8:1:2::/64".
std::string clientKeyText(const uint8_t key[16]);

// A socket address as text: dotted quad (also for an IPv4-mapped IPv6
// address) or RFC 5952 IPv6; "" for other families.
std::string socketAddressText(const sockaddr* address);

// What Concert sends on to the origin, every value ready for the head:
//   X-Forwarded-For   the incoming chain (trusted peer only), then the peer
//   X-Forwarded-Proto the trusted proxy's, else https on TLS, else http
//   X-Forwarded-Host  the trusted proxy's, else the Host header (absent
//                     when neither: an HTTP/1.0 request without Host)
//   Forwarded         the same facts in RFC 7239 form: one for= element per
//                     hop and one for the peer, proto= and host= on the first.
// request.peer_trusted decides whether the incoming headers count.
struct OutgoingForwarding {
  std::string x_forwarded_for;
  std::string x_forwarded_proto;
  std::optional<std::string> x_forwarded_host;
  std::string forwarded;
};
OutgoingForwarding outgoingForwarding(const Request& request);

}  // namespace concert::http
