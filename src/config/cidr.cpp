// Address and range parsing over inet_pton/inet_ntop; see cidr.h.
#include "config/cidr.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace concert::config {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view s) {
  return std::string("\"").append(s).append("\"");
}

constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool isMapped(const uint8_t* v6) {
  return std::memcmp(v6, kMappedPrefix, sizeof kMappedPrefix) == 0;
}

// Clears every bit past the first `bits`; returns whether any was set.
bool clearHostBits(std::array<uint8_t, 16>& bytes, int bits) {
  bool had = false;
  for (int i = 0; i < 16; ++i) {
    const int keep = bits - 8 * i;
    const uint8_t mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
    if (bytes[static_cast<size_t>(i)] & ~mask) had = true;
    bytes[static_cast<size_t>(i)] &= mask;
  }
  return had;
}

}  // namespace

std::optional<IpAddress> parseIpAddress(std::string_view text) {
  char buf[INET6_ADDRSTRLEN];
  if (text.empty() || text.size() >= sizeof buf) return std::nullopt;
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  IpAddress out;
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf, out.bytes.data()) != 1) return std::nullopt;
    return out;
  }
  uint8_t v6[16];
  if (inet_pton(AF_INET6, buf, v6) != 1) return std::nullopt;
  if (isMapped(v6)) {
    std::memcpy(out.bytes.data(), v6 + 12, 4);
    return out;
  }
  out.v6 = true;
  std::memcpy(out.bytes.data(), v6, 16);
  return out;
}

std::string ipAddressText(const IpAddress& address) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(address.v6 ? AF_INET6 : AF_INET, address.bytes.data(), buf, sizeof buf);
  return buf;
}

bool Cidr::contains(const IpAddress& address) const {
  if (address.v6 != network.v6) return false;
  std::array<uint8_t, 16> masked = address.bytes;
  clearHostBits(masked, bits);
  return masked == network.bytes;
}

bool cidrListContains(const CidrList& list, const IpAddress& address) {
  for (const Cidr& cidr : list)
    if (cidr.contains(address)) return true;
  return false;
}

std::string cidrText(const Cidr& cidr) {
  std::string out = ipAddressText(cidr.network);
  if (cidr.bits != (cidr.network.v6 ? 128 : 32)) out.append("/").append(std::to_string(cidr.bits));
  return out;
}

std::string cidrListText(const CidrList& list) {
  std::string out;
  for (const Cidr& cidr : list) {
    if (!out.empty()) out += ',';
    out += cidrText(cidr);
  }
  return out;
}

CidrListParse parseCidrList(std::string_view text) {
  CidrListParse out;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    if (!entry.empty()) {
      const size_t slash = entry.find('/');
      const std::string_view host = entry.substr(0, slash);
      // Remember whether the text was written as IPv6 before a mapped
      // address turns into IPv4: its prefix length counts 128 bits.
      const bool written_v6 = host.find(':') != std::string_view::npos;
      std::optional<IpAddress> address = parseIpAddress(host);
      if (!address) {
        out.errors.push_back(quoted(entry) + " is not an IP address or CIDR range (e.g. 10.0.0.0/8, 2001:db8::/32)");
      } else {
        const int width = written_v6 ? 128 : 32;
        int bits = address->v6 ? 128 : 32;
        bool ok = true;
        if (slash != std::string_view::npos) {
          const std::string_view len = entry.substr(slash + 1);
          int n = -1;
          auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), n);
          if (len.empty() || len.size() > 3 || ec != std::errc() || end != len.data() + len.size() || n < 0 ||
              n > width) {
            out.errors.push_back(quoted(entry) + ": prefix length must be 0 to " + std::to_string(width));
            ok = false;
          } else if (written_v6 && !address->v6) {
            if (n < 96) {
              out.errors.push_back(quoted(entry) + ": an IPv4-mapped range needs a prefix length of 96 or more");
              ok = false;
            }
            bits = n - 96;
          } else {
            bits = n;
          }
        }
        if (ok) {
          Cidr cidr{*address, bits};
          if (clearHostBits(cidr.network.bytes, bits))
            out.warnings.push_back(quoted(entry) + " has host bits set; using " + cidrText(cidr));
          out.cidrs.push_back(cidr);
        }
      }
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace concert::config
