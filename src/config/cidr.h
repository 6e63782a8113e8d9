// IP addresses and CIDR ranges as -trusted-proxies and -bypass-cidrs hold
// them. Pure values: parsed once by the loader, matched per request by the
// data path (http/client_address.h). They live beside the config because a
// setting's value type has to be parsed where the setting is.
//
// Families: an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address
// it carries, both as an address and as a range (::ffff:10.0.0.0/104 is
// 10.0.0.0/8), so a dual-stack listener's peers match IPv4 ranges. Otherwise
// an IPv4 range never matches an IPv6 address and the reverse.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concert::config {

struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4: the first 4 bytes, the rest zero

  bool operator==(const IpAddress&) const = default;
};

// "192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1" (mapped: becomes IPv4);
// nothing else (no brackets, ports, zones or shorthand IPv4 forms).
std::optional<IpAddress> parseIpAddress(std::string_view text);

// Canonical text: dotted quad, or RFC 5952 IPv6 ("2001:db8::1").
std::string ipAddressText(const IpAddress& address);

struct Cidr {
  IpAddress network;  // host bits cleared
  int bits = 0;       // 0..32 (IPv4) or 0..128 (IPv6)

  bool contains(const IpAddress& address) const;
  bool operator==(const Cidr&) const = default;
};
using CidrList = std::vector<Cidr>;

bool cidrListContains(const CidrList& list, const IpAddress& address);

// "10.0.0.0/8" as an operator writes it (a host range without "/32").
std::string cidrText(const Cidr& cidr);
std::string cidrListText(const CidrList& list);

// A comma separated list of ranges: "10.0.0.0/8, 2001:db8::/32, 127.0.0.1".
// Entries are trimmed, empty ones skipped; a bare address is a one-address
// range. An entry that is not an address or has a bad prefix length is an
// error naming it; one with host bits set is kept with them cleared and a
// warning (nginx's "low address bits are meaningless"). Duplicates are kept.
struct CidrListParse {
  CidrList cidrs;
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
};
CidrListParse parseCidrList(std::string_view text);

}  // namespace concert::config
